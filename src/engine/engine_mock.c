/* The mock engine: no model, a test pattern that exercises everything around
 * the model. It walks through the real engine's stages (with the same
 * progress and cancel behaviour, scaled to about opt->mock_seconds per job at the default 28 steps)
 * and writes a real mp4 through the product's mp4 writer: a gradient that
 * depends on the seed and moves with the frame index, and a sine tone per
 * channel, honouring width/height/frames/seed/no_audio/crf/preset. The
 * few-step fields are read as the real engine reads them: adapters resolved
 * and opened (a missing or malformed one fails the job with the same
 * message), the sampler's schedule sets the forwards, sparse and cache
 * settings are parsed; none of them changes the pattern. Chosen only
 * explicitly (--mock); never a silent fallback for the real engine.
 */
#include "engine/engines.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/clock.h"
#include "engine/preview.h"
#include "media/mp4_writer.h"
#include "model/lora/lora.h"
#include "model/sparse/sparse.h"
#include "sampler/schedule.h"

#define MOCK_AUDIO_RATE 32000
#define MOCK_FPS 24
#define MM_STEPS_DEFAULT_MOCK 28 /* the request rules' default step count */

typedef struct mock_engine {
    mm_engine base;
    mm_engine_options opt;
    bool loaded;
    int jobs;
} mock_engine;

static bool cancelled(const mm_gen_callbacks *cb)
{
    return cb && cb->should_cancel && cb->should_cancel(cb->user);
}

/* Sleeps `seconds` in short slices; true when a cancel arrived meanwhile. */
static bool nap(double seconds, const mm_gen_callbacks *cb)
{
    double end = mm_clock_now() + seconds;
    for (;;) {
        if (cancelled(cb))
            return true;
        double left = end - mm_clock_now();
        if (left <= 0)
            return false;
        double slice = left < 0.02 ? left : 0.02;
        struct timespec ts = {0, (long)(slice * 1e9)};
        nanosleep(&ts, NULL);
    }
}

typedef struct run {
    const mm_gen_callbacks *cb;
    mm_gen_result *res;
    double t0, stage_t0;
    mm_stage stage;
    int total_steps;
} run;

static void report(run *r, mm_stage stage, int step)
{
    double t = mm_clock_now();
    if (stage != r->stage) {
        r->res->stage_seconds[r->stage] += t - r->stage_t0;
        r->stage = stage;
        r->stage_t0 = t;
    }
    if (r->cb && r->cb->progress) {
        mm_progress p = {.stage = stage, .step = step, .total_steps = r->total_steps, .elapsed = t - r->t0};
        r->cb->progress(r->cb->user, &p);
    }
}

static int mock_load(mm_engine *e, mm_error *err)
{
    (void)err;
    mock_engine *m = e->impl;
    if (!m->loaded) {
        /* A short pause so the loading stage is visible the first time. */
        struct timespec ts = {0, (long)(fmin(0.5, m->opt.mock_seconds * 0.05) * 1e9)};
        nanosleep(&ts, NULL);
        m->loaded = true;
    }
    return 0;
}

static void gradient_frame(uint8_t *rgb, int w, int h, int t, uint64_t seed)
{
    int r0 = (int)(seed * 37 % 256), g0 = (int)(seed * 101 % 256), b0 = (int)(seed * 211 % 256);
    for (int y = 0; y < h; y++) {
        uint8_t *row = rgb + (size_t)y * w * 3;
        int gy = (y * 255 / (h > 1 ? h - 1 : 1) + g0) & 255;
        for (int x = 0; x < w; x++) {
            row[3 * x + 0] = (uint8_t)((x * 255 / (w > 1 ? w - 1 : 1) + 3 * t + r0) & 255);
            row[3 * x + 1] = (uint8_t)gy;
            row[3 * x + 2] = (uint8_t)(((x + y) * 255 / (w + h) + 5 * t + b0) & 255);
        }
    }
}

/* The mock's preview: the clip's gradient at latent resolution, emerging
 * from flat grey as the steps go (as a real one sharpens from noise), in
 * the real engine's strip. A failure is the job's: nothing else can fail. */
static int mock_preview(const mm_gen_request *req, run *r, int step, double *last, mm_error *err)
{
    const mm_gen_callbacks *cb = r->cb;
    if (!cb || !cb->preview || !mm_preview_due(last, mm_clock_now(), cb->preview_interval_ms))
        return 0;
    const int w = req->width / 16 > 2 ? req->width / 16 : 2, h = req->height / 16 > 2 ? req->height / 16 : 2;
    const int latents = req->frames < 5 ? 1 : (req->frames - 5) / 17 * 5 + 2;
    const int shown = mm_preview_strip_frames(latents);
    const double mix = (double)step / r->total_steps;
    uint8_t *rgb = malloc((size_t)w * h * 3 * shown);
    const uint8_t *frames[MM_PREVIEW_MAX_FRAMES];
    if (!rgb)
        return mm_fail(err, "mock engine: out of memory for a preview");
    for (int i = 0; i < shown; i++) {
        uint8_t *f = rgb + (size_t)w * h * 3 * i;
        int t = (int)((int64_t)mm_preview_strip_pick(i, shown, latents) * req->frames / latents);
        gradient_frame(f, w, h, t, req->seed);
        for (int k = 0; k < w * h * 3; k++)
            f[k] = (uint8_t)(128 + (f[k] - 128) * mix);
        frames[i] = f;
    }
    mm_preview_image img;
    int rc = mm_preview_encode_strip(frames, shown, w, h, &img, err);
    free(rgb);
    if (rc != 0)
        return mm_error_prefix(err, "mock engine");
    mm_preview pv = {.data = img.data, .size = img.size, .ext = "jpg", .mime = "image/jpeg", .step = step,
                     .total_steps = r->total_steps, .frames = img.frames, .frame_width = img.frame_width,
                     .frame_height = img.frame_height};
    cb->preview(cb->user, &pv);
    mm_preview_image_free(&img);
    return 0;
}

static int write_clip(const mm_gen_request *req, run *r, mm_error *err)
{
    mm_mp4_options o = {
        .width = req->width,
        .height = req->height,
        .fps = MOCK_FPS,
        .crf = req->crf,
        .preset = req->preset ? req->preset : "medium",
        .audio_channels = req->no_audio ? 0 : 2,
        .audio_rate = MOCK_AUDIO_RATE,
    };
    mm_mp4_writer *w;
    if (mm_mp4_writer_open(&w, req->out_path, &o, err) < 0)
        return -1;
    uint8_t *rgb = malloc((size_t)req->width * req->height * 3);
    float *pcm = malloc(sizeof(float) * 2 * (MOCK_AUDIO_RATE / MOCK_FPS + 2));
    if (!rgb || !pcm) {
        free(rgb), free(pcm);
        mm_mp4_writer_abort(w);
        return mm_fail(err, "mock engine: out of memory for a %dx%d frame", req->width, req->height);
    }
    double f0 = 220.0 + (double)(req->seed % 25) * 20.0;
    long long sample = 0;
    int rc = 0;
    for (int i = 0; i < req->frames && rc == 0; i++) {
        if (cancelled(r->cb)) {
            rc = MM_CANCELLED;
            break;
        }
        gradient_frame(rgb, req->width, req->height, i, req->seed);
        if (mm_mp4_write_rgb(w, rgb, req->width * 3, err) < 0) {
            rc = -1;
            break;
        }
        if (!req->no_audio) {
            long long end = (long long)(i + 1) * MOCK_AUDIO_RATE / MOCK_FPS;
            int n = (int)(end - sample);
            for (int k = 0; k < n; k++) {
                double t = (double)(sample + k) / MOCK_AUDIO_RATE;
                pcm[2 * k + 0] = (float)(0.3 * sin(2 * M_PI * f0 * t));
                pcm[2 * k + 1] = (float)(0.3 * sin(2 * M_PI * f0 * 1.5 * t));
            }
            sample = end;
            if (mm_mp4_write_audio(w, pcm, n, err) < 0)
                rc = -1;
        }
    }
    free(rgb);
    free(pcm);
    if (rc != 0) {
        mm_mp4_writer_abort(w);
        return rc;
    }
    return mm_mp4_writer_close(w, err);
}

#define mock_log(m, ...) mm_log_to((m)->opt.h3.log, (m)->opt.h3.log_user, __VA_ARGS__)

/* Each adapter by name, as the real engine finds it (header and keys read,
 * the tensors not), reported in the log. */
static int mock_loras(const mock_engine *m, const mm_gen_request *req, mm_error *err)
{
    for (int i = 0; i < req->n_loras; i++) {
        const mm_gen_lora *g = &req->loras[i];
        char path[2048];
        mm_lora *l = NULL;
        mm_lora_open_opts o = {.header_only = true};
        if (mm_rule_lora_strength(g->strength, err) != 0 ||
            mm_lora_resolve(g->name ? g->name : "", m->opt.h3.checkpoints.models_path, m->opt.h3.lora_paths, path,
                            sizeof path, err) != 0 ||
            mm_lora_open(&l, path, &o, err) != 0)
            return mm_error_prefix(err, "LoRA %d (%s)", i + 1, g->name ? g->name : "no name");
        mock_log(m, "mock engine: LoRA %s (strength %g): %s, rank %d, alpha %g", l->name, (double)g->strength,
                 l->summary.family, l->summary.rank_max, (double)l->summary.alpha_max);
        mm_lora_free(l);
    }
    return 0;
}

/* The forwards the request's schedule runs (sampler, sigmas or steps), and
 * its sparse and step-cache settings checked by the engine's parsers. */
static int mock_schedule(const mock_engine *m, const mm_gen_request *req, int *forwards, mm_error *err)
{
    mm_schedule s;
    if (mm_schedule_resolve(req->sigmas, req->sampler, req->steps, 12.0f, 3.0f, &s, err) != 0)
        return -1;
    *forwards = mm_schedule_forwards(&s);
    mm_schedule_free(&s);
    mm_sparse_config sc;
    if (req->sparse && mm_sparse_config_parse(req->sparse, &sc, err) != 0)
        return mm_error_prefix(err, "sparse %s", req->sparse);
    if (mm_step_cache_check(&req->cache, req->partition && strcmp(req->partition, "ref2va") == 0, err) != 0)
        return -1;
    char cache[64];
    mm_step_cache_name(&req->cache, cache, sizeof cache);
    mock_log(m, "mock engine: %d forwards, sparse %s, cache %s", *forwards, req->sparse ? req->sparse : "off",
             cache);
    return 0;
}

static int mock_generate(mm_engine *e, const mm_gen_request *req, const mm_gen_callbacks *cb, mm_gen_result *res,
                         mm_error *err)
{
    mock_engine *m = e->impl;
    memset(res, 0, sizeof *res);
    if (!req->out_path)
        return mm_fail(err, "mock engine: no output path");
    if (req->width <= 0 || req->height <= 0 || req->width % 2 || req->height % 2)
        return mm_fail(err, "mock engine: canvas %dx%d is not even and positive", req->width, req->height);
    if (req->frames < 1 || req->steps < 2)
        return mm_fail(err, "mock engine: %d frames / %d steps; need >= 1 frame and >= 2 steps", req->frames,
                       req->steps);
    int forwards = 0;
    if (mock_load(e, err) < 0 || mock_loras(m, req, err) < 0 || mock_schedule(m, req, &forwards, err) < 0)
        return -1;

    double T = m->opt.mock_seconds > 0 ? m->opt.mock_seconds : 5.0;
    run r = {.cb = cb, .res = res, .t0 = mm_clock_now(), .stage = MM_STAGE_ENCODING_PROMPT, .total_steps = forwards};
    r.stage_t0 = r.t0;
    int rc = 0;

    report(&r, MM_STAGE_ENCODING_PROMPT, 0);
    if (nap(0.06 * T, cb))
        goto cancel;
    if (req->n_references > 0 || req->last_image_path) {
        report(&r, MM_STAGE_ENCODING_REFERENCES, 0);
        /* The real engine reads every reference; so does the mock. */
        for (int i = 0; i <= req->n_references; i++) {
            const char *p = i < req->n_references ? req->references[i].path : req->last_image_path;
            if (p && access(p, R_OK) != 0)
                return mm_fail_errno(err, "reference %s", p);
        }
        if (nap(0.06 * T, cb))
            goto cancel;
    }
    /* Denoising takes 70% of T at the default 28 steps and scales with the
     * step count, as the real engine's does. */
    double per_step = 0.7 * T / (MM_STEPS_DEFAULT_MOCK - 1);
    report(&r, MM_STAGE_DENOISING, 0);
    double last_preview = -1;
    for (int s = 1; s <= r.total_steps; s++) {
        if (nap(per_step, cb))
            goto cancel;
        if (mock_preview(req, &r, s, &last_preview, err) != 0)
            return -1;
        report(&r, MM_STAGE_DENOISING, s);
    }
    report(&r, MM_STAGE_DECODING_VIDEO, 0);
    if (nap(0.06 * T, cb))
        goto cancel;
    if (!req->no_audio) {
        report(&r, MM_STAGE_DECODING_AUDIO, 0);
        if (nap(0.04 * T, cb))
            goto cancel;
    }
    report(&r, MM_STAGE_WRITING, 0);
    rc = write_clip(req, &r, err);
    if (rc == MM_CANCELLED)
        goto cancel;
    if (rc < 0)
        return mm_error_prefix(err, "mock engine: writing %s", req->out_path);
    report(&r, MM_STAGE_WRITING, 0);
    res->total_seconds = mm_clock_now() - r.t0;
    snprintf(res->placement, sizeof res->placement, "mock=cpu");
    res->timing.forwards = forwards;
    m->jobs++;
    return 0;
cancel:
    res->stage_seconds[r.stage] += mm_clock_now() - r.stage_t0;
    res->total_seconds = mm_clock_now() - r.t0;
    return MM_CANCELLED;
}

static void mock_unload(mm_engine *e)
{
    mock_engine *m = e->impl;
    m->loaded = false;
}

static int mock_status_json(mm_engine *e, char *buf, size_t n)
{
    mock_engine *m = e->impl;
    int k = snprintf(buf, n,
                     "{\"kind\":\"mock\",\"resident\":%s,\"placement\":\"mock=cpu\",\"device\":\"cpu\","
                     "\"jobs\":%d,\"job_seconds\":%.3f,\"message\":\"mock engine: FFmpeg test pattern, no model "
                     "weights are used\"}",
                     m->loaded ? "true" : "false", m->jobs, m->opt.mock_seconds);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

static void mock_destroy(mm_engine *e)
{
    free(e->impl);
}

static const mm_engine_ops mock_ops = {
    .kind = "mock",
    .load = mock_load,
    .generate = mock_generate,
    .unload = mock_unload,
    .status_json = mock_status_json,
    .destroy = mock_destroy,
};

int mm_engine_mock_create(const mm_engine_options *opt, mm_engine **out, mm_error *err)
{
    mock_engine *m = calloc(1, sizeof *m);
    if (!m)
        return mm_fail(err, "mock engine: out of memory");
    if (opt)
        m->opt = *opt;
    else
        mm_engine_options_defaults(&m->opt);
    if (!(m->opt.mock_seconds > 0))
        m->opt.mock_seconds = 5.0;
    m->base.ops = &mock_ops;
    m->base.impl = m;
    *out = &m->base;
    return 0;
}
