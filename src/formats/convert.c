/* mmh3 convert's library half (convert.h): the output plan of the engine's
 * int8 ConvRot DiT, checked against the inputs, then streamed tensor by
 * tensor in file order. */
#include "formats/convert.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "core/log.h"
#include "core/dtype.h"
#include "formats/convert_internal.h"

#define CV_TABLE_POINTS 1025 /* the released adaln_t_table's grid */
#define CV_ROPE_FREQS 16     /* per rotary axis (dit.md §1.1) */
#define CV_GROUP 256
#define CV_ROWS_PER_CHUNK 256

static const char convrot_marker[] = "{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": 256}";

typedef enum out_kind {
    OUT_CAST,      /* the source in the output dtype */
    OUT_QSCALE,    /* ConvRot row scales [N, 1] */
    OUT_QCODES,    /* ConvRot codes [N, K] */
    OUT_MARKER,    /* comfy_quant */
    OUT_ADALN_W,   /* full model: W·V */
    OUT_ADALN_B,   /* full model: b + W·μ */
    OUT_TABLE,     /* full model: the factorized table */
    OUT_INV_FREQ,  /* computed rope.inv_freq */
} out_kind;

typedef struct out_tensor {
    char name[192];
    mm_dtype dtype;
    int ndim;
    int64_t shape[2];
    out_kind kind;
    cv_tensor *src, *bias; /* OUT_ADALN_*: the full weight and its bias (or NULL) */
} out_tensor;

typedef struct converter {
    const mm_convert_options *o;
    cv_source src;
    out_tensor *out;
    int n_out, cap_out;
    cv_adaln adaln;
    bool full;
    int rank;
    mm_ctx *ctx;
    /* the last full AdaLN projected (bias and weight are written one after the other) */
    const cv_tensor *cached_for;
    float *cached_w, *cached_b;
} converter;

#define say(c, ...) mm_log_to((c)->o->log, (c)->o->log_user, __VA_ARGS__)

/* ------------------------------------------------------------ the plan */

static int add(converter *c, const char *name, mm_dtype dt, int64_t rows, int64_t cols, out_kind kind,
               const char *src_name, mm_error *err)
{
    cv_tensor *src = NULL;
    if (src_name) {
        src = cv_find(&c->src, src_name);
        if (!src)
            return mm_fail(err, "the input has no %s%s", src_name,
                           c->src.diffusers ? " (looked for under its diffusers name too)" : "");
        if (src->rows != rows || src->cols != (cols > 0 ? cols : 1) || (cols > 0) != (src->ndim == 2))
            return mm_fail(err, "%s is [%lld, %lld]; the model's other tensors make it [%lld%s%lld]", src_name,
                           (long long)src->rows, (long long)src->cols, (long long)rows, cols > 0 ? ", " : "",
                           cols > 0 ? (long long)cols : 0LL);
        src->used = true;
    }
    if (c->n_out == c->cap_out) {
        int cap = c->cap_out ? 2 * c->cap_out : 1024;
        out_tensor *n = realloc(c->out, sizeof *n * (size_t)cap);
        if (!n)
            return mm_fail(err, "out of memory");
        c->out = n;
        c->cap_out = cap;
    }
    out_tensor *t = &c->out[c->n_out++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->kind = kind;
    t->src = src;
    return 0;
}

static int64_t rows_of(converter *c, const char *name)
{
    cv_tensor *t = cv_find(&c->src, name);
    return t ? t->rows : -1;
}

static int count(converter *c, const char *prefix, const char *leaf)
{
    int n = 0;
    char name[192];
    for (;; n++) {
        snprintf(name, sizeof name, "%s%d.%s", prefix, n, leaf);
        if (!cv_find(&c->src, name))
            return n;
    }
}

/* A ConvRot linear of a main block: codes, row scales, marker. */
static int add_quantized(converter *c, const char *prefix, int64_t n, int64_t k, mm_error *err)
{
    char name[256], w[256];
    if (k % CV_GROUP)
        return mm_fail(err, "%s: %lld input features are not a multiple of the ConvRot group %d", prefix,
                       (long long)k, CV_GROUP);
    snprintf(w, sizeof w, "%s.weight", prefix);
    if (cv_find(&c->src, (snprintf(name, sizeof name, "%s.bias", prefix), name)))
        return mm_fail(err, "%s has a bias; the engine's ConvRot linears have none", prefix);
    if (add(c, w, MM_I8, n, k, OUT_QCODES, w, err) != 0)
        return -1;
    cv_tensor *src = c->out[c->n_out - 1].src;
    snprintf(name, sizeof name, "%s.weight_scale", prefix); /* [N, 1] as in the released file */
    if (add(c, name, MM_F32, n, 1, OUT_QSCALE, NULL, err) != 0)
        return -1;
    c->out[c->n_out - 1].src = src;
    snprintf(name, sizeof name, "%s.comfy_quant", prefix);
    return add(c, name, MM_U8, (int64_t)strlen(convrot_marker), 0, OUT_MARKER, NULL, err);
}

/* A block's or the final layer's AdaLN linear [rows, r] F16 + bias. */
static int add_adaln(converter *c, const char *prefix, int64_t rows, mm_error *err)
{
    char w[256], b[256];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    if (!c->full)
        return add(c, w, MM_F16, rows, c->rank, OUT_CAST, w, err) || add(c, b, MM_F16, rows, 0, OUT_CAST, b, err)
                   ? -1
                   : 0;
    if (add(c, w, MM_F16, rows, c->rank, OUT_ADALN_W, NULL, err) != 0)
        return -1;
    out_tensor *ow = &c->out[c->n_out - 1];
    cv_tensor *src = cv_find(&c->src, w), *bias = cv_find(&c->src, b);
    if (!src || src->rows != rows || src->cols != c->adaln.dim)
        return mm_fail(err, "%s: the full AdaLN weight [%lld, %d] is %s", w, (long long)rows, c->adaln.dim,
                       src ? "another shape" : "missing");
    if (bias && (bias->rows != rows || bias->ndim != 1))
        return mm_fail(err, "%s is not a vector of %lld", b, (long long)rows);
    src->used = true;
    if (bias)
        bias->used = true;
    ow->src = src;
    ow->bias = bias;
    if (add(c, b, MM_F16, rows, 0, OUT_ADALN_B, NULL, err) != 0)
        return -1;
    c->out[c->n_out - 1].src = src;
    c->out[c->n_out - 1].bias = bias;
    return 0;
}

static int add_block(converter *c, const char *prefix, bool main_block, int64_t H, int64_t A, int64_t D, int64_t F,
                     mm_error *err)
{
    char n[256];
#define NAME(leaf) (snprintf(n, sizeof n, "%s.%s", prefix, leaf), n)
    if (add(c, NAME("norm1.weight"), MM_BF16, H, 0, OUT_CAST, n, err) ||
        add(c, NAME("norm2.weight"), MM_BF16, H, 0, OUT_CAST, n, err) ||
        add(c, NAME("attn.q_norm.weight"), MM_BF16, D, 0, OUT_CAST, n, err) ||
        add(c, NAME("attn.k_norm.weight"), MM_BF16, D, 0, OUT_CAST, n, err))
        return -1;
    static const char *const lin[4] = {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"};
    const int64_t shape[4][2] = {{3 * A, H}, {H, A}, {2 * F, H}, {H, F}};
    for (int i = 0; i < 4; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s.%s", prefix, lin[i]);
        if (main_block) {
            if (add_quantized(c, p, shape[i][0], shape[i][1], err) != 0)
                return -1;
        } else {
            snprintf(n, sizeof n, "%s.weight", p);
            if (add(c, n, MM_BF16, shape[i][0], shape[i][1], OUT_CAST, n, err) != 0)
                return -1;
        }
    }
#undef NAME
    if (!main_block)
        return 0;
    char p[160];
    snprintf(p, sizeof p, "%s.adaln_proj.linear", prefix);
    return add_adaln(c, p, 18 * H, err);
}

static int plan(converter *c, mm_error *err)
{
    const int64_t H = rows_of(c, "video_patch_proj.weight"), D = rows_of(c, "blocks.0.attn.q_norm.weight");
    const int64_t qkv = rows_of(c, "blocks.0.attn.qkv_proj.weight"), fc1 = rows_of(c, "blocks.0.mlp.fc1.weight");
    if (H < 1 || D < 1 || qkv < 1 || fc1 < 1)
        return mm_fail(err, "the input is not a MiniMax-H3 DiT: video_patch_proj, blocks.0.attn.q_norm, "
                       "blocks.0.attn.qkv_proj and blocks.0.mlp.fc1 are needed (native or diffusers names)");
    if (qkv % (3 * D) || fc1 % 2)
        return mm_fail(err, "blocks.0: qkv_proj %lld rows / fc1 %lld rows do not split into 3 x heads x %lld and "
                       "[gate; up]", (long long)qkv, (long long)fc1, (long long)D);
    const int64_t A = qkv / 3, F = fc1 / 2;
    const cv_tensor *vp = cv_find(&c->src, "video_patch_proj.weight"), *ap = cv_find(&c->src, "audio_patch_proj.weight");
    const cv_tensor *cp = cv_find(&c->src, "condition_proj.weight");
    if (!ap || !cp)
        return mm_fail(err, "the input has no %s", ap ? "condition_proj.weight" : "audio_patch_proj.weight");
    const int64_t vw = vp->cols, aw = ap->cols, text = cp->cols;
    const int layers = count(c, "blocks.", "norm1.weight"), refiners = count(c, "token_refiner.blocks.", "norm1.weight");
    cv_tensor *table = cv_find(&c->src, "adaln_t_table"), *temb = cv_find(&c->src, "time_embedder.proj_in.weight");
    if (table && temb)
        return mm_fail(err, "the input has both adaln_t_table (pruned) and time_embedder (full); give one model");
    if (!table && !temb)
        return mm_fail(err, "the input has neither adaln_t_table (a pruned DiT) nor time_embedder.proj_in (a full "
                       "DiT): the AdaLN's time input is missing");
    c->full = temb != NULL;
    int64_t T;
    if (c->full) {
        c->rank = c->o->adaln_rank > 0 ? c->o->adaln_rank : 8;
        if (c->rank > 64)
            return mm_fail(err, "AdaLN rank %d: the engine takes at most 64", c->rank);
        T = CV_TABLE_POINTS;
        say(c, "full model: factorizing the AdaLN time input to rank %d on %d points", c->rank, (int)T);
        if (cv_adaln_factor(&c->src, (int)T, c->rank, &c->adaln, err) != 0)
            return mm_error_prefix(err, "AdaLN factorization");
        say(c, "AdaLN: rank %d keeps %.10f of the centred curve; worst grid point off by %.3g of the largest",
            c->rank, c->adaln.kept, c->adaln.residual);
        if (add(c, "adaln_t_table", MM_F32, T, c->rank, OUT_TABLE, NULL, err) != 0)
            return -1;
    } else {
        if (c->o->adaln_rank > 0 && c->o->adaln_rank != table->cols)
            return mm_fail(err, "--adaln-rank %d: the input is already pruned to rank %lld", c->o->adaln_rank,
                           (long long)table->cols);
        c->rank = (int)table->cols;
        T = table->rows;
        if (add(c, "adaln_t_table", MM_F32, T, c->rank, OUT_CAST, "adaln_t_table", err) != 0)
            return -1;
    }
    if (cv_find(&c->src, "rope.inv_freq")) {
        if (add(c, "rope.inv_freq", MM_F32, rows_of(c, "rope.inv_freq"), 0, OUT_CAST, "rope.inv_freq", err) != 0)
            return -1;
    } else if (add(c, "rope.inv_freq", MM_F32, CV_ROPE_FREQS, 0, OUT_INV_FREQ, NULL, err) != 0) {
        return -1;
    }
    if (add(c, "video_patch_proj.weight", MM_F32, H, vw, OUT_CAST, "video_patch_proj.weight", err) ||
        add(c, "video_patch_proj.bias", MM_F32, H, 0, OUT_CAST, "video_patch_proj.bias", err) ||
        add(c, "audio_patch_proj.weight", MM_F32, H, aw, OUT_CAST, "audio_patch_proj.weight", err) ||
        add(c, "audio_patch_proj.bias", MM_F32, H, 0, OUT_CAST, "audio_patch_proj.bias", err) ||
        add(c, "condition_proj.weight", MM_BF16, H, text, OUT_CAST, "condition_proj.weight", err) ||
        add(c, "condition_proj.bias", MM_BF16, H, 0, OUT_CAST, "condition_proj.bias", err) ||
        add(c, "token_refiner.final_norm.weight", MM_BF16, H, 0, OUT_CAST, "token_refiner.final_norm.weight", err) ||
        add(c, "final_layer.norm.weight", MM_BF16, H, 0, OUT_CAST, "final_layer.norm.weight", err) ||
        add(c, "final_layer.video_out.weight", MM_F32, vw, H, OUT_CAST, "final_layer.video_out.weight", err) ||
        add(c, "final_layer.video_out.bias", MM_F32, vw, 0, OUT_CAST, "final_layer.video_out.bias", err) ||
        add(c, "final_layer.audio_out.weight", MM_F32, aw, H, OUT_CAST, "final_layer.audio_out.weight", err) ||
        add(c, "final_layer.audio_out.bias", MM_F32, aw, 0, OUT_CAST, "final_layer.audio_out.bias", err) ||
        add_adaln(c, "final_layer.adaln_proj.linear", 2 * H, err))
        return -1;
    if (layers < 1 || refiners < 1)
        return mm_fail(err, "%d blocks and %d refiner blocks found; at least one of each is needed", layers, refiners);
    char prefix[64];
    for (int j = 0; j < refiners; j++) {
        snprintf(prefix, sizeof prefix, "token_refiner.blocks.%d", j);
        if (add_block(c, prefix, false, H, A, D, F, err) != 0)
            return -1;
    }
    for (int b = 0; b < layers; b++) {
        snprintf(prefix, sizeof prefix, "blocks.%d", b);
        if (add_block(c, prefix, true, H, A, D, F, err) != 0)
            return -1;
    }
    /* what the engine has no place for */
    char list[1200] = "";
    int n = 0;
    for (int i = 0; i < c->src.n; i++)
        if (!c->src.t[i].used) {
            if (n < 8)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", n ? ", " : "", c->src.t[i].name);
            n++;
        }
    if (n)
        return mm_fail(err, "%d input tensor%s the engine has no place for: %s%s%s", n, n == 1 ? "" : "s", list,
                       n > 8 ? ", ..." : "",
                       strstr(list, "to_gate_compress") ? " (VSA gates need VSA attention, which mmh3 does not run; "
                                                          "use the dense variant)" : "");
    say(c, "%s names, %d blocks + %d refiner blocks, hidden %lld, %lld x %lld heads, ffn %lld; %d tensors out",
        c->src.diffusers ? "diffusers" : "native", layers, refiners, (long long)H, (long long)(A / D), (long long)D,
        (long long)F, c->n_out);
    return 0;
}

/* ------------------------------------------------------------ writing */

static int store(const float *v, int64_t n, mm_dtype dt, void *dst, const char *name, mm_error *err)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case MM_F32: ((float *)dst)[i] = v[i]; break;
        case MM_BF16: ((uint16_t *)dst)[i] = mm_f32_to_bf16(v[i]); break;
        case MM_F16:
            if (!(fabsf(v[i]) <= 65504.0f))
                return mm_fail(err, "%s: value %g at %lld does not fit f16 (the released file stores it f16)", name,
                               (double)v[i], (long long)i);
            ((uint16_t *)dst)[i] = mm_f32_to_f16(v[i]);
            break;
        default: return mm_fail(err, "%s: cannot store %s", name, mm_dtype_name(dt));
        }
    }
    return 0;
}

static int write_cast(converter *c, mm_st_writer *w, const out_tensor *t, mm_error *err)
{
    const cv_tensor *s = t->src;
    if (cv_is_plain(s, t->dtype)) /* bit for bit */
        return mm_st_writer_append(w, s->parts[0].e->data, (size_t)(s->parts[0].e->end - s->parts[0].e->begin), err);
    const int64_t cols = s->cols, esz = mm_dtype_bits(t->dtype) / 8;
    const int64_t chunk = cols > 65536 ? 1 : 65536 / cols + 1;
    float *buf = malloc(sizeof(float) * (size_t)(chunk * cols));
    void *outb = malloc((size_t)(chunk * cols * esz));
    int rc = buf && outb ? 0 : mm_fail(err, "out of memory");
    for (int64_t r = 0; rc == 0 && r < s->rows; r += chunk) {
        int64_t n = s->rows - r < chunk ? s->rows - r : chunk;
        rc = cv_read_rows(&c->src, (cv_tensor *)s, r, n, buf, err) || store(buf, n * cols, t->dtype, outb, t->name, err) ||
                     mm_st_writer_append(w, outb, (size_t)(n * cols * esz), err)
                 ? -1
                 : 0;
    }
    free(buf);
    free(outb);
    return rc;
}

/* The weight side of ConvRot, the recipe of the kit's quantizer with the
 * rotation exact: each row rotated in double (x·H256 per group), rounded to
 * f32 (what an f32 rotation produces, without its summation error), then
 * s = absmax/127 and q = clamp(rne(x/s), ±127) in f32 — mm_convrot_quantize's
 * arithmetic. The exact rotation is what lets a dequantized ConvRot file
 * quantize back to its own codes and scales bit for bit. */
typedef struct quant_job {
    const float *x;
    int8_t *q;
    float *s;
    int64_t k;
} quant_job;

static void rotate_double(double *x, int64_t n)
{
    static const int H4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};
    double tmp[CV_GROUP];
    for (int64_t g = 0; g < n; g += CV_GROUP)
        for (int s = 1; s < CV_GROUP; s *= 4) {
            for (int i = 0; i < CV_GROUP; i++) {
                int d = (i / s) % 4, b = i - d * s;
                tmp[i] = 0.5 * (H4[d][0] * x[g + b] + H4[d][1] * x[g + b + s] + H4[d][2] * x[g + b + 2 * s] +
                                H4[d][3] * x[g + b + 3 * s]);
            }
            memcpy(x + g, tmp, sizeof tmp);
        }
}

static void quantize_rows(void *user, int64_t begin, int64_t end)
{
    const quant_job *j = user;
    double *d = malloc(sizeof(double) * (size_t)j->k);
    float *f = malloc(sizeof(float) * (size_t)j->k);
    if (!d || !f) {
        free(d);
        free(f);
        return; /* the caller sees NaN scales */
    }
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * j->k;
        for (int64_t i = 0; i < j->k; i++)
            d[i] = x[i];
        rotate_double(d, j->k);
        float amax = 0.0f;
        for (int64_t i = 0; i < j->k; i++) {
            f[i] = (float)d[i];
            amax = fabsf(f[i]) > amax ? fabsf(f[i]) : amax;
        }
        const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
        for (int64_t i = 0; i < j->k; i++) {
            float v = nearbyintf(f[i] / s);
            j->q[r * j->k + i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
        j->s[r] = s;
    }
    free(d);
    free(f);
}

/* The quantized rows in chunks: scales or codes. */
static int write_quantized(converter *c, mm_st_writer *w, const out_tensor *t, mm_error *err)
{
    cv_tensor *s = t->src;
    const int64_t k = s->cols, chunk = CV_ROWS_PER_CHUNK;
    float *x = malloc(sizeof(float) * (size_t)(chunk * k)), *sc = malloc(sizeof(float) * (size_t)chunk);
    int8_t *q = malloc((size_t)(chunk * k));
    int rc = x && sc && q ? 0 : mm_fail(err, "out of memory");
    for (int64_t r = 0; rc == 0 && r < s->rows; r += chunk) {
        int64_t n = s->rows - r < chunk ? s->rows - r : chunk;
        if ((rc = cv_read_rows(&c->src, s, r, n, x, err)) != 0)
            break;
        for (int64_t i = 0; i < n * k; i++)
            if (!isfinite(x[i])) {
                rc = mm_fail(err, "%s: row %lld holds a non-finite value", s->name, (long long)(r + i / k));
                break;
            }
        if (rc != 0)
            break;
        for (int64_t i = 0; i < n; i++)
            sc[i] = NAN;
        quant_job j = {.x = x, .q = q, .s = sc, .k = k};
        mm_parallel_for(c->ctx, n, 8, quantize_rows, &j);
        for (int64_t i = 0; i < n && rc == 0; i++)
            if (!(sc[i] > 0.0f))
                rc = mm_fail(err, "%s: out of memory quantizing row %lld", s->name, (long long)(r + i));
        if (rc != 0)
            break;
        rc = t->kind == OUT_QSCALE ? mm_st_writer_append(w, sc, sizeof(float) * (size_t)n, err)
                                   : mm_st_writer_append(w, q, (size_t)(n * k), err);
    }
    free(x);
    free(sc);
    free(q);
    return rc;
}

/* Full AdaLN: W·V and b + W·μ of one linear, row by row in double. */
static int project_adaln(converter *c, const out_tensor *t, mm_error *err)
{
    if (c->cached_for == t->src)
        return 0;
    cv_tensor *s = t->src;
    const int64_t rows = s->rows, dim = s->cols, r = c->rank, chunk = 64;
    free(c->cached_w);
    free(c->cached_b);
    c->cached_for = NULL;
    c->cached_w = malloc(sizeof(float) * (size_t)(rows * r));
    c->cached_b = malloc(sizeof(float) * (size_t)rows);
    float *wrows = malloc(sizeof(float) * (size_t)(chunk * dim)), *bias = malloc(sizeof(float) * (size_t)rows);
    int rc = c->cached_w && c->cached_b && wrows && bias ? 0 : mm_fail(err, "out of memory");
    if (rc == 0 && t->bias)
        rc = cv_read_rows(&c->src, t->bias, 0, rows, bias, err);
    else if (rc == 0)
        memset(bias, 0, sizeof(float) * (size_t)rows); /* a full checkpoint without the bias: zero */
    for (int64_t r0 = 0; rc == 0 && r0 < rows; r0 += chunk) {
        int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
        if ((rc = cv_read_rows(&c->src, s, r0, n, wrows, err)) != 0)
            break;
        for (int64_t j = 0; j < n; j++) {
            const float *wr = wrows + j * dim;
            double acc[64] = {0}, mb = bias[r0 + j];
            for (int64_t k = 0; k < dim; k++) {
                const double wk = wr[k], *v = c->adaln.basis + k * r;
                for (int64_t i = 0; i < r; i++)
                    acc[i] += wk * v[i];
                mb += wk * c->adaln.mean[k];
            }
            for (int64_t i = 0; i < r; i++)
                c->cached_w[(r0 + j) * r + i] = (float)acc[i];
            c->cached_b[r0 + j] = (float)mb;
        }
    }
    free(wrows);
    free(bias);
    if (rc == 0)
        c->cached_for = s;
    return rc;
}

static int write_one(converter *c, mm_st_writer *w, const out_tensor *t, mm_error *err)
{
    switch (t->kind) {
    case OUT_CAST: return write_cast(c, w, t, err);
    case OUT_QSCALE:
    case OUT_QCODES: return write_quantized(c, w, t, err);
    case OUT_MARKER: return mm_st_writer_append(w, convrot_marker, strlen(convrot_marker), err);
    case OUT_TABLE:
        return mm_st_writer_append(w, c->adaln.table, sizeof(float) * (size_t)(c->adaln.points * c->rank), err);
    case OUT_INV_FREQ: {
        float f[CV_ROPE_FREQS];
        for (int k = 0; k < CV_ROPE_FREQS; k++) /* 1 / 10000^(2k / 32) in f32, as the reference builds it */
            f[k] = 1.0f / powf(10000.0f, (float)(2 * k) / (float)(2 * CV_ROPE_FREQS));
        return mm_st_writer_append(w, f, sizeof f, err);
    }
    case OUT_ADALN_W:
    case OUT_ADALN_B: {
        if (project_adaln(c, t, err) != 0)
            return -1;
        const int64_t n = t->kind == OUT_ADALN_W ? t->shape[0] * c->rank : t->shape[0];
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
        int rc = h ? store(t->kind == OUT_ADALN_W ? c->cached_w : c->cached_b, n, MM_F16, h, t->name, err)
                   : mm_fail(err, "out of memory");
        if (rc == 0)
            rc = mm_st_writer_append(w, h, sizeof(uint16_t) * (size_t)n, err);
        free(h);
        return rc;
    }
    }
    return mm_fail(err, "%s: unknown output kind", t->name);
}

static int write_file(converter *c, mm_error *err)
{
    mm_st_writer *w;
    if (mm_st_writer_open(&w, c->o->out_path, err) != 0)
        return -1;
    char meta[256];
    if (c->full)
        snprintf(meta, sizeof meta, "int8 ConvRot from a full DiT; AdaLN factorized to rank %d (kept %.10f)", c->rank,
                 c->adaln.kept);
    else
        snprintf(meta, sizeof meta, "int8 ConvRot from a pruned DiT; AdaLN passed through");
    int rc = mm_st_writer_metadata(w, "mmh3_convert", meta, err);
    for (int i = 0; rc == 0 && i < c->n_out; i++)
        rc = mm_st_writer_declare(w, c->out[i].name, c->out[i].dtype, c->out[i].ndim, c->out[i].shape, err);
    int done = 0, last_pct = -1;
    for (const mm_st_entry *e; rc == 0;) {
        if ((rc = mm_st_writer_next(w, &e, err)) != 0 || !e)
            break;
        const out_tensor *t = NULL;
        for (int i = 0; i < c->n_out && !t; i++)
            if (strcmp(c->out[i].name, e->name) == 0)
                t = &c->out[i];
        rc = t ? write_one(c, w, t, err) : mm_fail(err, "%s: not in the plan", e->name);
        if (rc != 0) {
            mm_error_prefix(err, "writing %s", e->name);
            break;
        }
        int pct = (int)(100.0 * ++done / c->n_out);
        if (pct / 10 != last_pct / 10) {
            say(c, "%3d%% (%d of %d tensors)", pct, done, c->n_out);
            last_pct = pct;
        }
    }
    if (rc != 0) {
        mm_st_writer_abort(w);
        return -1;
    }
    return mm_st_writer_close(w, err);
}

static int write_grid(converter *c, mm_error *err)
{
    if (!c->full)
        return mm_fail(err, "--silu-temb-grid needs a full DiT (with time_embedder); a pruned one has no time MLP");
    const char *names[] = {"silu_t_emb_grid"};
    mm_tensor t = mm_tensor_wrap(c->adaln.grid, mm_cpu(), MM_F32, 2, MM_SHAPE(c->adaln.points, c->adaln.dim));
    if (mm_st_save(c->o->grid_path, 1, names, &t, err) != 0)
        return mm_error_prefix(err, "%s", c->o->grid_path);
    say(c, "wrote %s: SiLU(temb) [%d, %d] at t = k/%d", c->o->grid_path, c->adaln.points, c->adaln.dim,
        c->adaln.points - 1);
    return 0;
}

int mm_convert_dit(const mm_convert_options *o, mm_convert_report *report, mm_error *err)
{
    converter c = {.o = o};
    if (report)
        memset(report, 0, sizeof *report);
    if (!o->out_path && !o->grid_path)
        return mm_fail(err, "nothing to write: give an output file (and/or a SiLU(temb) grid file)");
    int rc = -1;
    if (mm_ctx_create(&c.ctx, mm_cpu(), o->threads, err) != 0 || cv_source_open(&c.src, o, err) != 0 ||
        plan(&c, err) != 0 || (o->grid_path && write_grid(&c, err) != 0) || (o->out_path && write_file(&c, err) != 0))
        goto done;
    if (report) {
        report->tensors_in = c.src.tensors_in;
        report->tensors_out = c.n_out;
        for (int i = 0; i < c.n_out; i++)
            report->quantized += c.out[i].kind == OUT_QCODES;
        report->deltas_applied = c.src.deltas_applied;
        report->full_adaln = c.full;
        report->adaln_rank = c.rank;
        report->adaln_kept = c.full ? c.adaln.kept : 1.0;
        report->adaln_residual = c.full ? c.adaln.residual : 0.0;
        snprintf(report->naming, sizeof report->naming, "%s", c.src.diffusers ? "diffusers" : "native");
    }
    rc = 0;
done:
    free(c.out);
    free(c.cached_w);
    free(c.cached_b);
    cv_adaln_free(&c.adaln);
    cv_source_close(&c.src);
    if (c.ctx)
        mm_ctx_destroy(c.ctx);
    return rc;
}
