/* The VAE conformance kit (manifest "kit": "minimax-h3-vae-conformance"):
 * the video VAE (Comfy minimax_h3_video_vae_fp16 layout) and the audio VAE
 * (minimax_h3_audio_vae_fp32 layout) against the upstream reference.
 *
 * Both checkpoints are loaded with the engine's loaders; what the checkpoint
 * cannot tell (strides, heads, tile size and overlap, clip length, rates,
 * normalization constants) comes from the manifest and `const.*`, never from
 * the released defaults. Then, in the kit's bring-up order:
 *   1. configuration: what the loader derived against manifest.derived;
 *   2. plans: each case's spatial tile plan and temporal chunk plan, exact;
 *   3. cases by kind (video_decode, video_encode, audio_decode,
 *      audio_encode): every dbg.* intermediate the engine captures under the
 *      manifest's debug tolerance (the noise bit for bit), then the targets
 *      out.* under their tolerances (uint8 frames by levels and mismatch
 *      share).
 * With --out every computed output is kept under the reference's name. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "conformance/conformance.h"
#include "core/dtype.h"
#include "model/vae/vae.h"
#include "conformance/kit_vae.h"
#include "model/vae/video_tiling.h"

typedef struct capture {
    char name[64];
    int ndim;
    int64_t shape[MM_MAX_DIMS];
    int64_t numel;
    float *data;
    struct capture *next;
} capture;

typedef struct vae_kit {
    mm_conf_run *run;
    const json_t *m;
    mm_safetensors *cases;
    mm_ctx *ctx;
    mm_video_vae *video;
    mm_audio_vae *audio;
    capture *caps;
} vae_kit;

/* ---------------------------------------------------------------- helpers */

static const json_t *jpath(const json_t *root, const char *a, const char *b, const char *c)
{
    const json_t *n = json_object_get(root, a);
    if (b)
        n = json_object_get(n, b);
    if (c)
        n = json_object_get(n, c);
    return n;
}

static int jint(const json_t *obj, const char *key, int *out, mm_error *err)
{
    return mm_conf_json_int(obj, key, out, err);
}

static int jints(const json_t *arr, int *out, int max, int *n, const char *what, mm_error *err)
{
    if (!json_is_array(arr) || (int)json_array_size(arr) > max)
        return mm_fail(err, "manifest: %s missing or longer than %d", what, max);
    *n = (int)json_array_size(arr);
    for (int i = 0; i < *n; i++) {
        const json_t *v = json_array_get(arr, (size_t)i);
        if (!json_is_integer(v))
            return mm_fail(err, "manifest: %s[%d] is not an integer", what, i);
        out[i] = (int)json_integer_value(v);
    }
    return 0;
}

static int jfloat(const json_t *obj, const char *key, float *out, mm_error *err)
{
    double v;
    if (mm_conf_json_number(obj, key, &v, err) != 0)
        return -1;
    *out = (float)v;
    return 0;
}

/* A kit tensor's values into a fixed array. */
static int read_const(const mm_safetensors *cases, const char *name, float *out, int max, int *n, mm_error *err)
{
    float *v;
    int64_t cnt;
    if (mm_conf_read_f32(cases, name, &v, &cnt, NULL, NULL, err) != 0)
        return -1;
    if (cnt > max) {
        free(v);
        return mm_fail(err, "%s: %lld values (at most %d)", name, (long long)cnt, max);
    }
    memcpy(out, v, sizeof(float) * (size_t)cnt);
    *n = (int)cnt;
    free(v);
    return 0;
}

/* Device tensor (any dtype/strides) -> malloc'ed host f32. */
static float *host_f32(mm_ctx *ctx, const mm_tensor *t)
{
    int64_t n = mm_tensor_numel(t);
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    mm_tensor tmp = {0};
    mm_error e;
    if (!h || mm_tensor_alloc(&tmp, mm_ctx_device(ctx), MM_F32, t->ndim, t->shape, &e) != 0) {
        free(h);
        return NULL;
    }
    mm_copy(ctx, &tmp, t);
    mm_tensor hv = mm_tensor_wrap(h, mm_cpu(), MM_F32, t->ndim, t->shape);
    mm_copy(ctx, &hv, &tmp);
    int rc = mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&tmp);
    if (rc != 0) {
        free(h);
        return NULL;
    }
    return h;
}

static void capture_fn(void *user, const char *name, const mm_tensor *t)
{
    vae_kit *k = user;
    for (capture *c = k->caps; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return; /* the first occurrence is the kit's (first chunk, tile, clip) */
    capture *c = calloc(1, sizeof *c);
    if (!c)
        return;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->ndim = t->ndim;
    memcpy(c->shape, t->shape, sizeof c->shape);
    c->numel = mm_tensor_numel(t);
    c->data = host_f32(k->ctx, t);
    if (!c->data) {
        free(c);
        return;
    }
    c->next = k->caps;
    k->caps = c;
}

static void captures_clear(vae_kit *k)
{
    while (k->caps) {
        capture *n = k->caps->next;
        free(k->caps->data);
        free(k->caps);
        k->caps = n;
    }
}

static const capture *captured(const vae_kit *k, const char *name)
{
    for (const capture *c = k->caps; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

static int tolerance(vae_kit *k, const char *group, const char *quantity, mm_conf_tol *tol, mm_error *err)
{
    const json_t *t = jpath(k->m, "tolerances", group, quantity);
    if (!json_is_object(t) || mm_conf_json_number(t, "rel_l2", &tol->rel_l2, err) != 0 ||
        mm_conf_json_number(t, "max_abs", &tol->max_abs, err) != 0)
        return mm_fail(err, "manifest: tolerances.%s.%s missing (an object with rel_l2 and max_abs)", group, quantity);
    return 0;
}

/* Compares host values with kit tensor ref_name; keeps them for --out. */
static int compare(vae_kit *k, const char *ref_name, const float *mine, int64_t n, mm_conf_tol tol, const char *note,
                   mm_error *err)
{
    float *ref;
    int64_t rn;
    int ndim;
    int64_t shape[MM_MAX_DIMS];
    if (mm_conf_read_f32(k->cases, ref_name, &ref, &rn, &ndim, shape, err) != 0)
        return -1;
    char what[200];
    snprintf(what, sizeof what, "%s%s", ref_name, note ? note : "");
    if (rn != n)
        mm_conf_verdict(k->run, false, what, "%lld values computed, the kit has %lld", (long long)n, (long long)rn);
    else
        mm_conf_compare(k->run, what, mine, ref, n, tol);
    free(ref);
    if (rn == n)
        return mm_conf_keep(k->run, ref_name, MM_F32, ndim, shape, mine, err);
    return 0;
}

/* Every <case>.dbg.* tensor of the kit against the engine's capture. */
static int compare_debug(vae_kit *k, const char *case_name, mm_conf_tol fallback, mm_error *err)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s.dbg.", case_name);
    size_t plen = strlen(prefix);
    const json_t *dbg_tol = jpath(k->m, "tolerances", "debug", NULL);
    for (size_t i = 0; i < mm_st_count(k->cases); i++) {
        const mm_st_entry *e = mm_st_at(k->cases, i);
        if (strncmp(e->name, prefix, plen) != 0)
            continue;
        const char *leaf = e->name + plen;
        if (strcmp(leaf, "noise") == 0)
            continue; /* checked bit for bit with the encode result */
        const capture *c = captured(k, leaf);
        if (!c) {
            mm_conf_verdict(k->run, false, e->name, "the engine did not compute this intermediate");
            continue;
        }
        char key[160];
        snprintf(key, sizeof key, "%s.%s", case_name, leaf);
        const json_t *t = json_object_get(dbg_tol, key);
        mm_conf_tol tol = fallback;
        const char *note = " (target tolerance)";
        if (json_is_object(t)) {
            if (mm_conf_json_number(t, "rel_l2", &tol.rel_l2, err) != 0 ||
                mm_conf_json_number(t, "max_abs", &tol.max_abs, err) != 0)
                return -1;
            note = NULL;
        }
        if (compare(k, e->name, c->data, c->numel, tol, note, err) != 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ plans */

static bool array_eq(const json_t *arr, const int64_t *v, int n)
{
    if (!json_is_array(arr) || (int)json_array_size(arr) != n)
        return false;
    for (int i = 0; i < n; i++)
        if (json_integer_value(json_array_get(arr, (size_t)i)) != v[i])
            return false;
    return true;
}

static void check_tiles(vae_kit *k, const char *case_name, const char *axis, const json_t *t,
                        const mm_video_vae_config *vc)
{
    char what[160];
    snprintf(what, sizeof what, "%s plan.%s", case_name, axis);
    if (!json_is_object(t)) {
        mm_conf_verdict(k->run, false, what, "manifest has no %s", axis);
        return;
    }
    mm_vae_tile_plan p;
    mm_error e = {{0}};
    int64_t len = json_integer_value(json_object_get(t, "length_px"));
    if (mm_vae_tile_plan_make(len, vc->tile_size, vc->tile_overlap_min, vc->patch_s, vc->tiling, &p, &e) != 0) {
        mm_conf_verdict(k->run, false, what, "%s", e.msg);
        return;
    }
    bool ok = array_eq(json_object_get(t, "starts_px"), p.start, p.n) &&
              array_eq(json_object_get(t, "lengths_px"), p.len, p.n) &&
              array_eq(json_object_get(t, "overlaps_px"), p.overlap, p.n - 1);
    char buf[256] = "";
    for (int i = 0; i < p.n; i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%lld+%lld", i ? " " : "", (long long)p.start[i],
                 (long long)p.len[i]);
    mm_conf_verdict(k->run, ok, what, "%d tiles over %lld px: %s", p.n, (long long)len, buf);
}

/* ---------------------------------------------------------- video decode */

typedef struct frame_sink {
    float *pixels;   /* [3, T, H, W] */
    uint8_t *frames; /* [T, H, W, 3] */
    int64_t T, H, W, got;
    mm_ctx *ctx;
} frame_sink;

static int on_frame(void *user, int64_t index, const uint8_t *rgb, int width, int height, const mm_tensor *pixels,
                    mm_error *err)
{
    frame_sink *s = user;
    if (index >= s->T || width != s->W || height != s->H)
        return mm_fail(err, "frame %lld of %dx%d; the kit expects %lld frames of %lldx%lld", (long long)index, width,
                       height, (long long)s->T, (long long)s->W, (long long)s->H);
    const int64_t plane = s->H * s->W;
    memcpy(s->frames + index * plane * 3, rgb, (size_t)(plane * 3));
    float *p = host_f32(s->ctx, pixels);
    if (!p)
        return mm_fail(err, "copying frame %lld", (long long)index);
    for (int c = 0; c < 3; c++)
        memcpy(s->pixels + (c * s->T + index) * plane, p + c * plane, sizeof(float) * (size_t)plane);
    free(p);
    s->got++;
    return 0;
}

static int run_video_decode(vae_kit *k, const char *name, const json_t *cs, mm_error *err)
{
    const mm_video_vae_config *vc = mm_video_vae_get_config(k->video);
    check_tiles(k, name, "tiles_h", json_object_get(cs, "tiles_h"), vc);
    check_tiles(k, name, "tiles_w", json_object_get(cs, "tiles_w"), vc);
    char tn[160];
    snprintf(tn, sizeof tn, "%s.in.latents", name);
    mm_tensor lat;
    if (mm_st_get(k->cases, tn, &lat, err) != 0)
        return -1;
    /* chunk plan: windows and frame count */
    const json_t *ch = json_object_get(cs, "chunks");
    int64_t L = lat.ndim == 5 ? lat.shape[2] : lat.shape[1];
    int64_t frames = mm_video_vae_pixel_frames(vc, L);
    {
        const json_t *wins = json_object_get(ch, "windows");
        bool ok = json_integer_value(json_object_get(ch, "frames")) == frames && json_is_array(wins);
        int64_t nch = json_is_array(wins) ? (int64_t)json_array_size(wins) : 0;
        for (int64_t i = 0; ok && i < nch; i++) {
            const json_t *w = json_array_get(wins, (size_t)i);
            int64_t a = i * vc->tokens_chunk_size, b = a + vc->tokens_chunk_size + vc->token_overlap;
            ok = json_integer_value(json_array_get(w, 0)) == a && json_integer_value(json_array_get(w, 1)) == b;
        }
        char what[160];
        snprintf(what, sizeof what, "%s plan.chunks", name);
        mm_conf_verdict(k->run, ok, what, "%lld latents -> %lld frames in %lld windows of %d at stride %d",
                        (long long)L, (long long)frames, (long long)nch, vc->tokens_chunk_size + vc->token_overlap,
                        vc->tokens_chunk_size);
    }
    const json_t *ps = json_object_get(cs, "pixel_shape");
    frame_sink s = {.T = json_integer_value(json_array_get(ps, 2)),
                    .H = json_integer_value(json_array_get(ps, 3)),
                    .W = json_integer_value(json_array_get(ps, 4)),
                    .ctx = k->ctx};
    s.pixels = malloc(sizeof(float) * (size_t)(3 * s.T * s.H * s.W));
    s.frames = malloc((size_t)(3 * s.T * s.H * s.W));
    if (!s.pixels || !s.frames) {
        free(s.pixels);
        free(s.frames);
        return mm_fail(err, "out of memory");
    }
    mm_video_vae_set_capture(k->video, &(mm_vae_capture){capture_fn, k});
    mm_error derr = {{0}};
    int drc = mm_video_vae_decode(k->video, k->ctx, &lat, on_frame, &s, &derr);
    mm_video_vae_set_capture(k->video, NULL);
    char what[160];
    snprintf(what, sizeof what, "%s decode", name);
    int rc = 0;
    if (drc != 0 || s.got != s.T) {
        mm_conf_verdict(k->run, false, what, "%s (%lld of %lld frames)", drc ? derr.msg : "short", (long long)s.got,
                        (long long)s.T);
    } else {
        mm_conf_tol tol;
        if (tolerance(k, "video_decode", "pixels", &tol, err) != 0 || compare_debug(k, name, tol, err) != 0) {
            rc = -1;
            goto out;
        }
        snprintf(tn, sizeof tn, "%s.out.pixels", name);
        if (compare(k, tn, s.pixels, 3 * s.T * s.H * s.W, tol, NULL, err) != 0) {
            rc = -1;
            goto out;
        }
        /* uint8 frames: largest level difference and the share that differ */
        snprintf(tn, sizeof tn, "%s.out.frames", name);
        mm_tensor ref;
        const json_t *ft = jpath(k->m, "tolerances", "video_decode", "frames");
        int max_levels = (int)json_integer_value(json_object_get(ft, "max_abs_levels"));
        double max_share = json_number_value(json_object_get(ft, "mismatch_fraction"));
        if (mm_st_get_expect(k->cases, tn, MM_U8, 4, MM_SHAPE(s.T, s.H, s.W, 3), &ref, err) != 0) {
            rc = -1;
            goto out;
        }
        int64_t n = 3 * s.T * s.H * s.W, diff = 0;
        int worst = 0;
        for (int64_t i = 0; i < n; i++) {
            int d = abs((int)s.frames[i] - (int)((const uint8_t *)ref.data)[i]);
            diff += d != 0;
            worst = d > worst ? d : worst;
        }
        double share = (double)diff / (double)n;
        mm_conf_verdict(k->run, worst <= max_levels && share <= max_share, tn,
                        "max %d levels %s %d   mismatch %.4f %s %.4f", worst, worst <= max_levels ? "<=" : ">",
                        max_levels, share, share <= max_share ? "<=" : ">", max_share);
        rc = mm_conf_keep(k->run, tn, MM_U8, 4, MM_SHAPE(s.T, s.H, s.W, 3), s.frames, err);
    }
out:
    captures_clear(k);
    free(s.pixels);
    free(s.frames);
    return rc;
}

/* ---------------------------------------------------------- video encode */

typedef struct frame_src {
    const uint8_t *frames;
    int64_t frame_bytes;
} frame_src;

static const uint8_t *pull(void *user, int64_t index, mm_error *err)
{
    (void)err;
    const frame_src *s = user;
    return s->frames + index * s->frame_bytes;
}

static int run_video_encode(vae_kit *k, const char *name, const json_t *cs, mm_error *err)
{
    const mm_video_vae_config *vc = mm_video_vae_get_config(k->video);
    check_tiles(k, name, "tiles_h", json_object_get(cs, "tiles_h"), vc);
    check_tiles(k, name, "tiles_w", json_object_get(cs, "tiles_w"), vc);
    char tn[160];
    snprintf(tn, sizeof tn, "%s.in.frames", name);
    mm_tensor fr;
    if (mm_st_get(k->cases, tn, &fr, err) != 0)
        return -1;
    if (fr.dtype != MM_U8 || fr.ndim != 4 || fr.shape[3] != 3)
        return mm_fail(err, "%s: U8 [T, H, W, 3] expected", tn);
    const int64_t T = fr.shape[0], H = fr.shape[1], W = fr.shape[2];
    mm_video_encode_options eo;
    mm_video_encode_options_release(&eo);
    int seed = 42;
    if (jint(jpath(k->m, "derived", "video", NULL), "keyframe_encode_seed", &seed, err) != 0)
        return -1;
    eo.seed = (uint64_t)seed;
    mm_video_latents r = {0};
    mm_error eerr = {{0}};
    mm_video_vae_set_capture(k->video, &(mm_vae_capture){capture_fn, k});
    int erc = T == 1 ? mm_video_vae_encode_image(k->video, k->ctx, fr.data, (int)W, (int)H, 3 * W, &eo, &r, &eerr)
                     : mm_video_vae_encode_video(k->video, k->ctx, T, (int)W, (int)H, 3 * W, pull,
                                                 &(frame_src){fr.data, H * W * 3}, &eo, &r, &eerr);
    mm_video_vae_set_capture(k->video, NULL);
    char what[160];
    snprintf(what, sizeof what, "%s encode", name);
    int rc = 0;
    if (erc != 0) {
        mm_conf_verdict(k->run, false, what, "%s", eerr.msg);
        goto out;
    }
    const int64_t n = r.shape[0] * r.shape[1] * r.shape[2] * r.shape[3];
    /* the noise, bit for bit */
    snprintf(tn, sizeof tn, "%s.dbg.noise", name);
    if (mm_st_find(k->cases, tn)) {
        mm_conf_tol nt = {INFINITY, 0.0};
        double nmax = 0;
        if (mm_conf_json_number(jpath(k->m, "tolerances", "noise", NULL), "max_abs", &nmax, err) != 0) {
            rc = -1;
            goto out;
        }
        nt.max_abs = nmax;
        if (compare(k, tn, r.noise, n, nt, NULL, err) != 0) {
            rc = -1;
            goto out;
        }
    }
    mm_conf_tol fallback;
    if (tolerance(k, "video_encode", "latents", &fallback, err) != 0 || compare_debug(k, name, fallback, err) != 0) {
        rc = -1;
        goto out;
    }
    float *mean_lat = malloc(sizeof(float) * (size_t)n), *sample = malloc(sizeof(float) * (size_t)n);
    if (!mean_lat || !sample) {
        free(mean_lat);
        free(sample);
        rc = mm_fail(err, "out of memory");
        goto out;
    }
    const int64_t per = n / r.shape[0];
    for (int64_t i = 0; i < n; i++) {
        int64_t c = i / per;
        mean_lat[i] = (r.mean[i] - vc->latents_mean[c]) / vc->latents_std[c];
        sample[i] = r.latents[i] * vc->latents_std[c] + vc->latents_mean[c];
    }
    static const char *const q[4] = {"posterior_mean", "posterior_logvar", "mean_latents", "latents"};
    const float *v[4] = {r.mean, r.logvar, mean_lat, r.latents};
    for (int i = 0; i < 4 && rc == 0; i++) {
        mm_conf_tol tol;
        snprintf(tn, sizeof tn, "%s.out.%s", name, q[i]);
        if (tolerance(k, "video_encode", q[i], &tol, err) != 0 || compare(k, tn, v[i], n, tol, NULL, err) != 0)
            rc = -1;
    }
    /* out.sample: the raw fp16 sample, checked through out.latents; kept for --out */
    snprintf(tn, sizeof tn, "%s.out.sample", name);
    const mm_st_entry *se = mm_st_find(k->cases, tn);
    if (rc == 0 && se && k->run->keep_outputs) {
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
        if (!h)
            rc = mm_fail(err, "out of memory");
        for (int64_t i = 0; h && i < n; i++)
            h[i] = mm_f32_to_f16(sample[i]);
        if (h && mm_conf_keep(k->run, tn, MM_F16, se->ndim, se->shape, h, err) != 0)
            rc = -1;
        free(h);
    }
    free(mean_lat);
    free(sample);
out:
    mm_video_latents_free(&r);
    captures_clear(k);
    return rc;
}

/* ------------------------------------------------------------------ audio */

static int run_audio_decode(vae_kit *k, const char *name, mm_error *err)
{
    char tn[160];
    snprintf(tn, sizeof tn, "%s.in.latents", name);
    mm_tensor lat;
    if (mm_st_get(k->cases, tn, &lat, err) != 0)
        return -1;
    float *wave = NULL;
    int64_t samples = 0;
    mm_error derr = {{0}};
    mm_audio_vae_set_capture(k->audio, &(mm_vae_capture){capture_fn, k});
    int drc = mm_audio_vae_decode(k->audio, k->ctx, &lat, &wave, &samples, &derr);
    mm_audio_vae_set_capture(k->audio, NULL);
    int rc = 0;
    if (drc != 0) {
        snprintf(tn, sizeof tn, "%s decode", name);
        mm_conf_verdict(k->run, false, tn, "%s", derr.msg);
    } else {
        mm_conf_tol tol;
        snprintf(tn, sizeof tn, "%s.out.waveform", name);
        if (tolerance(k, "audio_decode", "waveform", &tol, err) != 0 || compare_debug(k, name, tol, err) != 0 ||
            compare(k, tn, wave, lat.shape[0] * samples, tol, NULL, err) != 0)
            rc = -1;
    }
    free(wave);
    captures_clear(k);
    return rc;
}

static int run_audio_encode(vae_kit *k, const char *name, mm_error *err)
{
    char tn[160];
    snprintf(tn, sizeof tn, "%s.in.waveform", name);
    mm_tensor wav;
    if (mm_st_get(k->cases, tn, &wav, err) != 0)
        return -1;
    float *lat = NULL;
    int64_t T = 0;
    mm_error eerr = {{0}};
    mm_audio_vae_set_capture(k->audio, &(mm_vae_capture){capture_fn, k});
    int erc = mm_audio_vae_encode_batch(k->audio, k->ctx, &wav, &lat, &T, &eerr);
    mm_audio_vae_set_capture(k->audio, NULL);
    int rc = 0;
    if (erc != 0) {
        snprintf(tn, sizeof tn, "%s encode", name);
        mm_conf_verdict(k->run, false, tn, "%s", eerr.msg);
    } else {
        mm_conf_tol tol;
        const mm_audio_vae_config *ac = mm_audio_vae_get_config(k->audio);
        snprintf(tn, sizeof tn, "%s.out.latents", name);
        if (tolerance(k, "audio_encode", "latents", &tol, err) != 0 || compare_debug(k, name, tol, err) != 0 ||
            compare(k, tn, lat, wav.shape[0] * ac->latent_channels * T, tol, NULL, err) != 0)
            rc = -1;
    }
    free(lat);
    captures_clear(k);
    return rc;
}

/* ------------------------------------------------------------ load + run */

int mm_conf_vae_video_options(const json_t *m, const mm_safetensors *cases, mm_video_vae_options *o, mm_error *err)
{
    mm_video_vae_options_release(o);
    const json_t *fx = jpath(m, "fixed", "video", NULL), *cf = jpath(m, "config", "video", NULL),
                 *dv = jpath(m, "derived", "video", NULL);
    int n1, n2, tiling = 1;
    if (jints(json_object_get(fx, "space_down"), o->space_down, MM_VAE_MAX_LEVELS, &n1, "fixed.video.space_down",
              err) ||
        jints(json_object_get(fx, "time_down"), o->time_down, MM_VAE_MAX_LEVELS, &n2, "fixed.video.time_down", err))
        return -1;
    if (n1 != n2)
        return mm_fail(err, "manifest: space_down and time_down differ in length");
    o->levels = n1;
    if (jint(fx, "norm_num_groups", &o->norm_groups, err) || jint(fx, "decoder_head_dim", &o->head_dim, err) ||
        jfloat(fx, "rope_theta", &o->rope_theta, err) || jfloat(fx, "rope_dim_ratio", &o->rope_dim_ratio, err) ||
        jint(fx, "clip_length", &o->clip_length, err) || jint(fx, "token_drop", &o->token_drop, err) ||
        jint(cf, "tile_size", &o->tile_size, err) || jint(cf, "tile_overlap_min", &o->tile_overlap_min, err) ||
        jfloat(dv, "groupnorm_eps", &o->groupnorm_eps, err) || jfloat(dv, "norm_eps", &o->norm_eps, err))
        return -1;
    const json_t *t = json_object_get(fx, "tiling");
    if (json_is_boolean(t))
        tiling = json_is_true(t);
    o->tiling = tiling;
    int nm, ns, np, nq;
    if (read_const(cases, "const.video_latents_mean", o->latents_mean, MM_VAE_MAX_LATENT, &nm, err) ||
        read_const(cases, "const.video_latents_std", o->latents_std, MM_VAE_MAX_LATENT, &ns, err) ||
        read_const(cases, "const.imagenet_mean", o->pixel_mean, 3, &np, err) ||
        read_const(cases, "const.imagenet_std", o->pixel_std, 3, &nq, err))
        return -1;
    if (nm != ns || np != 3 || nq != 3)
        return mm_fail(err, "cases: const.* have inconsistent lengths");
    o->n_latent_const = nm;
    return 0;
}

int mm_conf_vae_audio_options(const json_t *m, const mm_safetensors *cases, mm_audio_vae_options *o, mm_error *err)
{
    mm_audio_vae_options_release(o);
    const json_t *cf = jpath(m, "config", "audio", NULL), *dv = jpath(m, "derived", "audio", NULL);
    int nd;
    if (jints(json_object_get(cf, "encoder_rates"), o->encoder_rates, MM_VAE_MAX_LEVELS, &o->n_encoder_rates,
              "config.audio.encoder_rates", err) ||
        jints(json_object_get(cf, "decoder_rates"), o->decoder_rates, MM_VAE_MAX_LEVELS, &o->n_decoder_rates,
              "config.audio.decoder_rates", err) ||
        jint(cf, "heads", &o->heads, err) ||
        jints(json_object_get(dv, "dilations"), o->dilations, 3, &nd, "derived.audio.dilations", err) ||
        jfloat(dv, "layernorm_eps", &o->layernorm_eps, err))
        return -1;
    if (nd != 3)
        return mm_fail(err, "manifest: derived.audio.dilations must have 3 entries");
    int nm, ns;
    if (read_const(cases, "const.audio_latents_mean", o->latents_mean, MM_VAE_MAX_LATENT, &nm, err) ||
        read_const(cases, "const.audio_latents_std", o->latents_std, MM_VAE_MAX_LATENT, &ns, err))
        return -1;
    if (nm != ns)
        return mm_fail(err, "cases: const.audio_latents_* differ in length");
    o->n_latent_const = nm;
    return 0;
}

static void check_config(vae_kit *k)
{
    const json_t *dv = jpath(k->m, "derived", "video", NULL), *da = jpath(k->m, "derived", "audio", NULL);
    const json_t *cv = jpath(k->m, "config", "video", NULL);
    const mm_video_vae_config *v = mm_video_vae_get_config(k->video);
    const mm_audio_vae_config *a = mm_audio_vae_get_config(k->audio);
    struct {
        const char *what;
        int64_t mine;
        const json_t *ref;
    } items[] = {
        {"video.decoder_dim", v->dim, json_object_get(dv, "decoder_dim")},
        {"video.decoder_heads", v->heads, json_object_get(cv, "decoder_heads")},
        {"video.decoder_layers", v->layers, json_object_get(cv, "decoder_layers")},
        {"video.ffn_hidden", v->ffn_hidden, json_object_get(dv, "ffn_hidden")},
        {"video.rope_dim", v->rope_dim, json_object_get(dv, "rope_dim")},
        {"video.register_tokens", v->registers, json_object_get(dv, "register_tokens")},
        {"video.latent_channels", v->latent_channels, json_object_get(dv, "latent_channels")},
        {"video.spatial_compression", v->patch_s, json_object_get(dv, "spatial_compression")},
        {"video.temporal_compression", v->patch_t, json_object_get(dv, "temporal_compression")},
        {"video.tokens_chunk_size", v->tokens_chunk_size, json_object_get(dv, "tokens_chunk_size")},
        {"video.frame_pre_padding", v->frame_pre_padding, json_object_get(dv, "frame_pre_padding")},
        {"video.token_overlap", v->token_overlap, json_object_get(dv, "token_overlap")},
        {"video.frame_overlap", v->frame_overlap, json_object_get(dv, "frame_overlap")},
        {"video.chunk_frames", v->chunk_frames, json_object_get(dv, "chunk_frames")},
        {"audio.hop", a->hop, json_object_get(da, "hop")},
        {"audio.head_dim", a->head_dim, json_object_get(da, "head_dim")},
        {"audio.pool_group", a->pool_group, json_object_get(da, "pool_group")},
        {"audio.latent_channels", a->latent_channels, json_object_get(da, "latent_channels")},
    };
    bool ok = true;
    char bad[512] = "";
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        if (!json_is_integer(items[i].ref))
            continue;
        if (json_integer_value(items[i].ref) != items[i].mine) {
            ok = false;
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " %s=%lld (kit %lld)", items[i].what,
                     (long long)items[i].mine, (long long)json_integer_value(items[i].ref));
        }
    }
    /* channel ladders */
    const json_t *ec = json_object_get(da, "encoder_channels"), *dc = json_object_get(da, "decoder_channels");
    if (json_is_array(ec) && json_integer_value(json_array_get(ec, 0)) != a->encoder_dim)
        ok = false, snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " audio.encoder_dim=%d", a->encoder_dim);
    if (json_is_array(dc) && json_integer_value(json_array_get(dc, 0)) != a->decoder_dim)
        ok = false, snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " audio.decoder_dim=%d", a->decoder_dim);
    if (ok)
        mm_conf_verdict(k->run, true, "config", "video %d levels, ViT %d x %d heads x %d; audio hop %d, trunk %d",
                        v->levels, v->layers, v->heads, v->head_dim, a->hop, a->latent_dim);
    else
        mm_conf_verdict(k->run, false, "config", "%s", bad);
}

int mm_conf_kit_vae(mm_conf_run *run, mm_error *err)
{
    vae_kit k = {.run = run, .m = run->manifest};
    char path[4096];
    int rc = -1;
    snprintf(path, sizeof path, "%s/cases.safetensors", run->kit_dir);
    if (mm_st_open(&k.cases, path, err) != 0)
        return -1;
    if (mm_ctx_create(&k.ctx, run->device, 0, err) != 0)
        goto out;
    mm_video_vae_options vo;
    mm_audio_vae_options ao;
    if (mm_conf_vae_video_options(k.m, k.cases, &vo, err) != 0 || mm_conf_vae_audio_options(k.m, k.cases, &ao, err) != 0)
        goto out;
    const json_t *files = jpath(k.m, "checkpoints", NULL, NULL);
    const char *vf = json_string_value(jpath(files, "video", "file", NULL));
    const char *af = json_string_value(jpath(files, "audio", "file", NULL));
    snprintf(path, sizeof path, "%s/%s", run->kit_dir, vf ? vf : "video_vae.safetensors");
    if (mm_video_vae_load(&k.video, path, &vo, MM_VAE_BOTH, k.ctx, err) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/%s", run->kit_dir, af ? af : "audio_vae.safetensors");
    if (mm_audio_vae_load(&k.audio, path, &ao, MM_VAE_BOTH, k.ctx, err) != 0)
        goto out;
    check_config(&k);
    const json_t *cases = json_object_get(k.m, "cases");
    const char *name;
    const json_t *cs;
    json_object_foreach((json_t *)cases, name, cs)
    {
        const char *kind = json_string_value(json_object_get(cs, "kind"));
        int r;
        if (!kind)
            r = mm_fail(err, "manifest: case %s has no kind", name);
        else if (strcmp(kind, "video_decode") == 0)
            r = run_video_decode(&k, name, cs, err);
        else if (strcmp(kind, "video_encode") == 0)
            r = run_video_encode(&k, name, cs, err);
        else if (strcmp(kind, "audio_decode") == 0)
            r = run_audio_decode(&k, name, err);
        else if (strcmp(kind, "audio_encode") == 0)
            r = run_audio_encode(&k, name, err);
        else
            r = mm_fail(err, "manifest: case %s has kind \"%s\" (known: video_decode, video_encode, audio_decode, "
                             "audio_encode)",
                        name, kind);
        if (r != 0) {
            mm_error_prefix(err, "case %s", name);
            goto out;
        }
    }
    rc = 0;
out:
    captures_clear(&k);
    mm_video_vae_free(k.video);
    mm_audio_vae_free(k.audio);
    mm_ctx_destroy(k.ctx);
    mm_st_close(k.cases);
    return rc;
}
