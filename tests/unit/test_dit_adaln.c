/* AdaLN adapters and PDD head banks on the pruned base (src/model/dit/
 * adaln_adapters.c), on the conformance kit's tiny DiT (CPU):
 *   - an AdaLN pair trained on the pruned base (A [r, 8]) and one trained on
 *     the full model (A [r, W], reading a SiLU(temb) grid): the engine's
 *     block-0 and final-layer modulation (f32, before the bf16 rounding)
 *     against W·e + b + s·B·(A·e) computed here in double from the same
 *     table / grid, and the adapter's delta alone against s·B·A·e;
 *   - strength 0 is the base forward bit for bit, two adapters add;
 *   - a PDD bank: one-hot weights give the forward of a checkpoint whose
 *     heads are that bank head, bit for bit; a blended step and a strength
 *     below 1 give the forward of a checkpoint holding the blend computed
 *     here; a forward without weights is refused;
 *   - what cannot apply is refused by name: full-width pairs without the
 *     grid, a grid of another width, time-embedder pairs;
 *   - with MMH3_ADALN_REF=DIR (written on the device by
 *     tests/device/adaln_adapter_ref.py, PyTorch): every kit case with its
 *     adapters, grid and PDD bank against PyTorch's velocities, within the
 *     kit's forward tolerance, on MMH3_ADALN_DEVICE (cpu, default, or cuda). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/ops.h"
#include "conformance/dit_kit.h"
#include "core/dtype.h"
#include "lora_test.h"
#include "model/dit/dit.h"
#include "sampler/schedule.h"
#include "test.h"
#include "test_sampler_kit.h"

static json_t *manifest;
static mm_safetensors *cases;
static mm_ctx *ctx;
static mm_dit *dit;
static kit_forward_case kcase;
static char kit_path[1024];
static const char *CASE = "fl2va_first_step2"; /* 3 distinct timesteps, condition rows */

typedef struct capture {
    float *block0, *final;
    int64_t n0, nf;
} capture;

static void on_capture(void *user, const char *name, const mm_tensor *t)
{
    capture *c = user;
    float **dst = strcmp(name, "block0_adaln") == 0 ? &c->block0 : strcmp(name, "final_adaln") == 0 ? &c->final : NULL;
    if (!dst)
        return;
    int64_t n = mm_tensor_numel(t);
    free(*dst);
    *dst = malloc(sizeof(float) * (size_t)n);
    memcpy(*dst, t->data, sizeof(float) * (size_t)n);
    *(dst == &c->block0 ? &c->n0 : &c->nf) = n;
}

static void capture_free(capture *c)
{
    free(c->block0);
    free(c->final);
    memset(c, 0, sizeof *c);
}

/* One forward of the kit case on `model`: malloc'ed [video | audio]; PDD weights set when given. */
static float *forward(mm_dit *model, const mm_lora_use *uses, int n, capture *cap, const float *wv, const float *wa,
                      int64_t *count, mm_error *err)
{
    const mm_dit_config *c = mm_dit_get_config(model);
    const int64_t nv = kcase.l.video_rows * c->video_row_width, na = kcase.l.audio_rows * c->audio_row_width;
    float *out = calloc((size_t)(nv + na), sizeof(float));
    mm_tensor vv = mm_tensor_wrap(out, mm_cpu(), MM_F32, 2, MM_SHAPE(kcase.l.video_rows, c->video_row_width));
    mm_tensor va = mm_tensor_wrap(out + nv, mm_cpu(), MM_F32, 2, MM_SHAPE(kcase.l.audio_rows, c->audio_row_width));
    mm_dit_request_opts o = {.loras = uses, .n_loras = n};
    mm_dit_debug dbg = {.capture = on_capture, .user = cap};
    mm_dit_request *r = NULL;
    if (mm_dit_request_begin_ex(model, ctx, &kcase.l, &kcase.text, &o, cap ? &dbg : NULL, &r, err) != 0 ||
        ((wv || wa) && mm_dit_request_set_head_weights(r, wv, wa, err) != 0) ||
        mm_dit_forward(r, kcase.row_t, &kcase.video, &kcase.audio, &vv, &va, err) != 0) {
        free(out);
        out = NULL;
    }
    mm_dit_request_end(r);
    *count = nv + na;
    return out;
}

static mm_lora *adapter(const char *file, const char *opts)
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

/* ------------------------------------------------------------ the math in double */

static double get(const mm_tensor *t, int64_t i, int64_t j)
{
    return t->ndim == 1 ? mm_tensor_get(t, (int64_t[MM_MAX_DIMS]){i}) : mm_tensor_get(t, (int64_t[MM_MAX_DIMS]){i, j});
}

/* e(t) of a pair: the table row (pruned-base adapters) or the grid row (full-model ones). */
static void input_row(const mm_tensor *src, bool grid, double t, double *e)
{
    const int64_t n = src->shape[0], w = src->shape[1];
    double pos = (t < 0 ? 0 : t > 1 ? 1 : t) * (double)(n - 1);
    int64_t lo = (int64_t)floor(pos), hi;
    if (grid) { /* Larry's node: i0 clamped to n − 2 */
        lo = lo > n - 2 ? n - 2 : lo;
        hi = lo + 1;
    } else { /* the table: lo clamped to n − 1, hi = min(lo + 1, n − 1) */
        lo = lo > n - 1 ? n - 1 : lo;
        hi = lo + 1 < n - 1 ? lo + 1 : n - 1;
    }
    double f = pos - (double)lo;
    for (int64_t k = 0; k < w; k++) {
        double a = get(src, lo, k), b = get(src, hi, k);
        e[k] = grid ? a + f * (b - a) : a * (1 - f) + b * f;
    }
}

/* s·B·(A·e) of every AdaLN pair of `module` (all uses), added into out [rows]. */
static void pair_delta(const mm_lora_use *uses, int n, const char *module, const mm_tensor *table,
                       const mm_tensor *grid, double t, double *out, int64_t rows)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < uses[i].lora->n_pairs; k++) {
            const mm_lora_pair *p = &uses[i].lora->pairs[k];
            if (p->which != MM_LORA_ADALN || strcmp(p->module, module) != 0)
                continue;
            const bool g = p->in_features != table->shape[1];
            double e[4096], u[512];
            input_row(g ? grid : table, g, t, e);
            for (int j = 0; j < p->rank; j++) {
                u[j] = 0;
                for (int64_t c = 0; c < p->in_features; c++)
                    u[j] += get(&p->a, j, c) * e[c];
            }
            const double s = (double)uses[i].strength * p->scale;
            for (int64_t r = 0; r < rows; r++) {
                double acc = 0;
                for (int j = 0; j < p->rank; j++)
                    acc += get(&p->b, r, j) * u[j];
                out[r] += s * acc;
            }
        }
}

/* The base modulation W·e + b of `prefix` (block 0 or the final layer) from the kit file. */
static void base_mod(const mm_safetensors *st, const char *prefix, const mm_tensor *table, double t, double *out,
                     int64_t rows)
{
    char name[256];
    mm_tensor w, b;
    snprintf(name, sizeof name, "%s.weight", prefix);
    mm_st_get(st, name, &w, NULL);
    snprintf(name, sizeof name, "%s.bias", prefix);
    mm_st_get(st, name, &b, NULL);
    double e[64];
    input_row(table, false, t, e);
    for (int64_t r = 0; r < rows; r++) {
        double acc = get(&b, r, 0);
        for (int64_t k = 0; k < w.shape[1]; k++)
            acc += get(&w, r, k) * e[k];
        out[r] = acc;
    }
}

static double rel_l2(const double *a, const double *ref, int64_t n) { return lora_test_rel_l2(a, ref, n); }

/* The engine's block-0 and final modulation with `uses` against the double math. */
static void check_modulation(const char *what, const mm_lora_use *uses, int n, const mm_tensor *grid)
{
    mm_safetensors *st;
    mm_error err = {{0}};
    MM_REQUIRE(mm_st_open(&st, kit_path, &err) == 0, "%s", err.msg);
    mm_tensor table;
    mm_st_get(st, "adaln_t_table", &table, NULL);
    capture with = {0}, without = {0};
    int64_t count;
    float *v1 = forward(dit, uses, n, &with, NULL, NULL, &count, &err);
    MM_REQUIRE(v1, "%s: %s", what, err.msg);
    float *v0 = forward(dit, NULL, 0, &without, NULL, NULL, &count, &err);
    MM_REQUIRE(v0, "base: %s", err.msg);
    float u[8];
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)kcase.l.rows);
    const int m = mm_dit_unique_timesteps(kcase.row_t, kcase.l.rows, u, 8, ti);
    free(ti);
    const int64_t H = mm_dit_get_config(dit)->hidden;
    const struct { const char *module; const float *got, *base; int64_t rows, n; } parts[2] = {
        {"blocks.0.adaln_proj.linear", with.block0, without.block0, 18 * H, with.n0},
        {"final_layer.adaln_proj.linear", with.final, without.final, 2 * H, with.nf},
    };
    for (int pi = 0; pi < 2; pi++) {
        const int64_t rows = parts[pi].rows;
        MM_REQUIRE(parts[pi].n == m * rows, "%s: captured %lld for %d timesteps", parts[pi].module,
                   (long long)parts[pi].n, m);
        double *ref = calloc((size_t)(m * rows), sizeof(double)), *dref = calloc((size_t)(m * rows), sizeof(double));
        double *got = malloc(sizeof(double) * (size_t)(m * rows)), *dgot = malloc(sizeof(double) * (size_t)(m * rows));
        for (int k = 0; k < m; k++) {
            base_mod(st, parts[pi].module, &table, u[k], ref + k * rows, rows);
            pair_delta(uses, n, parts[pi].module, &table, grid, u[k], dref + k * rows, rows);
        }
        for (int64_t i = 0; i < m * rows; i++) {
            ref[i] += dref[i];
            got[i] = parts[pi].got[i];
            dgot[i] = (double)parts[pi].got[i] - parts[pi].base[i];
        }
        double whole = rel_l2(got, ref, m * rows), delta = rel_l2(dgot, dref, m * rows);
        MM_EXPECT(whole < 1e-6 && delta < 1e-4, "%s, %s: modulation rel_l2 %.3g, the adapter's delta %.3g", what,
                  parts[pi].module, whole, delta);
        printf("     %-26s %-30s modulation vs fp64 %.2g, delta vs s·B·A·e %.2g\n", what, parts[pi].module, whole,
               delta);
        free(ref), free(dref), free(got), free(dgot);
    }
    double diff = 0;
    for (int64_t i = 0; i < count; i++)
        diff = fmax(diff, fabs((double)v1[i] - v0[i]));
    MM_EXPECT(diff > 1e-3, "%s: the velocities did not change (max |Δ| %g)", what, diff);
    free(v0);
    free(v1);
    capture_free(&with);
    capture_free(&without);
    mm_st_close(st);
}

/* ------------------------------------------------------------ tests */

static void test_pruned_base_adaln_pairs(void)
{
    mm_lora *l = adapter("adaln8.safetensors", "--adaln --adaln-rank 4 --gain 0.3 --spelling native");
    MM_REQUIRE(l, "adapter");
    mm_lora_use use = {l, 0.8f};
    check_modulation("pruned-width (A [4, 8])", &use, 1, NULL);
    mm_lora_free(l);
}

static char grid_path[700];

static void write_grid(const char *path, int64_t width)
{
    float *g = malloc(sizeof(float) * (size_t)(1025 * width));
    for (int64_t k = 0; k < 1025; k++)
        for (int64_t j = 0; j < width; j++) {
            double t = k / 1024.0;
            g[k * width + j] = (float)(sin(3.0 * t + 0.7 * j) + 0.3 * cos(11.0 * t * (1 + j % 5)) + 0.01 * ((k * 7 + j) % 13));
        }
    mm_tensor t = mm_tensor_wrap(g, mm_cpu(), MM_F32, 2, MM_SHAPE(1025, width));
    const char *names[] = {"silu_t_emb_grid"};
    mm_error err = {{0}};
    if (mm_st_save(path, 1, names, &t, &err) != 0)
        printf("     grid: %s\n", err.msg);
    free(g);
}

static void test_full_model_adaln_pairs_read_the_grid(void)
{
    mm_lora *l = adapter("adaln32.safetensors", "--adaln --adaln-in 32 --adaln-rank 4 --gain 0.3 --spelling native");
    MM_REQUIRE(l, "adapter");
    mm_lora_use use = {l, 1.0f};
    /* refused while the DiT has no grid, then with a grid of another width */
    mm_error err = {{0}};
    int64_t count;
    float *v = forward(dit, &use, 1, NULL, NULL, NULL, &count, &err);
    MM_EXPECT(!v && strstr(err.msg, "h3_silu_temb_grid") && strstr(err.msg, "reads 32 features") &&
                  strstr(err.msg, "adaln32.safetensors"),
              "no grid: '%s'", err.msg);
    free(v);
    char narrow[700];
    snprintf(narrow, sizeof narrow, "%s/grid16.safetensors", lora_test_dir);
    write_grid(narrow, 16);
    MM_REQUIRE(mm_dit_set_silu_grid(dit, narrow, &err) == 0, "%s", err.msg);
    v = forward(dit, &use, 1, NULL, NULL, NULL, &count, &err);
    MM_EXPECT(!v && strstr(err.msg, "the SiLU(temb) grid 16"), "narrow grid: '%s'", err.msg);
    free(v);
    snprintf(grid_path, sizeof grid_path, "%s/grid32.safetensors", lora_test_dir);
    write_grid(grid_path, 32);
    MM_REQUIRE(mm_dit_set_silu_grid(dit, grid_path, &err) == 0 && mm_dit_has_silu_grid(dit), "%s", err.msg);
    mm_safetensors *gs;
    MM_REQUIRE(mm_st_open(&gs, grid_path, &err) == 0, "%s", err.msg);
    mm_tensor g;
    mm_st_get(gs, "silu_t_emb_grid", &g, NULL);
    check_modulation("full-width (A [4, 32])", &use, 1, &g);

    /* together with a pruned-width adapter at another strength: the deltas add */
    mm_lora *l8 = adapter("adaln8b.safetensors", "--adaln --adaln-rank 2 --seed 5 --spelling diffusers");
    MM_REQUIRE(l8, "second adapter");
    mm_lora_use both[2] = {{l, 0.5f}, {l8, -1.25f}};
    check_modulation("two adapters (0.5, -1.25)", both, 2, &g);
    mm_st_close(gs);
    mm_lora_free(l8);
    mm_lora_free(l);
}

static void test_strength_zero_is_the_base(void)
{
    mm_lora *l = adapter("adaln_zero.safetensors", "--adaln --adaln-in 32 --adaln-rank 4 --spelling native");
    MM_REQUIRE(l && grid_path[0], "adapter and grid");
    mm_lora_use use = {l, 0.0f};
    mm_error err = {{0}};
    int64_t n0, n1;
    float *base = forward(dit, NULL, 0, NULL, NULL, NULL, &n0, &err);
    float *zero = forward(dit, &use, 1, NULL, NULL, NULL, &n1, &err);
    MM_REQUIRE(base && zero, "%s", err.msg);
    MM_EXPECT(n0 == n1 && memcmp(base, zero, sizeof(float) * (size_t)n0) == 0, "strength 0 is not the base forward");
    free(base);
    free(zero);
    mm_lora_free(l);
}

/* ---- PDD banks (a hand-built handle: banks only) */

#define HEADS 32

static float *bank_w[2], *bank_b[2];
static mm_lora pdd;

static void make_bank(void)
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    const int64_t outs[2] = {c->video_row_width, c->audio_row_width}, H = c->hidden;
    uint64_t seed = 4242;
    for (int side = 0; side < 2; side++) {
        bank_w[side] = malloc(sizeof(float) * (size_t)(HEADS * outs[side] * H));
        bank_b[side] = malloc(sizeof(float) * (size_t)(HEADS * outs[side]));
        for (int64_t i = 0; i < HEADS * outs[side] * H; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            bank_w[side][i] = (float)(((seed >> 40) / 16777216.0 - 0.5) * 0.1);
        }
        for (int64_t i = 0; i < HEADS * outs[side]; i++)
            bank_b[side][i] = (float)(0.01 * (i % 7) - 0.03);
        pdd.banks[side] = (mm_lora_bank){
            .audio = side == 1,
            .weight = mm_tensor_wrap(bank_w[side], mm_cpu(), MM_F32, 3, MM_SHAPE(HEADS, outs[side], H)),
            .bias = mm_tensor_wrap(bank_b[side], mm_cpu(), MM_F32, 2, MM_SHAPE(HEADS, outs[side])),
        };
        snprintf(pdd.banks[side].key, sizeof pdd.banks[side].key, "%s.weight", side ? "audio_proj_out" : "proj_out");
    }
    snprintf(pdd.path, sizeof pdd.path, "pdd_bank (hand-built)");
    pdd.name = pdd.path;
    pdd.n_banks = 2;
    pdd.uploaded = true;
    pdd.device = mm_cpu();
}

/* A copy of the kit whose heads are `heads` (f32 [out, H] + bias per side), loaded. */
static mm_dit *dit_with_heads(float *const heads[2][2], const char *path)
{
    mm_safetensors *st;
    mm_error err = {{0}};
    if (mm_st_open(&st, kit_path, &err) != 0)
        return NULL;
    const size_t n = mm_st_count(st);
    const char **names = calloc(n, sizeof *names);
    mm_tensor *ts = calloc(n, sizeof *ts);
    static const char *const hn[2][2] = {{"final_layer.video_out.weight", "final_layer.video_out.bias"},
                                         {"final_layer.audio_out.weight", "final_layer.audio_out.bias"}};
    for (size_t i = 0; i < n; i++) {
        const mm_st_entry *e = mm_st_at(st, i);
        names[i] = e->name;
        ts[i] = mm_tensor_wrap((void *)e->data, mm_cpu(), e->dtype, e->ndim, e->shape);
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 2; k++)
                if (strcmp(e->name, hn[s][k]) == 0)
                    ts[i].data = heads[s][k];
    }
    int rc = mm_st_save(path, n, names, ts, &err);
    free(names);
    free(ts);
    mm_st_close(st);
    mm_dit *d = NULL;
    if (rc != 0 || mm_dit_load(&d, path, ctx, NULL, &err) != 0) {
        printf("     %s: %s\n", path, err.msg);
        return NULL;
    }
    return d;
}

/* The heads the engine should use for weights w (and strength s), in double → f32, as a checkpoint holds them. */
static void expected_heads(const float *wv, const float *wa, float s, float *out[2][2])
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    const int64_t outs[2] = {c->video_row_width, c->audio_row_width}, H = c->hidden;
    mm_safetensors *st;
    mm_st_open(&st, kit_path, NULL);
    static const char *const hn[2][2] = {{"final_layer.video_out.weight", "final_layer.video_out.bias"},
                                         {"final_layer.audio_out.weight", "final_layer.audio_out.bias"}};
    for (int side = 0; side < 2; side++) {
        const float *w = side ? wa : wv;
        const int64_t o = outs[side];
        for (int k = 0; k < 2; k++) {
            const int64_t len = k ? o : o * H;
            const float *bank = k ? bank_b[side] : bank_w[side];
            mm_tensor base;
            mm_st_get(st, hn[side][k], &base, NULL);
            out[side][k] = malloc(sizeof(float) * (size_t)len);
            for (int64_t i = 0; i < len; i++) {
                double acc = 0;
                for (int l = 0; l < HEADS; l++)
                    if (w[l] != 0.0f)
                        acc += (double)w[l] * bank[l * len + i];
                if (s != 1.0f) {
                    double b = ((const float *)base.data)[i];
                    acc = b + s * (acc - b);
                }
                out[side][k][i] = (float)acc;
            }
        }
    }
    mm_st_close(st);
}

static void check_bank(const char *what, const float *wv, const float *wa, float strength)
{
    float *heads[2][2];
    expected_heads(wv, wa, strength, heads);
    char path[700];
    snprintf(path, sizeof path, "%s/heads.safetensors", lora_test_dir);
    mm_dit *ref = dit_with_heads(heads, path);
    MM_REQUIRE(ref, "%s: reference checkpoint", what);
    mm_lora_use use = {&pdd, strength};
    mm_error err = {{0}};
    int64_t n0, n1;
    float *want = forward(ref, NULL, 0, NULL, NULL, NULL, &n0, &err);
    float *got = forward(dit, &use, 1, NULL, wv, wa, &n1, &err);
    MM_REQUIRE(want && got, "%s: %s", what, err.msg);
    MM_EXPECT(n0 == n1 && memcmp(want, got, sizeof(float) * (size_t)n0) == 0,
              "%s: the blended heads' forward differs from the checkpoint holding them", what);
    free(want);
    free(got);
    mm_dit_free(ref);
    unlink(path);
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++)
            free(heads[s][k]);
}

static void test_pdd_bank_heads(void)
{
    make_bank();
    float onehot[HEADS] = {0};
    onehot[13] = 1.0f;
    check_bank("one-hot head 13", onehot, onehot, 1.0f);
    mm_schedule s;
    mm_error err = {{0}};
    MM_REQUIRE(mm_schedule_preset("pdd8", &s, &err) == 0, "%s", err.msg);
    check_bank("pdd8 step 3", s.bank_weights[0] + 3 * HEADS, s.bank_weights[1] + 3 * HEADS, 1.0f);
    check_bank("pdd8 step 6 at strength 0.5", s.bank_weights[0] + 6 * HEADS, s.bank_weights[1] + 6 * HEADS, 0.5f);
    /* no weights: refused; weights that do not sum to 1: refused */
    mm_lora_use use = {&pdd, 1.0f};
    int64_t n;
    float *v = forward(dit, &use, 1, NULL, NULL, NULL, &n, &err);
    MM_EXPECT(!v && strstr(err.msg, "head weights"), "no weights: '%s'", err.msg);
    free(v);
    float bad[HEADS] = {0.5f, 0.25f};
    v = forward(dit, &use, 1, NULL, bad, bad, &n, &err);
    MM_EXPECT(!v && strstr(err.msg, "sum to 0.75"), "bad weights: '%s'", err.msg);
    free(v);
    mm_schedule_free(&s);
}

static void test_time_embedder_pairs_are_refused(void)
{
    static float a[4 * 256], b[16 * 4];
    mm_lora t = {0};
    snprintf(t.path, sizeof t.path, "hyperflow_like.safetensors");
    t.name = t.path;
    mm_lora_pair p = {.scope = MM_LORA_ENDPOINT_EMBEDDER, .which = MM_LORA_TIME_IN, .rows = 16, .in_features = 256,
                      .rank = 4, .alpha = 4, .scale = 1};
    snprintf(p.module, sizeof p.module, "endpoint_time_embedder.proj_in");
    snprintf(p.key, sizeof p.key, "transformer.endpoint_time_embedder.linear_1.lora_A.weight");
    p.a = mm_tensor_wrap(a, mm_cpu(), MM_F32, 2, MM_SHAPE(4, 256));
    p.b = mm_tensor_wrap(b, mm_cpu(), MM_F32, 2, MM_SHAPE(16, 4));
    t.pairs = &p;
    t.n_pairs = 1;
    t.uploaded = true;
    t.device = mm_cpu();
    mm_lora_use use = {&t, 1.0f};
    mm_error err = {{0}};
    int64_t n;
    float *v = forward(dit, &use, 1, NULL, NULL, NULL, &n, &err);
    MM_EXPECT(!v && strstr(err.msg, "hyperflow_like.safetensors") && strstr(err.msg, "no time MLP") &&
                  strstr(err.msg, "endpoint_time_embedder"),
              "time pair: '%s'", err.msg);
    free(v);
}

/* ---- against PyTorch (the device) */

/* One forward of kit case `name` on `model` (any device): host velocities [video | audio]. */
static float *forward_on(mm_ctx *c, mm_dit *model, const char *name, const mm_lora_use *uses, int n, bool pdd,
                         int64_t *nv_out, int64_t *na_out, mm_error *err)
{
    kit_forward_case f;
    if (kit_forward_case_load(&f, manifest, cases, name) != 0) {
        mm_fail(err, "case %s", name);
        return NULL;
    }
    const mm_dit_config *cfg = mm_dit_get_config(model);
    const int64_t nv = f.l.video_rows * cfg->video_row_width, na = f.l.audio_rows * cfg->audio_row_width;
    float *host = calloc((size_t)(nv + na), sizeof(float));
    mm_device dev = mm_ctx_device(c);
    mm_tensor in[2], out[2];
    const int64_t rows[2] = {f.l.video_rows, f.l.audio_rows}, width[2] = {cfg->video_row_width, cfg->audio_row_width};
    const mm_tensor *src[2] = {&f.video, &f.audio};
    int rc = 0;
    for (int s = 0; s < 2 && rc == 0; s++) {
        rc = mm_tensor_alloc(&in[s], dev, MM_F32, 2, MM_SHAPE(rows[s], width[s]), err) ||
             mm_tensor_alloc(&out[s], dev, MM_F32, 2, MM_SHAPE(rows[s], width[s]), err);
        if (rc == 0)
            mm_copy(c, &in[s], src[s]);
    }
    mm_schedule sched = {0};
    mm_dit_request_opts o = {.loras = uses, .n_loras = n};
    mm_dit_request *r = NULL;
    if (rc == 0 && (mm_dit_request_begin_ex(model, c, &f.l, &f.text, &o, NULL, &r, err) != 0 ||
                    (pdd && (mm_schedule_preset("pdd8", &sched, err) != 0 ||
                             mm_dit_request_set_head_weights(r, sched.bank_weights[0] + 3 * HEADS,
                                                             sched.bank_weights[1] + 3 * HEADS, err) != 0)) ||
                    mm_dit_forward(r, f.row_t, &in[0], &in[1], &out[0], &out[1], err) != 0))
        rc = -1;
    if (rc == 0) {
        mm_tensor hv = mm_tensor_wrap(host, mm_cpu(), MM_F32, 2, MM_SHAPE(rows[0], width[0]));
        mm_tensor ha = mm_tensor_wrap(host + nv, mm_cpu(), MM_F32, 2, MM_SHAPE(rows[1], width[1]));
        mm_copy(c, &hv, &out[0]);
        mm_copy(c, &ha, &out[1]);
        rc = mm_ctx_sync(c, err);
    }
    mm_dit_request_end(r);
    mm_schedule_free(&sched);
    for (int s = 0; s < 2; s++) {
        mm_tensor_free(&in[s]);
        mm_tensor_free(&out[s]);
    }
    kit_forward_case_free(&f);
    if (rc != 0) {
        free(host);
        return NULL;
    }
    *nv_out = nv;
    *na_out = na;
    return host;
}

static void test_matches_the_pytorch_reference(void)
{
    const char *dir = getenv("MMH3_ADALN_REF"), *devname = getenv("MMH3_ADALN_DEVICE");
    mm_device dev = mm_cpu();
    mm_error err = {{0}};
    if (devname && strncmp(devname, "cuda", 4) == 0)
        dev = mm_cuda(devname[4] == ':' ? atoi(devname + 5) : 0);
    else if (devname && strcmp(devname, "cpu") != 0)
        MM_REQUIRE(0, "MMH3_ADALN_DEVICE=%s: accepted cpu, cuda or cuda:N", devname);
    mm_ctx *c = NULL;
    mm_dit *model = NULL;
    mm_lora *adaln = NULL, *bank = NULL;
    mm_safetensors *ref = NULL;
    char p[1200], g[1200], b[1200], rf[1200];
    snprintf(p, sizeof p, "%s/adapter_adaln.safetensors", dir);
    snprintf(b, sizeof b, "%s/adapter_pdd.safetensors", dir);
    snprintf(g, sizeof g, "%s/h3_silu_temb_grid.safetensors", dir);
    snprintf(rf, sizeof rf, "%s/reference.safetensors", dir);
    MM_REQUIRE(mm_ctx_create(&c, dev, 2, &err) == 0 && mm_dit_load(&model, kit_path, c, NULL, &err) == 0 &&
                   mm_dit_set_silu_grid(model, g, &err) == 0 && mm_lora_open(&adaln, p, NULL, &err) == 0 &&
                   mm_lora_upload(adaln, c, &err) == 0 && mm_lora_open(&bank, b, NULL, &err) == 0 &&
                   mm_lora_upload(bank, c, &err) == 0 && mm_st_open(&ref, rf, &err) == 0,
               "%s", err.msg);
    json_t *fw = json_object_get(json_object_get(manifest, "tolerances"), "forward");
    const double tv = json_number_value(json_object_get(json_object_get(fw, "video"), "rel_l2"));
    const double ta = json_number_value(json_object_get(json_object_get(fw, "audio"), "rel_l2"));
    const mm_lora_use only[1] = {{adaln, 1.0f}}, mixed[2] = {{adaln, 0.7f}, {bank, 1.0f}};
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(manifest, "cases"), i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        for (int set = 0; set < 2; set++) {
            int64_t nv, na;
            float *v = forward_on(c, model, name, set ? mixed : only, set ? 2 : 1, set == 1, &nv, &na, &err);
            MM_EXPECT(v, "%s: %s", name, err.msg);
            if (!v)
                continue;
            char kv[256], ka[256];
            snprintf(kv, sizeof kv, "%s.%s.video", set ? "pdd" : "adaln", name);
            snprintf(ka, sizeof ka, "%s.%s.audio", set ? "pdd" : "adaln", name);
            const mm_st_entry *rv = mm_st_find(ref, kv), *ra = mm_st_find(ref, ka);
            MM_EXPECT(rv && ra && kit_numel(rv) == nv && kit_numel(ra) == na, "%s: reference tensors", kv);
            if (rv && ra && kit_numel(rv) == nv && kit_numel(ra) == na) {
                double *mv = malloc(sizeof(double) * (size_t)nv), *ma = malloc(sizeof(double) * (size_t)na);
                double *wv = kit_doubles(rv), *wa = kit_doubles(ra);
                for (int64_t k = 0; k < nv; k++)
                    mv[k] = v[k];
                for (int64_t k = 0; k < na; k++)
                    ma[k] = v[nv + k];
                const double dv = rel_l2(mv, wv, nv), da = rel_l2(ma, wa, na);
                MM_EXPECT(dv <= tv && da <= ta, "%s: rel_l2 video %.4g (tol %g), audio %.4g (tol %g)", kv, dv, tv,
                          da, ta);
                printf("     %-34s vs PyTorch: video %.4f audio %.4f\n", kv, dv, da);
                free(mv), free(ma), free(wv), free(wa);
            }
            free(v);
        }
    }
    mm_st_close(ref);
    mm_lora_free(adaln);
    mm_lora_free(bank);
    mm_dit_free(model);
    mm_ctx_destroy(c);
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    json_error_t jerr;
    manifest = json_load_file(path, 0, &jerr);
    cases = kit_open("cases.safetensors");
    snprintf(kit_path, sizeof kit_path, "%s/dit/dit.safetensors", mm_test_data_dir());
    mm_error err = {{0}};
    if (!manifest || !cases || lora_test_setup("dit-adaln") != 0 || mm_ctx_create(&ctx, mm_cpu(), 2, &err) != 0 ||
        mm_dit_load(&dit, kit_path, ctx, NULL, &err) != 0 || kit_forward_case_load(&kcase, manifest, cases, CASE) != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    MM_RUN(test_pruned_base_adaln_pairs);
    MM_RUN(test_full_model_adaln_pairs_read_the_grid);
    MM_RUN(test_strength_zero_is_the_base);
    MM_RUN(test_pdd_bank_heads);
    MM_RUN(test_time_embedder_pairs_are_refused);
    if (getenv("MMH3_ADALN_REF"))
        MM_RUN(test_matches_the_pytorch_reference);
    else
        printf("     (the PyTorch comparison runs on the device: MMH3_ADALN_REF=DIR from "
               "tests/device/adaln_adapter_ref.py)\n");
    kit_forward_case_free(&kcase);
    mm_dit_free(dit);
    for (int s = 0; s < 2; s++) {
        free(bank_w[s]);
        free(bank_b[s]);
    }
    lora_test_cleanup();
    mm_ctx_destroy(ctx);
    mm_st_close(cases);
    json_decref(manifest);
    return mm_test_exit();
}
