#include "model/text/presentation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/text/mrope.h"

typedef struct builder {
    mm_presentation *p;
    int64_t cap;
} builder;

static int reserve(builder *b, int64_t extra, mm_error *err)
{
    if (b->p->len + extra <= b->cap)
        return 0;
    int64_t cap = b->cap ? b->cap : 256;
    while (cap < b->p->len + extra)
        cap *= 2;
    int32_t *ids = realloc(b->p->ids, sizeof(int32_t) * (size_t)cap);
    if (ids)
        b->p->ids = ids;
    uint8_t *tags = realloc(b->p->tags, (size_t)cap);
    if (tags)
        b->p->tags = tags;
    uint8_t *types = realloc(b->p->row_type, (size_t)cap);
    if (types)
        b->p->row_type = types;
    if (!ids || !tags || !types)
        return mm_fail(err, "presentation: out of memory for %lld rows", (long long)cap);
    b->cap = cap;
    return 0;
}

static int push(builder *b, int32_t id, uint8_t tag, uint8_t type, mm_error *err)
{
    if (reserve(b, 1, err) < 0)
        return -1;
    mm_presentation *p = b->p;
    p->ids[p->len] = id;
    p->tags[p->len] = tag;
    p->row_type[p->len] = type;
    p->len++;
    return 0;
}

static int push_text(builder *b, const mm_text_tokenizer *tok, const char *text, size_t len, mm_error *err)
{
    if (len == 0)
        return 0;
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok->encode(tok->user, text, len, &ids, &n, err) < 0)
        return -1;
    int rc = reserve(b, (int64_t)n, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = push(b, ids[i], 1, MM_ROW_TEXT, err);
    free(ids);
    return rc;
}

static int push_vision(builder *b, const mm_pres_tokens *sp, int64_t n_pad, bool video, mm_error *err)
{
    if (reserve(b, n_pad + 2, err) < 0)
        return -1;
    /* The markers are text-modality rows for MRoPE but vision rows for the tags. */
    push(b, sp->vision_start, 0, MM_ROW_TEXT, err);
    for (int64_t i = 0; i < n_pad; i++)
        push(b, video ? sp->video_pad : sp->image_pad, 0, video ? MM_ROW_VIDEO : MM_ROW_IMAGE, err);
    push(b, sp->vision_end, 0, MM_ROW_TEXT, err);
    return 0;
}

static int push_label(builder *b, const mm_text_tokenizer *tok, const char *fmt, int ordinal, mm_error *err)
{
    char label[64];
    int n = snprintf(label, sizeof label, fmt, ordinal);
    return push_text(b, tok, label, (size_t)n, err);
}

static int append_grid(int64_t (**grids)[3], int *n, const int64_t g[3], mm_error *err)
{
    int64_t (*ng)[3] = realloc(*grids, sizeof **grids * (size_t)(*n + 1));
    if (!ng)
        return mm_fail(err, "presentation: out of memory");
    memcpy(ng[*n], g, sizeof ng[*n]);
    *grids = ng;
    (*n)++;
    return 0;
}

int mm_pres_video_block_label(const double *frame_times, int n_frame_times, int block, char *buf, size_t n)
{
    int blocks = (n_frame_times + 1) / 2;
    if (block < 0 || block >= blocks)
        return -1;
    double a = frame_times[2 * block];
    double c = 2 * block + 1 < n_frame_times ? frame_times[2 * block + 1] : frame_times[n_frame_times - 1];
    /* printf rounds the exact binary value half to even, as Python's round(x, 1) and format(".1f") do. */
    return snprintf(buf, n, "<%.1f seconds>", (a + c) / 2.0);
}

static int check_grid(const int64_t g[3], int merge, const char *what, int ordinal, mm_error *err)
{
    if (g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || g[1] % merge || g[2] % merge)
        return mm_fail(err, "presentation: %s %d has grid (%lld, %lld, %lld); positive sides divisible by the merge "
                            "size %d are required",
                       what, ordinal, (long long)g[0], (long long)g[1], (long long)g[2], merge);
    return 0;
}

int mm_presentation_build(const mm_text_tokenizer *tok, const mm_pres_tokens *special, const mm_pres_item *items,
                          int n_items, const char *prompt, size_t prompt_len, int merge, mm_presentation *out,
                          mm_error *err)
{
    memset(out, 0, sizeof *out);
    if (merge <= 0)
        return mm_fail(err, "presentation: merge size must be positive");
    builder b = {out, 0};
    int pictures = 0, videos = 0, audios = 0;
    const int64_t per_merge = (int64_t)merge * merge;
    for (int r = 0; r < n_items; r++) {
        const mm_pres_item *it = &items[r];
        switch (it->kind) {
        case MM_PRES_PICTURE:
            pictures++;
            if (check_grid(it->grid, merge, "picture", pictures, err) < 0 ||
                push_label(&b, tok, "<Picture %d>: ", pictures, err) < 0 ||
                push_vision(&b, special, it->grid[0] * it->grid[1] * it->grid[2] / per_merge, false, err) < 0 ||
                append_grid(&out->image_grids, &out->n_images, it->grid, err) < 0)
                goto fail;
            break;
        case MM_PRES_VIDEO: {
            videos++;
            if (check_grid(it->grid, merge, "video", videos, err) < 0)
                goto fail;
            int64_t blocks = (it->n_frame_times + 1) / 2;
            if (it->n_frame_times <= 0 || blocks != it->grid[0]) {
                mm_fail(err, "presentation: video %d has %d frame times (%lld blocks of 2) but a grid of %lld blocks",
                        videos, it->n_frame_times, (long long)blocks, (long long)it->grid[0]);
                goto fail;
            }
            if (it->has_audio && push_label(&b, tok, "<Audio %d>: ", ++audios, err) < 0)
                goto fail;
            if (push_label(&b, tok, "<Video %d>: ", videos, err) < 0)
                goto fail;
            for (int64_t k = 0; k < blocks; k++) {
                char label[64];
                int n = mm_pres_video_block_label(it->frame_times, it->n_frame_times, (int)k, label, sizeof label);
                if (push_text(&b, tok, label, (size_t)n, err) < 0 ||
                    push_vision(&b, special, it->grid[1] * it->grid[2] / per_merge, true, err) < 0)
                    goto fail;
            }
            if (append_grid(&out->video_grids, &out->n_videos, it->grid, err) < 0)
                goto fail;
            break;
        }
        case MM_PRES_AUDIO:
            if (push_label(&b, tok, "<Audio %d>: ", ++audios, err) < 0)
                goto fail;
            break;
        default:
            mm_fail(err, "presentation: reference %d has an unknown kind %d", r + 1, (int)it->kind);
            goto fail;
        }
    }
    if (push_text(&b, tok, prompt ? prompt : "", prompt ? prompt_len : 0, err) < 0)
        goto fail;
    if (out->len == 0 && push(&b, special->pad, 1, MM_ROW_TEXT, err) < 0)
        goto fail;
    return 0;
fail:
    mm_presentation_free(out);
    return -1;
}

void mm_presentation_free(mm_presentation *p)
{
    free(p->ids);
    free(p->tags);
    free(p->row_type);
    free(p->image_grids);
    free(p->video_grids);
    memset(p, 0, sizeof *p);
}

static int resolve_one(const mm_text_tokenizer *tok, const char *name, int32_t *out, mm_error *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok->encode(tok->user, name, strlen(name), &ids, &n, err) < 0)
        return mm_error_prefix(err, "resolving %s", name);
    int ok = n == 1;
    if (ok)
        *out = ids[0];
    free(ids);
    if (!ok)
        return mm_fail(err, "tokenizer: %s is not a single added token (encodes to %zu ids)", name, n);
    return 0;
}

int mm_pres_tokens_resolve(const mm_text_tokenizer *tok, mm_pres_tokens *out, mm_error *err)
{
    if (resolve_one(tok, "<|vision_start|>", &out->vision_start, err) < 0 ||
        resolve_one(tok, "<|vision_end|>", &out->vision_end, err) < 0 ||
        resolve_one(tok, "<|image_pad|>", &out->image_pad, err) < 0 ||
        resolve_one(tok, "<|video_pad|>", &out->video_pad, err) < 0 ||
        resolve_one(tok, "<|endoftext|>", &out->pad, err) < 0)
        return -1;
    return 0;
}
