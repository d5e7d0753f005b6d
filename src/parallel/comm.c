#include "parallel/comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gpu.h"
#include "parallel/nccl_lib.h"
#include "parallel/transfer.h"

struct mm_comm {
    mm_world *world;
    int rank;
    mm_device device;
    mm_nccl_comm_t nccl;
};

/* What a host-world rank posts for its peers during one exchange. */
typedef struct host_post {
    const char *send;
    const mm_sp_msg *sends;
    int n_sends;
    size_t elem_bytes;
    mm_device device;
} host_post;

struct mm_world {
    mm_world_kind kind;
    int n;
    bool multi_process; /* NCCL group spanning processes: only comms[0] exists here */
    mm_comm comms[MM_SP_MAX_RANKS];
    const mm_nccl *nc;
    atomic_bool aborted;
    /* host world */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned generation;
    char why[256];
    host_post posts[MM_SP_MAX_RANKS];
};

static int world_alloc(mm_world **out, mm_world_kind kind, int n, mm_error *err)
{
    if (n < 1 || n > MM_SP_MAX_RANKS)
        return mm_fail(err, "a world of %d ranks: 1 to %d are accepted", n, MM_SP_MAX_RANKS);
    mm_world *w = calloc(1, sizeof *w);
    if (!w)
        return mm_fail(err, "out of memory");
    w->kind = kind;
    w->n = n;
    atomic_init(&w->aborted, false);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    *out = w;
    return 0;
}

int mm_world_create(mm_world **out, mm_world_kind kind, int n, const mm_device *devices, mm_error *err)
{
    *out = NULL;
    mm_world *w;
    if (world_alloc(&w, kind, n, err) != 0)
        return -1;
    for (int r = 0; r < n; r++)
        w->comms[r] = (mm_comm){.world = w, .rank = r, .device = devices[r]};
    if (kind == MM_WORLD_NCCL) {
        int devs[MM_SP_MAX_RANKS];
        for (int r = 0; r < n; r++) {
            if (devices[r].kind != MM_DEVICE_CUDA) {
                mm_world_destroy(w);
                return mm_fail(err, "an NCCL world needs CUDA devices (rank %d is on the CPU)", r);
            }
            devs[r] = devices[r].index;
            for (int q = 0; q < r; q++)
                if (devs[q] == devs[r]) {
                    mm_world_destroy(w);
                    return mm_fail(err, "an NCCL world needs distinct GPUs (ranks %d and %d are both cuda:%d)", q, r,
                                   devs[r]);
                }
        }
        mm_nccl_comm_t comms[MM_SP_MAX_RANKS];
        if (mm_nccl_load(&w->nc, err) != 0 ||
            mm_nccl_check(w->nc, w->nc->comm_init_all(comms, n, devs), err, "ncclCommInitAll") != 0) {
            mm_world_destroy(w);
            return mm_error_prefix(err, "starting NCCL over %d GPUs", n);
        }
        for (int r = 0; r < n; r++)
            w->comms[r].nccl = comms[r];
    }
    *out = w;
    return 0;
}

int mm_world_nccl_new_id(char id_hex[257], mm_error *err)
{
    const mm_nccl *nc;
    mm_nccl_unique_id id;
    if (mm_nccl_load(&nc, err) != 0 || mm_nccl_check(nc, nc->get_unique_id(&id), err, "ncclGetUniqueId") != 0)
        return -1;
    for (int i = 0; i < 128; i++)
        snprintf(id_hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    return 0;
}

int mm_world_join_nccl(mm_world **out, const char *id_hex, int n, int rank, int device, mm_error *err)
{
    *out = NULL;
    mm_nccl_unique_id id;
    if (!id_hex || strlen(id_hex) != 256)
        return mm_fail(err, "NCCL group id: 256 hex digits expected");
    for (int i = 0; i < 128; i++) {
        unsigned v;
        if (sscanf(id_hex + 2 * i, "%2x", &v) != 1)
            return mm_fail(err, "NCCL group id: not hex at character %d", 2 * i);
        id.internal[i] = (char)v;
    }
    if (rank < 0 || rank >= n)
        return mm_fail(err, "NCCL group: rank %d of %d", rank, n);
    mm_world *w;
    if (world_alloc(&w, MM_WORLD_NCCL, n, err) != 0)
        return -1;
    w->multi_process = true;
    w->comms[0] = (mm_comm){.world = w, .rank = rank, .device = mm_cuda(device)};
    /* ncclCommInitRank works on the calling thread's current device. */
    if (mm_gpu_make_current(device, err) != 0 || mm_nccl_load(&w->nc, err) != 0 ||
        mm_nccl_check(w->nc, w->nc->comm_init_rank(&w->comms[0].nccl, n, id, rank), err, "ncclCommInitRank") != 0) {
        mm_world_destroy(w);
        return mm_error_prefix(err, "joining an NCCL group of %d as rank %d", n, rank);
    }
    *out = w;
    return 0;
}

void mm_world_destroy(mm_world *w)
{
    if (!w)
        return;
    if (w->nc)
        for (int r = 0; r < w->n; r++)
            if (w->comms[r].nccl) {
                if (atomic_load(&w->aborted))
                    w->nc->comm_abort(w->comms[r].nccl);
                else
                    w->nc->comm_destroy(w->comms[r].nccl);
            }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

int mm_world_size(const mm_world *w) { return w->n; }
mm_world_kind mm_world_kind_of(const mm_world *w) { return w->kind; }

mm_comm *mm_world_comm(mm_world *w, int rank)
{
    if (w->multi_process)
        return w->comms[0].rank == rank ? &w->comms[0] : NULL;
    return rank >= 0 && rank < w->n ? &w->comms[rank] : NULL;
}

void mm_world_describe(const mm_world *w, char *buf, size_t n)
{
    if (w->kind == MM_WORLD_NCCL) {
        char nc[600];
        mm_nccl_describe(nc, sizeof nc);
        snprintf(buf, n, "nccl, %d ranks%s, %s", w->n, w->multi_process ? " (one process per GPU)" : "", nc);
    } else {
        snprintf(buf, n, "host, %d ranks", w->n);
    }
}

int mm_comm_rank(const mm_comm *c) { return c->rank; }
int mm_comm_size(const mm_comm *c) { return c->world->n; }
mm_device mm_comm_device(const mm_comm *c) { return c->device; }

bool mm_world_aborted(const mm_world *w) { return atomic_load(&((mm_world *)w)->aborted); }

void mm_world_abort(mm_world *w, const char *why)
{
    pthread_mutex_lock(&w->mu);
    bool first = !atomic_exchange(&w->aborted, true);
    if (first)
        snprintf(w->why, sizeof w->why, "%s", why ? why : "aborted");
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (first && w->nc)
        for (int r = 0; r < w->n; r++)
            if (w->comms[r].nccl)
                w->nc->comm_abort(w->comms[r].nccl), w->comms[r].nccl = NULL;
}

/* A barrier of the host world. An abort releases the ranks that are waiting
 * and refuses the ones that come later (they must not complete a count the
 * released ranks left behind); whether a rank passed is decided by the
 * generation alone, so every rank of a completed barrier passes, even when an
 * abort arrives as it completes. With `drain`, the abort is ignored: the
 * exchange uses it to wait until no rank reads another's buffers any more. */
static int host_rendezvous(mm_world *w, bool drain, mm_error *err)
{
    pthread_mutex_lock(&w->mu);
    if (!drain && atomic_load(&w->aborted)) {
        pthread_mutex_unlock(&w->mu);
        return mm_fail(err, "the rank group was aborted: %s", w->why);
    }
    unsigned gen = w->generation;
    if (++w->arrived == w->n) {
        w->arrived = 0;
        w->generation++;
        pthread_cond_broadcast(&w->cv);
    } else {
        while (gen == w->generation && (drain || !atomic_load(&w->aborted)))
            pthread_cond_wait(&w->cv, &w->mu);
    }
    int rc = gen != w->generation ? 0 : mm_fail(err, "the rank group was aborted: %s", w->why);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static int host_barrier(mm_world *w, mm_error *err) { return host_rendezvous(w, false, err); }

int mm_comm_barrier(mm_comm *c, mm_error *err)
{
    if (c->world->kind == MM_WORLD_HOST)
        return host_barrier(c->world, err);
    if (atomic_load(&c->world->aborted))
        return mm_fail(err, "the rank group was aborted");
    return 0;
}

static int host_exchange(mm_comm *c, mm_ctx *ctx, const void *send, const mm_sp_msg *sends, int n_sends,
                         void *recv, const mm_sp_msg *recvs, int n_recvs, size_t eb, mm_error *err)
{
    mm_world *w = c->world;
    /* Our packed sends must be complete before a peer reads them. */
    if (mm_ctx_sync(ctx, err) != 0)
        return -1;
    w->posts[c->rank] = (host_post){send, sends, n_sends, eb, c->device};
    if (host_barrier(w, err) != 0)
        return -1;
    int rc = 0;
    int seen[MM_SP_MAX_RANKS] = {0};
    for (int k = 0; k < n_recvs && rc == 0; k++) {
        const int p = recvs[k].peer;
        if (p < 0 || p >= w->n) {
            rc = mm_fail(err, "exchange: rank %d receives from rank %d of %d", c->rank, p, w->n);
            break;
        }
        const host_post *hp = &w->posts[p];
        /* The seen[p]-th message p addressed to us. */
        int j = 0, idx = -1;
        for (int m = 0; m < hp->n_sends; m++)
            if (hp->sends[m].peer == c->rank && j++ == seen[p]) {
                idx = m;
                break;
            }
        seen[p]++;
        if (idx < 0 || hp->sends[idx].count != recvs[k].count || hp->elem_bytes != eb) {
            rc = mm_fail(err, "exchange: rank %d expects %lld elements from rank %d, which sends %lld", c->rank,
                         (long long)recvs[k].count, p, idx < 0 ? -1LL : (long long)hp->sends[idx].count);
            break;
        }
        rc = mm_transfer_bytes(c->device, (char *)recv + (size_t)recvs[k].offset * eb, hp->device,
                               hp->send + (size_t)hp->sends[idx].offset * eb, (size_t)recvs[k].count * eb,
                               MM_XFER_AUTO, err);
    }
    if (rc != 0)
        mm_world_abort(w, err->msg);
    /* Every rank passed the barrier above, so every rank comes here; none
     * returns (and lets its caller free or reuse its send buffer) before all
     * have finished reading — also when one of them failed. */
    mm_error drain_err = {{0}};
    host_rendezvous(w, true, &drain_err);
    if (rc != 0)
        return -1;
    if (atomic_load(&w->aborted))
        return mm_fail(err, "the rank group was aborted: %s", w->why);
    return 0;
}

static int nccl_exchange(mm_comm *c, mm_ctx *ctx, const void *send, const mm_sp_msg *sends, int n_sends,
                         void *recv, const mm_sp_msg *recvs, int n_recvs, size_t eb, mm_error *err)
{
    const mm_nccl *nc = c->world->nc;
    if (!c->nccl)
        return mm_fail(err, "exchange on an aborted NCCL group");
    void *stream = mm_ctx_stream(ctx);
    int rc = nc->group_start();
    if (mm_nccl_check(nc, rc, err, "ncclGroupStart") != 0)
        return -1;
    for (int k = 0; k < n_sends && rc == MM_NCCL_SUCCESS; k++)
        rc = nc->send((const char *)send + (size_t)sends[k].offset * eb, (size_t)sends[k].count * eb,
                      MM_NCCL_INT8, sends[k].peer, c->nccl, stream);
    for (int k = 0; k < n_recvs && rc == MM_NCCL_SUCCESS; k++)
        rc = nc->recv((char *)recv + (size_t)recvs[k].offset * eb, (size_t)recvs[k].count * eb, MM_NCCL_INT8,
                      recvs[k].peer, c->nccl, stream);
    int end = nc->group_end();
    if (mm_nccl_check(nc, rc, err, "ncclSend/ncclRecv") != 0)
        return -1;
    return mm_nccl_check(nc, end, err, "ncclGroupEnd");
}

int mm_comm_exchange(mm_comm *c, mm_ctx *ctx, const void *send, const mm_sp_msg *sends, int n_sends, void *recv,
                     const mm_sp_msg *recvs, int n_recvs, size_t elem_bytes, mm_error *err)
{
    if (atomic_load(&c->world->aborted))
        return mm_fail(err, "the rank group was aborted: %s", c->world->why);
    if (!mm_device_eq(mm_ctx_device(ctx), c->device))
        return mm_fail(err, "exchange: rank %d works on another device than the context passed", c->rank);
    if (c->world->kind == MM_WORLD_HOST)
        return host_exchange(c, ctx, send, sends, n_sends, recv, recvs, n_recvs, elem_bytes, err);
    return nccl_exchange(c, ctx, send, sends, n_sends, recv, recvs, n_recvs, elem_bytes, err);
}
