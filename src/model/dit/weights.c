/* Weights of the DiT in their stored form. Linears go through the formats
 * layer (src/formats/linear.h), which recognises dense bf16/f32 (+ bias) and
 * int8 ConvRot and keeps them as stored; norms stay bf16. The one conversion
 * is the f16 AdaLN projection, upcast to f32 once here because the reference
 * evaluates it in f32 (its f16 output would overflow). On the CPU tensors are
 * views into the checkpoint mapping; on CUDA each is copied to the device
 * once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "backend/ops.h"
#include "model/dit/model.h"

/* Where a load puts its tensors: the model's device and context, or the host
 * (a CPU context) for blocks that stream; `views`: tensors the file holds in
 * the wanted dtype stay views into its mapping. */
typedef struct loader {
    mm_dit *d;
    mm_ctx *ctx;
    mm_device dev;
    bool views;
    bool counted; /* adds to d->device_bytes */
} loader;

static int place(const loader *L, const char *name, mm_dtype want, mm_tensor *out, mm_error *err)
{
    mm_dit *d = L->d;
    mm_ctx *ctx = L->ctx;
    mm_tensor src;
    if (mm_st_get(d->st, name, &src, err) != 0)
        return -1;
    if (L->views && src.dtype == want) {
        *out = src;
        return 0;
    }
    if (mm_tensor_alloc(out, L->dev, want, src.ndim, src.shape, err) != 0)
        return mm_error_prefix(err, "%s", name);
    if (mm_copy_converting(ctx, out, &src, err) != 0) {
        mm_tensor_free(out);
        return mm_error_prefix(err, "loading %s", name);
    }
    if (L->counted)
        d->device_bytes += mm_device_alloc_size(mm_tensor_nbytes(out));
    return 0;
}

static size_t linear_bytes(const mm_linear *l)
{
    size_t n = 0;
    const mm_tensor *ts[] = {&l->weight, &l->weight_scale, &l->bias, &l->pre_quant_scale};
    for (int i = 0; i < 4; i++)
        if (ts[i]->data)
            n += mm_device_alloc_size(mm_tensor_nbytes(ts[i]));
    return n;
}

/* A linear [n_out, n_in] under `prefix`, on the model's device. The
 * architecture fixes which linears carry a bias (the projections in and out
 * and condition_proj); a file without it is broken, not a variant. */
static int load_linear(const loader *L, const char *prefix, int64_t n_out, int64_t n_in, bool bias, mm_linear *out,
                       mm_error *err)
{
    mm_dit *d = L->d;
    mm_linear lin;
    if (mm_linear_load(&lin, d->st, prefix, err) != 0)
        return -1;
    if (mm_linear_expect(&lin, n_out, n_in, err) != 0) {
        mm_linear_free(&lin);
        return -1;
    }
    if (bias != (lin.bias.data != NULL)) {
        mm_linear_free(&lin);
        return mm_fail(err, "%s: '%s.bias' %s", mm_st_path(d->st), prefix,
                       bias ? "missing (this layer has a bias)" : "present, but this layer has no bias");
    }
    if (L->views) {
        *out = lin;
        return 0;
    }
    int rc = mm_linear_to_device(out, &lin, L->ctx, err);
    mm_linear_free(&lin);
    if (rc == 0 && L->counted)
        d->device_bytes += linear_bytes(out);
    return rc;
}

static float *host_f32(const mm_dit *d, const char *name, mm_error *err)
{
    mm_tensor t;
    if (mm_st_get(d->st, name, &t, err) != 0)
        return NULL;
    size_t n = (size_t)mm_tensor_numel(&t);
    float *v = malloc(sizeof(float) * n);
    if (!v) {
        mm_fail(err, "out of memory for %s", name);
        return NULL;
    }
    memcpy(v, t.data, sizeof(float) * n);
    return v;
}

static int load_block(const loader *L, const char *prefix, bool main_block, mm_dit_block_weights *bw, mm_error *err)
{
    mm_dit *d = L->d;
    static const char *const lin[4] = {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"};
    const mm_dit_config *c = &d->cfg;
    const int64_t H = c->hidden, A = (int64_t)c->heads * c->head_dim, F = c->ffn;
    const int64_t shape[4][2] = {{3 * A, H}, {H, A}, {2 * F, H}, {H, F}};
    char n[256];
#define P(leaf, dt, dst) (snprintf(n, sizeof n, "%s.%s", prefix, leaf), place(L, n, dt, dst, err))
    if (P("norm1.weight", MM_BF16, &bw->norm1) || P("norm2.weight", MM_BF16, &bw->norm2) ||
        P("attn.q_norm.weight", MM_BF16, &bw->q_norm) || P("attn.k_norm.weight", MM_BF16, &bw->k_norm))
        return -1;
    for (int i = 0; i < 4; i++) {
        snprintf(n, sizeof n, "%s.%s", prefix, lin[i]);
        if (load_linear(L, n, shape[i][0], shape[i][1], false, &bw->lin[i], err) != 0)
            return -1;
        if (main_block && bw->lin[i].format == MM_WEIGHT_CONVROT_I8) {
            if (d->cfg.convrot_group && d->cfg.convrot_group != bw->lin[i].group)
                return mm_fail(err, "%s: ConvRot group %d differs from the other layers' %d", n, bw->lin[i].group,
                               d->cfg.convrot_group);
            d->cfg.convrot_group = bw->lin[i].group;
        }
    }
    if (main_block && (P("adaln_proj.linear.weight", MM_F32, &bw->adaln_w) ||
                       P("adaln_proj.linear.bias", MM_F32, &bw->adaln_b)))
        return -1;
#undef P
    return 0;
}

void mm_dit_block_weights_free(mm_dit_block_weights *bw)
{
    mm_tensor_free(&bw->norm1);
    mm_tensor_free(&bw->norm2);
    mm_tensor_free(&bw->q_norm);
    mm_tensor_free(&bw->k_norm);
    for (int i = 0; i < 4; i++)
        mm_linear_free(&bw->lin[i]);
    mm_tensor_free(&bw->adaln_w);
    mm_tensor_free(&bw->adaln_b);
}

int mm_dit_load_streamed_block(mm_dit *d, mm_ctx *cpu, int block, mm_dit_block_weights *out, mm_error *err)
{
    const loader L = {.d = d, .ctx = cpu, .dev = mm_cpu(), .views = true, .counted = false};
    char prefix[64];
    snprintf(prefix, sizeof prefix, "blocks.%d", block);
    memset(out, 0, sizeof *out);
    if (load_block(&L, prefix, true, out, err) != 0) {
        mm_dit_block_weights_free(out);
        return -1;
    }
    return 0;
}

int mm_dit_weights_load(mm_dit *d, mm_ctx *ctx, mm_error *err)
{
    const mm_dit_config *c = &d->cfg;
    const int64_t H = c->hidden;
    const bool cpu = d->device.kind == MM_DEVICE_CPU;
    const loader L = {.d = d, .ctx = ctx, .dev = d->device, .views = cpu && !d->own_cpu_weights,
                      .counted = !cpu || d->own_cpu_weights};
    if (load_linear(&L, "video_patch_proj", H, c->video_row_width, true, &d->video_in, err) ||
        load_linear(&L, "audio_patch_proj", H, c->audio_row_width, true, &d->audio_in, err) ||
        load_linear(&L, "condition_proj", H, c->text_dim, true, &d->cond, err) ||
        load_linear(&L, "final_layer.video_out", c->video_row_width, H, true, &d->video_out, err) ||
        load_linear(&L, "final_layer.audio_out", c->audio_row_width, H, true, &d->audio_out, err) ||
        place(&L, "token_refiner.final_norm.weight", MM_BF16, &d->refiner_norm, err) ||
        place(&L, "final_layer.norm.weight", MM_BF16, &d->final_norm, err) ||
        place(&L, "final_layer.adaln_proj.linear.weight", MM_F32, &d->final_adaln_w, err) ||
        place(&L, "final_layer.adaln_proj.linear.bias", MM_F32, &d->final_adaln_b, err))
        return -1;
    if (!(d->table = host_f32(d, "adaln_t_table", err)) || !(d->inv_freq = host_f32(d, "rope.inv_freq", err)))
        return -1;
    d->refiner = calloc((size_t)c->refiner_layers, sizeof *d->refiner);
    d->blocks = calloc((size_t)c->layers, sizeof *d->blocks);
    if (!d->refiner || !d->blocks)
        return mm_fail(err, "out of memory");
    char prefix[64];
    for (int b = 0; b < c->refiner_layers; b++) {
        snprintf(prefix, sizeof prefix, "token_refiner.blocks.%d", b);
        if (load_block(&L, prefix, false, &d->refiner[b], err) != 0)
            return -1;
    }
    for (int b = 0; b < c->layers; b++) {
        if (mm_dit_block_streamed(d, b))
            continue; /* stream.c places it */
        snprintf(prefix, sizeof prefix, "blocks.%d", b);
        if (load_block(&L, prefix, true, &d->blocks[b], err) != 0)
            return -1;
    }
    return 0;
}

void mm_dit_weights_free(mm_dit *d)
{
    mm_linear *lins[] = {&d->video_in, &d->audio_in, &d->cond, &d->video_out, &d->audio_out};
    for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++)
        mm_linear_free(lins[i]);
    mm_tensor *singles[] = {&d->refiner_norm, &d->final_norm, &d->final_adaln_w, &d->final_adaln_b};
    for (size_t i = 0; i < sizeof singles / sizeof singles[0]; i++)
        mm_tensor_free(singles[i]);
    if (d->refiner)
        for (int b = 0; b < d->cfg.refiner_layers; b++)
            mm_dit_block_weights_free(&d->refiner[b]);
    if (d->blocks)
        for (int b = 0; b < d->cfg.layers; b++)
            mm_dit_block_weights_free(&d->blocks[b]);
    free(d->refiner);
    free(d->blocks);
    free(d->table);
    free(d->silu_grid);
    d->silu_grid = NULL;
    free(d->inv_freq);
    d->refiner = d->blocks = NULL;
    d->table = d->inv_freq = NULL;
}
