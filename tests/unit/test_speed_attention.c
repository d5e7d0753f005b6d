/* The DiT's Hopper attention (backend/cuda/cuda_speed.h, kernels/attn_fa3.cu)
 * against its CPU twins. Inputs are laid out as the DiT passes them: q, k, v
 * are the thirds of one fused [S, 3·H·128] buffer, out a [S, H·128] buffer
 * poisoned with NaN first (every element must be written). Sequence lengths
 * cover one partial tile, exact tiles of both kernels' widths (192 keys
 * exact, 128 fast) and one key more or less, many tiles with a ragged end
 * (down to a last tile of one key); GQA; large score magnitudes (the running
 * max must move); an outlier channel in q and k; DiT-like inputs
 * (normalized q/k with channel gains, a key offset, v with channel means);
 * key norms that grow along the sequence, so that each row's max rises tile
 * after tile.
 *
 * Exact mode must agree with mm_attention on the CPU in f32 over the same
 * bf16 inputs as bf16 attention does (rel_l2 < 1e-2: P and the output are
 * rounded to bf16). Fast mode (int8 q·k + e4m3 p·v) is held to two things
 * (tests/unit/fa3_fast_model.h): the kernel computes what the CPU model of
 * its rounding computes (FA3_MODEL_FAST_LEAN: the row sums of the e4m3 P;
 * rel_l2 < 1e-2 between them: only summation order, exp2 approximations and
 * the odd rounding tie differ), and its error against exact attention stays
 * inside the first-order error budget of those inputs (× 1.25; the budget
 * sits a little above what the model measures, test_fa3_fast_model).
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
#include "backend/kernel_policy.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "fa3_fast_model.h"
#include "kernels/mmk_fa3.h"
#include "test.h"

static mm_ctx *gpu, *cpu;
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
static result run_case(int S, int hq, int hkv, float qk, int kind, mm_fa3_mode mode)
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
    if (!mm_fa3_fits(gpu, &o, &q, &k, &v)) {
        MM_EXPECT(0, "the views do not fit the kernel");
        goto done;
    }
    mm_attention_fa3(gpu, &o, &q, &k, &v, 0.0f, mode);
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
        res.budget = fa3_model_run(cpu, &in, FA3_MODEL_FAST_LEAN, model, ref, NULL);
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

static void check(const char *what, int S, int hq, int hkv, float qk, int kind, mm_fa3_mode mode)
{
    printf("  .. %s: S=%d heads %d/%d q/k scale %.1f %s %s\n", what, S, hq, hkv, qk,
           kind == IN_DIT ? "DiT-like" : kind == IN_RAMP ? "key ramp" : "outlier",
           mode == MM_FA3_FAST ? "int8+e4m3" : "bf16");
    fflush(stdout);
    result r = run_case(S, hq, hkv, qk, kind, mode);
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

static void exact(int S, int hq, int hkv, float qk, int kind) { check("exact", S, hq, hkv, qk, kind, MM_FA3_EXACT); }
static void fast(int S, int hq, int hkv, float qk, int kind) { check("fast", S, hq, hkv, qk, kind, MM_FA3_FAST); }

static void test_exact_one_partial_tile(void) { exact(77, 2, 2, 1.0f, IN_OUTLIER); }
static void test_exact_one_row(void) { exact(1, 1, 1, 1.0f, IN_OUTLIER); }
/* around the 192-key tile: one tile, one key into the next, one key short of two */
static void test_exact_tile_edges(void)
{
    exact(192, 2, 2, 1.0f, IN_OUTLIER);
    exact(193, 2, 2, 1.0f, IN_OUTLIER);
    exact(383, 2, 2, 1.0f, IN_OUTLIER);
    exact(256, 2, 2, 1.0f, IN_OUTLIER);
}
static void test_exact_ragged_many_tiles(void) { exact(1000, 3, 3, 1.0f, IN_OUTLIER); }
static void test_exact_gqa(void) { exact(517, 4, 2, 1.0f, IN_OUTLIER); }
static void test_exact_sharp_softmax(void) { exact(700, 2, 2, 3.0f, IN_OUTLIER); }
static void test_exact_long(void) { exact(2949, 2, 2, 1.0f, IN_OUTLIER); }
static void test_exact_dit_like(void) { exact(1000, 2, 2, 2.0f, IN_DIT); }
static void test_exact_rising_max(void)
{
    exact(2949, 2, 2, 1.0f, IN_RAMP);
    exact(1500, 2, 2, 2.5f, IN_RAMP);
}
static void test_fast_one_row(void) { fast(1, 1, 1, 1.0f, IN_OUTLIER); }
static void test_fast_two_tiles(void) { fast(200, 2, 2, 1.0f, IN_OUTLIER); }
static void test_fast_ragged(void) { fast(1000, 3, 3, 1.0f, IN_OUTLIER); }
static void test_fast_gqa_sharp(void) { fast(517, 4, 2, 3.0f, IN_OUTLIER); }
static void test_fast_long_one_key_tail(void) { fast(2049, 2, 2, 1.0f, IN_OUTLIER); }
static void test_fast_dit_like(void)
{
    fast(1000, 2, 2, 1.0f, IN_DIT);
    fast(700, 4, 2, 2.0f, IN_DIT);
}
static void test_fast_rising_max(void) { fast(1500, 2, 2, 2.5f, IN_RAMP); }

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
    if (!mm_fa3_fits(gpu, &op, &qs, &k, &v)) {
        MM_EXPECT(0, "%d queries over %d keys do not fit the kernel", sq, S);
        goto done;
    }
    mm_attention_fa3(gpu, &of, &q, &k, &v, 0.0f, mode);
    mm_attention_fa3(gpu, &op, &qs, &k, &v, 0.0f, mode);
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
    cross_case(2049, 1, 2, 2, MM_FA3_EXACT);
    cross_case(383, 192, 2, 2, MM_FA3_EXACT);
    cross_case(700, 177, 2, 2, MM_FA3_EXACT);
    cross_case(1000, 300, 4, 2, MM_FA3_FAST);
    cross_case(2049, 1, 2, 2, MM_FA3_FAST);
    cross_case(1000, 517, 2, 2, MM_FA3_FAST);
}

/* The same inputs give the same bits, in both modes (no float atomics: the
 * k/v statistics are reduced in block order); an unknown mode is refused. */
static void test_repeatable(void)
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
    const mm_fa3_mode modes[] = {MM_FA3_EXACT, MM_FA3_FAST};
    for (size_t m = 0; m < 2; m++)
        for (int i = 0; i < 3; i++) {
            mm_fill(gpu, &dout, NAN);
            mm_attention_fa3(gpu, &o, &q, &k, &v, 0.0f, modes[m]);
            mm_copy(gpu, &ho, &dout);
            if (mm_ctx_sync(gpu, &err) != 0) {
                MM_EXPECT(0, "mode %d run %d: %s", (int)modes[m], i, err.msg);
                break;
            }
            if (i == 0)
                memcpy(first, got, sizeof(uint16_t) * (size_t)no);
            else
                MM_EXPECT(memcmp(first, got, sizeof(uint16_t) * (size_t)no) == 0, "mode %d: run %d differs from run 0",
                          (int)modes[m], i);
        }
#ifdef MMH3_HAVE_CUDA /* (this test runs on a GPU only) */
    mmk_fa3 a;
    memset(&a, 0, sizeof a);
    a.seq = S, a.heads = hq, a.heads_kv = hkv, a.q = q.data, a.k = k.data, a.v = v.data;
    a.ldq = a.ldk = a.ldv = W, a.o = o.data, a.ldo = A, a.scale = 0.08838834764831845f, a.mode = 2;
    mm_error e2 = {{0}};
    const int rc = mmk_fa3_run(0, (mmk_stream)mm_ctx_stream(gpu), &a, &e2);
    MM_EXPECT(rc != 0 && strstr(e2.msg, "unknown mode 2"), "mode 2: rc %d, message '%s'", rc, e2.msg);
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
    MM_EXPECT(mm_fa3_fits(gpu, &t, &t, &t, &t), "8 queries over 8 keys do not fit");
    MM_EXPECT(!mm_fa3_fits(gpu, &t, &t, &none, &none), "8 queries over no keys taken for fa3");
    mm_tensor_free(&t);
}

/* The DiT's choice (cuda_speed.h): by default every Hopper kernel after its
 * first-use self-check — which must pass on this GPU — and the kernel
 * policy's portable settings turn each one off. */
static void test_policy_defaults_and_portable(void)
{
    const mm_kernel_policy process = *mm_kernel_policy_get();
    mm_kernel_policy pol;
    mm_kernel_policy_defaults(&pol);
    mm_kernel_policy_install(&pol);
    mm_dit_kernel_paths p;
    mm_dit_kernel_paths_get(mm_cuda(0), true, &p);
    printf("  default: attention %s | fast %s | gemm %s\n", p.attention, p.fast, p.gemm);
    MM_EXPECT(p.fa3 && strstr(p.attention, "self-check") && strstr(p.attention, "192-key"), "exact attention: %s",
              p.attention);
    MM_EXPECT(p.fa3_cross && p.fast_fa3_cross, "fewer queries than keys not verified: %s | %s", p.attention, p.fast);
    MM_EXPECT(p.fast_fa3 && strstr(p.fast, "self-check"), "fast: %s", p.fast);
    MM_EXPECT(p.qgemm && strstr(p.gemm, "bit for bit"), "gemm: %s", p.gemm);
    pol.dit_fast = false;
    mm_kernel_policy_install(&pol);
    mm_dit_kernel_paths_get(mm_cuda(0), true, &p);
    MM_EXPECT(p.fa3 && !p.fast_fa3 && strstr(p.fast, "MMH3_DIT_FAST=off"), "fast mode off: %s", p.fast);
    pol.dit_fast = true;
    pol.dit_fa3 = false;
    mm_kernel_policy_install(&pol);
    mm_dit_kernel_paths_get(mm_cuda(0), true, &p);
    MM_EXPECT(!p.fa3 && !p.fast_fa3 && p.qgemm && strstr(p.attention, "portable"), "portable attention: %s | %s",
              p.attention, p.fast);
    mm_kernel_policy_portable(&pol);
    mm_kernel_policy_install(&pol);
    mm_dit_kernel_paths_get(mm_cuda(0), true, &p);
    MM_EXPECT(!p.fa3 && !p.fast_fa3 && !p.qgemm && strstr(p.attention, "sm80-mma") && strstr(p.gemm, "portable"),
              "MMH3_KERNELS=portable: %s | %s | %s", p.attention, p.fast, p.gemm);
    mm_kernel_policy_install(&process);
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
                mm_fa3_fits(gpu, &probe, &probe, &probe, &probe);
    mm_tensor_free(&probe);
    if (!fits) {
        printf("%s test_speed_attention: this GPU or build has no sm_90a attention kernel\n",
               required ? "FAIL" : "SKIP");
        return required ? 1 : 0;
    }
    MM_RUN(test_exact_one_partial_tile);
    MM_RUN(test_exact_one_row);
    MM_RUN(test_exact_tile_edges);
    MM_RUN(test_exact_ragged_many_tiles);
    MM_RUN(test_exact_gqa);
    MM_RUN(test_exact_sharp_softmax);
    MM_RUN(test_exact_long);
    MM_RUN(test_exact_dit_like);
    MM_RUN(test_exact_rising_max);
    MM_RUN(test_fast_one_row);
    MM_RUN(test_fast_two_tiles);
    MM_RUN(test_fast_ragged);
    MM_RUN(test_fast_gqa_sharp);
    MM_RUN(test_fast_long_one_key_tail);
    MM_RUN(test_fast_dit_like);
    MM_RUN(test_fast_rising_max);
    MM_RUN(test_fewer_queries_than_keys);
    MM_RUN(test_no_keys_do_not_fit);
    MM_RUN(test_repeatable);
    MM_RUN(test_policy_defaults_and_portable);
    mm_ctx_destroy(gpu);
    mm_ctx_destroy(cpu);
    return mm_test_exit();
}
