/* AdaLN adapters and PDD output-head banks on the pruned int8 base
 * (fewstep.md §2.5, §5.2; docs/LORA.md "AdaLN adapters on the pruned base").
 *
 * An AdaLN pair adds s·B·(A·e(t)) to a block's (or the final layer's)
 * modulation for every distinct timestep t of the forward, in f32, before
 * the modulation's single bf16 rounding (adaln.c). What e(t) is depends on
 * the base the adapter was trained on:
 *   - the pruned file (ai-toolkit trains on it): A takes the table's 8
 *     columns, e = the interpolated adaln_t_table row the base AdaLN reads;
 *   - the full model (Larry's Turbo, PDD, FlashGen): A takes 2688 columns,
 *     e = SiLU(temb(t)) of the full time MLP, which the pruned file does not
 *     carry: it is read from a grid sampled at t = k/1024 and interpolated
 *     per distinct t exactly as Larry's node does (pos = clamp(t)·1024,
 *     i0 = min(floor(pos), 1023), lerp).
 * A PDD bank (32 heads [96, H] / [32, H]) replaces final_layer.video_out /
 * audio_out by the interval-weighted mean of its heads for the current
 * coarse step; the weights come from the sampler (sampler/schedule.h) through
 * mm_dit_request_set_head_weights before each forward, are blended on the
 * host in double and uploaded once per step ([out, H] f32). A strength s
 * other than 1 moves the head from the base toward the blend:
 * base + s·(blend − base), so strength 0 is the base head exactly.
 *
 * Time-embedder pairs (HyperFlow's time_embedder / endpoint_time_embedder)
 * have nothing to apply to: the pruned base has no time MLP. They are
 * refused with that reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/dit/model.h"

/* n values of a host tensor (f32 / bf16 / f16) from element `at`, as f32. */
static void load_f32(const mm_tensor *t, int64_t at, int64_t n, float *out)
{
    const void *d = t->data;
    switch (t->dtype) {
    case MM_F32: memcpy(out, (const float *)d + at, sizeof(float) * (size_t)n); break;
    case MM_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = mm_bf16_to_f32(((const uint16_t *)d)[at + i]);
        break;
    case MM_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = mm_f16_to_f32(((const uint16_t *)d)[at + i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            out[i] = NAN;
        break;
    }
}

/* ------------------------------------------------------------ the grid */

int mm_dit_set_silu_grid(mm_dit *dit, const char *path, mm_error *err)
{
    mm_safetensors *st;
    if (mm_st_open(&st, path, err) != 0)
        return mm_error_prefix(err, "SiLU(temb) grid");
    mm_tensor g;
    int rc = mm_st_get(st, "silu_t_emb_grid", &g, err);
    if (rc == 0 && (g.ndim != 2 || g.shape[0] < 2 || g.shape[1] < 1 ||
                    (g.dtype != MM_F32 && g.dtype != MM_BF16 && g.dtype != MM_F16))) {
        char s[64];
        rc = mm_fail(err, "%s: silu_t_emb_grid is %s %s; a float [points >= 2, width] grid is expected", path,
                     mm_dtype_name(g.dtype), mm_shape_str(g.ndim, g.shape, s, sizeof s));
    }
    float *copy = NULL;
    if (rc == 0 && !(copy = malloc(sizeof(float) * (size_t)(g.shape[0] * g.shape[1]))))
        rc = mm_fail(err, "out of memory for the SiLU(temb) grid");
    if (rc == 0) {
        load_f32(&g, 0, g.shape[0] * g.shape[1], copy);
        for (int64_t i = 0; i < g.shape[0] * g.shape[1] && rc == 0; i++)
            if (!isfinite(copy[i]))
                rc = mm_fail(err, "%s: silu_t_emb_grid holds a non-finite value at %lld", path, (long long)i);
    }
    if (rc == 0) {
        free(dit->silu_grid);
        dit->silu_grid = copy;
        dit->grid_points = (int)g.shape[0];
        dit->grid_width = (int)g.shape[1];
        copy = NULL;
    }
    free(copy);
    mm_st_close(st);
    return rc;
}

bool mm_dit_has_silu_grid(const mm_dit *dit) { return dit->silu_grid != NULL; }

bool mm_dit_loras_need_grid(const mm_dit *dit, const mm_lora_use *uses, int n)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; uses[i].lora && k < uses[i].lora->n_pairs; k++) {
            const mm_lora_pair *p = &uses[i].lora->pairs[k];
            if (p->which == MM_LORA_ADALN && p->in_features != dit->cfg.time_dim)
                return true;
        }
    return false;
}

/* e(t) per distinct t: Larry's node's interpolation of the grid. */
static void grid_rows(const mm_dit *d, const float *unique, int m, float *out)
{
    const int n = d->grid_points, w = d->grid_width;
    for (int k = 0; k < m; k++) {
        float t = unique[k] < 0.0f ? 0.0f : unique[k] > 1.0f ? 1.0f : unique[k];
        float pos = t * (float)(n - 1);
        int i0 = (int)floorf(pos);
        if (i0 > n - 2)
            i0 = n - 2;
        const float frac = pos - (float)i0;
        const float *a = d->silu_grid + (size_t)i0 * w, *b = a + w;
        for (int j = 0; j < w; j++)
            out[(size_t)k * w + j] = a[j] + frac * (b[j] - a[j]);
    }
}

/* ------------------------------------------------------------ setup */

static int refuse_time(const mm_lora *l, const mm_lora_pair *p, mm_error *err)
{
    return mm_fail(err,
                   "%s: '%s' adapts %s, the time embedder: the pruned int8 base has no time MLP (adaln_t_table "
                   "replaces it), so there is nothing to apply it to; HyperFlow's two-time conditioning "
                   "(endpoint_time_embedder) needs the full time MLP and full-width AdaLN (fewstep.md §7.2). A file "
                   "with its backbone pairs only (no time_embedder keys) loads",
                   l->path, p->key, p->module);
}

static int add_piece(mm_dit_request *r, const mm_lora *l, const mm_lora_pair *p, float strength, int slot,
                     mm_dit_adaln_piece *out, mm_error *err)
{
    const mm_dit *d = r->dit;
    const mm_dit_config *c = &d->cfg;
    const int64_t rows = slot < c->layers ? (int64_t)c->modalities * 6 * c->hidden : 2 * (int64_t)c->hidden;
    if (p->row0 != 0 || p->rows != rows)
        return mm_fail(err, "%s: '%s' writes rows [%lld, %lld) of %s, which has %lld", l->path, p->key,
                       (long long)p->row0, (long long)(p->row0 + p->rows), p->module, (long long)rows);
    bool grid = false;
    if (p->in_features != c->time_dim) {
        if (!d->silu_grid)
            return mm_fail(err,
                           "%s: '%s' reads %lld features: an AdaLN adapter trained on the full model, which reads "
                           "SiLU(temb(t)); the pruned base has only its %d-wide table. Put the SiLU(temb) grid "
                           "(h3_silu_temb_grid.safetensors, tensor silu_t_emb_grid [1025, %lld]: shipped with Larry's "
                           "ComfyUI node, or `mmh3 convert --silu-temb-grid` from the full bf16 release) in "
                           "$MODELS_PATH/loras/ (docs/LORA.md)",
                           l->path, p->key, (long long)p->in_features, c->time_dim, (long long)p->in_features);
        if (p->in_features != d->grid_width)
            return mm_fail(err, "%s: '%s' reads %lld features; the pruned table has %d and the SiLU(temb) grid %d",
                           l->path, p->key, (long long)p->in_features, c->time_dim, d->grid_width);
        grid = true;
    }
    mm_device dev = mm_ctx_device(r->ctx);
    const int64_t in = p->in_features, rank = p->rank;
    float *a = malloc(sizeof(float) * (size_t)(rank * in));
    if (!a)
        return mm_fail(err, "out of memory");
    load_f32(&p->a, 0, rank * in, a);
    mm_tensor ha = mm_tensor_wrap(a, mm_cpu(), MM_F32, 2, MM_SHAPE(rank, in));
    *out = (mm_dit_adaln_piece){.rank = (int)rank, .s = strength * p->scale, .grid = grid};
    int rc = mm_tensor_alloc(&out->a, dev, MM_F32, 2, MM_SHAPE(rank, in), err) != 0 ||
                     mm_tensor_alloc(&out->b, dev, p->b.dtype, 2, MM_SHAPE(rows, rank), err) != 0
                 ? -1
                 : 0;
    if (rc == 0) {
        mm_copy(r->ctx, &out->a, &ha);
        mm_copy(r->ctx, &out->b, &p->b);
        rc = mm_ctx_sync(r->ctx, err);
    }
    free(a);
    if (rc == 0)
        r->bytes += mm_tensor_nbytes(&out->a) + mm_tensor_nbytes(&out->b);
    return rc != 0 ? mm_error_prefix(err, "%s: %s", l->path, p->module) : 0;
}

static int setup_banks(mm_dit_request *r, const mm_lora_use *uses, int n, mm_error *err)
{
    mm_dit_adapt *ad = &r->adapt;
    const mm_dit_config *c = &r->dit->cfg;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < uses[i].lora->n_banks; k++) {
            const mm_lora_bank *b = &uses[i].lora->banks[k];
            const int side = b->audio ? 1 : 0;
            const int64_t heads = b->weight.shape[0];
            if (ad->bank[side])
                return mm_fail(err, "%s: a second %s output-head bank; one PDD adapter per request", uses[i].lora->path,
                               side ? "audio" : "video");
            if (ad->heads && heads != ad->heads)
                return mm_fail(err, "%s: the video and audio banks have %d and %lld heads", uses[i].lora->path,
                               ad->heads, (long long)heads);
            ad->bank[side] = b;
            ad->strength[side] = uses[i].strength;
            ad->heads = (int)heads;
        }
    for (int side = 0; side < 2; side++) {
        if (!ad->bank[side])
            continue;
        const int64_t out = side ? c->audio_row_width : c->video_row_width;
        mm_linear *h = &ad->head[side];
        memset(h, 0, sizeof *h);
        h->format = MM_WEIGHT_DENSE;
        h->out_features = out;
        h->in_features = c->hidden;
        snprintf(h->name, sizeof h->name, "%s (PDD blend)", side ? "final_layer.audio_out" : "final_layer.video_out");
        mm_device dev = mm_ctx_device(r->ctx);
        if (mm_tensor_alloc(&h->weight, dev, MM_F32, 2, MM_SHAPE(out, c->hidden), err) != 0 ||
            mm_tensor_alloc(&h->bias, dev, MM_F32, 1, MM_SHAPE(out), err) != 0)
            return -1;
        r->bytes += mm_tensor_nbytes(&h->weight) + mm_tensor_nbytes(&h->bias);
    }
    return 0;
}

int mm_dit_adapt_setup(mm_dit_request *r, const mm_lora_use *uses, int n, mm_error *err)
{
    mm_dit_adapt *ad = &r->adapt;
    memset(ad, 0, sizeof *ad);
    const mm_dit_config *c = &r->dit->cfg;
    int pieces = 0, max_rank = 0;
    for (int i = 0; i < n; i++) {
        const mm_lora *l = uses[i].lora;
        for (int k = 0; l && k < l->n_pairs; k++) {
            const mm_lora_pair *p = &l->pairs[k];
            if (mm_lora_which_part(p->which) == MM_LORA_PART_TIME)
                return refuse_time(l, p, err);
            if (p->which == MM_LORA_ADALN) {
                pieces++;
                max_rank = p->rank > max_rank ? p->rank : max_rank;
            }
        }
    }
    const int slots = c->layers + 1;
    ad->first = calloc((size_t)slots, sizeof(int));
    ad->count = calloc((size_t)slots, sizeof(int));
    ad->p = calloc((size_t)(pieces ? pieces : 1), sizeof *ad->p);
    if (!ad->first || !ad->count || !ad->p)
        return mm_fail(err, "out of memory");
    /* grouped by slot, in the request's adapter order within a slot */
    for (int s = 0; s < slots; s++) {
        ad->first[s] = ad->n;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < uses[i].lora->n_pairs; k++) {
                const mm_lora_pair *p = &uses[i].lora->pairs[k];
                if (p->which != MM_LORA_ADALN || (p->scope == MM_LORA_FINAL ? c->layers : p->index) != s)
                    continue;
                if (add_piece(r, uses[i].lora, p, uses[i].strength, s, &ad->p[ad->n], err) != 0)
                    return -1;
                ad->n++;
            }
        ad->count[s] = ad->n - ad->first[s];
    }
    for (int i = 0; i < ad->n; i++)
        ad->grid |= ad->p[i].grid;
    mm_device dev = mm_ctx_device(r->ctx);
    const int64_t M = MM_DIT_MAX_TIMESTEPS, rows = (int64_t)c->modalities * 6 * c->hidden;
    if (ad->n && (mm_tensor_alloc(&ad->u, dev, MM_F32, 2, MM_SHAPE(M, max_rank), err) != 0 ||
                  mm_tensor_alloc(&ad->b32, dev, MM_F32, 2, MM_SHAPE(rows, max_rank), err) != 0))
        return -1;
    if (ad->grid && mm_tensor_alloc(&ad->grid_rows, dev, MM_F32, 2, MM_SHAPE(M, r->dit->grid_width), err) != 0)
        return -1;
    r->bytes += mm_tensor_nbytes(&ad->u) + mm_tensor_nbytes(&ad->b32) + mm_tensor_nbytes(&ad->grid_rows);
    return setup_banks(r, uses, n, err);
}

void mm_dit_adapt_teardown(mm_dit_request *r)
{
    mm_dit_adapt *ad = &r->adapt;
    for (int i = 0; ad->p && i < ad->n; i++) {
        mm_tensor_free(&ad->p[i].a);
        mm_tensor_free(&ad->p[i].b);
    }
    free(ad->p);
    free(ad->first);
    free(ad->count);
    mm_tensor_free(&ad->grid_rows);
    mm_tensor_free(&ad->u);
    mm_tensor_free(&ad->b32);
    for (int s = 0; s < 2; s++) {
        mm_tensor_free(&ad->head[s].weight);
        mm_tensor_free(&ad->head[s].bias);
    }
    memset(ad, 0, sizeof *ad);
}

/* ------------------------------------------------------------ per forward */

int mm_dit_adapt_forward_begin(mm_dit_request *r, const float *unique, int m, mm_error *err)
{
    mm_dit_adapt *ad = &r->adapt;
    if ((ad->bank[0] || ad->bank[1]) && !ad->heads_set)
        return mm_fail(err, "the adapter's PDD head bank needs this step's head weights "
                            "(mm_dit_request_set_head_weights; the sampler gives them: --sampler pdd8)");
    ad->heads_set = false; /* each forward sets its own */
    if (!ad->grid)
        return 0;
    const int w = r->dit->grid_width;
    float *rows = malloc(sizeof(float) * (size_t)m * w);
    if (!rows)
        return mm_fail(err, "out of memory");
    grid_rows(r->dit, unique, m, rows);
    mm_tensor h = mm_tensor_wrap(rows, mm_cpu(), MM_F32, 2, MM_SHAPE(m, w));
    mm_tensor dst = mm_dit_rows(&ad->grid_rows, m);
    mm_copy(r->ctx, &dst, &h);
    int rc = mm_ctx_sync(r->ctx, err); /* the host rows must outlive the copy */
    free(rows);
    return rc;
}

int mm_dit_adapt_add(mm_dit_request *r, int slot, mm_tensor *out32, int m)
{
    const mm_dit_adapt *ad = &r->adapt;
    if (!ad->count || !ad->count[slot])
        return 0;
    mm_ctx *ctx = r->ctx;
    for (int i = ad->first[slot]; i < ad->first[slot] + ad->count[slot]; i++) {
        const mm_dit_adaln_piece *p = &ad->p[i];
        mm_tensor e = p->grid ? mm_dit_rows(&ad->grid_rows, m) : mm_dit_rows(&r->ws.temb, m);
        mm_tensor u = mm_tensor_wrap(ad->u.data, ad->u.device, MM_F32, 2, MM_SHAPE(m, p->rank));
        mm_tensor at = mm_tensor_transpose(&p->a, 0, 1);
        mm_gemm(ctx, &u, &e, &at, NULL, p->s, 0.0f); /* u = s·(A·e) */
        mm_tensor b = p->b;
        if (b.dtype != MM_F32) { /* B in f32 for the f32 GEMM */
            b = mm_tensor_wrap(ad->b32.data, ad->b32.device, MM_F32, 2, p->b.shape);
            mm_copy(ctx, &b, &p->b);
        }
        mm_tensor bt = mm_tensor_transpose(&b, 0, 1);
        mm_gemm(ctx, out32, &u, &bt, NULL, 1.0f, 1.0f); /* out32 += u·Bᵀ */
    }
    return mm_ctx_failed(ctx) ? -1 : 0;
}

/* ------------------------------------------------------------ PDD heads */

int mm_dit_request_bank_heads(const mm_dit_request *r)
{
    return r->adapt.bank[0] || r->adapt.bank[1] ? r->adapt.heads : 0;
}

const mm_linear *mm_dit_adapt_head(const mm_dit_request *r, bool audio)
{
    return r->adapt.bank[audio ? 1 : 0] ? &r->adapt.head[audio ? 1 : 0] : NULL;
}

static int blend(mm_dit_request *r, int side, const float *w, float strength, mm_error *err)
{
    const mm_lora_bank *b = r->adapt.bank[side];
    const mm_dit *d = r->dit;
    const int64_t heads = b->weight.shape[0], out = b->weight.shape[1], in = b->weight.shape[2];
    double sum = 0;
    for (int64_t l = 0; l < heads; l++) {
        if (!(w[l] >= 0.0f) || !isfinite(w[l]))
            return mm_fail(err, "PDD head weight %lld is %g; weights are finite and >= 0", (long long)l,
                           (double)w[l]);
        sum += w[l];
    }
    if (fabs(sum - 1.0) > 1e-4)
        return mm_fail(err, "PDD head weights sum to %g; a step's weights sum to 1", sum);
    double *acc = calloc((size_t)(out * in + out), sizeof(double));
    float *row = malloc(sizeof(float) * (size_t)in), *res = malloc(sizeof(float) * (size_t)(out * in + out));
    int rc = acc && row && res ? 0 : mm_fail(err, "out of memory");
    for (int64_t l = 0; rc == 0 && l < heads; l++) {
        if (w[l] == 0.0f)
            continue;
        for (int64_t o = 0; o < out; o++) {
            load_f32(&b->weight, (l * out + o) * in, in, row);
            for (int64_t k = 0; k < in; k++)
                acc[o * in + k] += (double)w[l] * row[k];
        }
        if (b->bias.data) {
            load_f32(&b->bias, l * out, out, row);
            for (int64_t o = 0; o < out; o++)
                acc[out * in + o] += (double)w[l] * row[o];
        }
    }
    if (rc == 0 && strength != 1.0f) { /* base + s·(blend − base) */
        mm_tensor bw, bb;
        const char *names[2][2] = {{"final_layer.video_out.weight", "final_layer.video_out.bias"},
                                   {"final_layer.audio_out.weight", "final_layer.audio_out.bias"}};
        if (mm_st_get(d->st, names[side][0], &bw, err) != 0 || mm_st_get(d->st, names[side][1], &bb, err) != 0) {
            rc = -1;
        } else {
            for (int64_t o = 0; o < out; o++) {
                load_f32(&bw, o * in, in, row);
                for (int64_t k = 0; k < in; k++)
                    acc[o * in + k] = row[k] + strength * (acc[o * in + k] - row[k]);
            }
            load_f32(&bb, 0, out, row);
            for (int64_t o = 0; o < out; o++)
                acc[out * in + o] = row[o] + strength * (acc[out * in + o] - row[o]);
        }
    }
    if (rc == 0) {
        for (int64_t i = 0; i < out * in + out; i++)
            res[i] = (float)acc[i];
        mm_tensor hw = mm_tensor_wrap(res, mm_cpu(), MM_F32, 2, MM_SHAPE(out, in));
        mm_tensor hb = mm_tensor_wrap(res + out * in, mm_cpu(), MM_F32, 1, MM_SHAPE(out));
        mm_copy(r->ctx, &r->adapt.head[side].weight, &hw);
        mm_copy(r->ctx, &r->adapt.head[side].bias, &hb);
        rc = mm_ctx_sync(r->ctx, err);
    }
    free(acc);
    free(row);
    free(res);
    return rc;
}

int mm_dit_request_set_head_weights(mm_dit_request *r, const float *video, const float *audio, mm_error *err)
{
    mm_dit_adapt *ad = &r->adapt;
    if (!ad->bank[0] && !ad->bank[1])
        return mm_fail(err, "the request's adapters carry no PDD head bank");
    const float *w[2] = {video, audio};
    for (int side = 0; side < 2; side++) {
        if (!ad->bank[side])
            continue;
        if (!w[side])
            return mm_fail(err, "no %s head weights for the PDD bank", side ? "audio" : "video");
        if (blend(r, side, w[side], ad->strength[side], err) != 0)
            return mm_error_prefix(err, "PDD %s head", side ? "audio" : "video");
    }
    ad->heads_set = true;
    return 0;
}
