#include "model/text/conditioner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/sha256.h"
#include "io/safetensors.h"
#include "model/text/image_preprocess.h"
#include "model/text/mrope.h"
#include "model/text/qwen3vl_text.h"
#include "model/text/qwen3vl_vision.h"

struct mm_conditioner {
    mm_conditioner_options opts;
    mm_safetensors *st;
    mm_qwen3vl_text text;
    mm_qwen3vl_vision vision;
    mm_pres_tokens special;
    char checkpoint_id[65];
};

/* Identity of the checkpoint for cache keys: the digest of its header (names,
 * dtypes, shapes, offsets) and its size, cheap to compute on a 15 GB file. */
static void checkpoint_identity(const mm_safetensors *st, char hex[65])
{
    uint64_t fsize = mm_st_file_size(st);
    mm_sha256_ctx s;
    uint8_t d[32], size_le[8];
    for (int i = 0; i < 8; i++)
        size_le[i] = (uint8_t)(fsize >> (8 * i));
    mm_sha256_init(&s);
    mm_sha256_update(&s, mm_st_header(st), (size_t)mm_st_header_size(st));
    mm_sha256_update(&s, size_le, 8);
    mm_sha256_final(&s, d);
    mm_sha256_hex(d, hex);
}

int mm_conditioner_load(mm_conditioner **out, const mm_conditioner_options *opts, mm_ctx *ctx, mm_error *err)
{
    *out = NULL;
    mm_conditioner *c = calloc(1, sizeof *c);
    if (!c)
        return mm_fail(err, "out of memory");
    c->opts = *opts;
    if (!c->opts.out_dtype)
        c->opts.out_dtype = MM_BF16;
    if (!opts->tokenizer.encode) {
        mm_fail(err, "conditioner: no tokenizer");
        goto fail;
    }
    if (mm_qwen3vl_config_validate(&opts->config, err) < 0 ||
        mm_pres_tokens_resolve(&opts->tokenizer, &c->special, err) < 0)
        goto fail;
    /* The presentation takes the vision ids from the tokenizer, the model
     * reads them from its config: they must name the same rows. */
    if (c->special.image_pad != opts->config.image_token_id || c->special.video_pad != opts->config.video_token_id ||
        c->special.vision_start != opts->config.vision_start_token_id ||
        c->special.vision_end != opts->config.vision_end_token_id) {
        mm_fail(err, "conditioner: the tokenizer's vision tokens (%d %d %d %d) differ from the config's "
                     "image/video/vision_start/vision_end ids (%d %d %d %d)",
                c->special.image_pad, c->special.video_pad, c->special.vision_start, c->special.vision_end,
                opts->config.image_token_id, opts->config.video_token_id, opts->config.vision_start_token_id,
                opts->config.vision_end_token_id);
        goto fail;
    }
    if (opts->image_proc.merge != opts->config.vision.merge || opts->image_proc.patch != opts->config.vision.patch ||
        opts->image_proc.temporal_patch != opts->config.vision.temporal_patch ||
        opts->video_proc.merge != opts->config.vision.merge || opts->video_proc.patch != opts->config.vision.patch ||
        opts->video_proc.temporal_patch != opts->config.vision.temporal_patch) {
        mm_fail(err, "conditioner: processor patch/temporal/merge sizes differ from the vision config");
        goto fail;
    }
    if (mm_st_open(&c->st, opts->checkpoint, err) < 0)
        goto fail;
    checkpoint_identity(c->st, c->checkpoint_id);
    if (mm_qwen3vl_text_load(&c->text, &opts->config, c->st, opts->tap, opts->bf16_weights, ctx, err) < 0 ||
        mm_qwen3vl_vision_load(&c->vision, &opts->config, c->st, ctx, err) < 0)
        goto fail;
    if (opts->config.vision.n_deepstack > c->text.n_layers) {
        mm_fail(err, "conditioner: %d deepstack features but only %d decoder layers loaded",
                opts->config.vision.n_deepstack, c->text.n_layers);
        goto fail;
    }
    if (mm_ctx_sync(ctx, err) < 0)
        goto fail;
    *out = c;
    return 0;
fail:
    mm_conditioner_free(c);
    return -1;
}

void mm_conditioner_free(mm_conditioner *c)
{
    if (!c)
        return;
    mm_qwen3vl_text_free(&c->text);
    mm_qwen3vl_vision_free(&c->vision);
    mm_st_close(c->st);
    free(c);
}

int mm_conditioner_tap(const mm_conditioner *c) { return c->text.n_layers; }
const char *mm_conditioner_checkpoint_id(const mm_conditioner *c) { return c->checkpoint_id; }

void mm_cond_result_free(mm_cond_result *r)
{
    mm_tensor_free(&r->rows);
    free(r->tags);
    memset(r, 0, sizeof *r);
}

static void cache_key(const mm_conditioner *c, const char *prompt, size_t len, const mm_cond_reference *refs, int n,
                      mm_prompt_key *key)
{
    mm_prompt_key_builder b;
    mm_prompt_key_begin(&b);
    mm_prompt_key_add(&b, MM_PK_CHECKPOINT, c->checkpoint_id, 64);
    const mm_qwen3vl_processor_config *ip = &c->opts.image_proc, *vp = &c->opts.video_proc;
    int64_t settings[] = {c->text.n_layers, c->opts.out_dtype, ip->min_pixels, ip->max_pixels, vp->min_pixels,
                          vp->max_pixels};
    mm_prompt_key_add_i64(&b, MM_PK_SETTINGS, settings, sizeof settings / sizeof settings[0]);
    mm_prompt_key_add(&b, MM_PK_PROMPT, prompt, len);
    for (int i = 0; i < n; i++) {
        const mm_cond_reference *r = &refs[i];
        int64_t shape[] = {r->kind, r->width, r->height, r->kind == MM_PRES_VIDEO ? r->n_frames : 1, r->has_audio};
        mm_prompt_key_add_i64(&b, MM_PK_SHAPE, shape, 5);
        if (r->kind == MM_PRES_PICTURE)
            mm_prompt_key_add(&b, MM_PK_PICTURE, r->rgb, (size_t)(r->width * r->height * 3));
        else if (r->kind == MM_PRES_VIDEO) {
            mm_prompt_key_add(&b, MM_PK_VIDEO, r->rgb, (size_t)(r->n_frames * r->width * r->height * 3));
            mm_prompt_key_add(&b, MM_PK_VIDEO, r->times, sizeof(double) * (size_t)r->n_frames);
        } else
            mm_prompt_key_add(&b, MM_PK_AUDIO, NULL, 0);
    }
    mm_prompt_key_end(&b, key);
}

/* One vision call over `px` and the placement of its tokens in sequence
 * order: all[j] for the j-th vision row overall ← this call's tokens. */
typedef struct vision_out {
    mm_tensor merged;
    mm_tensor deepstack[MM_QWEN3VL_MAX_DEEPSTACK];
} vision_out;

typedef struct dbg_prefix {
    const mm_conditioner_debug *dbg;
    const char *prefix;
} dbg_prefix;

static void prefixed_tap(void *user, const char *name, int index, const mm_tensor *t)
{
    const dbg_prefix *p = user;
    char full[128];
    snprintf(full, sizeof full, "%s.%s", p->prefix, name);
    p->dbg->tap(p->dbg->user, full, index, t);
}

static int run_vision(mm_conditioner *c, mm_ctx *ctx, const mm_vision_pixels *px, int n, const char *modality,
                      vision_out *vo, const mm_conditioner_debug *dbg, mm_error *err)
{
    dbg_prefix p = {dbg, modality};
    mm_qwen3vl_vision_debug vd = {dbg && dbg->tap ? prefixed_tap : NULL, &p};
    if (mm_qwen3vl_vision_forward(&c->vision, ctx, px, n, MM_BF16, &vo->merged, vo->deepstack, &vd, err) < 0)
        return mm_error_prefix(err, "%s", modality);
    return 0;
}

/* The cached rows of key, copied to the context's device: 1 a hit (out
 * filled), 0 a miss, -1 an error. */
static int cache_lookup(mm_conditioner *c, mm_ctx *ctx, const mm_prompt_key *key, mm_cond_result *out, mm_error *err)
{
    mm_tensor host;
    uint8_t *tags;
    int hit = mm_prompt_cache_get(c->opts.cache, key, &host, &tags, err);
    if (hit <= 0)
        return hit;
    int rc = mm_tensor_alloc(&out->rows, mm_ctx_device(ctx), host.dtype, 2, host.shape, err);
    if (rc == 0 && (mm_copy(ctx, &out->rows, &host) < 0 || mm_ctx_sync(ctx, err) < 0))
        rc = -1;
    out->len = host.shape[0];
    out->tags = tags;
    out->cached = true;
    mm_tensor_free(&host);
    if (rc < 0) {
        mm_cond_result_free(out);
        return -1;
    }
    return 1;
}

/* Keeps the rows for the next time. A cache that cannot write is not a
 * failed encode (it says so on stderr); a failed copy is. */
static int cache_store(mm_conditioner *c, mm_ctx *ctx, const mm_prompt_key *key, const mm_cond_result *out,
                       mm_error *err)
{
    mm_tensor host;
    if (mm_tensor_alloc(&host, mm_cpu(), out->rows.dtype, 2, out->rows.shape, err) < 0)
        return -1;
    int crc = mm_copy(ctx, &host, &out->rows) < 0 ? mm_ctx_error(ctx, err) : 0;
    mm_error cerr = {{0}};
    if (crc == 0 && mm_prompt_cache_put(c->opts.cache, key, &host, out->tags, &cerr) < 0)
        fprintf(stderr, "mmh3: prompt cache: %s\n", cerr.msg);
    mm_tensor_free(&host);
    return crc < 0 ? -1 : 0;
}

/* The processors: each reference on its own, in request order, into the
 * presentation items and the pixels of the image and video calls. */
static int preprocess_references(mm_conditioner *c, const mm_cond_reference *refs, int n_refs, mm_pres_item *items,
                                 mm_vision_pixels *img_px, int *n_img, mm_vision_pixels *vid_px, int *n_vid,
                                 mm_error *err)
{
    for (int i = 0; i < n_refs; i++) {
        const mm_cond_reference *r = &refs[i];
        items[i].kind = r->kind;
        if (r->kind == MM_PRES_PICTURE) {
            if (mm_qwen3vl_preprocess_image(&c->opts.image_proc, r->rgb, r->height, r->width, &img_px[*n_img], err) <
                0)
                return mm_error_prefix(err, "reference %d", i + 1);
            memcpy(items[i].grid, img_px[*n_img].grid, sizeof items[i].grid);
            (*n_img)++;
        } else if (r->kind == MM_PRES_VIDEO) {
            if (mm_qwen3vl_preprocess_video(&c->opts.video_proc, r->rgb, r->n_frames, r->height, r->width,
                                            &vid_px[*n_vid], err) < 0)
                return mm_error_prefix(err, "reference %d", i + 1);
            memcpy(items[i].grid, vid_px[*n_vid].grid, sizeof items[i].grid);
            items[i].frame_times = r->times;
            items[i].n_frame_times = (int)r->n_frames;
            items[i].has_audio = r->has_audio;
            (*n_vid)++;
        }
    }
    return 0;
}

int mm_conditioner_encode(mm_conditioner *c, mm_ctx *ctx, const char *prompt, size_t prompt_len,
                          const mm_cond_reference *refs, int n_refs, mm_cond_result *out,
                          const mm_conditioner_debug *dbg, mm_error *err)
{
    memset(out, 0, sizeof *out);
    const double t0 = mm_clock_now();
    const mm_device dev = mm_ctx_device(ctx);
    const int64_t H = c->opts.config.text.hidden;
    const int n_ds = c->opts.config.vision.n_deepstack;
    mm_prompt_key key;
    if (c->opts.cache) {
        cache_key(c, prompt, prompt_len, refs, n_refs, &key);
        int hit = cache_lookup(c, ctx, &key, out, err);
        if (hit < 0)
            return -1;
        if (hit) {
            out->seconds = mm_clock_now() - t0;
            return 0;
        }
    }

    int rc = -1;
    mm_pres_item *items = calloc((size_t)(n_refs ? n_refs : 1), sizeof *items);
    mm_vision_pixels *img_px = calloc((size_t)(n_refs ? n_refs : 1), sizeof *img_px);
    mm_vision_pixels *vid_px = calloc((size_t)(n_refs ? n_refs : 1), sizeof *vid_px);
    mm_presentation p = {0};
    int64_t *pos = NULL;
    int32_t *ids = NULL, *vis_rows = NULL, *img_slot = NULL, *vid_slot = NULL;
    vision_out img = {0}, vid = {0};
    mm_tensor vis = {0}, ds[MM_QWEN3VL_MAX_DEEPSTACK] = {{0}}, slot = {0};
    int n_img = 0, n_vid = 0;
    if (!items || !img_px || !vid_px) {
        mm_fail(err, "conditioner: out of memory");
        goto out;
    }
    if (preprocess_references(c, refs, n_refs, items, img_px, &n_img, vid_px, &n_vid, err) < 0)
        goto out;
    if (mm_presentation_build(&c->opts.tokenizer, &c->special, items, n_refs, prompt, prompt_len,
                              c->opts.config.vision.merge, &p, err) < 0)
        goto out;
    const int64_t L = p.len;
    if (L > c->opts.config.text.max_positions) {
        mm_fail(err, "conditioner: %lld rows exceed the model's %lld positions", (long long)L,
                (long long)c->opts.config.text.max_positions);
        goto out;
    }
    pos = malloc(sizeof(int64_t) * 3 * (size_t)L);
    ids = malloc(sizeof(int32_t) * (size_t)L);
    vis_rows = malloc(sizeof(int32_t) * (size_t)L);
    img_slot = malloc(sizeof(int32_t) * (size_t)L);
    vid_slot = malloc(sizeof(int32_t) * (size_t)L);
    if (!pos || !ids || !vis_rows || !img_slot || !vid_slot) {
        mm_fail(err, "conditioner: out of memory");
        goto out;
    }
    if (mm_mrope_positions(p.row_type, L, (const int64_t(*)[3])p.image_grids, p.n_images,
                           (const int64_t(*)[3])p.video_grids, p.n_videos, c->opts.config.vision.merge, pos, err) < 0)
        goto out;
    /* Vision rows in sequence order; slot maps tell where each modality's tokens go. */
    int64_t n_vis = 0, ni = 0, nv = 0;
    for (int64_t i = 0; i < L; i++) {
        ids[i] = p.ids[i];
        if (p.row_type[i] == MM_ROW_IMAGE)
            img_slot[ni++] = (int32_t)n_vis;
        else if (p.row_type[i] == MM_ROW_VIDEO)
            vid_slot[nv++] = (int32_t)n_vis;
        else
            continue;
        vis_rows[n_vis++] = (int32_t)i;
    }
    if (n_vis > 0) {
        if (n_img && run_vision(c, ctx, img_px, n_img, "vision_image", &img, dbg, err) < 0)
            goto out;
        if (n_vid && run_vision(c, ctx, vid_px, n_vid, "vision_video", &vid, dbg, err) < 0)
            goto out;
        if ((n_img && img.merged.shape[0] != ni) || (n_vid && vid.merged.shape[0] != nv)) {
            mm_fail(err, "conditioner: vision tokens (%lld image, %lld video) do not match the pad rows (%lld, %lld)",
                    (long long)(n_img ? img.merged.shape[0] : 0), (long long)(n_vid ? vid.merged.shape[0] : 0),
                    (long long)ni, (long long)nv);
            goto out;
        }
        /* The union over image and video rows in sequence order (what the
         * reference's masked scatter and deepstack re-assembly produce). */
        if (mm_tensor_alloc(&vis, dev, MM_BF16, 2, MM_SHAPE(n_vis, H), err) < 0)
            goto out;
        for (int j = 0; j < n_ds; j++)
            if (mm_tensor_alloc(&ds[j], dev, MM_BF16, 2, MM_SHAPE(n_vis, H), err) < 0)
                goto out;
        const struct {
            vision_out *vo;
            int32_t *slots;
            int64_t n;
        } parts[2] = {{&img, img_slot, ni}, {&vid, vid_slot, nv}};
        for (int k = 0; k < 2; k++) {
            if (parts[k].n == 0)
                continue;
            mm_tensor_free(&slot);
            if (mm_tensor_alloc(&slot, dev, MM_I32, 1, MM_SHAPE(parts[k].n), err) < 0)
                goto out;
            mm_tensor hs = mm_tensor_wrap(parts[k].slots, mm_cpu(), MM_I32, 1, MM_SHAPE(parts[k].n));
            mm_copy(ctx, &slot, &hs);
            mm_scatter_rows(ctx, &vis, &parts[k].vo->merged, &slot);
            for (int j = 0; j < n_ds; j++)
                mm_scatter_rows(ctx, &ds[j], &parts[k].vo->deepstack[j], &slot);
        }
        if (mm_ctx_sync(ctx, err) < 0)
            goto out;
    }
    if (mm_tensor_alloc(&out->rows, dev, c->opts.out_dtype, 2, MM_SHAPE(L, H), err) < 0)
        goto out;
    mm_qwen3vl_text_debug td = {dbg ? dbg->tap : NULL, dbg ? dbg->user : NULL};
    if (mm_qwen3vl_text_forward(&c->text, ctx, ids, pos, L, n_vis ? &vis : NULL, vis_rows, n_vis, ds,
                                n_vis ? n_ds : 0, &out->rows, &td, err) < 0 ||
        mm_ctx_sync(ctx, err) < 0)
        goto out;
    out->len = L;
    out->tags = malloc((size_t)L);
    if (!out->tags) {
        mm_fail(err, "conditioner: out of memory");
        goto out;
    }
    memcpy(out->tags, p.tags, (size_t)L);
    if (c->opts.cache && cache_store(c, ctx, &key, out, err) < 0)
        goto out;
    rc = 0;
out:
    if (rc < 0)
        mm_cond_result_free(out);
    for (int i = 0; i < n_img; i++)
        mm_vision_pixels_free(&img_px[i]);
    for (int i = 0; i < n_vid; i++)
        mm_vision_pixels_free(&vid_px[i]);
    mm_tensor_free(&img.merged), mm_tensor_free(&vid.merged), mm_tensor_free(&vis), mm_tensor_free(&slot);
    for (int j = 0; j < MM_QWEN3VL_MAX_DEEPSTACK; j++)
        mm_tensor_free(&img.deepstack[j]), mm_tensor_free(&vid.deepstack[j]), mm_tensor_free(&ds[j]);
    mm_presentation_free(&p);
    free(items), free(img_px), free(vid_px), free(pos), free(ids), free(vis_rows), free(img_slot), free(vid_slot);
    out->seconds = mm_clock_now() - t0;
    return rc;
}
