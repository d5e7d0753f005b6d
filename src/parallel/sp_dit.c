#include "parallel/sp_dit.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/device.h"
#include "parallel/partition.h"
#include "parallel/ulysses.h"

typedef struct rank_state rank_state;
typedef int (*rank_job)(rank_state *rs, void *arg);

struct rank_state {
    mm_sp_dit *sp;
    int rank;
    mm_ctx *ctx;
    bool own_ctx;
    mm_dit *dit;
    mm_comm *comm;
    pthread_t thread;
    bool has_thread;
    int rc; /* of the last job: 0, -1, or 1 while running */
    mm_error err;
};

struct mm_sp_dit {
    int n;
    rank_state ranks[MM_SP_MAX_RANKS];
    mm_world *world;
    const char *path;
    const mm_dit_config_overrides *ov;
    /* job dispatch to the rank threads */
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    unsigned generation;
    int running;
    bool quit;
    rank_job job;
    void *job_arg;
    double abort_seconds; /* mm_sp_options.abort_seconds, its default applied */
    bool exchange_self;
    bool broken; /* a failure left ranks out of step: the group must be rebuilt */
    char broken_why[300];
};

/* The most values one all-reduce of the step cache carries. */
#define SP_REDUCE_MAX 8

/* One rank's share of a request. */
typedef struct rank_req {
    mm_sp_local local;
    mm_ulysses *u;
    mm_dit_request *dreq;
    mm_comm *comm;
    int n_ranks;
    mm_tensor reduce;     /* F64 [(N + 1)·SP_REDUCE_MAX] on the rank's device: its values, then every rank's */
    double *reduce_host;  /* [N·SP_REDUCE_MAX] */
    mm_tensor vin, ain, vout, aout; /* f32 on the rank's device: its video/audio rows */
    float *row_t;                   /* host [rows of the rank] */
    float *h_vin, *h_ain, *h_vout, *h_aout;
} rank_req;

struct mm_sp_request {
    mm_sp_dit *sp;
    mm_sp_split split;
    int64_t video_rows, audio_rows;
    int vw, aw;
    rank_req rr[MM_SP_MAX_RANKS];
    /* host copies of the whole streams, in and out */
    float *h_video, *h_audio, *h_vv, *h_va;
    const float *row_t; /* during a forward */
    bool fast;          /* for job_set_fast */
};

/* ------------------------------------------------------------ rank threads */

static void *rank_main(void *arg)
{
    rank_state *rs = arg;
    mm_sp_dit *sp = rs->sp;
    unsigned seen = 0;
    pthread_mutex_lock(&sp->mu);
    for (;;) {
        while (sp->generation == seen && !sp->quit)
            pthread_cond_wait(&sp->cv_job, &sp->mu);
        if (sp->quit)
            break;
        seen = sp->generation;
        rank_job job = sp->job;
        void *job_arg = sp->job_arg;
        pthread_mutex_unlock(&sp->mu);
        memset(&rs->err, 0, sizeof rs->err);
        int rc = job(rs, job_arg);
        pthread_mutex_lock(&sp->mu);
        rs->rc = rc;
        sp->running--;
        pthread_cond_broadcast(&sp->cv_done);
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

/* Runs job on every rank (rank 0 on this thread) and waits for all. When a
 * rank fails while others are still inside a job that exchanges data, they
 * wait for a peer that will not come: after a grace period the group is
 * aborted (pending exchanges end with an error) and marked broken. */
static int run_all(mm_sp_dit *sp, rank_job job, void *arg, bool exchanges, mm_error *err)
{
    if (sp->broken)
        return mm_fail(err, "the GPU group is unusable after an earlier failure (%s); reload the model",
                       sp->broken_why);
    /* A failure of an earlier job must not stick to the ranks' own contexts. */
    for (int r = 1; r < sp->n; r++)
        if (sp->ranks[r].own_ctx)
            mm_ctx_clear_error(sp->ranks[r].ctx);
    pthread_mutex_lock(&sp->mu);
    sp->job = job;
    sp->job_arg = arg;
    for (int r = 0; r < sp->n; r++)
        sp->ranks[r].rc = 1;
    sp->running = sp->n;
    sp->generation++;
    pthread_cond_broadcast(&sp->cv_job);
    pthread_mutex_unlock(&sp->mu);

    rank_state *r0 = &sp->ranks[0];
    memset(&r0->err, 0, sizeof r0->err);
    int rc0 = job(r0, arg);

    pthread_mutex_lock(&sp->mu);
    r0->rc = rc0;
    sp->running--;
    struct timespec first_fail = {0, 0};
    bool aborted = false;
    while (sp->running > 0) {
        bool failed = false;
        for (int r = 0; r < sp->n; r++)
            failed |= sp->ranks[r].rc < 0;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if (failed && exchanges && !aborted) {
            if (first_fail.tv_sec == 0)
                first_fail = now;
            else if ((double)(now.tv_sec - first_fail.tv_sec) > sp->abort_seconds) {
                aborted = true;
                pthread_mutex_unlock(&sp->mu);
                mm_world_abort(sp->world, "a rank failed and the others were left waiting");
                pthread_mutex_lock(&sp->mu);
                continue;
            }
        }
        struct timespec until = now;
        until.tv_sec += 1;
        pthread_cond_timedwait(&sp->cv_done, &sp->mu, &until);
    }
    pthread_mutex_unlock(&sp->mu);

    for (int r = 0; r < sp->n; r++) {
        rank_state *rs = &sp->ranks[r];
        if (rs->rc == 0)
            continue;
        char dev[32];
        *err = rs->err;
        mm_error_prefix(err, "rank %d (%s)", r, mm_device_name(mm_ctx_device(rs->ctx), dev, sizeof dev));
        if (aborted || mm_world_aborted(sp->world)) {
            sp->broken = true;
            snprintf(sp->broken_why, sizeof sp->broken_why, "%.290s", err->msg);
        }
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ load */

static int job_load(rank_state *rs, void *arg)
{
    (void)arg;
    mm_sp_dit *sp = rs->sp;
    return mm_dit_load(&rs->dit, sp->path, rs->ctx, sp->ov, &rs->err);
}

static int pick_world(const mm_sp_options *o, const mm_device *devs, int n)
{
    if (o->world >= 0)
        return o->world;
    for (int r = 0; r < n; r++) {
        if (devs[r].kind != MM_DEVICE_CUDA)
            return MM_WORLD_HOST;
        for (int q = 0; q < r; q++)
            if (devs[q].index == devs[r].index)
                return MM_WORLD_HOST;
    }
    return MM_WORLD_NCCL;
}

int mm_sp_dit_load(mm_sp_dit **out, const char *path, mm_ctx *ctx0, const mm_sp_options *opts,
                   const mm_dit_config_overrides *ov, mm_error *err)
{
    *out = NULL;
    mm_sp_options o;
    if (opts)
        o = *opts;
    else
        mm_sp_options_defaults(&o);
    const int n = o.ranks;
    if (n < 1 || n > MM_SP_MAX_RANKS)
        return mm_fail(err, "sequence parallel over %d devices: 1 to %d are accepted", n, MM_SP_MAX_RANKS);
    mm_device devs[MM_SP_MAX_RANKS];
    const mm_device d0 = mm_ctx_device(ctx0);
    for (int r = 0; r < n; r++) {
        if (o.devices)
            devs[r] = o.devices[r];
        else
            devs[r] = d0.kind == MM_DEVICE_CUDA ? mm_cuda(d0.index + r) : mm_cpu();
    }
    if (!mm_device_eq(devs[0], d0))
        return mm_fail(err, "sequence parallel: rank 0 must run on the caller's device");
    for (int r = 0; r < n; r++)
        if (devs[r].kind == MM_DEVICE_CUDA && devs[r].index >= mm_cuda_device_count())
            return mm_fail(err, "sequence parallel over %d GPUs starting at cuda:%d, but this host has %d", n,
                           d0.index, mm_cuda_device_count());

    mm_sp_dit *sp = calloc(1, sizeof *sp);
    if (!sp)
        return mm_fail(err, "out of memory");
    sp->n = n;
    sp->path = path;
    sp->ov = ov;
    sp->abort_seconds = o.abort_seconds > 0 ? o.abort_seconds : 60;
    sp->exchange_self = o.exchange_self;
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->cv_job, NULL);
    pthread_cond_init(&sp->cv_done, NULL);

    int kind = pick_world(&o, devs, n);
    if (mm_world_create(&sp->world, (mm_world_kind)kind, n, devs, err) != 0) {
        if (o.world >= 0) {
            mm_sp_dit_free(sp);
            return -1;
        }
        /* Auto: without NCCL the host world still gives right answers, slowly. */
        fprintf(stderr, "mmh3: %s; exchanging through host memory instead (much slower)\n", err->msg);
        if (mm_world_create(&sp->world, MM_WORLD_HOST, n, devs, err) != 0) {
            mm_sp_dit_free(sp);
            return -1;
        }
    }
    int threads = o.cpu_threads;
    if (threads <= 0) {
        long cores = mm_env_threads();
        if (cores <= 0)
            cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(cores / n > 0 ? cores / n : 1);
    }
    for (int r = 0; r < n; r++) {
        rank_state *rs = &sp->ranks[r];
        rs->sp = sp;
        rs->rank = r;
        rs->comm = mm_world_comm(sp->world, r);
        if (r == 0) {
            rs->ctx = ctx0;
        } else if (mm_ctx_create(&rs->ctx, devs[r], threads, err) != 0) {
            mm_sp_dit_free(sp);
            return mm_error_prefix(err, "sequence parallel rank %d", r);
        } else {
            rs->own_ctx = true;
        }
    }
    for (int r = 1; r < n; r++) {
        rank_state *rs = &sp->ranks[r];
        if (pthread_create(&rs->thread, NULL, rank_main, rs) != 0) {
            mm_sp_dit_free(sp);
            return mm_fail(err, "sequence parallel: cannot start the thread of rank %d", r);
        }
        rs->has_thread = true;
    }
    if (run_all(sp, job_load, NULL, false, err) != 0) {
        mm_sp_dit_free(sp);
        return mm_error_prefix(err, "loading the DiT on %d devices", n);
    }
    if (mm_dit_get_config(sp->ranks[0].dit)->heads % n != 0) {
        int heads = mm_dit_get_config(sp->ranks[0].dit)->heads;
        mm_sp_split s;
        mm_sp_split_make(1 << 30, heads, n, &s, err);
        mm_sp_dit_free(sp);
        return -1;
    }
    sp->path = NULL;
    sp->ov = NULL;
    *out = sp;
    return 0;
}

void mm_sp_dit_free(mm_sp_dit *sp)
{
    if (!sp)
        return;
    pthread_mutex_lock(&sp->mu);
    sp->quit = true;
    pthread_cond_broadcast(&sp->cv_job);
    pthread_mutex_unlock(&sp->mu);
    for (int r = 0; r < sp->n; r++) {
        rank_state *rs = &sp->ranks[r];
        if (rs->has_thread)
            pthread_join(rs->thread, NULL);
        mm_dit_free(rs->dit);
        if (rs->own_ctx)
            mm_ctx_destroy(rs->ctx);
    }
    mm_world_destroy(sp->world);
    pthread_mutex_destroy(&sp->mu);
    pthread_cond_destroy(&sp->cv_job);
    pthread_cond_destroy(&sp->cv_done);
    free(sp);
}

int mm_sp_dit_ranks(const mm_sp_dit *sp) { return sp->n; }
const mm_dit_config *mm_sp_dit_config(const mm_sp_dit *sp) { return mm_dit_get_config(sp->ranks[0].dit); }
size_t mm_sp_dit_weight_bytes(const mm_sp_dit *sp) { return mm_dit_weight_bytes(sp->ranks[0].dit); }
mm_dit *mm_sp_dit_replica(mm_sp_dit *sp, int rank) { return rank >= 0 && rank < sp->n ? sp->ranks[rank].dit : NULL; }

void mm_sp_dit_describe(const mm_sp_dit *sp, char *buf, size_t n)
{
    char a[32], b[32], w[700];
    mm_world_describe(sp->world, w, sizeof w);
    snprintf(buf, n, "%d rank%s on %s%s%s, %s", sp->n, sp->n == 1 ? "" : "s",
             mm_device_name(mm_ctx_device(sp->ranks[0].ctx), a, sizeof a), sp->n > 1 ? ".." : "",
             sp->n > 1 ? mm_device_name(mm_ctx_device(sp->ranks[sp->n - 1].ctx), b, sizeof b) : "", w);
}

/* --------------------------------------------------------------- requests */

/* dst = src where one side may be host memory and ctx runs on a GPU (mm_copy
 * wants the context's device on a side; two host tensors are copied here). */
static void stage(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src)
{
    if (dst->device.kind == MM_DEVICE_CPU && src->device.kind == MM_DEVICE_CPU &&
        mm_ctx_device(ctx).kind != MM_DEVICE_CPU && dst->dtype == src->dtype && mm_tensor_is_contiguous(dst) &&
        mm_tensor_is_contiguous(src)) {
        memcpy(dst->data, src->data, mm_tensor_nbytes(src));
        return;
    }
    mm_copy(ctx, dst, src);
}

typedef struct begin_args {
    mm_sp_request *req;
    const mm_dit_layout *layout;
    const mm_tensor *text_host;
} begin_args;

static int upload_i64_as_i32(mm_ctx *ctx, mm_tensor *dst, const int64_t *v, int64_t n, mm_error *err)
{
    int32_t *h = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!h)
        return mm_fail(err, "out of memory");
    for (int64_t i = 0; i < n; i++)
        h[i] = (int32_t)v[i];
    int rc = mm_tensor_alloc(dst, mm_ctx_device(ctx), MM_I32, 1, MM_SHAPE(n), err);
    if (rc == 0) {
        mm_tensor src = mm_tensor_wrap(h, mm_cpu(), MM_I32, 1, MM_SHAPE(n));
        mm_copy(ctx, dst, &src);
        rc = mm_ctx_sync(ctx, err);
    }
    free(h);
    return rc;
}

/* The rank's Ulysses share runs the request's own SDPA (FA3 on Hopper, fast
 * mode when set), not the portable-interface mm_attention. */
static int request_sdpa(void *user, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                        const mm_tensor *v)
{
    (void)ctx; /* the request's own: the hook is called with it */
    return mm_dit_sdpa(user, out, q, k, v);
}

/* The step cache's sums over the group (mm_dit_allreduce_fn): every rank
 * sends its values to every rank, itself included, and adds what arrives in
 * rank order, so all of them hold the same bits and decide alike. */
static int allreduce_sums(void *user, mm_ctx *ctx, double *v, int n, mm_error *err)
{
    rank_req *rr = user;
    const int N = rr->n_ranks;
    if (n < 1 || n > SP_REDUCE_MAX)
        return mm_fail(err, "all-reduce of %d values (1 to %d are accepted)", n, SP_REDUCE_MAX);
    mm_sp_msg sends[MM_SP_MAX_RANKS], recvs[MM_SP_MAX_RANKS];
    for (int p = 0; p < N; p++) {
        sends[p] = (mm_sp_msg){p, 0, n};
        recvs[p] = (mm_sp_msg){p, (int64_t)n * (1 + p), n};
    }
    const mm_device dev = mm_ctx_device(ctx);
    mm_tensor mine = mm_tensor_wrap(rr->reduce.data, dev, MM_F64, 1, MM_SHAPE(n));
    mm_tensor all = mm_tensor_wrap((double *)rr->reduce.data + n, dev, MM_F64, 1, MM_SHAPE((int64_t)N * n));
    mm_tensor hv = mm_tensor_wrap(v, mm_cpu(), MM_F64, 1, MM_SHAPE(n));
    mm_tensor hall = mm_tensor_wrap(rr->reduce_host, mm_cpu(), MM_F64, 1, MM_SHAPE((int64_t)N * n));
    mm_copy(ctx, &mine, &hv);
    if (mm_ctx_sync(ctx, err) != 0 ||
        mm_comm_exchange(rr->comm, ctx, rr->reduce.data, sends, N, rr->reduce.data, recvs, N, sizeof(double), err) != 0)
        return -1;
    mm_copy(ctx, &hall, &all);
    if (mm_ctx_sync(ctx, err) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        double sum = 0;
        for (int p = 0; p < N; p++)
            sum += rr->reduce_host[p * n + i];
        v[i] = sum;
    }
    return 0;
}

static int job_begin(rank_state *rs, void *arg)
{
    begin_args *a = arg;
    mm_sp_request *q = a->req;
    rank_req *rr = &q->rr[rs->rank];
    mm_error *err = &rs->err;
    mm_ctx *ctx = rs->ctx;
    const mm_device dev = mm_ctx_device(ctx);
    const mm_dit_config *c = mm_dit_get_config(rs->dit);
    if (mm_sp_local_make(a->layout, &q->split, rs->rank, &rr->local, err) != 0)
        return -1;
    const mm_dit_layout *ll = &rr->local.layout;
    const int64_t L = a->text_host->shape[0], nt = ll->text_rows, nv = ll->video_rows, na = ll->audio_rows;
    mm_tensor text_dev = {0}, refined = {0}, text_loc = {0}, sel = {0};
    int rc = -1;
    /* The whole text goes through the refiner on every rank (its attention
     * spans all L text rows; at L ≈ 300 that is ~1 ms of work), then each
     * rank keeps its own text rows. */
    if (mm_tensor_alloc(&text_dev, dev, a->text_host->dtype, 2, a->text_host->shape, err) != 0)
        goto out;
    mm_copy(ctx, &text_dev, a->text_host);
    if (mm_ctx_sync(ctx, err) != 0 ||
        mm_tensor_alloc(&refined, dev, MM_BF16, 2, MM_SHAPE(L, c->hidden), err) != 0 ||
        mm_dit_refine_text(rs->dit, ctx, &text_dev, &refined, err) != 0 ||
        upload_i64_as_i32(ctx, &sel, rr->local.text_source, nt, err) != 0 ||
        mm_tensor_alloc(&text_loc, dev, MM_BF16, 2, MM_SHAPE(nt, c->hidden), err) != 0)
        goto out;
    mm_gather_rows(ctx, &text_loc, &refined, &sel);
    if (mm_ctx_sync(ctx, err) != 0 ||
        mm_ulysses_create(&rr->u, rs->comm, &q->split, c->head_dim, MM_BF16, q->sp->exchange_self, err) != 0)
        goto out;
    rr->comm = rs->comm;
    rr->n_ranks = q->sp->n;
    if (q->sp->n > 1) { /* one rank has all the rows: its sums need no reduction */
        rr->reduce_host = malloc(sizeof(double) * (size_t)(q->sp->n * SP_REDUCE_MAX));
        if (!rr->reduce_host) {
            mm_fail(err, "out of host memory");
            goto out;
        }
        if (mm_tensor_alloc(&rr->reduce, dev, MM_F64, 1, MM_SHAPE((int64_t)(q->sp->n + 1) * SP_REDUCE_MAX), err) != 0)
            goto out;
    }
    mm_dit_request_opts opts = {.refined_text = &text_loc,
                                .attention = mm_ulysses_attention,
                                .attention_user = rr->u,
                                .allreduce = q->sp->n > 1 ? allreduce_sums : NULL,
                                .allreduce_user = rr};
    if (mm_dit_request_begin_ex(rs->dit, ctx, ll, NULL, &opts, NULL, &rr->dreq, err) != 0)
        goto out;
    mm_ulysses_set_sdpa(rr->u, request_sdpa, rr->dreq);
    if (q->sp->n == 1) { /* the caller's tensors go straight in (mm_sp_forward) */
        rc = 0;
        goto out;
    }
    rr->row_t = malloc(sizeof(float) * (size_t)(ll->rows ? ll->rows : 1));
    rr->h_vin = malloc(sizeof(float) * (size_t)(nv * q->vw + 1));
    rr->h_vout = malloc(sizeof(float) * (size_t)(nv * q->vw + 1));
    rr->h_ain = malloc(sizeof(float) * (size_t)(na * q->aw + 1));
    rr->h_aout = malloc(sizeof(float) * (size_t)(na * q->aw + 1));
    if (!rr->row_t || !rr->h_vin || !rr->h_vout || !rr->h_ain || !rr->h_aout) {
        mm_fail(err, "out of host memory");
        goto out;
    }
    if (mm_tensor_alloc(&rr->vin, dev, MM_F32, 2, MM_SHAPE(nv, q->vw), err) != 0 ||
        mm_tensor_alloc(&rr->vout, dev, MM_F32, 2, MM_SHAPE(nv, q->vw), err) != 0 ||
        mm_tensor_alloc(&rr->ain, dev, MM_F32, 2, MM_SHAPE(na, q->aw), err) != 0 ||
        mm_tensor_alloc(&rr->aout, dev, MM_F32, 2, MM_SHAPE(na, q->aw), err) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0)
        mm_ctx_error(ctx, err[0].msg[0] ? NULL : err);
    mm_tensor_free(&text_dev);
    mm_tensor_free(&refined);
    mm_tensor_free(&text_loc);
    mm_tensor_free(&sel);
    return rc;
}

static void rank_req_free(rank_req *rr)
{
    mm_dit_request_end(rr->dreq);
    mm_ulysses_free(rr->u);
    mm_sp_local_free(&rr->local);
    mm_tensor_free(&rr->vin);
    mm_tensor_free(&rr->ain);
    mm_tensor_free(&rr->vout);
    mm_tensor_free(&rr->aout);
    mm_tensor_free(&rr->reduce);
    free(rr->reduce_host);
    free(rr->row_t);
    free(rr->h_vin);
    free(rr->h_ain);
    free(rr->h_vout);
    free(rr->h_aout);
    memset(rr, 0, sizeof *rr);
}

void mm_sp_request_end(mm_sp_request *q)
{
    if (!q)
        return;
    for (int r = 0; r < q->sp->n; r++)
        rank_req_free(&q->rr[r]);
    free(q->h_video);
    free(q->h_audio);
    free(q->h_vv);
    free(q->h_va);
    free(q);
}

size_t mm_sp_request_bytes(const mm_sp_request *q)
{
    size_t most = 0;
    for (int r = 0; r < q->sp->n; r++) {
        const rank_req *rr = &q->rr[r];
        size_t b = mm_dit_request_bytes(rr->dreq) + mm_ulysses_bytes(rr->u) + mm_tensor_nbytes(&rr->vin) +
                   mm_tensor_nbytes(&rr->vout) + mm_tensor_nbytes(&rr->ain) + mm_tensor_nbytes(&rr->aout);
        most = b > most ? b : most;
    }
    return most;
}

int mm_sp_request_begin(mm_sp_dit *sp, const mm_dit_layout *layout, const mm_tensor *text, mm_sp_request **out,
                        mm_error *err)
{
    *out = NULL;
    const mm_dit_config *c = mm_sp_dit_config(sp);
    if (text->ndim != 2 || text->shape[0] != layout->text_rows || text->shape[1] != c->text_dim)
        return mm_fail(err, "DiT request: text must be [%lld, %d] (layout text rows, text width)",
                       (long long)layout->text_rows, c->text_dim);
    mm_sp_request *q = calloc(1, sizeof *q);
    if (!q)
        return mm_fail(err, "out of memory");
    q->sp = sp;
    q->video_rows = layout->video_rows;
    q->audio_rows = layout->audio_rows;
    q->vw = c->video_row_width;
    q->aw = c->audio_row_width;
    mm_tensor text_host = {0};
    int rc = -1;
    if (mm_sp_split_make(layout->rows, c->heads, sp->n, &q->split, err) != 0)
        goto out;
    if (sp->n > 1) { /* one rank takes the caller's tensors as they are (mm_sp_forward) */
        q->h_video = malloc(sizeof(float) * (size_t)(q->video_rows * q->vw + 1));
        q->h_vv = malloc(sizeof(float) * (size_t)(q->video_rows * q->vw + 1));
        q->h_audio = malloc(sizeof(float) * (size_t)(q->audio_rows * q->aw + 1));
        q->h_va = malloc(sizeof(float) * (size_t)(q->audio_rows * q->aw + 1));
        if (!q->h_video || !q->h_vv || !q->h_audio || !q->h_va) {
            mm_fail(err, "out of host memory");
            goto out;
        }
    }
    /* The text on the host once; every rank uploads it to its own device. */
    if (mm_tensor_alloc(&text_host, mm_cpu(), text->dtype, 2, text->shape, err) != 0)
        goto out;
    mm_ctx *ctx0 = sp->ranks[0].ctx;
    stage(ctx0, &text_host, text);
    if (mm_ctx_sync(ctx0, err) != 0)
        goto out;
    begin_args a = {q, layout, &text_host};
    if (run_all(sp, job_begin, &a, false, err) != 0)
        goto out;
    rc = 0;
out:
    mm_tensor_free(&text_host);
    if (rc != 0) {
        mm_sp_request_end(q);
        return mm_error_prefix(err, "sequence-parallel DiT request");
    }
    *out = q;
    return 0;
}

static int job_forward(rank_state *rs, void *arg)
{
    mm_sp_request *q = arg;
    rank_req *rr = &q->rr[rs->rank];
    mm_ctx *ctx = rs->ctx;
    const mm_sp_local *l = &rr->local;
    const int64_t nv = l->layout.video_rows, na = l->layout.audio_rows;
    const size_t vrow = sizeof(float) * (size_t)q->vw, arow = sizeof(float) * (size_t)q->aw;
    mm_sp_local_rows_f32(l, q->row_t, rr->row_t);
    for (int64_t i = 0; i < nv; i++)
        memcpy(rr->h_vin + i * q->vw, q->h_video + l->video_source[i] * q->vw, vrow);
    for (int64_t i = 0; i < na; i++)
        memcpy(rr->h_ain + i * q->aw, q->h_audio + l->audio_source[i] * q->aw, arow);
    mm_tensor hv = mm_tensor_wrap(rr->h_vin, mm_cpu(), MM_F32, 2, MM_SHAPE(nv, q->vw));
    mm_tensor ha = mm_tensor_wrap(rr->h_ain, mm_cpu(), MM_F32, 2, MM_SHAPE(na, q->aw));
    mm_copy(ctx, &rr->vin, &hv);
    mm_copy(ctx, &rr->ain, &ha);
    if (mm_ctx_sync(ctx, &rs->err) != 0 ||
        mm_dit_forward(rr->dreq, rr->row_t, &rr->vin, &rr->ain, &rr->vout, &rr->aout, &rs->err) != 0)
        return -1;
    hv.data = rr->h_vout;
    ha.data = rr->h_aout;
    mm_copy(ctx, &hv, &rr->vout);
    mm_copy(ctx, &ha, &rr->aout);
    if (mm_ctx_sync(ctx, &rs->err) != 0)
        return -1;
    /* Ranks own disjoint rows of the outputs. */
    for (int64_t i = 0; i < nv; i++)
        memcpy(q->h_vv + l->video_source[i] * q->vw, rr->h_vout + i * q->vw, vrow);
    for (int64_t i = 0; i < na; i++)
        memcpy(q->h_va + l->audio_source[i] * q->aw, rr->h_aout + i * q->aw, arow);
    return 0;
}

static int job_set_fast(rank_state *rs, void *arg)
{
    mm_sp_request *q = arg;
    mm_dit_request_set_fast(q->rr[rs->rank].dreq, q->fast);
    if (mm_ctx_error(rs->ctx, &rs->err) != 0) /* the cause, not just that it failed */
        return mm_error_prefix(&rs->err, "setting up fast mode");
    return 0;
}

int mm_sp_request_set_fast(mm_sp_request *q, bool fast, mm_error *err)
{
    /* On each rank's own thread: choosing the kernels may run their
     * first-use self-checks on the rank's device. */
    q->fast = fast;
    return run_all(q->sp, job_set_fast, q, false, err);
}

typedef struct step_cache_args {
    mm_sp_request *req;
    const mm_step_cache_config *cfg;
    int forwards;
} step_cache_args;

static int job_set_step_cache(rank_state *rs, void *arg)
{
    step_cache_args *a = arg;
    return mm_dit_request_set_step_cache(a->req->rr[rs->rank].dreq, a->cfg, a->forwards, &rs->err);
}

int mm_sp_request_set_step_cache(mm_sp_request *q, const mm_step_cache_config *cfg, int forwards, mm_error *err)
{
    /* On each rank's thread: the buffers go on the rank's device. */
    step_cache_args a = {q, cfg, forwards};
    return run_all(q->sp, job_set_step_cache, &a, false, err);
}

void mm_sp_request_set_step(mm_sp_request *q, int step, int total)
{
    /* between forwards every rank is parked in run_all's wait, which orders this write before its next job */
    for (int r = 0; r < q->sp->n; r++)
        mm_dit_request_set_step(q->rr[r].dreq, step, total);
}

const mm_step_cache_report *mm_sp_request_step_cache_report(const mm_sp_request *q, int rank)
{
    return rank >= 0 && rank < q->sp->n ? mm_dit_request_step_cache_report(q->rr[rank].dreq) : NULL;
}

void mm_sp_request_attention_kind(const mm_sp_request *q, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s", mm_dit_sdpa_kind(q->rr[0].dreq, false),
             q->sp->n > 1 || mm_ulysses_bytes(q->rr[0].u) ? " on each rank's heads (Ulysses all-to-all)"
                                                           : " (1 rank: no exchange)");
}

void mm_sp_request_set_profile(mm_sp_request *q, const mm_dit_profile *p)
{
    mm_dit_request_set_profile(q->rr[0].dreq, p);
    mm_ulysses_set_profile(q->rr[0].u, p ? p->mark : NULL, p ? p->user : NULL);
}

typedef struct direct_args {
    mm_sp_request *req;
    const float *row_t;
    const mm_tensor *video_rows, *audio_rows;
    mm_tensor *v_video, *v_audio;
} direct_args;

/* One rank holds every row in layout order on the caller's device: the
 * caller's tensors go straight into the DiT, with no host staging. */
static int job_forward_direct(rank_state *rs, void *arg)
{
    direct_args *a = arg;
    return mm_dit_forward(a->req->rr[rs->rank].dreq, a->row_t, a->video_rows, a->audio_rows, a->v_video, a->v_audio,
                          &rs->err);
}

static int check_rows(const mm_tensor *t, int64_t rows, int width, const char *what, mm_error *err)
{
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != width || t->dtype != MM_F32 ||
        !mm_tensor_is_contiguous(t))
        return mm_fail(err, "sequence-parallel forward: %s must be contiguous f32 [%lld, %d]", what, (long long)rows,
                       width);
    return 0;
}

int mm_sp_forward(mm_sp_request *q, const float *row_t, const mm_tensor *video_rows, const mm_tensor *audio_rows,
                  mm_tensor *v_video, mm_tensor *v_audio, mm_error *err)
{
    mm_sp_dit *sp = q->sp;
    mm_ctx *ctx0 = sp->ranks[0].ctx;
    if (check_rows(video_rows, q->video_rows, q->vw, "video rows", err) ||
        check_rows(audio_rows, q->audio_rows, q->aw, "audio rows", err) ||
        check_rows(v_video, q->video_rows, q->vw, "v_video", err) ||
        check_rows(v_audio, q->audio_rows, q->aw, "v_audio", err))
        return -1;
    if (sp->n == 1) {
        /* No staging at one rank: the rows must already be where rank 0 runs
         * (with more ranks they may be anywhere ctx0 can copy from). */
        const mm_device d0 = mm_ctx_device(ctx0);
        const mm_tensor *all[4] = {video_rows, audio_rows, v_video, v_audio};
        for (int i = 0; i < 4; i++)
            if (!mm_device_eq(all[i]->device, d0)) {
                char want[32], got[32];
                mm_device_name(d0, want, sizeof want);
                mm_device_name(all[i]->device, got, sizeof got);
                return mm_fail(err, "sequence-parallel forward over one rank: the rows must be on %s (rank 0's "
                               "device), not %s", want, got);
            }
        direct_args a = {q, row_t, video_rows, audio_rows, v_video, v_audio};
        if (run_all(sp, job_forward_direct, &a, false, err) != 0)
            return mm_error_prefix(err, "sequence-parallel forward");
        return 0;
    }
    mm_tensor hv = mm_tensor_wrap(q->h_video, mm_cpu(), MM_F32, 2, MM_SHAPE(q->video_rows, q->vw));
    mm_tensor ha = mm_tensor_wrap(q->h_audio, mm_cpu(), MM_F32, 2, MM_SHAPE(q->audio_rows, q->aw));
    stage(ctx0, &hv, video_rows);
    stage(ctx0, &ha, audio_rows);
    if (mm_ctx_sync(ctx0, err) != 0)
        return mm_error_prefix(err, "sequence-parallel forward");
    q->row_t = row_t;
    int rc = run_all(sp, job_forward, q, true, err);
    q->row_t = NULL;
    if (rc != 0)
        return mm_error_prefix(err, "sequence-parallel forward");
    hv.data = q->h_vv;
    ha.data = q->h_va;
    stage(ctx0, v_video, &hv);
    stage(ctx0, v_audio, &ha);
    if (mm_ctx_sync(ctx0, err) != 0)
        return mm_error_prefix(err, "sequence-parallel forward");
    return 0;
}

int mm_sp_rank_work_bytes(const mm_dit_config *c, int64_t rows, int64_t text_rows, int ranks, uint64_t *out,
                          mm_error *err)
{
    mm_sp_split split;
    if (mm_sp_split_make(rows, c->heads, ranks, &split, err) != 0)
        return -1;
    const int64_t mine = mm_sp_rows_of(&split, 0); /* rank 0 holds the most */
    const int64_t text = (text_rows * mine + rows - 1) / rows;
    *out = mm_dit_request_bytes_for(c, mine, text, true);
    if (ranks > 1) {
        /* ulysses.c: a [3, N, n_me, hd], b [3, S, hd], o [S, hd] in bf16. */
        const int64_t hd = (int64_t)split.heads_per_rank * c->head_dim;
        *out += mm_device_alloc_size((size_t)(3 * ranks * mine * hd * 2)) +
                mm_device_alloc_size((size_t)(3 * rows * hd * 2)) + mm_device_alloc_size((size_t)(rows * hd * 2));
    }
    return 0;
}
