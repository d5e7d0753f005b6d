/* mmh3-bench-dit-quality: fast mode's quality against exact mode on the same
 * seed (issue 9). Two sampler runs of one t2va request from the same seeded
 * noise and the same text:
 *
 *   1. the exact trajectory; at every step the fast velocity is computed on
 *      the same state too, and their difference reported (per-step velocity
 *      relative error, video and audio rows, free of accumulated drift);
 *   2. the fast trajectory on its own;
 *
 * then the final latents of the two runs are compared (PSNR over the target
 * video latents and the audio rows, peak = the exact run's max |value|), and
 * with --video-vae both are decoded and the frames compared (PSNR over RGB24,
 * peak 255). Fast mode = e4m3 attention (backend/cuda/cuda_speed.h); where the
 * GPU has no such kernel (or on the CPU) fast equals exact and every error is
 * zero, which CI uses as a smoke test.
 *
 *   mmh3-bench-dit-quality --checkpoint DIT [--video-vae VAE] [--device cuda]
 *       [--width 768] [--height 768] [--frames 22] [--text-rows 300] [--steps 8] [--seed 42]
 *
 * Machine-readable lines:
 *   QUALITY step=3 t_video=0.41 video_rel_l2=0.0123 audio_rel_l2=0.0101
 *   QUALITY final video_latent_psnr_db=41.2 audio_psnr_db=43.0 frame_psnr_db=38.5 frames=22
 *   RESULT quality steps=8 exact_s_per_forward=0.21 fast_s_per_forward=0.15 ...
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/device.h"
#include "backend/ops.h"
#include "model/dit/dit.h"
#include "model/dit/layout.h"
#include "model/dit/patchify.h"
#include "model/vae/vae.h"
#include "sampler/flow_sampler.h"
#include "sampler/initial_noise.h"
#include "sampler/sigmas.h"
#include "sampler/torch_rng.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double rel_l2(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)a[i] - b[i];
        num += e * e;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* PSNR of `got` against `want` with peak = max |want| (INFINITY when equal). */
static double psnr(const float *got, const float *want, int64_t n)
{
    double mse = 0, peak = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)got[i] - want[i];
        mse += e * e;
        peak = fmax(peak, fabs((double)want[i]));
    }
    mse /= (double)(n ? n : 1);
    return mse > 0 ? 10.0 * log10(peak * peak / mse) : INFINITY;
}

typedef struct run_state {
    mm_ctx *ctx;
    mm_dit_request *req;
    const mm_dit_layout *l;
    mm_tensor video, audio, vv, va; /* device rows and velocities */
    int compare;                    /* pass 1: fast velocities on the exact state too */
    int mode_fast;                  /* pass 2: the trajectory's own mode */
    float *fast_v, *fast_a;         /* host scratch for the compared velocities */
    double t_exact, t_fast;
    int n_exact, n_fast;
} run_state;

static int forward(run_state *s, const float *row_t, bool fast, float *v_video, float *v_audio, mm_error *err)
{
    mm_dit_request_set_fast(s->req, fast);
    double t0 = now();
    if (mm_dit_forward(s->req, row_t, &s->video, &s->audio, &s->vv, &s->va, err) != 0)
        return -1;
    mm_tensor ov = mm_tensor_wrap(v_video, mm_cpu(), MM_F32, 2, s->vv.shape);
    mm_tensor oa = mm_tensor_wrap(v_audio, mm_cpu(), MM_F32, 2, s->va.shape);
    mm_copy(s->ctx, &ov, &s->vv);
    mm_copy(s->ctx, &oa, &s->va);
    if (mm_ctx_sync(s->ctx, err) != 0)
        return -1;
    if (fast) {
        s->t_fast += now() - t0;
        s->n_fast++;
    } else {
        s->t_exact += now() - t0;
        s->n_exact++;
    }
    return 0;
}

static int velocity(void *user, int step, float t_video, float t_audio, const mm_flow_stream *video,
                    const mm_flow_stream *audio, float *v_video, float *v_audio, mm_error *err)
{
    run_state *s = user;
    float *row_t = malloc(sizeof(float) * (size_t)s->l->rows);
    if (!row_t)
        return mm_fail(err, "out of memory");
    mm_dit_row_timesteps(s->l, t_video, t_audio, 0.999f, row_t);
    mm_tensor hv = mm_tensor_wrap(video->rows, mm_cpu(), MM_F32, 2, s->video.shape);
    mm_tensor ha = mm_tensor_wrap(audio->rows, mm_cpu(), MM_F32, 2, s->audio.shape);
    mm_copy(s->ctx, &s->video, &hv);
    mm_copy(s->ctx, &s->audio, &ha);
    int rc = mm_ctx_sync(s->ctx, err);
    if (rc == 0)
        rc = forward(s, row_t, s->mode_fast, v_video, v_audio, err);
    if (rc == 0 && s->compare) {
        rc = forward(s, row_t, true, s->fast_v, s->fast_a, err);
        if (rc == 0) {
            const int64_t nv = (video->n_rows - video->cond_rows) * video->width;
            const int64_t na = (audio->n_rows - audio->cond_rows) * audio->width;
            printf("QUALITY step=%d t_video=%.4f t_audio=%.4f video_rel_l2=%.4g audio_rel_l2=%.4g\n", step, t_video,
                   t_audio, rel_l2(s->fast_v + video->cond_rows * video->width, v_video + video->cond_rows * video->width, nv),
                   rel_l2(s->fast_a + audio->cond_rows * audio->width, v_audio + audio->cond_rows * audio->width, na));
            fflush(stdout);
        }
    }
    free(row_t);
    return rc;
}

/* Decoded frames of one latent, kept as RGB24 on the host. */
typedef struct frames {
    uint8_t *rgb;
    int64_t n, frame_bytes, cap;
} frames;

static int keep_frame(void *user, int64_t index, const uint8_t *rgb, int width, int height, const mm_tensor *pixels,
                      mm_error *err)
{
    (void)index, (void)pixels;
    frames *f = user;
    const int64_t fb = (int64_t)width * height * 3;
    if (f->n == f->cap) {
        int64_t cap = f->cap ? 2 * f->cap : 32;
        uint8_t *g = realloc(f->rgb, (size_t)(cap * fb));
        if (!g)
            return mm_fail(err, "out of memory for decoded frames");
        f->rgb = g;
        f->cap = cap;
    }
    f->frame_bytes = fb;
    memcpy(f->rgb + f->n * fb, rgb, (size_t)fb);
    f->n++;
    return 0;
}

static int decode(mm_video_vae *vae, mm_ctx *ctx, const mm_video_shape *shape, const float *target_rows, frames *out,
                  mm_error *err)
{
    const int64_t n = (int64_t)shape->channels * shape->frames * shape->height * shape->width;
    float *lat = malloc(sizeof(float) * (size_t)n);
    if (!lat)
        return mm_fail(err, "out of memory");
    mm_unpatchify_video(shape, target_rows, lat);
    mm_tensor t = mm_tensor_wrap(lat, mm_cpu(), MM_F32, 4,
                                 (int64_t[]){shape->channels, shape->frames, shape->height, shape->width});
    int rc = mm_video_vae_decode(vae, ctx, &t, keep_frame, out, err);
    free(lat);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mmh3-bench-dit-quality --checkpoint DIT [--video-vae VAE] [--device cpu|cuda[:N]]\n"
               "         [--width 768] [--height 768] [--frames 22] [--text-rows 300] [--steps 8] [--seed 42]\n");
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *vae_path = NULL, *device = NULL;
    int width = 768, height = 768, frames_n = 22, text_rows = 300, steps = 8;
    long long seed = 42;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage(strcmp(a, "--help") == 0 ? stdout : stderr);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
        if (strcmp(a, "--checkpoint") == 0)
            ckpt = v;
        else if (strcmp(a, "--video-vae") == 0)
            vae_path = v;
        else if (strcmp(a, "--device") == 0)
            device = v;
        else if (strcmp(a, "--width") == 0)
            width = atoi(v);
        else if (strcmp(a, "--height") == 0)
            height = atoi(v);
        else if (strcmp(a, "--frames") == 0)
            frames_n = atoi(v);
        else if (strcmp(a, "--text-rows") == 0)
            text_rows = atoi(v);
        else if (strcmp(a, "--steps") == 0)
            steps = atoi(v);
        else if (strcmp(a, "--seed") == 0)
            seed = atoll(v);
        else {
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!ckpt || (frames_n - 5) % 17 != 0 || width % 32 || height % 32 || steps < 2 || text_rows < 1) {
        usage(stderr);
        fprintf(stderr, "(frames 17n+5, width/height multiples of 32, steps >= 2)\n");
        return 2;
    }
    mm_error err = {{0}};
    mm_device dev = mm_cuda_device_count() > 0 ? mm_cuda(0) : mm_cpu();
    if (device && mm_device_parse(device, &dev, &err) != 0) {
        fprintf(stderr, "mmh3-bench-dit-quality: %s\n", err.msg);
        return 2;
    }
    mm_ctx *ctx = NULL;
    mm_dit *dit = NULL;
    mm_video_vae *vae = NULL;
    mm_dit_request *req = NULL;
    mm_dit_layout l = {0};
    mm_sigma_schedule sv = {0}, sa = {0};
    run_state s = {0};
    frames fe = {0}, ff = {0};
    float *text = NULL, *v0 = NULL, *a0 = NULL, *ve = NULL, *ae = NULL, *vf = NULL, *af = NULL;
    int8_t *tags = NULL;
    int rc = 1;
    if (mm_ctx_create(&ctx, dev, 0, &err) != 0 || mm_dit_load(&dit, ckpt, ctx, NULL, &err) != 0)
        goto done;
    const mm_dit_config *c = mm_dit_get_config(dit);
    if (vae_path && mm_video_vae_load(&vae, vae_path, NULL, MM_VAE_DECODER, ctx, &err) != 0)
        goto done;

    /* t2va layout: latent frames 5n+2, canvas /16, audio 40 latents per second per channel */
    const int T = (frames_n - 5) / 17 * 5 + 2, Hl = height / 16, Wl = width / 16;
    const int A = (int)nearbyint(frames_n / 24.0 * 40.0);
    tags = malloc((size_t)text_rows);
    memset(tags, MM_DIT_TAG_TEXT, (size_t)text_rows);
    mm_dit_layout_request lr = {.text_tags = tags,
                                .text_rows = text_rows,
                                .target = {T, Hl, Wl, A, c->patch[0], c->patch[1], c->patch[2], 2}};
    if (mm_dit_layout_build(&lr, &l, &err) != 0)
        goto done;
    const mm_video_shape shape = {c->video_row_width / (c->patch[0] * c->patch[1] * c->patch[2]), T, Hl, Wl,
                                  c->patch[0], c->patch[1], c->patch[2]};
    const int vw = c->video_row_width, aw = c->audio_row_width;
    const int64_t nv = l.video_rows * vw, na = l.audio_rows * aw;

    /* the text: seeded normals (a stand-in for the conditioner's rows) */
    mm_torch_gen g;
    mm_torch_gen_seed(&g, (uint64_t)seed + 1);
    text = malloc(sizeof(float) * (size_t)text_rows * c->text_dim);
    v0 = malloc(sizeof(float) * (size_t)nv);
    a0 = malloc(sizeof(float) * (size_t)na);
    ve = malloc(sizeof(float) * (size_t)nv);
    ae = malloc(sizeof(float) * (size_t)na);
    vf = malloc(sizeof(float) * (size_t)nv);
    af = malloc(sizeof(float) * (size_t)na);
    s.fast_v = malloc(sizeof(float) * (size_t)nv);
    s.fast_a = malloc(sizeof(float) * (size_t)na);
    if (!text || !v0 || !a0 || !ve || !ae || !vf || !af || !s.fast_v || !s.fast_a) {
        mm_fail(&err, "out of memory");
        goto done;
    }
    mm_torch_randn_f32(&g, text, (int64_t)text_rows * c->text_dim);
    mm_noise_plan plan = {.conds = NULL, .n_conds = 0, .condition_t = 0.999f, .target = shape,
                          .audio_rows = l.audio_rows, .audio_width = aw};
    if (mm_draw_initial_rows((uint64_t)seed, &plan, v0, a0, NULL, NULL, &err) != 0 ||
        mm_sigma_schedule_build(steps, 12.0f, &sv, &err) != 0 || mm_sigma_schedule_build(steps, 3.0f, &sa, &err) != 0)
        goto done;

    mm_tensor th = mm_tensor_wrap(text, mm_cpu(), MM_F32, 2, (int64_t[]){text_rows, c->text_dim});
    if (mm_dit_request_begin(dit, ctx, &l, &th, NULL, &req, &err) != 0)
        goto done;
    s.ctx = ctx;
    s.req = req;
    s.l = &l;
    if (mm_tensor_alloc(&s.video, dev, MM_F32, 2, (int64_t[]){l.video_rows, vw}, &err) ||
        mm_tensor_alloc(&s.audio, dev, MM_F32, 2, (int64_t[]){l.audio_rows, aw}, &err) ||
        mm_tensor_alloc(&s.vv, dev, MM_F32, 2, (int64_t[]){l.video_rows, vw}, &err) ||
        mm_tensor_alloc(&s.va, dev, MM_F32, 2, (int64_t[]){l.audio_rows, aw}, &err))
        goto done;
    printf("quality: S = %lld rows (%dx%d, %d frames, text %d), %d grid steps (%d forwards), seed %lld, attention "
           "exact %s\n",
           (long long)l.rows, width, height, frames_n, text_rows, steps, steps - 1, seed, mm_dit_attention_kind(req));
    mm_dit_request_set_fast(req, true);
    printf("quality: fast mode attention %s\n", mm_dit_attention_kind(req));
    fflush(stdout);

    /* 1: the exact trajectory, fast velocities compared on its states */
    memcpy(ve, v0, sizeof(float) * (size_t)nv);
    memcpy(ae, a0, sizeof(float) * (size_t)na);
    mm_flow_stream fv = {ve, l.video_rows, 0, vw, &sv}, fa = {ae, l.audio_rows, 0, aw, &sa};
    s.compare = 1;
    s.mode_fast = 0;
    if (mm_flow_sample(&fv, &fa, velocity, &s, NULL, &err) != 0)
        goto done;
    /* 2: the fast trajectory */
    memcpy(vf, v0, sizeof(float) * (size_t)nv);
    memcpy(af, a0, sizeof(float) * (size_t)na);
    mm_flow_stream gv = {vf, l.video_rows, 0, vw, &sv}, ga = {af, l.audio_rows, 0, aw, &sa};
    s.compare = 0;
    s.mode_fast = 1;
    if (mm_flow_sample(&gv, &ga, velocity, &s, NULL, &err) != 0)
        goto done;

    const double vp = psnr(vf, ve, nv), ap = psnr(af, ae, na);
    double fp = NAN;
    if (vae) {
        if (decode(vae, ctx, &shape, ve, &fe, &err) != 0 || decode(vae, ctx, &shape, vf, &ff, &err) != 0)
            goto done;
        double mse = 0;
        const int64_t total = fe.n * fe.frame_bytes;
        for (int64_t i = 0; i < total && fe.n == ff.n; i++) {
            double e = (double)fe.rgb[i] - ff.rgb[i];
            mse += e * e;
        }
        mse /= (double)(total ? total : 1);
        fp = fe.n != ff.n ? NAN : mse > 0 ? 10.0 * log10(255.0 * 255.0 / mse) : INFINITY;
    }
    printf("QUALITY final video_latent_psnr_db=%.2f audio_psnr_db=%.2f frame_psnr_db=%.2f frames=%lld "
           "video_latent_rel_l2=%.4g\n",
           vp, ap, fp, (long long)fe.n, rel_l2(vf, ve, nv));
    printf("RESULT quality steps=%d rows=%lld exact_s_per_forward=%.4f fast_s_per_forward=%.4f\n", steps,
           (long long)l.rows, s.n_exact ? s.t_exact / s.n_exact : NAN, s.n_fast ? s.t_fast / s.n_fast : NAN);
    rc = 0;
done:
    if (rc)
        printf("FAIL mmh3-bench-dit-quality: %s\n", err.msg);
    mm_tensor_free(&s.video);
    mm_tensor_free(&s.audio);
    mm_tensor_free(&s.vv);
    mm_tensor_free(&s.va);
    mm_dit_request_end(req);
    mm_sigma_schedule_free(&sv);
    mm_sigma_schedule_free(&sa);
    mm_dit_layout_free(&l);
    mm_video_vae_free(vae);
    mm_dit_free(dit);
    if (ctx)
        mm_ctx_destroy(ctx);
    free(fe.rgb);
    free(ff.rgb);
    free(text);
    free(v0);
    free(a0);
    free(ve);
    free(ae);
    free(vf);
    free(af);
    free(s.fast_v);
    free(s.fast_a);
    free(tags);
    return rc;
}
