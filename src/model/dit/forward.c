/* The forward driver: model load, per-request state, one forward per step. */
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "core/dtype.h"
#include "model/dit/model.h"

int mm_dit_load(mm_dit **out, const char *path, mm_ctx *ctx, const mm_dit_config_overrides *ov, mm_error *err)
{
    return mm_dit_load_ex(out, path, ctx, ov, NULL, err);
}

int mm_dit_load_ex(mm_dit **out, const char *path, mm_ctx *ctx, const mm_dit_config_overrides *ov,
                   const mm_dit_residency *res, mm_error *err)
{
    *out = NULL;
    mm_dit *d = calloc(1, sizeof *d);
    if (!d)
        return mm_fail(err, "out of memory");
    d->device = mm_ctx_device(ctx);
    d->own_cpu_weights = res && res->own_cpu_weights && d->device.kind == MM_DEVICE_CPU;
    if (mm_st_open(&d->st, path, err) != 0 || mm_st_strip_prefix(d->st, "model.diffusion_model.", NULL, err) != 0 ||
        mm_dit_config_read(d->st, ov, &d->cfg, err) != 0 ||
        (res && mm_dit_stream_init(d, res->stream, res->n, err) != 0) || mm_dit_weights_load(d, ctx, err) != 0 ||
        mm_dit_stream_load(d, err) != 0) {
        mm_dit_free(d);
        return mm_error_prefix(err, "loading the DiT");
    }
    *out = d;
    return 0;
}

void mm_dit_free(mm_dit *d)
{
    if (!d)
        return;
    mm_dit_stream_free(d);
    mm_dit_weights_free(d);
    if (d->st)
        mm_st_close(d->st);
    free(d);
}

const mm_dit_config *mm_dit_get_config(const mm_dit *d) { return &d->cfg; }
size_t mm_dit_weight_bytes(const mm_dit *d) { return d->device_bytes; }
int mm_dit_streamed_blocks(const mm_dit *d)
{
    int n = 0;
    for (int b = 0; b < d->cfg.layers; b++)
        n += mm_dit_block_streamed(d, b);
    return n;
}
int mm_dit_convrot_layer(const mm_dit *d, int block, int which, mm_tensor *weight, mm_tensor *scale, int *group,
                         mm_error *err)
{
    if (block < 0 || block >= d->cfg.layers || which < 0 || which > 3)
        return mm_fail(err, "no ConvRot layer %d of block %d (the model has %d blocks)", which, block, d->cfg.layers);
    const mm_linear *lin = &d->blocks[block].lin[which];
    if (lin->format != MM_WEIGHT_CONVROT_I8)
        return mm_fail(err, "%s is stored %s, not int8 ConvRot", lin->name, mm_weight_format_name(lin->format));
    *weight = mm_tensor_view(&lin->weight);
    *scale = mm_tensor_view(&lin->weight_scale);
    *group = lin->group;
    return 0;
}

size_t mm_dit_request_bytes(const mm_dit_request *r) { return r->bytes; }

static int alloc(mm_dit_request *r, mm_tensor *t, mm_dtype dt, int64_t rows, int64_t cols, mm_error *err)
{
    int64_t shape[2] = {rows, cols};
    if (mm_tensor_alloc(t, mm_ctx_device(r->ctx), dt, cols > 0 ? 2 : 1, shape, err) != 0)
        return -1;
    r->bytes += mm_tensor_nbytes(t);
    return 0;
}

/* A host array copied into a new device tensor of the same dtype. */
static int upload(mm_dit_request *r, mm_tensor *dst, mm_dtype dt, int64_t rows, int64_t cols, const void *host,
                  mm_error *err)
{
    if (alloc(r, dst, dt, rows, cols, err) != 0)
        return -1;
    mm_tensor src = mm_tensor_wrap((void *)host, mm_cpu(), dt, dst->ndim, dst->shape);
    mm_copy(r->ctx, dst, &src);
    return mm_ctx_sync(r->ctx, err);
}

static int32_t *to_i32(const int64_t *v, int64_t n)
{
    int32_t *o = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (o)
        for (int64_t i = 0; i < n; i++)
            o[i] = (int32_t)v[i];
    return o;
}

static int setup_layout(mm_dit_request *r, const mm_dit_layout *l, mm_error *err)
{
    const mm_dit_config *c = &r->dit->cfg;
    r->tags = malloc((size_t)l->rows);
    int32_t *vi = to_i32(l->video_index, l->video_rows), *ai = to_i32(l->audio_index, l->audio_rows);
    int32_t *ti = to_i32(l->text_index, l->text_rows);
    float *cs = malloc(sizeof(float) * (size_t)(l->rows * c->rope_dim));
    float *sn = malloc(sizeof(float) * (size_t)(l->rows * c->rope_dim));
    uint16_t *cb = malloc(sizeof(uint16_t) * (size_t)(l->rows * c->rope_dim));
    uint16_t *sb = malloc(sizeof(uint16_t) * (size_t)(l->rows * c->rope_dim));
    int rc = -1;
    if (!r->tags || !vi || !ai || !ti || !cs || !sn || !cb || !sb) {
        mm_fail(err, "out of memory for a %lld-row layout", (long long)l->rows);
        goto done;
    }
    memcpy(r->tags, l->tags, (size_t)l->rows);
    mm_dit_rope_tables(r->dit, l->positions, l->rows, cs, sn);
    if (r->dbg.capture) {
        mm_tensor t = mm_tensor_wrap(cs, mm_cpu(), MM_F32, 2, (int64_t[]){l->rows, c->rope_dim});
        r->dbg.capture(r->dbg.user, "rope_cos", &t);
        t.data = sn;
        r->dbg.capture(r->dbg.user, "rope_sin", &t);
    }
    for (int64_t i = 0; i < l->rows * c->rope_dim; i++) {
        cb[i] = mm_f32_to_bf16(cs[i]);
        sb[i] = mm_f32_to_bf16(sn[i]);
    }
    if (upload(r, &r->video_idx, MM_I32, l->video_rows, 0, vi, err) ||
        upload(r, &r->audio_idx, MM_I32, l->audio_rows, 0, ai, err) ||
        upload(r, &r->text_idx, MM_I32, l->text_rows, 0, ti, err) ||
        upload(r, &r->rope_cos, MM_BF16, l->rows, c->rope_dim, cb, err) ||
        upload(r, &r->rope_sin, MM_BF16, l->rows, c->rope_dim, sb, err))
        goto done;
    rc = 0;
done:
    free(vi);
    free(ai);
    free(ti);
    free(cs);
    free(sn);
    free(cb);
    free(sb);
    return rc;
}

/* One tensor of the workspace: its field, dtype and shape (cols 0: 1-D). */
typedef struct ws_entry {
    mm_tensor *t;
    mm_dtype dt;
    int64_t rows, cols;
} ws_entry;

#define WS_ENTRIES 16

/* The workspace for S rows, one table for allocating it and for sizing it. */
static int workspace_entries(const mm_dit_config *c, int64_t S, mm_dit_workspace *w, ws_entry *e)
{
    const int64_t H = c->hidden, A = (int64_t)c->heads * c->head_dim, F = c->ffn;
    const int64_t mods = (int64_t)c->modalities * 6 * H, M = MM_DIT_MAX_TIMESTEPS;
    int64_t kmax = H > A ? H : A;
    kmax = kmax > F ? kmax : F;
    /* fc1 also carries the f32 rows of the output heads: at least 2H bf16 columns. */
    const int64_t fc1_cols = 2 * F > 2 * H ? 2 * F : 2 * H;
    int n = 0;
#define WS(field, dtype, rows_, cols_) (e[n++] = (ws_entry){&w->field, dtype, rows_, cols_})
    WS(x, MM_BF16, S, H);
    WS(h, MM_BF16, S, H);
    WS(qkv, MM_BF16, S, 3 * A);
    WS(attn, MM_BF16, S, A);
    WS(y, MM_BF16, S, H);
    WS(fc1_store, MM_BF16, S, fc1_cols);
    WS(glu, MM_BF16, S, F);
    WS(q8, MM_I8, S, kmax);
    WS(s8, MM_F32, S, 0);
    WS(mod32, MM_F32, M, mods);
    WS(mod, MM_BF16, M, mods);
    WS(fmod32, MM_F32, M, 2 * H);
    WS(fmod, MM_BF16, M, 2 * H);
    WS(temb, MM_F32, M, c->time_dim);
    WS(adaln_idx, MM_I32, S, 0);
    WS(t_idx, MM_I32, S, 0);
#undef WS
    return n;
}

static int setup_workspace(mm_dit_request *r, mm_error *err)
{
    const mm_dit_config *c = &r->dit->cfg;
    mm_dit_workspace *w = &r->ws;
    ws_entry e[WS_ENTRIES];
    const int n = workspace_entries(c, r->rows, w, e);
    for (int i = 0; i < n; i++)
        if (alloc(r, e[i].t, e[i].dt, e[i].rows, e[i].cols, err) != 0)
            return -1;
    /* fc1 as [S, 2F] for the MLP. */
    w->fc1 = mm_tensor_narrow(&w->fc1_store, 1, 0, 2 * (int64_t)c->ffn);
    return 0;
}

static uint64_t rounded(mm_dtype dt, int64_t rows, int64_t cols)
{
    return mm_device_alloc_size(mm_dtype_nbytes(dt, rows * (cols > 0 ? cols : 1)));
}

uint64_t mm_dit_request_bytes_for(const mm_dit_config *c, int64_t rows, int64_t text_rows, bool cuda)
{
    mm_dit_workspace w;
    ws_entry e[WS_ENTRIES];
    const int n = workspace_entries(c, rows, &w, e);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += rounded(e[i].dt, e[i].rows, e[i].cols);
    /* The layout: row indices of the video and audio rows (split unknown
     * here: one allocator step covers the second tensor's rounding), the
     * text's, the rotary tables; then the refined text. */
    total += rounded(MM_I32, rows - text_rows, 0) + ((uint64_t)2 << 20) + rounded(MM_I32, text_rows, 0);
    total += 2 * rounded(MM_BF16, rows, c->rope_dim) + rounded(MM_BF16, text_rows, c->hidden);
    if (cuda)
        total += rounded(MM_F32, (int64_t)MM_DIT_MAX_TIMESTEPS * c->modalities, 6 * (int64_t)c->hidden);
    return total;
}

void mm_dit_request_end(mm_dit_request *r)
{
    if (!r)
        return;
    mm_dit_workspace *w = &r->ws;
    mm_tensor *all[] = {&w->x,      &w->h,    &w->qkv,   &w->attn,      &w->y,     &w->fc1_store,  &w->glu,
                        &w->q8,     &w->s8,   &w->mod32, &w->mod,       &w->fmod32, &w->fmod,      &w->temb,
                        &w->adaln_idx, &w->t_idx, &r->video_idx, &r->audio_idx, &r->text_idx, &r->rope_cos,
                        &r->rope_sin, &r->text};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    mm_dit_cuda_teardown(r);
    mm_dit_step_cache_free(r);
    mm_dit_cuda_lora_teardown(r);
    mm_dit_lora_teardown(r);
    mm_dit_adapt_teardown(r);
    mm_dit_sparse_teardown(r);
    free(r->tags);
    free(r);
}

/* The text in bf16 on the device (the reference casts it before
 * condition_proj), then condition_proj and the refiner into r->text. */
static int refine(mm_dit_request *r, const mm_tensor *text, mm_error *err)
{
    mm_ctx *ctx = r->ctx;
    mm_tensor text_bf16 = {0};
    if (mm_tensor_alloc(&text_bf16, mm_ctx_device(ctx), MM_BF16, 2, text->shape, err) != 0)
        return -1;
    /* Cross-device copies keep the dtype, so a non-bf16 host text converts on the device. */
    if (mm_device_eq(text->device, mm_ctx_device(ctx)) || text->dtype == MM_BF16) {
        mm_copy(ctx, &text_bf16, text);
    } else {
        mm_tensor staged;
        if (mm_tensor_alloc(&staged, mm_ctx_device(ctx), text->dtype, 2, text->shape, err) != 0) {
            mm_tensor_free(&text_bf16);
            return -1;
        }
        mm_copy(ctx, &staged, text);
        mm_copy(ctx, &text_bf16, &staged);
        mm_ctx_sync(ctx, NULL);
        mm_tensor_free(&staged);
    }
    int rc = mm_dit_embed_text(r, &text_bf16) != 0 || mm_ctx_sync(ctx, err) != 0 ? -1 : 0;
    mm_tensor_free(&text_bf16);
    return rc;
}

int mm_dit_request_begin(mm_dit *dit, mm_ctx *ctx, const mm_dit_layout *layout, const mm_tensor *text,
                         const mm_dit_debug *dbg, mm_dit_request **out, mm_error *err)
{
    return mm_dit_request_begin_ex(dit, ctx, layout, text, NULL, dbg, out, err);
}

int mm_dit_request_begin_ex(mm_dit *dit, mm_ctx *ctx, const mm_dit_layout *layout, const mm_tensor *text,
                            const mm_dit_request_opts *opts, const mm_dit_debug *dbg, mm_dit_request **out,
                            mm_error *err)
{
    *out = NULL;
    const mm_dit_config *c = &dit->cfg;
    const mm_tensor *refined = opts ? opts->refined_text : NULL;
    if (refined) {
        if (refined->ndim != 2 || refined->shape[0] != layout->text_rows || refined->shape[1] != c->hidden ||
            refined->dtype != MM_BF16 || !mm_tensor_is_contiguous(refined))
            return mm_fail(err, "DiT request: refined text must be contiguous bf16 [%lld, %d] (layout text rows, "
                           "hidden)", (long long)layout->text_rows, c->hidden);
    } else if (text->ndim != 2 || text->shape[0] != layout->text_rows || text->shape[1] != c->text_dim) {
        return mm_fail(err, "DiT request: text must be [%lld, %d] (layout text rows, text width)",
                       (long long)layout->text_rows, c->text_dim);
    }
    mm_dit_request *r = calloc(1, sizeof *r);
    if (!r)
        return mm_fail(err, "out of memory");
    r->dit = dit;
    r->ctx = ctx;
    if (dbg)
        r->dbg = *dbg;
    if (opts) {
        r->attention = opts->attention;
        r->attention_user = opts->attention_user;
        r->fast = opts->fast;
        r->allreduce = opts->allreduce;
        r->allreduce_user = opts->allreduce_user;
    }
    r->cuda_path = mm_dit_cuda_path_applies(r);
    r->rows = layout->rows;
    r->text_rows = layout->text_rows;
    r->video_rows = layout->video_rows;
    r->audio_rows = layout->audio_rows;

    int rc = -1;
    if (setup_layout(r, layout, err) != 0 || setup_workspace(r, err) != 0 ||
        alloc(r, &r->text, MM_BF16, r->text_rows, c->hidden, err) != 0 || mm_dit_cuda_setup(r, err) != 0 ||
        (opts && (mm_dit_lora_setup(r, opts->loras, opts->n_loras, err) != 0 ||
                  mm_dit_adapt_setup(r, opts->loras, opts->n_loras, err) != 0)) ||
        mm_dit_cuda_lora_setup(r, err) != 0 || mm_dit_sparse_setup(r, layout, opts ? opts->sparse : NULL, err) != 0)
        goto done;
    if (refined) {
        mm_copy(ctx, &r->text, refined);
        if (mm_ctx_sync(ctx, err) != 0)
            goto done;
    } else if (refine(r, text, err) != 0) {
        goto done;
    }
    rc = 0;
done:
    if (rc != 0) {
        mm_ctx_error(ctx, err);
        mm_dit_request_end(r);
        return mm_error_prefix(err, "DiT request");
    }
    *out = r;
    return 0;
}

int mm_dit_refine_text(mm_dit *dit, mm_ctx *ctx, const mm_tensor *text, mm_tensor *out, mm_error *err)
{
    return mm_dit_refine_text_ex(dit, ctx, text, NULL, 0, out, err);
}

int mm_dit_refine_text_ex(mm_dit *dit, mm_ctx *ctx, const mm_tensor *text, const mm_lora_use *loras, int n_loras,
                          mm_tensor *out, mm_error *err)
{
    const mm_dit_config *c = &dit->cfg;
    if (text->ndim != 2 || text->shape[1] != c->text_dim || text->shape[0] < 1)
        return mm_fail(err, "refining text: text must be [L, %d]", c->text_dim);
    if (out->ndim != 2 || out->shape[0] != text->shape[0] || out->shape[1] != c->hidden || out->dtype != MM_BF16 ||
        !mm_device_eq(out->device, mm_ctx_device(ctx)))
        return mm_fail(err, "refining text: out must be bf16 [%lld, %d] on the context's device",
                       (long long)text->shape[0], c->hidden);
    mm_dit_request *r = calloc(1, sizeof *r);
    if (!r)
        return mm_fail(err, "out of memory");
    r->dit = dit;
    r->ctx = ctx;
    r->rows = r->text_rows = text->shape[0];
    int rc = -1;
    /* A workspace for the L text rows only: the refiner is all that runs. */
    if (setup_workspace(r, err) == 0 && alloc(r, &r->text, MM_BF16, r->text_rows, c->hidden, err) == 0 &&
        mm_dit_lora_setup(r, loras, n_loras, err) == 0 && refine(r, text, err) == 0) {
        mm_copy(ctx, out, &r->text);
        rc = mm_ctx_sync(ctx, err);
    } else {
        mm_ctx_error(ctx, err);
    }
    mm_dit_request_end(r);
    return rc == 0 ? 0 : mm_error_prefix(err, "refining text");
}

void mm_dit_request_set_step(mm_dit_request *r, int step, int total)
{
    mm_dit_step_cache_set_step(r, step);
    mm_dit_sparse_set_step(r, step, total);
}

int mm_dit_run_blocks(mm_dit_request *r, int first, int end, int m)
{
    for (int b = first; b < end; b++) {
        r->block = b;
        mm_dit_stream_enter(r->dit, b, r->ctx);
        mm_dit_adaln_block(r, b, m);
        mm_dit_block(r, b);
        mm_dit_stream_leave(r->dit, b, r->ctx);
        if (b == 0)
            mm_dit_capture(r, "block0_out", &r->ws.x);
        if ((b & 7) == 7 && mm_ctx_failed(r->ctx))
            break;
    }
    return mm_ctx_failed(r->ctx) ? -1 : 0;
}

int mm_dit_forward(mm_dit_request *r, const float *row_t, const mm_tensor *video_rows, const mm_tensor *audio_rows,
                   mm_tensor *v_video, mm_tensor *v_audio, mm_error *err)
{
    const mm_dit *d = r->dit;
    const mm_dit_config *c = &d->cfg;
    mm_ctx *ctx = r->ctx;
    if (video_rows->ndim != 2 || video_rows->shape[0] != r->video_rows || video_rows->shape[1] != c->video_row_width ||
        audio_rows->ndim != 2 || audio_rows->shape[0] != r->audio_rows || audio_rows->shape[1] != c->audio_row_width)
        return mm_fail(err, "DiT forward: rows must be video [%lld, %d] and audio [%lld, %d]",
                       (long long)r->video_rows, c->video_row_width, (long long)r->audio_rows, c->audio_row_width);
    /* Refused here, by name: a tensor on another device would otherwise
     * fail deep inside the first block and leave the context failed. */
    const mm_tensor *io[4] = {video_rows, audio_rows, v_video, v_audio};
    static const char *const io_name[4] = {"video rows", "audio rows", "video velocity", "audio velocity"};
    for (int i = 0; i < 4; i++)
        if (!mm_device_eq(io[i]->device, mm_ctx_device(ctx))) {
            char want[32], got[32];
            mm_device_name(mm_ctx_device(ctx), want, sizeof want);
            mm_device_name(io[i]->device, got, sizeof got);
            return mm_fail(err, "DiT forward: the %s are on %s; they must be on %s, the request's device", io_name[i],
                           got, want);
        }

    /* Distinct timesteps, their embeddings and the per-row table indices (host). */
    float unique[MM_DIT_MAX_TIMESTEPS], temb[MM_DIT_MAX_TIMESTEPS * 64];
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)r->rows), *ai = malloc(sizeof(int32_t) * (size_t)r->rows);
    if (!ti || !ai || c->time_dim > 64) {
        free(ti);
        free(ai);
        return mm_fail(err, "DiT forward: out of memory (or time_dim %d > 64)", c->time_dim);
    }
    int m = mm_dit_unique_timesteps(row_t, r->rows, unique, MM_DIT_MAX_TIMESTEPS, ti);
    if (m < 1) {
        free(ti);
        free(ai);
        return mm_fail(err, "DiT forward: more than %d distinct timesteps (or a NaN) in one forward",
                       MM_DIT_MAX_TIMESTEPS);
    }
    r->m = m;
    for (int64_t i = 0; i < r->rows; i++)
        ai[i] = ti[i] * c->modalities + r->tags[i];
    for (int k = 0; k < m; k++)
        mm_dit_time_embedding(d, unique[k], temb + k * c->time_dim);
    mm_tensor h_ti = mm_tensor_wrap(ti, mm_cpu(), MM_I32, 1, (int64_t[]){r->rows});
    mm_tensor h_ai = mm_tensor_wrap(ai, mm_cpu(), MM_I32, 1, (int64_t[]){r->rows});
    mm_tensor h_temb = mm_tensor_wrap(temb, mm_cpu(), MM_F32, 2, (int64_t[]){m, c->time_dim});
    mm_tensor d_temb = mm_dit_rows(&r->ws.temb, m);
    mm_copy(ctx, &r->ws.t_idx, &h_ti);
    mm_copy(ctx, &r->ws.adaln_idx, &h_ai);
    mm_copy(ctx, &d_temb, &h_temb);
    mm_dit_capture(r, "temb", &h_temb);
    /* Host arrays must outlive the copies: synchronize before freeing. */
    int rc = mm_ctx_sync(ctx, err);
    free(ti);
    free(ai);
    if (rc == 0)
        rc = mm_dit_adapt_forward_begin(r, unique, m, err);
    if (rc != 0)
        return mm_error_prefix(err, "DiT forward");

    mm_dit_sparse_forward_begin(r);
    mm_dit_embed_media(r, video_rows, audio_rows);
    mm_dit_capture(r, "block0_in", &r->ws.x);
    if (r->step_cache) {
        if (mm_dit_cached_blocks(r, m, err) != 0)
            return mm_error_prefix(err, "DiT forward");
    } else {
        mm_dit_run_blocks(r, 0, c->layers, m);
    }
    mm_dit_capture(r, "blocks_out", &r->ws.x);
    mm_dit_adaln_final(r, m);
    mm_dit_final(r, v_video, v_audio);
    if (mm_ctx_sync(ctx, err) != 0 || mm_dit_sparse_forward_end(r, err) != 0)
        return mm_error_prefix(err, "DiT forward");
    return 0;
}
