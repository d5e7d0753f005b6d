/* Reading the keyframes and references of a request and putting each on the
 * pixels the models see (dit.md §7, text-encoder.md §3.3):
 *
 *   fl2va   the first picture is stretched onto the canvas with LANCZOS (it
 *           set the canvas aspect); the last image is cover-cropped onto it
 *           (diffusers' follower rule); further pictures, and the 4 evenly
 *           spaced frames a video expands into, are cover-cropped too and
 *           only shown to Qwen3-VL;
 *   ref2va  pictures go to a 2048-px short edge (sides rounded to 32),
 *           videos are resampled to 24 fps, cut to the generated length,
 *           snapped down to 17n+5 and put on the canvas rule of their own
 *           aspect, with their soundtrack cut to the same window; audio clips
 *           are cut to the generated length (at most 15 s). Everything at the
 *           audio VAE's rate.
 *
 * Each item also gets a content key (SHA-256 of the file bytes and of how it
 * was prepared) for the reference-latent cache.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "engine/pipeline_internal.h"
#include "request/rules.h"
#include "media/audio_reader.h"
#include "media/image.h"
#include "media/resize.h"
#include "media/video_reader.h"
#include "model/text/image_preprocess.h"

#define MAX_REF_ASPECT 4.0

static int grid_floor(double v)
{
    int g = (int)(v / MM_DIM_GRID) * MM_DIM_GRID;
    return g < MM_DIM_MIN ? MM_DIM_MIN : g > MM_DIM_MAX ? MM_DIM_MAX : g;
}

void pl_ref_canvas(int w, int h, int short_edge, int *out_w, int *out_h)
{
    if (short_edge == MM_REF_SHORT_EDGE) {
        /* exactly the target's rule, so a reference video of the target's
         * aspect lands on the target's canvas */
        mm_canvas_spec spec = {.ref_width = w, .ref_height = h};
        mm_canvas_resolve(&spec, out_w, out_h);
        return;
    }
    double aspect = (double)w / h;
    double cap = (double)short_edge * short_edge * ((double)MM_REF_MAX_AREA / (MM_REF_SHORT_EDGE * MM_REF_SHORT_EDGE));
    int cw = grid_floor(aspect >= 1 ? short_edge * aspect : short_edge);
    int ch = grid_floor(aspect >= 1 ? short_edge : short_edge / aspect);
    if ((double)cw * ch > cap) {
        double s = sqrt(cap / ((double)cw * ch));
        cw = grid_floor(cw * s), ch = grid_floor(ch * s);
    }
    *out_w = cw, *out_h = ch;
}

static int round32(double v)
{
    int r = (int)nearbyint(v / 32.0) * 32; /* half to even, as Python's round */
    return r < 32 ? 32 : r;
}

void pl_ref_picture_size(int w, int h, int short_edge, int *out_w, int *out_h)
{
    if (w <= h) {
        *out_w = round32(short_edge);
        *out_h = round32((double)h * short_edge / w);
    } else {
        *out_h = round32(short_edge);
        *out_w = round32((double)w * short_edge / h);
    }
}

/* ------------------------------------------------------------- helpers */

static pl_item *new_item(pl_job *j, pl_role role, const char *path, int ref_index, mm_error *err)
{
    if (j->n_items == PL_MAX_ITEMS) {
        mm_fail(err, "too many pictures (at most %d after expanding videos)", PL_MAX_ITEMS);
        return NULL;
    }
    pl_item *it = &j->items[j->n_items++];
    memset(it, 0, sizeof *it);
    it->role = role;
    it->path = path;
    it->ref_index = ref_index;
    return it;
}

const char *pl_item_name(const pl_item *it, char *buf, size_t n)
{
    if (it->ref_index < 0)
        snprintf(buf, n, "last image");
    else
        snprintf(buf, n, "reference %d", it->ref_index + 1);
    return buf;
}

static const char *what(const pl_item *it, char *buf, size_t n)
{
    char name[32];
    snprintf(buf, n, "%s (%s)", pl_item_name(it, name, sizeof name), it->path);
    return buf;
}

static int hash_file(mm_sha256_ctx *s, const char *path, mm_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mm_fail_errno(err, "cannot open %s", path);
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        mm_sha256_update(s, buf, n);
    int bad = ferror(f);
    fclose(f);
    return bad ? mm_fail(err, "cannot read %s", path) : 0;
}

/* The key says which file and exactly how it was prepared. */
static int key_item(pl_item *it, const int *params, int n_params, mm_error *err)
{
    mm_sha256_ctx s;
    mm_sha256_init(&s);
    if (hash_file(&s, it->path, err) != 0)
        return -1;
    int role = (int)it->role;
    mm_sha256_update(&s, &role, sizeof role);
    mm_sha256_update(&s, params, sizeof(int) * (size_t)n_params);
    mm_sha256_final(&s, it->key);
    return 0;
}

/* A packed copy of rows with a stride. */
static uint8_t *packed_rgb(const uint8_t *rgb, int w, int h, int stride, mm_error *err)
{
    uint8_t *out = malloc((size_t)w * h * 3);
    if (!out) {
        mm_fail(err, "out of memory for a %dx%d picture", w, h);
        return NULL;
    }
    for (int y = 0; y < h; y++)
        memcpy(out + (size_t)y * w * 3, rgb + (size_t)y * stride, (size_t)w * 3);
    return out;
}

/* Puts a picture onto out_w x out_h: stretched (LANCZOS) or cover-cropped. */
static int place(pl_item *it, const uint8_t *rgb, int w, int h, int stride, int out_w, int out_h, bool cover,
                 mm_error *err)
{
    uint8_t *src = packed_rgb(rgb, w, h, stride, err);
    if (!src)
        return -1;
    it->src_width = w;
    it->src_height = h;
    it->rgb = malloc((size_t)out_w * out_h * 3);
    if (!it->rgb) {
        free(src);
        return mm_fail(err, "out of memory for a %dx%d picture", out_w, out_h);
    }
    int rc = cover ? mm_resize_cover_lanczos_u8(src, h, w, 3, it->rgb, out_h, out_w, err)
                   : mm_resize_lanczos_u8(src, h, w, 3, it->rgb, out_h, out_w, err);
    free(src);
    it->width = out_w;
    it->height = out_h;
    return rc;
}

static int read_image(const char *path, mm_image *img, mm_error *err)
{
    if (mm_image_read(path, NULL, img, err) != 0)
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- fl2va */

/* A video under fl2va: 4 evenly spaced frames, each a picture. */
static int fl2va_video(pl_job *j, const char *path, int ref_index, bool *first_taken, mm_error *err)
{
    mm_video_options vo = {.sampling = MM_FRAMES_COUNT, .count = PL_FL2VA_VIDEO_PICTURES};
    mm_video_reader *r;
    if (mm_video_open(&r, path, &vo, err) != 0)
        return -1;
    mm_video_frame f;
    int got, rc = 0;
    while ((got = mm_video_next(r, &f, err)) == 1) {
        pl_item *it = new_item(j, *first_taken ? PL_VISION_PICTURE : PL_KEYFRAME_FIRST, path, ref_index, err);
        if (!it || place(it, f.rgb, f.width, f.height, f.stride, j->width, j->height, *first_taken, err) != 0) {
            rc = -1;
            break;
        }
        *first_taken = true;
    }
    if (got < 0)
        rc = -1;
    mm_video_close(r);
    return rc;
}

static int fl2va_inputs(pl_job *j, mm_error *err)
{
    const mm_gen_request *req = j->req;
    bool first_taken = false;
    char buf[4200];
    for (int i = 0; i < req->n_references; i++) {
        const mm_reference *ref = &req->references[i];
        if (ref->kind == MM_REF_VIDEO) {
            if (fl2va_video(j, ref->path, i, &first_taken, err) != 0)
                return mm_error_prefix(err, "reference %d (%s)", i + 1, ref->path);
            continue;
        }
        mm_image img;
        pl_item *it = new_item(j, first_taken ? PL_VISION_PICTURE : PL_KEYFRAME_FIRST, ref->path, i, err);
        if (!it || read_image(ref->path, &img, err) != 0)
            return it ? mm_error_prefix(err, "%s", what(it, buf, sizeof buf)) : -1;
        int rc = place(it, img.rgb, img.width, img.height, img.stride, j->width, j->height, first_taken, err);
        mm_image_free(&img);
        if (rc != 0)
            return mm_error_prefix(err, "%s", what(it, buf, sizeof buf));
        first_taken = true;
    }
    if (req->last_image_path) {
        mm_image img;
        pl_item *it = new_item(j, PL_KEYFRAME_LAST, req->last_image_path, -1, err);
        if (!it || read_image(req->last_image_path, &img, err) != 0)
            return it ? mm_error_prefix(err, "%s", what(it, buf, sizeof buf)) : -1;
        int rc = place(it, img.rgb, img.width, img.height, img.stride, j->width, j->height, true, err);
        mm_image_free(&img);
        if (rc != 0)
            return mm_error_prefix(err, "%s", what(it, buf, sizeof buf));
    }
    /* keys: the keyframes' latents are cached like references */
    for (int i = 0; i < j->n_items; i++) {
        pl_item *it = &j->items[i];
        if (it->role == PL_VISION_PICTURE)
            continue;
        int params[] = {it->width, it->height, j->width, j->height, it->ref_index >= 0 ? 1 : 0};
        /* a video's first frame: key the file plus which frame it is */
        if (key_item(it, params, 5, err) != 0)
            return -1;
    }
    return 0;
}

/* --------------------------------------------------------------- ref2va */

static int audio_rate(const pl_job *j) { return pl_audio_rate(j->p); }

static int read_audio(pl_job *j, pl_item *it, double max_seconds, mm_error *err)
{
    mm_audio_options ao = {.rate = audio_rate(j), .max_seconds = max_seconds};
    mm_audio a;
    if (mm_audio_read(it->path, &ao, &a, err) != 0)
        return -1;
    if (a.frames <= 0) {
        mm_audio_free(&a);
        return mm_fail(err, "no audio samples");
    }
    it->audio = a.samples;
    it->audio_samples = a.frames;
    it->has_audio = true;
    return 0;
}

static int ref_image(pl_job *j, pl_item *it, mm_error *err)
{
    mm_image img;
    if (read_image(it->path, &img, err) != 0)
        return -1;
    int lo = img.width < img.height ? img.width : img.height;
    int hi = img.width < img.height ? img.height : img.width;
    if ((double)hi / lo > MAX_REF_ASPECT) {
        mm_image_free(&img);
        return mm_fail(err, "aspect %dx%d is wider than 4:1; accepted: 1:4 to 4:1", img.width, img.height);
    }
    int se = j->p->o.ref_image_short_edge ? j->p->o.ref_image_short_edge : PL_REF_IMAGE_SHORT_EDGE, w, h;
    pl_ref_picture_size(img.width, img.height, se, &w, &h);
    int rc = place(it, img.rgb, img.width, img.height, img.stride, w, h, false, err);
    mm_image_free(&img);
    int params[] = {w, h};
    return rc == 0 ? key_item(it, params, 2, err) : -1;
}

static int ref_video(pl_job *j, pl_item *it, mm_error *err)
{
    mm_video_options vo = {.sampling = MM_FRAMES_H3_GRID, .max_frames = j->frames};
    mm_video_reader *r;
    if (mm_video_open(&r, it->path, &vo, err) != 0)
        return -1;
    const mm_media_info *info = mm_video_info(r);
    int n = mm_video_planned_frames(r);
    if (n < 22) {
        mm_video_close(r);
        return mm_fail(err, "%d frames on the 24 fps grid (cut to the render's %d); a reference video needs at least "
                            "22 (0.92 s), and the render as many",
                       n, j->frames);
    }
    int se = j->p->o.ref_video_short_edge ? j->p->o.ref_video_short_edge : PL_REF_VIDEO_SHORT_EDGE, cw, ch;
    pl_ref_canvas(info->width, info->height, se, &cw, &ch);
    bool has_audio = info->has_audio;
    size_t frame_bytes = (size_t)cw * ch * 3;
    it->frames = malloc(frame_bytes * (size_t)n);
    it->width = cw;
    it->height = ch;
    it->src_width = info->width;
    it->src_height = info->height;
    if (!it->frames) {
        mm_video_close(r);
        return mm_fail(err, "out of memory for %d frames of %dx%d", n, cw, ch);
    }
    mm_video_frame f;
    int got, k = 0, rc = 0;
    while (rc == 0 && k < n && (got = mm_video_next(r, &f, err)) == 1) {
        uint8_t *src = packed_rgb(f.rgb, f.width, f.height, f.stride, err);
        if (!src || mm_resize_lanczos_u8(src, f.height, f.width, 3, it->frames + frame_bytes * (size_t)k, ch, cw,
                                         err) != 0)
            rc = -1;
        free(src);
        k++;
    }
    mm_video_close(r);
    if (rc != 0 || got < 0)
        return -1;
    if (k != n)
        return mm_fail(err, "delivered %d of %d frames", k, n);
    it->n_frames = n;

    /* Qwen3-VL sees it at 2 fps (text-encoder.md §3.3) */
    int64_t cap = mm_qwen3vl_sample_count(n, MM_FPS);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(cap + 1));
    it->vis_times = malloc(sizeof(double) * (size_t)(cap + 1));
    if (!idx || !it->vis_times) {
        free(idx);
        return mm_fail(err, "out of memory");
    }
    if (mm_qwen3vl_sample_2fps(n, MM_FPS, idx, it->vis_times, &it->n_vis, err) != 0) {
        free(idx);
        return -1;
    }
    it->vis = malloc(frame_bytes * (size_t)it->n_vis);
    if (!it->vis) {
        free(idx);
        return mm_fail(err, "out of memory");
    }
    for (int64_t s = 0; s < it->n_vis; s++)
        memcpy(it->vis + frame_bytes * (size_t)s, it->frames + frame_bytes * (size_t)idx[s], frame_bytes);
    free(idx);

    /* its soundtrack over the same window */
    if (has_audio && read_audio(j, it, n / (double)MM_FPS, err) != 0)
        return mm_error_prefix(err, "soundtrack");
    int params[] = {cw, ch, n, it->has_audio, audio_rate(j)};
    return key_item(it, params, 5, err);
}

static int ref_audio(pl_job *j, pl_item *it, mm_error *err)
{
    double seconds = fmin(PL_REF_AUDIO_MAX_SECONDS, j->frames / (double)MM_FPS);
    if (read_audio(j, it, seconds, err) != 0)
        return -1;
    int params[] = {(int)(seconds * 1000), audio_rate(j)};
    return key_item(it, params, 2, err);
}

static int ref2va_inputs(pl_job *j, mm_error *err)
{
    const mm_gen_request *req = j->req;
    static const pl_role roles[] = {[MM_REF_IMAGE] = PL_REF_IMAGE, [MM_REF_VIDEO] = PL_REF_VIDEO,
                                    [MM_REF_AUDIO] = PL_REF_AUDIO};
    char buf[4200];
    for (int i = 0; i < req->n_references; i++) {
        const mm_reference *ref = &req->references[i];
        pl_item *it = new_item(j, roles[ref->kind], ref->path, i, err);
        if (!it)
            return -1;
        int rc = ref->kind == MM_REF_IMAGE   ? ref_image(j, it, err)
                 : ref->kind == MM_REF_VIDEO ? ref_video(j, it, err)
                                             : ref_audio(j, it, err);
        if (rc != 0)
            return mm_error_prefix(err, "%s", what(it, buf, sizeof buf));
    }
    return 0;
}

int pl_inputs_read(pl_job *j, mm_error *err)
{
    return j->partition == PL_REF2VA ? ref2va_inputs(j, err) : fl2va_inputs(j, err);
}

void pl_items_free(pl_job *j)
{
    for (int i = 0; i < j->n_items; i++) {
        pl_item *it = &j->items[i];
        free(it->rgb);
        free(it->frames);
        free(it->vis);
        free(it->vis_times);
        free(it->audio);
        free(it->vlat);
        free(it->alat);
    }
    j->n_items = 0;
}
