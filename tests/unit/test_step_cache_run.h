/* The step-cache tests' denoising run: a conformance-kit case as the start
 * of a real sampling loop (mm_flow_sample on the release's sigma grids,
 * Euler on the target rows), each forward through a plain DiT request or a
 * sequence-parallel one, with the block-0 input, block-0 output and block
 * stack output of every forward recorded for the references. */
#ifndef MMH3_TESTS_TEST_STEP_CACHE_RUN_H
#define MMH3_TESTS_TEST_STEP_CACHE_RUN_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "model/dit/dit.h"
#include "parallel/sp_dit.h"
#include "sampler/flow_sampler.h"
#include "test_sampler_kit.h"

#define SC_MAX_FORWARDS 32

/* One forward's tensors as f32 host copies ([S, H], bf16 values). */
typedef struct sc_record {
    float *block0_in, *block0_out, *blocks_out;
    float *adaln; /* block 0's AdaLN rows [3M, 6, H] (f32, before the bf16 rounding) */
    int64_t adaln_rows;
    float *row_t; /* [S] */
} sc_record;

typedef struct sc_run {
    const kit_forward_case *f;
    const mm_dit_config *cfg;
    mm_dit_request *dreq; /* one of these two */
    mm_sp_request *sreq;
    mm_ctx *gpu;          /* dreq on a GPU: rows staged through device tensors (and captures copied back) */
    bool record;
    /* out */
    float *video, *audio; /* the final rows [rows, width] */
    int forwards;
    sc_record rec[SC_MAX_FORWARDS];
    float *row_t;
    int current;
    mm_tensor dev[4]; /* gpu: video, audio rows and their velocities */
} sc_run;

/* A contiguous bf16 or f32 tensor the DiT captured (on the host, or on the
 * GPU of ctx) as f32 host values. */
static inline float *sc_copy_f32(mm_ctx *ctx, const mm_tensor *t)
{
    const int64_t n = mm_tensor_numel(t);
    const size_t esz = t->dtype == MM_F32 ? 4 : 2;
    float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
    void *host = t->device.kind == MM_DEVICE_CPU ? t->data : malloc(esz * (size_t)(n ? n : 1));
    if (host != t->data) {
        mm_tensor h = mm_tensor_wrap(host, mm_cpu(), t->dtype, t->ndim, t->shape);
        mm_copy(ctx, &h, t);
    }
    if (t->dtype == MM_F32) {
        memcpy(out, host, sizeof(float) * (size_t)n);
    } else {
        const uint16_t *h = host;
        for (int64_t i = 0; i < n; i++)
            out[i] = mm_bf16_to_f32(h[i]);
    }
    if (host != t->data)
        free(host);
    return out;
}

static inline void sc_capture(void *user, const char *name, const mm_tensor *t)
{
    sc_run *r = user;
    if (!r->record || r->current < 0 || r->current >= SC_MAX_FORWARDS)
        return;
    sc_record *rec = &r->rec[r->current];
    float **slot = strcmp(name, "block0_in") == 0    ? &rec->block0_in
                   : strcmp(name, "block0_out") == 0 ? &rec->block0_out
                   : strcmp(name, "blocks_out") == 0 ? &rec->blocks_out
                   : strcmp(name, "block0_adaln") == 0 ? &rec->adaln
                                                       : NULL;
    if (!slot)
        return;
    free(*slot); /* TeaCache projects block 0's rows twice on a computed forward: same values */
    *slot = sc_copy_f32(r->gpu, t);
    if (slot == &rec->adaln)
        rec->adaln_rows = t->shape[0];
}

static inline int sc_velocity(void *user, int step, float t_video, float t_audio, const mm_flow_stream *video,
                              const mm_flow_stream *audio, float *v_video, float *v_audio, mm_error *err)
{
    sc_run *r = user;
    r->current = step;
    r->forwards = step + 1;
    mm_dit_row_timesteps(&r->f->l, t_video, t_audio, (float)r->f->c.condition_t, r->row_t);
    if (r->record && step < SC_MAX_FORWARDS) {
        free(r->rec[step].row_t);
        r->rec[step].row_t = malloc(sizeof(float) * (size_t)r->f->l.rows);
        memcpy(r->rec[step].row_t, r->row_t, sizeof(float) * (size_t)r->f->l.rows);
    }
    mm_tensor hv = mm_tensor_wrap(video->rows, mm_cpu(), MM_F32, 2, MM_SHAPE(video->n_rows, video->width));
    mm_tensor ha = mm_tensor_wrap(audio->rows, mm_cpu(), MM_F32, 2, MM_SHAPE(audio->n_rows, audio->width));
    mm_tensor ov = mm_tensor_wrap(v_video, mm_cpu(), MM_F32, 2, MM_SHAPE(video->n_rows, video->width));
    mm_tensor oa = mm_tensor_wrap(v_audio, mm_cpu(), MM_F32, 2, MM_SHAPE(audio->n_rows, audio->width));
    if (r->sreq) {
        mm_sp_request_set_step(r->sreq, step, 0);
        return mm_sp_forward(r->sreq, r->row_t, &hv, &ha, &ov, &oa, err);
    }
    mm_dit_request_set_step(r->dreq, step, 0);
    if (!r->gpu)
        return mm_dit_forward(r->dreq, r->row_t, &hv, &ha, &ov, &oa, err);
    const mm_device d = mm_ctx_device(r->gpu);
    mm_tensor *host[4] = {&hv, &ha, &ov, &oa};
    for (int i = 0; i < 4; i++)
        if (!r->dev[i].data && mm_tensor_alloc(&r->dev[i], d, MM_F32, 2, host[i]->shape, err) != 0)
            return -1;
    mm_copy(r->gpu, &r->dev[0], &hv);
    mm_copy(r->gpu, &r->dev[1], &ha);
    if (mm_ctx_error(r->gpu, err) != 0 ||
        mm_dit_forward(r->dreq, r->row_t, &r->dev[0], &r->dev[1], &r->dev[2], &r->dev[3], err) != 0)
        return -1;
    mm_copy(r->gpu, &ov, &r->dev[2]);
    mm_copy(r->gpu, &oa, &r->dev[3]);
    return mm_ctx_sync(r->gpu, err);
}

/* The kit case's rows through `steps` grid points (steps − 1 forwards). */
static inline int sc_sample(sc_run *r, int steps, mm_error *err)
{
    const kit_forward_case *f = r->f;
    const int vw = r->cfg->video_row_width, aw = r->cfg->audio_row_width;
    mm_sigma_schedule sv = {0}, sa = {0};
    if (mm_sigma_schedule_build(steps, 12.0f, &sv, err) != 0 || mm_sigma_schedule_build(steps, 3.0f, &sa, err) != 0)
        return -1;
    r->video = malloc(sizeof(float) * (size_t)(f->l.video_rows * vw + 1));
    r->audio = malloc(sizeof(float) * (size_t)(f->l.audio_rows * aw + 1));
    r->row_t = malloc(sizeof(float) * (size_t)f->l.rows);
    mm_ctx *cpu = NULL;
    mm_ctx_create(&cpu, mm_cpu(), 1, NULL);
    mm_tensor dv = mm_tensor_wrap(r->video, mm_cpu(), MM_F32, 2, MM_SHAPE(f->l.video_rows, vw));
    mm_tensor da = mm_tensor_wrap(r->audio, mm_cpu(), MM_F32, 2, MM_SHAPE(f->l.audio_rows, aw));
    mm_copy(cpu, &dv, &f->video);
    mm_copy(cpu, &da, &f->audio);
    mm_ctx_destroy(cpu);
    mm_flow_stream vs = {r->video, f->l.video_rows, f->l.cond_video_rows, vw, &sv};
    mm_flow_stream as = {r->audio, f->l.audio_rows, f->l.cond_audio_rows, aw, &sa};
    r->current = -1;
    const int rc = mm_flow_sample(&vs, &as, sc_velocity, r, NULL, err);
    mm_sigma_schedule_free(&sv);
    mm_sigma_schedule_free(&sa);
    return rc;
}

static inline void sc_run_free(sc_run *r)
{
    free(r->video);
    free(r->audio);
    free(r->row_t);
    for (int i = 0; i < SC_MAX_FORWARDS; i++) {
        free(r->rec[i].block0_in);
        free(r->rec[i].block0_out);
        free(r->rec[i].blocks_out);
        free(r->rec[i].adaln);
        free(r->rec[i].row_t);
    }
    for (int i = 0; i < 4; i++)
        mm_tensor_free(&r->dev[i]);
    memset(r, 0, sizeof *r);
}

/* A value between the two middle ones of the finite values of v (their
 * geometric mean), so that none of them lies on it; sorts v in place. */
static inline double sc_between_middle(double *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]))
            v[k++] = v[i];
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return k >= 2 ? sqrt(v[k / 2 - 1] * v[k / 2]) : NAN;
}

/* A copy of a report's skip list as "0110..." (forward i skipped = '1'). */
static inline void sc_pattern(const mm_step_cache_report *rep, int forwards, char *buf)
{
    for (int i = 0; i < forwards; i++)
        buf[i] = rep && mm_step_cache_skipped(rep->skipped_bits, i) ? '1' : '0';
    buf[forwards] = '\0';
}

#endif
