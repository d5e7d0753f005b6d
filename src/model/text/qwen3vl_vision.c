#include "model/text/qwen3vl_vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- loading */

static int get(mm_qwen3vl_vision *m, mm_ctx *ctx, const mm_safetensors *st, const char *name, int ndim,
               const int64_t *shape, mm_tensor *t, mm_error *err)
{
    if (mm_st_get_expect(st, name, MM_BF16, ndim, shape, t, err) < 0)
        return -1;
    return mm_resident_place(&m->weights, ctx, t, err);
}

static int load_merger(mm_qwen3vl_vision *m, mm_ctx *ctx, const mm_safetensors *st, const char *prefix,
                       bool postshuffle, mm_qwen3vl_merger *g, mm_error *err)
{
    const mm_qwen3vl_vision_config *c = &m->cfg;
    const int64_t W = (int64_t)c->hidden * c->merge * c->merge, norm = postshuffle ? W : c->hidden;
    char n[160];
    g->postshuffle = postshuffle;
#define GET(field, suffix, nd, ...)                                                                              \
    (snprintf(n, sizeof n, "%s.%s", prefix, suffix), get(m, ctx, st, n, nd, MM_SHAPE(__VA_ARGS__), &g->field, err))
    if (GET(norm_w, "norm.weight", 1, norm) < 0 || GET(norm_b, "norm.bias", 1, norm) < 0 ||
        GET(fc1_w, "linear_fc1.weight", 2, W, W) < 0 || GET(fc1_b, "linear_fc1.bias", 1, W) < 0 ||
        GET(fc2_w, "linear_fc2.weight", 2, c->out_hidden, W) < 0 ||
        GET(fc2_b, "linear_fc2.bias", 1, c->out_hidden) < 0)
        return -1;
#undef GET
    return 0;
}

int mm_qwen3vl_vision_load(mm_qwen3vl_vision *m, const mm_qwen3vl_config *cfg, const mm_safetensors *st,
                           mm_ctx *ctx, mm_error *err)
{
    memset(m, 0, sizeof *m);
    m->cfg = cfg->vision;
    m->weights.device = mm_ctx_device(ctx);
    const mm_qwen3vl_vision_config *c = &m->cfg;
    const int64_t D = c->hidden, I = c->intermediate, P = c->patch, T = c->temporal_patch, C = c->in_channels;
    m->blocks = calloc((size_t)c->depth, sizeof *m->blocks);
    m->deepstack = calloc((size_t)(c->n_deepstack ? c->n_deepstack : 1), sizeof *m->deepstack);
    if (!m->blocks || !m->deepstack) {
        mm_fail(err, "out of memory");
        goto fail;
    }
    mm_tensor pw;
    if (mm_st_get_expect(st, "visual.patch_embed.proj.weight", MM_BF16, 5, MM_SHAPE(D, C, T, P, P), &pw, err) < 0 ||
        mm_tensor_reshape(&m->patch_w, &pw, 2, MM_SHAPE(D, C * T * P * P), err) < 0 ||
        mm_resident_place(&m->weights, ctx, &m->patch_w, err) < 0 ||
        get(m, ctx, st, "visual.patch_embed.proj.bias", 1, MM_SHAPE(D), &m->patch_b, err) < 0 ||
        mm_st_get_expect(st, "visual.pos_embed.weight", MM_BF16, 2, MM_SHAPE(c->num_pos_embed, D), &m->pos_table,
                         err) < 0)
        goto fail;
    for (int b = 0; b < c->depth; b++) {
        mm_qwen3vl_vision_block *B = &m->blocks[b];
        char n[160];
#define GET(field, suffix, nd, ...)                                                                              \
    (snprintf(n, sizeof n, "visual.blocks.%d.%s", b, suffix), get(m, ctx, st, n, nd, MM_SHAPE(__VA_ARGS__), &B->field, err))
        if (GET(norm1_w, "norm1.weight", 1, D) < 0 || GET(norm1_b, "norm1.bias", 1, D) < 0 ||
            GET(norm2_w, "norm2.weight", 1, D) < 0 || GET(norm2_b, "norm2.bias", 1, D) < 0 ||
            GET(qkv_w, "attn.qkv.weight", 2, 3 * D, D) < 0 || GET(qkv_b, "attn.qkv.bias", 1, 3 * D) < 0 ||
            GET(proj_w, "attn.proj.weight", 2, D, D) < 0 || GET(proj_b, "attn.proj.bias", 1, D) < 0 ||
            GET(fc1_w, "mlp.linear_fc1.weight", 2, I, D) < 0 || GET(fc1_b, "mlp.linear_fc1.bias", 1, I) < 0 ||
            GET(fc2_w, "mlp.linear_fc2.weight", 2, D, I) < 0 || GET(fc2_b, "mlp.linear_fc2.bias", 1, D) < 0)
            goto fail;
#undef GET
    }
    if (load_merger(m, ctx, st, "visual.merger", false, &m->merger, err) < 0)
        goto fail;
    for (int j = 0; j < c->n_deepstack; j++) {
        char p[96];
        snprintf(p, sizeof p, "visual.deepstack_merger_list.%d", j);
        if (load_merger(m, ctx, st, p, true, &m->deepstack[j], err) < 0)
            goto fail;
    }
    return 0;
fail:
    mm_error_prefix(err, "%s: vision tower", mm_st_path(st));
    mm_qwen3vl_vision_free(m);
    return -1;
}

void mm_qwen3vl_vision_free(mm_qwen3vl_vision *m)
{
    mm_resident_free(&m->weights);
    free(m->blocks);
    free(m->deepstack);
    memset(m, 0, sizeof *m);
}

/* ----------------------------------------------------------- host tables */

/* torch.linspace(0, end, n) on the CPU in f32: start + step·i for the first
 * half, end − step·(n−1−i) for the second. */
static float linspace_at(float end, int64_t n, int64_t i)
{
    if (n == 1)
        return 0.0f;
    float step = end / (float)(n - 1);
    return i < n / 2 ? step * (float)i : end - step * (float)(n - 1 - i);
}

int mm_qwen3vl_vision_pos_embed(const mm_qwen3vl_vision *m, const int64_t (*grids)[3], int n, float *out,
                                mm_error *err)
{
    const mm_qwen3vl_vision_config *c = &m->cfg;
    const int side = mm_qwen3vl_pos_side(c);
    const int64_t D = c->hidden, M = c->merge;
    const uint16_t *tab = m->pos_table.data;
    float *row = malloc(sizeof(float) * (size_t)D);
    if (!row)
        return mm_fail(err, "vision: out of memory");
    for (int g = 0; g < n; g++) {
        const int64_t t = grids[g][0], h = grids[g][1], w = grids[g][2];
        /* merge-window order: window (wr, wc), intra (ir, ic) → patch (wr·M+ir, wc·M+ic) */
        for (int64_t wr = 0; wr < h / M; wr++)
            for (int64_t wc = 0; wc < w / M; wc++)
                for (int64_t ir = 0; ir < M; ir++)
                    for (int64_t ic = 0; ic < M; ic++) {
                        int64_t r = wr * M + ir, q = wc * M + ic;
                        float hi = linspace_at((float)(side - 1), h, r), wi = linspace_at((float)(side - 1), w, q);
                        int hf = (int)hi, wf = (int)wi;
                        int hc = hf + 1 < side ? hf + 1 : side - 1, wcl = wf + 1 < side ? wf + 1 : side - 1;
                        float dh = hi - (float)hf, dw = wi - (float)wf;
                        float w00 = (1.0f - dh) * (1.0f - dw), w01 = (1.0f - dh) * dw, w10 = dh * (1.0f - dw),
                              w11 = dh * dw;
                        const uint16_t *t00 = tab + (int64_t)(hf * side + wf) * D, *t01 = tab + (int64_t)(hf * side + wcl) * D,
                                       *t10 = tab + (int64_t)(hc * side + wf) * D, *t11 = tab + (int64_t)(hc * side + wcl) * D;
                        for (int64_t d = 0; d < D; d++) {
                            /* four f32 products summed in the reference's tap order, one bf16 rounding */
                            float s = mm_bf16_to_f32(t00[d]) * w00;
                            s = s + mm_bf16_to_f32(t01[d]) * w01;
                            s = s + mm_bf16_to_f32(t10[d]) * w10;
                            s = s + mm_bf16_to_f32(t11[d]) * w11;
                            row[d] = mm_round_bf16(s);
                        }
                        int64_t k = (wr * (w / M) + wc) * M * M + ir * M + ic;
                        for (int64_t ti = 0; ti < t; ti++)
                            memcpy(out + (ti * h * w + k) * D, row, sizeof(float) * (size_t)D);
                    }
        out += t * h * w * D;
    }
    free(row);
    return 0;
}

int mm_qwen3vl_vision_rotary(const mm_qwen3vl_vision_config *c, const int64_t (*grids)[3], int n, float *cos_out,
                             float *sin_out, mm_error *err)
{
    const int hd = c->hidden / c->n_heads, quarter = hd / 4, half = hd / 2;
    const int64_t M = c->merge;
    float inv[64];
    if (quarter > 64)
        return mm_fail(err, "vision: head_dim %d too large for the rotary table", hd);
    /* Qwen3VLVisionRotaryEmbedding(dim = head_dim/2): 1 / 10000^(arange(0, dim, 2)/dim) in f32. */
    for (int j = 0; j < quarter; j++)
        inv[j] = 1.0f / powf(10000.0f, (float)(2 * j) / (float)half);
    int64_t k = 0;
    for (int g = 0; g < n; g++) {
        const int64_t t = grids[g][0], h = grids[g][1], w = grids[g][2];
        for (int64_t ti = 0; ti < t; ti++)
            for (int64_t wr = 0; wr < h / M; wr++)
                for (int64_t wc = 0; wc < w / M; wc++)
                    for (int64_t ir = 0; ir < M; ir++)
                        for (int64_t ic = 0; ic < M; ic++, k++) {
                            float r = (float)(wr * M + ir), q = (float)(wc * M + ic);
                            float *cs = cos_out + k * hd, *sn = sin_out + k * hd;
                            for (int j = 0; j < quarter; j++) {
                                float a = r * inv[j], b = q * inv[j];
                                cs[j] = cs[j + half] = cosf(a);
                                sn[j] = sn[j + half] = sinf(a);
                                cs[quarter + j] = cs[quarter + j + half] = cosf(b);
                                sn[quarter + j] = sn[quarter + j + half] = sinf(b);
                            }
                        }
    }
    return 0;
}

/* ---------------------------------------------------------------- forward */

static void tap(const mm_qwen3vl_vision_debug *dbg, const char *name, int index, const mm_tensor *t)
{
    if (dbg && dbg->tap)
        dbg->tap(dbg->user, name, index, t);
}

/* out = x · Wᵀ + b */
static int linear(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w, const mm_tensor *b)
{
    mm_tensor wt = mm_tensor_transpose(w, 0, 1);
    return mm_matmul(ctx, out, x, &wt, b);
}

/* LayerNorm → fc1 → GELU(erf) → fc2 over 2×2 windows. x: f32 [N, D]. */
static int run_merger(mm_ctx *ctx, const mm_qwen3vl_vision_config *c, const mm_qwen3vl_merger *g, const mm_tensor *x,
                      mm_tensor *out, mm_error *err)
{
    const mm_device dev = mm_ctx_device(ctx);
    const int64_t N = x->shape[0], D = c->hidden, W = D * c->merge * c->merge, R = N / (c->merge * c->merge);
    mm_tensor h = {0}, f = {0};
    int rc = -1;
    /* h and f are freed on return: the merger waits for its kernels. */
    if (mm_tensor_alloc(&h, dev, MM_BF16, 2, MM_SHAPE(R, W), err) < 0 ||
        mm_tensor_alloc(&f, dev, MM_BF16, 2, MM_SHAPE(R, W), err) < 0)
        goto out;
    if (g->postshuffle) {
        mm_tensor xw = mm_tensor_wrap(x->data, dev, x->dtype, 2, MM_SHAPE(R, W));
        mm_layernorm(ctx, &h, &xw, &g->norm_w, &g->norm_b, 1e-6f);
    } else {
        mm_tensor hp = mm_tensor_wrap(h.data, dev, MM_BF16, 2, MM_SHAPE(N, D));
        mm_layernorm(ctx, &hp, x, &g->norm_w, &g->norm_b, 1e-6f);
    }
    linear(ctx, &f, &h, &g->fc1_w, &g->fc1_b);
    mm_activation(ctx, &f, &f, MM_ACT_GELU_ERF);
    linear(ctx, out, &f, &g->fc2_w, &g->fc2_b);
    rc = mm_ctx_sync(ctx, err);
out:
    mm_tensor_free(&h);
    mm_tensor_free(&f);
    return rc;
}

/* The inputs' shapes against the config: *patches in all, *segments (one
 * per temporal slice, attention stays inside each). */
static int check_inputs(const mm_qwen3vl_vision_config *c, const mm_vision_pixels *inputs, int n_inputs,
                        int64_t *patches, int64_t *segments, mm_error *err)
{
    const int64_t PD = (int64_t)c->in_channels * c->temporal_patch * c->patch * c->patch;
    int64_t N = 0, n_seg = 0;
    for (int i = 0; i < n_inputs; i++) {
        const mm_vision_pixels *in = &inputs[i];
        if (in->patch_dim != PD || in->grid[0] * in->grid[1] * in->grid[2] != in->n_patches || in->grid[1] % c->merge ||
            in->grid[2] % c->merge)
            return mm_fail(err, "vision: input %d has %lld patches of %lld values with grid (%lld, %lld, %lld); "
                                "patches of %lld values on a grid divisible by %d are expected",
                           i, (long long)in->n_patches, (long long)in->patch_dim, (long long)in->grid[0],
                           (long long)in->grid[1], (long long)in->grid[2], (long long)PD, c->merge);
        N += in->n_patches;
        n_seg += in->grid[0];
    }
    if (N == 0)
        return mm_fail(err, "vision: no patches");
    *patches = N;
    *segments = n_seg;
    return 0;
}

/* The processor's f32 pixels as the model's bf16 (the model casts them),
 * the grids, and the segment offsets of the attention. */
static void pack_inputs(const mm_vision_pixels *inputs, int n_inputs, int64_t PD, uint16_t *px16, int64_t (*grids)[3],
                        int32_t *seg)
{
    int64_t o = 0, s = 0;
    seg[0] = 0;
    for (int i = 0; i < n_inputs; i++) {
        const mm_vision_pixels *in = &inputs[i];
        for (int64_t e = 0; e < in->n_patches * PD; e++)
            px16[o * PD + e] = mm_f32_to_bf16(in->data[e]);
        memcpy(grids[i], in->grid, sizeof grids[i]);
        for (int64_t t = 0; t < in->grid[0]; t++, s++)
            seg[s + 1] = (int32_t)(seg[s] + in->grid[1] * in->grid[2]);
        o += in->n_patches;
    }
}

int mm_qwen3vl_vision_forward(mm_qwen3vl_vision *m, mm_ctx *ctx, const mm_vision_pixels *inputs, int n_inputs,
                              mm_dtype out_dtype, mm_tensor *merged, mm_tensor *deepstack,
                              const mm_qwen3vl_vision_debug *dbg, mm_error *err)
{
    const mm_qwen3vl_vision_config *c = &m->cfg;
    const mm_device dev = mm_ctx_device(ctx);
    const int64_t D = c->hidden, I = c->intermediate, NH = c->n_heads, HD = D / NH, M2 = (int64_t)c->merge * c->merge;
    const int64_t PD = (int64_t)c->in_channels * c->temporal_patch * c->patch * c->patch;
    memset(merged, 0, sizeof *merged);
    for (int j = 0; j < c->n_deepstack; j++)
        memset(&deepstack[j], 0, sizeof deepstack[j]);
    int64_t N = 0, n_seg = 0;
    if (check_inputs(c, inputs, n_inputs, &N, &n_seg, err) < 0)
        return -1;
    const int64_t R = N / M2;

    int rc = -1;
    uint16_t *px16 = NULL, *pos16 = NULL;
    float *posf = NULL, *cosf_ = NULL, *sinf_ = NULL;
    int64_t (*grids)[3] = NULL;
    int32_t *seg = NULL;
    mm_tensor px = {0}, pe = {0}, pos = {0}, x = {0}, h = {0}, qkv = {0}, qr = {0}, kr = {0}, att = {0}, y = {0},
              f = {0}, cs = {0}, sn = {0};

    px16 = malloc(sizeof(uint16_t) * (size_t)(N * PD));
    posf = malloc(sizeof(float) * (size_t)(N * D));
    pos16 = malloc(sizeof(uint16_t) * (size_t)(N * D));
    cosf_ = malloc(sizeof(float) * (size_t)(N * HD));
    sinf_ = malloc(sizeof(float) * (size_t)(N * HD));
    grids = malloc(sizeof *grids * (size_t)n_inputs);
    seg = malloc(sizeof(int32_t) * (size_t)(n_seg + 1));
    if (!px16 || !posf || !pos16 || !cosf_ || !sinf_ || !grids || !seg) {
        mm_fail(err, "vision: out of memory");
        goto out;
    }
    pack_inputs(inputs, n_inputs, PD, px16, grids, seg);
    if (mm_qwen3vl_vision_pos_embed(m, (const int64_t(*)[3])grids, n_inputs, posf, err) < 0 ||
        mm_qwen3vl_vision_rotary(c, (const int64_t(*)[3])grids, n_inputs, cosf_, sinf_, err) < 0)
        goto out;
    for (int64_t e = 0; e < N * D; e++)
        pos16[e] = mm_f32_to_bf16(posf[e]);

    if (mm_tensor_alloc(&px, dev, MM_BF16, 2, MM_SHAPE(N, PD), err) < 0 ||
        mm_tensor_alloc(&pe, dev, MM_BF16, 2, MM_SHAPE(N, D), err) < 0 ||
        mm_tensor_alloc(&pos, dev, MM_BF16, 2, MM_SHAPE(N, D), err) < 0 ||
        mm_tensor_alloc(&x, dev, MM_F32, 2, MM_SHAPE(N, D), err) < 0 ||
        mm_tensor_alloc(&h, dev, MM_BF16, 2, MM_SHAPE(N, D), err) < 0 ||
        mm_tensor_alloc(&qkv, dev, MM_BF16, 2, MM_SHAPE(N, 3 * D), err) < 0 ||
        mm_tensor_alloc(&qr, dev, MM_BF16, 3, MM_SHAPE(N, NH, HD), err) < 0 ||
        mm_tensor_alloc(&kr, dev, MM_BF16, 3, MM_SHAPE(N, NH, HD), err) < 0 ||
        mm_tensor_alloc(&att, dev, MM_BF16, 3, MM_SHAPE(N, NH, HD), err) < 0 ||
        mm_tensor_alloc(&y, dev, MM_BF16, 2, MM_SHAPE(N, D), err) < 0 ||
        mm_tensor_alloc(&f, dev, MM_BF16, 2, MM_SHAPE(N, I), err) < 0 ||
        mm_tensor_alloc(&cs, dev, MM_F32, 2, MM_SHAPE(N, HD), err) < 0 ||
        mm_tensor_alloc(&sn, dev, MM_F32, 2, MM_SHAPE(N, HD), err) < 0 ||
        mm_tensor_alloc(merged, dev, out_dtype, 2, MM_SHAPE(R, c->out_hidden), err) < 0)
        goto out;
    for (int j = 0; j < c->n_deepstack; j++)
        if (mm_tensor_alloc(&deepstack[j], dev, out_dtype, 2, MM_SHAPE(R, c->out_hidden), err) < 0)
            goto out;
    mm_tensor hpx = mm_tensor_wrap(px16, mm_cpu(), MM_BF16, 2, MM_SHAPE(N, PD));
    mm_tensor hpos = mm_tensor_wrap(pos16, mm_cpu(), MM_BF16, 2, MM_SHAPE(N, D));
    mm_tensor hcos = mm_tensor_wrap(cosf_, mm_cpu(), MM_F32, 2, MM_SHAPE(N, HD));
    mm_tensor hsin = mm_tensor_wrap(sinf_, mm_cpu(), MM_F32, 2, MM_SHAPE(N, HD));
    mm_copy(ctx, &px, &hpx);
    mm_copy(ctx, &pos, &hpos);
    mm_copy(ctx, &cs, &hcos);
    mm_copy(ctx, &sn, &hsin);

    linear(ctx, &pe, &px, &m->patch_w, &m->patch_b);
    tap(dbg, "patch_embed", -1, &pe);
    tap(dbg, "pos_embed", -1, &pos);
    mm_add(ctx, &x, &pe, &pos);
    tap(dbg, "block0_in", -1, &x);
    tap(dbg, "rotary_cos", -1, &cs);
    tap(dbg, "rotary_sin", -1, &sn);

    mm_tensor qv = mm_tensor_as_strided(&qkv, 3, MM_SHAPE(N, NH, HD), MM_SHAPE(3 * D, HD, 1));
    mm_tensor kv = qv, vv = qv;
    kv.data = (uint16_t *)qkv.data + D;
    vv.data = (uint16_t *)qkv.data + 2 * D;
    mm_tensor att2 = mm_tensor_wrap(att.data, dev, MM_BF16, 2, MM_SHAPE(N, D));
    mm_attn_params ap = {.scale = 1.0f / sqrtf((float)HD), .causal = false, .seg_offsets = seg, .n_seg = (int)n_seg};
    int next_ds = 0;
    for (int b = 0; b < c->depth; b++) {
        const mm_qwen3vl_vision_block *B = &m->blocks[b];
        mm_layernorm(ctx, &h, &x, &B->norm1_w, &B->norm1_b, 1e-6f);
        linear(ctx, &qkv, &h, &B->qkv_w, &B->qkv_b);
        mm_rope(ctx, &qr, &qv, &cs, &sn, (int)HD);
        mm_rope(ctx, &kr, &kv, &cs, &sn, (int)HD);
        mm_attention(ctx, &att, &qr, &kr, &vv, &ap);
        linear(ctx, &y, &att2, &B->proj_w, &B->proj_b);
        mm_add(ctx, &x, &x, &y);
        mm_layernorm(ctx, &h, &x, &B->norm2_w, &B->norm2_b, 1e-6f);
        linear(ctx, &f, &h, &B->fc1_w, &B->fc1_b);
        mm_activation(ctx, &f, &f, c->gelu_tanh ? MM_ACT_GELU_TANH : MM_ACT_GELU_ERF);
        linear(ctx, &y, &f, &B->fc2_w, &B->fc2_b);
        mm_add(ctx, &x, &x, &y);
        if (b == 0)
            tap(dbg, "block0_out", -1, &x);
        if (mm_ctx_error(ctx, err) < 0) {
            mm_error_prefix(err, "vision block %d", b);
            goto out;
        }
        for (int j = 0; j < c->n_deepstack; j++)
            if (c->deepstack[j] == b) {
                if (run_merger(ctx, c, &m->deepstack[j], &x, &deepstack[j], err) < 0) {
                    mm_error_prefix(err, "vision deepstack merger %d", j);
                    goto out;
                }
                next_ds++;
            }
    }
    tap(dbg, "blocks_out", -1, &x);
    if (run_merger(ctx, c, &m->merger, &x, merged, err) < 0) {
        mm_error_prefix(err, "vision merger");
        goto out;
    }
    tap(dbg, "merger_out", -1, merged);
    for (int j = 0; j < c->n_deepstack; j++)
        tap(dbg, "deepstack", j, &deepstack[j]);
    rc = mm_ctx_sync(ctx, err);
    (void)next_ds;
out:
    if (rc < 0) {
        mm_ctx_sync(ctx, NULL); /* kernels may still read what is freed below */
        mm_tensor_free(merged);
        for (int j = 0; j < c->n_deepstack; j++)
            mm_tensor_free(&deepstack[j]);
    }
    mm_tensor_free(&px), mm_tensor_free(&pe), mm_tensor_free(&pos), mm_tensor_free(&x), mm_tensor_free(&h);
    mm_tensor_free(&qkv), mm_tensor_free(&qr), mm_tensor_free(&kr), mm_tensor_free(&att), mm_tensor_free(&y);
    mm_tensor_free(&f), mm_tensor_free(&cs), mm_tensor_free(&sn);
    free(px16), free(pos16), free(posf), free(cosf_), free(sinf_), free(grids), free(seg);
    return rc;
}
