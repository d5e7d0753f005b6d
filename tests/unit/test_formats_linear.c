/* Weight formats against the conformance kits (tests/data/dit,
 * tests/data/text_encoder): nvfp4 dequantization bit for bit against the
 * kit's recorded sha256 of every linear and its unit tensors, the AWQ o_proj
 * forward, the int8 embedding rows, the ConvRot pairs (rotation, activation
 * codes, scales, int32 GEMM + epilogue), plus recognition errors and the
 * nvfp4 swizzle against an independent to_blocked construction. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/sha256.h"
#include "formats/embedding.h"
#include "formats/linear.h"
#include "io/safetensors.h"
#include "test_backend_util.h"

static mm_ctx *ctx;
static char te_path[512], te_cases[512], te_manifest[512], dit_path[512], dit_cases[512];

static const char *ctx_msg(void)
{
    static mm_error e;
    mm_error_clear(&e);
    mm_ctx_error(ctx, &e);
    return e.msg;
}

static double rel_l2(const mm_tensor *a, const mm_tensor *b, double *max_abs)
{
    double *x = tb_values(a), *y = tb_values(b), num = 0, den = 0, m = 0;
    int64_t n = mm_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) {
        num += (x[i] - y[i]) * (x[i] - y[i]);
        den += y[i] * y[i];
        m = fmax(m, fabs(x[i] - y[i]));
    }
    free(x);
    free(y);
    if (max_abs)
        *max_abs = m;
    return sqrt(num / (den > 0 ? den : 1));
}

static void hex_of(const void *p, size_t n, char hex[65])
{
    uint8_t d[32];
    mm_sha256(p, n, d);
    mm_sha256_hex(d, hex);
}

/* ------------------------------------------------------------------ nvfp4 */

static void test_nvfp4_dequant_matches_kit_hashes(void)
{
    mm_error err = {{0}};
    mm_safetensors *st;
    MM_REQUIRE(mm_st_open(&st, te_path, &err) == 0, "%s", err.msg);
    json_error_t je;
    json_t *man = json_load_file(te_manifest, 0, &je);
    MM_REQUIRE(man, "manifest: %s", je.text);
    json_t *lins = json_object_get(json_object_get(man, "checkpoint"), "nvfp4");
    MM_REQUIRE(json_object_size(lins) > 0, "manifest lists nvfp4 linears");
    const char *name;
    json_t *rec;
    int checked = 0;
    json_object_foreach(lins, name, rec)
    {
        mm_linear lin;
        if (mm_linear_load(&lin, st, name, &err) != 0) {
            MM_EXPECT(0, "%s", err.msg);
            continue;
        }
        MM_EXPECT(lin.format == MM_WEIGHT_NVFP4, "%s recognised as nvfp4", name);
        json_t *shape = json_object_get(rec, "shape");
        MM_EXPECT(json_integer_value(json_array_get(shape, 0)) == lin.out_features &&
                      json_integer_value(json_array_get(shape, 1)) == lin.in_features,
                  "%s shape", name);
        bool awq = strstr(name, "o_proj") || strstr(name, "down_proj");
        MM_EXPECT(awq == (lin.pre_quant_scale.data != NULL), "%s: AWQ vector present exactly on o/down", name);
        mm_tensor f = tb_zeros(MM_F32, 2, MM_SHAPE(lin.out_features, lin.in_features));
        mm_tensor b = tb_zeros(MM_BF16, 2, MM_SHAPE(lin.out_features, lin.in_features));
        mm_linear_dequantize(ctx, &f, &lin);
        mm_linear_dequantize(ctx, &b, &lin);
        char hf[65], hb[65];
        hex_of(f.data, mm_tensor_nbytes(&f), hf);
        hex_of(b.data, mm_tensor_nbytes(&b), hb);
        MM_EXPECT(strcmp(hf, json_string_value(json_object_get(rec, "fp32_sha256"))) == 0, "%s fp32 sha256 %s", name,
                  hf);
        MM_EXPECT(strcmp(hb, json_string_value(json_object_get(rec, "bf16_rne_sha256"))) == 0, "%s bf16 sha256 %s",
                  name, hb);
        checked++;
        mm_tensor_free(&f);
        mm_tensor_free(&b);
    }
    MM_EXPECT(checked == (int)json_object_size(lins), "all %zu linears checked", json_object_size(lins));
    MM_EXPECT(!mm_ctx_failed(ctx), "%s", ctx_msg());
    json_decref(man);
    mm_st_close(st);
}

static void test_nvfp4_unit_tensors_and_awq_forward(void)
{
    mm_error err = {{0}};
    mm_safetensors *st, *cs;
    MM_REQUIRE(mm_st_open(&st, te_path, &err) == 0 && mm_st_open(&cs, te_cases, &err) == 0, "%s", err.msg);
    const char *units[2][2] = {{"model.layers.0.self_attn.o_proj", "unit.layers.0.self_attn.o_proj"},
                               {"model.layers.3.mlp.down_proj", "unit.layers.3.mlp.down_proj"}};
    for (int u = 0; u < 2; u++) {
        char k[256];
        snprintf(k, sizeof k, "%s.w_f32", units[u][1]);
        if (!mm_st_find(cs, k))
            continue; /* another kit may tap other layers */
        mm_linear lin;
        MM_REQUIRE(mm_linear_load(&lin, st, units[u][0], &err) == 0, "%s", err.msg);
        mm_tensor want;
        MM_REQUIRE(mm_st_get(cs, k, &want, &err) == 0, "%s", err.msg);
        mm_tensor f = tb_zeros(MM_F32, 2, want.shape);
        mm_linear_dequantize(ctx, &f, &lin);
        /* The kit's unit tensors carry +0 where the decode gives -0 (its
         * sha256 records, checked above, keep -0): equal as values, bit for
         * bit everywhere else. */
        const float *a = f.data, *b = want.data;
        int64_t n = mm_tensor_numel(&f), bad = 0, signed_zero = 0;
        for (int64_t i = 0; i < n; i++) {
            if (memcmp(&a[i], &b[i], 4) == 0)
                continue;
            if (a[i] == 0.0f && b[i] == 0.0f)
                signed_zero++;
            else
                bad++;
        }
        MM_EXPECT(bad == 0, "%s: %lld values differ from the exact f32 decode", k, (long long)bad);
        printf("     %s: exact (%lld zeros differ only in sign)\n", k, (long long)signed_zero);
        mm_tensor_free(&f);
    }
    /* one AWQ nvfp4 linear: layer 0 o_proj on the debug case's attention output */
    const char *cases[2] = {"fl2va_one", "ref2va_mixed"};
    mm_linear lin;
    MM_REQUIRE(mm_linear_load(&lin, st, "model.layers.0.self_attn.o_proj", &err) == 0, "%s", err.msg);
    for (int c = 0; c < 2; c++) {
        char kx[128], ka[128], ky[128];
        snprintf(kx, sizeof kx, "%s.dbg.o_proj0.x", cases[c]);
        snprintf(ka, sizeof ka, "%s.dbg.o_proj0.x_awq", cases[c]);
        snprintf(ky, sizeof ky, "%s.dbg.o_proj0.y", cases[c]);
        mm_tensor x, xa, y;
        if (mm_st_get(cs, kx, &x, &err) != 0)
            continue;
        MM_REQUIRE(mm_st_get(cs, ka, &xa, &err) == 0 && mm_st_get(cs, ky, &y, &err) == 0, "%s", err.msg);
        /* the AWQ input product is an elementwise bf16 product: bit for bit */
        mm_tensor s2 = mm_tensor_unflatten(&lin.pre_quant_scale, 0, 2, MM_SHAPE(1, lin.in_features));
        mm_tensor se = mm_tensor_expand(&s2, 2, x.shape);
        mm_tensor mine = tb_zeros(MM_BF16, 2, x.shape);
        mm_mul(ctx, &mine, &x, &se);
        MM_EXPECT(memcmp(mine.data, xa.data, mm_tensor_nbytes(&xa)) == 0, "%s: x*s bit for bit", ka);
        mm_tensor out = tb_zeros(MM_BF16, 2, y.shape);
        mm_linear_forward(ctx, &out, &x, &lin);
        double ma, r = rel_l2(&out, &y, &ma);
        /* only GEMM accumulation order differs from the reference (cuBLAS) */
        MM_EXPECT(r < 0.004 && ma < 0.05, "%s: rel_l2 %.4g max_abs %.4g", ky, r, ma);
        printf("     %s: rel_l2 %.3g, max_abs %.3g\n", ky, r, ma);
        /* the same with the weight materialized once */
        mm_linear lm = lin;
        memset(&lm.dense_cache, 0, sizeof lm.dense_cache);
        MM_REQUIRE(mm_linear_materialize(ctx, &lm, MM_BF16, &err) == 0, "%s", err.msg);
        mm_tensor out2 = tb_zeros(MM_BF16, 2, y.shape);
        mm_linear_forward(ctx, &out2, &x, &lm);
        MM_EXPECT(memcmp(out.data, out2.data, mm_tensor_nbytes(&out)) == 0, "materialized weight gives the same y");
        mm_tensor_free(&lm.dense_cache);
        mm_tensor_free(&mine);
        mm_tensor_free(&out);
        mm_tensor_free(&out2);
    }
    MM_EXPECT(!mm_ctx_failed(ctx), "%s", ctx_msg());
    mm_st_close(st);
    mm_st_close(cs);
}

/* comfy-kitchen's to_blocked, restated: pad rows to 128 and columns to 4,
 * view as (rb, 128, cb, 4), swap the middle axes, then each 128x4 tile is
 * (4, 32, 4) -> transposed to (32, 4, 4). */
static int64_t to_blocked_offset(int64_t r, int64_t c, int64_t C)
{
    int64_t cb = (C + 3) / 4;
    int64_t tile = (r / 128) * cb + (c / 4); /* (rb, cb) after the permute */
    int64_t rin = r % 128, cin = c % 4;      /* position in the 128x4 tile */
    int64_t a = rin / 32, b = rin % 32;      /* view (4, 32, 4): [a][b][cin] */
    return tile * 512 + b * 16 + a * 4 + cin; /* transposed to [b][a][cin] */
}

static void test_nvfp4_synthetic_layout(void)
{
    /* a 256 x 128 weight with known codes and block scales, written in the
     * file layout by this test's own packer */
    const int64_t N = 256, K = 128, C = K / 16;
    uint8_t packed[256 * 64], scales[256 * 8];
    float want[256][128], dvals[256][8];
    for (int64_t r = 0; r < N; r++)
        for (int64_t b = 0; b < C; b++) {
            uint8_t code = (uint8_t)(((r * 7 + b * 3) % 64) + 0x20); /* e4m3 0x20..0x5f: 2^-3 .. 2^4-ish */
            if (r == 5 && b == 1)
                code = 0; /* a zero block scale */
            if (r == 6 && b == 2)
                code = 0x03; /* subnormal */
            scales[to_blocked_offset(r, b, C)] = code;
            dvals[r][b] = mm_e4m3_to_f32(code) * 0.37f;
        }
    for (int64_t r = 0; r < N; r++)
        for (int64_t k = 0; k < K; k += 2) {
            uint8_t hi = (uint8_t)((r + 3 * k) % 16), lo = (uint8_t)((5 * r + k + 1) % 16);
            packed[r * (K / 2) + k / 2] = (uint8_t)(hi << 4 | lo);
            want[r][k] = mm_e2m1_to_f32(hi) * dvals[r][k / 16];
            want[r][k + 1] = mm_e2m1_to_f32(lo) * dvals[r][(k + 1) / 16];
        }
    mm_tensor p = mm_tensor_wrap(packed, mm_cpu(), MM_U8, 2, MM_SHAPE(N, K / 2));
    mm_tensor s = mm_tensor_wrap(scales, mm_cpu(), MM_F8_E4M3, 2, MM_SHAPE(N, C));
    mm_tensor o = tb_zeros(MM_F32, 2, MM_SHAPE(N, K));
    mm_nvfp4_dequantize(ctx, &o, &p, &s, 0.37f);
    MM_EXPECT(memcmp(o.data, want, sizeof want) == 0, "nvfp4 decode of the test's own packing, bit for bit");
    int negzero = 0;
    for (int64_t i = 0; i < N * K; i++) {
        float v = ((float *)o.data)[i];
        negzero += v == 0.0f && signbit(v);
    }
    MM_EXPECT(negzero > 0, "-0 codes decode to -0.0 (%d)", negzero);
    MM_EXPECT(!mm_ctx_failed(ctx), "%s", ctx_msg());
    mm_tensor_free(&o);
}

/* --------------------------------------------------------- int8 embedding */

static void test_int8_embedding_rows(void)
{
    mm_error err = {{0}};
    mm_safetensors *st, *cs;
    MM_REQUIRE(mm_st_open(&st, te_path, &err) == 0 && mm_st_open(&cs, te_cases, &err) == 0, "%s", err.msg);
    mm_embedding e;
    MM_REQUIRE(mm_embedding_load(&e, st, "model.embed_tokens", &err) == 0, "%s", err.msg);
    MM_EXPECT(e.quantized, "int8 table recognised");
    const char *cases[2] = {"fl2va_one", "ref2va_mixed"};
    for (int c = 0; c < 2; c++) {
        char ki[128], ke[128];
        snprintf(ki, sizeof ki, "%s.in.input_ids", cases[c]);
        snprintf(ke, sizeof ke, "%s.dbg.embed_rows", cases[c]);
        mm_tensor ids64, want;
        if (mm_st_get(cs, ki, &ids64, &err) != 0)
            continue;
        MM_REQUIRE(mm_st_get(cs, ke, &want, &err) == 0, "%s", err.msg);
        int64_t L = want.shape[0];
        mm_tensor flat = mm_tensor_wrap(ids64.data, mm_cpu(), MM_I64, 1, MM_SHAPE(L));
        mm_tensor ids = tb_zeros(MM_I32, 1, MM_SHAPE(L));
        mm_copy(ctx, &ids, &flat);
        mm_tensor out = tb_zeros(MM_BF16, 2, want.shape);
        mm_embedding_forward(ctx, &out, &ids, &e);
        MM_EXPECT(memcmp(out.data, want.data, mm_tensor_nbytes(&want)) == 0, "%s bit for bit", ke);
        mm_tensor_free(&ids);
        mm_tensor_free(&out);
    }
    MM_EXPECT(!mm_ctx_failed(ctx), "%s", ctx_msg());
    mm_st_close(st);
    mm_st_close(cs);
}

/* --------------------------------------------------------------- ConvRot */

static void test_hadamard_is_the_regular_kronecker_matrix(void)
{
    static const int H4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};
    const int G = 256, R = 3;
    mm_tensor x = tb_rand(MM_F32, 2, MM_SHAPE(R, 2 * G), 4.0);
    double *vx = tb_values(&x), *want = malloc((size_t)R * 2 * G * sizeof *want);
    for (int r = 0; r < R; r++)
        for (int g = 0; g < 2; g++)
            for (int j = 0; j < G; j++) {
                double s = 0;
                for (int i = 0; i < G; i++) {
                    int h = 1;
                    for (int d = 0, a = i, b = j; d < 4; d++, a /= 4, b /= 4)
                        h *= H4[a % 4][b % 4];
                    s += vx[r * 2 * G + g * G + i] * h / 16.0;
                }
                want[r * 2 * G + g * G + j] = s;
            }
    mm_tensor o = tb_zeros(MM_F32, 2, MM_SHAPE(R, 2 * G));
    mm_hadamard_rotate(ctx, &o, &x, G);
    MM_EXPECT(tb_check(&o, want, 64, 4, NULL) <= 1, "rotation = x . (H4^(x)4)/16 per 256-group");
    mm_hadamard_rotate(ctx, &o, &o, G);
    MM_EXPECT(tb_check(&o, vx, 64, 4, NULL) <= 1, "the rotation is its own inverse");
    MM_EXPECT(!mm_ctx_failed(ctx), "%s", ctx_msg());
    free(vx);
    free(want);
    mm_tensor_free(&x);
    mm_tensor_free(&o);
}

/* Highest N with blocks.N.mlp.fc2.weight in the DiT file. */
static int last_block(const mm_safetensors *st)
{
    int n = -1;
    char k[96];
    for (;;) {
        snprintf(k, sizeof k, "blocks.%d.mlp.fc2.weight", n + 1);
        if (!mm_st_find(st, k))
            return n;
        n++;
    }
}

static void test_convrot_pairs(void)
{
    mm_error err = {{0}};
    mm_safetensors *st, *cs;
    MM_REQUIRE(mm_st_open(&st, dit_path, &err) == 0 && mm_st_open(&cs, dit_cases, &err) == 0, "%s", err.msg);
    int last = last_block(st);
    MM_REQUIRE(last >= 0, "DiT blocks present");
    char fc2[64];
    snprintf(fc2, sizeof fc2, "blocks.%d.mlp.fc2", last);
    const char *pairs[2][2] = {{"qkv0", "blocks.0.attn.qkv_proj"}, {"fc2_last", fc2}};
    int seen = 0;
    for (size_t i = 0; i < mm_st_count(cs); i++) {
        const char *name = mm_st_at(cs, i)->name, *dot = strstr(name, ".dbg.");
        if (!dot)
            continue;
        for (int p = 0; p < 2; p++) {
            char want_suffix[64];
            snprintf(want_suffix, sizeof want_suffix, ".dbg.%s.x", pairs[p][0]);
            if (strcmp(dot, want_suffix) != 0)
                continue;
            char base[128], k[192];
            snprintf(base, sizeof base, "%.*s.dbg.%s", (int)(dot - name), name, pairs[p][0]);
            mm_tensor x, xr, qx, sx, y;
            snprintf(k, sizeof k, "%s.x", base);
            MM_REQUIRE(mm_st_get(cs, k, &x, &err) == 0, "%s", err.msg);
            snprintf(k, sizeof k, "%s.x_rot", base);
            MM_REQUIRE(mm_st_get(cs, k, &xr, &err) == 0, "%s", err.msg);
            snprintf(k, sizeof k, "%s.q_x", base);
            MM_REQUIRE(mm_st_get(cs, k, &qx, &err) == 0, "%s", err.msg);
            snprintf(k, sizeof k, "%s.s_x", base);
            MM_REQUIRE(mm_st_get(cs, k, &sx, &err) == 0, "%s", err.msg);
            snprintf(k, sizeof k, "%s.y", base);
            MM_REQUIRE(mm_st_get(cs, k, &y, &err) == 0, "%s", err.msg);
            mm_linear lin;
            MM_REQUIRE(mm_linear_load(&lin, st, pairs[p][1], &err) == 0, "%s", err.msg);
            MM_EXPECT(lin.format == MM_WEIGHT_CONVROT_I8 && lin.group == 256, "%s is ConvRot/256", pairs[p][1]);
            int64_t R = x.shape[0], K = x.shape[1], N = y.shape[1];
            /* 1. rotation, rounded to bf16 */
            mm_tensor myrot = tb_zeros(MM_BF16, 2, MM_SHAPE(R, K));
            mm_hadamard_rotate(ctx, &myrot, &x, lin.group);
            int64_t rot_diff = 0;
            for (int64_t e = 0; e < R * K; e++)
                rot_diff += ((uint16_t *)myrot.data)[e] != ((uint16_t *)xr.data)[e];
            MM_EXPECT(rot_diff * 1000 <= R * K, "%s.x_rot: %lld of %lld bf16 values differ", base,
                      (long long)rot_diff, (long long)(R * K));
            /* 2. activation codes and scales */
            mm_tensor q = tb_zeros(MM_I8, 2, MM_SHAPE(R, K)), s = tb_zeros(MM_F32, 1, MM_SHAPE(R));
            mm_convrot_quantize(ctx, &q, &s, &x, lin.group);
            int64_t qd = 0, qmax = 0;
            for (int64_t e = 0; e < R * K; e++) {
                int d = abs(((int8_t *)q.data)[e] - ((int8_t *)qx.data)[e]);
                qd += d != 0;
                qmax = d > qmax ? d : qmax;
            }
            MM_EXPECT(qd * 100 <= R * K && qmax <= 1, "%s.q_x: %lld codes differ (max %lld)", base, (long long)qd,
                      (long long)qmax);
            double smax = 0;
            for (int64_t r = 0; r < R; r++) {
                double a = ((float *)s.data)[r], b = ((float *)sx.data)[r];
                smax = fmax(smax, fabs(a - b) / fabs(b));
            }
            MM_EXPECT(smax < 1e-6, "%s.s_x: rel err %.3g", base, smax);
            /* 3. from the stored codes and scales, the int32 GEMM + epilogue reproduce y bit for bit */
            mm_tensor y2 = tb_zeros(MM_BF16, 2, MM_SHAPE(R, N));
            mm_tensor sxv = mm_tensor_view(&sx);
            mm_gemm_i8_scaled(ctx, &y2, &qx, &sxv, &lin.weight, &lin.weight_scale, NULL);
            MM_EXPECT(memcmp(y2.data, y.data, mm_tensor_nbytes(&y)) == 0, "%s.y bit for bit from q_x, s_x", base);
            /* 4. the whole linear */
            mm_tensor y3 = tb_zeros(MM_BF16, 2, MM_SHAPE(R, N));
            mm_linear_forward(ctx, &y3, &x, &lin);
            double ma, rl = rel_l2(&y3, &y, &ma);
            MM_EXPECT(rl < 0.003, "%s.y via mm_linear_forward: rel_l2 %.3g max_abs %.3g", base, rl, ma);
            printf("     %s: x_rot diff %lld/%lld, q_x diff %lld, y rel_l2 %.3g\n", base, (long long)rot_diff,
                   (long long)(R * K), (long long)qd, rl);
            seen++;
            mm_tensor_free(&myrot);
            mm_tensor_free(&q);
            mm_tensor_free(&s);
            mm_tensor_free(&y2);
            mm_tensor_free(&y3);
        }
    }
    MM_EXPECT(seen >= 2, "ConvRot pairs found in the kit (%d)", seen);
    MM_EXPECT(!mm_ctx_failed(ctx), "%s", ctx_msg());
    mm_st_close(st);
    mm_st_close(cs);
}

static void test_dense_linear(void)
{
    mm_error err = {{0}};
    mm_safetensors *st;
    MM_REQUIRE(mm_st_open(&st, dit_path, &err) == 0, "%s", err.msg);
    const char *names[2] = {"condition_proj", "video_patch_proj"}; /* BF16 + bias, F32 + bias */
    for (int i = 0; i < 2; i++) {
        mm_linear lin;
        MM_REQUIRE(mm_linear_load(&lin, st, names[i], &err) == 0, "%s", err.msg);
        MM_EXPECT(lin.format == MM_WEIGHT_DENSE && lin.bias.data, "%s dense with bias", names[i]);
        int64_t R = 19, N = lin.out_features, K = lin.in_features;
        mm_tensor x = tb_rand(MM_F32, 2, MM_SHAPE(R, K), 1.0);
        mm_tensor o = tb_zeros(MM_F32, 2, MM_SHAPE(R, N));
        mm_linear_forward(ctx, &o, &x, &lin);
        /* reference: x rounded to the weight's dtype, then x W^T + b */
        double *vx = tb_values(&x), *vw = tb_values(&lin.weight), *vb = tb_values(&lin.bias);
        double *want = malloc((size_t)(R * N) * sizeof *want);
        for (int64_t r = 0; r < R; r++)
            for (int64_t n = 0; n < N; n++) {
                double s = vb[n];
                for (int64_t k = 0; k < K; k++) {
                    double xv = lin.weight.dtype == MM_BF16 ? mm_round_bf16((float)vx[r * K + k]) : vx[r * K + k];
                    s += xv * vw[n * K + k];
                }
                want[r * N + n] = s;
            }
        MM_EXPECT(tb_check(&o, want, 64, sqrt((double)K), NULL) <= 1, "%s forward", names[i]);
        MM_EXPECT(mm_linear_expect(&lin, N, K, &err) == 0, "expect ok");
        MM_EXPECT(mm_linear_expect(&lin, N + 1, K, &err) == -1 && strstr(err.msg, names[i]), "%s", err.msg);
        free(vx);
        free(vw);
        free(vb);
        free(want);
        mm_tensor_free(&x);
        mm_tensor_free(&o);
    }
    MM_EXPECT(!mm_ctx_failed(ctx), "%s", ctx_msg());
    mm_st_close(st);
}

/* --------------------------------------------------- recognition errors */

static void write_file(const char *path, int n, const char *const *names, const mm_tensor *ts)
{
    mm_error err = {{0}};
    if (mm_st_save(path, (size_t)n, names, ts, &err) != 0)
        printf("     save: %s\n", err.msg);
}

static void test_recognition_errors(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/mmh3-test-fmt-%d.safetensors", (int)getpid());
    int8_t w8[128 * 256] = {0};
    float sc[128] = {0}, one = 1.0f;
    const char *m_conv = "{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": 256}";
    const char *m_bad = "{\"format\": \"mxfp8\"}";
    mm_tensor w = mm_tensor_wrap(w8, mm_cpu(), MM_I8, 2, MM_SHAPE(128, 256));
    mm_tensor s = mm_tensor_wrap(sc, mm_cpu(), MM_F32, 2, MM_SHAPE(128, 1));
    mm_tensor s_bad = mm_tensor_wrap(sc, mm_cpu(), MM_F32, 2, MM_SHAPE(64, 2));
    mm_tensor s_one = mm_tensor_wrap(&one, mm_cpu(), MM_F32, 0, NULL);
    mm_tensor mc = mm_tensor_wrap((void *)m_conv, mm_cpu(), MM_U8, 1, MM_SHAPE((int64_t)strlen(m_conv)));
    mm_tensor mb = mm_tensor_wrap((void *)m_bad, mm_cpu(), MM_U8, 1, MM_SHAPE((int64_t)strlen(m_bad)));
    mm_error err = {{0}};
    mm_safetensors *st;
    mm_linear lin;
    struct {
        int n;
        const char *names[3];
        mm_tensor ts[3];
        const char *needle;
    } cases[] = {
        {1, {"l.weight"}, {w}, "I8 without a comfy_quant marker"},
        {3, {"l.weight", "l.weight_scale", "l.comfy_quant"}, {w, s, mb}, "\"mxfp8\" is not supported"},
        {3, {"l.weight", "l.weight_scale", "l.comfy_quant"}, {w, s_bad, mc}, "l.weight_scale has shape [64, 2]"},
        {2, {"l.weight", "l.comfy_quant"}, {w, mc}, "'l.weight_scale' not found"},
        {1, {"other.weight"}, {w}, "'l.weight' not found"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        write_file(path, cases[c].n, cases[c].names, cases[c].ts);
        MM_REQUIRE(mm_st_open(&st, path, &err) == 0, "%s", err.msg);
        int rc = mm_linear_load(&lin, st, "l", &err);
        MM_EXPECT(rc == -1 && strstr(err.msg, cases[c].needle) && strstr(err.msg, "mmh3-test-fmt"), "case %zu: %s",
                  c, rc ? err.msg : "accepted");
        mm_st_close(st);
    }
    /* a scalar (true tensorwise) scale is accepted and broadcast */
    const char *names[3] = {"l.weight", "l.weight_scale", "l.comfy_quant"};
    mm_tensor ts[3] = {w, s_one, mc};
    write_file(path, 3, names, ts);
    MM_REQUIRE(mm_st_open(&st, path, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_linear_load(&lin, st, "l", &err) == 0 && lin.weight_scale.stride[0] == 0, "scalar scale: %s",
              err.msg);
    mm_st_close(st);
    unlink(path);
}

int main(void)
{
    const char *d = mm_test_data_dir();
    snprintf(te_path, sizeof te_path, "%s/text_encoder/text_encoder.safetensors", d);
    snprintf(te_cases, sizeof te_cases, "%s/text_encoder/cases.safetensors", d);
    snprintf(te_manifest, sizeof te_manifest, "%s/text_encoder/manifest.json", d);
    snprintf(dit_path, sizeof dit_path, "%s/dit/dit.safetensors", d);
    snprintf(dit_cases, sizeof dit_cases, "%s/dit/cases.safetensors", d);
    mm_error e = {{0}};
    if (mm_ctx_create(&ctx, mm_cpu(), 0, &e) != 0) {
        printf("FAIL setup: %s\n", e.msg);
        return 1;
    }
    MM_RUN(test_nvfp4_dequant_matches_kit_hashes);
    MM_RUN(test_nvfp4_unit_tensors_and_awq_forward);
    MM_RUN(test_nvfp4_synthetic_layout);
    MM_RUN(test_int8_embedding_rows);
    MM_RUN(test_hadamard_is_the_regular_kronecker_matrix);
    MM_RUN(test_convrot_pairs);
    MM_RUN(test_dense_linear);
    MM_RUN(test_recognition_errors);
    mm_ctx_destroy(ctx);
    return mm_test_exit();
}
