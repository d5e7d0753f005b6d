/* mmh3-gen-tiny — writes checkpoints in the exact layouts of the released
 * files (tensor names, dtypes, quantization formats) with seeded random
 * values, at any size: tiny for CI, full size for device benchmarks.
 *
 *   mmh3-gen-tiny dit|text-encoder|video-vae|audio-vae [--full] [size options] [--seed N] --out FILE
 *   mmh3-gen-tiny all [--full] [--seed N] --out DIR   (DIR laid out like $MODELS_PATH)
 *
 * Values: every row of every tensor comes from its own RNG stream (seed,
 * tensor name, row), so a file does not depend on the thread count or on
 * the order tensors are written in. Float weights are uniform with variance
 * 1/fan_in; norm gains near 1; the quantized layers are produced the way the
 * real producers did: ConvRot rows are rotated by the regular Hadamard and
 * quantized per row (absmax/127, round half even, +-127); nvfp4 weights get
 * per-16 e4m3 block scales (amax/6 over the per-tensor scale amax/(6*448)),
 * RNE e2m1 codes packed high nibble first and scales in the 128x4 swizzle;
 * the embedding is int8 with per-row scales.
 *
 * Files are streamed: one tensor in memory at a time (a full-size DiT is
 * ~21 GB); the quantized tensors are computed in parallel on all cores. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/ops.h"
#include "core/dtype.h"
#include "io/download.h"
#include "io/safetensors.h"

static mm_ctx *ctx;
static uint64_t g_seed = 1;

/* ------------------------------------------------------------------- RNG */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

typedef struct rng {
    uint64_t s[4];
} rng;

static void rng_init(rng *r, const char *name, int64_t row)
{
    uint64_t k = g_seed ^ hash_name(name) ^ ((uint64_t)row * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&k);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r) /* xoshiro256** */
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [-1, 1). */
static inline float rng_unit(rng *r) { return (float)((double)(rng_next(r) >> 40) * 0x1p-23 - 1.0); }

/* ------------------------------------------------------------- the plan */

typedef enum fill {
    F_WEIGHT,   /* uniform, variance 1/fan_in (fan_in = numel / shape[0]) times gain */
    F_UNIFORM,  /* uniform in [-gain, gain] */
    F_GAIN,     /* 1 + uniform(-gain, gain) (norm weights) */
    F_CONST,    /* gain */
    F_ZERO,
    F_INV_FREQ, /* 1 / 10000^(2k / (2 n)) in f32 (DiT rope) */
    F_TABLE,    /* AdaLN table: smooth curve + jitter along rows */
    F_FILTER,   /* Kaiser-windowed sinc low-pass, 12 taps, sum 1 */
    F_BYTES,    /* fixed byte string (comfy_quant markers) */
    F_CONVROT,  /* I8 ConvRot weight */
    F_CONVROT_SCALE,
    F_NVFP4,    /* packed U8 weight */
    F_NVFP4_SCALE,
    F_NVFP4_SCALE2,
    F_EMB_I8,
    F_EMB_SCALE,
    F_LORA,     /* rows of an adapter matrix: a master (native) matrix's rows, remapped per spelling */
} fill;

/* How an F_LORA tensor's rows come from its master [rows, cols] (the
 * adapter in native form), i.e. how each spelling stores the same numbers. */
typedef enum lora_map {
    LM_SAME = 0,
    LM_SLICE,      /* diffusers to_q/to_k/to_v: rows [c·N/3, (c+1)·N/3) of the fused qkv B */
    LM_SWAP,       /* diffusers ff.net.0.proj: [up; gate] from native [gate; up] */
    LM_INTERLEAVE, /* DiffSynth qkv: file row h·384 + c·128 + d = native row c·N/3 + h·128 + d */
    LM_TILE,       /* fused rank-3r A: row j = master row j mod r */
    LM_BLOCKDIAG,  /* fused rank-3r B: [3A, 3r], block c holds native rows [cA, (c+1)A) */
} lora_map;

typedef struct tensor_plan {
    char name[192];
    mm_dtype dtype;
    int ndim;
    int64_t shape[MM_MAX_DIMS];
    fill kind;
    float gain;
    const char *bytes;
    char master[192]; /* quantized tensors: the float master's stream name */
    int64_t rows, cols; /* quantized tensors: the master's [N, K] */
    int group;
    float *cache; /* per-row / per-tensor values computed once (scales) */
    lora_map map; /* F_LORA */
    int slice;
} tensor_plan;

typedef struct plan {
    tensor_plan *t;
    size_t n, cap;
    const char *meta[32][2]; /* __metadata__ pairs */
    int n_meta;
} plan;

static tensor_plan *add(plan *p, mm_dtype dt, fill kind, float gain, int ndim, const int64_t *shape, const char *fmt,
                        ...)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->t = realloc(p->t, p->cap * sizeof *p->t);
        if (!p->t) {
            fprintf(stderr, "mmh3-gen-tiny: out of memory\n");
            exit(1);
        }
    }
    tensor_plan *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->dtype = dt;
    t->kind = kind;
    t->gain = gain;
    t->ndim = ndim;
    if (ndim > 0)
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    return t;
}

#define SH(...) MM_NDIM(__VA_ARGS__), MM_SHAPE(__VA_ARGS__)

static const char *M_CONVROT = "{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": 256}";
static const char *M_NVFP4 = "{\"format\": \"nvfp4\", \"full_precision_matrix_mult\": true}";
static const char *M_INT8 = "{\"format\": \"int8_tensorwise\"}";

static void add_bytes(plan *p, const char *bytes, const char *fmt, const char *prefix)
{
    tensor_plan *t = add(p, MM_U8, F_BYTES, 0, SH((int64_t)strlen(bytes)), fmt, prefix);
    t->bytes = bytes;
}

static void add_convrot(plan *p, const char *prefix, int64_t n, int64_t k)
{
    tensor_plan *w = add(p, MM_I8, F_CONVROT, 1, SH(n, k), "%s.weight", prefix);
    tensor_plan *s = add(p, MM_F32, F_CONVROT_SCALE, 1, SH(n, 1), "%s.weight_scale", prefix);
    snprintf(w->master, sizeof w->master, "%s.weight", prefix);
    snprintf(s->master, sizeof s->master, "%s.weight", prefix);
    w->rows = s->rows = n;
    w->cols = s->cols = k;
    w->group = s->group = 256;
    add_bytes(p, M_CONVROT, "%s.comfy_quant", prefix);
}

static void add_nvfp4(plan *p, const char *prefix, int64_t n, int64_t k, bool awq)
{
    tensor_plan *w = add(p, MM_U8, F_NVFP4, 1, SH(n, k / 2), "%s.weight", prefix);
    tensor_plan *s = add(p, MM_F8_E4M3, F_NVFP4_SCALE, 1, SH(n, k / 16), "%s.weight_scale", prefix);
    tensor_plan *s2 = add(p, MM_F32, F_NVFP4_SCALE2, 1, 0, NULL, "%s.weight_scale_2", prefix);
    tensor_plan *ts[3] = {w, s, s2};
    for (int i = 0; i < 3; i++) {
        snprintf(ts[i]->master, sizeof ts[i]->master, "%s.weight", prefix);
        ts[i]->rows = n;
        ts[i]->cols = k;
    }
    add_bytes(p, M_NVFP4, "%s.comfy_quant", prefix);
    if (awq)
        add(p, MM_BF16, F_GAIN, 0.5f, SH(k), "%s.pre_quant_scale", prefix);
}

/* ------------------------------------------------------------ the models */

typedef struct dit_cfg {
    int64_t hidden, heads, head_dim, ffn, layers, refiner, text_dim, table, time_dim;
} dit_cfg;

static void plan_dit(plan *p, const dit_cfg *c)
{
    int64_t h = c->hidden, a = c->heads * c->head_dim, f = c->ffn;
    add(p, MM_F32, F_WEIGHT, 1, SH(h, 96), "video_patch_proj.weight");
    add(p, MM_F32, F_UNIFORM, 0.1f, SH(h), "video_patch_proj.bias");
    add(p, MM_F32, F_WEIGHT, 1, SH(h, 32), "audio_patch_proj.weight");
    add(p, MM_F32, F_UNIFORM, 0.1f, SH(h), "audio_patch_proj.bias");
    add(p, MM_BF16, F_WEIGHT, 1, SH(h, c->text_dim), "condition_proj.weight");
    add(p, MM_BF16, F_UNIFORM, 0.1f, SH(h), "condition_proj.bias");
    add(p, MM_F32, F_TABLE, 1, SH(c->table, c->time_dim), "adaln_t_table");
    add(p, MM_F32, F_INV_FREQ, 16, SH(16), "rope.inv_freq");
    for (int64_t r = 0; r < c->refiner; r++) {
        const char *b = "token_refiner.blocks";
        add(p, MM_BF16, F_GAIN, 0.25f, SH(h), "%s.%" PRId64 ".norm1.weight", b, r);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(h), "%s.%" PRId64 ".norm2.weight", b, r);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(c->head_dim), "%s.%" PRId64 ".attn.q_norm.weight", b, r);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(c->head_dim), "%s.%" PRId64 ".attn.k_norm.weight", b, r);
        add(p, MM_BF16, F_WEIGHT, 1, SH(3 * a, h), "%s.%" PRId64 ".attn.qkv_proj.weight", b, r);
        add(p, MM_BF16, F_WEIGHT, 1, SH(h, a), "%s.%" PRId64 ".attn.out_proj.weight", b, r);
        add(p, MM_BF16, F_WEIGHT, 1, SH(2 * f, h), "%s.%" PRId64 ".mlp.fc1.weight", b, r);
        add(p, MM_BF16, F_WEIGHT, 1, SH(h, f), "%s.%" PRId64 ".mlp.fc2.weight", b, r);
    }
    add(p, MM_BF16, F_GAIN, 0.25f, SH(h), "token_refiner.final_norm.weight");
    char pre[96];
    for (int64_t n = 0; n < c->layers; n++) {
        add(p, MM_BF16, F_GAIN, 0.25f, SH(h), "blocks.%" PRId64 ".norm1.weight", n);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(h), "blocks.%" PRId64 ".norm2.weight", n);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(c->head_dim), "blocks.%" PRId64 ".attn.q_norm.weight", n);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(c->head_dim), "blocks.%" PRId64 ".attn.k_norm.weight", n);
        snprintf(pre, sizeof pre, "blocks.%" PRId64 ".attn.qkv_proj", n);
        add_convrot(p, pre, 3 * a, h);
        snprintf(pre, sizeof pre, "blocks.%" PRId64 ".attn.out_proj", n);
        add_convrot(p, pre, h, a);
        snprintf(pre, sizeof pre, "blocks.%" PRId64 ".mlp.fc1", n);
        add_convrot(p, pre, 2 * f, h);
        snprintf(pre, sizeof pre, "blocks.%" PRId64 ".mlp.fc2", n);
        add_convrot(p, pre, h, f);
        /* AdaLN: small, so modulation stays O(0.1) */
        add(p, MM_F16, F_WEIGHT, 0.3f, SH(18 * h, c->time_dim), "blocks.%" PRId64 ".adaln_proj.linear.weight", n);
        add(p, MM_F16, F_UNIFORM, 0.1f, SH(18 * h), "blocks.%" PRId64 ".adaln_proj.linear.bias", n);
    }
    add(p, MM_BF16, F_GAIN, 0.25f, SH(h), "final_layer.norm.weight");
    add(p, MM_F16, F_WEIGHT, 0.3f, SH(2 * h, c->time_dim), "final_layer.adaln_proj.linear.weight");
    add(p, MM_F16, F_UNIFORM, 0.1f, SH(2 * h), "final_layer.adaln_proj.linear.bias");
    add(p, MM_F32, F_WEIGHT, 1, SH(96, h), "final_layer.video_out.weight");
    add(p, MM_F32, F_UNIFORM, 0.1f, SH(96), "final_layer.video_out.bias");
    add(p, MM_F32, F_WEIGHT, 1, SH(32, h), "final_layer.audio_out.weight");
    add(p, MM_F32, F_UNIFORM, 0.1f, SH(32), "final_layer.audio_out.bias");
}

/* ------------------------------------------------------ LoRA adapters */

/* One random adapter for a DiT of the given sizes, written in any of the
 * published spellings (fewstep.md §2.2). The adapter is defined once in
 * native form — per module a master A [r, in] and B [out, r], qkv with one
 * shared A as native producers train it — and each spelling stores the same
 * numbers the way its producer does, so every spelling of one seed must give
 * the same forward:
 *   native     blocks.N.attn.qkv_proj.lora_A.weight, per-key .alpha
 *   comfy      the same behind diffusion_model. (ai-toolkit, Larry, LightX2V _comfyui_)
 *   noalpha    native without any alpha (alpha = rank)
 *   diffsynth  native names with .default, qkv B rows per head interleaved, metadata alpha
 *   kohya      lora_unet_blocks_N_attn_qkv_proj.lora_down/lora_up + .alpha
 *   diffusers  transformer_blocks.N.attn.to_q/k/v (A cloned, B in thirds), ff.net.0.proj
 *              halves swapped, .lora_A.default.weight, metadata alpha (LightX2V)
 *   peft       the diffusers names behind base_model.model., metadata lora_alpha
 *   fused      comfy with qkv as one rank-3r pair: A = [A; A; A], B block-diagonal,
 *              alpha 3·alpha (the rank-3r export of fewstep.md §2.3a) */
typedef enum lora_spelling {
    LS_NATIVE = 0,
    LS_COMFY,
    LS_NOALPHA,
    LS_DIFFSYNTH,
    LS_KOHYA,
    LS_DIFFUSERS,
    LS_PEFT,
    LS_FUSED,
    LS_COUNT
} lora_spelling;
static const char *const k_spellings[LS_COUNT] = {"native", "comfy", "noalpha", "diffsynth",
                                                  "kohya",  "diffusers", "peft", "fused"};

typedef struct lora_cfg {
    int64_t rank, adaln_rank, adaln_in, bank;
    double alpha; /* 0: alpha = rank */
    float gain;   /* of B: |B·A| ≈ gain·|W| for the generator's weights */
    int spelling;
    bool no_refiner, condition, adaln, dense;
    const char *meta[16][2];
    int n_meta;
} lora_cfg;

static bool ls_diffusers(int sp) { return sp == LS_DIFFUSERS || sp == LS_PEFT; }

/* The file's name of a module: native ("blocks.0.attn.qkv_proj"), its
 * diffusers name (slice c of qkv), or kohya's flattening, with the prefix. */
static void lora_key_of(int sp, const char *native, const char *diffusers, char *out, size_t n)
{
    const char *m = ls_diffusers(sp) && diffusers ? diffusers : native;
    if (sp == LS_KOHYA) {
        char flat[160];
        snprintf(flat, sizeof flat, "%.159s", m);
        for (char *c = flat; *c; c++)
            if (*c == '.')
                *c = '_';
        snprintf(out, n, "lora_unet_%s", flat);
        return;
    }
    const char *prefix = sp == LS_COMFY || sp == LS_FUSED ? "diffusion_model." : sp == LS_PEFT ? "base_model.model." : "";
    snprintf(out, n, "%s%s", prefix, m);
}

static tensor_plan *lora_tensor(plan *p, const char *name, const char *master, int64_t rows, int64_t cols,
                                int64_t m_rows, int64_t m_cols, float gain, lora_map map, int slice)
{
    tensor_plan *t = add(p, MM_BF16, F_LORA, gain, SH(rows, cols), "%s", name);
    snprintf(t->master, sizeof t->master, "%s", master);
    t->rows = m_rows;
    t->cols = m_cols;
    t->map = map;
    t->slice = slice;
    return t;
}

/* One module's pair(s): native [n_out, n_in], rank r. */
static void plan_lora_module(plan *p, const lora_cfg *c, const char *native, const char *diffusers, int64_t n_out,
                             int64_t n_in, int64_t r, bool qkv, bool fc1)
{
    const int sp = c->spelling;
    const char *sa = sp == LS_KOHYA ? ".lora_down.weight"
                     : sp == LS_DIFFSYNTH || sp == LS_DIFFUSERS ? ".lora_A.default.weight"
                                                                : ".lora_A.weight";
    const char *sb = sp == LS_KOHYA ? ".lora_up.weight"
                     : sp == LS_DIFFSYNTH || sp == LS_DIFFUSERS ? ".lora_B.default.weight"
                                                                : ".lora_B.weight";
    const bool key_alpha = sp == LS_NATIVE || sp == LS_COMFY || sp == LS_KOHYA || sp == LS_FUSED;
    const double alpha = c->alpha > 0 ? c->alpha : (double)r;
    char ma[160], mb[160], key[200], name[256];
    snprintf(ma, sizeof ma, "%s.A", native);
    snprintf(mb, sizeof mb, "%s.B", native);
    if (qkv && ls_diffusers(sp)) {
        static const char *const third[3] = {"to_q", "to_k", "to_v"};
        for (int k = 0; k < 3; k++) {
            char d[160];
            snprintf(d, sizeof d, "%.150s.%s", diffusers, third[k]);
            lora_key_of(sp, native, d, key, sizeof key);
            snprintf(name, sizeof name, "%s%s", key, sa);
            lora_tensor(p, name, ma, r, n_in, r, n_in, 1.0f, LM_SAME, 0);
            snprintf(name, sizeof name, "%s%s", key, sb);
            lora_tensor(p, name, mb, n_out / 3, r, n_out, r, c->gain, LM_SLICE, k);
        }
        return;
    }
    lora_key_of(sp, native, diffusers, key, sizeof key);
    const bool fused = qkv && sp == LS_FUSED;
    snprintf(name, sizeof name, "%s%s", key, sa);
    lora_tensor(p, name, ma, fused ? 3 * r : r, n_in, r, n_in, 1.0f, fused ? LM_TILE : LM_SAME, 0);
    snprintf(name, sizeof name, "%s%s", key, sb);
    lora_map bmap = fused ? LM_BLOCKDIAG : qkv && sp == LS_DIFFSYNTH ? LM_INTERLEAVE
                                           : fc1 && ls_diffusers(sp)  ? LM_SWAP
                                                                      : LM_SAME;
    lora_tensor(p, name, mb, n_out, fused ? 3 * r : r, n_out, r, c->gain, bmap, 0);
    if (key_alpha)
        add(p, MM_F32, F_CONST, (float)(fused ? 3 * alpha : alpha), 0, NULL, "%s.alpha", key);
}

static void plan_lora_block(plan *p, const lora_cfg *c, const dit_cfg *d, const char *nat, const char *dif)
{
    const int64_t h = d->hidden, a = d->heads * d->head_dim, f = d->ffn, r = c->rank;
    char n[160], df[160];
    snprintf(n, sizeof n, "%s.attn.qkv_proj", nat), snprintf(df, sizeof df, "%s.attn", dif);
    plan_lora_module(p, c, n, df, 3 * a, h, r, true, false);
    snprintf(n, sizeof n, "%s.attn.out_proj", nat), snprintf(df, sizeof df, "%s.attn.to_out.0", dif);
    plan_lora_module(p, c, n, df, h, a, r, false, false);
    snprintf(n, sizeof n, "%s.mlp.fc1", nat), snprintf(df, sizeof df, "%s.ff.net.0.proj", dif);
    plan_lora_module(p, c, n, df, 2 * f, h, r, false, true);
    snprintf(n, sizeof n, "%s.mlp.fc2", nat), snprintf(df, sizeof df, "%s.ff.net.2", dif);
    plan_lora_module(p, c, n, df, h, f, r, false, false);
}

static void plan_lora(plan *p, const lora_cfg *c, const dit_cfg *d)
{
    const int64_t h = d->hidden;
    char nat[96], dif[96], n[160], df[160];
    for (int64_t b = 0; b < d->layers; b++) {
        snprintf(nat, sizeof nat, "blocks.%" PRId64, b);
        snprintf(dif, sizeof dif, "transformer_blocks.%" PRId64, b);
        plan_lora_block(p, c, d, nat, dif);
        if (c->adaln) {
            snprintf(n, sizeof n, "%s.adaln_proj.linear", nat), snprintf(df, sizeof df, "%s.adaln_proj.linear", dif);
            plan_lora_module(p, c, n, df, 18 * h, c->adaln_in, c->adaln_rank, false, false);
        }
    }
    for (int64_t b = 0; b < d->refiner && !c->no_refiner; b++) {
        snprintf(nat, sizeof nat, "token_refiner.blocks.%" PRId64, b);
        snprintf(dif, sizeof dif, "token_refiner.refiner_blocks.%" PRId64, b);
        plan_lora_block(p, c, d, nat, dif);
    }
    if (c->condition)
        plan_lora_module(p, c, "condition_proj", "context_embedder", h, d->text_dim, c->rank, false, false);
    if (c->adaln)
        plan_lora_module(p, c, "final_layer.adaln_proj.linear", "norm_out.linear", 2 * h, c->adaln_in, c->adaln_rank,
                         false, false);
    if (c->bank) { /* PDD: per-step output heads, f32 */
        add(p, MM_F32, F_WEIGHT, 1, SH(c->bank, 96, h), "proj_out.weight");
        add(p, MM_F32, F_UNIFORM, 0.1f, SH(c->bank, 96), "proj_out.bias");
        add(p, MM_F32, F_WEIGHT, 1, SH(c->bank, 32, h), "audio_proj_out.weight");
        add(p, MM_F32, F_UNIFORM, 0.1f, SH(c->bank, 32), "audio_proj_out.bias");
        p->meta[p->n_meta][0] = "pdd_num_steps", p->meta[p->n_meta++][1] = "32";
        p->meta[p->n_meta][0] = "pdd_block_size", p->meta[p->n_meta++][1] = "4";
    }
    if (c->dense) { /* FastVideo v2: a full-rank delta next to the pairs */
        add(p, MM_BF16, F_WEIGHT, 0.01f, SH(d->heads * d->head_dim, h), "transformer_blocks.0.attn.to_q.diff");
        p->meta[p->n_meta][0] = "format", p->meta[p->n_meta++][1] = "fastvideo-lora-v2";
    }
    static char alpha_text[32];
    snprintf(alpha_text, sizeof alpha_text, "%.9g", c->alpha > 0 ? c->alpha : (double)c->rank);
    if (c->spelling == LS_DIFFSYNTH || c->spelling == LS_DIFFUSERS)
        p->meta[p->n_meta][0] = "alpha", p->meta[p->n_meta++][1] = alpha_text;
    if (c->spelling == LS_PEFT)
        p->meta[p->n_meta][0] = "lora_alpha", p->meta[p->n_meta++][1] = alpha_text;
    for (int i = 0; i < c->n_meta && p->n_meta < 32; i++)
        p->meta[p->n_meta][0] = c->meta[i][0], p->meta[p->n_meta++][1] = c->meta[i][1];
}

typedef struct te_cfg {
    int64_t hidden, heads, kv_heads, head_dim, ffn, layers, vocab;
    int64_t v_hidden, v_heads, v_ffn, v_depth, v_deepstack, v_pos_side, out_hidden;
} te_cfg;

static void plan_te(plan *p, const te_cfg *c)
{
    int64_t h = c->hidden, q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim, f = c->ffn;
    add(p, MM_I8, F_EMB_I8, 1, SH(c->vocab, h), "model.embed_tokens.weight");
    tensor_plan *s = add(p, MM_F32, F_EMB_SCALE, 1, SH(c->vocab, 1), "model.embed_tokens.weight_scale");
    snprintf(s->master, sizeof s->master, "model.embed_tokens.weight");
    s->cols = h;
    add_bytes(p, M_INT8, "%s.comfy_quant", "model.embed_tokens");
    char pre[128];
    for (int64_t n = 0; n < c->layers; n++) {
        add(p, MM_BF16, F_GAIN, 0.25f, SH(h), "model.layers.%" PRId64 ".input_layernorm.weight", n);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(h), "model.layers.%" PRId64 ".post_attention_layernorm.weight", n);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(c->head_dim), "model.layers.%" PRId64 ".self_attn.q_norm.weight", n);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(c->head_dim), "model.layers.%" PRId64 ".self_attn.k_norm.weight", n);
        const struct {
            const char *name;
            int64_t out, in;
            bool awq;
        } lin[7] = {{"self_attn.q_proj", q, h, false}, {"self_attn.k_proj", kv, h, false},
                    {"self_attn.v_proj", kv, h, false}, {"self_attn.o_proj", h, q, true},
                    {"mlp.gate_proj", f, h, false},     {"mlp.up_proj", f, h, false},
                    {"mlp.down_proj", h, f, true}};
        for (int i = 0; i < 7; i++) {
            snprintf(pre, sizeof pre, "model.layers.%" PRId64 ".%s", n, lin[i].name);
            add_nvfp4(p, pre, lin[i].out, lin[i].in, lin[i].awq);
        }
    }
    /* vision tower, BF16 */
    int64_t vh = c->v_hidden, m = 4 * vh;
    add(p, MM_BF16, F_WEIGHT, 1, SH(vh, 3, 2, 16, 16), "visual.patch_embed.proj.weight");
    add(p, MM_BF16, F_UNIFORM, 0.05f, SH(vh), "visual.patch_embed.proj.bias");
    add(p, MM_BF16, F_UNIFORM, 0.5f, SH(c->v_pos_side * c->v_pos_side, vh), "visual.pos_embed.weight");
    for (int64_t b = 0; b < c->v_depth; b++) {
        const char *v = "visual.blocks";
        add(p, MM_BF16, F_GAIN, 0.25f, SH(vh), "%s.%" PRId64 ".norm1.weight", v, b);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(vh), "%s.%" PRId64 ".norm1.bias", v, b);
        add(p, MM_BF16, F_GAIN, 0.25f, SH(vh), "%s.%" PRId64 ".norm2.weight", v, b);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(vh), "%s.%" PRId64 ".norm2.bias", v, b);
        add(p, MM_BF16, F_WEIGHT, 1, SH(3 * vh, vh), "%s.%" PRId64 ".attn.qkv.weight", v, b);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(3 * vh), "%s.%" PRId64 ".attn.qkv.bias", v, b);
        add(p, MM_BF16, F_WEIGHT, 1, SH(vh, vh), "%s.%" PRId64 ".attn.proj.weight", v, b);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(vh), "%s.%" PRId64 ".attn.proj.bias", v, b);
        add(p, MM_BF16, F_WEIGHT, 1, SH(c->v_ffn, vh), "%s.%" PRId64 ".mlp.linear_fc1.weight", v, b);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(c->v_ffn), "%s.%" PRId64 ".mlp.linear_fc1.bias", v, b);
        add(p, MM_BF16, F_WEIGHT, 1, SH(vh, c->v_ffn), "%s.%" PRId64 ".mlp.linear_fc2.weight", v, b);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(vh), "%s.%" PRId64 ".mlp.linear_fc2.bias", v, b);
    }
    add(p, MM_BF16, F_GAIN, 0.25f, SH(vh), "visual.merger.norm.weight");
    add(p, MM_BF16, F_UNIFORM, 0.05f, SH(vh), "visual.merger.norm.bias");
    add(p, MM_BF16, F_WEIGHT, 1, SH(m, m), "visual.merger.linear_fc1.weight");
    add(p, MM_BF16, F_UNIFORM, 0.05f, SH(m), "visual.merger.linear_fc1.bias");
    add(p, MM_BF16, F_WEIGHT, 1, SH(c->out_hidden, m), "visual.merger.linear_fc2.weight");
    add(p, MM_BF16, F_UNIFORM, 0.05f, SH(c->out_hidden), "visual.merger.linear_fc2.bias");
    for (int64_t j = 0; j < c->v_deepstack; j++) {
        const char *d = "visual.deepstack_merger_list";
        add(p, MM_BF16, F_GAIN, 0.25f, SH(m), "%s.%" PRId64 ".norm.weight", d, j);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(m), "%s.%" PRId64 ".norm.bias", d, j);
        add(p, MM_BF16, F_WEIGHT, 1, SH(m, m), "%s.%" PRId64 ".linear_fc1.weight", d, j);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(m), "%s.%" PRId64 ".linear_fc1.bias", d, j);
        add(p, MM_BF16, F_WEIGHT, 1, SH(c->out_hidden, m), "%s.%" PRId64 ".linear_fc2.weight", d, j);
        add(p, MM_BF16, F_UNIFORM, 0.05f, SH(c->out_hidden), "%s.%" PRId64 ".linear_fc2.bias", d, j);
    }
}

typedef struct vvae_cfg {
    int64_t ch[8];
    int nlev;
    int64_t dec_layers, dec_heads;
} vvae_cfg;

static void plan_video_vae(plan *p, const vvae_cfg *c)
{
    const mm_dtype T = MM_F16;
    add(p, T, F_WEIGHT, 1, SH(c->ch[0], 3, 3, 3, 3), "encoder.conv_in.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(c->ch[0]), "encoder.conv_in.bias");
    int64_t cin = c->ch[0];
    for (int l = 0; l < c->nlev; l++) {
        int64_t co = c->ch[l];
        for (int j = 0; j < 2; j++) {
            int64_t ci = j == 0 ? cin : co;
            const char *b = "encoder.down";
            add(p, T, F_GAIN, 0.2f, SH(ci), "%s.%d.block.%d.norm1.weight", b, l, j);
            add(p, T, F_UNIFORM, 0.05f, SH(ci), "%s.%d.block.%d.norm1.bias", b, l, j);
            add(p, T, F_WEIGHT, 1, SH(co, ci, 3, 3, 3), "%s.%d.block.%d.conv1.weight", b, l, j);
            add(p, T, F_UNIFORM, 0.05f, SH(co), "%s.%d.block.%d.conv1.bias", b, l, j);
            add(p, T, F_GAIN, 0.2f, SH(co), "%s.%d.block.%d.norm2.weight", b, l, j);
            add(p, T, F_UNIFORM, 0.05f, SH(co), "%s.%d.block.%d.norm2.bias", b, l, j);
            add(p, T, F_WEIGHT, 0.5f, SH(co, co, 3, 3, 3), "%s.%d.block.%d.conv2.weight", b, l, j);
            add(p, T, F_UNIFORM, 0.05f, SH(co), "%s.%d.block.%d.conv2.bias", b, l, j);
            if (j == 0 && ci != co) {
                add(p, T, F_WEIGHT, 1, SH(co, ci, 1, 1, 1), "%s.%d.block.0.nin_shortcut.weight", b, l);
                add(p, T, F_UNIFORM, 0.05f, SH(co), "%s.%d.block.0.nin_shortcut.bias", b, l);
            }
        }
        /* the released encoder downsamples at the first four of six levels */
        if (l < c->nlev - 2) {
            add(p, T, F_WEIGHT, 1, SH(co, co, 3, 3, 3), "encoder.down.%d.downsample.conv.weight", l);
            add(p, T, F_UNIFORM, 0.05f, SH(co), "encoder.down.%d.downsample.conv.bias", l);
        }
        cin = co;
    }
    add(p, T, F_GAIN, 0.2f, SH(cin), "encoder.norm_out.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(cin), "encoder.norm_out.bias");
    add(p, T, F_WEIGHT, 1, SH(48, cin, 3, 3, 3), "encoder.conv_out.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(48), "encoder.conv_out.bias");
    add(p, T, F_WEIGHT, 1, SH(48, 48, 1, 1, 1), "quant_conv.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(48), "quant_conv.bias");
    add(p, T, F_WEIGHT, 1, SH(24, 24, 1, 1, 1), "post_quant_conv.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(24), "post_quant_conv.bias");
    int64_t d = c->dec_heads * 64, ff = 4 * d;
    add(p, T, F_WEIGHT, 1, SH(d, 24), "decoder.x_embedder.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(d), "decoder.x_embedder.bias");
    add(p, T, F_UNIFORM, 0.5f, SH(1, 4, d), "decoder.register_tokens");
    add(p, T, F_UNIFORM, 0.5f, SH(1, 1, d), "decoder.mask_token");
    for (int64_t i = 0; i < c->dec_layers; i++) {
        const char *b = "decoder.transformer_blocks";
        add(p, T, F_GAIN, 0.2f, SH(d), "%s.%" PRId64 ".norm1.weight", b, i);
        add(p, T, F_GAIN, 0.2f, SH(d), "%s.%" PRId64 ".norm2.weight", b, i);
        add(p, T, F_UNIFORM, 0.2f, SH(d), "%s.%" PRId64 ".scale1", b, i);
        add(p, T, F_UNIFORM, 0.2f, SH(d), "%s.%" PRId64 ".scale2", b, i);
        add(p, T, F_WEIGHT, 1, SH(3 * d, d), "%s.%" PRId64 ".attn.to_qkv.weight", b, i);
        add(p, T, F_UNIFORM, 0.05f, SH(3 * d), "%s.%" PRId64 ".attn.to_qkv.bias", b, i);
        add(p, T, F_WEIGHT, 1, SH(d, d), "%s.%" PRId64 ".attn.to_out.weight", b, i);
        add(p, T, F_UNIFORM, 0.05f, SH(d), "%s.%" PRId64 ".attn.to_out.bias", b, i);
        add(p, T, F_WEIGHT, 1, SH(2 * ff, d), "%s.%" PRId64 ".ff.w1.weight", b, i);
        add(p, T, F_UNIFORM, 0.05f, SH(2 * ff), "%s.%" PRId64 ".ff.w1.bias", b, i);
        add(p, T, F_WEIGHT, 1, SH(d, ff), "%s.%" PRId64 ".ff.w2.weight", b, i);
        add(p, T, F_UNIFORM, 0.05f, SH(d), "%s.%" PRId64 ".ff.w2.bias", b, i);
    }
    add(p, T, F_GAIN, 0.2f, SH(d), "decoder.norm_out.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(d), "decoder.norm_out.bias");
    add(p, T, F_WEIGHT, 1, SH(3072, d), "decoder.proj_out.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(3072), "decoder.proj_out.bias");
}

typedef struct avae_cfg {
    int64_t enc_dim, latent_dim, heads, dec_dim;
    int64_t enc_rates[8], dec_rates[8];
    int n_enc, n_dec;
    float post_gain;
} avae_cfg;

static void plan_audio_vae(plan *p, const avae_cfg *c)
{
    const mm_dtype T = MM_F32;
    add(p, T, F_WEIGHT, 1, SH(c->enc_dim, 1, 7), "encoder.block.0.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(c->enc_dim), "encoder.block.0.bias");
    int64_t cb = c->enc_dim;
    for (int b = 1; b <= c->n_enc; b++, cb *= 2) {
        for (int r = 0; r < 3; r++) {
            add(p, T, F_GAIN, 0.3f, SH(1, cb, 1), "encoder.block.%d.block.%d.block.0.alpha", b, r);
            add(p, T, F_WEIGHT, 0.5f, SH(cb, cb, 7), "encoder.block.%d.block.%d.block.1.weight", b, r);
            add(p, T, F_UNIFORM, 0.05f, SH(cb), "encoder.block.%d.block.%d.block.1.bias", b, r);
            add(p, T, F_GAIN, 0.3f, SH(1, cb, 1), "encoder.block.%d.block.%d.block.2.alpha", b, r);
            add(p, T, F_WEIGHT, 0.5f, SH(cb, cb, 1), "encoder.block.%d.block.%d.block.3.weight", b, r);
            add(p, T, F_UNIFORM, 0.05f, SH(cb), "encoder.block.%d.block.%d.block.3.bias", b, r);
        }
        int64_t s = c->enc_rates[b - 1];
        add(p, T, F_GAIN, 0.3f, SH(1, cb, 1), "encoder.block.%d.block.3.alpha", b);
        add(p, T, F_WEIGHT, 1, SH(2 * cb, cb, 2 * s), "encoder.block.%d.block.4.weight", b);
        add(p, T, F_UNIFORM, 0.05f, SH(2 * cb), "encoder.block.%d.block.4.bias", b);
    }
    int last = c->n_enc + 1;
    add(p, T, F_GAIN, 0.3f, SH(1, cb, 1), "encoder.block.%d.alpha", last);
    add(p, T, F_WEIGHT, 1, SH(c->latent_dim, cb, 3), "encoder.block.%d.weight", last + 1);
    add(p, T, F_UNIFORM, 0.05f, SH(c->latent_dim), "encoder.block.%d.bias", last + 1);
    int64_t L = c->latent_dim;
    add(p, T, F_GAIN, 0.2f, SH(L), "pre_block.norm1.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(L), "pre_block.norm1.bias");
    add(p, T, F_GAIN, 0.2f, SH(L), "pre_block.norm3.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(L), "pre_block.norm3.bias");
    add(p, T, F_WEIGHT, 1, SH(3 * L, L), "pre_block.attn.qkv.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(L), "pre_block.attn.q_bias");
    add(p, T, F_UNIFORM, 0.05f, SH(L), "pre_block.attn.v_bias");
    add(p, T, F_ZERO, 0, SH(L), "pre_block.attn.zero_k_bias");
    add(p, T, F_WEIGHT, 1, SH(32, 32), "pre_block.attn.proj.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(32), "pre_block.attn.proj.bias");
    add(p, T, F_WEIGHT, 1, SH(32, L), "pre_block.proj.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(32), "pre_block.proj.bias");
    add(p, T, F_GAIN, 0.2f, SH(32), "pre_block.norm2.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(32), "pre_block.norm2.bias");
    add(p, T, F_GAIN, 0.2f, SH(32), "pre_block.mlp.norm.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(32), "pre_block.mlp.norm.bias");
    add(p, T, F_WEIGHT, 1, SH(64, 32), "pre_block.mlp.w0.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(64), "pre_block.mlp.w0.bias");
    add(p, T, F_WEIGHT, 1, SH(64, 32), "pre_block.mlp.w1.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(64), "pre_block.mlp.w1.bias");
    add(p, T, F_WEIGHT, 1, SH(32, 64), "pre_block.mlp.w2.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(32), "pre_block.mlp.w2.bias");
    add(p, T, F_WEIGHT, 1, SH(32, 32, 1), "mean_proj.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(32), "mean_proj.bias");
    add(p, T, F_WEIGHT, 1, SH(32, 32, 1), "logs_proj.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(32), "logs_proj.bias");
    add(p, T, F_WEIGHT, 1, SH(L, 32, 1), "dec_in_proj.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(L), "dec_in_proj.bias");
    add(p, T, F_WEIGHT, 1, SH(c->dec_dim, L, 7), "decoder.conv_pre.weight");
    add(p, T, F_UNIFORM, 0.05f, SH(c->dec_dim), "decoder.conv_pre.bias");
    int64_t ci = c->dec_dim;
    static const int64_t ks[3] = {3, 7, 11};
    for (int i = 0; i < c->n_dec; i++, ci /= 2) {
        int64_t r = c->dec_rates[i], k = r % 2 ? 2 * r - 1 : 2 * r, cq = ci / 2;
        add(p, T, F_WEIGHT, 1, SH(ci, cq, k), "decoder.ups.%d.0.weight", i);
        add(p, T, F_UNIFORM, 0.05f, SH(cq), "decoder.ups.%d.0.bias", i);
        for (int m = 0; m < 3; m++) {
            int q = 3 * i + m;
            for (int n = 0; n < 3; n++) {
                add(p, T, F_WEIGHT, 0.5f, SH(cq, cq, ks[m]), "decoder.resblocks.%d.convs1.%d.weight", q, n);
                add(p, T, F_UNIFORM, 0.05f, SH(cq), "decoder.resblocks.%d.convs1.%d.bias", q, n);
                add(p, T, F_WEIGHT, 0.5f, SH(cq, cq, ks[m]), "decoder.resblocks.%d.convs2.%d.weight", q, n);
                add(p, T, F_UNIFORM, 0.05f, SH(cq), "decoder.resblocks.%d.convs2.%d.bias", q, n);
            }
            for (int a = 0; a < 6; a++) {
                add(p, T, F_UNIFORM, 0.3f, SH(cq), "decoder.resblocks.%d.activations.%d.act.alpha", q, a);
                add(p, T, F_UNIFORM, 0.3f, SH(cq), "decoder.resblocks.%d.activations.%d.act.beta", q, a);
                add(p, T, F_FILTER, 0, SH(1, 1, 12), "decoder.resblocks.%d.activations.%d.upsample.filter", q, a);
                add(p, T, F_FILTER, 0, SH(1, 1, 12), "decoder.resblocks.%d.activations.%d.downsample.lowpass.filter",
                    q, a);
            }
        }
    }
    add(p, T, F_UNIFORM, 0.3f, SH(ci), "decoder.activation_post.act.alpha");
    add(p, T, F_UNIFORM, 0.3f, SH(ci), "decoder.activation_post.act.beta");
    add(p, T, F_FILTER, 0, SH(1, 1, 12), "decoder.activation_post.upsample.filter");
    add(p, T, F_FILTER, 0, SH(1, 1, 12), "decoder.activation_post.downsample.lowpass.filter");
    add(p, T, F_WEIGHT, c->post_gain, SH(1, ci, 7), "decoder.conv_post.weight");
}

/* ------------------------------------------------------------- generation */

static const tensor_plan *g_cur; /* the tensor being generated */

static int64_t numel_of(const tensor_plan *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* One master row (float) of a quantized tensor, or of a plain weight. */
static void master_row(const char *name, int64_t row, int64_t k, float gain, float *out)
{
    rng r;
    rng_init(&r, name, row);
    float a = gain * sqrtf(3.0f / (float)k);
    for (int64_t i = 0; i < k; i++)
        out[i] = a * rng_unit(&r);
}

static void rotate256(float *x, int64_t n)
{
    static const float H4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};
    float tmp[256];
    for (int64_t g = 0; g < n; g += 256) {
        float *v = x + g;
        for (int s = 1; s < 256; s *= 4) {
            for (int i = 0; i < 256; i++) {
                int d = (i / s) % 4, b = i - d * s;
                tmp[i] = 0.5f * (H4[d][0] * v[b] + H4[d][1] * v[b + s] + H4[d][2] * v[b + 2 * s] +
                                 H4[d][3] * v[b + 3 * s]);
            }
            memcpy(v, tmp, sizeof tmp);
        }
    }
}

typedef struct job {
    const tensor_plan *t;
    void *out; /* the tensor's bytes */
    float *cache;
    float scale2;
} job;

static void store_row(void *dst, mm_dtype dt, const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case MM_F32: ((float *)dst)[i] = v[i]; break;
        case MM_BF16: ((uint16_t *)dst)[i] = mm_f32_to_bf16(v[i]); break;
        case MM_F16: ((uint16_t *)dst)[i] = mm_f32_to_f16(v[i]); break;
        default: break;
        }
    }
}

/* Plain float tensors, row by row (row = first dim). */
static void fill_plain_rows(void *user, int64_t begin, int64_t end)
{
    const job *j = user;
    const tensor_plan *t = j->t;
    int64_t n = numel_of(t), rows = t->ndim ? t->shape[0] : 1, cols = rows ? n / rows : 0;
    float *buf = malloc((size_t)(cols ? cols : 1) * 4);
    for (int64_t r = begin; r < end; r++) {
        rng g;
        rng_init(&g, t->name, r);
        for (int64_t c = 0; c < cols; c++) {
            float u = rng_unit(&g);
            switch (t->kind) {
            case F_WEIGHT: buf[c] = t->gain * sqrtf(3.0f / (float)cols) * u; break;
            case F_UNIFORM: buf[c] = t->gain * u; break;
            case F_GAIN: buf[c] = 1.0f + t->gain * u; break;
            case F_CONST: buf[c] = t->gain; break;
            default: buf[c] = 0.0f; break;
            }
        }
        store_row((char *)j->out + (size_t)(r * cols) * (size_t)(mm_dtype_bits(t->dtype) / 8), t->dtype, buf, cols);
    }
    free(buf);
}

/* ConvRot: per-row scales (pass 1) or codes (pass 2) of the rotated master. */
static void convrot_rows(void *user, int64_t begin, int64_t end)
{
    const job *j = user;
    const tensor_plan *t = j->t;
    int64_t k = t->cols;
    float *row = malloc((size_t)k * 4);
    for (int64_t r = begin; r < end; r++) {
        master_row(t->master, r, k, 1.0f, row);
        rotate256(row, k);
        if (t->kind == F_CONVROT_SCALE) {
            float amax = 0;
            for (int64_t i = 0; i < k; i++)
                amax = fmaxf(amax, fabsf(row[i]));
            j->cache[r] = amax > 0 ? amax / 127.0f : 1.0f;
        } else {
            int8_t *q = (int8_t *)j->out + r * k;
            float s = j->cache[r];
            for (int64_t i = 0; i < k; i++) {
                float v = nearbyintf(row[i] / s);
                q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
            }
        }
    }
    free(row);
}

/* nvfp4: amax of the master (scale2), or codes + block scales. */
static void nvfp4_amax_rows(void *user, int64_t begin, int64_t end)
{
    const job *j = user;
    const tensor_plan *t = j->t;
    float *row = malloc((size_t)t->cols * 4);
    for (int64_t r = begin; r < end; r++) {
        master_row(t->master, r, t->cols, 1.0f, row);
        float amax = 0;
        for (int64_t i = 0; i < t->cols; i++)
            amax = fmaxf(amax, fabsf(row[i]));
        j->cache[r] = amax;
    }
    free(row);
}

static inline int64_t swizzled(int64_t r, int64_t c, int64_t C)
{
    return ((r / 128) * (C / 4) + (c / 4)) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

static void nvfp4_rows(void *user, int64_t begin, int64_t end)
{
    const job *j = user;
    const tensor_plan *t = j->t;
    int64_t k = t->cols, C = k / 16;
    float *row = malloc((size_t)k * 4);
    uint8_t *packed = j->out, *scales = (uint8_t *)j->cache; /* cache: the block-scale buffer */
    for (int64_t r = begin; r < end; r++) {
        master_row(t->master, r, k, 1.0f, row);
        for (int64_t b = 0; b < C; b++) {
            float amax = 0;
            for (int e = 0; e < 16; e++)
                amax = fmaxf(amax, fabsf(row[b * 16 + e]));
            uint8_t sc = mm_f32_to_e4m3(j->scale2 > 0 ? amax / 6.0f / j->scale2 : 0.0f);
            scales[swizzled(r, b, C)] = sc;
            float d = mm_e4m3_to_f32(sc) * j->scale2;
            for (int e = 0; e < 16; e += 2) {
                uint8_t hi = mm_f32_to_e2m1(d > 0 ? row[b * 16 + e] / d : 0.0f);
                uint8_t lo = mm_f32_to_e2m1(d > 0 ? row[b * 16 + e + 1] / d : 0.0f);
                packed[r * (k / 2) + (b * 16 + e) / 2] = (uint8_t)(hi << 4 | lo);
            }
        }
    }
    free(row);
}

static void emb_rows(void *user, int64_t begin, int64_t end)
{
    const job *j = user;
    const tensor_plan *t = j->t;
    int64_t k = t->kind == F_EMB_I8 ? t->shape[1] : t->cols;
    const char *name = t->kind == F_EMB_I8 ? t->name : t->master;
    float *row = malloc((size_t)k * 4);
    for (int64_t r = begin; r < end; r++) {
        master_row(name, r, k, 30.0f, row); /* embedding rows ~ U(-0.5, 0.5) at k = 256-ish; scale-free */
        float amax = 0;
        for (int64_t i = 0; i < k; i++)
            amax = fmaxf(amax, fabsf(row[i]));
        float s = amax > 0 ? amax / 127.0f : 1.0f;
        if (t->kind == F_EMB_SCALE) {
            ((float *)j->out)[r] = s;
        } else {
            int8_t *q = (int8_t *)j->out + r * k;
            for (int64_t i = 0; i < k; i++)
                q[i] = (int8_t)nearbyintf(row[i] / s);
        }
    }
    free(row);
}

/* Adapter rows: each row is a row of the master matrix (its own RNG stream,
 * so every spelling stores exactly the same numbers), placed as the
 * spelling places it. */
static void lora_rows(void *user, int64_t begin, int64_t end)
{
    const job *j = user;
    const tensor_plan *t = j->t;
    const int64_t cols = t->shape[1], N = t->rows, R = t->cols;
    float *row = calloc((size_t)cols, 4);
    if (!row)
        return;
    for (int64_t r = begin; r < end; r++) {
        int64_t m = r, at = 0;
        switch (t->map) {
        case LM_SAME: break;
        case LM_SLICE: m = t->slice * t->shape[0] + r; break;
        case LM_SWAP: m = (r + N / 2) % N; break;
        case LM_INTERLEAVE: m = ((r % 384) / 128) * (N / 3) + (r / 384) * 128 + r % 128; break;
        case LM_TILE: m = r % N; break;
        case LM_BLOCKDIAG: at = (r / (N / 3)) * R; break;
        }
        memset(row, 0, (size_t)cols * 4);
        master_row(t->master, m, R, t->gain, row + at);
        store_row((char *)j->out + (size_t)(r * cols) * (size_t)(mm_dtype_bits(t->dtype) / 8), t->dtype, row, cols);
    }
    free(row);
}

/* Block scales of an nvfp4 weight are computed with its codes; they wait here
 * until their own tensor is written (it follows the weight in file order). */
typedef struct pending {
    char name[192];
    uint8_t *bytes;
    size_t n;
} pending;
static pending g_pending;

static float *scale2_cache_get(plan *p, const char *master);

static int generate(plan *p, const tensor_plan *t, void **bytes, size_t *nbytes, mm_error *err)
{
    int64_t n = numel_of(t);
    size_t sz = mm_dtype_nbytes(t->dtype, n);
    *nbytes = sz;
    if (t->kind == F_NVFP4_SCALE) {
        if (strncmp(g_pending.name, t->master, sizeof g_pending.name) != 0 || g_pending.n != sz)
            return mm_fail(err, "internal: block scales of %s requested before its weight", t->master);
        *bytes = g_pending.bytes;
        g_pending.bytes = NULL;
        g_pending.name[0] = '\0';
        return 0;
    }
    uint8_t *out = calloc(sz ? sz : 1, 1);
    if (!out)
        return mm_fail(err, "out of memory for %s (%zu bytes)", t->name, sz);
    *bytes = out;
    job j = {.t = t, .out = out};
    g_cur = t;
    switch (t->kind) {
    case F_BYTES: memcpy(out, t->bytes, sz); break;
    case F_ZERO: break;
    case F_INV_FREQ:
        for (int64_t i = 0; i < n; i++)
            ((float *)out)[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)(2 * n));
        break;
    case F_TABLE: {
        int64_t rows = t->shape[0], cols = t->shape[1];
        for (int64_t c = 0; c < cols; c++) {
            rng g;
            rng_init(&g, t->name, c);
            float a = rng_unit(&g), b = 2 * rng_unit(&g), ph = 3 * rng_unit(&g);
            for (int64_t r = 0; r < rows; r++) {
                float x = (float)r / (float)(rows > 1 ? rows - 1 : 1);
                ((float *)out)[r * cols + c] = a + b * sinf(3.0f * x + ph) + 0.05f * rng_unit(&g);
            }
        }
        break;
    }
    case F_FILTER: { /* Kaiser-windowed sinc, cutoff 0.25, 12 taps, normalised */
        double sum = 0, w[12];
        for (int i = 0; i < 12; i++) {
            double x = i - 5.5, s = x == 0 ? 1 : sin(M_PI * 0.5 * x) / (M_PI * 0.5 * x);
            double win = 0.54 - 0.46 * cos(2 * M_PI * i / 11.0);
            w[i] = s * win;
            sum += w[i];
        }
        for (int i = 0; i < 12; i++)
            ((float *)out)[i] = (float)(w[i] / sum);
        break;
    }
    case F_WEIGHT:
    case F_UNIFORM:
    case F_GAIN:
    case F_CONST: mm_parallel_for(ctx, t->ndim ? t->shape[0] : 1, 1, fill_plain_rows, &j); break;
    case F_CONVROT_SCALE:
        j.cache = (float *)out;
        mm_parallel_for(ctx, t->rows, 16, convrot_rows, &j);
        break;
    case F_CONVROT: {
        j.cache = malloc((size_t)t->rows * 4);
        tensor_plan s = *t;
        s.kind = F_CONVROT_SCALE;
        job js = {.t = &s, .cache = j.cache};
        mm_parallel_for(ctx, t->rows, 16, convrot_rows, &js); /* pass 1: the scales, recomputed exactly */
        mm_parallel_for(ctx, t->rows, 16, convrot_rows, &j);
        free(j.cache);
        break;
    }
    case F_NVFP4_SCALE2: {
        float *s2 = scale2_cache_get(p, t->master);
        memcpy(out, s2, 4);
        break;
    }
    case F_NVFP4: {
        j.scale2 = *scale2_cache_get(p, t->master);
        size_t ssz = (size_t)(t->rows * (t->cols / 16));
        uint8_t *scales = calloc(ssz, 1);
        if (!scales)
            return mm_fail(err, "out of memory");
        j.cache = (float *)(void *)scales;
        mm_parallel_for(ctx, t->rows, 8, nvfp4_rows, &j);
        free(g_pending.bytes);
        snprintf(g_pending.name, sizeof g_pending.name, "%s", t->master);
        g_pending.bytes = scales;
        g_pending.n = ssz;
        break;
    }
    case F_EMB_I8:
    case F_EMB_SCALE: mm_parallel_for(ctx, t->shape[0], 64, emb_rows, &j); break;
    case F_LORA: mm_parallel_for(ctx, t->shape[0], 16, lora_rows, &j); break;
    default: break;
    }
    return mm_ctx_error(ctx, err);
}

/* Per-tensor nvfp4 scales: amax(master) / (6 * 448), computed once. */
static float *scale2_cache_get(plan *p, const char *master)
{
    for (size_t i = 0; i < p->n; i++) {
        tensor_plan *t = &p->t[i];
        if (t->kind != F_NVFP4_SCALE2 || strcmp(t->master, master) != 0)
            continue;
        if (!t->cache) {
            float *amax = malloc((size_t)t->rows * 4);
            job j = {.t = t, .cache = amax};
            mm_parallel_for(ctx, t->rows, 16, nvfp4_amax_rows, &j);
            float m = 0;
            for (int64_t r = 0; r < t->rows; r++)
                m = fmaxf(m, amax[r]);
            free(amax);
            t->cache = malloc(4);
            t->cache[0] = m / (6.0f * 448.0f);
        }
        return t->cache;
    }
    static float one = 1.0f;
    return &one;
}

static int write_plan(plan *p, const char *path, mm_error *err)
{
    if (mm_make_parent_dirs(path, err) != 0)
        return -1;
    mm_st_writer *w;
    if (mm_st_writer_open(&w, path, err) != 0)
        return -1;
    uint64_t total = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (mm_st_writer_declare(w, p->t[i].name, p->t[i].dtype, p->t[i].ndim, p->t[i].shape, err) != 0) {
            mm_st_writer_abort(w);
            return -1;
        }
        total += mm_dtype_nbytes(p->t[i].dtype, numel_of(&p->t[i]));
    }
    for (int i = 0; i < p->n_meta; i++)
        if (mm_st_writer_metadata(w, p->meta[i][0], p->meta[i][1], err) != 0) {
            mm_st_writer_abort(w);
            return -1;
        }
    time_t start = time(NULL);
    uint64_t done = 0;
    for (;;) {
        const mm_st_entry *e;
        if (mm_st_writer_next(w, &e, err) != 0) {
            mm_st_writer_abort(w);
            return -1;
        }
        if (!e)
            break;
        const tensor_plan *t = NULL;
        for (size_t i = 0; i < p->n && !t; i++)
            if (strcmp(p->t[i].name, e->name) == 0)
                t = &p->t[i];
        void *bytes = NULL;
        size_t n = 0;
        if (!t || generate(p, t, &bytes, &n, err) != 0 || mm_st_writer_append(w, bytes, n, err) != 0) {
            free(bytes);
            mm_st_writer_abort(w);
            return -1;
        }
        free(bytes);
        done += n;
        if (total > (1ull << 30) && isatty(2))
            fprintf(stderr, "\r%s: %.1f / %.1f GB (%lds)", path, done / 1e9, total / 1e9, (long)(time(NULL) - start));
    }
    if (total > (1ull << 30) && isatty(2))
        fprintf(stderr, "\n");
    return mm_st_writer_close(w, err);
}

/* ------------------------------------------------- the config folder (all) */

/* `all` also writes DIR/MiniMax-H3/FL2VA (+ scheduler/, audio_scheduler/): the
 * release's small config files, copied from a release folder, with
 * text_encoder/config.json patched to the generated text encoder's sizes, so
 * DIR works as $MODELS_PATH for the whole engine. The release folder is
 * --config-from DIR, else $MMH3_SHARED/minimax-h3/FL2VA, else a shared/
 * beside (up to four levels above) the current folder. */
static const char *find_release_config(const char *given, char *buf, size_t n)
{
    char probe[4600];
    const char *shared = getenv("MMH3_SHARED");
    for (int i = -2; i < 4; i++) {
        if (i == -2) {
            if (!given)
                continue;
            snprintf(buf, n, "%s", given);
        } else if (i == -1) {
            if (!shared || !*shared)
                continue;
            snprintf(buf, n, "%s/minimax-h3/FL2VA", shared);
        } else {
            static const char *ups[] = {"..", "../..", "../../..", "../../../.."};
            snprintf(buf, n, "%s/shared/minimax-h3/FL2VA", ups[i]);
        }
        snprintf(probe, sizeof probe, "%s/text_encoder/config.json", buf);
        if (access(probe, R_OK) == 0)
            return buf;
        if (i == -2)
            return NULL; /* an explicit folder that is not one */
    }
    return NULL;
}

static int copy_file(const char *from, const char *to, mm_error *err)
{
    FILE *in = fopen(from, "rb");
    if (!in)
        return mm_fail(err, "cannot open %s", from);
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return mm_fail(err, "cannot create %s", to);
    }
    char buf[1 << 16];
    size_t k;
    int rc = 0;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k)
            rc = mm_fail(err, "cannot write %s", to);
    fclose(in);
    if (fclose(out) != 0 && rc == 0)
        rc = mm_fail(err, "cannot write %s", to);
    return rc;
}

static int make_dirs(const char *path)
{
    char tmp[4600];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static int write_config_folder(const char *out, const char *release, const te_cfg *te, mm_error *err)
{
    char dst[4600], src[4600];
    static const char *const copies[] = {
        "processor/preprocessor_config.json", "processor/video_preprocessor_config.json", "tokenizer/vocab.json",
        "tokenizer/merges.txt", "tokenizer/tokenizer_config.json", "../scheduler/scheduler_config.json",
        "../audio_scheduler/scheduler_config.json"};
    static const char *const dirs[] = {"FL2VA/processor", "FL2VA/tokenizer", "FL2VA/text_encoder", "scheduler",
                                       "audio_scheduler"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(dst, sizeof dst, "%s/MiniMax-H3/%s", out, dirs[i]);
        if (make_dirs(dst) != 0)
            return mm_fail(err, "cannot create %s", dst);
    }
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
        snprintf(src, sizeof src, "%s/%s", release, copies[i]);
        snprintf(dst, sizeof dst, "%s/MiniMax-H3/FL2VA/%s", out, copies[i]);
        if (access(src, R_OK) != 0 && strncmp(copies[i], "../", 3) == 0)
            continue; /* the scheduler shifts have release defaults in the engine */
        if (copy_file(src, dst, err) != 0)
            return -1;
    }
    snprintf(src, sizeof src, "%s/text_encoder/config.json", release);
    json_error_t je;
    json_t *cfg = json_load_file(src, 0, &je);
    if (!cfg)
        return mm_fail(err, "%s: %s", src, je.text);
    json_t *t = json_object_get(cfg, "text_config"), *v = json_object_get(cfg, "vision_config");
    if (!json_is_object(t) || !json_is_object(v)) {
        json_decref(cfg);
        return mm_fail(err, "%s: no text_config / vision_config", src);
    }
    json_object_set_new(t, "hidden_size", json_integer(te->hidden));
    json_object_set_new(t, "num_attention_heads", json_integer(te->heads));
    json_object_set_new(t, "num_key_value_heads", json_integer(te->kv_heads));
    json_object_set_new(t, "head_dim", json_integer(te->head_dim));
    json_object_set_new(t, "intermediate_size", json_integer(te->ffn));
    json_object_set_new(t, "num_hidden_layers", json_integer(te->layers));
    json_object_set_new(t, "vocab_size", json_integer(te->vocab));
    json_object_set_new(v, "depth", json_integer(te->v_depth));
    json_object_set_new(v, "hidden_size", json_integer(te->v_hidden));
    json_object_set_new(v, "num_heads", json_integer(te->v_heads));
    json_object_set_new(v, "intermediate_size", json_integer(te->v_ffn));
    json_object_set_new(v, "num_position_embeddings", json_integer(te->v_pos_side * te->v_pos_side));
    json_object_set_new(v, "out_hidden_size", json_integer(te->out_hidden));
    /* the release's tap blocks where they fit the depth, else the first ones */
    json_t *taps = json_object_get(v, "deepstack_visual_indexes");
    bool fits = json_is_array(taps) && (int64_t)json_array_size(taps) == te->v_deepstack;
    for (size_t i = 0; fits && i < json_array_size(taps); i++)
        fits = json_integer_value(json_array_get(taps, i)) < te->v_depth;
    if (!fits) {
        json_t *a = json_array();
        for (int64_t i = 0; i < te->v_deepstack; i++)
            json_array_append_new(a, json_integer(i < te->v_depth ? i : te->v_depth - 1));
        json_object_set_new(v, "deepstack_visual_indexes", a);
    }
    snprintf(dst, sizeof dst, "%s/MiniMax-H3/FL2VA/text_encoder/config.json", out);
    int rc = json_dump_file(cfg, dst, JSON_INDENT(2)) == 0 ? 0 : mm_fail(err, "cannot write %s", dst);
    json_decref(cfg);
    return rc;
}

/* --------------------------------------------------------------- the CLI */

/* The lora kind's options with a value; false when `a` is not one. Bad
 * values leave a negative field for the caller to report. */
static bool lora_option(lora_cfg *c, const char *a, const char *v)
{
    char *e;
    if (strcmp(a, "--spelling") == 0) {
        c->spelling = -1;
        for (int i = 0; i < LS_COUNT; i++)
            if (strcmp(v, k_spellings[i]) == 0)
                c->spelling = i;
    } else if (strcmp(a, "--rank") == 0) {
        c->rank = strtoll(v, &e, 10), c->rank = *e ? -1 : c->rank;
    } else if (strcmp(a, "--adaln-rank") == 0) {
        c->adaln_rank = strtoll(v, &e, 10), c->adaln_rank = *e ? -1 : c->adaln_rank;
    } else if (strcmp(a, "--adaln-in") == 0) {
        c->adaln_in = strtoll(v, &e, 10), c->adaln_in = *e ? -1 : c->adaln_in;
    } else if (strcmp(a, "--bank") == 0) {
        c->bank = strtoll(v, &e, 10), c->bank = *e ? -1 : c->bank;
    } else if (strcmp(a, "--alpha") == 0) {
        c->alpha = strtod(v, &e), c->alpha = *e ? -1 : c->alpha;
    } else if (strcmp(a, "--gain") == 0) {
        c->gain = strtof(v, &e), c->gain = *e ? -1 : c->gain;
    } else if (strcmp(a, "--metadata") == 0) {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || c->n_meta >= 16) {
            c->n_meta = -1;
            return true;
        }
        char *k = strndup(v, (size_t)(eq - v)); /* lives until exit */
        c->meta[c->n_meta][0] = k;
        c->meta[c->n_meta++][1] = eq + 1;
    } else {
        return false;
    }
    return true;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mmh3-gen-tiny dit|text-encoder|video-vae|audio-vae [--full] [options] [--seed N] --out FILE\n"
            "       mmh3-gen-tiny lora [dit sizes] [lora options] [--seed N] --out FILE   (a random adapter for\n"
            "                 the DiT of those sizes)\n"
            "       mmh3-gen-tiny all [--full] [--seed N] [--config-from FL2VA_DIR] --out DIR   (DIR laid out like\n"
            "                 $MODELS_PATH, with MiniMax-H3/FL2VA: the release's config files, the text encoder's\n"
            "                 config.json patched to the generated sizes)\n"
            "\n"
            "Writes checkpoints in the released files' exact layouts with seeded random values.\n"
            "Defaults are tiny (the conformance kits' sizes); --full gives the released sizes.\n"
            "\n"
            "dit:          --hidden --heads --head-dim --ffn --layers --refiner-layers --text-dim --table-size\n"
            "text-encoder: --hidden --heads --kv-heads --head-dim --ffn --layers --vocab --vision-hidden\n"
            "              --vision-heads --vision-ffn --vision-depth --deepstack --pos-side\n"
            "video-vae:    --channels C0,C1,... --decoder-layers --decoder-heads\n"
            "audio-vae:    --encoder-dim --encoder-rates R,R,.. --latent-dim --heads --decoder-dim --decoder-rates R,..\n"
            "lora:         the dit sizes, --spelling native|comfy|noalpha|diffsynth|kohya|diffusers|peft|fused,\n"
            "              --rank R (16), --alpha A (default: the rank), --gain G (0.1: |B.A| ~ G.|W|), --no-refiner,\n"
            "              --condition, --adaln [--adaln-rank R --adaln-in W], --bank HEADS (PDD), --dense\n"
            "              (FastVideo .diff), --metadata KEY=VALUE (repeatable). Every spelling of one seed\n"
            "              stores the same adapter.\n");
}

static int parse_i64(const char *s, int64_t *out)
{
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (errno || e == s || *e || v <= 0)
        return -1;
    *out = v;
    return 0;
}

static int parse_list(const char *s, int64_t *out, int max, int *n)
{
    *n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == max || parse_i64(tok, &out[*n]) != 0)
            return -1;
        (*n)++;
    }
    return *n ? 0 : -1;
}

typedef struct all_cfg {
    dit_cfg dit;
    te_cfg te;
    vvae_cfg vv;
    avae_cfg av;
} all_cfg;

static void defaults(all_cfg *c, bool full)
{
    if (full) {
        c->dit = (dit_cfg){5376, 56, 128, 14336, 50, 2, 5120, 1025, 8};
        c->te = (te_cfg){5120, 64, 8, 128, 25600, 50, 151936, 1152, 16, 4304, 27, 3, 48, 5120};
        c->vv = (vvae_cfg){{128, 256, 256, 512, 512, 1024}, 6, 36, 32};
        c->av = (avae_cfg){64, 2048, 8, 1024, {2, 4, 4, 5, 5}, {5, 5, 2, 2, 2, 2, 2}, 5, 7, 1.0f};
    } else {
        /* the conformance kits' sizes; the DiT reads the tiny text encoder's width */
        c->dit = (dit_cfg){256, 4, 128, 512, 2, 2, 256, 1025, 8};
        c->te = (te_cfg){256, 4, 2, 128, 512, 4, 151936, 144, 2, 288, 4, 3, 6, 256};
        c->vv = (vvae_cfg){{32, 32, 32, 32, 32, 64}, 6, 2, 2};
        c->av = (avae_cfg){8, 128, 2, 48, {2, 4, 5}, {5, 2, 2, 2}, 3, 4, 0.2f};
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *what = argv[1], *out = NULL, *config_from = NULL;
    bool rates_given = false;
    bool full = false;
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--full") == 0)
            full = true;
    all_cfg c;
    defaults(&c, full);
    lora_cfg lc = {.rank = 16, .adaln_rank = 4, .gain = 0.1f, .spelling = LS_NATIVE};
    lc.adaln_in = c.dit.time_dim;
    int64_t ignore;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--full") == 0)
            continue;
        bool *flag = strcmp(a, "--no-refiner") == 0 ? &lc.no_refiner
                     : strcmp(a, "--condition") == 0 ? &lc.condition
                     : strcmp(a, "--adaln") == 0     ? &lc.adaln
                     : strcmp(a, "--dense") == 0     ? &lc.dense
                                                     : NULL;
        if (flag && strcmp(what, "lora") == 0) {
            *flag = true;
            continue;
        }
        if (strcmp(what, "lora") == 0 && v && lora_option(&lc, a, v)) {
            i++;
            if (lc.spelling < 0 || lc.rank <= 0 || lc.adaln_rank <= 0 || lc.adaln_in <= 0 || lc.bank < 0 ||
                !(lc.alpha >= 0) || !(lc.gain > 0) || lc.n_meta < 0) {
                fprintf(stderr, "mmh3-gen-tiny lora: bad value for %s: %s\n", a, v);
                return 2;
            }
            continue;
        }
        if (!v) {
            fprintf(stderr, "mmh3-gen-tiny: %s needs a value\n", a);
            return 2;
        }
        i++;
        int64_t *dst = NULL;
        int bad = 0, nn;
        if (strcmp(a, "--out") == 0)
            out = v;
        else if (strcmp(a, "--config-from") == 0)
            config_from = v;
        else if (strcmp(a, "--seed") == 0)
            bad = parse_i64(v, (int64_t *)&g_seed);
        else if (strcmp(a, "--channels") == 0) {
            bad = parse_list(v, c.vv.ch, 8, &nn);
            c.vv.nlev = nn;
        } else if (strcmp(a, "--encoder-rates") == 0) {
            rates_given = true;
            bad = parse_list(v, c.av.enc_rates, 8, &nn);
            c.av.n_enc = nn;
        } else if (strcmp(a, "--decoder-rates") == 0) {
            rates_given = true;
            bad = parse_list(v, c.av.dec_rates, 8, &nn);
            c.av.n_dec = nn;
        } else {
            bool dit = strcmp(what, "dit") == 0, te = strcmp(what, "text-encoder") == 0, lora = strcmp(what, "lora") == 0;
            bool vv = strcmp(what, "video-vae") == 0, av = strcmp(what, "audio-vae") == 0;
            struct {
                const char *flag;
                bool on;
                int64_t *p;
            } map[] = {{"--hidden", dit || lora, &c.dit.hidden},        {"--heads", dit || lora, &c.dit.heads},
                       {"--head-dim", dit || lora, &c.dit.head_dim},    {"--ffn", dit || lora, &c.dit.ffn},
                       {"--layers", dit || lora, &c.dit.layers},        {"--refiner-layers", dit || lora, &c.dit.refiner},
                       {"--text-dim", dit || lora, &c.dit.text_dim},    {"--table-size", dit, &c.dit.table},
                       {"--hidden", te, &c.te.hidden},          {"--heads", te, &c.te.heads},
                       {"--kv-heads", te, &c.te.kv_heads},      {"--head-dim", te, &c.te.head_dim},
                       {"--ffn", te, &c.te.ffn},                {"--layers", te, &c.te.layers},
                       {"--vocab", te, &c.te.vocab},            {"--vision-hidden", te, &c.te.v_hidden},
                       {"--vision-heads", te, &c.te.v_heads},   {"--vision-ffn", te, &c.te.v_ffn},
                       {"--vision-depth", te, &c.te.v_depth},   {"--deepstack", te, &c.te.v_deepstack},
                       {"--pos-side", te, &c.te.v_pos_side},    {"--decoder-layers", vv, &c.vv.dec_layers},
                       {"--decoder-heads", vv, &c.vv.dec_heads}, {"--encoder-dim", av, &c.av.enc_dim},
                       {"--latent-dim", av, &c.av.latent_dim},  {"--heads", av, &c.av.heads},
                       {"--decoder-dim", av, &c.av.dec_dim}};
            for (size_t k = 0; k < sizeof map / sizeof map[0] && !dst; k++)
                if (map[k].on && strcmp(a, map[k].flag) == 0)
                    dst = map[k].p;
            if (!dst) {
                fprintf(stderr, "mmh3-gen-tiny %s: unknown option %s\n", what, a);
                usage(stderr);
                return 2;
            }
            bad = parse_i64(v, dst);
        }
        if (bad) {
            fprintf(stderr, "mmh3-gen-tiny: %s %s: a positive integer (list) expected\n", a, v);
            return 2;
        }
    }
    (void)ignore;
    if (!out) {
        fprintf(stderr, "mmh3-gen-tiny: --out is required\n");
        return 2;
    }
    c.te.out_hidden = c.te.hidden;
    /* what the formats need */
    if (c.dit.hidden % 256 || (c.dit.heads * c.dit.head_dim) % 256 || c.dit.ffn % 256) {
        fprintf(stderr, "mmh3-gen-tiny dit: hidden, heads*head_dim and ffn must be multiples of 256 (ConvRot group)\n");
        return 2;
    }
    int64_t te_dims[4] = {c.te.hidden, c.te.heads * c.te.head_dim, c.te.kv_heads * c.te.head_dim, c.te.ffn};
    for (int i = 0; i < 4; i++)
        if (te_dims[i] % 128) {
            fprintf(stderr, "mmh3-gen-tiny text-encoder: hidden, q/kv widths and ffn must be multiples of 128 "
                            "(nvfp4 tiles)\n");
            return 2;
        }
    mm_error err = {{0}};
    if (mm_ctx_create(&ctx, mm_cpu(), 0, &err) != 0) {
        fprintf(stderr, "mmh3-gen-tiny: %s\n", err.msg);
        return 1;
    }
    typedef struct file_job {
        const char *kind, *rel;
        uint64_t seed_xor;
    } file_job;
    file_job jobs[5];
    int nj = 0;
    if (strcmp(what, "all") == 0) {
        jobs[nj++] = (file_job){"dit", "diffusion_models/minimax_h3_fl2va_pruned_int8_convrot.safetensors", 1};
        jobs[nj++] = (file_job){"dit", "diffusion_models/minimax_h3_ref2va_pruned_int8_convrot.safetensors", 2};
        jobs[nj++] = (file_job){"text-encoder", "text_encoders/qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors", 3};
        jobs[nj++] = (file_job){"video-vae", "vae/minimax_h3_video_vae_fp16.safetensors", 4};
        jobs[nj++] = (file_job){"audio-vae", "vae/minimax_h3_audio_vae_fp32.safetensors", 5};
        c.dit.text_dim = c.te.hidden;
        /* the engine runs the audio VAE with the released strides (800 samples
         * per latent, 40 latents/s) and 8 heads, which the checkpoint cannot
         * tell: a trunk of 256 pools 8 heads of 32 to the 32 latent channels,
         * and a decoder of 256 halves through its 7 stages to 2 channels */
        if (!full && !rates_given)
            c.av = (avae_cfg){c.av.enc_dim, 256, 8, 256, {2, 4, 4, 5, 5}, {5, 5, 2, 2, 2, 2, 2}, 5, 7,
                              c.av.post_gain};
    } else {
        jobs[nj++] = (file_job){what, NULL, 0};
    }
    uint64_t base_seed = g_seed;
    int rc = 0;
    for (int i = 0; i < nj && rc == 0; i++) {
        plan p = {0};
        if (strcmp(jobs[i].kind, "dit") == 0)
            plan_dit(&p, &c.dit);
        else if (strcmp(jobs[i].kind, "text-encoder") == 0)
            plan_te(&p, &c.te);
        else if (strcmp(jobs[i].kind, "video-vae") == 0)
            plan_video_vae(&p, &c.vv);
        else if (strcmp(jobs[i].kind, "audio-vae") == 0)
            plan_audio_vae(&p, &c.av);
        else if (strcmp(jobs[i].kind, "lora") == 0)
            plan_lora(&p, &lc, &c.dit);
        else {
            fprintf(stderr, "mmh3-gen-tiny: unknown kind '%s'\n", jobs[i].kind);
            usage(stderr);
            return 2;
        }
        char path[4096];
        if (jobs[i].rel)
            snprintf(path, sizeof path, "%s/%s", out, jobs[i].rel);
        else
            snprintf(path, sizeof path, "%s", out);
        g_seed = base_seed * 1000003u + jobs[i].seed_xor;
        if (write_plan(&p, path, &err) != 0) {
            fprintf(stderr, "mmh3-gen-tiny: %s\n", err.msg);
            rc = 1;
        } else {
            printf("%s: %zu tensors\n", path, p.n);
        }
        for (size_t k = 0; k < p.n; k++)
            free(p.t[k].cache);
        free(p.t);
    }
    if (rc == 0 && strcmp(what, "all") == 0) {
        char release[4096];
        if (!find_release_config(config_from, release, sizeof release)) {
            fprintf(stderr, "mmh3-gen-tiny: no release config folder found%s%s (give --config-from the FL2VA folder of "
                            "MiniMaxAI/MiniMax-H3); %s/MiniMax-H3 not written\n",
                    config_from ? " at " : "", config_from ? config_from : "", out);
            rc = config_from ? 1 : 0;
        } else if (write_config_folder(out, release, &c.te, &err) != 0) {
            fprintf(stderr, "mmh3-gen-tiny: %s\n", err.msg);
            rc = 1;
        } else {
            printf("%s/MiniMax-H3/FL2VA: config files (from %s)\n", out, release);
        }
    }
    free(g_pending.bytes);
    mm_ctx_destroy(ctx);
    return rc;
}
