/* mmh3-bench-attn: the DiT's attention at full size on one GPU, every kernel
 * the build has, timed with device events and checked against each other.
 *
 *   mmh3-bench-attn [--seq 38010] [--heads 56] [--reps 3] [--paths sm80,sm90p,fa3,fa3-fast]
 *
 * q, k, v are the thirds of one random fused [S, 3·H·128] bf16 buffer (the
 * DiT's layout; q/k values with an outlier channel per head), non-causal,
 * scale 1/sqrt(128). Paths: sm80 / sm90p = mm_attention on the portable /
 * the Hopper kernel (kernels/attention.cu); fa3 / fa3-fast = the DiT's
 * kernels of kernels/attn_fa3.cu (exact: bf16; fast: int8 q·k + e4m3 p·v,
 * its quantization passes included). The first path that runs is the
 * reference of the others' rel_l2. One line per path:
 *   ATTN path=fa3 ms=71.2 tflops=581.7 rel_l2_vs=sm80:0.0021
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_speed.h"
#include "backend/kernel_policy.h"
#include "backend/ops.h"
#include "core/dtype.h"

typedef struct fill_job {
    uint16_t *p;
    int64_t width, A2; /* row width; q and k columns end at A2 */
} fill_job;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void fill_rows(void *user, int64_t r0, int64_t r1)
{
    const fill_job *j = user;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < j->width; c++) {
            uint64_t h = mix((uint64_t)(r * j->width + c));
            /* sum of two uniforms: a rough bell in [-2, 2) */
            float u = (float)((h >> 40) * 0x1p-24) + (float)((h & 0xFFFFFF) * 0x1p-24) - 1.0f;
            float v = 2.0f * u;
            if (c < j->A2 && c % 128 == 5)
                v *= 6.0f;
            j->p[r * j->width + c] = mm_f32_to_bf16(v);
        }
}

static double rel_l2_bf16(const uint16_t *a, const uint16_t *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = mm_bf16_to_f32(a[i]), y = mm_bf16_to_f32(b[i]);
        if (!isfinite(x))
            return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int main(int argc, char **argv)
{
    int seq = 38010, heads = 56, reps = 3;
    const char *paths = "sm80,sm90p,fa3,fa3-fast";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seq") == 0 && i + 1 < argc)
            seq = atoi(argv[++i]);
        else if (strcmp(argv[i], "--heads") == 0 && i + 1 < argc)
            heads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--paths") == 0 && i + 1 < argc)
            paths = argv[++i];
        else {
            fprintf(stderr, "usage: mmh3-bench-attn [--seq N] [--heads H] [--reps R] [--paths a,b,...]\n");
            return 2;
        }
    }
    mm_error err = {{0}};
    mm_ctx *gpu = NULL, *cpu = NULL;
    if (mm_cuda_count() == 0 || mm_ctx_create(&gpu, mm_cuda(0), 0, &err) != 0 ||
        mm_ctx_create(&cpu, mm_cpu(), 0, &err) != 0) {
        printf("FAIL mmh3-bench-attn: %s\n", err.msg[0] ? err.msg : "no CUDA device");
        return 1;
    }
    const int64_t A = (int64_t)heads * 128, W = 3 * A, no = (int64_t)seq * A;
    uint16_t *host = malloc(sizeof(uint16_t) * (size_t)(seq * W));
    uint16_t *ref = malloc(sizeof(uint16_t) * (size_t)no), *got = malloc(sizeof(uint16_t) * (size_t)no);
    if (!host || !ref || !got) {
        printf("FAIL mmh3-bench-attn: out of host memory\n");
        return 1;
    }
    fill_job job = {host, W, 2 * A};
    mm_parallel_for(cpu, seq, 64, fill_rows, &job);
    mm_tensor qkv = {0}, out = {0};
    const int64_t shp[2] = {seq, W}, oshp[2] = {seq, A}, hd[2] = {heads, 128};
    if (mm_tensor_alloc(&qkv, mm_cuda(0), MM_BF16, 2, shp, &err) ||
        mm_tensor_alloc(&out, mm_cuda(0), MM_BF16, 2, oshp, &err)) {
        printf("FAIL mmh3-bench-attn: %s\n", err.msg);
        return 1;
    }
    mm_tensor h = mm_tensor_wrap(host, mm_cpu(), MM_BF16, 2, shp);
    mm_copy(gpu, &qkv, &h);
    mm_tensor q3 = mm_tensor_narrow(&qkv, 1, 0, A), k3 = mm_tensor_narrow(&qkv, 1, A, A);
    mm_tensor v3 = mm_tensor_narrow(&qkv, 1, 2 * A, A);
    mm_tensor q = mm_tensor_unflatten(&q3, 1, 2, hd), k = mm_tensor_unflatten(&k3, 1, 2, hd);
    mm_tensor v = mm_tensor_unflatten(&v3, 1, 2, hd), o = mm_tensor_unflatten(&out, 1, 2, hd);
    mm_tensor ho = mm_tensor_wrap(got, mm_cpu(), MM_BF16, 2, oshp);
    const double flop = 4.0 * seq * (double)seq * A;
    printf("attention S=%d heads=%d head_dim=128 non-causal: %.2f TFLOP per call\n", seq, heads, flop * 1e-12);
    mm_cuda_event *e0 = mm_cuda_event_create(0, &err), *e1 = mm_cuda_event_create(0, &err);
    const mm_kernel_policy process = *mm_kernel_policy_get();
    char list[1024], ref_name[64] = "";
    snprintf(list, sizeof list, "%s", paths);
    int failures = 0;
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        const bool fa3 = strncmp(p, "fa3", 3) == 0;
        const mm_fa3_mode mode = strcmp(p, "fa3-fast") == 0 ? MM_FA3_FAST : MM_FA3_EXACT;
        if (strcmp(p, "fa3") && strcmp(p, "fa3-fast") && strcmp(p, "sm80") && strcmp(p, "sm90p")) {
            printf("ATTN path=%s FAILED: unknown path (accepted: sm80, sm90p, fa3, fa3-fast)\n", p);
            failures++;
            continue;
        }
        if (fa3 && !mm_fa3_fits(gpu, &o, &q, &k, &v)) {
            printf("ATTN path=%s skipped (no sm_90a kernel for this GPU)\n", p);
            continue;
        }
        /* mm_attention's kernel: the portable one, or the Hopper one where it runs */
        mm_kernel_policy pol = process;
        pol.attention_hopper = strcmp(p, "sm90p") == 0;
        mm_kernel_policy_install(&pol);
        if (!fa3 && pol.attention_hopper && strncmp(mm_cuda_attention_path(0), "sm90p", 5) != 0) {
            printf("ATTN path=%s skipped (mm_attention runs %s here)\n", p, mm_cuda_attention_path(0));
            continue;
        }
        mm_fill(gpu, &out, NAN);
        float best = INFINITY, total = 0;
        int ok = 1;
        for (int r = 0; r <= reps && ok; r++) {
            mm_cuda_event_record(e0, NULL);
            if (fa3)
                mm_attention_fa3(gpu, &o, &q, &k, &v, 0.0f, mode);
            else
                mm_attention(gpu, &o, &q, &k, &v, NULL);
            mm_cuda_event_record(e1, NULL);
            float ms = 0;
            if (mm_ctx_sync(gpu, &err) != 0 || mm_cuda_event_elapsed_ms(e0, e1, &ms, &err) != 0) {
                printf("ATTN path=%s FAILED: %s\n", p, err.msg);
                ok = 0;
                failures++;
                break;
            }
            if (r > 0) { /* the first call warms up */
                best = ms < best ? ms : best;
                total += ms;
            }
        }
        mm_kernel_policy_install(&process);
        if (!ok) {
            /* a failed kernel leaves the context failed: start a fresh one */
            mm_ctx_destroy(gpu);
            if (mm_ctx_create(&gpu, mm_cuda(0), 0, &err) != 0)
                return 1;
            continue;
        }
        mm_copy(gpu, &ho, &out);
        mm_ctx_sync(gpu, NULL);
        char cmp[64] = "reference";
        if (!ref_name[0]) {
            memcpy(ref, got, sizeof(uint16_t) * (size_t)no);
            snprintf(ref_name, sizeof ref_name, "%s", p);
        } else {
            snprintf(cmp, sizeof cmp, "%s:%.4g", ref_name, rel_l2_bf16(got, ref, no));
        }
        printf("ATTN path=%s ms=%.2f mean_ms=%.2f tflops=%.1f rel_l2_vs=%s\n", p, best, total / reps,
               flop / (best * 1e-3) * 1e-12, cmp);
        fflush(stdout);
    }
    mm_cuda_event_destroy(e0);
    mm_cuda_event_destroy(e1);
    mm_tensor_free(&qkv);
    mm_tensor_free(&out);
    free(host);
    free(ref);
    free(got);
    mm_ctx_destroy(gpu);
    mm_ctx_destroy(cpu);
    return failures ? 1 : 0;
}
