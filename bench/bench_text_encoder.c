/* The prompt conditioner at full size: encode time of a 300-token prompt and
 * of a 1344×768 keyframe (+ caption), on the device the context names.
 *
 *   bench_text_encoder --generate FILE --config config.json [--layers 50]
 *       writes a random-weight checkpoint in the exact layout of Comfy's
 *       qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors (nvfp4 AWQ linears with
 *       hi-first nibbles and swizzled e4m3 block scales, int8 embedding with
 *       row scales, bf16 vision tower), sized from the config;
 *   bench_text_encoder --checkpoint FILE --config config.json
 *       --image-proc preprocessor_config.json --video-proc video_preprocessor_config.json
 *       [--device cuda|cpu] [--reps 5] [--prompt-tokens 300] [--keyframe 1344x768] [--bf16-weights]
 *       loads it with the real loader and prints, per case,
 *         TE_BENCH <case> rows <L> median_ms <t> min_ms <t> tflops <rate>
 *       and the device memory: TE_MEM load_bytes <b> peak_bytes <b>; then the
 *       nvfp4 decode alone (the per-linear cost of the nvfp4-resident path),
 *       layer 0's seven linears into one bf16 scratch, timed between syncs:
 *         TE_DECODE layer 0 weights <n> bytes <b> median_ms <t> gbps <rate>
 *       (bytes = packed + block scales read + bf16 written).
 *
 * The tokenizer is a stand-in (one id per word, the config's vision ids):
 * only the encoder is timed, and the row counts equal the real ones for the
 * same number of tokens. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "formats/linear.h"
#include "io/safetensors.h"
#include "model/text/conditioner.h"
#include "model/text/qwen3vl_config.h"

/* ------------------------------------------------------------- generate */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static inline uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static inline float next_unit(void) { return (float)((next_u64() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

typedef struct gen_ctx {
    const mm_qwen3vl_config *cfg;
} gen_ctx;

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The K (input features) of the nvfp4 linear a tensor name belongs to. */
static int64_t linear_in(const mm_qwen3vl_config *c, const char *name)
{
    const int64_t H = c->text.hidden, QW = (int64_t)c->text.n_heads * c->text.head_dim;
    if (strstr(name, "o_proj"))
        return QW;
    if (strstr(name, "down_proj"))
        return c->text.intermediate;
    return H;
}

static int fill(const mm_st_entry *e, const mm_qwen3vl_config *c, mm_st_writer *w, mm_error *err)
{
    static uint8_t buf[1 << 20];
    const size_t elem = mm_dtype_nbytes(e->dtype, 1);
    uint64_t total = e->end - e->begin, done = 0;
    const char *n = e->name;
    /* Random weights of sane magnitude: nvfp4 codes uniform (rms 2.93) with
     * block scale 2 and a per-tensor scale giving rms 1/sqrt(K). */
    const int64_t K = linear_in(c, n);
    const float scale2 = 1.0f / (2.93f * sqrtf((float)K) * 2.0f);
    if (ends_with(n, "comfy_quant")) {
        const char *j = strstr(n, "embed_tokens") ? "{\"format\": \"int8_tensorwise\"}"
                                                  : "{\"format\": \"nvfp4\", \"full_precision_matrix_mult\": true}";
        if (strlen(j) != total)
            return mm_fail(err, "%s: marker of %zu bytes declared %llu", n, strlen(j), (unsigned long long)total);
        return mm_st_writer_append(w, j, total, err);
    }
    if (ends_with(n, "weight_scale_2"))
        return mm_st_writer_append(w, &scale2, 4, err);
    while (done < total) {
        size_t chunk = total - done < sizeof buf ? (size_t)(total - done) : sizeof buf;
        chunk -= chunk % elem;
        if (e->dtype == MM_U8) { /* packed e2m1: any byte is two valid codes */
            for (size_t i = 0; i < chunk; i += 8) {
                uint64_t r = next_u64();
                memcpy(buf + i, &r, chunk - i < 8 ? chunk - i : 8);
            }
        } else if (e->dtype == MM_F8_E4M3) { /* block scales around 2.0 */
            for (size_t i = 0; i < chunk; i++)
                buf[i] = (uint8_t)(0x40 | (next_u64() & 3));
        } else if (e->dtype == MM_I8) {
            for (size_t i = 0; i < chunk; i++)
                buf[i] = (uint8_t)(next_u64() & 0xff);
        } else if (e->dtype == MM_F32) { /* embedding row scales */
            for (size_t i = 0; i < chunk; i += 4) {
                float v = 0.01f;
                memcpy(buf + i, &v, 4);
            }
        } else if (e->dtype == MM_BF16) {
            float base = 0, amp = 0.02f;
            if (ends_with(n, "norm.weight") || ends_with(n, "norm1.weight") || ends_with(n, "norm2.weight") ||
                ends_with(n, "layernorm.weight") || ends_with(n, "pre_quant_scale"))
                base = 1.0f, amp = 0.1f;
            else if (ends_with(n, ".bias"))
                amp = 0.0f;
            for (size_t i = 0; i < chunk; i += 2) {
                uint16_t v = mm_f32_to_bf16(base + amp * next_unit());
                memcpy(buf + i, &v, 2);
            }
        } else {
            return mm_fail(err, "%s: unexpected dtype %s", n, mm_dtype_name(e->dtype));
        }
        if (mm_st_writer_append(w, buf, chunk, err) < 0)
            return -1;
        done += chunk;
    }
    return 0;
}

static int declare_all(mm_st_writer *w, const mm_qwen3vl_config *c, int layers, mm_error *err)
{
    const mm_qwen3vl_text_config *t = &c->text;
    const mm_qwen3vl_vision_config *v = &c->vision;
    const int64_t H = t->hidden, QW = (int64_t)t->n_heads * t->head_dim, KW = (int64_t)t->n_kv_heads * t->head_dim,
                  I = t->intermediate;
    char n[200];
#define DECL(dt, ...)                                                                                            \
    do {                                                                                                         \
        const int64_t sh_[] = {__VA_ARGS__};                                                                     \
        if (mm_st_writer_declare(w, n, dt, (int)(sizeof sh_ / sizeof sh_[0]), sh_, err) < 0)                     \
            return -1;                                                                                           \
    } while (0)
#define DECL0(dt)                                                                                                \
    do {                                                                                                         \
        if (mm_st_writer_declare(w, n, dt, 0, NULL, err) < 0)                                                    \
            return -1;                                                                                           \
    } while (0)
    snprintf(n, sizeof n, "model.embed_tokens.weight");
    DECL(MM_I8, t->vocab, H);
    snprintf(n, sizeof n, "model.embed_tokens.weight_scale");
    DECL(MM_F32, t->vocab, 1);
    snprintf(n, sizeof n, "model.embed_tokens.comfy_quant");
    DECL(MM_U8, 29);
    static const struct {
        const char *name;
        int out, in; /* 0 H, 1 QW, 2 KW, 3 I */
        int awq;
    } lin[] = {{"self_attn.q_proj", 1, 0, 0}, {"self_attn.k_proj", 2, 0, 0}, {"self_attn.v_proj", 2, 0, 0},
               {"self_attn.o_proj", 0, 1, 1}, {"mlp.gate_proj", 3, 0, 0},    {"mlp.up_proj", 3, 0, 0},
               {"mlp.down_proj", 0, 3, 1}};
    const int64_t dims[4] = {H, QW, KW, I};
    for (int l = 0; l < layers; l++) {
        const char *norms[] = {"input_layernorm", "post_attention_layernorm"};
        for (int i = 0; i < 2; i++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, norms[i]);
            DECL(MM_BF16, H);
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_norm.weight", l);
        DECL(MM_BF16, t->head_dim);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_norm.weight", l);
        DECL(MM_BF16, t->head_dim);
        for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
            int64_t N = dims[lin[i].out], K = dims[lin[i].in];
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, lin[i].name);
            DECL(MM_U8, N, K / 2);
            snprintf(n, sizeof n, "model.layers.%d.%s.weight_scale", l, lin[i].name);
            DECL(MM_F8_E4M3, N, K / 16);
            snprintf(n, sizeof n, "model.layers.%d.%s.weight_scale_2", l, lin[i].name);
            DECL0(MM_F32);
            snprintf(n, sizeof n, "model.layers.%d.%s.comfy_quant", l, lin[i].name);
            DECL(MM_U8, 55);
            if (lin[i].awq) {
                snprintf(n, sizeof n, "model.layers.%d.%s.pre_quant_scale", l, lin[i].name);
                DECL(MM_BF16, K);
            }
        }
    }
    const int64_t D = v->hidden, VI = v->intermediate, W = D * v->merge * v->merge;
    snprintf(n, sizeof n, "visual.patch_embed.proj.weight");
    DECL(MM_BF16, D, v->in_channels, v->temporal_patch, v->patch, v->patch);
    snprintf(n, sizeof n, "visual.patch_embed.proj.bias");
    DECL(MM_BF16, D);
    snprintf(n, sizeof n, "visual.pos_embed.weight");
    DECL(MM_BF16, v->num_pos_embed, D);
    for (int b = 0; b < v->depth; b++) {
        const struct {
            const char *s;
            int64_t a, b;
        } p[] = {{"norm1.weight", D, 0},         {"norm1.bias", D, 0},          {"norm2.weight", D, 0},
                 {"norm2.bias", D, 0},           {"attn.qkv.weight", 3 * D, D}, {"attn.qkv.bias", 3 * D, 0},
                 {"attn.proj.weight", D, D},     {"attn.proj.bias", D, 0},      {"mlp.linear_fc1.weight", VI, D},
                 {"mlp.linear_fc1.bias", VI, 0}, {"mlp.linear_fc2.weight", D, VI}, {"mlp.linear_fc2.bias", D, 0}};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
            snprintf(n, sizeof n, "visual.blocks.%d.%s", b, p[i].s);
            if (p[i].b)
                DECL(MM_BF16, p[i].a, p[i].b);
            else
                DECL(MM_BF16, p[i].a);
        }
    }
    for (int j = -1; j < v->n_deepstack; j++) {
        char pre[96];
        if (j < 0)
            snprintf(pre, sizeof pre, "visual.merger");
        else
            snprintf(pre, sizeof pre, "visual.deepstack_merger_list.%d", j);
        int64_t norm = j < 0 ? D : W;
        snprintf(n, sizeof n, "%s.norm.weight", pre);
        DECL(MM_BF16, norm);
        snprintf(n, sizeof n, "%s.norm.bias", pre);
        DECL(MM_BF16, norm);
        snprintf(n, sizeof n, "%s.linear_fc1.weight", pre);
        DECL(MM_BF16, W, W);
        snprintf(n, sizeof n, "%s.linear_fc1.bias", pre);
        DECL(MM_BF16, W);
        snprintf(n, sizeof n, "%s.linear_fc2.weight", pre);
        DECL(MM_BF16, v->out_hidden, W);
        snprintf(n, sizeof n, "%s.linear_fc2.bias", pre);
        DECL(MM_BF16, v->out_hidden);
    }
#undef DECL
#undef DECL0
    return 0;
}

static int generate(const char *path, const mm_qwen3vl_config *cfg, int layers, mm_error *err)
{
    mm_st_writer *w;
    if (mm_st_writer_open(&w, path, err) < 0)
        return -1;
    if (declare_all(w, cfg, layers, err) < 0)
        goto fail;
    const mm_st_entry *e;
    for (;;) {
        if (mm_st_writer_next(w, &e, err) < 0)
            goto fail;
        if (!e)
            break;
        if (fill(e, cfg, w, err) < 0)
            goto fail;
    }
    return mm_st_writer_close(w, err);
fail:
    mm_st_writer_abort(w);
    return -1;
}

/* ---------------------------------------------------------------- bench */

typedef struct stand_in {
    const mm_qwen3vl_config *cfg;
} stand_in;

/* One id per whitespace-separated word; the vision markers by name. */
static int stand_in_encode(void *user, const char *text, size_t len, int32_t **ids, size_t *n, mm_error *err)
{
    const mm_qwen3vl_config *c = ((stand_in *)user)->cfg;
    const struct {
        const char *s;
        int32_t id;
    } sp[] = {{"<|vision_start|>", c->vision_start_token_id}, {"<|vision_end|>", c->vision_end_token_id},
              {"<|image_pad|>", c->image_token_id},           {"<|video_pad|>", c->video_token_id},
              {"<|endoftext|>", 0}};
    *ids = malloc(sizeof(int32_t) * (len + 1));
    if (!*ids)
        return mm_fail(err, "out of memory");
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
        if (strlen(sp[i].s) == len && !memcmp(sp[i].s, text, len)) {
            (*ids)[0] = sp[i].id;
            *n = 1;
            return 0;
        }
    size_t k = 0;
    uint32_t h = 2166136261u;
    int in_word = 0;
    for (size_t i = 0; i <= len; i++) {
        int sep = i == len || text[i] == ' ';
        if (!sep) {
            h = (h ^ (uint8_t)text[i]) * 16777619u;
            in_word = 1;
        } else if (in_word) {
            (*ids)[k++] = (int32_t)(h % (uint32_t)c->text.vocab);
            h = 2166136261u;
            in_word = 0;
        }
    }
    *n = k;
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Linear FLOPs of the text stack plus the causal attention (spec 8.2), and the vision tower (8.3). */
static double text_flops(const mm_qwen3vl_config *c, int layers, double L)
{
    const double H = c->text.hidden, QW = (double)c->text.n_heads * c->text.head_dim,
                 KW = (double)c->text.n_kv_heads * c->text.head_dim, I = c->text.intermediate;
    double per_row = 2 * (H * QW + 2 * H * KW + QW * H + 3 * H * I);
    double attn = 2.0 * QW * L * L; /* QK^T + PV over the causal half */
    return layers * (per_row * L + attn);
}

static double vision_flops(const mm_qwen3vl_config *c, double N)
{
    const double D = c->vision.hidden, I = c->vision.intermediate, P = c->vision.patch,
                 W = D * c->vision.merge * c->vision.merge, O = c->vision.out_hidden;
    double patch = 2 * D * 3 * c->vision.temporal_patch * P * P;
    double block = 2 * (3 * D * D + D * D + 2 * D * I);
    double mergers = (1 + c->vision.n_deepstack) * 2 * (W * W + W * O) / (c->vision.merge * c->vision.merge);
    return N * (patch + c->vision.depth * block + mergers) + c->vision.depth * 4.0 * D * N * N;
}

/* The nvfp4 decode of layer 0, alone: the linears loaded as the encoder
 * loads them, decoded back to back into one scratch sized for the largest. */
static int bench_decode(const char *ckpt, mm_ctx *ctx, int reps, mm_error *err)
{
    static const char *names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                  "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    enum { NL = sizeof names / sizeof names[0] };
    mm_safetensors *st = NULL;
    mm_linear lin[NL];
    int loaded = 0, rc = -1;
    bool on_cpu = mm_ctx_device(ctx).kind == MM_DEVICE_CPU;
    mm_tensor scratch = {0};
    double *t = calloc((size_t)reps, sizeof *t);
    int64_t largest = 0, weights = 0;
    double bytes = 0;
    if (!t || mm_st_open(&st, ckpt, err) < 0)
        goto out;
    for (; loaded < NL; loaded++) {
        char prefix[96];
        mm_linear host;
        snprintf(prefix, sizeof prefix, "model.layers.0.%s", names[loaded]);
        if (mm_linear_load(&host, st, prefix, err) < 0)
            goto out;
        if (host.format != MM_WEIGHT_NVFP4) {
            mm_fail(err, "%s is %s, not nvfp4", prefix, mm_weight_format_name(host.format));
            goto out;
        }
        if (on_cpu)
            lin[loaded] = host;
        else if (mm_linear_to_device(&lin[loaded], &host, ctx, err) < 0)
            goto out;
        int64_t n = host.out_features * host.in_features;
        largest = n > largest ? n : largest;
        weights += n;
        bytes += (double)n / 2 + (double)n / 16 + 2.0 * (double)n;
    }
    if (mm_tensor_alloc(&scratch, mm_ctx_device(ctx), MM_BF16, 1, MM_SHAPE(largest), err) < 0)
        goto out;
    for (int r = -1; r < reps; r++) { /* one warm-up */
        double s = now();
        for (int i = 0; i < NL; i++) {
            mm_tensor w = mm_tensor_wrap(scratch.data, scratch.device, MM_BF16, 2,
                                         MM_SHAPE(lin[i].out_features, lin[i].in_features));
            mm_nvfp4_dequantize(ctx, &w, &lin[i].weight, &lin[i].weight_scale, lin[i].weight_scale_2);
        }
        if (mm_ctx_sync(ctx, err) < 0)
            goto out;
        if (r >= 0)
            t[r] = now() - s;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    printf("TE_DECODE layer 0 weights %lld bytes %.0f median_ms %8.3f gbps %7.1f\n", (long long)weights, bytes,
           1e3 * t[reps / 2], bytes / t[reps / 2] / 1e9);
    fflush(stdout);
    rc = 0;
out:
    if (!on_cpu)
        for (int i = 0; i < loaded; i++)
            mm_linear_free(&lin[i]);
    mm_tensor_free(&scratch);
    if (st)
        mm_st_close(st);
    free(t);
    return rc;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_text_encoder --generate FILE --config config.json [--layers N]\n"
                    "       bench_text_encoder --checkpoint FILE --config config.json --image-proc JSON --video-proc "
                    "JSON [--device cuda|cpu] [--reps N] [--prompt-tokens N] [--keyframe WxH] [--bf16-weights]\n");
}

int main(int argc, char **argv)
{
    const char *gen = NULL, *ckpt = NULL, *config = NULL, *iproc = NULL, *vproc = NULL, *device = "cuda";
    int layers = 50, reps = 5, tokens = 300, kw = 1344, kh = 768;
    bool bf16_weights = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--bf16-weights")) {
            bf16_weights = true;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--generate"))
            gen = v;
        else if (!strcmp(a, "--checkpoint"))
            ckpt = v;
        else if (!strcmp(a, "--config"))
            config = v;
        else if (!strcmp(a, "--image-proc"))
            iproc = v;
        else if (!strcmp(a, "--video-proc"))
            vproc = v;
        else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--layers"))
            layers = atoi(v);
        else if (!strcmp(a, "--reps") && (reps = atoi(v)) >= 1) /* the medians read t[reps / 2] */
            ;
        else if (!strcmp(a, "--prompt-tokens"))
            tokens = atoi(v);
        else if (!strcmp(a, "--keyframe") && sscanf(v, "%dx%d", &kw, &kh) == 2)
            ;
        else {
            usage();
            return 2;
        }
        i++;
    }
    mm_error err = {{0}};
    mm_qwen3vl_config cfg;
    if (!config || mm_qwen3vl_config_load(&cfg, config, &err) < 0) {
        fprintf(stderr, "bench_text_encoder: %s\n", config ? err.msg : "--config is required");
        return 1;
    }
    if (gen) {
        double t0 = now();
        if (generate(gen, &cfg, layers, &err) < 0) {
            fprintf(stderr, "bench_text_encoder: %s\n", err.msg);
            return 1;
        }
        printf("TE_GEN %s layers %d seconds %.1f\n", gen, layers, now() - t0);
        return 0;
    }
    if (!ckpt || !iproc || !vproc) {
        usage();
        return 2;
    }
    mm_device dev;
    mm_ctx *ctx;
    mm_conditioner *c;
    stand_in si = {&cfg};
    mm_conditioner_options o = {
        .checkpoint = ckpt, .config = cfg, .tokenizer = {stand_in_encode, &si}, .bf16_weights = bf16_weights};
    if (mm_device_parse(device, &dev, &err) < 0 || mm_qwen3vl_processor_config_load(&o.image_proc, iproc, &err) < 0 ||
        mm_qwen3vl_processor_config_load(&o.video_proc, vproc, &err) < 0 || mm_ctx_create(&ctx, dev, 0, &err) < 0) {
        fprintf(stderr, "bench_text_encoder: %s\n", err.msg);
        return 1;
    }
    double t0 = now();
    if (mm_conditioner_load(&c, &o, ctx, &err) < 0) {
        fprintf(stderr, "bench_text_encoder: %s\n", err.msg);
        return 1;
    }
    mm_memory_stats ms = {0};
    mm_device_memory_stats(dev, &ms);
    printf("TE_LOAD seconds %.1f device_bytes %zu layers %d weights %s\n", now() - t0, ms.in_use,
           mm_conditioner_tap(c), bf16_weights ? "bf16" : "nvfp4");
    fflush(stdout);
    mm_device_reset_peak(dev);

    /* t2va: a prompt of `tokens` words; fl2va: one keyframe + a 40-word caption. */
    char *prompt = malloc((size_t)tokens * 8 + 1), *caption = malloc(40 * 8 + 1);
    prompt[0] = caption[0] = '\0';
    for (int i = 0; i < tokens; i++)
        sprintf(prompt + strlen(prompt), "%sw%d", i ? " " : "", i % 997);
    for (int i = 0; i < 40; i++)
        sprintf(caption + strlen(caption), "%sc%d", i ? " " : "", i);
    uint8_t *rgb = malloc((size_t)kw * kh * 3);
    for (size_t i = 0; i < (size_t)kw * kh * 3; i++)
        rgb[i] = (uint8_t)(next_u64() & 0xff);
    mm_cond_reference key = {.kind = MM_PRES_PICTURE, .rgb = rgb, .width = kw, .height = kh};
    const int64_t patches = (int64_t)(kw / cfg.vision.patch) * (kh / cfg.vision.patch);
    struct {
        const char *name;
        const char *text;
        const mm_cond_reference *refs;
        int n;
    } cases[] = {{"t2va_prompt", prompt, NULL, 0}, {"fl2va_keyframe", caption, &key, 1}};
    int rc = 0;
    for (size_t k = 0; k < 2 && rc == 0; k++) {
        double *t = calloc((size_t)reps + 1, sizeof *t);
        int64_t L = 0;
        for (int r = -1; r < reps; r++) { /* one warm-up */
            mm_cond_result res;
            double s = now();
            if (mm_conditioner_encode(c, ctx, cases[k].text, strlen(cases[k].text), cases[k].refs, cases[k].n, &res,
                                      NULL, &err) < 0) {
                fprintf(stderr, "bench_text_encoder: %s: %s\n", cases[k].name, err.msg);
                rc = 1;
                break;
            }
            if (r >= 0)
                t[r] = now() - s;
            L = res.len;
            mm_cond_result_free(&res);
        }
        if (rc == 0) {
            qsort(t, (size_t)reps, sizeof *t, cmp_double);
            double med = t[reps / 2];
            double fl = text_flops(&cfg, mm_conditioner_tap(c), (double)L) +
                        (cases[k].n ? vision_flops(&cfg, (double)patches) : 0);
            printf("TE_BENCH %-15s rows %6lld median_ms %9.2f min_ms %9.2f tflops %7.1f%s\n", cases[k].name,
                   (long long)L, 1e3 * med, 1e3 * t[0], fl / med / 1e12, bf16_weights ? " bf16_weights" : "");
            fflush(stdout);
        }
        free(t);
    }
    mm_device_memory_stats(dev, &ms);
    printf("TE_MEM in_use_bytes %zu peak_bytes %zu\n", ms.in_use, ms.peak);
    if (rc == 0 && bench_decode(ckpt, ctx, reps, &err) < 0) {
        fprintf(stderr, "bench_text_encoder: nvfp4 decode: %s\n", err.msg);
        rc = 1;
    }
    free(prompt), free(caption), free(rgb);
    mm_conditioner_free(c);
    mm_ctx_destroy(ctx);
    return rc;
}
