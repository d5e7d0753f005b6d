/* Reading the frames of a video as upright RGB24, streamed one at a time
 * (no intermediate files), with the sampling the H3 pipelines need.
 *
 * Sampling works on frame numbers, as the reference does on decoded frame
 * lists (N = frames in the file, src = its average frame rate):
 *   ALL       every frame;
 *   COUNT     `count` frames at round(k (N-1)/(count-1)), k = 0..count-1
 *             (first and last included; frames repeat when count > N);
 *   FPS       resampled to `fps` by holding frames: frame i fills output
 *             slots floor(i s + 0.5) .. floor((i+1) s + 0.5) - 1 with
 *             s = fps/src (diffusers' _normalize_video_condition, i.e.
 *             ffmpeg's fps filter dropping/duplicating whole frames);
 *   H3_GRID   FPS at 24, cut to max_frames, then snapped down to 17n+5
 *             (n >= 1): the reference-video frames the video VAE encodes.
 * max_frames caps every mode (0 = no cap). The number of frames a reader
 * will deliver is known at open (the frames are counted first, by a demux
 * pass that decodes nothing).
 *
 * Same fences as mm_media_probe(): local file, allowlists, limits, budget
 * (the budget applies to opening; decoding is bounded by the limits).
 */
#ifndef MMH3_MEDIA_VIDEO_READER_H
#define MMH3_MEDIA_VIDEO_READER_H

#include <stdint.h>

#include "core/error.h"
#include "media/probe.h"

typedef enum mm_frame_sampling {
    MM_FRAMES_ALL = 0,
    MM_FRAMES_COUNT,
    MM_FRAMES_FPS,
    MM_FRAMES_H3_GRID,
} mm_frame_sampling;

typedef struct mm_video_options {
    mm_frame_sampling sampling;
    int count;                     /* COUNT: frames wanted (>= 1) */
    double fps;                    /* FPS: output rate (> 0) */
    int max_frames;                /* cap, 0 = none (H3_GRID: the generated length) */
    int threads;                   /* decoder threads, 0 = automatic */
    const mm_media_limits *limits; /* NULL = defaults */
} mm_video_options;

typedef struct mm_video_frame {
    const uint8_t *rgb; /* packed RGB24, upright; valid until the next call */
    int width, height, stride;
    int index;            /* 0, 1, 2, ... among delivered frames */
    int64_t source_index; /* the frame's number in the file */
    double time;          /* its presentation time, seconds after the first frame */
} mm_video_frame;

typedef struct mm_video_reader mm_video_reader;

int mm_video_open(mm_video_reader **out, const char *path, const mm_video_options *opt, mm_error *err);
/* What the file is (mm_media_probe's fields; frames = frames in the file). */
const mm_media_info *mm_video_info(const mm_video_reader *r);
/* Frames mm_video_next() will deliver. */
int mm_video_planned_frames(const mm_video_reader *r);
/* 1 = a frame in *f, 0 = done, -1 = error. Missing frames at the end of a
 * damaged file are filled by holding the last decoded one. */
int mm_video_next(mm_video_reader *r, mm_video_frame *f, mm_error *err);
void mm_video_close(mm_video_reader *r);

/* Calls fn for every frame; a non-zero return from fn stops with that
 * value (fn fills err when it returns -1). */
typedef int (*mm_video_frame_fn)(void *user, const mm_video_frame *f, mm_error *err);
int mm_video_read(const char *path, const mm_video_options *opt, mm_video_frame_fn fn, void *user, mm_error *err);

/* The largest 17n+5 <= frames, or 0 when frames < 22. */
int mm_h3_grid_floor(int frames);

#endif
