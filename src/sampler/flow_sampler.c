#include "sampler/flow_sampler.h"

#include <stdlib.h>

#include "sampler/euler.h"

static void step_stream(mm_flow_stream *s, const float *v, int i, float t)
{
    const int64_t off = s->cond_rows * s->width, n = (s->n_rows - s->cond_rows) * s->width;
    mm_euler_step(s->rows + off, v + off, n, t, s->schedule->sigmas[i], s->schedule->sigmas[i + 1]);
}

int mm_flow_sample(mm_flow_stream *video, mm_flow_stream *audio, mm_flow_velocity_fn fn, void *fn_user,
                   const mm_flow_callbacks *cb, mm_error *err)
{
    const mm_sigma_schedule *sv = video->schedule, *sa = audio->schedule;
    if (sv->points != sa->points)
        return mm_fail(err, "sampler: the video grid has %d points and the audio grid %d (duplicates collapsed "
                       "differently); choose another step count", sv->points, sa->points);
    const int forwards = sv->points - 1;
    float *vv = malloc(sizeof(float) * (size_t)(video->n_rows * video->width + 1));
    float *va = malloc(sizeof(float) * (size_t)(audio->n_rows * audio->width + 1));
    if (!vv || !va) {
        free(vv);
        free(va);
        return mm_fail(err, "sampler: out of memory");
    }
    int rc = 0;
    for (int i = 0; i < forwards; i++) {
        if (cb && cb->should_cancel && cb->should_cancel(cb->user)) {
            rc = MM_FLOW_CANCELLED;
            break;
        }
        const float t_v = sv->timesteps[i], t_a = sa->timesteps[i];
        if (fn(fn_user, i, t_v, t_a, video, audio, vv, va, err) != 0) {
            rc = mm_error_prefix(err, "sampler step %d of %d", i + 1, forwards);
            break;
        }
        step_stream(video, vv, i, t_v);
        step_stream(audio, va, i, t_a);
        if (cb && cb->after_step)
            cb->after_step(cb->user, i, video, audio);
        if (cb && cb->progress)
            cb->progress(cb->user, i + 1, forwards);
    }
    free(vv);
    free(va);
    return rc;
}
