/* Does an adapter fit a DiT? Every part against the configuration the
 * checkpoint's shapes gave (model/dit/config.h): the block exists, A takes
 * the linear's input width, B's rows land inside its output. */
#include <stdio.h>

#include "model/lora/lora_internal.h"

/* The [out, in] of the linear a pair adapts; false when the configuration
 * does not say (the time MLP, absent from the pruned file). in = 0: any
 * width (the AdaLN input depends on the base the adapter was trained on:
 * the pruned rank-8 table or the full model's SiLU(temb)). */
static bool target_shape(const mm_lora_pair *p, const mm_dit_config *c, int64_t *out, int64_t *in)
{
    const int64_t H = c->hidden, A = (int64_t)c->heads * c->head_dim, F = c->ffn;
    switch (p->which) {
    case MM_LORA_QKV: *out = 3 * A, *in = H; return true;
    case MM_LORA_OUT: *out = H, *in = A; return true;
    case MM_LORA_FC1: *out = 2 * F, *in = H; return true;
    case MM_LORA_FC2: *out = H, *in = F; return true;
    case MM_LORA_LINEAR: *out = H, *in = c->text_dim; return true;
    case MM_LORA_ADALN:
        *out = p->scope == MM_LORA_FINAL ? 2 * H : (int64_t)c->modalities * 6 * H;
        *in = 0;
        return true;
    case MM_LORA_TIME_IN:
    case MM_LORA_TIME_OUT: return false;
    }
    return false;
}

static int fit_pair(const mm_lora *l, const mm_lora_pair *p, const mm_dit_config *c, mm_error *err)
{
    if (p->scope == MM_LORA_BLOCK && p->index >= c->layers)
        return mm_fail(err, "%s: '%s' adapts %s, but the DiT has %d blocks (0..%d)", l->path, p->key, p->module,
                       c->layers, c->layers - 1);
    if (p->scope == MM_LORA_REFINER && p->index >= c->refiner_layers)
        return mm_fail(err, "%s: '%s' adapts %s, but the DiT's token refiner has %d blocks", l->path, p->key, p->module,
                       c->refiner_layers);
    int64_t out, in;
    if (!target_shape(p, c, &out, &in))
        return 0;
    char sa[64], sb[64];
    mm_shape_str(p->a.ndim, p->a.shape, sa, sizeof sa);
    mm_shape_str(p->b.ndim, p->b.shape, sb, sizeof sb);
    const bool slice = p->row_kind == MM_LORA_ROWS_QKV_SLICE || p->row_kind == MM_LORA_ROWS_FUSED_SPLIT;
    const int64_t want_rows = slice ? out / 3 : out;
    if (in && p->in_features != in)
        return mm_fail(err, "%s: '%s' has shape %s; %s takes %lld input features, so A must be [rank, %lld]",
                       l->path, p->key, sa, p->module, (long long)in, (long long)in);
    if (p->rows != want_rows || p->row0 + p->rows > out)
        return mm_fail(err, "%s: '%s' has shape %s; %s%s has %lld output rows, so B must be [%lld, rank]", l->path,
                       p->b_key, sb, p->module, slice ? " (one third: q, k or v)" : "", (long long)want_rows,
                       (long long)want_rows);
    return 0;
}

int mm_lora_fit(const mm_lora *l, const mm_dit_config *c, mm_error *err)
{
    for (int i = 0; i < l->n_pairs; i++)
        if (fit_pair(l, &l->pairs[i], c, err) != 0)
            return -1;
    for (int i = 0; i < l->n_banks; i++) {
        const mm_lora_bank *b = &l->banks[i];
        const int64_t out = b->audio ? c->audio_row_width : c->video_row_width;
        if (b->weight.shape[1] != out || b->weight.shape[2] != c->hidden) {
            char s[64];
            mm_shape_str(b->weight.ndim, b->weight.shape, s, sizeof s);
            return mm_fail(err, "%s: '%s' has shape %s; the %s head bank must be [heads, %lld, %d]", l->path, b->key, s,
                           b->audio ? "audio" : "video", (long long)out, c->hidden);
        }
    }
    return 0;
}
