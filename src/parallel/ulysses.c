#include "parallel/ulysses.h"

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

struct mm_ulysses {
    mm_comm *comm;
    mm_sp_split split;
    int rank, head_dim;
    int64_t n_me, hd; /* rows of this rank; heads_per_rank · head_dim */
    mm_dtype dtype;
    /* a: packed sends [3][N][n_me][hd], then (after attention) the returning
     *    rows [N][n_me][hd]; b: q, k, v of all rows [3][S][hd]; o: [S][hd]. */
    mm_tensor a, b, o;
    mm_sp_msg head_sends[3 * MM_SP_MAX_RANKS], head_recvs[3 * MM_SP_MAX_RANKS];
    mm_sp_msg row_sends[MM_SP_MAX_RANKS], row_recvs[MM_SP_MAX_RANKS];
    int n_head_msgs, n_row_msgs;
    bool exchange; /* false: one rank, the hook is the SDPA on the caller's views */
    mm_ulysses_sdpa_fn sdpa;
    void *sdpa_user;
    void (*mark)(void *user, const char *stage);
    void *mark_user;
};

int mm_ulysses_create(mm_ulysses **out, mm_comm *comm, const mm_sp_split *split, int head_dim, mm_dtype dtype,
                      bool exchange_self, mm_error *err)
{
    *out = NULL;
    if (mm_comm_size(comm) != split->ranks)
        return mm_fail(err, "Ulysses: a split over %d ranks on a group of %d", split->ranks, mm_comm_size(comm));
    mm_ulysses *u = calloc(1, sizeof *u);
    if (!u)
        return mm_fail(err, "out of memory");
    u->comm = comm;
    u->split = *split;
    u->rank = mm_comm_rank(comm);
    u->head_dim = head_dim;
    u->dtype = dtype;
    u->n_me = mm_sp_rows_of(split, u->rank);
    u->hd = (int64_t)split->heads_per_rank * head_dim;
    const mm_device dev = mm_comm_device(comm);
    const int64_t N = split->ranks, S = split->rows;
    u->exchange = N > 1 || exchange_self;
    if (!u->exchange) {
        *out = u;
        return 0;
    }
    if (mm_tensor_alloc(&u->a, dev, dtype, 4, MM_SHAPE(3, N, u->n_me, u->hd), err) != 0 ||
        mm_tensor_alloc(&u->b, dev, dtype, 3, MM_SHAPE(3, S, u->hd), err) != 0 ||
        mm_tensor_alloc(&u->o, dev, dtype, 2, MM_SHAPE(S, u->hd), err) != 0) {
        const int rank = u->rank;
        mm_ulysses_free(u);
        return mm_error_prefix(err, "Ulysses buffers for rank %d", rank);
    }
    u->n_head_msgs = mm_sp_plan_heads(split, u->rank, head_dim, u->head_sends, u->head_recvs);
    u->n_row_msgs = mm_sp_plan_rows(split, u->rank, head_dim, u->row_sends, u->row_recvs);
    *out = u;
    return 0;
}

void mm_ulysses_free(mm_ulysses *u)
{
    if (!u)
        return;
    mm_tensor_free(&u->a);
    mm_tensor_free(&u->b);
    mm_tensor_free(&u->o);
    free(u);
}

size_t mm_ulysses_bytes(const mm_ulysses *u)
{
    if (!u->exchange)
        return 0;
    return mm_tensor_nbytes(&u->a) + mm_tensor_nbytes(&u->b) + mm_tensor_nbytes(&u->o);
}

void mm_ulysses_set_sdpa(mm_ulysses *u, mm_ulysses_sdpa_fn fn, void *user)
{
    u->sdpa = fn;
    u->sdpa_user = user;
}

void mm_ulysses_set_profile(mm_ulysses *u, void (*mark)(void *user, const char *stage), void *user)
{
    u->mark = mark;
    u->mark_user = user;
}

static void mark(const mm_ulysses *u, const char *stage)
{
    if (u->mark)
        u->mark(u->mark_user, stage);
}

static int sdpa(mm_ulysses *u, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                const mm_tensor *v)
{
    if (u->sdpa)
        return u->sdpa(u->sdpa_user, ctx, out, q, k, v);
    return mm_attention(ctx, out, q, k, v, NULL);
}

/* [n, H, D] → [N, n, H/N, D]: the head groups as the leading dim. */
static mm_tensor by_group(const mm_tensor *t, int ranks, int heads_per_rank)
{
    mm_tensor g = mm_tensor_unflatten(t, 1, 2, MM_SHAPE(ranks, heads_per_rank));
    return mm_tensor_permute(&g, (const int[]){1, 0, 2, 3});
}

int mm_ulysses_attention(void *user, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                         const mm_tensor *v)
{
    mm_ulysses *u = user;
    const int N = u->split.ranks, hl = u->split.heads_per_rank;
    const int64_t D = u->head_dim;
    if (q->ndim != 3 || q->shape[0] != u->n_me || q->shape[1] != u->split.heads || q->shape[2] != D ||
        q->dtype != u->dtype)
        return mm_ctx_fail(ctx, "Ulysses attention on rank %d: q must be %s [%lld, %d, %lld]", u->rank,
                           mm_dtype_name(u->dtype), (long long)u->n_me, u->split.heads, (long long)D);
    if (!u->exchange) {
        mark(u, "Ulysses: SDPA, all heads (1 rank: no exchange)");
        return sdpa(u, ctx, out, q, k, v);
    }
    mark(u, "Ulysses pack q/k/v");
    const mm_tensor *qkv[3] = {q, k, v};
    for (int w = 0; w < 3; w++) {
        mm_tensor dst = mm_tensor_select(&u->a, 0, w); /* [N, n_me, hd] */
        dst = mm_tensor_unflatten(&dst, 2, 2, MM_SHAPE(hl, D));
        mm_tensor src = by_group(qkv[w], N, hl);
        mm_copy(ctx, &dst, &src);
    }
    mm_error err = {{0}};
    mark(u, "Ulysses all-to-all (heads)");
    /* Exchange even when the context has failed: the peers wait for us. */
    if (mm_comm_exchange(u->comm, ctx, u->a.data, u->head_sends, u->n_head_msgs, u->b.data, u->head_recvs,
                         u->n_head_msgs, mm_dtype_nbytes(u->dtype, 1), &err) != 0)
        return mm_ctx_fail(ctx, "Ulysses exchange (heads) on rank %d: %s", u->rank, err.msg);
    mm_tensor all[3];
    for (int w = 0; w < 3; w++) {
        all[w] = mm_tensor_select(&u->b, 0, w);
        all[w] = mm_tensor_unflatten(&all[w], 1, 2, MM_SHAPE(hl, D));
    }
    mm_tensor o = mm_tensor_unflatten(&u->o, 1, 2, MM_SHAPE(hl, D)); /* [S, hl, D] */
    mark(u, "Ulysses SDPA, all rows, H/N heads");
    sdpa(u, ctx, &o, &all[0], &all[1], &all[2]);
    mark(u, "Ulysses all-to-all (rows)");
    if (mm_comm_exchange(u->comm, ctx, u->o.data, u->row_sends, u->n_row_msgs, u->a.data, u->row_recvs,
                         u->n_row_msgs, mm_dtype_nbytes(u->dtype, 1), &err) != 0)
        return mm_ctx_fail(ctx, "Ulysses exchange (rows) on rank %d: %s", u->rank, err.msg);
    mark(u, "Ulysses unpack");
    /* a now holds [N][n_me][hd]: group p's heads for our rows. */
    mm_tensor back = mm_tensor_wrap(u->a.data, u->a.device, u->dtype, 4, MM_SHAPE(N, u->n_me, hl, D));
    mm_tensor dst = by_group(out, N, hl);
    return mm_copy(ctx, &dst, &back);
}
