#include "model/text/qwen3vl_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/text/mrope.h"

/* ---------------------------------------------------------------- loading */

/* A linear in whatever format the file stores (nvfp4 AWQ in the Comfy file),
 * checked against the shape the model needs and placed on the device. */
static int load_linear(mm_qwen3vl_text *m, mm_ctx *ctx, const mm_safetensors *st, const char *prefix, int64_t n,
                       int64_t k, mm_linear *out, mm_error *err)
{
    mm_linear host;
    if (mm_linear_load(&host, st, prefix, err) < 0 || mm_linear_expect(&host, n, k, err) < 0)
        return -1;
    if (m->weights.device.kind == MM_DEVICE_CPU)
        *out = host; /* views into the mapping */
    else if (mm_linear_to_device(out, &host, ctx, err) < 0)
        return -1;
    if (m->bf16_weights && out->format == MM_WEIGHT_NVFP4) {
        if (mm_linear_materialize(ctx, out, MM_BF16, err) < 0)
            return -1;
        /* The forward always feeds bf16 activations, so the packed copy on the
         * device is never read again: give its memory back. */
        if (m->weights.device.kind != MM_DEVICE_CPU) {
            mm_tensor_free(&out->weight);
            mm_tensor_free(&out->weight_scale);
        }
    }
    return 0;
}

static int load_norm(mm_qwen3vl_text *m, mm_ctx *ctx, const mm_safetensors *st, const char *name, int64_t n,
                     mm_tensor *t, mm_error *err)
{
    if (mm_st_get_expect(st, name, MM_BF16, 1, MM_SHAPE(n), t, err) < 0)
        return -1;
    return mm_resident_place(&m->weights, ctx, t, err);
}

int mm_qwen3vl_text_layers_in_file(const mm_safetensors *st)
{
    int n = 0;
    char prefix[64];
    for (;; n++) {
        snprintf(prefix, sizeof prefix, "model.layers.%d.", n);
        if (mm_st_count_prefix(st, prefix) == 0)
            return n;
    }
}

int mm_qwen3vl_text_load(mm_qwen3vl_text *m, const mm_qwen3vl_config *cfg, const mm_safetensors *st, int tap,
                         bool bf16_weights, mm_ctx *ctx, mm_error *err)
{
    memset(m, 0, sizeof *m);
    m->bf16_weights = bf16_weights;
    m->cfg = cfg->text;
    m->weights.device = mm_ctx_device(ctx);
    const mm_qwen3vl_text_config *c = &cfg->text;
    int in_file = mm_qwen3vl_text_layers_in_file(st);
    if (tap <= 0)
        tap = in_file;
    if (tap <= 0)
        return mm_fail(err, "%s: no decoder layers (model.layers.N.*) in the file", mm_st_path(st));
    if (tap > in_file)
        return mm_fail(err, "%s: hidden_states[%d] needs %d decoder layers, the file holds %d", mm_st_path(st), tap,
                       tap, in_file);
    if (tap > c->n_layers)
        return mm_fail(err, "hidden_states[%d] is past the model's %d layers", tap, c->n_layers);
    /* The checkpoint must stop where the conditioning is read: a final norm
     * would be applied to the tap by transformers-style stacks. */
    if (mm_st_find(st, "model.norm.weight") && tap == c->n_layers)
        return mm_fail(err, "%s: the tap is the last layer and the file has model.norm.weight; the conditioning is "
                            "the un-normalized residual stream",
                       mm_st_path(st));
    m->n_layers = tap;
    m->layers = calloc((size_t)tap, sizeof *m->layers);
    if (!m->layers)
        return mm_fail(err, "out of memory");
    if (mm_embedding_load(&m->embed, st, "model.embed_tokens", err) < 0)
        goto fail;
    if (!m->embed.quantized || m->embed.vocab != c->vocab || m->embed.dim != c->hidden) {
        mm_fail(err, "%s: model.embed_tokens: int8_tensorwise [%d, %d] is expected, the file has %s [%lld, %lld]",
                mm_st_path(st), c->vocab, c->hidden, m->embed.quantized ? "int8_tensorwise" : "an unquantized table",
                (long long)m->embed.vocab, (long long)m->embed.dim);
        goto fail;
    }
    const int64_t H = c->hidden, QW = (int64_t)c->n_heads * c->head_dim, KW = (int64_t)c->n_kv_heads * c->head_dim,
                  I = c->intermediate;
    for (int l = 0; l < tap; l++) {
        mm_qwen3vl_text_layer *L = &m->layers[l];
        char p[128], n[160];
#define NORM(field, suffix, size)                                                                                \
    (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), load_norm(m, ctx, st, n, size, &L->field, err))
#define LIN(field, suffix, nn, kk) (snprintf(p, sizeof p, "model.layers.%d.%s", l, suffix), load_linear(m, ctx, st, p, nn, kk, &L->field, err))
        if (NORM(input_norm, "input_layernorm.weight", H) < 0 || NORM(post_norm, "post_attention_layernorm.weight", H) < 0 ||
            NORM(q_norm, "self_attn.q_norm.weight", c->head_dim) < 0 ||
            NORM(k_norm, "self_attn.k_norm.weight", c->head_dim) < 0 || LIN(q, "self_attn.q_proj", QW, H) < 0 ||
            LIN(k, "self_attn.k_proj", KW, H) < 0 || LIN(v, "self_attn.v_proj", KW, H) < 0 ||
            LIN(o, "self_attn.o_proj", H, QW) < 0 || LIN(gate, "mlp.gate_proj", I, H) < 0 ||
            LIN(up, "mlp.up_proj", I, H) < 0 || LIN(down, "mlp.down_proj", H, I) < 0) {
            mm_error_prefix(err, "%s: layer %d", mm_st_path(st), l);
            goto fail;
        }
#undef NORM
#undef LIN
    }
    return 0;
fail:
    mm_qwen3vl_text_free(m);
    return -1;
}

void mm_qwen3vl_text_free(mm_qwen3vl_text *m)
{
    for (int l = 0; m->layers && l < m->n_layers; l++) {
        mm_qwen3vl_text_layer *L = &m->layers[l];
        mm_linear *lins[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++)
            mm_linear_free(lins[i]);
    }
    mm_resident_free(&m->weights);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- forward */

/* The AWQ-scaled input of a linear, bf16(x ⊙ bf16(s)), as the forward computes
 * it inside mm_linear_forward — recomputed only for the debug tap. */
static void tap_awq_input(mm_ctx *ctx, const mm_qwen3vl_text_debug *dbg, const char *name, const mm_linear *lin,
                          const mm_tensor *x)
{
    if (!dbg || !dbg->tap || !lin->pre_quant_scale.data)
        return;
    mm_tensor xs;
    mm_error e = {{0}};
    if (mm_tensor_alloc(&xs, mm_ctx_device(ctx), MM_BF16, 2, x->shape, &e) < 0)
        return;
    mm_tensor s2 = mm_tensor_unflatten(&lin->pre_quant_scale, 0, 2, MM_SHAPE(1, lin->in_features));
    mm_tensor se = mm_tensor_expand(&s2, 2, x->shape);
    mm_mul(ctx, &xs, x, &se);
    if (mm_ctx_sync(ctx, &e) == 0)
        dbg->tap(dbg->user, name, -1, &xs);
    mm_tensor_free(&xs);
}

static int alloc_dev(mm_tensor *t, mm_device dev, mm_dtype dt, int ndim, const int64_t *shape, mm_error *err)
{
    return mm_tensor_alloc(t, dev, dt, ndim, shape, err);
}

static void tap(const mm_qwen3vl_text_debug *dbg, const char *name, int index, const mm_tensor *t)
{
    if (dbg && dbg->tap)
        dbg->tap(dbg->user, name, index, t);
}

int mm_qwen3vl_text_forward(mm_qwen3vl_text *m, mm_ctx *ctx, const int32_t *ids, const int64_t *pos, int64_t L,
                            const mm_tensor *vision, const int32_t *vis_rows, int64_t n_vis,
                            const mm_tensor *deepstack, int n_deepstack, mm_tensor *out,
                            const mm_qwen3vl_text_debug *dbg, mm_error *err)
{
    const mm_qwen3vl_text_config *c = &m->cfg;
    const mm_device dev = mm_ctx_device(ctx);
    const int64_t H = c->hidden, HD = c->head_dim, NH = c->n_heads, NKV = c->n_kv_heads, QW = NH * HD,
                  KW = NKV * HD, I = c->intermediate, V = c->vocab;
    if (L <= 0)
        return mm_fail(err, "text forward: no rows");
    if (n_deepstack > m->n_layers)
        return mm_fail(err, "text forward: %d deepstack tensors but only %d layers", n_deepstack, m->n_layers);
    if (n_vis > 0 && (!vision || !vis_rows))
        return mm_fail(err, "text forward: %lld vision rows without vision tokens", (long long)n_vis);
    for (int64_t i = 0; i < L; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return mm_fail(err, "text forward: token id %d at row %lld is outside the %lld-row embedding", ids[i],
                           (long long)i, (long long)V);
    for (int64_t r = 0; r < n_vis; r++)
        if (vis_rows[r] < 0 || vis_rows[r] >= L || (r && vis_rows[r] <= vis_rows[r - 1]))
            return mm_fail(err, "text forward: vision row %lld (%d) is out of order or range", (long long)r,
                           vis_rows[r]);

    int rc = -1;
    float *host = NULL, *cosf32 = NULL, *sinf32 = NULL;
    uint16_t *cosb = NULL, *sinb = NULL;
    mm_tensor x = {0}, h = {0}, q = {0}, k = {0}, v = {0}, att = {0}, y = {0}, g = {0}, u = {0}, cs = {0}, sn = {0},
              idx = {0};

    /* Embedding rows on the host: bf16(float(q) · scale), kept as f32 values. */
    host = malloc(sizeof(float) * (size_t)(L * H));
    if (!host) {
        mm_fail(err, "text forward: out of memory");
        goto out;
    }
    {
        const int8_t *tab = m->embed.weight.data;
        const float *sc = m->embed.scale.data;
        for (int64_t i = 0; i < L; i++) {
            const int8_t *row = tab + (int64_t)ids[i] * H;
            float scale = sc[ids[i]];
            for (int64_t j = 0; j < H; j++)
                host[i * H + j] = mm_round_bf16((float)row[j] * scale);
        }
    }
    mm_tensor host_x = mm_tensor_wrap(host, mm_cpu(), MM_F32, 2, MM_SHAPE(L, H));
    tap(dbg, "embed_rows", -1, &host_x);

    /* MRoPE tables: f32 angles, cos/sin rounded to bf16 as the reference applies them. */
    cosf32 = malloc(sizeof(float) * (size_t)(L * HD));
    sinf32 = malloc(sizeof(float) * (size_t)(L * HD));
    cosb = malloc(sizeof(uint16_t) * (size_t)(L * HD));
    sinb = malloc(sizeof(uint16_t) * (size_t)(L * HD));
    if (!cosf32 || !sinf32 || !cosb || !sinb) {
        mm_fail(err, "text forward: out of memory");
        goto out;
    }
    if (mm_mrope_tables(c, pos, L, cosf32, sinf32, err) < 0)
        goto out;
    for (int64_t i = 0; i < L * HD; i++) {
        cosb[i] = mm_f32_to_bf16(cosf32[i]);
        sinb[i] = mm_f32_to_bf16(sinf32[i]);
    }
    mm_tensor host_cos = mm_tensor_wrap(cosb, mm_cpu(), MM_BF16, 2, MM_SHAPE(L, HD));
    mm_tensor host_sin = mm_tensor_wrap(sinb, mm_cpu(), MM_BF16, 2, MM_SHAPE(L, HD));
    tap(dbg, "rope_cos", -1, &host_cos);
    tap(dbg, "rope_sin", -1, &host_sin);

    if (alloc_dev(&x, dev, MM_F32, 2, MM_SHAPE(L, H), err) < 0 ||
        alloc_dev(&h, dev, MM_BF16, 2, MM_SHAPE(L, H), err) < 0 ||
        alloc_dev(&q, dev, MM_BF16, 3, MM_SHAPE(L, NH, HD), err) < 0 ||
        alloc_dev(&k, dev, MM_BF16, 3, MM_SHAPE(L, NKV, HD), err) < 0 ||
        alloc_dev(&v, dev, MM_BF16, 3, MM_SHAPE(L, NKV, HD), err) < 0 ||
        alloc_dev(&att, dev, MM_BF16, 3, MM_SHAPE(L, NH, HD), err) < 0 ||
        alloc_dev(&y, dev, MM_BF16, 2, MM_SHAPE(L, H), err) < 0 ||
        alloc_dev(&g, dev, MM_BF16, 2, MM_SHAPE(L, I), err) < 0 ||
        alloc_dev(&u, dev, MM_BF16, 2, MM_SHAPE(L, I), err) < 0 ||
        alloc_dev(&cs, dev, MM_BF16, 2, MM_SHAPE(L, HD), err) < 0 ||
        alloc_dev(&sn, dev, MM_BF16, 2, MM_SHAPE(L, HD), err) < 0)
        goto out;
    mm_copy(ctx, &x, &host_x);
    mm_copy(ctx, &cs, &host_cos);
    mm_copy(ctx, &sn, &host_sin);
    if (n_vis > 0) {
        if (alloc_dev(&idx, dev, MM_I32, 1, MM_SHAPE(n_vis), err) < 0)
            goto out;
        mm_tensor host_idx = mm_tensor_wrap((void *)vis_rows, mm_cpu(), MM_I32, 1, MM_SHAPE(n_vis));
        mm_copy(ctx, &idx, &host_idx);
        mm_scatter_rows(ctx, &x, vision, &idx);
    }
    if (mm_ctx_error(ctx, err) < 0)
        goto out;
    tap(dbg, "inputs_embeds", -1, &x);

    mm_tensor q2 = mm_tensor_wrap(q.data, dev, MM_BF16, 2, MM_SHAPE(L, QW));
    mm_tensor k2 = mm_tensor_wrap(k.data, dev, MM_BF16, 2, MM_SHAPE(L, KW));
    mm_tensor v2 = mm_tensor_wrap(v.data, dev, MM_BF16, 2, MM_SHAPE(L, KW));
    mm_tensor att2 = mm_tensor_wrap(att.data, dev, MM_BF16, 2, MM_SHAPE(L, QW));
    mm_attn_params ap = {.scale = 1.0f / sqrtf((float)HD), .causal = true};
    for (int l = 0; l < m->n_layers; l++) {
        const mm_qwen3vl_text_layer *W = &m->layers[l];
        const mm_qwen3vl_text_debug *d0 = l == 0 ? dbg : NULL;
        tap(dbg, "layer_in", l, &x);
        /* attention */
        mm_rmsnorm(ctx, &h, &x, &W->input_norm, c->rms_eps);
        mm_linear_forward(ctx, &q2, &h, &W->q);
        mm_linear_forward(ctx, &k2, &h, &W->k);
        mm_linear_forward(ctx, &v2, &h, &W->v);
        mm_rmsnorm(ctx, &q, &q, &W->q_norm, c->rms_eps);
        mm_rmsnorm(ctx, &k, &k, &W->k_norm, c->rms_eps);
        mm_rope(ctx, &q, &q, &cs, &sn, (int)HD);
        mm_rope(ctx, &k, &k, &cs, &sn, (int)HD);
        mm_attention(ctx, &att, &q, &k, &v, &ap);
        tap(d0, "o_proj0.x", -1, &att2);
        tap_awq_input(ctx, d0, "o_proj0.x_awq", &W->o, &att2);
        mm_linear_forward(ctx, &y, &att2, &W->o);
        tap(d0, "o_proj0.y", -1, &y);
        mm_add(ctx, &x, &x, &y);
        /* MLP */
        mm_rmsnorm(ctx, &h, &x, &W->post_norm, c->rms_eps);
        mm_linear_forward(ctx, &g, &h, &W->gate);
        mm_linear_forward(ctx, &u, &h, &W->up);
        mm_glu(ctx, &g, &g, &u, MM_ACT_SILU);
        mm_linear_forward(ctx, &y, &g, &W->down);
        mm_add(ctx, &x, &x, &y);
        tap(dbg, "layer_out", l, &x);
        if (l < n_deepstack && n_vis > 0) {
            tap(dbg, "deepstack_injected", l, &deepstack[l]);
            mm_scatter_add_rows(ctx, &x, &deepstack[l], &idx);
        }
        if (mm_ctx_error(ctx, err) < 0) {
            mm_error_prefix(err, "text layer %d", l);
            goto out;
        }
    }
    mm_copy(ctx, out, &x);
    rc = mm_ctx_error(ctx, err);
out:
    /* Kernels queued on the stream may still read the scratch being freed. */
    if (rc == 0)
        rc = mm_ctx_sync(ctx, err);
    else
        mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&x), mm_tensor_free(&h), mm_tensor_free(&q), mm_tensor_free(&k), mm_tensor_free(&v);
    mm_tensor_free(&att), mm_tensor_free(&y), mm_tensor_free(&g), mm_tensor_free(&u), mm_tensor_free(&cs);
    mm_tensor_free(&sn), mm_tensor_free(&idx);
    free(host), free(cosf32), free(sinf32), free(cosb), free(sinb);
    return rc;
}
