/* Micro-benchmark of the CUDA kernels at the DiT's sizes (spec dit.md §8):
 * S rows (default 38010 = 1344×768×124 t2va with audio, L = 300), hidden
 * 5376, 56 heads × 128, FFN 14336. Prints one line per measurement:
 *
 *   BENCH <name> <median ms> <TFLOP/s or 0> <GB/s or 0>
 *
 * which tests/device/run.sh joins with tests/device/bench_torch.py's lines of
 * the same names (the same op through PyTorch on the same GPU) into ratios.
 * Inputs are random (never zeros: zeros run faster than real data).
 *
 *   bench_kernels [--rows S] [--reps N] [--only SUBSTRING]
 */
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "kernels/mmk.h"

#define DEV 0

static int reps = 3;
static const char *only = NULL;
static mm_error err;

static void die(const char *what)
{
    fprintf(stderr, "bench_kernels: %s: %s\n", what, err.msg);
    exit(1);
}

static void *dalloc(size_t bytes, mm_dtype t, uint64_t seed, float scale)
{
    void *p = mm_cuda_malloc(DEV, bytes, &err);
    if (!p)
        die("allocation");
    int64_t n = (int64_t)(bytes / (mm_dtype_bits(t) / 8));
    if (mmk_fill_random(DEV, (mmk_stream)mm_cuda_stream(DEV), p, t, n, seed, scale, &err))
        die("fill");
    return p;
}

typedef int (*bench_fn)(void *user);

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median of `reps` timed runs after one warm-up; prints the BENCH line. */
static void bench(const char *name, bench_fn fn, void *user, double flops, double bytes)
{
    if (only && !strstr(name, only))
        return;
    printf("# %s ...\n", name);
    fflush(stdout);
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    mm_cuda_event *a = mm_cuda_event_create(DEV, &err), *b = mm_cuda_event_create(DEV, &err);
    if (!a || !b)
        die("events");
    for (int i = 0; i < 1; i++)
        if (fn(user)) {
            printf("BENCH %s FAILED: %s\n", name, err.msg);
            fflush(stdout);
            mm_cuda_event_destroy(a);
            mm_cuda_event_destroy(b);
            return;
        }
    float *t = malloc(sizeof(float) * reps);
    for (int i = 0; i < reps; i++) {
        if (mm_cuda_event_record(a, &err) || fn(user) || mm_cuda_event_record(b, &err) ||
            mm_cuda_event_elapsed_ms(a, b, &t[i], &err)) {
            printf("BENCH %s FAILED: %s\n", name, err.msg);
            fflush(stdout);
            free(t);
            return;
        }
    }
    if (mm_cuda_sync(DEV, &err)) {
        printf("BENCH %s FAILED: %s\n", name, err.msg);
        free(t);
        return;
    }
    qsort(t, reps, sizeof(float), cmp_float);
    double ms = t[reps / 2];
    clock_gettime(CLOCK_MONOTONIC, &w1);
    printf("BENCH %-28s %9.3f ms %8.1f TFLOP/s %7.0f GB/s   (min %.3f max %.3f; %.1f s wall)\n", name, ms,
           flops > 0 ? flops / (ms * 1e9) : 0.0, bytes > 0 ? bytes / (ms * 1e6) : 0.0, t[0], t[reps - 1],
           (w1.tv_sec - w0.tv_sec) + (w1.tv_nsec - w0.tv_nsec) * 1e-9);
    fflush(stdout);
    free(t);
    mm_cuda_event_destroy(a);
    mm_cuda_event_destroy(b);
}

/* ------------------------------------------------------------------ cases */

static int run_gemm(void *u) { return mmk_gemm_run(DEV, (mmk_stream)mm_cuda_stream(DEV), u, &err); }
static int run_qlinear(void *u) { return mmk_qlinear_i8(DEV, (mmk_stream)mm_cuda_stream(DEV), u, &err); }
/* An op on its portable kernel (0) or its default (1), through the kernels'
 * policy, put back afterwards. */
static mmk_policy policy_with(int which, int on)
{
    mmk_policy saved = *mmk_policy_get(), p = saved;
    int *fields[] = {&p.attention_hopper, &p.convrot_pipe, &p.qk_norm_vec, &p.glue_vec};
    *fields[which] = on;
    mmk_policy_set(&p);
    return saved;
}
enum { POL_ATTENTION, POL_CONVROT, POL_QK, POL_GLUE };

static int run_attention(void *u)
{
    mmk_policy saved = policy_with(POL_ATTENTION, 0);
    int rc = mmk_attention_run(DEV, (mmk_stream)mm_cuda_stream(DEV), u, &err);
    mmk_policy_set(&saved);
    return rc;
}
static int run_attention_sm90p(void *u)
{
    mmk_policy saved = policy_with(POL_ATTENTION, 1);
    int rc = mmk_attention_run(DEV, (mmk_stream)mm_cuda_stream(DEV), u, &err);
    mmk_policy_set(&saved);
    return rc;
}
static int run_convrot(void *u) { return mmk_convrot_quant_run(DEV, (mmk_stream)mm_cuda_stream(DEV), u, &err); }
static int run_qk(void *u) { return mmk_qk_norm_rope_run(DEV, (mmk_stream)mm_cuda_stream(DEV), u, &err); }
/* The glue kernels' fallbacks, each bit-identical to the default (see
 * kernels/convrot.cu and kernels/norm.cu): *_row, qk_norm_rope_warp. */
static int run_convrot_row(void *u)
{
    mmk_policy saved = policy_with(POL_CONVROT, 0);
    int rc = -1;
    if (strcmp(mmk_convrot_quant_kernel(u), "row"))
        snprintf(err.msg, sizeof err.msg, "the row kernel does not take this shape");
    else
        rc = run_convrot(u);
    mmk_policy_set(&saved);
    return rc;
}
static int run_qk_warp(void *u)
{
    mmk_policy saved = policy_with(POL_QK, 0);
    int rc = -1;
    if (strcmp(mmk_qk_norm_rope_kernel(u), "warp"))
        snprintf(err.msg, sizeof err.msg, "the warp kernel does not take this shape");
    else
        rc = run_qk(u);
    mmk_policy_set(&saved);
    return rc;
}
static int run_rmsnorm(void *u) { return mmk_rmsnorm_run(DEV, (mmk_stream)mm_cuda_stream(DEV), u, &err); }

typedef struct {
    mmk_view x, y;
    const float *gate;
    int64_t ld_gate;
    const int32_t *idx;
} gated_args;
static int run_gated(void *u)
{
    gated_args *g = u;
    return mmk_gated_add_run(DEV, (mmk_stream)mm_cuda_stream(DEV), &g->x, &g->y, g->gate, g->ld_gate, g->idx, 1, &err);
}

static int run_ew(void *u) { return mmk_ew_run(DEV, (mmk_stream)mm_cuda_stream(DEV), u, &err); }

typedef struct {
    mmk_view y, x, cs, sn;
    int rot;
} rope_args;
static int run_rope(void *u)
{
    rope_args *a = u;
    return mmk_rope_run(DEV, (mmk_stream)mm_cuda_stream(DEV), &a->y, &a->x, &a->cs, &a->sn, a->rot, &err);
}

static mmk_view view3d(void *p, mm_dtype t, int64_t s, int64_t h, int64_t d, int64_t ld)
{
    mmk_view v;
    memset(&v, 0, sizeof v);
    v.p = p;
    v.dtype = t;
    v.ndim = 3;
    v.shape[0] = s;
    v.shape[1] = h;
    v.shape[2] = d;
    v.stride[0] = ld;
    v.stride[1] = d;
    v.stride[2] = 1;
    return v;
}

static mmk_view view2d(void *p, mm_dtype t, int64_t rows, int64_t cols, int64_t ld)
{
    mmk_view v;
    memset(&v, 0, sizeof v);
    v.p = p;
    v.dtype = t;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.stride[0] = ld;
    v.stride[1] = 1;
    return v;
}

/* The video VAE decoder's glue at its size (one chunk: 28 tiles x 1797
 * rows, width 2048, 32 heads x 64, RoPE over 48, FFN 8192, f16 activations,
 * f32 residual), on the generic kernels and then the 8-wide ones (`_vec`);
 * the GB/s column counts each byte read or written once. */
static void bench_glue_pair(const char *name, bench_fn fn, void *user, double bytes)
{
    char vec[64];
    mmk_policy saved = policy_with(POL_GLUE, 0);
    bench(name, fn, user, 0, bytes);
    snprintf(vec, sizeof vec, "%s_vec", name);
    policy_with(POL_GLUE, 1);
    bench(vec, fn, user, 0, bytes);
    mmk_policy_set(&saved);
}

static void bench_vae_glue(void)
{
    if (only && !strstr(only, "vae"))
        return;
    const int64_t R = 28 * 1797, D = 2048, NH = 32, hd = 64, F = 8192, rot = 48;
    float *x = dalloc((size_t)R * D * 4, MM_F32, 60, 1);
    uint16_t *hn = dalloc((size_t)R * D * 2, MM_F16, 61, 1), *qkv = dalloc((size_t)R * 3 * D * 2, MM_F16, 62, 2);
    uint16_t *u = dalloc((size_t)R * 2 * F * 2, MM_F16, 63, 2), *g = dalloc((size_t)R * F * 2, MM_F16, 64, 1);
    uint16_t *cs = dalloc((size_t)R * rot * 2, MM_F16, 65, 1), *sn = dalloc((size_t)R * rot * 2, MM_F16, 66, 1);
    float *w = dalloc((size_t)D * 4, MM_F32, 67, 1), *gate = dalloc((size_t)D * 4, MM_F32, 68, 0.1f);
    mmk_rmsnorm rn = {.x = view2d(x, MM_F32, R, D, D), .y = view2d(hn, MM_F16, R, D, D), .mode = MMK_NORM_RMS, .w = w,
                      .eps = 1e-6f};
    bench_glue_pair("vae_rmsnorm_f32_f16_2048", run_rmsnorm, &rn, (double)R * D * 6);
    mmk_view qv = view3d(qkv, MM_F16, R, NH, hd, 3 * D);
    qv.stride[1] = 3 * hd; /* per-head [q | k | v] */
    mmk_rmsnorm hq = {.x = qv, .y = qv, .mode = MMK_NORM_RMS, .eps = 1e-5f};
    bench_glue_pair("vae_head_rmsnorm_q_f16_64", run_rmsnorm, &hq, (double)R * D * 4);
    rope_args ra = {qv, qv, view2d(cs, MM_F16, R, rot, rot), view2d(sn, MM_F16, R, rot, rot), (int)rot};
    bench_glue_pair("vae_rope_q_f16_48of64", run_rope, &ra, (double)R * D * 4 + (double)R * rot * 4);
    gated_args ga = {view2d(x, MM_F32, R, D, D), view2d(hn, MM_F16, R, D, D), gate, 0, NULL};
    bench_glue_pair("vae_gated_f32_f16_2048", run_gated, &ga, (double)R * D * 10);
    mmk_ew glu = {.op = MMK_EW_GLU, .act = MMK_ACT_SILU, .y = view2d(g, MM_F16, R, F, F),
                  .a = view2d(u, MM_F16, R, F, 2 * F), .b = view2d(u + F, MM_F16, R, F, 2 * F)};
    bench_glue_pair("vae_glu_silu_f16_8192", run_ew, &glu, (double)R * F * 6);
    void *bufs[] = {x, hn, qkv, u, g, cs, sn, w, gate};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mm_cuda_free(DEV, bufs[i]);
}

int main(int argc, char **argv)
{
    int S = 38010;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            S = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_kernels [--rows S] [--reps N] [--only SUBSTRING]\n");
            return 2;
        }
    }
    if (mm_cuda_count() < 1) {
        fprintf(stderr, "bench_kernels: no CUDA device\n");
        return 1;
    }
    mm_cuda_device_info info;
    if (mm_cuda_device_info_get(DEV, &info, &err))
        die("device info");
    printf("# %s, sm_%d%d, %d SMs, %.0f GiB; S=%d; attention path %s\n", info.name, info.cc_major, info.cc_minor,
           info.sm_count, info.total_bytes / 1073741824.0, S, mmk_attention_path(DEV));
    const int H = 5376, NH = 56, D = 128, F = 14336, QKV = 3 * NH * D;
    mmk_stream st = (mmk_stream)mm_cuda_stream(DEV);
    bench_vae_glue();

    /* Activations and weights of one block. */
    int8_t *xq = dalloc((size_t)S * F, MM_I8, 1, 0);        /* largest K: fc2 */
    float *sx = dalloc((size_t)S * 4, MM_F32, 2, 0.01f);
    mmk_bf16 *out = dalloc((size_t)S * 2 * F * 2, MM_BF16, 3, 1); /* largest N: fc1 */
    struct {
        const char *name;
        int N, K;
    } lin[4] = {{"qkv", QKV, H}, {"out", H, NH * D}, {"fc1", 2 * F, H}, {"fc2", H, F}};
    for (int l = 0; l < 4; l++) {
        int N = lin[l].N, K = lin[l].K;
        int8_t *wq = dalloc((size_t)N * K, MM_I8, 10 + l, 0);
        float *sw = dalloc((size_t)N * 4, MM_F32, 20 + l, 0.001f);
        double flops = 2.0 * S * N * K;
        char name[64];
        mmk_qlinear q = {.M = S, .N = N, .K = K, .xq = xq, .ldx = K, .sx = sx, .wq = wq, .ldw = K, .sw = sw,
                         .y = out, .ldy = N, .y_dtype = MM_BF16};
        snprintf(name, sizeof name, "i8_%s", lin[l].name);
        bench(name, run_qlinear, &q, flops, 0);
        /* the int8 GEMM alone (int32 out), to separate the epilogue's share */
        int32_t *acc = mm_cuda_malloc(DEV, (size_t)4096 * N * 4, &err);
        if (!acc)
            die("allocation");
        mmk_gemm g = {.M = 4096, .N = N, .K = K, .ab_dtype = MM_I8, .a = xq, .lda = K, .w = wq, .ldw = K, .y = acc,
                      .ldy = N, .y_dtype = MM_I32};
        snprintf(name, sizeof name, "i8raw4096_%s", lin[l].name);
        bench(name, run_gemm, &g, 2.0 * 4096 * N * K, 0);
        mm_cuda_free(DEV, acc);
        mm_cuda_free(DEV, wq);
        mm_cuda_free(DEV, sw);
        /* the same shape in bf16 through cuBLASLt */
        mmk_bf16 *a16 = dalloc((size_t)S * K * 2, MM_BF16, 30 + l, 1), *w16 = dalloc((size_t)N * K * 2, MM_BF16, 40 + l, 0.02f);
        mmk_gemm gb = {.M = S, .N = N, .K = K, .ab_dtype = MM_BF16, .a = a16, .lda = K, .w = w16, .ldw = K, .y = out,
                       .ldy = N, .y_dtype = MM_BF16};
        snprintf(name, sizeof name, "bf16_%s", lin[l].name);
        bench(name, run_gemm, &gb, flops, 0);
        mm_cuda_free(DEV, a16);
        mm_cuda_free(DEV, w16);
    }

    /* Attention over the fused qkv buffer, as the DiT calls it. */
    mmk_bf16 *qkv = dalloc((size_t)S * QKV * 2, MM_BF16, 50, 2);
    mmk_bf16 *o = dalloc((size_t)S * NH * D * 2, MM_BF16, 51, 1);
    mmk_attention at = {.seq_q = S, .seq_k = S, .heads_q = NH, .heads_kv = NH, .head_dim = D, .dtype = MM_BF16, .q = qkv,
                        .k = qkv + NH * D, .v = qkv + 2 * NH * D, .ldq = QKV, .ldk = QKV, .ldv = QKV, .o = o,
                        .ldo = NH * D, .scale = 0.08838834764831845f, .n_seqs = 1, .max_seq_q = S};
    bench("attn_s38k_h56_d128", run_attention, &at, 4.0 * S * (double)S * D * NH, 0);
    mmk_attention atc = at;
    atc.causal = 1;
    bench("attn_causal_h56_d128", run_attention, &atc, 2.0 * S * (double)S * D * NH, 0);
    mmk_policy saved = policy_with(POL_ATTENTION, 1);
    int have90 = strncmp(mmk_attention_path(DEV), "sm90p", 5) == 0;
    mmk_policy_set(&saved);
    if (have90) {
        bench("attn90p_s38k_h56_d128", run_attention_sm90p, &at, 4.0 * S * (double)S * D * NH, 0);
        bench("attn90p_causal_h56_d128", run_attention_sm90p, &atc, 2.0 * S * (double)S * D * NH, 0);
    } else {
        printf("# no sm90 attention path on this device/build\n");
    }

    /* Memory-bound glue at the same sizes. */
    mmk_bf16 *x = dalloc((size_t)S * H * 2, MM_BF16, 60, 3);
    float *wn = dalloc((size_t)H * 4, MM_F32, 61, 1);
    float *mod = dalloc((size_t)9 * 6 * H * 4, MM_F32, 62, 0.5f);
    int32_t *idx = mm_cuda_malloc(DEV, (size_t)S * 4, &err);
    if (!idx || mm_cuda_memset0(DEV, idx, (size_t)S * 4, &err))
        die("index");
    mmk_convrot_quant c1 = {.rows = S, .K = H, .group = 256, .pre = MMK_PRE_RMSNORM_MOD, .x = x, .x_dtype = MM_BF16,
                            .ldx = H, .norm_w = wn, .eps = 1e-5f, .shift = mod, .scale = mod + H, .ld_mod = 6 * H,
                            .mod_idx = idx, .q = xq, .ldq = H, .s = sx, .s_stride = 1};
    bench("convrot_rmsnorm_mod_5376", run_convrot, &c1, 0, (double)S * H * 3);
    bench("convrot_rmsnorm_mod_5376_row", run_convrot_row, &c1, 0, (double)S * H * 3);
    mmk_convrot_quant c2 = {.rows = S, .K = F, .group = 256, .pre = MMK_PRE_SWIGLU, .x = out, .x_dtype = MM_BF16,
                            .ldx = 2 * F, .q = xq, .ldq = F, .s = sx, .s_stride = 1};
    bench("convrot_swiglu_14336", run_convrot, &c2, 0, (double)S * F * 5);
    bench("convrot_swiglu_14336_row", run_convrot_row, &c2, 0, (double)S * F * 5);
    mmk_convrot_quant c3 = {.rows = S, .K = NH * D, .group = 256, .x = o, .x_dtype = MM_BF16, .ldx = NH * D, .q = xq,
                            .ldq = NH * D, .s = sx, .s_stride = 1};
    bench("convrot_plain_7168", run_convrot, &c3, 0, (double)S * NH * D * 3);
    bench("convrot_plain_7168_row", run_convrot_row, &c3, 0, (double)S * NH * D * 3);
    mmk_bf16 *cs = dalloc((size_t)S * 96 * 2, MM_BF16, 63, 1), *sn = dalloc((size_t)S * 96 * 2, MM_BF16, 64, 1);
    mmk_qk_norm_rope qk = {.rows = S, .heads_q = NH, .heads_k = NH, .head_dim = D, .q = qkv, .ldq = QKV,
                           .k = qkv + NH * D, .ldk = QKV, .wq = wn, .wk = wn, .eps = 1e-5f, .cos = cs, .sin = sn,
                           .ld_rope = 96, .rot_dim = 96};
    bench("qk_norm_rope", run_qk, &qk, 0, (double)S * 2 * NH * D * 2 * 2);
    bench("qk_norm_rope_warp", run_qk_warp, &qk, 0, (double)S * 2 * NH * D * 2 * 2);
    mmk_rmsnorm rn = {.x = view2d(x, MM_BF16, S, H, H), .y = view2d(out, MM_BF16, S, H, H), .mode = MMK_NORM_RMS_MOD,
                      .w = wn, .eps = 1e-5f, .scale = mod + H, .shift = mod, .ld_mod = 6 * H, .idx = idx,
                      .idx_stride = 1};
    bench("rmsnorm_mod_5376", run_rmsnorm, &rn, 0, (double)S * H * 4);
    gated_args ga = {view2d(x, MM_BF16, S, H, H), view2d(out, MM_BF16, S, H, H), mod + 2 * H, 6 * H, idx};
    bench("gated_add_5376", run_gated, &ga, 0, (double)S * H * 6);

    /* the DiT's op-level path (backend/ops.h → these kernels) */
    mmk_ew glu = {.op = MMK_EW_GLU, .act = MMK_ACT_SILU, .y = view2d(qkv, MM_BF16, S, F / 2, F / 2),
                  .a = view2d(out, MM_BF16, S, F / 2, 2 * F), .b = view2d(out + F / 2, MM_BF16, S, F / 2, 2 * F)};
    bench("glu_silu_7168_op", run_ew, &glu, 0, (double)S * (F / 2) * 6);
    mmk_rmsnorm hn = {.x = view3d(qkv, MM_BF16, S, NH, D, QKV), .y = view3d(qkv, MM_BF16, S, NH, D, QKV),
                      .mode = MMK_NORM_RMS, .w = wn, .eps = 1e-5f};
    bench("head_rmsnorm_q_op", run_rmsnorm, &hn, 0, (double)S * NH * D * 4);
    mmk_view csv = view2d(cs, MM_BF16, S, 96, 96), snv = view2d(sn, MM_BF16, S, 96, 96);
    rope_args ra = {view3d(qkv, MM_BF16, S, NH, D, QKV), view3d(qkv, MM_BF16, S, NH, D, QKV), csv, snv, 96};
    bench("rope_q_op", run_rope, &ra, 0, (double)S * NH * D * 4);

    /* The Ulysses pack / unpack at 2 GPUs (src/parallel/ulysses.c, S/2 rows):
     * q, a column block of the fused qkv rows [S/2, 56, 128] (row stride
     * 3·7168), to [2, S/2, 28·128] contiguous, by the raw-row copy kernel
     * and by the element-wise walk it replaced (`_ew`); the unpack back into
     * [S/2, 56·128] rows; a plain memcpy of the same bytes as the anchor.
     * GB/s count read + write. */
    {
        const int64_t n = S / 2, N = 2, hl = NH / 2;
        const double bytes = 2.0 * n * NH * D * 2;
        mmk_view grouped = {.p = o, .dtype = MM_BF16, .ndim = 4, .shape = {N, n, hl, D},
                            .stride = {n * hl * D, hl * D, D, 1}};
        mmk_view q_by_group = {.p = qkv, .dtype = MM_BF16, .ndim = 4, .shape = {N, n, hl, D},
                               .stride = {hl * D, QKV, D, 1}};
        mmk_view out_by_group = {.p = x, .dtype = MM_BF16, .ndim = 4, .shape = {N, n, hl, D},
                                 .stride = {hl * D, NH * D, D, 1}};
        mmk_ew pack = {.op = MMK_EW_COPY, .y = grouped, .a = q_by_group};
        bench("ulysses_pack_q_n19005", run_ew, &pack, 0, bytes);
        mmk_ew pack_ew = pack;
        pack_ew.elementwise_copy = 1;
        bench("ulysses_pack_q_n19005_ew", run_ew, &pack_ew, 0, bytes);
        mmk_ew unpack = {.op = MMK_EW_COPY, .y = out_by_group, .a = grouped};
        bench("ulysses_unpack_n19005", run_ew, &unpack, 0, bytes);
        mmk_view flat_src = view2d(qkv, MM_BF16, 1, n * NH * D, n * NH * D),
                 flat_dst = view2d(o, MM_BF16, 1, n * NH * D, n * NH * D);
        mmk_ew anchor = {.op = MMK_EW_COPY, .y = flat_dst, .a = flat_src};
        bench("ulysses_memcpy_anchor", run_ew, &anchor, 0, bytes);
    }

    size_t in_use, peak, reserved;
    mm_cuda_memory_stats(DEV, &in_use, &peak, &reserved);
    printf("# memory: in use %.2f GiB, peak %.2f GiB, reserved %.2f GiB\n", in_use / 1073741824.0,
           peak / 1073741824.0, reserved / 1073741824.0);
    if (mm_cuda_sync(DEV, &err))
        die("final sync");
    (void)st;
    return 0;
}
