/* The DiT's Hopper attention (backend/cuda/cuda_speed.h, kernels/attn_fa3.cu)
 * against its CPU twins. Inputs are laid out as the DiT passes them: q, k, v
 * are the thirds of one fused [S, 3·H·128] buffer, out a [S, H·128] buffer
 * poisoned with NaN first (every element must be written). Sequence lengths
 * cover one partial tile, exact tiles, many tiles with a ragged end (down to
 * a last tile of one key); GQA; both schedules (ping-pong on and off); large
 * score magnitudes (the running max must move); an outlier channel in q and
 * k; DiT-like inputs (normalized q/k with channel gains, a key offset, v with
 * channel means).
 *
 * Exact mode must agree with mm_attention on the CPU in f32 over the same
 * bf16 inputs as bf16 attention does (rel_l2 < 1e-2: P and the output are
 * rounded to bf16). The fast modes (int8 q·k + e4m3 p·v; int8 q·k + bf16
 * p·v) are held to two things (tests/unit/fa3_fast_model.h): the kernel
 * computes what the CPU model of its rounding computes (rel_l2 < 1e-2
 * between them: only summation order, exp2 approximations and the odd
 * rounding tie differ), and its error against exact attention stays inside
 * the first-order error budget of those inputs (× 1.25; the budget sits a
 * little above what the model measures, test_fa3_fast_model).
 *
 * Every case names the kernel variant it runs (kernels/mmk_fa3.h): the
 * plain kernels (MMH3_FA3_RESCALE=0, MMH3_FA3_LEAN=0, MMH3_FA3_KEYS=128),
 * exact mode with conditional rescaling, exact mode with 176- and 192-key
 * tiles (alone and with rescaling; sequence lengths around their tile
 * edges), fast mode lean (row sums on the tensor cores, the
 * conversion's bias folded) — each held
 * to its mode's tolerances, the lean kernel against the model of its own
 * rounding (FA3_MODEL_FAST_LEAN: sums of the e4m3 P) — and the defaults
 * (nothing set: what the DiT runs). One more input kind for the rescaling:
 * key norms that grow along the sequence, so that each row's max rises
 * tile after tile by less and by more than the threshold. The policy runs
 * each variant's own self-check.
 *
 * Without a GPU (or on a GPU without the kernel) it prints SKIP;
 * MMH3_REQUIRE_GPU=1 turns a missing sm_90 GPU into a failure. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_speed.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "fa3_fast_model.h"
#include "kernels/mmk_fa3.h"
#include "test.h"

static mm_ctx *gpu, *cpu;
/* MMH3_FA3_RESCALE, _LEAN, _KEYS for the next runs: NULL is "0" ("128"
 * for the keys: the plain kernels), unless g_defaults (all unset: the
 * defaults) */
static const char *g_rescale, *g_lean, *g_keys;
static bool g_defaults;

static void set_variant_env(void)
{
    if (g_defaults)
        return;
    setenv("MMH3_FA3_RESCALE", g_rescale ? g_rescale : "0", 1);
    setenv("MMH3_FA3_LEAN", g_lean ? g_lean : "0", 1);
    setenv("MMH3_FA3_KEYS", g_keys ? g_keys : "128", 1);
}

static void unset_variant_env(void)
{
    unsetenv("MMH3_FA3_RESCALE");
    unsetenv("MMH3_FA3_LEAN");
    unsetenv("MMH3_FA3_KEYS");
}

/* Does fast mode run the lean kernel in the next runs (with ping-pong)? */
static bool lean_runs(void)
{
    if (!g_defaults)
        return g_lean && strcmp(g_lean, "1") == 0;
#ifdef MMH3_HAVE_CUDA
    return (mmk_fa3_env_variant(MMK_FA3_FAST) & MMK_FA3_OPT_LEAN) != 0;
#else
    return false;
#endif
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((double)((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static float normal(void) { return (uniform() + uniform() + uniform() + uniform()) * 0.8660254f; }

typedef struct result {
    double rel_l2;    /* against exact attention */
    double rel_model; /* fast modes: against the CPU model of the kernel's rounding */
    double budget;    /* fast modes: the predicted rel_l2 against exact */
    long nonfinite;
    int ok; /* ran */
} result;

enum { IN_OUTLIER, IN_DIT, IN_RAMP };

/* q/k values of scale `qk` (large values = sharp softmax) with an outlier
 * channel, or DiT-like rows (per-head RMS-normalized q/k with channel gains
 * × qk, a per-head key offset; v with channel means), or normal values with
 * k of row r scaled by 0.25 + 2.75 r / S (IN_RAMP: the scores' spread, and
 * with it each row's max, grows along the keys). */
static void fill(float *hf, uint16_t *h, int S, int64_t W, int64_t A, int64_t Akv, float qk, int kind)
{
    float gain[128], koff[16][128], vmean[16][128];
    for (int c = 0; c < 128; c++)
        gain[c] = expf(0.5f * normal()) * (c == 5 ? 4.f : 1.f);
    for (int g = 0; g < 16; g++)
        for (int c = 0; c < 128; c++)
            koff[g][c] = 1.5f * normal(), vmean[g][c] = 2.f * normal();
    for (int64_t r = 0; r < S; r++) {
        float *row = hf + r * W;
        for (int64_t c = 0; c < W; c++) {
            const bool qkc = c < A + Akv;
            if (kind == IN_OUTLIER)
                row[c] = normal() * (qkc ? qk : 1.0f) * (qkc && c % 128 == 5 ? 6.0f : 1.0f);
            else if (kind == IN_RAMP)
                row[c] = normal() * (qkc ? qk : 1.0f) * (c >= A && qkc ? 0.25f + 2.75f * (float)r / (float)S : 1.0f);
            else if (qkc)
                row[c] = normal() + (c >= A ? koff[((c - A) / 128) % 16][c % 128] : 0.f);
            else
                row[c] = normal() + vmean[((c - A - Akv) / 128) % 16][c % 128];
        }
        if (kind == IN_DIT)
            for (int64_t hh = 0; hh < (A + Akv) / 128; hh++) {
                float *x = row + hh * 128, ss = 0;
                for (int c = 0; c < 128; c++)
                    ss += x[c] * x[c];
                const float inv = 1.f / sqrtf(ss / 128 + 1e-6f);
                for (int c = 0; c < 128; c++)
                    x[c] *= inv * gain[c] * qk;
            }
        for (int64_t c = 0; c < W; c++) {
            h[r * W + c] = mm_f32_to_bf16(row[c]);
            row[c] = mm_bf16_to_f32(h[r * W + c]);
        }
    }
}

/* q, k, v as [S, heads, 128] views of the thirds of one fused
 * [S, (hq + 2·hkv)·128] buffer, as the DiT passes them. */
static void qkv_views(const mm_tensor *fused, int hq, int hkv, mm_tensor *q, mm_tensor *k, mm_tensor *v)
{
    const int64_t A = (int64_t)hq * 128, Akv = (int64_t)hkv * 128, hd[2] = {hq, 128}, hdkv[2] = {hkv, 128};
    const mm_tensor q3 = mm_tensor_narrow(fused, 1, 0, A), k3 = mm_tensor_narrow(fused, 1, A, Akv);
    const mm_tensor v3 = mm_tensor_narrow(fused, 1, A + Akv, Akv);
    *q = mm_tensor_unflatten(&q3, 1, 2, hd);
    *k = mm_tensor_unflatten(&k3, 1, 2, hdkv);
    *v = mm_tensor_unflatten(&v3, 1, 2, hdkv);
}

/* One attention of S rows, hq query heads over hkv kv heads, on the GPU in
 * `mode` and on the CPU. */
static result run_case(int S, int hq, int hkv, float qk, int kind, mm_fa3_mode mode, int pingpong)
{
    result res = {0, 0, 0, 0, 0};
    const int D = 128;
    const int64_t A = (int64_t)hq * D, Akv = (int64_t)hkv * D, W = A + 2 * Akv;
    const int64_t n = (int64_t)S * W, no = (int64_t)S * A;
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    float *hf = malloc(sizeof(float) * (size_t)n);
    uint16_t *ob = malloc(sizeof(uint16_t) * (size_t)no);
    float *ref = malloc(sizeof(float) * (size_t)no), *model = malloc(sizeof(float) * (size_t)no);
    float *got = malloc(sizeof(float) * (size_t)no);
    fill(hf, h, S, W, A, Akv, qk, kind);
    mm_error err = {{0}};
    mm_tensor dq = {0}, dout = {0};
    const int64_t shp[2] = {S, W}, oshp[2] = {S, A};
    if (mm_tensor_alloc(&dq, mm_ctx_device(gpu), MM_BF16, 2, shp, &err) ||
        mm_tensor_alloc(&dout, mm_ctx_device(gpu), MM_BF16, 2, oshp, &err)) {
        MM_EXPECT(0, "allocating: %s", err.msg);
        goto done;
    }
    mm_tensor hq_t = mm_tensor_wrap(h, mm_cpu(), MM_BF16, 2, shp);
    mm_copy(gpu, &dq, &hq_t);
    mm_fill(gpu, &dout, NAN);

    const int64_t hd[2] = {hq, D};
    mm_tensor q, k, v, o = mm_tensor_unflatten(&dout, 1, 2, hd);
    qkv_views(&dq, hq, hkv, &q, &k, &v);
    if (!mm_cuda_fa3_fits(gpu, &o, &q, &k, &v)) {
        MM_EXPECT(0, "the views do not fit the kernel");
        goto done;
    }
    char pp[4];
    snprintf(pp, sizeof pp, "%d", pingpong);
    setenv("MMH3_FA3_PINGPONG", pp, 1);
    set_variant_env();
    mm_cuda_attention_fa3(gpu, &o, &q, &k, &v, 0.0f, mode);
    unsetenv("MMH3_FA3_PINGPONG");
    unset_variant_env();
    mm_tensor hob = mm_tensor_wrap(ob, mm_cpu(), MM_BF16, 2, oshp);
    mm_copy(gpu, &hob, &dout);
    if (mm_ctx_sync(gpu, &err) != 0) {
        MM_EXPECT(0, "GPU: %s", err.msg);
        goto done;
    }
    for (int64_t i = 0; i < no; i++) {
        got[i] = mm_bf16_to_f32(ob[i]);
        res.nonfinite += !isfinite(got[i]);
    }

    if (mode == MM_FA3_EXACT) {
        /* CPU twin in f32 on the same (bf16-rounded) values */
        mm_tensor cq = mm_tensor_wrap(hf, mm_cpu(), MM_F32, 2, shp), cqh, ckh, cvh;
        qkv_views(&cq, hq, hkv, &cqh, &ckh, &cvh);
        mm_tensor cref = mm_tensor_wrap(ref, mm_cpu(), MM_F32, 3, (int64_t[]){S, hq, D});
        mm_attention(cpu, &cref, &cqh, &ckh, &cvh, NULL);
        if (mm_ctx_sync(cpu, &err) != 0) {
            MM_EXPECT(0, "CPU: %s", err.msg);
            goto done;
        }
    } else {
        /* the model of the kernel's rounding, exact attention in double, the budget */
        fa3_model_in in = {S, hq, hkv, hf, hf + A, hf + A + Akv, W, W, W, 1.0f / sqrtf(128.f)};
        /* the lean kernel where it runs: fast mode with ping-pong */
        const int fast_model = lean_runs() && pingpong ? FA3_MODEL_FAST_LEAN : FA3_MODEL_FAST;
        res.budget = fa3_model_run(cpu, &in, mode == MM_FA3_FAST ? fast_model : FA3_MODEL_FAST_QK, model, ref, NULL);
        res.rel_model = fa3_rel_l2(got, model, no);
    }
    if (res.nonfinite == 0)
        res.rel_l2 = fa3_rel_l2(got, ref, no);
    res.ok = 1;
done:
    mm_tensor_free(&dq);
    mm_tensor_free(&dout);
    free(h);
    free(hf);
    free(ob);
    free(ref);
    free(model);
    free(got);
    return res;
}

static void check(const char *what, int S, int hq, int hkv, float qk, int kind, mm_fa3_mode mode, int pingpong)
{
    printf("  .. %s: S=%d heads %d/%d q/k scale %.1f %s %s pingpong %d%s%s%s%s%s%s%s%s\n", what, S, hq, hkv, qk,
           kind == IN_DIT ? "DiT-like" : kind == IN_RAMP ? "key ramp" : "outlier",
           mode == MM_FA3_FAST ? "int8+e4m3" : mode == MM_FA3_FAST_QK ? "int8+bf16" : "bf16", pingpong,
           g_defaults ? " (defaults" : "", g_defaults ? ")" : "", g_rescale ? " MMH3_FA3_RESCALE=" : "",
           g_rescale ? g_rescale : "", g_lean ? " MMH3_FA3_LEAN=" : "", g_lean ? g_lean : "",
           g_keys ? " MMH3_FA3_KEYS=" : "", g_keys ? g_keys : "");
    fflush(stdout);
    result r = run_case(S, hq, hkv, qk, kind, mode, pingpong);
    if (!r.ok)
        return;
    MM_EXPECT(r.nonfinite == 0, "%s: %ld outputs unwritten or not finite", what, r.nonfinite);
    if (mode == MM_FA3_EXACT) {
        printf("     rel_l2 %.3g vs f32 (tolerance 0.01)\n", r.rel_l2);
        MM_EXPECT(r.rel_l2 < 1e-2, "%s: rel_l2 %.4g >= 0.01", what, r.rel_l2);
    } else {
        const double tol = 1.25 * r.budget;
        printf("     rel_l2 %.4f vs exact (budget %.4f, tolerance %.4f), %.2g vs the CPU model of its rounding\n",
               r.rel_l2, r.budget, tol, r.rel_model);
        MM_EXPECT(r.rel_model < 1e-2, "%s: the kernel differs from the model of its rounding: rel_l2 %.4g", what,
                  r.rel_model);
        MM_EXPECT(r.rel_l2 < tol, "%s: rel_l2 %.4g >= 1.25 x budget %.4g", what, r.rel_l2, r.budget);
    }
    fflush(stdout);
}

static void test_exact_one_partial_tile(void) { check("exact", 77, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 1); }
static void test_exact_one_row(void) { check("exact", 1, 1, 1, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 1); }
static void test_exact_whole_tiles(void) { check("exact", 256, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 1); }
static void test_exact_ragged_many_tiles(void) { check("exact", 1000, 3, 3, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 1); }
static void test_exact_no_pingpong(void) { check("exact", 1000, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 0); }
static void test_exact_gqa(void) { check("exact", 517, 4, 2, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 1); }
static void test_exact_sharp_softmax(void) { check("exact", 700, 2, 2, 3.0f, IN_OUTLIER, MM_FA3_EXACT, 1); }
static void test_exact_long(void) { check("exact", 2949, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 1); }
static void test_fast_one_row(void) { check("fast", 1, 1, 1, 1.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_fast_ragged(void) { check("fast", 1000, 3, 3, 1.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_fast_no_pingpong(void) { check("fast", 333, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_FAST, 0); }
static void test_fast_gqa_sharp(void) { check("fast", 517, 4, 2, 3.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_fast_long_one_key_tail(void) { check("fast", 2049, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_fast_dit_like(void) { check("fast", 1000, 2, 2, 1.0f, IN_DIT, MM_FA3_FAST, 1); }
static void test_fast_dit_like_sharp_gqa(void) { check("fast", 700, 4, 2, 2.0f, IN_DIT, MM_FA3_FAST, 0); }
static void test_fastqk_ragged(void) { check("fast-qk", 1000, 3, 3, 1.0f, IN_OUTLIER, MM_FA3_FAST_QK, 1); }
static void test_fastqk_gqa_no_pingpong(void) { check("fast-qk", 517, 4, 2, 1.0f, IN_OUTLIER, MM_FA3_FAST_QK, 0); }
static void test_fastqk_dit_like(void) { check("fast-qk", 1000, 2, 2, 1.0f, IN_DIT, MM_FA3_FAST_QK, 1); }

/* exact mode with conditional rescaling: the plain kernel's cases and tolerance */
static void cr_check(int S, int hq, int hkv, float qk, int kind)
{
    g_rescale = "1";
    check("exact", S, hq, hkv, qk, kind, MM_FA3_EXACT, 1);
    g_rescale = NULL;
}
static void test_rescale_partial_tile(void) { cr_check(77, 2, 2, 1.0f, IN_OUTLIER); }
static void test_rescale_one_row(void) { cr_check(1, 1, 1, 1.0f, IN_OUTLIER); }
static void test_rescale_ragged(void) { cr_check(1000, 3, 3, 1.0f, IN_OUTLIER); }
static void test_rescale_gqa(void) { cr_check(517, 4, 2, 1.0f, IN_OUTLIER); }
static void test_rescale_sharp(void) { cr_check(700, 2, 2, 3.0f, IN_OUTLIER); }
static void test_rescale_dit_like(void) { cr_check(1000, 2, 2, 2.0f, IN_DIT); }
static void test_rescale_rising_max(void)
{
    cr_check(2949, 2, 2, 1.0f, IN_RAMP);
    cr_check(1500, 2, 2, 2.5f, IN_RAMP);
}

/* exact mode with 176- or 192-key tiles, plain and with conditional
 * rescaling: the exact kernel's tolerance; lengths at and around one and two
 * tiles of that width (a last tile of one key, of one key short), ragged,
 * GQA, sharp, rising maxima, DiT-like */
static void keys_check(const char *keys, const char *rescale, int S, int hq, int hkv, float qk, int kind)
{
    g_keys = keys, g_rescale = rescale;
    check("exact", S, hq, hkv, qk, kind, MM_FA3_EXACT, 1);
    g_keys = g_rescale = NULL;
}
static void keys_cases(const char *keys, const char *rescale)
{
    const int w = atoi(keys);
    keys_check(keys, rescale, 1, 1, 1, 1.0f, IN_OUTLIER);
    keys_check(keys, rescale, 77, 2, 2, 1.0f, IN_OUTLIER);
    keys_check(keys, rescale, w, 2, 2, 1.0f, IN_OUTLIER);
    keys_check(keys, rescale, w + 1, 2, 2, 1.0f, IN_OUTLIER);
    keys_check(keys, rescale, 2 * w - 1, 2, 2, 1.0f, IN_OUTLIER);
    keys_check(keys, rescale, 1000, 3, 3, 1.0f, IN_OUTLIER);
    keys_check(keys, rescale, 517, 4, 2, 1.0f, IN_OUTLIER);
    keys_check(keys, rescale, 700, 2, 2, 3.0f, IN_OUTLIER);
    keys_check(keys, rescale, 1000, 2, 2, 2.0f, IN_DIT);
    keys_check(keys, rescale, 2949, 2, 2, 1.0f, IN_RAMP);
    keys_check(keys, rescale, 1500, 2, 2, 2.5f, IN_RAMP);
}
static void test_keys176(void) { keys_cases("176", NULL); }
static void test_keys176_rescale(void) { keys_cases("176", "1"); }
static void test_keys192(void) { keys_cases("192", NULL); }
static void test_keys192_rescale(void) { keys_cases("192", "1"); }

/* fast mode lean: fast mode's cases and tolerances */
static void lean_check(const char *what, int S, int hq, int hkv, float qk, int kind, mm_fa3_mode mode, int pingpong)
{
    g_lean = "1";
    check(what, S, hq, hkv, qk, kind, mode, pingpong);
    g_lean = NULL;
}
static void test_lean_one_row(void) { lean_check("fast", 1, 1, 1, 1.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_lean_two_tiles(void) { lean_check("fast", 200, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_lean_ragged(void) { lean_check("fast", 1000, 3, 3, 1.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_lean_gqa_sharp(void) { lean_check("fast", 517, 4, 2, 3.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_lean_long_one_key_tail(void) { lean_check("fast", 2049, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_FAST, 1); }
static void test_lean_dit_like(void)
{
    lean_check("fast", 1000, 2, 2, 1.0f, IN_DIT, MM_FA3_FAST, 1);
    lean_check("fast", 700, 4, 2, 2.0f, IN_DIT, MM_FA3_FAST, 1);
}
static void test_lean_rising_max(void) { lean_check("fast", 1500, 2, 2, 2.5f, IN_RAMP, MM_FA3_FAST, 1); }
/* not built there: the plain kernels run (the exact kernel, fast without ping-pong, fast-qk) */
static void test_variants_elsewhere_plain(void)
{
    g_rescale = "1";
    lean_check("exact", 1000, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 0);
    lean_check("fast", 333, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_FAST, 0);
    lean_check("fast-qk", 1000, 2, 2, 1.0f, IN_DIT, MM_FA3_FAST_QK, 1);
    g_rescale = NULL;
    /* wider key tiles are exact mode's with ping-pong: fast modes and exact without ping-pong run 128 */
    g_keys = "176";
    check("exact", 1000, 2, 2, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 0);
    lean_check("fast", 1000, 2, 2, 1.0f, IN_DIT, MM_FA3_FAST, 1);
    check("fast-qk", 517, 4, 2, 1.0f, IN_OUTLIER, MM_FA3_FAST_QK, 1);
    g_keys = NULL;
}

/* nothing set: the defaults, what the DiT runs */
static void test_defaults(void)
{
    g_defaults = true;
    check("exact", 1000, 3, 3, 1.0f, IN_OUTLIER, MM_FA3_EXACT, 1);
    check("exact", 1500, 2, 2, 2.5f, IN_RAMP, MM_FA3_EXACT, 1);
    check("fast", 1000, 3, 3, 1.0f, IN_OUTLIER, MM_FA3_FAST, 1);
    check("fast", 1000, 2, 2, 1.0f, IN_DIT, MM_FA3_FAST, 1);
    check("fast-qk", 517, 4, 2, 1.0f, IN_OUTLIER, MM_FA3_FAST_QK, 1);
    g_defaults = false;
}

/* Fewer queries than keys (the reference KV cache's reduced forwards: the
 * rows not cached attend to themselves and the cached rows): every output
 * row depends on its own query and all keys only, so the first sq rows of a
 * run over all S rows are the answer, bit for bit, in every mode; rows past
 * sq are not written; exact mode also against the CPU twin. */
static void cross_case(int S, int sq, int hq, int hkv, mm_fa3_mode mode)
{
    printf("  .. %d queries over %d keys, heads %d/%d, mode %d\n", sq, S, hq, hkv, (int)mode);
    fflush(stdout);
    const int D = 128;
    const int64_t A = (int64_t)hq * D, Akv = (int64_t)hkv * D, W = A + 2 * Akv;
    const int64_t n = (int64_t)S * W, no = (int64_t)S * A;
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n), *full = malloc(sizeof(uint16_t) * (size_t)no);
    uint16_t *part = malloc(sizeof(uint16_t) * (size_t)no);
    float *hf = malloc(sizeof(float) * (size_t)n), *ref = malloc(sizeof(float) * (size_t)(sq * A));
    fill(hf, h, S, W, A, Akv, 1.0f, IN_DIT);
    mm_error err = {{0}};
    mm_tensor dq = {0}, d_full = {0}, d_part = {0};
    const int64_t shp[2] = {S, W}, oshp[2] = {S, A}, hd[2] = {hq, D};
    if (mm_tensor_alloc(&dq, mm_ctx_device(gpu), MM_BF16, 2, shp, &err) ||
        mm_tensor_alloc(&d_full, mm_ctx_device(gpu), MM_BF16, 2, oshp, &err) ||
        mm_tensor_alloc(&d_part, mm_ctx_device(gpu), MM_BF16, 2, oshp, &err)) {
        MM_EXPECT(0, "allocating: %s", err.msg);
        goto done;
    }
    mm_tensor hq_t = mm_tensor_wrap(h, mm_cpu(), MM_BF16, 2, shp);
    mm_copy(gpu, &dq, &hq_t);
    mm_fill(gpu, &d_full, NAN);
    mm_fill(gpu, &d_part, NAN);
    mm_tensor q, k, v, of = mm_tensor_unflatten(&d_full, 1, 2, hd);
    qkv_views(&dq, hq, hkv, &q, &k, &v);
    mm_tensor op3 = mm_tensor_unflatten(&d_part, 1, 2, hd);
    mm_tensor qs = mm_tensor_narrow(&q, 0, 0, sq), op = mm_tensor_narrow(&op3, 0, 0, sq);
    if (!mm_cuda_fa3_fits(gpu, &op, &qs, &k, &v)) {
        MM_EXPECT(0, "%d queries over %d keys do not fit the kernel", sq, S);
        goto done;
    }
    set_variant_env();
    mm_cuda_attention_fa3(gpu, &of, &q, &k, &v, 0.0f, mode);
    mm_cuda_attention_fa3(gpu, &op, &qs, &k, &v, 0.0f, mode);
    unset_variant_env();
    mm_tensor hf_t = mm_tensor_wrap(full, mm_cpu(), MM_BF16, 2, oshp), hp_t = mm_tensor_wrap(part, mm_cpu(), MM_BF16, 2, oshp);
    mm_copy(gpu, &hf_t, &d_full);
    mm_copy(gpu, &hp_t, &d_part);
    if (mm_ctx_sync(gpu, &err) != 0) {
        MM_EXPECT(0, "GPU: %s", err.msg);
        goto done;
    }
    const size_t nq = (size_t)sq * (size_t)A;
    MM_EXPECT(memcmp(full, part, nq * 2) == 0, "%d queries over %d keys differ from the first rows of the full run", sq,
              S);
    long written = 0;
    for (size_t i = nq; i < (size_t)no; i++)
        written += !isnan(mm_bf16_to_f32(part[i]));
    MM_EXPECT(written == 0, "%ld outputs past the %d query rows written", written, sq);
    if (mode == MM_FA3_EXACT) {
        mm_tensor cq = mm_tensor_wrap(hf, mm_cpu(), MM_F32, 2, shp), cqh, ckh, cvh;
        qkv_views(&cq, hq, hkv, &cqh, &ckh, &cvh);
        const mm_tensor cqs = mm_tensor_narrow(&cqh, 0, 0, sq);
        mm_tensor cref = mm_tensor_wrap(ref, mm_cpu(), MM_F32, 3, (int64_t[]){sq, hq, D});
        mm_attention(cpu, &cref, &cqs, &ckh, &cvh, NULL);
        if (mm_ctx_sync(cpu, &err) != 0) {
            MM_EXPECT(0, "CPU: %s", err.msg);
            goto done;
        }
        float *got = malloc(sizeof(float) * nq);
        for (size_t i = 0; i < nq; i++)
            got[i] = mm_bf16_to_f32(part[i]);
        double rel = fa3_rel_l2(got, ref, (int64_t)nq);
        free(got);
        printf("     rel_l2 %.3g vs f32 (tolerance 0.01)\n", rel);
        MM_EXPECT(rel < 1e-2, "%d queries over %d keys: rel_l2 %.4g >= 0.01", sq, S, rel);
    }
done:
    mm_tensor_free(&dq);
    mm_tensor_free(&d_full);
    mm_tensor_free(&d_part);
    free(h);
    free(full);
    free(part);
    free(hf);
    free(ref);
}

static void test_fewer_queries_than_keys(void)
{
    cross_case(1000, 300, 4, 2, MM_FA3_EXACT);
    cross_case(700, 129, 2, 2, MM_FA3_EXACT);
    cross_case(1000, 300, 4, 2, MM_FA3_FAST);
    cross_case(2049, 1, 2, 2, MM_FA3_FAST);
    cross_case(1000, 517, 2, 2, MM_FA3_FAST_QK);
    g_rescale = "1";
    cross_case(1000, 300, 4, 2, MM_FA3_EXACT);
    cross_case(2049, 1, 2, 2, MM_FA3_EXACT);
    g_rescale = NULL;
    g_keys = "176";
    cross_case(1000, 300, 4, 2, MM_FA3_EXACT);
    cross_case(2049, 1, 2, 2, MM_FA3_EXACT);
    g_rescale = "1";
    cross_case(700, 177, 2, 2, MM_FA3_EXACT);
    g_keys = "192";
    cross_case(1000, 300, 4, 2, MM_FA3_EXACT);
    cross_case(383, 192, 2, 2, MM_FA3_EXACT);
    g_keys = g_rescale = NULL;
    g_lean = "1";
    cross_case(1000, 300, 4, 2, MM_FA3_FAST);
    cross_case(2049, 1, 2, 2, MM_FA3_FAST);
    g_lean = NULL;
    g_defaults = true;
    cross_case(1000, 300, 4, 2, MM_FA3_EXACT);
    cross_case(1000, 300, 4, 2, MM_FA3_FAST);
    g_defaults = false;
}

/* How the kernel's warps wait for each other (MMH3_FA3_SLEEP: which
 * mbarrier waits sleep in try_wait, 0-3) must not change a bit of the
 * output, in any mode; a value outside 0-3, and a bad value of a variant
 * variable, is refused with a message that names it. */
static void test_sleep_settings_same_bits(void)
{
    const int S = 1000, hq = 2, hkv = 2, D = 128;
    const int64_t A = (int64_t)hq * D, W = 3 * A, no = (int64_t)S * A;
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(S * W)), *first = malloc(sizeof(uint16_t) * (size_t)no);
    uint16_t *got = malloc(sizeof(uint16_t) * (size_t)no);
    float *hf = malloc(sizeof(float) * (size_t)(S * W));
    fill(hf, h, S, W, A, A, 1.0f, IN_DIT);
    mm_error err = {{0}};
    mm_tensor dq = {0}, dout = {0};
    const int64_t shp[2] = {S, W}, oshp[2] = {S, A}, hd[2] = {hq, D};
    MM_REQUIRE(mm_tensor_alloc(&dq, mm_ctx_device(gpu), MM_BF16, 2, shp, &err) == 0 &&
                   mm_tensor_alloc(&dout, mm_ctx_device(gpu), MM_BF16, 2, oshp, &err) == 0,
               "allocating: %s", err.msg);
    mm_tensor hq_t = mm_tensor_wrap(h, mm_cpu(), MM_BF16, 2, shp), ho = mm_tensor_wrap(got, mm_cpu(), MM_BF16, 2, oshp);
    mm_copy(gpu, &dq, &hq_t);
    mm_tensor q, k, v, o = mm_tensor_unflatten(&dout, 1, 2, hd);
    qkv_views(&dq, hq, hkv, &q, &k, &v);
    static const char *const settings[] = {"", "0", "1", "2", "3"};
    const mm_fa3_mode modes[] = {MM_FA3_EXACT, MM_FA3_FAST, MM_FA3_FAST_QK};
    for (size_t m = 0; m < 3; m++)
        for (size_t i = 0; i < 5; i++) {
            setenv("MMH3_FA3_SLEEP", settings[i], 1);
            mm_fill(gpu, &dout, NAN);
            mm_cuda_attention_fa3(gpu, &o, &q, &k, &v, 0.0f, modes[m]);
            mm_copy(gpu, &ho, &dout);
            if (mm_ctx_sync(gpu, &err) != 0) {
                MM_EXPECT(0, "mode %d MMH3_FA3_SLEEP=%s: %s", (int)modes[m], settings[i], err.msg);
                break;
            }
            if (i == 0)
                memcpy(first, got, sizeof(uint16_t) * (size_t)no);
            else
                MM_EXPECT(memcmp(first, got, sizeof(uint16_t) * (size_t)no) == 0,
                          "mode %d: MMH3_FA3_SLEEP=%s changes the output", (int)modes[m], settings[i]);
        }
    unsetenv("MMH3_FA3_SLEEP");
#ifdef MMH3_HAVE_CUDA /* (this test runs on a GPU only) */
    /* a value outside 0-3: refused by name, before anything is queued */
    setenv("MMH3_FA3_SLEEP", "7", 1);
    mmk_fa3 a;
    memset(&a, 0, sizeof a);
    a.seq = S, a.heads = hq, a.heads_kv = hkv, a.q = q.data, a.k = k.data, a.v = v.data;
    a.ldq = a.ldk = a.ldv = W, a.o = o.data, a.ldo = A, a.scale = 0.08838834764831845f, a.pingpong = -1;
    mm_error e2 = {{0}};
    const int rc = mmk_fa3_run(0, (mmk_stream)mm_ctx_stream(gpu), &a, &e2);
    MM_EXPECT(rc != 0 && strstr(e2.msg, "MMH3_FA3_SLEEP=7") && strstr(e2.msg, "accepted"),
              "MMH3_FA3_SLEEP=7: rc %d, message '%s'", rc, e2.msg);
    unsetenv("MMH3_FA3_SLEEP");
    /* the variant variables' refusals name the variable, its value and what is accepted */
    static const char *const bad[][3] = {{"MMH3_FA3_RESCALE", "2", "MMH3_FA3_RESCALE=2"},
                                         {"MMH3_FA3_LEAN", "yes", "MMH3_FA3_LEAN=yes"},
                                         {"MMH3_FA3_KEYS", "160", "MMH3_FA3_KEYS=160"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i][0], bad[i][1], 1);
        mm_error e3 = {{0}};
        const int rc3 = mmk_fa3_run(0, (mmk_stream)mm_ctx_stream(gpu), &a, &e3);
        MM_EXPECT(rc3 != 0 && strstr(e3.msg, bad[i][2]) && strstr(e3.msg, "accepted"), "%s: rc %d, message '%s'",
                  bad[i][2], rc3, e3.msg);
        unsetenv(bad[i][0]);
    }
#endif
    mm_tensor_free(&dq);
    mm_tensor_free(&dout);
    free(h);
    free(hf);
    free(first);
    free(got);
}

/* Keys may be more or fewer than the queries, but not none: the kernel
 * reads seq_kv = 0 as "as many as the queries" (mmk_fa3.seq_kv), so an empty
 * k/v must not be taken for fa3 at all (mm_attention gets it instead). */
static void test_no_keys_do_not_fit(void)
{
    mm_error err = {{0}};
    mm_tensor t = {0};
    MM_REQUIRE(mm_tensor_alloc(&t, mm_cuda(0), MM_BF16, 3, MM_SHAPE(8, 2, 128), &err) == 0, "%s", err.msg);
    mm_tensor none = mm_tensor_narrow(&t, 0, 0, 0);
    none.data = t.data; /* an aligned address, as an empty view of a real buffer has */
    MM_EXPECT(mm_cuda_fa3_fits(gpu, &t, &t, &t, &t), "8 queries over 8 keys do not fit");
    MM_EXPECT(!mm_cuda_fa3_fits(gpu, &t, &t, &none, &none), "8 queries over no keys taken for fa3");
    mm_tensor_free(&t);
}

/* The DiT's choice (cuda_speed.h): by default every Hopper kernel after its
 * first-use self-check — which must pass on this GPU — and the environment
 * forces or refuses each one. */
static void test_policy_defaults_and_overrides(void)
{
    unsetenv("MMH3_DIT_ATTN"), unsetenv("MMH3_DIT_FAST"), unsetenv("MMH3_DIT_GEMM");
    mm_cuda_speed_paths p;
    mm_cuda_speed_paths_get(0, true, &p);
    printf("  default: attention %s | fast %s | gemm %s\n", p.attention, p.fast, p.gemm);
    MM_EXPECT(p.fa3 && strstr(p.attention, "self-check"), "exact attention: %s", p.attention);
    MM_EXPECT(p.fa3_cross && p.fast_fa3_cross, "fewer queries than keys not verified: %s | %s", p.attention, p.fast);
    MM_EXPECT(p.fast_fa3 && p.fast_mode == MM_FA3_FAST && strstr(p.fast, "self-check"), "fast: %s", p.fast);
    MM_EXPECT(p.qgemm && strstr(p.gemm, "bit for bit"), "gemm: %s", p.gemm);
    setenv("MMH3_DIT_ATTN", "mm", 1), setenv("MMH3_DIT_FAST", "qk", 1), setenv("MMH3_DIT_GEMM", "cublaslt", 1);
    mm_cuda_speed_paths_get(0, true, &p);
    MM_EXPECT(!p.fa3 && !p.qgemm, "refused kernels still chosen: %s | %s", p.attention, p.gemm);
    MM_EXPECT(p.fast_fa3 && p.fast_mode == MM_FA3_FAST_QK, "MMH3_DIT_FAST=qk: %s", p.fast);
    setenv("MMH3_DIT_FAST", "off", 1);
    mm_cuda_speed_paths_get(0, true, &p);
    MM_EXPECT(!p.fast_fa3, "MMH3_DIT_FAST=off: %s", p.fast);
    setenv("MMH3_DIT_ATTN", "fa3", 1), setenv("MMH3_DIT_GEMM", "sm90", 1), unsetenv("MMH3_DIT_FAST");
    mm_cuda_speed_paths_get(0, false, &p);
    MM_EXPECT(p.fa3 && p.fast_fa3 && p.qgemm && strstr(p.attention, "forced"), "forced: %s | %s", p.attention, p.gemm);
    unsetenv("MMH3_DIT_ATTN"), unsetenv("MMH3_DIT_GEMM");
    /* the defaults name their variants; each variant's own self-check; an unknown value: no fa3 */
    unset_variant_env();
#ifdef MMH3_HAVE_CUDA /* (this test runs on a GPU only) */
    mm_cuda_speed_paths_get(0, true, &p);
    char edesc[48], fdesc[48];
    mmk_fa3_variant_desc(MMK_FA3_EXACT, edesc, sizeof edesc);
    mmk_fa3_variant_desc(MMK_FA3_FAST, fdesc, sizeof fdesc);
    printf("  default variants:%s |%s\n", edesc, fdesc);
    MM_EXPECT((!edesc[0] || strstr(p.attention, edesc)) && (!fdesc[0] || strstr(p.fast, fdesc)),
              "the texts do not name the variants: %s | %s", p.attention, p.fast);
#endif
    static const char *const settings[][3] = {{"0", "0", "128"}, {"1", "0", "128"}, {"0", "1", "128"},
                                              {"1", "1", "128"}, {"0", "0", "176"}, {"1", "1", "176"},
                                              {"0", "0", "192"}, {"1", "0", "192"}};
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        g_rescale = settings[i][0], g_lean = settings[i][1], g_keys = settings[i][2];
        set_variant_env();
        mm_cuda_speed_paths_get(0, true, &p);
        printf("  MMH3_FA3_RESCALE=%s MMH3_FA3_LEAN=%s MMH3_FA3_KEYS=%s: attention %s | fast %s\n", g_rescale, g_lean,
               g_keys, p.attention, p.fast);
        MM_EXPECT(p.fa3 && p.fa3_cross && p.fast_fa3 && p.fast_fa3_cross, "setting %zu: %s | %s", i, p.attention,
                  p.fast);
        if (strcmp(g_keys, "128"))
            MM_EXPECT(strstr(p.attention, g_keys) && strstr(p.attention, "-key tiles"),
                      "MMH3_FA3_KEYS=%s: the exact kernel's text does not name its tiles: %s", g_keys, p.attention);
        unset_variant_env();
    }
    g_rescale = g_lean = g_keys = NULL;
    setenv("MMH3_FA3_RESCALE", "2", 1);
    mm_cuda_speed_paths_get(0, true, &p);
    MM_EXPECT(!p.fa3 && !p.fast_fa3, "MMH3_FA3_RESCALE=2 still runs fa3: %s | %s", p.attention, p.fast);
    unsetenv("MMH3_FA3_RESCALE");
    setenv("MMH3_FA3_KEYS", "160", 1);
    mm_cuda_speed_paths_get(0, true, &p);
    MM_EXPECT(!p.fa3 && !p.fast_fa3, "MMH3_FA3_KEYS=160 still runs fa3: %s | %s", p.attention, p.fast);
    unsetenv("MMH3_FA3_KEYS");
}

int main(void)
{
    const char *req = getenv("MMH3_REQUIRE_GPU");
    bool required = req && *req && strcmp(req, "0") != 0;
    mm_error err = {{0}};
    if (mm_cuda_count() == 0 || mm_ctx_create(&gpu, mm_cuda(0), 0, &err) != 0) {
        printf("%s test_speed_attention: no CUDA device\n", required ? "FAIL" : "SKIP");
        return required ? 1 : 0;
    }
    mm_ctx_create(&cpu, mm_cpu(), 0, &err);
    /* a probe the size of the smallest case: does this GPU run the kernel? */
    mm_tensor probe = {0};
    const int64_t ps[3] = {8, 1, 128};
    bool fits = mm_tensor_alloc(&probe, mm_cuda(0), MM_BF16, 3, ps, &err) == 0 &&
                mm_cuda_fa3_fits(gpu, &probe, &probe, &probe, &probe);
    mm_tensor_free(&probe);
    if (!fits) {
        printf("%s test_speed_attention: this GPU or build has no sm_90a attention kernel\n",
               required ? "FAIL" : "SKIP");
        return required ? 1 : 0;
    }
    MM_RUN(test_exact_one_partial_tile);
    MM_RUN(test_exact_one_row);
    MM_RUN(test_exact_whole_tiles);
    MM_RUN(test_exact_ragged_many_tiles);
    MM_RUN(test_exact_no_pingpong);
    MM_RUN(test_exact_gqa);
    MM_RUN(test_exact_sharp_softmax);
    MM_RUN(test_exact_long);
    MM_RUN(test_fast_one_row);
    MM_RUN(test_fast_ragged);
    MM_RUN(test_fast_no_pingpong);
    MM_RUN(test_fast_gqa_sharp);
    MM_RUN(test_fast_long_one_key_tail);
    MM_RUN(test_fast_dit_like);
    MM_RUN(test_fast_dit_like_sharp_gqa);
    MM_RUN(test_fastqk_ragged);
    MM_RUN(test_fastqk_gqa_no_pingpong);
    MM_RUN(test_fastqk_dit_like);
    MM_RUN(test_rescale_partial_tile);
    MM_RUN(test_rescale_one_row);
    MM_RUN(test_rescale_ragged);
    MM_RUN(test_rescale_gqa);
    MM_RUN(test_rescale_sharp);
    MM_RUN(test_rescale_dit_like);
    MM_RUN(test_rescale_rising_max);
    MM_RUN(test_keys176);
    MM_RUN(test_keys176_rescale);
    MM_RUN(test_keys192);
    MM_RUN(test_keys192_rescale);
    MM_RUN(test_lean_one_row);
    MM_RUN(test_lean_two_tiles);
    MM_RUN(test_lean_ragged);
    MM_RUN(test_lean_gqa_sharp);
    MM_RUN(test_lean_long_one_key_tail);
    MM_RUN(test_lean_dit_like);
    MM_RUN(test_lean_rising_max);
    MM_RUN(test_variants_elsewhere_plain);
    MM_RUN(test_defaults);
    MM_RUN(test_fewer_queries_than_keys);
    MM_RUN(test_no_keys_do_not_fit);
    MM_RUN(test_sleep_settings_same_bits);
    MM_RUN(test_policy_defaults_and_overrides);
    mm_ctx_destroy(gpu);
    mm_ctx_destroy(cpu);
    return mm_test_exit();
}
