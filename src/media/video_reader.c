#include "media/video_reader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libswscale/swscale.h>

#include "media/ff_common.h"
#include "media/media_input.h"

struct mm_video_reader {
    mm_input in;
    mm_media_info info;
    mm_video_options opt;
    mm_media_limits lim;
    int vi;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *held; /* the latest decoded frame, source index held_index */
    AVFrame *next;
    int64_t held_index; /* -1 before the first frame */
    int held_rgb;       /* rgb holds the held frame, converted */
    struct SwsContext *sws;
    int orientation;
    uint8_t *rgb, *upright;
    size_t rgb_cap, upright_cap;
    int out_w, out_h;
    int64_t source_frames; /* N */
    double scale;          /* FPS / H3_GRID: output rate / source rate */
    int planned, delivered;
    int64_t decoded; /* frames taken out of the decoder */
    int eof;
    int64_t first_pts;
    char path[512];
};

int mm_h3_grid_floor(int frames)
{
    if (frames < 22)
        return 0;
    return 17 * ((frames - 5) / 17) + 5;
}

/* round(num / den) with ties to even, as numpy rounds. */
static int64_t round_half_even(int64_t num, int64_t den)
{
    int64_t q = num / den, r = num % den;
    if (2 * r > den || (2 * r == den && (q & 1)))
        q++;
    return q;
}

/* The first output slot of source frame i: floor(i * s + 0.5), computed in
 * double as the reference's numpy does. */
static int64_t slot_of(int64_t i, double s) { return (int64_t)floor((double)i * s + 0.5); }

/* The source frame shown at output frame k. */
static int64_t source_for(const mm_video_reader *r, int64_t k)
{
    switch (r->opt.sampling) {
    case MM_FRAMES_COUNT:
        if (r->opt.count <= 1)
            return 0;
        return round_half_even(k * (r->source_frames - 1), r->opt.count - 1);
    case MM_FRAMES_FPS:
    case MM_FRAMES_H3_GRID: {
        /* the last i with slot_of(i) <= k */
        int64_t i = (int64_t)floor(((double)k + 0.5) / r->scale);
        while (i > 0 && slot_of(i, r->scale) > k)
            i--;
        while (slot_of(i + 1, r->scale) <= k)
            i++;
        return i;
    }
    default: return k;
    }
}

static int count_frames(const char *path, const mm_media_limits *lim, int vi, int64_t *n, mm_error *err)
{
    mm_input in;
    if (mm_input_open_path(&in, path, lim, err) < 0)
        return -1;
    AVPacket *pkt = av_packet_alloc();
    int rc = pkt ? 0 : mm_fail(err, "out of memory");
    *n = 0;
    while (rc == 0) {
        int got = mm_input_read(&in, vi, pkt, err);
        if (got < 0)
            rc = -1;
        if (got <= 0)
            break;
        *n += !(pkt->flags & AV_PKT_FLAG_DISCARD); /* edit lists may hide frames */
        av_packet_unref(pkt);
    }
    av_packet_free(&pkt);
    mm_input_close(&in);
    return rc;
}

static int plan(mm_video_reader *r, mm_error *err)
{
    const mm_video_options *o = &r->opt;
    int64_t n = r->source_frames, planned;
    switch (o->sampling) {
    case MM_FRAMES_ALL: planned = n; break;
    case MM_FRAMES_COUNT:
        if (o->count < 1)
            return mm_fail(err, "frame sampling: count %d, at least 1 is needed", o->count);
        planned = o->count;
        break;
    case MM_FRAMES_FPS:
    case MM_FRAMES_H3_GRID: {
        double fps = o->sampling == MM_FRAMES_H3_GRID ? 24.0 : o->fps;
        if (!(fps > 0 && fps <= 1000))
            return mm_fail(err, "frame sampling: fps %g, must be in (0, 1000]", fps);
        r->scale = fps / r->info.fps;
        planned = slot_of(n, r->scale);
        break;
    }
    default: return mm_fail(err, "frame sampling: unknown mode %d", (int)o->sampling);
    }
    if (o->max_frames > 0 && planned > o->max_frames)
        planned = o->max_frames;
    if (o->sampling == MM_FRAMES_H3_GRID) {
        int grid = mm_h3_grid_floor(planned > 1000000 ? 1000000 : (int)planned);
        if (grid == 0)
            return mm_fail(err,
                           "the video gives %lld frames at 24 fps; a reference video needs at least 22 (0.92 s) to "
                           "be snapped down to the 17n+5 grid",
                           (long long)planned);
        planned = grid;
    }
    if (planned > 10000000)
        return mm_fail(err, "frame sampling asks for %lld frames; at most 10000000 are delivered", (long long)planned);
    r->planned = (int)planned;
    return 0;
}

void mm_video_close(mm_video_reader *r)
{
    if (!r)
        return;
    avcodec_free_context(&r->dec);
    av_packet_free(&r->pkt);
    av_frame_free(&r->held);
    av_frame_free(&r->next);
    sws_freeContext(r->sws);
    free(r->rgb);
    free(r->upright);
    if (r->in.fmt || r->in.avio)
        mm_input_close(&r->in);
    free(r);
}

int mm_video_open(mm_video_reader **out, const char *path, const mm_video_options *opt, mm_error *err)
{
    *out = NULL;
    mm_video_reader *r = calloc(1, sizeof *r);
    if (!r)
        return mm_fail(err, "out of memory");
    r->in.fd = -1;
    if (opt)
        r->opt = *opt;
    r->lim = mm_media_limits_or_defaults(r->opt.limits);
    r->opt.limits = NULL;
    r->held_index = -1;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->pkt = av_packet_alloc();
    r->held = av_frame_alloc();
    r->next = av_frame_alloc();
    if (!r->pkt || !r->held || !r->next) {
        mm_video_close(r);
        return mm_fail(err, "out of memory");
    }
    if (mm_input_open_path(&r->in, path, &r->lim, err) < 0) {
        mm_video_close(r);
        return -1;
    }
    if (mm_input_classify(&r->in, &r->lim, &r->info, err) < 0)
        goto fail;
    if (r->info.kind != MM_MEDIA_VIDEO) {
        mm_fail(err, "%s: %s (%s), not a video; accepted: MP4/MOV or WebM/MKV with H.264, HEVC, VP8, VP9, AV1, "
                     "MPEG-4 video",
                path, r->info.kind == MM_MEDIA_IMAGE ? "an image" : "an audio file", r->info.format_name);
        goto fail;
    }
    r->vi = mm_input_video_stream(&r->in);
    if (count_frames(path, &r->lim, r->vi, &r->source_frames, err) < 0)
        goto fail;
    if (r->source_frames == 0) {
        mm_fail(err, "%s: the video contains no frames", path);
        goto fail;
    }
    r->info.frames = r->source_frames;
    if (plan(r, err) < 0) {
        mm_error_prefix(err, "%s", path);
        goto fail;
    }
    r->orientation = mm_orientation_from_turns(mm_input_stream_turns(&r->in, r->vi));
    if (mm_input_open_decoder(&r->in, r->vi, r->opt.threads, r->lim.max_video_pixels, 0, &r->dec, err) < 0)
        goto fail;
    /* Decoding runs as long as the video is long; the open budget is spent. */
    r->in.deadline = 0;
    r->first_pts = AV_NOPTS_VALUE;
    *out = r;
    return 0;
fail:
    mm_video_close(r);
    return -1;
}

const mm_media_info *mm_video_info(const mm_video_reader *r) { return &r->info; }

int mm_video_planned_frames(const mm_video_reader *r) { return r->planned; }

/* Takes the next frame out of the decoder into r->held: 1, 0 at the end. */
static int decode_one(mm_video_reader *r, mm_error *err)
{
    for (;;) {
        int ret = avcodec_receive_frame(r->dec, r->next);
        if (ret >= 0) {
            AVFrame *t = r->held;
            r->held = r->next;
            r->next = t;
            av_frame_unref(r->next);
            r->held_index = r->decoded++;
            r->held_rgb = 0;
            if (r->held_index == 0)
                r->first_pts = r->held->best_effort_timestamp;
            return 1;
        }
        if (ret == AVERROR_EOF)
            return 0;
        if (ret != AVERROR(EAGAIN))
            return mm_ff_fail(err, ret, "%s: frame %lld does not decode", r->path, (long long)r->decoded);
        int got = r->eof ? 0 : mm_input_read(&r->in, r->vi, r->pkt, err);
        if (got < 0)
            return -1;
        r->eof |= !got;
        ret = avcodec_send_packet(r->dec, got ? r->pkt : NULL);
        av_packet_unref(r->pkt);
        if (ret < 0 && ret != AVERROR_EOF)
            return mm_ff_fail(err, ret, "%s: frame %lld does not decode", r->path, (long long)r->decoded);
    }
}

static int convert_held(mm_video_reader *r, mm_error *err)
{
    const AVFrame *f = r->held;
    size_t need = (size_t)f->width * f->height * 3;
    if (need > r->rgb_cap) {
        uint8_t *b = realloc(r->rgb, need);
        if (!b)
            return mm_fail(err, "out of memory (%dx%d frame)", f->width, f->height);
        r->rgb = b;
        r->rgb_cap = need;
    }
    if (mm_ff_frame_to_rgb(&r->sws, f, r->rgb, f->width * 3, err) < 0)
        return mm_error_prefix(err, "%s", r->path);
    r->out_w = f->width;
    r->out_h = f->height;
    if (r->orientation != 1) {
        uint8_t *turned;
        int tw, th;
        if (mm_rgb_orient(r->rgb, f->width, f->height, r->orientation, &turned, &tw, &th, err) < 0)
            return -1;
        free(r->upright);
        r->upright = turned;
        r->out_w = tw;
        r->out_h = th;
    }
    r->held_rgb = 1;
    return 0;
}

int mm_video_next(mm_video_reader *r, mm_video_frame *f, mm_error *err)
{
    if (r->delivered >= r->planned)
        return 0;
    int64_t want = source_for(r, r->delivered);
    while (r->held_index < want) {
        int got = decode_one(r, err);
        if (got < 0)
            return -1;
        if (got == 0)
            break; /* a damaged tail: hold the last frame */
    }
    if (r->held_index < 0)
        return mm_fail(err, "%s: no frame decodes", r->path);
    if (!r->held_rgb && convert_held(r, err) < 0)
        return -1;
    int64_t pts = r->held->best_effort_timestamp;
    AVRational tb = r->in.fmt->streams[r->vi]->time_base;
    f->rgb = r->orientation != 1 ? r->upright : r->rgb;
    f->width = r->out_w;
    f->height = r->out_h;
    f->stride = r->out_w * 3;
    f->index = r->delivered++;
    f->source_index = r->held_index;
    if (pts != AV_NOPTS_VALUE && r->first_pts != AV_NOPTS_VALUE)
        f->time = (double)(pts - r->first_pts) * av_q2d(tb);
    else
        f->time = (double)r->held_index / r->info.fps;
    return 1;
}

int mm_video_read(const char *path, const mm_video_options *opt, mm_video_frame_fn fn, void *user, mm_error *err)
{
    mm_video_reader *r;
    if (mm_video_open(&r, path, opt, err) < 0)
        return -1;
    mm_video_frame f;
    int rc;
    while ((rc = mm_video_next(r, &f, err)) == 1) {
        int stop = fn(user, &f, err);
        if (stop) {
            rc = stop;
            break;
        }
    }
    mm_video_close(r);
    return rc;
}
