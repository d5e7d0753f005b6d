/* The DiT's LoRA branch on the CPU (src/model/dit/lora_branch.c, fewstep.md
 * §2.6): per adapted module, y(adapter) − y(base) against s·B·A·x in fp64;
 * every spelling of one random adapter gives the same forward, bit for bit;
 * strength 0 is the base, bit for bit; two adapters add; the merged-int8
 * control (ΔW folded into the ConvRot weights and requantized) loses most
 * of the delta, so the branch test can tell; parts a linear branch cannot
 * apply are refused with the reason. On the conformance kit's tiny DiT. */
#include <jansson.h>
#include <sys/wait.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "conformance/dit_kit.h"
#include "core/dtype.h"
#include "lora_test.h"
#include "model/dit/dit.h"
#include "model/dit/model.h"
#include "test.h"
#include "test_sampler_kit.h"

static json_t *manifest;
static mm_safetensors *cases;
static mm_ctx *ctx;
static mm_dit *dit;
static kit_forward_case kcase;
static const char *CASE = "fl2va_first_step2";

static mm_lora *load_adapter(const char *file, const char *opts)
{
    char path[700];
    mm_lora *l = NULL;
    mm_error err = {{0}};
    if (!lora_test_write(path, sizeof path, file, "%s", opts) || mm_lora_open(&l, path, NULL, &err) != 0 ||
        mm_lora_upload(l, ctx, &err) != 0) {
        printf("     %s (%s): %s\n", file, opts, err.msg);
        mm_lora_free(l);
        return NULL;
    }
    return l;
}

static mm_dit_request *begin(const mm_lora_use *uses, int n, mm_error *err)
{
    mm_dit_request_opts o = {.loras = uses, .n_loras = n};
    mm_dit_request *r = NULL;
    if (mm_dit_request_begin_ex(dit, ctx, &kcase.l, &kcase.text, &o, NULL, &r, err) != 0)
        return NULL;
    return r;
}

/* One forward of the kit case with these adapters: malloc'ed velocities
 * [video | audio], *n their count. */
static float *forward(const mm_lora_use *uses, int n, int64_t *count)
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    const int64_t nv = kcase.l.video_rows * c->video_row_width, na = kcase.l.audio_rows * c->audio_row_width;
    float *out = calloc((size_t)(nv + na), sizeof(float));
    mm_tensor vv = mm_tensor_wrap(out, mm_cpu(), MM_F32, 2, MM_SHAPE(kcase.l.video_rows, c->video_row_width));
    mm_tensor va = mm_tensor_wrap(out + nv, mm_cpu(), MM_F32, 2, MM_SHAPE(kcase.l.audio_rows, c->audio_row_width));
    mm_error err = {{0}};
    mm_dit_request *r = begin(uses, n, &err);
    if (!r || mm_dit_forward(r, kcase.row_t, &kcase.video, &kcase.audio, &vv, &va, &err) != 0) {
        printf("     forward: %s\n", err.msg);
        free(out);
        out = NULL;
    }
    mm_dit_request_end(r);
    *count = nv + na;
    return out;
}

/* A random bf16 activation [rows, k] (host) and its fp64 copy. */
static mm_tensor random_x(int64_t rows, int64_t k, uint64_t seed, double **x64)
{
    mm_tensor x;
    mm_tensor_alloc(&x, mm_cpu(), MM_BF16, 2, MM_SHAPE(rows, k), NULL);
    *x64 = malloc(sizeof(double) * (size_t)(rows * k));
    uint16_t *p = x.data;
    for (int64_t i = 0; i < rows * k; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((double)(seed >> 11) / 9007199254740992.0 * 4.0 - 2.0);
        p[i] = mm_f32_to_bf16(v);
        (*x64)[i] = mm_bf16_to_f32(p[i]);
    }
    return x;
}

/* ref[r, n] = Σ_k dW[n, k]·x[r, k] */
static double *apply_dense(const double *dw, const double *x, int64_t rows, int64_t n, int64_t k)
{
    double *y = calloc((size_t)(rows * n), sizeof *y);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t i = 0; i < k; i++)
                s += dw[j * k + i] * x[r * k + i];
            y[r * n + j] = s;
        }
    return y;
}

/* y(with the request's adapters) − y(base) of one linear, f32 outputs (no
 * rounding to hide the delta), as fp64. */
static double *measured_delta(mm_dit_request *r, const mm_linear *lin, const mm_dit_lora_list *l, const mm_tensor *x)
{
    const int64_t rows = x->shape[0], n = lin->out_features;
    mm_tensor y1, y0;
    mm_tensor_alloc(&y1, mm_cpu(), MM_F32, 2, MM_SHAPE(rows, n), NULL);
    mm_tensor_alloc(&y0, mm_cpu(), MM_F32, 2, MM_SHAPE(rows, n), NULL);
    mm_dit_linear_lora(r, &y1, x, lin, l);
    mm_dit_linear(ctx, &r->ws, &y0, x, lin);
    double *d = malloc(sizeof(double) * (size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++)
        d[i] = (double)((float *)y1.data)[i] - (double)((float *)y0.data)[i];
    mm_tensor_free(&y1);
    mm_tensor_free(&y0);
    return mm_ctx_failed(ctx) ? (free(d), NULL) : d;
}

/* The bf16 output of an adapted linear is its f32 output rounded once
 * (base and branch summed before the rounding, not bf16(y) + bf16(Δ)). */
static bool rounded_once(mm_dit_request *r, const mm_linear *lin, const mm_dit_lora_list *l, const mm_tensor *x)
{
    const int64_t rows = x->shape[0], n = lin->out_features;
    mm_tensor y32, y16;
    mm_tensor_alloc(&y32, mm_cpu(), MM_F32, 2, MM_SHAPE(rows, n), NULL);
    mm_tensor_alloc(&y16, mm_cpu(), MM_BF16, 2, MM_SHAPE(rows, n), NULL);
    mm_dit_linear_lora(r, &y32, x, lin, l);
    mm_dit_linear_lora(r, &y16, x, lin, l);
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * n; i++)
        bad += mm_f32_to_bf16(((float *)y32.data)[i]) != ((uint16_t *)y16.data)[i];
    mm_tensor_free(&y32);
    mm_tensor_free(&y16);
    return bad == 0 && !mm_ctx_failed(ctx);
}

static void test_branch_matches_fp64_per_module(void)
{
    mm_lora *l = load_adapter("branch.safetensors", "--seed 11 --rank 16 --alpha 8 --condition --spelling diffusers");
    MM_REQUIRE(l, "adapter");
    mm_lora_use use = {l, 1.5f};
    mm_error err = {{0}};
    mm_dit_request *r = begin(&use, 1, &err);
    MM_REQUIRE(r, "%s", err.msg);
    const mm_dit_config *c = &dit->cfg;
    const int64_t rows = 48;
    double worst = 0;
    int checked = 0;
    for (int s = 0; s < 3; s++)
        for (int b = 0; b < (s == 0 ? c->layers : s == 1 ? c->refiner_layers : 1); b++)
            for (int w = 0; w < (s == 2 ? 1 : 4); w++) {
                const mm_dit_block_weights *bw = s == 0 ? &dit->blocks[b] : s == 1 ? &dit->refiner[b] : NULL;
                const mm_linear *lin = bw ? &bw->lin[w] : &dit->cond;
                const mm_dit_lora_list *list = mm_dit_lora_for(r, bw, w);
                MM_EXPECT(list && list->n == (w == 0 && s < 2 ? 3 : 1), "%s has its pieces", lin->name);
                if (!list)
                    continue;
                double *x64;
                mm_tensor x = random_x(rows, lin->in_features, 1000u + (uint64_t)(s * 100 + b * 10 + w), &x64);
                double *dw = lora_test_dense_delta(l, lin->name, lin->out_features, lin->in_features);
                double *got = measured_delta(r, lin, list, &x);
                MM_EXPECT(rounded_once(r, lin, list, &x), "%s: the bf16 output is the f32 result rounded once",
                          lin->name);
                double *ref = dw ? apply_dense(dw, x64, rows, lin->out_features, lin->in_features) : NULL;
                MM_EXPECT(got && ref, "%s: computed", lin->name);
                if (got && ref) {
                    for (int64_t i = 0; i < rows * lin->out_features; i++)
                        ref[i] *= use.strength;
                    double e = lora_test_rel_l2(got, ref, rows * lin->out_features);
                    worst = e > worst ? e : worst;
                    checked++;
                    MM_EXPECT(e < 1e-2, "%s (%s): rel_l2 %.3g of the branch against fp64 s*B*A*x", lin->name,
                              mm_weight_format_name(lin->format), e);
                }
                free(x64), free(dw), free(got), free(ref);
                mm_tensor_free(&x);
            }
    printf("     %d modules, worst rel_l2 %.2e (tolerance 1e-2)\n", checked, worst);
    mm_dit_request_end(r);
    mm_lora_free(l);
}

static void test_every_spelling_gives_the_same_forward(void)
{
    static const char *const sp[] = {"native", "comfy", "noalpha", "diffsynth", "kohya", "diffusers", "peft", "fused"};
    int64_t n;
    float *base = forward(NULL, 0, &n);
    MM_REQUIRE(base, "base forward");
    float *ref = NULL;
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) {
        char file[64], opts[128];
        snprintf(file, sizeof file, "same_%s.safetensors", sp[i]);
        const bool noalpha = strcmp(sp[i], "noalpha") == 0;
        snprintf(opts, sizeof opts, "--seed 5 --rank 16 --alpha %s --spelling %s", noalpha ? "16" : "8", sp[i]);
        mm_lora *l = load_adapter(file, opts);
        MM_EXPECT(l, "%s", sp[i]);
        if (!l)
            continue;
        mm_lora_use use = {l, noalpha ? 0.5f : 1.0f}; /* the same s = strength·alpha/rank */
        int64_t m;
        float *v = forward(&use, 1, &m);
        MM_EXPECT(v && m == n, "%s forward", sp[i]);
        if (v && !ref) {
            ref = v;
            double diff = 0, norm = 0;
            for (int64_t k = 0; k < n; k++)
                diff += ((double)v[k] - base[k]) * ((double)v[k] - base[k]), norm += (double)base[k] * base[k];
            MM_EXPECT(sqrt(diff / norm) > 1e-2, "the adapter changes the forward (rel %.3g)", sqrt(diff / norm));
        } else if (v) {
            int64_t bad = 0;
            for (int64_t k = 0; k < n; k++)
                bad += memcmp(&v[k], &ref[k], sizeof(float)) != 0;
            MM_EXPECT(bad == 0, "%s: %lld of %lld outputs differ from the native spelling's", sp[i], (long long)bad,
                      (long long)n);
            free(v);
        }
        mm_lora_free(l);
    }
    free(ref);
    free(base);
}

static void test_strength_zero_is_the_base_and_two_adapters_add(void)
{
    mm_lora *a = load_adapter("two_a.safetensors", "--seed 21 --rank 8 --spelling comfy");
    mm_lora *b = load_adapter("two_b.safetensors", "--seed 22 --rank 4 --spelling kohya");
    MM_REQUIRE(a && b, "adapters");
    int64_t n;
    float *base = forward(NULL, 0, &n);
    mm_lora_use zero = {a, 0.0f};
    float *z = forward(&zero, 1, &n);
    MM_REQUIRE(base && z, "forwards");
    MM_EXPECT(memcmp(base, z, sizeof(float) * (size_t)n) == 0, "strength 0 gives the base's bits");
    free(z);

    /* two adapters on one linear: the branch sums both, against fp64 */
    mm_lora_use both[2] = {{a, 0.7f}, {b, -1.25f}};
    mm_error err = {{0}};
    mm_dit_request *r = begin(both, 2, &err);
    MM_REQUIRE(r, "%s", err.msg);
    const mm_linear *lin = &dit->blocks[1].lin[MM_DIT_FC2];
    const mm_dit_lora_list *list = mm_dit_lora_for(r, &dit->blocks[1], MM_DIT_FC2);
    MM_EXPECT(list && list->n == 2, "both adapters' pieces on blocks.1 fc2");
    double *x64;
    mm_tensor x = random_x(32, lin->in_features, 77, &x64);
    double *da = lora_test_dense_delta(a, lin->name, lin->out_features, lin->in_features);
    double *db = lora_test_dense_delta(b, lin->name, lin->out_features, lin->in_features);
    const int64_t nw = lin->out_features * lin->in_features;
    for (int64_t i = 0; da && db && i < nw; i++)
        da[i] = 0.7 * da[i] - 1.25 * db[i];
    double *ref = da ? apply_dense(da, x64, 32, lin->out_features, lin->in_features) : NULL;
    double *got = list ? measured_delta(r, lin, list, &x) : NULL;
    MM_REQUIRE(ref && got, "computed");
    double e = lora_test_rel_l2(got, ref, 32 * lin->out_features);
    MM_EXPECT(e < 1e-2, "two adapters: rel_l2 %.3g", e);
    free(x64), free(da), free(db), free(ref), free(got);
    mm_tensor_free(&x);
    mm_dit_request_end(r);

    float *va = forward(&both[0], 1, &n), *vab = forward(both, 2, &n);
    MM_EXPECT(va && vab && memcmp(va, vab, sizeof(float) * (size_t)n) != 0, "the second adapter changes the forward");
    free(va), free(vab), free(base);
    mm_lora_free(a);
    mm_lora_free(b);
}

/* The control (fewstep.md §2.6): ΔW merged into the int8 ConvRot weights —
 * added to the dequantized rotated weight, requantized per row — at a
 * realistic size (max |s·ΔW| = 0.36 % of max |W|, the Turbo adapters' figure)
 * loses most of the delta; the branch on the same ΔW keeps it. */
static void test_merged_int8_control_loses_the_delta(void)
{
    mm_lora *l = load_adapter("control.safetensors", "--seed 31 --rank 16 --spelling native");
    MM_REQUIRE(l, "adapter");
    const mm_linear *lin = &dit->blocks[0].lin[MM_DIT_FC1];
    const int64_t N = lin->out_features, K = lin->in_features, rows = 40;
    double *dw = lora_test_dense_delta(l, lin->name, N, K);
    mm_tensor wrot, dwrot, dw32;
    mm_tensor_alloc(&wrot, mm_cpu(), MM_F32, 2, MM_SHAPE(N, K), NULL);
    mm_tensor_alloc(&dwrot, mm_cpu(), MM_F32, 2, MM_SHAPE(N, K), NULL);
    mm_tensor_alloc(&dw32, mm_cpu(), MM_F32, 2, MM_SHAPE(N, K), NULL);
    MM_REQUIRE(dw, "delta");
    mm_linear_dequantize(ctx, &wrot, lin); /* W·H */
    for (int64_t i = 0; i < N * K; i++)
        ((float *)dw32.data)[i] = (float)dw[i];
    mm_hadamard_rotate(ctx, &dwrot, &dw32, lin->group); /* ΔW·H */
    double wmax = 0, dmax = 0;
    for (int64_t i = 0; i < N * K; i++) {
        wmax = fmax(wmax, fabs(((float *)wrot.data)[i]));
        dmax = fmax(dmax, fabs(((float *)dwrot.data)[i]));
    }
    const float strength = (float)(0.0036 * wmax / dmax);
    /* merged: requantize W·H + s·ΔW·H per row like the producer (absmax/127, RNE, ±127) */
    mm_tensor qm, sm;
    mm_tensor_alloc(&qm, mm_cpu(), MM_I8, 2, MM_SHAPE(N, K), NULL);
    mm_tensor_alloc(&sm, mm_cpu(), MM_F32, 1, MM_SHAPE(N), NULL);
    for (int64_t n = 0; n < N; n++) {
        float *w = (float *)wrot.data + n * K, *d = (float *)dwrot.data + n * K, amax = 0;
        for (int64_t k = 0; k < K; k++)
            w[k] += strength * d[k], amax = fmaxf(amax, fabsf(w[k]));
        float sc = amax > 0 ? amax / 127.0f : 1.0f;
        ((float *)sm.data)[n] = sc;
        for (int64_t k = 0; k < K; k++)
            ((int8_t *)qm.data)[n * K + k] = (int8_t)fmaxf(-127.0f, fminf(127.0f, nearbyintf(w[k] / sc)));
    }
    double *x64;
    mm_tensor x = random_x(rows, K, 99, &x64);
    mm_tensor q, s, y0, y1;
    mm_tensor_alloc(&q, mm_cpu(), MM_I8, 2, MM_SHAPE(rows, K), NULL);
    mm_tensor_alloc(&s, mm_cpu(), MM_F32, 1, MM_SHAPE(rows), NULL);
    mm_tensor_alloc(&y0, mm_cpu(), MM_F32, 2, MM_SHAPE(rows, N), NULL);
    mm_tensor_alloc(&y1, mm_cpu(), MM_F32, 2, MM_SHAPE(rows, N), NULL);
    mm_convrot_quantize(ctx, &q, &s, &x, lin->group);
    mm_gemm_i8_scaled(ctx, &y0, &q, &s, &lin->weight, &lin->weight_scale, NULL);
    mm_gemm_i8_scaled(ctx, &y1, &q, &s, &qm, &sm, NULL);
    double *ref = apply_dense(dw, x64, rows, N, K), *merged = malloc(sizeof(double) * (size_t)(rows * N));
    for (int64_t i = 0; i < rows * N; i++) {
        ref[i] *= strength;
        merged[i] = (double)((float *)y1.data)[i] - ((float *)y0.data)[i];
    }
    const double e_merged = lora_test_rel_l2(merged, ref, rows * N);

    mm_lora_use use = {l, strength};
    mm_error err = {{0}};
    mm_dit_request *r = begin(&use, 1, &err);
    MM_REQUIRE(r, "%s", err.msg);
    double *branch = measured_delta(r, lin, mm_dit_lora_for(r, &dit->blocks[0], MM_DIT_FC1), &x);
    const double e_branch = branch ? lora_test_rel_l2(branch, ref, rows * N) : INFINITY;
    printf("     max|s*dW|/max|W| = 0.0036: merged-int8 rel_l2 %.3f, branch %.2e\n", e_merged, e_branch);
    MM_EXPECT(e_merged > 0.5, "the merged control keeps the delta (rel_l2 %.3f): the test could not tell", e_merged);
    MM_EXPECT(e_branch < 1e-2, "branch rel_l2 %.3g", e_branch);
    mm_dit_request_end(r);
    mm_tensor *all[] = {&wrot, &dwrot, &dw32, &qm, &sm, &x, &q, &s, &y0, &y1};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        mm_tensor_free(all[i]);
    free(dw), free(x64), free(ref), free(merged), free(branch);
    mm_lora_free(l);
}

static void test_parts_the_branch_cannot_take_are_refused(void)
{
    struct {
        const char *file, *opts, *needle;
    } cases[] = {
        {"dense.safetensors", "--dense --spelling diffusers", "mmh3 convert"},
        /* AdaLN pairs and PDD banks apply through the AdaLN path (test_dit_adaln); full-width ones need the grid */
        {"adaln.safetensors", "--adaln --adaln-in 2688 --spelling native", "h3_silu_temb_grid"},
        {"wide.safetensors", "--hidden 512 --spelling native", "[rank, 256]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mm_lora *l = load_adapter(cases[i].file, cases[i].opts);
        MM_EXPECT(l, "%s", cases[i].file);
        if (!l)
            continue;
        mm_lora_use use = {l, 1.0f};
        mm_error err = {{0}};
        mm_dit_request *r = begin(&use, 1, &err);
        MM_EXPECT(!r && strstr(err.msg, cases[i].file) && strstr(err.msg, cases[i].needle), "%s: '%s'", cases[i].file,
                  err.msg);
        mm_dit_request_end(r);
        mm_lora_free(l);
    }
    /* an adapter not uploaded to the request's device */
    char path[700];
    mm_lora *l = NULL;
    mm_error err = {{0}};
    MM_REQUIRE(lora_test_write(path, sizeof path, "idle.safetensors", "--spelling native") &&
                   mm_lora_open(&l, path, NULL, &err) == 0,
               "%s", err.msg);
    mm_lora_use use = {l, 1.0f};
    mm_dit_request *r = begin(&use, 1, &err);
    MM_EXPECT(!r && strstr(err.msg, "mm_lora_upload"), "not uploaded: '%s'", err.msg);
    mm_lora_free(l);
    /* the context stays usable */
    int64_t n;
    float *v = forward(NULL, 0, &n);
    MM_EXPECT(v, "a request after the refusals runs");
    free(v);
}

static int run_cmd(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    size_t k = 0;
    if (p)
        while (k + 1 < n && fgets(out + k, (int)(n - k), p))
            k += strlen(out + k);
    out[k] = 0;
    int rc = p ? pclose(p) : -1;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* `mmh3 conformance KIT --lora FILE:S --out OUT` runs every case with the
 * adapter and writes what the engine computes (the same bits as a forward
 * here); a malformed adapter stops it with the file and the key named, and
 * --lora needs --out. */
static void test_conformance_applies_adapters(void)
{
    char path[700], out[700], cmd[3000], log[1 << 15];
    mm_lora *l = load_adapter("conf.safetensors", "--seed 41 --rank 8 --spelling diffusers --condition");
    MM_REQUIRE(l, "adapter");
    snprintf(path, sizeof path, "%s/conf.safetensors", lora_test_dir);
    snprintf(out, sizeof out, "%s/conf_out.safetensors", lora_test_dir);
    const char *b = getenv("MMH3_BUILD");
    snprintf(cmd, sizeof cmd, "'%s/mmh3' conformance '%s/dit' --lora '%s:0.6' --out '%s' 2>&1", b ? b : ".",
             mm_test_data_dir(), path, out);
    int rc = run_cmd(cmd, log, sizeof log);
    MM_EXPECT(rc == 0 && strstr(log, "adapters applied") && strstr(log, "note fl2va_first_step2 out.video") &&
                  !strstr(log, "\nFAIL"),
              "exit %d:\n%.2000s", rc, log);
    mm_lora_use use = {l, 0.6f};
    int64_t n;
    float *mine = forward(&use, 1, &n);
    mm_safetensors *st = NULL;
    mm_error err = {{0}};
    MM_REQUIRE(mine && mm_st_open(&st, out, &err) == 0, "%s", err.msg);
    const mm_st_entry *v = mm_st_find(st, "fl2va_first_step2.out.video");
    const int64_t nv = kcase.l.video_rows * dit->cfg.video_row_width;
    MM_EXPECT(v && v->dtype == MM_F32 && memcmp(v->data, mine, sizeof(float) * (size_t)nv) == 0,
              "the written video velocities are the engine's with the adapter, bit for bit");
    mm_st_close(st);
    free(mine);
    mm_lora_free(l);

    /* a malformed adapter: exit 1, the file and the key named */
    char bad[700];
    snprintf(bad, sizeof bad, "%s/conf_bad.safetensors", lora_test_dir);
    float w[8] = {0};
    const char *names[] = {"blocks.0.mlp.fc2.lora_A.weight", "blocks.0.mlp.fc2.lora_B.weight"};
    mm_tensor ts[] = {mm_tensor_wrap(w, mm_cpu(), MM_F32, 2, MM_SHAPE(2, 4)),
                      mm_tensor_wrap(w, mm_cpu(), MM_F32, 2, MM_SHAPE(4, 2))};
    MM_REQUIRE(mm_st_save(bad, 2, names, ts, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "'%s/mmh3' conformance '%s/dit' --lora '%s' --out '%s' 2>&1", b ? b : ".",
             mm_test_data_dir(), bad, out);
    rc = run_cmd(cmd, log, sizeof log);
    MM_EXPECT(rc >= 1 && rc <= 125 && strstr(log, "conf_bad.safetensors") &&
                  strstr(log, "blocks.0.mlp.fc2.lora_A.weight") && strstr(log, "[rank, 512]"),
              "malformed: exit %d:\n%.1500s", rc, log);
    snprintf(cmd, sizeof cmd, "'%s/mmh3' conformance '%s/dit' --lora '%s' 2>&1", b ? b : ".", mm_test_data_dir(), path);
    rc = run_cmd(cmd, log, sizeof log);
    MM_EXPECT(rc == 2 && strstr(log, "--out"), "--lora without --out: exit %d: %s", rc, log);
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    json_error_t jerr;
    manifest = json_load_file(path, 0, &jerr);
    cases = kit_open("cases.safetensors");
    mm_error err = {{0}};
    if (!manifest || !cases || lora_test_setup("dit-lora") != 0 || mm_ctx_create(&ctx, mm_cpu(), 0, &err) != 0) {
        printf("FAIL setup: %s\n", manifest ? err.msg : jerr.text);
        return 1;
    }
    snprintf(path, sizeof path, "%s/dit/dit.safetensors", mm_test_data_dir());
    if (mm_dit_load(&dit, path, ctx, NULL, &err) != 0 || kit_forward_case_load(&kcase, manifest, cases, CASE) != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    MM_RUN(test_branch_matches_fp64_per_module);
    MM_RUN(test_every_spelling_gives_the_same_forward);
    MM_RUN(test_strength_zero_is_the_base_and_two_adapters_add);
    MM_RUN(test_merged_int8_control_loses_the_delta);
    MM_RUN(test_parts_the_branch_cannot_take_are_refused);
    MM_RUN(test_conformance_applies_adapters);
    kit_forward_case_free(&kcase);
    mm_dit_free(dit);
    lora_test_cleanup();
    mm_ctx_destroy(ctx);
    mm_st_close(cases);
    json_decref(manifest);
    return mm_test_exit();
}
