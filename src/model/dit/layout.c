#include "model/dit/layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One latent frame covers 1 pixel frame for the first latent of every VAE
 * chunk and 4 for the others (17 pixel frames -> 5 latents); the rotary clock
 * runs at 40 units per second, i.e. 5/3 per pixel frame at 24 fps. */
static const double frame_rescale = 5.0 / 3.0;
static const int frames_per_latent[5] = {1, 4, 4, 4, 4};
static const double spatial_scale = 32.0;

static double latent_span(int k) { return frame_rescale * frames_per_latent[k % 5]; }

void mm_dit_spatial_grid(int dim, int patch, double sqrt_area, double *out)
{
    /* numpy.linspace(left, left + ratio, n, endpoint=False) is
     * start + i * ((stop - start) / n); torch.linspace would differ in the last ulp. */
    double ratio = dim / sqrt_area;
    double left = (1.0 - ratio) / 2.0;
    int n = dim / patch;
    double step = ((left + ratio) - left) / n;
    for (int i = 0; i < n; i++)
        out[i] = ((double)i * step + left) * spatial_scale;
}

void mm_dit_temporal_grid(int latent_frames, double origin, double *out)
{
    double acc = 0.0;
    for (int k = 0; k < latent_frames; k++) {
        out[k] = origin + acc;
        acc += latent_span(k);
    }
}

double mm_dit_temporal_span_sequential(int latent_frames)
{
    double s = 0.0;
    for (int k = 0; k < latent_frames; k++)
        s += latent_span(k);
    return s;
}

/* numpy's pairwise summation of float64 (blocks of 128, eight accumulators),
 * which the reference uses for the "last" keyframe anchor. */
static double pairwise_sum(const double *a, int64_t n)
{
    if (n < 8) {
        double r = 0.0;
        for (int64_t i = 0; i < n; i++)
            r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double mm_dit_temporal_span_pairwise(int latent_frames)
{
    if (latent_frames <= 0)
        return 0.0;
    double *spans = malloc(sizeof(double) * (size_t)latent_frames);
    if (!spans)
        return mm_dit_temporal_span_sequential(latent_frames);
    for (int k = 0; k < latent_frames; k++)
        spans[k] = latent_span(k);
    double s = pairwise_sum(spans, latent_frames);
    free(spans);
    return s;
}

void mm_dit_layout_free(mm_dit_layout *l)
{
    if (!l)
        return;
    free(l->positions);
    free(l->tags);
    free(l->roles);
    free(l->video_index);
    free(l->audio_index);
    free(l->text_index);
    memset(l, 0, sizeof *l);
}

/* The spatial grid of one latent canvas, each axis normalized by its own sqrt(area). */
typedef struct grid {
    int nh, nw;
    double *h, *w;
} grid;

static int grid_make(grid *g, int latent_height, int latent_width, int patch_h, int patch_w, mm_error *err)
{
    g->nh = latent_height / patch_h;
    g->nw = latent_width / patch_w;
    g->h = malloc(sizeof(double) * (size_t)(g->nh > 0 ? g->nh : 1));
    g->w = malloc(sizeof(double) * (size_t)(g->nw > 0 ? g->nw : 1));
    if (!g->h || !g->w) {
        free(g->h);
        free(g->w);
        return mm_fail(err, "out of memory for a rotary grid");
    }
    double sqrt_area = sqrt((double)latent_height * (double)latent_width);
    mm_dit_spatial_grid(latent_height, patch_h, sqrt_area, g->h);
    mm_dit_spatial_grid(latent_width, patch_w, sqrt_area, g->w);
    return 0;
}

static void grid_free(grid *g)
{
    free(g->h);
    free(g->w);
}

typedef struct builder {
    mm_dit_layout *l;
    int64_t cursor;
    int64_t nv, na; /* filled entries of video_index / audio_index */
} builder;

static void put_row(builder *b, int64_t row, double t, double h, double w, int8_t tag, mm_dit_row_role role)
{
    mm_dit_layout *l = b->l;
    l->positions[row * 3 + 0] = t;
    l->positions[row * 3 + 1] = h;
    l->positions[row * 3 + 2] = w;
    l->tags[row] = tag;
    l->roles[row] = (uint8_t)role;
}

/* One block of video rows: frames on the clock starting at origin (or all at
 * anchor time when frames == 1 and an explicit time is given), frame-major,
 * then patch row, then patch column. */
static void put_video_block(builder *b, int frames, const double *frame_times, const grid *g, mm_dit_row_role role)
{
    for (int k = 0; k < frames; k++)
        for (int i = 0; i < g->nh; i++)
            for (int j = 0; j < g->nw; j++) {
                int64_t row = b->cursor++;
                put_row(b, row, frame_times[k], g->h[i], g->w[j], MM_DIT_TAG_VIDEO, role);
                b->l->video_index[b->nv++] = row;
            }
}

/* Stereo audio rows, channel-major: channel c, latent a at (origin + a, 0, w_c)
 * with w pinned to the first / last column of a width grid. */
static void put_audio_block(builder *b, int latents, int channels, double origin, double w_first, double w_last,
                            mm_dit_row_role role)
{
    for (int c = 0; c < channels; c++)
        for (int a = 0; a < latents; a++) {
            int64_t row = b->cursor++;
            put_row(b, row, origin + (double)a, 0.0, c == 0 ? w_first : w_last, MM_DIT_TAG_AUDIO, role);
            b->l->audio_index[b->na++] = row;
        }
}

static int check_request(const mm_dit_layout_request *req, mm_error *err)
{
    const mm_dit_geometry *g = &req->target;
    if (req->text_rows < 0 || (req->text_rows > 0 && !req->text_tags))
        return mm_fail(err, "text tags missing for %d text rows", req->text_rows);
    for (int i = 0; i < req->text_rows; i++)
        if (req->text_tags[i] != MM_DIT_TAG_TEXT && req->text_tags[i] != MM_DIT_TAG_VIDEO)
            return mm_fail(err, "text row %d has tag %d; accepted: 1 (text) or 0 (vision block)", i,
                           req->text_tags[i]);
    if (g->patch_t != 1 || g->patch_h <= 0 || g->patch_w <= 0)
        return mm_fail(err, "patch (%d, %d, %d) not supported; the temporal patch must be 1", g->patch_t, g->patch_h,
                       g->patch_w);
    if (g->latent_frames <= 0 || g->latent_height <= 0 || g->latent_width <= 0 || g->latent_height % g->patch_h ||
        g->latent_width % g->patch_w)
        return mm_fail(err, "target latent canvas %dx%dx%d must be positive and divisible by the patch %dx%d",
                       g->latent_frames, g->latent_height, g->latent_width, g->patch_h, g->patch_w);
    if (g->audio_latents < 0 || g->audio_channels <= 0)
        return mm_fail(err, "audio: %d latents x %d channels not accepted", g->audio_latents, g->audio_channels);
    if (req->n_anchors > 0 && req->n_refs > 0)
        return mm_fail(err, "keyframe anchors (fl2va) and reference blocks (ref2va) are mutually exclusive");
    for (int i = 0; i < req->n_anchors; i++)
        if (req->anchors[i] != MM_DIT_ANCHOR_FIRST && req->anchors[i] != MM_DIT_ANCHOR_LAST)
            return mm_fail(err, "keyframe %d: anchor must be first or last", i);
    for (int i = 0; i < req->n_refs; i++) {
        const mm_dit_ref *r = &req->refs[i];
        if (r->kind == MM_DIT_REF_AUDIO) {
            if (r->audio_latents <= 0)
                return mm_fail(err, "reference %d: an audio reference needs audio latents", i);
            continue;
        }
        if (r->kind != MM_DIT_REF_IMAGE && r->kind != MM_DIT_REF_VIDEO)
            return mm_fail(err, "reference %d: unknown kind %d", i, (int)r->kind);
        if (r->latent_frames <= 0 || r->latent_height <= 0 || r->latent_width <= 0 ||
            r->latent_height % g->patch_h || r->latent_width % g->patch_w)
            return mm_fail(err, "reference %d: latent canvas %dx%dx%d must be positive and divisible by the patch", i,
                           r->latent_frames, r->latent_height, r->latent_width);
        if (r->kind == MM_DIT_REF_IMAGE && (r->latent_frames != 1 || r->audio_latents != 0))
            return mm_fail(err, "reference %d: an image is one latent frame without audio", i);
        if (r->audio_latents < 0)
            return mm_fail(err, "reference %d: negative audio length", i);
    }
    return 0;
}

/* How far a reference block advances the media clock (dit.md §5.3). */
static double ref_advance(const mm_dit_ref *r)
{
    switch (r->kind) {
    case MM_DIT_REF_IMAGE:
        return 1.0;
    case MM_DIT_REF_AUDIO:
        return (double)r->audio_latents;
    case MM_DIT_REF_VIDEO:
    default: {
        double span = mm_dit_temporal_span_sequential(r->latent_frames);
        double a = (double)r->audio_latents;
        return a > span ? a : span;
    }
    }
}

int mm_dit_layout_build(const mm_dit_layout_request *req, mm_dit_layout *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    if (check_request(req, err) != 0)
        return mm_error_prefix(err, "packed layout");
    const mm_dit_geometry *g = &req->target;
    const int ch = g->audio_channels;
    const int64_t L = req->text_rows;
    const int64_t frame_rows = mm_dit_rows_per_frame(g->latent_height, g->latent_width, g->patch_h, g->patch_w);

    int64_t cond_video = (int64_t)req->n_anchors * frame_rows, cond_audio = 0;
    for (int i = 0; i < req->n_refs; i++) {
        const mm_dit_ref *r = &req->refs[i];
        if (r->kind != MM_DIT_REF_AUDIO)
            cond_video += r->latent_frames * mm_dit_rows_per_frame(r->latent_height, r->latent_width, g->patch_h,
                                                                   g->patch_w);
        cond_audio += (int64_t)r->audio_latents * ch;
    }
    const int64_t target_audio = (int64_t)g->audio_latents * ch;
    const int64_t target_video = (int64_t)g->latent_frames * frame_rows;

    mm_dit_layout *l = out;
    l->text_rows = L;
    l->cond_video_rows = cond_video;
    l->cond_audio_rows = cond_audio;
    l->video_rows = cond_video + target_video;
    l->audio_rows = cond_audio + target_audio;
    l->rows = L + l->video_rows + l->audio_rows;
    l->positions = calloc((size_t)l->rows * 3, sizeof(double));
    l->tags = calloc((size_t)l->rows, 1);
    l->roles = calloc((size_t)l->rows, 1);
    l->video_index = malloc(sizeof(int64_t) * (size_t)(l->video_rows + 1));
    l->audio_index = malloc(sizeof(int64_t) * (size_t)(l->audio_rows + 1));
    l->text_index = malloc(sizeof(int64_t) * (size_t)(L + 1));
    if (!l->positions || !l->tags || !l->roles || !l->video_index || !l->audio_index || !l->text_index) {
        mm_dit_layout_free(l);
        return mm_fail(err, "packed layout: out of memory for %lld rows", (long long)l->rows);
    }

    builder b = {.l = l, .cursor = 0};
    for (int64_t r = 0; r < L; r++) {
        put_row(&b, r, (double)r, 0.0, 0.0, req->text_tags[r], MM_DIT_ROW_TEXT);
        l->text_index[r] = r;
    }
    b.cursor = L;

    grid target;
    if (grid_make(&target, g->latent_height, g->latent_width, g->patch_h, g->patch_w, err) != 0) {
        mm_dit_layout_free(l);
        return -1;
    }
    double *times = malloc(sizeof(double) * (size_t)(g->latent_frames + 1));
    if (!times) {
        grid_free(&target);
        mm_dit_layout_free(l);
        return mm_fail(err, "packed layout: out of memory");
    }

    /* fl2va keyframes: one latent frame each on the target grid, at the time of
     * the first or the last pixel frame. */
    for (int i = 0; i < req->n_anchors; i++) {
        double t = (double)L;
        if (req->anchors[i] == MM_DIT_ANCHOR_LAST)
            t = (double)L + mm_dit_temporal_span_pairwise(g->latent_frames) - frame_rescale;
        put_video_block(&b, 1, &t, &target, MM_DIT_ROW_COND_VIDEO);
    }

    /* ref2va references: each on its own area-normalized grid, on a clock that
     * starts after the text and advances per block. */
    double clock = (double)L;
    int rc = 0;
    for (int i = 0; i < req->n_refs && rc == 0; i++) {
        const mm_dit_ref *r = &req->refs[i];
        if (r->kind == MM_DIT_REF_AUDIO) {
            put_audio_block(&b, r->audio_latents, ch, clock, target.w[0], target.w[target.nw - 1],
                            MM_DIT_ROW_REF_AUDIO);
        } else {
            grid own;
            double *rt = malloc(sizeof(double) * (size_t)r->latent_frames);
            if (!rt || grid_make(&own, r->latent_height, r->latent_width, g->patch_h, g->patch_w, err) != 0) {
                free(rt);
                rc = rt ? -1 : mm_fail(err, "packed layout: out of memory");
                break;
            }
            if (r->audio_latents > 0)
                put_audio_block(&b, r->audio_latents, ch, clock, own.w[0], own.w[own.nw - 1], MM_DIT_ROW_REF_AUDIO);
            mm_dit_temporal_grid(r->latent_frames, clock, rt);
            put_video_block(&b, r->latent_frames, rt, &own, MM_DIT_ROW_COND_VIDEO);
            grid_free(&own);
            free(rt);
        }
        clock += ref_advance(r);
    }
    if (rc == 0) {
        put_audio_block(&b, g->audio_latents, ch, clock, target.w[0], target.w[target.nw - 1], MM_DIT_ROW_AUDIO);
        mm_dit_temporal_grid(g->latent_frames, clock, times);
        put_video_block(&b, g->latent_frames, times, &target, MM_DIT_ROW_VIDEO);
    }
    free(times);
    grid_free(&target);
    if (rc != 0) {
        mm_dit_layout_free(l);
        return mm_error_prefix(err, "packed layout");
    }
    return 0;
}

void mm_dit_row_timesteps(const mm_dit_layout *l, float t_video, float t_audio, float condition_t, float *row_t)
{
    /* The reference compares in float64 (Python max) and stores float32. */
    float cond = (double)t_video >= (double)condition_t ? t_video : condition_t;
    for (int64_t r = 0; r < l->rows; r++) {
        switch ((mm_dit_row_role)l->roles[r]) {
        case MM_DIT_ROW_AUDIO:
            row_t[r] = t_audio;
            break;
        case MM_DIT_ROW_COND_VIDEO:
            row_t[r] = cond;
            break;
        case MM_DIT_ROW_REF_AUDIO:
            row_t[r] = 1.0f;
            break;
        case MM_DIT_ROW_TEXT:
        case MM_DIT_ROW_VIDEO:
        default:
            row_t[r] = t_video;
            break;
        }
    }
}

int mm_dit_unique_timesteps(const float *row_t, int64_t n, float *unique, int max_unique, int32_t *row_index)
{
    int m = 0;
    for (int64_t r = 0; r < n; r++) {
        float t = row_t[r];
        if (isnan(t))
            return -1;
        int pos = 0;
        while (pos < m && unique[pos] < t)
            pos++;
        if (pos < m && unique[pos] == t)
            continue;
        if (m == max_unique)
            return -1;
        memmove(unique + pos + 1, unique + pos, sizeof(float) * (size_t)(m - pos));
        unique[pos] = t;
        m++;
    }
    if (row_index)
        for (int64_t r = 0; r < n; r++) {
            int pos = 0;
            while (pos < m - 1 && unique[pos] != row_t[r])
                pos++;
            row_index[r] = pos;
        }
    return m;
}
