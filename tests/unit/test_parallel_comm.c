/* Rank groups without a GPU: the host world's exchange between threads
 * (uneven per-peer counts, several messages per pair, matched in order), its
 * refusal of mismatched messages, abort waking a rank that waits for a peer
 * that never comes, and what the NCCL side says on a host where it cannot
 * run. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/device.h"
#include "parallel/comm.h"
#include "parallel/nccl_lib.h"
#include "parallel/transfer.h"
#include "test.h"

typedef struct rank_arg {
    mm_world *w;
    mm_device dev; /* where the rank's buffers live */
    int rank, n;
    int rc;
    mm_error err;
    int bad;
    bool mismatch; /* rank 1 announces one element too many */
} rank_arg;

/* Rank r sends (r + 1)·(p + 1) + k elements to p in message k of 2, valued
 * 1e6·r + 1e3·p + 10·k + i. */
static int64_t count_of(int r, int p, int k) { return (r + 1) * (p + 1) + k; }

static void *rank_exchange(void *arg)
{
    rank_arg *a = arg;
    const int r = a->rank, N = a->n;
    mm_ctx *ctx;
    if (mm_ctx_create(&ctx, mm_cpu(), 1, &a->err) != 0) {
        a->rc = -1;
        return NULL;
    }
    mm_sp_msg sends[2 * MM_SP_MAX_RANKS], recvs[2 * MM_SP_MAX_RANKS];
    int64_t off = 0, roff = 0;
    int k = 0;
    for (int p = 0; p < N; p++)
        for (int m = 0; m < 2; m++, k++) {
            sends[k] = (mm_sp_msg){p, off, count_of(r, p, m)};
            off += sends[k].count;
            recvs[k] = (mm_sp_msg){p, roff, count_of(p, r, m) + (a->mismatch && r == 1 && p == 0 ? 1 : 0)};
            roff += recvs[k].count;
        }
    float *send = malloc(sizeof(float) * (size_t)off), *recv = calloc((size_t)roff, sizeof(float));
    for (int i = 0; i < k; i++)
        for (int64_t e = 0; e < sends[i].count; e++)
            send[sends[i].offset + e] = (float)(1e6 * r + 1e3 * sends[i].peer + 10 * (i % 2) + (double)e);
    if (a->dev.kind == MM_DEVICE_CUDA) {
        /* The same exchange between GPU buffers, on the rank's stream. */
        mm_ctx *g = NULL;
        void *ds = NULL, *dr = NULL;
        a->rc = -1;
        if (mm_ctx_create(&g, a->dev, 0, &a->err) == 0 && (ds = mm_device_malloc(a->dev, 4 * (size_t)off, &a->err)) &&
            (dr = mm_device_malloc(a->dev, 4 * (size_t)roff, &a->err)) &&
            mm_device_memcpy(a->dev, ds, mm_cpu(), send, 4 * (size_t)off, &a->err) == 0 &&
            mm_device_memset0(a->dev, dr, 4 * (size_t)roff, &a->err) == 0 &&
            mm_comm_exchange(mm_world_comm(a->w, r), g, ds, sends, k, dr, recvs, k, sizeof(float), &a->err) == 0 &&
            mm_ctx_sync(g, &a->err) == 0 && mm_device_memcpy(mm_cpu(), recv, a->dev, dr, 4 * (size_t)roff, &a->err) == 0)
            a->rc = 0;
        mm_device_free(a->dev, ds);
        mm_device_free(a->dev, dr);
        mm_ctx_destroy(g);
    } else {
        a->rc = mm_comm_exchange(mm_world_comm(a->w, r), ctx, send, sends, k, recv, recvs, k, sizeof(float), &a->err);
    }
    if (a->rc == 0)
        for (int i = 0; i < k; i++)
            for (int64_t e = 0; e < recvs[i].count; e++)
                a->bad += recv[recvs[i].offset + e] != (float)(1e6 * recvs[i].peer + 1e3 * r + 10 * (i % 2) + (double)e);
    free(send);
    free(recv);
    mm_ctx_destroy(ctx);
    return NULL;
}

static int run_world_on(mm_world_kind kind, int N, bool gpus, bool mismatch, rank_arg *args, mm_error *err)
{
    mm_device devs[MM_SP_MAX_RANKS] = {{0}};
    for (int r = 0; r < N && r < MM_SP_MAX_RANKS; r++)
        devs[r] = gpus ? mm_cuda(r) : mm_cpu();
    mm_world *w;
    if (mm_world_create(&w, kind, N, devs, err) != 0)
        return -1;
    pthread_t th[MM_SP_MAX_RANKS];
    for (int r = 0; r < N; r++) {
        args[r] = (rank_arg){.w = w, .dev = devs[r], .rank = r, .n = N, .mismatch = mismatch};
        pthread_create(&th[r], NULL, rank_exchange, &args[r]);
    }
    for (int r = 0; r < N; r++)
        pthread_join(th[r], NULL);
    mm_world_destroy(w);
    return 0;
}

static int run_world(int N, bool mismatch, rank_arg *args)
{
    mm_error err = {{0}};
    return run_world_on(MM_WORLD_HOST, N, false, mismatch, args, &err);
}

static void test_host_world_exchanges_uneven_messages(void)
{
    for (int N = 1; N <= 5; N++) {
        rank_arg args[MM_SP_MAX_RANKS];
        MM_REQUIRE(run_world(N, false, args) == 0, "world of %d", N);
        for (int r = 0; r < N; r++)
            MM_EXPECT(args[r].rc == 0 && args[r].bad == 0, "N=%d rank %d: rc %d, %d wrong, %s", N, r, args[r].rc,
                      args[r].bad, args[r].err.msg);
    }
}

/* Repeated: the failing rank's caller frees its send buffer as soon as the
 * exchange returns, while the other ranks may still be reading it — under
 * ASan (the sanitize suite) a rank that returns too early shows up as a
 * use-after-free within a few rounds. */
static void test_mismatched_messages_fail_every_rank(void)
{
    for (int round = 0; round < 25; round++) {
        rank_arg args[MM_SP_MAX_RANKS];
        MM_REQUIRE(run_world(3, true, args) == 0, "world");
        MM_EXPECT(args[1].rc != 0 && strstr(args[1].err.msg, "expects"), "rank 1: %s", args[1].err.msg);
        /* The others must not hang: the failing rank aborts the group. */
        MM_EXPECT(args[0].rc != 0 && args[2].rc != 0, "round %d: ranks 0 and 2 end with an error too (%d, %d)",
                  round, args[0].rc, args[2].rc);
    }
}

static void *lone_barrier(void *arg)
{
    rank_arg *a = arg;
    a->rc = mm_comm_barrier(mm_world_comm(a->w, a->rank), &a->err);
    return NULL;
}

static void test_abort_wakes_a_waiting_rank(void)
{
    mm_device devs[2] = {mm_cpu(), mm_cpu()};
    mm_world *w;
    mm_error err = {{0}};
    MM_REQUIRE(mm_world_create(&w, MM_WORLD_HOST, 2, devs, &err) == 0, "%s", err.msg);
    rank_arg a = {.w = w, .rank = 0, .n = 2};
    pthread_t th;
    pthread_create(&th, NULL, lone_barrier, &a);
    usleep(50 * 1000); /* rank 1 never comes */
    mm_world_abort(w, "rank 1 failed");
    pthread_join(th, NULL);
    MM_EXPECT(a.rc != 0 && strstr(a.err.msg, "rank 1 failed"), "barrier after abort: %d %s", a.rc, a.err.msg);
    MM_EXPECT(mm_world_aborted(w), "aborted");
    MM_EXPECT(mm_comm_barrier(mm_world_comm(w, 1), &err) != 0, "later barriers fail at once");
    mm_world_destroy(w);
}

static void test_nccl_world_needs_distinct_gpus(void)
{
    mm_world *w = NULL;
    mm_error err = {{0}};
    mm_device cpus[2] = {mm_cpu(), mm_cpu()};
    MM_EXPECT(mm_world_create(&w, MM_WORLD_NCCL, 2, cpus, &err) != 0 && strstr(err.msg, "CUDA devices"), "%s",
              err.msg);
    mm_device same[2] = {mm_cuda(0), mm_cuda(0)};
    MM_EXPECT(mm_world_create(&w, MM_WORLD_NCCL, 2, same, &err) != 0 && strstr(err.msg, "distinct"), "%s", err.msg);
    /* Whatever this host has, the description says something useful. */
    char d[700];
    mm_nccl_describe(d, sizeof d);
    MM_EXPECT(strstr(d, "NCCL"), "describe: %s", d);
    printf("     %s\n", d);
}

static void test_transfer_between_host_buffers(void)
{
    char a[1000], b[1000];
    for (int i = 0; i < 1000; i++)
        a[i] = (char)(i * 7);
    mm_error err = {{0}};
    memset(b, 0, sizeof b);
    MM_EXPECT(mm_transfer_bytes(mm_cpu(), b, mm_cpu(), a, sizeof a, MM_XFER_HOST, &err) == 0 && !memcmp(a, b, 1000),
              "%s", err.msg);
    mm_tensor ta = mm_tensor_wrap(a, mm_cpu(), MM_U8, 1, MM_SHAPE(1000));
    mm_tensor tb = mm_tensor_wrap(b, mm_cpu(), MM_U8, 2, MM_SHAPE(10, 100));
    MM_EXPECT(mm_transfer(&tb, &ta, MM_XFER_AUTO, &err) != 0 && strstr(err.msg, "must be equal"), "shape check: %s",
              err.msg);
    /* Staged by default, whatever the environment says: the policy is the
     * engine options', read once by the command line. */
    setenv("MMH3_PEER_COPY", "1", 1);
    MM_EXPECT(strstr(mm_transfer_route(0, 1), "host (the default"), "the default stages: %s",
              mm_transfer_route(0, 1));
    unsetenv("MMH3_PEER_COPY");
    mm_transfer_set_policy(&(mm_transfer_policy){.peer_copy = true});
    /* No GPU here: probing reports that it could not run, and nothing is remembered. */
    if (mm_cuda_device_count() == 0) {
        mm_peer_result r;
        MM_EXPECT(mm_transfer_probe(0, 1, 0, &r, &err) != 0, "probe without GPUs must fail");
        MM_EXPECT(strcmp(mm_transfer_route(0, 1), "unprobed") == 0, "opted in, unprobed: %s", mm_transfer_route(0, 1));
        char summary[400];
        MM_EXPECT(mm_transfer_probe_all(0, 0, NULL, 0, summary, sizeof summary) == 0 && strstr(summary, "nothing"),
                  "%s", summary);
    }
    mm_transfer_set_policy(&(mm_transfer_policy){0});
}

/* The decision itself: direct only with both the opt-in and a passing probe. */
static void test_transfer_goes_direct_only_when_opted_in_and_probed(void)
{
    const mm_transfer_policy off = {0}, on = {.peer_copy = true};
    const mm_peer_verdict verdicts[] = {MM_PEER_UNPROBED, MM_PEER_INTACT, MM_PEER_BROKEN};
    for (size_t i = 0; i < 3; i++) {
        MM_EXPECT(!mm_transfer_goes_direct(&off, verdicts[i]), "not opted in, verdict %d: direct", (int)verdicts[i]);
        MM_EXPECT(mm_transfer_goes_direct(&on, verdicts[i]) == (verdicts[i] == MM_PEER_INTACT),
                  "opted in, verdict %d", (int)verdicts[i]);
    }
}

/* On the GPU host: NCCL over every GPU there (one GPU: each rank's messages
 * to itself go through ncclSend/ncclRecv too), the host world between GPU
 * buffers, the peer probe and a host-staged copy. Skipped without a GPU
 * (a failure with MMH3_REQUIRE_GPU=1). */
static void test_gpu_worlds(void)
{
    const int gpus = mm_cuda_device_count();
    MM_NEED_GPU(gpus);
    const int N = gpus < MM_SP_MAX_RANKS ? gpus : MM_SP_MAX_RANKS;
    const mm_world_kind kinds[2] = {MM_WORLD_NCCL, MM_WORLD_HOST};
    for (int k = 0; k < 2; k++) {
        rank_arg args[MM_SP_MAX_RANKS];
        mm_error err = {{0}};
        MM_EXPECT(run_world_on(kinds[k], N, true, false, args, &err) == 0, "%s world over %d GPUs: %s",
                  k ? "host" : "nccl", N, err.msg);
        for (int r = 0; r < N && !err.msg[0]; r++)
            MM_EXPECT(args[r].rc == 0 && args[r].bad == 0, "%s world, rank %d: rc %d, %d wrong values, %s",
                      k ? "host" : "nccl", r, args[r].rc, args[r].bad, args[r].err.msg);
        printf("     %s world over %d GPU(s): exchange %s\n", k ? "host" : "nccl", N, err.msg[0] ? err.msg : "checked");
    }
    /* One process per GPU: a group joined by id (here a group of one, rank 0). */
    {
        char id[257];
        mm_world *w = NULL;
        mm_error err = {{0}};
        int rc = mm_world_nccl_new_id(id, &err);
        if (rc == 0)
            rc = mm_world_join_nccl(&w, id, 1, 0, 0, &err);
        MM_EXPECT(rc == 0 && mm_world_comm(w, 0) && mm_comm_rank(mm_world_comm(w, 0)) == 0 &&
                      mm_world_comm(w, 1) == NULL,
                  "joining an NCCL group by id: %s", err.msg);
        mm_world_destroy(w);
    }
    /* Peer probe on every ordered pair (a one-GPU host probes nothing), then a staged copy. */
    char summary[400];
    mm_peer_result res[64];
    int failed = mm_transfer_probe_all(N, 0, res, 64, summary, sizeof summary);
    printf("     %s\n", summary);
    MM_EXPECT(failed == 0, "%s", summary);
    const size_t bytes = (size_t)3 << 20;
    unsigned char *h = malloc(bytes), *back = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        h[i] = (unsigned char)(i * 131 + 7);
    mm_error err = {{0}};
    const mm_device d0 = mm_cuda(0), d1 = mm_cuda(N > 1 ? 1 : 0);
    void *a = mm_device_malloc(d0, bytes, &err), *b = mm_device_malloc(d1, bytes, &err);
    MM_REQUIRE(a && b, "%s", err.msg);
    int rc = mm_device_memcpy(d0, a, mm_cpu(), h, bytes, &err);
    if (rc == 0)
        rc = mm_transfer_bytes(d1, b, d0, a, bytes, MM_XFER_HOST, &err);
    if (rc == 0)
        rc = mm_device_memcpy(mm_cpu(), back, d1, b, bytes, &err);
    MM_EXPECT(rc == 0 && memcmp(h, back, bytes) == 0, "host-staged copy cuda:0 → cuda:%d: %s", d1.index, err.msg);
    mm_device_free(d0, a);
    mm_device_free(d1, b);
    free(h);
    free(back);
}

int main(void)
{
    MM_RUN(test_host_world_exchanges_uneven_messages);
    MM_RUN(test_mismatched_messages_fail_every_rank);
    MM_RUN(test_abort_wakes_a_waiting_rank);
    MM_RUN(test_nccl_world_needs_distinct_gpus);
    MM_RUN(test_transfer_between_host_buffers);
    MM_RUN(test_transfer_goes_direct_only_when_opted_in_and_probed);
    MM_RUN(test_gpu_worlds);
    return mm_test_exit();
}
