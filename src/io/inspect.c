#include "io/inspect.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "formats/linear.h"

typedef struct insp {
    const mm_safetensors *st;
    mm_error *err;
    const char *what;
} insp;

static const mm_st_entry *find(const insp *in, const char *fmt, ...) MM_PRINTF(2, 3);
static const mm_st_entry *find(const insp *in, const char *fmt, ...)
{
    char k[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof k, fmt, ap);
    va_end(ap);
    return mm_st_find(in->st, k);
}

/* Expects tensor `name` with dtype dt and shape (ndim < 0: any shape). */
static int want(const insp *in, const char *name, mm_dtype dt, int ndim, const int64_t *shape)
{
    const mm_st_entry *e = mm_st_find(in->st, name);
    if (!e)
        return mm_fail(in->err, "%s: %s: tensor '%s' missing", mm_st_path(in->st), in->what, name);
    if (e->dtype != dt)
        return mm_fail(in->err, "%s: %s: '%s' is %s, %s expected", mm_st_path(in->st), in->what, name,
                       mm_dtype_name(e->dtype), mm_dtype_name(dt));
    bool ok = ndim < 0 || e->ndim == ndim;
    for (int i = 0; ok && ndim >= 0 && i < ndim; i++)
        ok = e->shape[i] == shape[i];
    if (!ok) {
        char a[96], b[96];
        return mm_fail(in->err, "%s: %s: '%s' has shape %s, %s expected", mm_st_path(in->st), in->what, name,
                       mm_shape_str(e->ndim, e->shape, a, sizeof a), mm_shape_str(ndim, shape, b, sizeof b));
    }
    return 0;
}

#define WANT(dt, name, ...) want(in, name, dt, MM_NDIM(__VA_ARGS__), MM_SHAPE(__VA_ARGS__))
#define WANTF(dt, nd, shape, ...)                                                                                    \
    do {                                                                                                             \
        char k_[256];                                                                                                \
        snprintf(k_, sizeof k_, __VA_ARGS__);                                                                        \
        if (want(in, k_, dt, nd, shape) != 0)                                                                        \
            return -1;                                                                                               \
    } while (0)

static int count_prefix_index(const insp *in, const char *fmt)
{
    int n = 0;
    while (find(in, fmt, n))
        n++;
    return n;
}

/* The comfy_quant marker under prefix must name `format` (and convrot). */
static int marker(const insp *in, const char *prefix, const char *format, bool convrot)
{
    char k[256];
    snprintf(k, sizeof k, "%s.comfy_quant", prefix);
    mm_tensor t;
    if (mm_st_get(in->st, k, &t, in->err) != 0)
        return mm_error_prefix(in->err, "%s", in->what);
    char f[64];
    bool cr;
    int g;
    if (mm_comfy_quant_parse(&t, f, sizeof f, &cr, &g, in->err) != 0)
        return mm_error_prefix(in->err, "%s: %s: %s", mm_st_path(in->st), in->what, k);
    if (strcmp(f, format) != 0 || cr != convrot)
        return mm_fail(in->err, "%s: %s: %s says format \"%s\"%s; \"%s\"%s expected", mm_st_path(in->st), in->what, k,
                       f, cr ? " with convrot" : "", format, convrot ? " with convrot" : "");
    return 0;
}

/* ------------------------------------------------------------------- DiT */

static int convrot(const insp *in, const char *prefix, int64_t n, int64_t k)
{
    char key[256];
    snprintf(key, sizeof key, "%s.weight", prefix);
    const mm_st_entry *e = mm_st_find(in->st, key);
    if (e && e->dtype == MM_BF16)
        return mm_fail(in->err, "%s: %s: '%s' is BF16: this is the bf16 export, mmh3 needs the int8 ConvRot file",
                       mm_st_path(in->st), in->what, key);
    if (e && (e->dtype == MM_F8_E4M3 || e->dtype == MM_F8_E5M2))
        return mm_fail(in->err, "%s: %s: '%s' is %s: this is an fp8 export, mmh3 needs the int8 ConvRot file",
                       mm_st_path(in->st), in->what, key, mm_dtype_name(e->dtype));
    if (want(in, key, MM_I8, 2, MM_SHAPE(n, k)) != 0)
        return -1;
    snprintf(key, sizeof key, "%s.weight_scale", prefix);
    if (want(in, key, MM_F32, 2, MM_SHAPE(n, 1)) != 0)
        return -1;
    if (k % 256 != 0)
        return mm_fail(in->err, "%s: %s: %s has %lld input features, not a multiple of the ConvRot group 256",
                       mm_st_path(in->st), in->what, prefix, (long long)k);
    return marker(in, prefix, "int8_tensorwise", true);
}

static int inspect_dit(insp *in, mm_inspect_report *r)
{
    const mm_safetensors *st = in->st;
    if (find(in, "transformer_blocks.0.attn.to_q.weight") || find(in, "proj_in.weight"))
        return mm_fail(in->err, "%s: this is the diffusers layout of the DiT; mmh3 needs the Comfy-Org pruned int8 "
                                "file (minimax_h3_*_pruned_int8_convrot.safetensors)",
                       mm_st_path(st));
    if (!find(in, "adaln_t_table")) {
        if (find(in, "time_embedder.proj_in.weight") || find(in, "time_embedder.proj_out.weight"))
            return mm_fail(in->err, "%s: this is the non-pruned DiT (time MLP + full-width AdaLN, no adaln_t_table); "
                                    "mmh3 needs minimax_h3_*_pruned_int8_convrot.safetensors",
                           mm_st_path(st));
        return mm_fail(in->err, "%s: %s: 'adaln_t_table' missing (not a MiniMax-H3 pruned DiT?)", mm_st_path(st),
                       in->what);
    }
    const mm_st_entry *vp = find(in, "video_patch_proj.weight"), *tab = find(in, "adaln_t_table");
    const mm_st_entry *cp = find(in, "condition_proj.weight"), *op = find(in, "blocks.0.attn.out_proj.weight");
    const mm_st_entry *qn = find(in, "blocks.0.attn.q_norm.weight"), *f2 = find(in, "blocks.0.mlp.fc2.weight");
    if (!vp || vp->ndim != 2 || !cp || cp->ndim != 2 || !op || op->ndim != 2 || !qn || qn->ndim != 1 || !f2 ||
        f2->ndim != 2 || tab->ndim != 2)
        return mm_fail(in->err, "%s: %s: the core tensors (video_patch_proj, condition_proj, blocks.0.attn.out_proj, "
                                "q_norm, mlp.fc2, adaln_t_table) are missing or not matrices",
                       mm_st_path(st), in->what);
    int64_t h = vp->shape[0], t = cp->shape[1], a = op->shape[1], d = qn->shape[0], f = f2->shape[1];
    int64_t tn = tab->shape[0], td = tab->shape[1];
    if (d <= 0 || a % d != 0)
        return mm_fail(in->err, "%s: %s: attention width %lld is not a multiple of the head dim %lld", mm_st_path(st),
                       in->what, (long long)a, (long long)d);
    if (WANT(MM_F32, "video_patch_proj.weight", h, 96) || WANT(MM_F32, "video_patch_proj.bias", h) ||
        WANT(MM_F32, "audio_patch_proj.weight", h, 32) || WANT(MM_F32, "audio_patch_proj.bias", h) ||
        WANT(MM_BF16, "condition_proj.weight", h, t) || WANT(MM_BF16, "condition_proj.bias", h) ||
        WANT(MM_F32, "adaln_t_table", tn, td) || WANT(MM_F32, "rope.inv_freq", 16) ||
        WANT(MM_BF16, "token_refiner.final_norm.weight", h) || WANT(MM_BF16, "final_layer.norm.weight", h) ||
        WANT(MM_F16, "final_layer.adaln_proj.linear.weight", 2 * h, td) ||
        WANT(MM_F16, "final_layer.adaln_proj.linear.bias", 2 * h) || WANT(MM_F32, "final_layer.video_out.weight", 96, h) ||
        WANT(MM_F32, "final_layer.video_out.bias", 96) || WANT(MM_F32, "final_layer.audio_out.weight", 32, h) ||
        WANT(MM_F32, "final_layer.audio_out.bias", 32))
        return -1;
    int layers = count_prefix_index(in, "blocks.%d.norm1.weight");
    int refiner = count_prefix_index(in, "token_refiner.blocks.%d.norm1.weight");
    char pre[128];
    for (int n = 0; n < refiner; n++) {
        const char *b = "token_refiner.blocks";
        WANTF(MM_BF16, 1, MM_SHAPE(h), "%s.%d.norm1.weight", b, n);
        WANTF(MM_BF16, 1, MM_SHAPE(h), "%s.%d.norm2.weight", b, n);
        WANTF(MM_BF16, 1, MM_SHAPE(d), "%s.%d.attn.q_norm.weight", b, n);
        WANTF(MM_BF16, 1, MM_SHAPE(d), "%s.%d.attn.k_norm.weight", b, n);
        WANTF(MM_BF16, 2, MM_SHAPE(3 * a, h), "%s.%d.attn.qkv_proj.weight", b, n);
        WANTF(MM_BF16, 2, MM_SHAPE(h, a), "%s.%d.attn.out_proj.weight", b, n);
        WANTF(MM_BF16, 2, MM_SHAPE(2 * f, h), "%s.%d.mlp.fc1.weight", b, n);
        WANTF(MM_BF16, 2, MM_SHAPE(h, f), "%s.%d.mlp.fc2.weight", b, n);
    }
    for (int n = 0; n < layers; n++) {
        WANTF(MM_BF16, 1, MM_SHAPE(h), "blocks.%d.norm1.weight", n);
        WANTF(MM_BF16, 1, MM_SHAPE(h), "blocks.%d.norm2.weight", n);
        WANTF(MM_BF16, 1, MM_SHAPE(d), "blocks.%d.attn.q_norm.weight", n);
        WANTF(MM_BF16, 1, MM_SHAPE(d), "blocks.%d.attn.k_norm.weight", n);
        snprintf(pre, sizeof pre, "blocks.%d.attn.qkv_proj", n);
        if (convrot(in, pre, 3 * a, h) != 0)
            return -1;
        snprintf(pre, sizeof pre, "blocks.%d.attn.out_proj", n);
        if (convrot(in, pre, h, a) != 0)
            return -1;
        snprintf(pre, sizeof pre, "blocks.%d.mlp.fc1", n);
        if (convrot(in, pre, 2 * f, h) != 0)
            return -1;
        snprintf(pre, sizeof pre, "blocks.%d.mlp.fc2", n);
        if (convrot(in, pre, h, f) != 0)
            return -1;
        WANTF(MM_F16, 2, MM_SHAPE(18 * h, td), "blocks.%d.adaln_proj.linear.weight", n);
        WANTF(MM_F16, 1, MM_SHAPE(18 * h), "blocks.%d.adaln_proj.linear.bias", n);
    }
    if (layers == 0)
        return mm_fail(in->err, "%s: %s: no blocks.N", mm_st_path(st), in->what);
    size_t expected = 16 + 8 * (size_t)refiner + 20 * (size_t)layers + 1; /* +1: refiner final norm counted above */
    snprintf(r->summary, sizeof r->summary,
             "%d blocks + %d refiner, hidden %lld, %lldx%lld heads, ffn %lld, text %lld, AdaLN table [%lld, %lld], "
             "int8 ConvRot x%d%s",
             layers, refiner, (long long)h, (long long)(a / d), (long long)d, (long long)f, (long long)t,
             (long long)tn, (long long)td, 4 * layers,
             mm_st_count(st) > expected ? " (+ extra tensors)" : "");
    int64_t dims[8] = {h, a / d, d, f, layers, refiner, t, td};
    memcpy(r->dims, dims, sizeof dims);
    return 0;
}

/* ----------------------------------------------------------- text encoder */

static int nvfp4(const insp *in, const char *prefix, int64_t n, int64_t k, bool awq)
{
    char key[256];
    snprintf(key, sizeof key, "%s.weight", prefix);
    const mm_st_entry *e = mm_st_find(in->st, key);
    if (e && (e->dtype == MM_BF16 || e->dtype == MM_F16))
        return mm_fail(in->err, "%s: %s: '%s' is %s: this is a %s export, mmh3 needs the nvfp4 AWQ file",
                       mm_st_path(in->st), in->what, key, mm_dtype_name(e->dtype), mm_dtype_name(e->dtype));
    if (e && e->dtype == MM_F8_E4M3)
        return mm_fail(in->err, "%s: %s: '%s' is F8_E4M3: this is an fp8 export, mmh3 needs the nvfp4 AWQ file",
                       mm_st_path(in->st), in->what, key);
    if (e && e->dtype == MM_I8)
        return mm_fail(in->err, "%s: %s: '%s' is I8: an int8 text encoder export, mmh3 needs the nvfp4 AWQ file",
                       mm_st_path(in->st), in->what, key);
    if (want(in, key, MM_U8, 2, MM_SHAPE(n, k / 2)) != 0)
        return -1;
    snprintf(key, sizeof key, "%s.weight_scale", prefix);
    if (want(in, key, MM_F8_E4M3, 2, MM_SHAPE(n, k / 16)) != 0)
        return -1;
    snprintf(key, sizeof key, "%s.weight_scale_2", prefix);
    if (want(in, key, MM_F32, 0, NULL) != 0)
        return -1;
    if (n % 128 || (k / 16) % 4)
        return mm_fail(in->err, "%s: %s: %s [%lld, %lld] is not tile-aligned for nvfp4", mm_st_path(in->st), in->what,
                       prefix, (long long)n, (long long)k);
    if (awq) {
        snprintf(key, sizeof key, "%s.pre_quant_scale", prefix);
        if (want(in, key, MM_BF16, 1, MM_SHAPE(k)) != 0)
            return -1;
    }
    return marker(in, prefix, "nvfp4", false);
}

static int inspect_te(insp *in, mm_inspect_report *r)
{
    const mm_safetensors *st = in->st;
    if (find(in, "model.language_model.layers.0.self_attn.q_proj.weight"))
        return mm_fail(in->err, "%s: this is the transformers layout (model.language_model.*); mmh3 needs the "
                                "Comfy-Org single file qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors",
                       mm_st_path(st));
    const mm_st_entry *emb = find(in, "model.embed_tokens.weight"), *qn = find(in, "model.layers.0.self_attn.q_norm.weight");
    const mm_st_entry *q = find(in, "model.layers.0.self_attn.q_proj.weight"), *k = find(in, "model.layers.0.self_attn.k_proj.weight");
    const mm_st_entry *g = find(in, "model.layers.0.mlp.gate_proj.weight");
    if (!emb || emb->ndim != 2 || !qn || !q || q->ndim != 2 || !k || k->ndim != 2 || !g || g->ndim != 2)
        return mm_fail(in->err, "%s: %s: model.embed_tokens / model.layers.0 tensors missing (not a Qwen3-VL text "
                                "encoder?)",
                       mm_st_path(st), in->what);
    int64_t vocab = emb->shape[0], h = emb->shape[1], d = qn->shape[0], qw = q->shape[0], kvw = k->shape[0];
    int64_t f = g->shape[0];
    if (emb->dtype != MM_I8)
        return mm_fail(in->err, "%s: %s: model.embed_tokens.weight is %s; the released file stores it int8 (a "
                                "different export)",
                       mm_st_path(st), in->what, mm_dtype_name(emb->dtype));
    if (WANT(MM_F32, "model.embed_tokens.weight_scale", vocab, 1) ||
        marker(in, "model.embed_tokens", "int8_tensorwise", false))
        return -1;
    int layers = count_prefix_index(in, "model.layers.%d.input_layernorm.weight");
    char pre[160];
    for (int n = 0; n < layers; n++) {
        WANTF(MM_BF16, 1, MM_SHAPE(h), "model.layers.%d.input_layernorm.weight", n);
        WANTF(MM_BF16, 1, MM_SHAPE(h), "model.layers.%d.post_attention_layernorm.weight", n);
        WANTF(MM_BF16, 1, MM_SHAPE(d), "model.layers.%d.self_attn.q_norm.weight", n);
        WANTF(MM_BF16, 1, MM_SHAPE(d), "model.layers.%d.self_attn.k_norm.weight", n);
        const struct {
            const char *s;
            int64_t o, i;
            bool awq;
        } l[7] = {{"self_attn.q_proj", qw, h, false}, {"self_attn.k_proj", kvw, h, false},
                  {"self_attn.v_proj", kvw, h, false}, {"self_attn.o_proj", h, qw, true},
                  {"mlp.gate_proj", f, h, false},     {"mlp.up_proj", f, h, false},
                  {"mlp.down_proj", h, f, true}};
        for (int i = 0; i < 7; i++) {
            snprintf(pre, sizeof pre, "model.layers.%d.%s", n, l[i].s);
            if (nvfp4(in, pre, l[i].o, l[i].i, l[i].awq) != 0)
                return -1;
        }
    }
    const mm_st_entry *ve = find(in, "visual.patch_embed.proj.weight");
    int vdepth = count_prefix_index(in, "visual.blocks.%d.norm1.weight");
    int deepstack = count_prefix_index(in, "visual.deepstack_merger_list.%d.norm.weight");
    if (!ve || ve->dtype != MM_BF16)
        return mm_fail(in->err, "%s: %s: the vision tower (visual.patch_embed.proj.weight, BF16) is missing",
                       mm_st_path(st), in->what);
    snprintf(r->summary, sizeof r->summary,
             "%d layers nvfp4 AWQ, hidden %lld, %lld/%lld heads x %lld, ffn %lld, vocab %lld int8; vision %d blocks "
             "(%lld wide), %d deepstack mergers%s",
             layers, (long long)h, (long long)(qw / d), (long long)(kvw / d), (long long)d, (long long)f,
             (long long)vocab, vdepth, (long long)ve->shape[0], deepstack,
             find(in, "model.norm.weight") ? "; has a final norm (untruncated export)" : "");
    int64_t dims[8] = {h, qw / d, kvw / d, d, f, layers, vocab, vdepth};
    memcpy(r->dims, dims, sizeof dims);
    return layers ? 0 : mm_fail(in->err, "%s: %s: no model.layers.N", mm_st_path(st), in->what);
}

/* ------------------------------------------------------------------- VAEs */

static int inspect_video_vae(insp *in, mm_inspect_report *r)
{
    const mm_safetensors *st = in->st;
    if (find(in, "encoder.down_blocks.0.resnets.0.conv1.weight") || find(in, "decoder.proj_in.weight"))
        return mm_fail(in->err, "%s: this is the diffusers layout of the video VAE; mmh3 needs "
                                "minimax_h3_video_vae_fp16.safetensors",
                       mm_st_path(st));
    const mm_st_entry *ci = find(in, "encoder.conv_in.weight"), *xe = find(in, "decoder.x_embedder.weight");
    if (!ci || !xe || xe->ndim != 2 || ci->ndim != 5)
        return mm_fail(in->err, "%s: %s: encoder.conv_in / decoder.x_embedder missing (not the MiniMax-H3 video VAE?)",
                       mm_st_path(st), in->what);
    if (ci->dtype != MM_F16)
        return mm_fail(in->err, "%s: %s: weights are %s: this is %s; mmh3 expects the released fp16 file", mm_st_path(st),
                       in->what, mm_dtype_name(ci->dtype),
                       ci->dtype == MM_F32 ? "the fp32 original" : ci->dtype == MM_BF16 ? "a bf16 export" : "another export");
    int64_t d = xe->shape[0];
    int levels = count_prefix_index(in, "encoder.down.%d.block.0.conv1.weight");
    int layers = count_prefix_index(in, "decoder.transformer_blocks.%d.norm1.weight");
    if (WANT(MM_F16, "decoder.x_embedder.weight", d, 24) || WANT(MM_F16, "post_quant_conv.weight", 24, 24, 1, 1, 1) ||
        WANT(MM_F16, "quant_conv.weight", 48, 48, 1, 1, 1) || WANT(MM_F16, "decoder.proj_out.weight", 3072, d) ||
        WANT(MM_F16, "decoder.register_tokens", 1, 4, d) || WANT(MM_F16, "decoder.norm_out.weight", d) ||
        WANT(MM_F16, "decoder.norm_out.bias", d))
        return -1;
    for (int i = 0; i < layers; i++) {
        WANTF(MM_F16, 2, MM_SHAPE(3 * d, d), "decoder.transformer_blocks.%d.attn.to_qkv.weight", i);
        WANTF(MM_F16, 2, MM_SHAPE(d, d), "decoder.transformer_blocks.%d.attn.to_out.weight", i);
        WANTF(MM_F16, 2, MM_SHAPE(8 * d, d), "decoder.transformer_blocks.%d.ff.w1.weight", i);
        WANTF(MM_F16, 2, MM_SHAPE(d, 4 * d), "decoder.transformer_blocks.%d.ff.w2.weight", i);
        WANTF(MM_F16, 1, MM_SHAPE(d), "decoder.transformer_blocks.%d.scale1", i);
        WANTF(MM_F16, 1, MM_SHAPE(d), "decoder.transformer_blocks.%d.scale2", i);
    }
    if (levels == 0 || layers == 0)
        return mm_fail(in->err, "%s: %s: no encoder levels or decoder blocks", mm_st_path(st), in->what);
    snprintf(r->summary, sizeof r->summary, "encoder %d levels (%lld..%lld ch), ViT decoder %d blocks x %lld wide, F16",
             levels, (long long)ci->shape[0],
             (long long)(find(in, "encoder.norm_out.weight") ? find(in, "encoder.norm_out.weight")->shape[0] : 0),
             layers, (long long)d);
    r->dims[0] = levels;
    r->dims[1] = layers;
    r->dims[2] = d;
    return 0;
}

static int inspect_audio_vae(insp *in, mm_inspect_report *r)
{
    const mm_safetensors *st = in->st;
    for (size_t i = 0; i < mm_st_count(st); i++)
        if (strstr(mm_st_at(st, i)->name, ".weight_g"))
            return mm_fail(in->err, "%s: weight-norm is not folded ('%s'): this is the original/diffusers audio VAE; "
                                    "mmh3 needs the Comfy-Org minimax_h3_audio_vae_fp32.safetensors",
                           mm_st_path(st), mm_st_at(st, i)->name);
    const mm_st_entry *z = find(in, "pre_block.attn.zero_k_bias"), *cp = find(in, "decoder.conv_post.weight");
    const mm_st_entry *dp = find(in, "dec_in_proj.weight"), *pre = find(in, "decoder.conv_pre.weight");
    if (!z || !cp || !dp || !pre || dp->ndim != 3 || pre->ndim != 3)
        return mm_fail(in->err, "%s: %s: pre_block / dec_in_proj / decoder.conv_pre / conv_post missing (not the "
                                "MiniMax-H3 audio VAE?)",
                       mm_st_path(st), in->what);
    if (cp->dtype != MM_F32)
        return mm_fail(in->err, "%s: %s: weights are %s; mmh3 expects the released fp32 file", mm_st_path(st), in->what,
                       mm_dtype_name(cp->dtype));
    int64_t latent = dp->shape[0], ddim = pre->shape[0];
    int stages = count_prefix_index(in, "decoder.ups.%d.0.weight");
    if (WANT(MM_F32, "dec_in_proj.weight", latent, 32, 1) || WANT(MM_F32, "decoder.conv_pre.weight", ddim, latent, 7) ||
        WANT(MM_F32, "mean_proj.weight", 32, 32, 1))
        return -1;
    for (int i = 0; i < stages; i++)
        for (int m = 0; m < 3; m++)
            WANTF(MM_F32, -1, NULL, "decoder.resblocks.%d.convs1.0.weight", 3 * i + m);
    snprintf(r->summary, sizeof r->summary, "DAC encoder + pre_block (%lld wide), BigVGAN decoder %lld ch, %d stages, F32",
             (long long)latent, (long long)ddim, stages);
    r->dims[0] = latent;
    r->dims[1] = ddim;
    r->dims[2] = stages;
    return stages ? 0 : mm_fail(in->err, "%s: %s: no decoder stages", mm_st_path(st), in->what);
}

int mm_inspect(mm_component c, const mm_safetensors *st, mm_inspect_report *r, mm_error *err)
{
    memset(r, 0, sizeof *r);
    r->tensors = mm_st_count(st);
    r->bytes = mm_st_file_size(st);
    const mm_component_info *ci = mm_component_get(c);
    insp in = {st, err, ci ? ci->title : "?"};
    switch (c) {
    case MM_COMP_DIT_FL2VA:
    case MM_COMP_DIT_REF2VA: return inspect_dit(&in, r);
    case MM_COMP_TEXT_ENCODER: return inspect_te(&in, r);
    case MM_COMP_VIDEO_VAE: return inspect_video_vae(&in, r);
    case MM_COMP_AUDIO_VAE: return inspect_audio_vae(&in, r);
    default: return mm_fail(err, "no header check for %s", in.what);
    }
}
