/* mmh3-bench-sparse-attn: the DiT's attention at full size with sparse
 * attention (issue 26), beside the dense kernels in the same run.
 *
 *   mmh3-bench-sparse-attn [--seq 38010] [--heads 56] [--reps 3] [--prefix 951]
 *                          [--routes "forced:0.5,forced:0.25,forced:0.1,sol:1.0"] [--kernels portable,sm90,sm90-fast]
 *
 * q, k, v are the thirds of one random fused [S, 3·H·128] bf16 buffer (the
 * layout and the values of mmh3-bench-attn; random: Sol's τ gives the
 * density random inputs give, ≈ 16% + the band). Routes: forced:D (a random
 * mask of density D + the diagonal band), sol:TAU (Sol-Attn with the first
 * --prefix rows as sink and dense queries, the H3 default), topk:KEEP. Per
 * route the routing is timed on its own (route_ms); each kernel's attention
 * (attn_ms) runs on that route, checked against the portable kernel
 * (rel_l2_vs_portable). The dense kernels (fa3 exact, fa3 fast, as the DiT
 * runs them) are timed first. One line each:
 *   DENSE path=fa3-exact ms=62.9
 *   SPARSE kernel=sm90 route=forced:0.25 density=0.2537 route_ms=0.31 attn_ms=17.2 speedup_vs_fa3_exact=3.6 speedup_vs_fa3_fast=2.7 rel_l2_vs_portable=0.0021
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_speed.h"
#include "backend/ops.h"
#include "backend/sparse_attn.h"
#include "core/dtype.h"
#include "kernels/mmk_sparse.h"

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct fill_job {
    uint16_t *p;
    int64_t width, A2;
} fill_job;

/* mmh3-bench-attn's values: a rough bell in [-2, 2), an outlier channel per q/k head */
static void fill_rows(void *user, int64_t r0, int64_t r1)
{
    const fill_job *j = user;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < j->width; c++) {
            uint64_t h = mix((uint64_t)(r * j->width + c));
            float u = (float)((h >> 40) * 0x1p-24) + (float)((h & 0xFFFFFF) * 0x1p-24) - 1.0f;
            float v = 2.0f * u;
            if (c < j->A2 && c % 128 == 5)
                v *= 6.0f;
            j->p[r * j->width + c] = mm_f32_to_bf16(v);
        }
}

static double rel_l2_bf16(const uint16_t *ref, const uint16_t *got, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = mm_bf16_to_f32(ref[i]), y = mm_bf16_to_f32(got[i]);
        if (!isfinite(y))
            return INFINITY;
        num += (x - y) * (x - y);
        den += x * x;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct timer {
    mm_cuda_event *e0, *e1;
} timer;

/* The best of reps + 1 timed calls (the first is a warm-up) of fn, or -1. */
#define TIME_BEST(tm, reps, ms_out, call)                                                                            \
    do {                                                                                                             \
        float best_ = INFINITY;                                                                                      \
        for (int r_ = 0; r_ <= (reps); r_++) {                                                                       \
            mm_cuda_event_record((tm).e0, NULL);                                                                     \
            call;                                                                                                    \
            mm_cuda_event_record((tm).e1, NULL);                                                                     \
            float ms_ = 0;                                                                                           \
            if (mm_ctx_sync(gpu, &err) != 0 || mm_cuda_event_elapsed_ms((tm).e0, (tm).e1, &ms_, &err) != 0) {       \
                best_ = -1;                                                                                          \
                break;                                                                                               \
            }                                                                                                        \
            if (r_ > 0 && ms_ < best_)                                                                               \
                best_ = ms_;                                                                                         \
        }                                                                                                            \
        ms_out = best_;                                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    int seq = 38010, heads = 56, reps = 3, prefix = 951;
    const char *routes = "forced:0.5,forced:0.25,forced:0.1,sol:1.0", *kernels = "portable,sm90,sm90-fast";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--seq") == 0 && v)
            seq = atoi(argv[++i]);
        else if (strcmp(a, "--heads") == 0 && v)
            heads = atoi(argv[++i]);
        else if (strcmp(a, "--reps") == 0 && v)
            reps = atoi(argv[++i]);
        else if (strcmp(a, "--prefix") == 0 && v)
            prefix = atoi(argv[++i]);
        else if (strcmp(a, "--routes") == 0 && v)
            routes = argv[++i];
        else if (strcmp(a, "--kernels") == 0 && v)
            kernels = argv[++i];
        else {
            fprintf(stderr, "usage: mmh3-bench-sparse-attn [--seq N] [--heads H] [--reps R] [--prefix ROWS]\n"
                            "         [--routes forced:D,sol:TAU,topk:KEEP,...] [--kernels portable,sm90,sm90-fast]\n");
            return 2;
        }
    }
    mm_error err = {{0}};
    mm_ctx *gpu = NULL, *cpu = NULL;
    if (mm_cuda_count() == 0 || mm_ctx_create(&gpu, mm_cuda(0), 0, &err) != 0 ||
        mm_ctx_create(&cpu, mm_cpu(), 0, &err) != 0) {
        printf("FAIL mmh3-bench-sparse-attn: %s\n", err.msg[0] ? err.msg : "no CUDA device");
        return 1;
    }
    const int64_t A = (int64_t)heads * 128, W = 3 * A, no = (int64_t)seq * A;
    uint16_t *host = malloc(sizeof(uint16_t) * (size_t)(seq * W));
    uint16_t *ref = malloc(sizeof(uint16_t) * (size_t)no), *got = malloc(sizeof(uint16_t) * (size_t)no);
    mm_tensor qkv = {0}, out = {0};
    const int64_t shp[2] = {seq, W}, oshp[2] = {seq, A}, hd[2] = {heads, 128};
    if (!host || !ref || !got || mm_tensor_alloc(&qkv, mm_cuda(0), MM_BF16, 2, shp, &err) ||
        mm_tensor_alloc(&out, mm_cuda(0), MM_BF16, 2, oshp, &err)) {
        printf("FAIL mmh3-bench-sparse-attn: %s\n", err.msg[0] ? err.msg : "out of host memory");
        return 1;
    }
    fill_job job = {host, W, 2 * A};
    mm_parallel_for(cpu, seq, 64, fill_rows, &job);
    mm_tensor h = mm_tensor_wrap(host, mm_cpu(), MM_BF16, 2, shp);
    mm_copy(gpu, &qkv, &h);
    mm_tensor q3 = mm_tensor_narrow(&qkv, 1, 0, A), k3 = mm_tensor_narrow(&qkv, 1, A, A);
    mm_tensor v3 = mm_tensor_narrow(&qkv, 1, 2 * A, A);
    mm_tensor q = mm_tensor_unflatten(&q3, 1, 2, hd), k = mm_tensor_unflatten(&k3, 1, 2, hd);
    mm_tensor v = mm_tensor_unflatten(&v3, 1, 2, hd), o = mm_tensor_unflatten(&out, 1, 2, hd);
    mm_tensor ho = mm_tensor_wrap(got, mm_cpu(), MM_BF16, 2, oshp);
    timer tm = {mm_cuda_event_create(0, &err), mm_cuda_event_create(0, &err)};
    const double flop = 4.0 * seq * (double)seq * A;
    printf("attention S=%d heads=%d head_dim=128: %.2f TFLOP dense per call | %s\n", seq, heads, flop * 1e-12,
           mm_sparse_attention_kind(gpu, MM_SPARSE_EXACT));
    fflush(stdout);

    /* dense, as the DiT runs it: fa3 exact and fast (its self-checks first) */
    double dense_ms[2] = {NAN, NAN};
    mm_dit_kernel_paths paths;
    mm_dit_kernel_paths_get(mm_cuda(0), true, &paths);
    for (int m = 0; m < 2; m++) {
        const bool run = m == 0 ? paths.fa3 : paths.fast_fa3;
        if (!run || !mm_fa3_fits(gpu, &o, &q, &k, &v)) {
            printf("DENSE path=fa3-%s skipped (%s)\n", m ? "fast" : "exact", m ? paths.fast : paths.attention);
            continue;
        }
        const mm_fa3_mode mode = m ? MM_FA3_FAST : MM_FA3_EXACT;
        float ms;
        TIME_BEST(tm, reps, ms, mm_attention_fa3(gpu, &o, &q, &k, &v, 0.0f, mode));
        dense_ms[m] = ms;
        printf("DENSE path=fa3-%s ms=%.2f tflops=%.1f\n", m ? "fast" : "exact", ms, flop / (ms * 1e-3) * 1e-12);
        fflush(stdout);
    }

    mm_sparse_route route;
    mm_tensor tally = {0};
    if (mm_sparse_route_alloc(&route, mm_cuda(0), seq, heads, heads, 128, &err) != 0 ||
        mm_tensor_zeros(&tally, mm_cuda(0), MM_I64, 1, (int64_t[]){1}, &err) != 0) {
        printf("FAIL mmh3-bench-sparse-attn: %s\n", err.msg);
        return 1;
    }
    const mm_row_range pre[] = {{0, prefix}};
    char list[512];
    snprintf(list, sizeof list, "%s", routes);
    int failures = 0;
    for (char *save = NULL, *rt = strtok_r(list, ",", &save); rt; rt = strtok_r(NULL, ",", &save)) {
        const char *colon = strchr(rt, ':');
        const double x = colon ? atof(colon + 1) : 0.25;
        mm_sparse_route_params rp = {.policy = MM_SPARSE_FORCED, .keep = (float)x, .band = 1, .seed = 1};
        if (strncmp(rt, "sol", 3) == 0) {
            rp = (mm_sparse_route_params){.policy = MM_SPARSE_SOL, .tau = (float)x, .keep = 1, .band = 1,
                                          .sink_kv = pre, .n_sink_kv = prefix > 0, .dense_q = pre,
                                          .n_dense_q = prefix > 0};
        } else if (strncmp(rt, "topk", 4) == 0) {
            rp = (mm_sparse_route_params){.policy = MM_SPARSE_TOPK, .keep = (float)x, .band = -1,
                                          .dense_q = pre, .n_dense_q = prefix > 0};
        } else if (strncmp(rt, "forced", 6) != 0) {
            printf("SPARSE route=%s FAILED: routes are forced:D, sol:TAU, topk:KEEP\n", rt);
            failures++;
            continue;
        }
        float route_ms;
        TIME_BEST(tm, reps, route_ms, mm_sparse_route_blocks(gpu, &route, &q, &k, &v, &rp, NULL));
        int64_t exact = 0;
        mm_tensor ht = mm_tensor_wrap(&exact, mm_cpu(), MM_I64, 1, (int64_t[]){1});
        mm_copy(gpu, &tally, &ht); /* zero (a host-to-device copy is synchronous) */
        mm_sparse_route_blocks(gpu, &route, &q, &k, &v, &rp, &tally);
        mm_copy(gpu, &ht, &tally);
        if (route_ms < 0 || mm_ctx_sync(gpu, &err) != 0) {
            printf("SPARSE route=%s FAILED: %s\n", rt, err.msg);
            failures++;
            mm_ctx_clear_error(gpu);
            continue;
        }
        const double density = (double)exact / ((double)route.blocks * route.blocks * heads);
        bool have_ref = false;
        char klist[128];
        snprintf(klist, sizeof klist, "%s", kernels);
        for (char *ks = NULL, *kn = strtok_r(klist, ",", &ks); kn; kn = strtok_r(NULL, ",", &ks)) {
            const int kernel = strcmp(kn, "sm90") == 0        ? MMK_SPARSE_SM90
                               : strcmp(kn, "sm90-fast") == 0 ? MMK_SPARSE_SM90_FAST
                                                              : MMK_SPARSE_PORTABLE;
            if (!mmk_sparse_usable(0, kernel)) {
                printf("SPARSE kernel=%s route=%s skipped (not on this GPU/build)\n", kn, rt);
                continue;
            }
            mmk_sparse_attn_args a;
            memset(&a, 0, sizeof a);
            a.x = (mmk_sparse_qkv){seq, heads, heads, q.data, k.data, v.data, q.stride[0], k.stride[0], v.stride[0],
                                   0.08838834764831845f};
            a.o = o.data;
            a.ldo = A;
            a.mask = route.mask.data;
            a.count = route.count.data;
            a.kc = route.kc.data;
            a.vc = route.vc.data;
            a.blocks = (int)route.blocks;
            a.words = (int)route.words;
            a.approximate = rp.policy != MM_SPARSE_TOPK;
            a.kernel = kernel;
            mm_fill(gpu, &out, NAN);
            float ms;
            TIME_BEST(tm, reps, ms, mmk_sparse_attn_run(0, (mmk_stream)mm_ctx_stream(gpu), &a, &err));
            mm_copy(gpu, &ho, &out);
            if (ms < 0 || mm_ctx_sync(gpu, &err) != 0) {
                printf("SPARSE kernel=%s route=%s FAILED: %s\n", kn, rt, err.msg);
                failures++;
                mm_ctx_clear_error(gpu);
                continue;
            }
            double rel = 0;
            if (!have_ref) {
                memcpy(ref, got, sizeof(uint16_t) * (size_t)no);
                have_ref = kernel == MMK_SPARSE_PORTABLE;
                rel = have_ref ? 0 : NAN;
            } else {
                rel = rel_l2_bf16(ref, got, no);
            }
            printf("SPARSE kernel=%s route=%s density=%.4f route_ms=%.3f attn_ms=%.2f speedup_vs_fa3_exact=%.2f "
                   "speedup_vs_fa3_fast=%.2f rel_l2_vs_portable=%.3g exact_tflops=%.1f\n",
                   kn, rt, density, route_ms, ms, dense_ms[0] / (ms + route_ms), dense_ms[1] / (ms + route_ms), rel,
                   density * flop / (ms * 1e-3) * 1e-12);
            fflush(stdout);
            if (!isfinite(rel) && have_ref)
                failures++;
        }
    }
    mm_sparse_route_free(&route);
    mm_tensor_free(&tally);
    mm_tensor_free(&qkv);
    mm_tensor_free(&out);
    mm_ctx_destroy(gpu);
    mm_ctx_destroy(cpu);
    free(host);
    free(ref);
    free(got);
    printf("%s mmh3-bench-sparse-attn\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
