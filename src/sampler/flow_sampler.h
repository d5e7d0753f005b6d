/* The denoising loop of MiniMax-H3 (release / diffusers semantics): N grid
 * points, N − 1 forwards; at step i the model sees t_v = 1 − sigma_v[i] and
 * t_a = 1 − sigma_a[i]; both streams are Euler-stepped from the same
 * forward, on their target rows only (condition / reference rows are fed
 * unchanged every step). State stays on the host in f32 so the update is the
 * reference's arithmetic; the velocity callback moves rows to and from the
 * device.
 *
 * Cancellation is polled before every forward; progress is reported after
 * every forward.
 */
#ifndef MMH3_SAMPLER_FLOW_SAMPLER_H
#define MMH3_SAMPLER_FLOW_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "sampler/sigmas.h"

/* Same value as the engine's MM_CANCELLED. */
#define MM_FLOW_CANCELLED 1

/* One modality's rows: [rows][width] f32, the first cond_rows pinned. */
typedef struct mm_flow_stream {
    float *rows;
    int64_t n_rows, cond_rows;
    int width;
    const mm_sigma_schedule *schedule;
} mm_flow_stream;

/* Computes the velocities of every row of both streams (condition rows
 * included; they are ignored) for one forward. */
typedef int (*mm_flow_velocity_fn)(void *user, int step, float t_video, float t_audio, const mm_flow_stream *video,
                                   const mm_flow_stream *audio, float *v_video, float *v_audio, mm_error *err);

typedef struct mm_flow_callbacks {
    void (*progress)(void *user, int forwards_done, int forwards_total);
    bool (*should_cancel)(void *user);
    /* Called after each Euler update (step = forwards done − 1); may be NULL. */
    void (*after_step)(void *user, int step, const mm_flow_stream *video, const mm_flow_stream *audio);
    void *user;
} mm_flow_callbacks;

/* Runs the loop in place on video->rows / audio->rows. Returns 0,
 * MM_FLOW_CANCELLED, or -1 with err set. */
int mm_flow_sample(mm_flow_stream *video, mm_flow_stream *audio, mm_flow_velocity_fn fn, void *fn_user,
                   const mm_flow_callbacks *cb, mm_error *err);

#endif
