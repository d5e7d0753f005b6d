/* The reference KV cache (ref2va, opt-in): pinned rows — reference pictures
 * and videos, their soundtracks, audio clips, fl2va keyframes — enter every
 * forward with the same inputs and the same timestep (max(t_v, 0.999) =
 * 0.999 for every grid point below 1, and 1 for clean audio), and their
 * outputs are thrown away. So after the first forward their keys and values
 * per block are kept, and later forwards run only the other rows (text and
 * targets) through the blocks, attending to [their own K/V ; the kept
 * reference K/V].
 *
 * This is an approximation, not an identity: a reference row's K/V in block
 * b > 0 depends, through the attention of the blocks before, on the target
 * rows, which change every step. What it costs in quality is measured
 * (docs/PERFORMANCE.md, tests/unit/test_engine_refkv.c); it is off by
 * default. In block 0 the kept values are exact.
 *
 * Built on the DiT's request hooks (dit.h): the first forward runs the full
 * layout with an attention hook that gathers the reference rows' K and V of
 * each main block; later forwards run a reduced layout (the same rows minus
 * the pinned ones, positions and timesteps unchanged) with a hook that
 * appends the kept K/V before calling the attention. The refined text is
 * computed once and shared by both requests.
 *
 * Both hooks call the request's own SDPA (mm_dit_sdpa, attached with
 * pl_refkv_attach): the kernel the DiT's policy picked — fa3 bf16, or the
 * fast kernel in fast mode — with the reduced forwards' queries fewer than
 * their keys. mm_attention instead (the generic kernel, 1.5–3x slower on
 * Hopper) made the cached forwards slower than the uncached ones.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline_internal.h"
#include "engine/pipeline_refkv.h"

struct pl_refkv {
    mm_ctx *ctx;
    int layers, heads, head_dim;
    int64_t n_ref, n_active;
    mm_tensor ref_idx;  /* I32 [n_ref]: packed rows of the pinned rows */
    mm_tensor cache;    /* bf16 [layers, 2, n_ref, heads, head_dim] */
    mm_tensor kbuf, vbuf; /* bf16 [n_active + n_ref, heads, head_dim] */
    mm_dit_layout reduced;
    int block;
    int64_t cond_video, cond_audio; /* pinned rows of each stream (first in each) */
    mm_dit_request *req;             /* whose SDPA the hooks call; NULL: mm_attention */
};

static bool pinned(uint8_t role) { return role == MM_DIT_ROW_COND_VIDEO || role == MM_DIT_ROW_REF_AUDIO; }

size_t pl_refkv_bytes(const mm_dit_config *c, const mm_dit_layout *l)
{
    int64_t n_ref = 0;
    for (int64_t r = 0; r < l->rows; r++)
        n_ref += pinned(l->roles[r]);
    size_t per_row = (size_t)c->heads * c->head_dim * 2 /* bf16 */;
    return per_row * (size_t)n_ref * (2 * (size_t)c->layers + 2) + per_row * 2 * (size_t)(l->rows - n_ref);
}

static int reduce_layout(const mm_dit_layout *l, mm_dit_layout *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    int64_t *map = malloc(sizeof(int64_t) * (size_t)l->rows);
    if (!map)
        return mm_fail(err, "out of memory");
    int64_t n = 0;
    for (int64_t r = 0; r < l->rows; r++)
        map[r] = pinned(l->roles[r]) ? -1 : n++;
    out->rows = n;
    out->text_rows = l->text_rows;
    out->video_rows = l->video_rows - l->cond_video_rows;
    out->audio_rows = l->audio_rows - l->cond_audio_rows;
    out->positions = malloc(sizeof(double) * 3 * (size_t)(n + 1));
    out->tags = malloc((size_t)n + 1);
    out->roles = malloc((size_t)n + 1);
    out->video_index = malloc(sizeof(int64_t) * (size_t)(out->video_rows + 1));
    out->audio_index = malloc(sizeof(int64_t) * (size_t)(out->audio_rows + 1));
    out->text_index = malloc(sizeof(int64_t) * (size_t)(l->text_rows + 1));
    if (!out->positions || !out->tags || !out->roles || !out->video_index || !out->audio_index || !out->text_index) {
        free(map);
        mm_dit_layout_free(out);
        return mm_fail(err, "out of memory");
    }
    for (int64_t r = 0; r < l->rows; r++) {
        if (map[r] < 0)
            continue;
        memcpy(out->positions + 3 * map[r], l->positions + 3 * r, sizeof(double) * 3);
        out->tags[map[r]] = l->tags[r];
        out->roles[map[r]] = l->roles[r];
    }
    /* pinned rows come first in both index maps (layout.h) */
    for (int64_t i = 0; i < out->video_rows; i++)
        out->video_index[i] = map[l->video_index[l->cond_video_rows + i]];
    for (int64_t i = 0; i < out->audio_rows; i++)
        out->audio_index[i] = map[l->audio_index[l->cond_audio_rows + i]];
    for (int64_t i = 0; i < l->text_rows; i++)
        out->text_index[i] = map[l->text_index[i]];
    free(map);
    for (int64_t i = 0; i < out->video_rows + out->audio_rows; i++) {
        int64_t row = i < out->video_rows ? out->video_index[i] : out->audio_index[i - out->video_rows];
        if (row < 0) {
            mm_dit_layout_free(out);
            return mm_fail(err, "reference KV cache: a target row is marked pinned");
        }
    }
    return 0;
}

int pl_refkv_create(pl_refkv **out, mm_ctx *ctx, const mm_dit_config *c, const mm_dit_layout *l, mm_error *err)
{
    *out = NULL;
    pl_refkv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return mm_fail(err, "out of memory");
    kv->ctx = ctx;
    kv->layers = c->layers;
    kv->heads = c->heads;
    kv->head_dim = c->head_dim;
    kv->cond_video = l->cond_video_rows;
    kv->cond_audio = l->cond_audio_rows;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(l->rows + 1));
    if (!idx) {
        free(kv);
        return mm_fail(err, "out of memory");
    }
    for (int64_t r = 0; r < l->rows; r++)
        if (pinned(l->roles[r]))
            idx[kv->n_ref++] = (int32_t)r;
    kv->n_active = l->rows - kv->n_ref;
    mm_device dev = mm_ctx_device(ctx);
    int rc = kv->n_ref > 0 ? 0 : mm_fail(err, "reference KV cache: the layout has no pinned rows");
    if (rc == 0)
        rc = reduce_layout(l, &kv->reduced, err);
    if (rc == 0) {
        mm_tensor h = mm_tensor_wrap(idx, mm_cpu(), MM_I32, 1, (int64_t[]){kv->n_ref});
        rc = mm_tensor_alloc(&kv->ref_idx, dev, MM_I32, 1, h.shape, err);
        if (rc == 0) {
            mm_copy(ctx, &kv->ref_idx, &h);
            rc = mm_ctx_sync(ctx, err);
        }
    }
    free(idx);
    const int64_t H = c->heads, D = c->head_dim;
    if (rc == 0)
        rc = mm_tensor_alloc(&kv->cache, dev, MM_BF16, 5, (int64_t[]){c->layers, 2, kv->n_ref, H, D}, err);
    if (rc == 0)
        rc = mm_tensor_alloc(&kv->kbuf, dev, MM_BF16, 3, (int64_t[]){l->rows, H, D}, err);
    if (rc == 0)
        rc = mm_tensor_alloc(&kv->vbuf, dev, MM_BF16, 3, (int64_t[]){l->rows, H, D}, err);
    if (rc != 0) {
        pl_refkv_free(kv);
        return mm_error_prefix(err, "reference KV cache");
    }
    *out = kv;
    return 0;
}

void pl_refkv_free(pl_refkv *kv)
{
    if (!kv)
        return;
    mm_tensor_free(&kv->ref_idx);
    mm_tensor_free(&kv->cache);
    mm_tensor_free(&kv->kbuf);
    mm_tensor_free(&kv->vbuf);
    mm_dit_layout_free(&kv->reduced);
    free(kv);
}

const mm_dit_layout *pl_refkv_reduced(const pl_refkv *kv) { return &kv->reduced; }
int64_t pl_refkv_rows(const pl_refkv *kv) { return kv->n_ref; }

static mm_tensor cache_slot(pl_refkv *kv, int block, int which)
{
    mm_tensor b = mm_tensor_select(&kv->cache, 0, block);
    return mm_tensor_select(&b, 0, which);
}

static int attend(pl_refkv *kv, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                  const mm_tensor *v)
{
    return kv->req ? mm_dit_sdpa(kv->req, out, q, k, v) : mm_attention(ctx, out, q, k, v, NULL);
}

/* First forward: attention as usual, and the pinned rows' K/V of this block kept. */
static int capture(void *user, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                   const mm_tensor *v)
{
    pl_refkv *kv = user;
    int b = kv->block++;
    if (b >= kv->layers)
        return mm_ctx_fail(ctx, "reference KV cache: more attention calls than the %d blocks", kv->layers);
    mm_tensor ck = cache_slot(kv, b, 0), cv = cache_slot(kv, b, 1);
    mm_gather_rows(ctx, &ck, k, &kv->ref_idx);
    mm_gather_rows(ctx, &cv, v, &kv->ref_idx);
    return attend(kv, ctx, out, q, k, v);
}

/* Later forwards: the active rows attend to [their K/V ; the kept K/V]. */
static int attend_cached(void *user, mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k,
                         const mm_tensor *v)
{
    pl_refkv *kv = user;
    int b = kv->block++;
    if (b >= kv->layers)
        return mm_ctx_fail(ctx, "reference KV cache: more attention calls than the %d blocks", kv->layers);
    const int64_t na = k->shape[0], nr = kv->n_ref;
    mm_tensor ka = mm_tensor_narrow(&kv->kbuf, 0, 0, na), kr = mm_tensor_narrow(&kv->kbuf, 0, na, nr);
    mm_tensor va = mm_tensor_narrow(&kv->vbuf, 0, 0, na), vr = mm_tensor_narrow(&kv->vbuf, 0, na, nr);
    mm_tensor ck = cache_slot(kv, b, 0), cv = cache_slot(kv, b, 1);
    mm_copy(ctx, &ka, k);
    mm_copy(ctx, &kr, &ck);
    mm_copy(ctx, &va, v);
    mm_copy(ctx, &vr, &cv);
    mm_tensor kall = mm_tensor_narrow(&kv->kbuf, 0, 0, na + nr), vall = mm_tensor_narrow(&kv->vbuf, 0, 0, na + nr);
    return attend(kv, ctx, out, q, &kall, &vall);
}

mm_dit_request_opts pl_refkv_capture_opts(pl_refkv *kv, const mm_tensor *refined_text)
{
    return (mm_dit_request_opts){.refined_text = refined_text, .attention = capture, .attention_user = kv};
}

mm_dit_request_opts pl_refkv_cached_opts(pl_refkv *kv, const mm_tensor *refined_text)
{
    return (mm_dit_request_opts){.refined_text = refined_text, .attention = attend_cached, .attention_user = kv};
}

void pl_refkv_begin_forward(pl_refkv *kv) { kv->block = 0; }

void pl_refkv_attach(pl_refkv *kv, mm_dit_request *req) { kv->req = req; }
