#include "model/dit/config.h"

#include <stdio.h>
#include <string.h>

/* A 0 or huge dimension is refused by mm_st_find_config (a 0-element q_norm
 * once divided by zero below). */
static const mm_st_entry *need(const mm_safetensors *st, const char *name, int ndim, mm_error *err)
{
    return mm_st_find_config(st, name, ndim, "DiT checkpoint", err);
}

/* Counts consecutive "<prefix><i>.<leaf>" tensors from i = 0. */
static int count_blocks(const mm_safetensors *st, const char *prefix, const char *leaf)
{
    int n = 0;
    char name[256];
    for (;;) {
        snprintf(name, sizeof name, "%s%d.%s", prefix, n, leaf);
        if (!mm_st_find(st, name))
            return n;
        n++;
    }
}

static int expect(const mm_safetensors *st, const char *name, mm_dtype dtype, int ndim, const int64_t *shape,
                  mm_error *err)
{
    const mm_st_entry *e = mm_st_find(st, name);
    if (!e)
        return mm_fail(err, "%s: tensor '%s' not found", mm_st_path(st), name);
    char want[96], got[96];
    int same = e->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = e->shape[i] == shape[i];
    if (!same)
        return mm_fail(err, "%s: '%s' has shape %s, expected %s", mm_st_path(st), name,
                       mm_shape_str(e->ndim, e->shape, got, sizeof got), mm_shape_str(ndim, shape, want, sizeof want));
    if (e->dtype != dtype)
        return mm_fail(err, "%s: '%s' is %s, expected %s", mm_st_path(st), name, mm_dtype_name(e->dtype),
                       mm_dtype_name(dtype));
    return 0;
}

int mm_dit_config_read(const mm_safetensors *st, const mm_dit_config_overrides *ov, mm_dit_config *c, mm_error *err)
{
    memset(c, 0, sizeof *c);
    const mm_st_entry *vp, *ap, *cp, *tab, *rope, *qn, *qkv, *fc1;
    if (!(vp = need(st, "video_patch_proj.weight", 2, err)) || !(ap = need(st, "audio_patch_proj.weight", 2, err)) ||
        !(cp = need(st, "condition_proj.weight", 2, err)) || !(tab = need(st, "adaln_t_table", 2, err)) ||
        !(rope = need(st, "rope.inv_freq", 1, err)) || !(qn = need(st, "blocks.0.attn.q_norm.weight", 1, err)) ||
        !(qkv = need(st, "blocks.0.attn.qkv_proj.weight", 2, err)) || !(fc1 = need(st, "blocks.0.mlp.fc1.weight", 2, err)))
        return -1;
    c->hidden = (int)vp->shape[0];
    c->video_row_width = (int)vp->shape[1];
    c->audio_row_width = (int)ap->shape[1];
    c->text_dim = (int)cp->shape[1];
    c->table_size = (int)tab->shape[0];
    c->time_dim = (int)tab->shape[1];
    c->rope_freqs = (int)rope->shape[0];
    c->rope_dim = 3 * 2 * c->rope_freqs;
    c->head_dim = (int)qn->shape[0];
    if (qkv->shape[0] % (3 * c->head_dim))
        return mm_fail(err, "blocks.0.attn.qkv_proj: %lld rows is not 3 x heads x %d", (long long)qkv->shape[0],
                       c->head_dim);
    c->heads = (int)(qkv->shape[0] / (3 * c->head_dim));
    if (fc1->shape[0] % 2)
        return mm_fail(err, "blocks.0.mlp.fc1: %lld rows is not [gate; up]", (long long)fc1->shape[0]);
    c->ffn = (int)(fc1->shape[0] / 2);
    c->layers = count_blocks(st, "blocks.", "norm1.weight");
    c->refiner_layers = count_blocks(st, "token_refiner.blocks.", "norm1.weight");
    c->modalities = 3;

    const int p_def[3] = {1, 2, 2};
    for (int i = 0; i < 3; i++)
        c->patch[i] = ov && ov->patch[i] > 0 ? ov->patch[i] : p_def[i];
    int vol = c->patch[0] * c->patch[1] * c->patch[2];
    if (c->video_row_width % vol)
        return mm_fail(err, "video_patch_proj: %d input features do not split into %dx%dx%d patches",
                       c->video_row_width, c->patch[0], c->patch[1], c->patch[2]);
    c->latent_channels = c->video_row_width / vol;
    c->norm_eps = ov && ov->norm_eps > 0 ? ov->norm_eps : 1e-5f;
    c->qk_norm_eps = ov && ov->qk_norm_eps > 0 ? ov->qk_norm_eps : 1e-5f;
    c->final_norm_eps = ov && ov->final_norm_eps > 0 ? ov->final_norm_eps : 1e-5f;

    if (c->layers < 1 || c->refiner_layers < 1)
        return mm_fail(err, "%s: %d blocks and %d refiner blocks found; at least one of each is needed",
                       mm_st_path(st), c->layers, c->refiner_layers);
    if (c->rope_dim > c->head_dim)
        return mm_fail(err, "rope.inv_freq: %d frequencies rotate %d channels, more than the head size %d",
                       c->rope_freqs, c->rope_dim, c->head_dim);
    if (c->table_size < 2)
        return mm_fail(err, "adaln_t_table: %d rows; at least 2 are needed to interpolate", c->table_size);

    /* The tensors that are not linears (those are checked by the formats layer
     * when the weights load), by shape and dtype. */
    const int64_t H = c->hidden, D = c->head_dim;
    const int64_t mods = (int64_t)c->modalities * 6 * H;
    if (expect(st, "adaln_t_table", MM_F32, 2, (int64_t[]){c->table_size, c->time_dim}, err) ||
        expect(st, "rope.inv_freq", MM_F32, 1, (int64_t[]){c->rope_freqs}, err) ||
        expect(st, "token_refiner.final_norm.weight", MM_BF16, 1, (int64_t[]){H}, err) ||
        expect(st, "final_layer.norm.weight", MM_BF16, 1, (int64_t[]){H}, err) ||
        expect(st, "final_layer.adaln_proj.linear.weight", MM_F16, 2, (int64_t[]){2 * H, c->time_dim}, err) ||
        expect(st, "final_layer.adaln_proj.linear.bias", MM_F16, 1, (int64_t[]){2 * H}, err))
        return -1;
    char n[256];
    for (int b = 0; b < c->refiner_layers + c->layers; b++) {
        const int main_block = b >= c->refiner_layers;
        char prefix[64];
        if (main_block)
            snprintf(prefix, sizeof prefix, "blocks.%d", b - c->refiner_layers);
        else
            snprintf(prefix, sizeof prefix, "token_refiner.blocks.%d", b);
#define T(leaf, dt, ...) \
    (snprintf(n, sizeof n, "%s.%s", prefix, leaf), expect(st, n, dt, MM_NDIM(__VA_ARGS__), MM_SHAPE(__VA_ARGS__), err))
        if (T("norm1.weight", MM_BF16, H) || T("norm2.weight", MM_BF16, H) || T("attn.q_norm.weight", MM_BF16, D) ||
            T("attn.k_norm.weight", MM_BF16, D))
            return -1;
        if (main_block && (T("adaln_proj.linear.weight", MM_F16, mods, c->time_dim) ||
                           T("adaln_proj.linear.bias", MM_F16, mods)))
            return -1;
#undef T
    }
    return 0;
}
