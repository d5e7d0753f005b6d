/* The VAEs at full size on the device the context names (tests/device/vae.sh):
 *
 *   bench_vae --video FILE --audio FILE [--device cuda|cpu] [--frames 124]
 *             [--width 1344] [--height 768] [--audio-seconds 5] [--reps 3]
 *             [--batch-tiles N] [--what decode,keyframe,audio,video] [--out FILE]
 *             [--int8]   (the decoder's block linears in int8 ConvRot: case "decode_..._int8")
 *
 * loads both checkpoints with the real loaders (random weights in the release
 * layout: mmh3-gen-tiny video-vae|audio-vae --full) and times
 *   decode    normalized latents for `frames` frames (37 x 48 x 84 for
 *             124 @ 1344x768) -> uint8 frames through the streaming callback,
 *   keyframe  one RGB image on the canvas -> seeded latents,
 *   audio     stereo latents for `audio-seconds` (40 per second) -> waveform,
 *   video     (optional) a reference video of `frames` frames -> latents,
 * printing per case
 *   VAE_BENCH <case> median_s <t> min_s <t> reps <n> peak_above_weights_gib <g>
 * and VAE_MEM weights_gib <w>. Inputs are seeded; --out writes them with the
 * outputs (first and last decoded frames, keyframe latents, waveform) so
 * bench/reference/vae_ref.py can recompute the same in PyTorch and compare. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/device.h"
#include "backend/kernel_policy.h"
#include "backend/ops.h"
#include "io/safetensors.h"
#include "model/vae/vae.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float unit_normal(void)
{
    /* Box-Muller on xorshift64: the inputs only need to be seeded */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    double u1 = ((rng >> 11) + 1.0) / 9007199254740993.0;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    double u2 = (rng >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct frame_keep {
    int64_t n, last;
    uint8_t *first, *final;
    size_t bytes;
} frame_keep;

static int on_frame(void *user, int64_t index, const uint8_t *rgb, int w, int h, const mm_tensor *px, mm_error *err)
{
    (void)px;
    (void)err;
    frame_keep *k = user;
    if (k->first) {
        if (index == 0)
            memcpy(k->first, rgb, (size_t)w * h * 3);
        if (index == k->last)
            memcpy(k->final, rgb, (size_t)w * h * 3);
    }
    k->n++;
    return 0;
}

typedef struct outputs {
    const char *names[16];
    mm_tensor t[16];
    int n;
} outputs;

static void keep(outputs *o, const char *name, mm_dtype dt, int ndim, const int64_t *shape, void *data)
{
    if (o->n < 16) {
        o->names[o->n] = name;
        o->t[o->n++] = mm_tensor_wrap(data, mm_cpu(), dt, ndim, shape);
    }
}

static void report(const char *what, double *t, int reps, mm_device dev, size_t base)
{
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    mm_memory_stats ms = {0};
    double peak = 0;
    if (dev.kind == MM_DEVICE_CUDA && mm_device_memory_stats(dev, &ms) == 0)
        peak = (double)(ms.peak > base ? ms.peak - base : 0) / (1u << 30);
    printf("VAE_BENCH %s median_s %.4f min_s %.4f reps %d peak_above_weights_gib %.3f\n", what, t[reps / 2], t[0], reps,
           peak);
    fflush(stdout);
}

static bool want(const char *list, const char *what)
{
    char buf[128];
    snprintf(buf, sizeof buf, ",%s,", list);
    char w[32];
    snprintf(w, sizeof w, ",%s,", what);
    return strstr(buf, w) != NULL;
}

typedef struct video_src {
    uint8_t *frames;
    int64_t bytes;
} video_src;

static const uint8_t *pull(void *user, int64_t index, mm_error *err)
{
    (void)err;
    const video_src *s = user;
    return s->frames + index * s->bytes;
}

int main(int argc, char **argv)
{
    const char *video = NULL, *audio = NULL, *device = "cuda", *what = "decode,keyframe,audio", *out = NULL;
    int frames = 124, width = 1344, height = 768, reps = 3, batch_tiles = 0;
    bool int8 = false;
    double audio_seconds = 5.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (strcmp(a, name) == 0 && v && (i++, 1))
        if (OPT("--video"))
            video = v;
        else if (OPT("--audio"))
            audio = v;
        else if (OPT("--device"))
            device = v;
        else if (OPT("--frames"))
            frames = atoi(v);
        else if (OPT("--width"))
            width = atoi(v);
        else if (OPT("--height"))
            height = atoi(v);
        else if (OPT("--audio-seconds"))
            audio_seconds = atof(v);
        else if (OPT("--reps"))
            reps = atoi(v);
        else if (OPT("--batch-tiles"))
            batch_tiles = atoi(v);
        else if (OPT("--what"))
            what = v;
        else if (OPT("--out"))
            out = v;
        else if (strcmp(a, "--int8") == 0)
            int8 = true;
        else {
            fprintf(stderr, "bench_vae: unknown or incomplete argument '%s' (see the header of bench/bench_vae.c)\n", a);
            return 2;
        }
#undef OPT
    }
    if (!video || !audio || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: bench_vae --video FILE --audio FILE [--device D] [--frames N] [--width W] "
                        "[--height H] [--audio-seconds S] [--reps N] [--batch-tiles N] [--what LIST] [--out FILE] [--int8]\n");
        return 2;
    }
    mm_error err = {{0}};
    mm_device dev;
    mm_ctx *ctx;
    if (mm_device_parse(device, &dev, &err) != 0 || mm_ctx_create(&ctx, dev, 0, &err) != 0) {
        fprintf(stderr, "bench_vae: %s\n", err.msg);
        return 1;
    }
    mm_video_vae_options vo;
    mm_video_vae_options_release(&vo);
    vo.max_batch_tiles = batch_tiles;
    vo.int8_linears = int8;
    mm_video_vae *vv;
    mm_audio_vae *av;
    double t0 = now();
    if (mm_video_vae_load(&vv, video, &vo, MM_VAE_BOTH, ctx, &err) != 0 ||
        mm_audio_vae_load(&av, audio, NULL, MM_VAE_DECODER, ctx, &err) != 0) {
        fprintf(stderr, "bench_vae: %s\n", err.msg);
        return 1;
    }
    mm_ctx_sync(ctx, NULL);
    size_t base = 0;
    mm_memory_stats ms = {0};
    if (dev.kind == MM_DEVICE_CUDA && mm_device_memory_stats(dev, &ms) == 0)
        base = ms.in_use;
    printf("VAE_MEM weights_gib %.3f load_s %.2f\n", (double)base / (1u << 30), now() - t0);
    char policy[256]; /* the kernels measured (MMH3_KERNELS=portable: the fallbacks) */
    mm_kernel_policy_describe(mm_kernel_policy_get(), policy, sizeof policy);
    printf("VAE_KERNELS %s\n", policy);
    const mm_video_vae_config *vc = mm_video_vae_get_config(vv);
    const int64_t C = vc->latent_channels, L = mm_video_vae_latent_frames(vc, frames);
    const int64_t h = height / vc->patch_s, w = width / vc->patch_s;
    outputs o = {0};
    double t[64];
    int rc = 0;

    /* decode: [24, L, h, w] normalized latents */
    float *lat = malloc(sizeof(float) * (size_t)(C * L * h * w));
    size_t fbytes = (size_t)width * height * 3;
    frame_keep fk = {.last = frames - 1, .first = malloc(fbytes), .final = malloc(fbytes), .bytes = fbytes};
    for (int64_t i = 0; i < C * L * h * w; i++)
        lat[i] = unit_normal();
    keep(&o, "decode.in.latents", MM_F32, 4, (int64_t[]){C, L, h, w}, lat);
    if (want(what, "decode")) {
        mm_tensor hl = mm_tensor_wrap(lat, mm_cpu(), MM_F32, 4, MM_SHAPE(C, L, h, w)), dl;
        if (mm_tensor_alloc(&dl, dev, MM_F32, 4, hl.shape, &err) != 0 || (mm_copy(ctx, &dl, &hl), 0) ||
            mm_ctx_sync(ctx, &err) != 0) {
            fprintf(stderr, "bench_vae: %s\n", err.msg);
            return 1;
        }
        for (int r = 0; r < reps && rc == 0; r++) {
            if (dev.kind == MM_DEVICE_CUDA)
                mm_device_reset_peak(dev);
            fk.n = 0;
            double s = now();
            rc = mm_video_vae_decode(vv, ctx, &dl, on_frame, &fk, &err);
            t[r] = now() - s;
            if (rc == 0 && fk.n != frames) {
                fprintf(stderr, "bench_vae: %lld frames decoded, %d expected\n", (long long)fk.n, frames);
                rc = -1;
            }
        }
        if (rc == 0) {
            char name[64];
            snprintf(name, sizeof name, "decode_%dx%dx%d%s", frames, width, height, int8 ? "_int8" : "");
            report(name, t, reps, dev, base);
            keep(&o, "decode.out.first_frame", MM_U8, 3, (int64_t[]){height, width, 3}, fk.first);
            keep(&o, "decode.out.last_frame", MM_U8, 3, (int64_t[]){height, width, 3}, fk.final);
        }
        mm_tensor_free(&dl);
    }
    /* keyframe: one image on the canvas */
    uint8_t *img = malloc(fbytes);
    for (size_t i = 0; i < fbytes; i++)
        img[i] = (uint8_t)(128.0f + 40.0f * unit_normal());
    keep(&o, "keyframe.in.rgb", MM_U8, 3, (int64_t[]){height, width, 3}, img);
    mm_video_latents kl = {0};
    if (rc == 0 && want(what, "keyframe")) {
        for (int r = 0; r < reps && rc == 0; r++) {
            if (dev.kind == MM_DEVICE_CUDA)
                mm_device_reset_peak(dev);
            mm_video_latents_free(&kl);
            double s = now();
            rc = mm_video_vae_encode_image(vv, ctx, img, width, height, 3 * (int64_t)width, NULL, &kl, &err);
            t[r] = now() - s;
        }
        if (rc == 0) {
            char name[64];
            snprintf(name, sizeof name, "keyframe_%dx%d", width, height);
            report(name, t, reps, dev, base);
            keep(&o, "keyframe.out.latents", MM_F32, 4, kl.shape, kl.latents);
            keep(&o, "keyframe.out.mean", MM_F32, 4, kl.shape, kl.mean);
        }
    }
    /* a reference video (ref2va), optional: frames x canvas */
    mm_video_latents vl = {0};
    video_src vs = {0};
    if (rc == 0 && want(what, "video")) {
        vs.bytes = (int64_t)fbytes;
        vs.frames = malloc(fbytes * (size_t)frames);
        for (size_t i = 0; vs.frames && i < fbytes * (size_t)frames; i++)
            vs.frames[i] = (uint8_t)(i * 2654435761u >> 24);
        int vreps = reps < 2 ? reps : 2;
        for (int r = 0; r < vreps && rc == 0; r++) {
            if (dev.kind == MM_DEVICE_CUDA)
                mm_device_reset_peak(dev);
            mm_video_latents_free(&vl);
            double s = now();
            rc = mm_video_vae_encode_video(vv, ctx, frames, width, height, 3 * (int64_t)width, pull, &vs, NULL, &vl,
                                           &err);
            t[r] = now() - s;
        }
        if (rc == 0) {
            char name[64];
            snprintf(name, sizeof name, "encode_video_%dx%dx%d", frames, width, height);
            report(name, t, vreps, dev, base);
        }
    }
    /* audio: stereo latents for audio_seconds */
    const mm_audio_vae_config *ac = mm_audio_vae_get_config(av);
    const int64_t A = (int64_t)llround(audio_seconds * ac->sample_rate / ac->hop);
    float *alat = malloc(sizeof(float) * (size_t)(2 * ac->latent_channels * A)), *wave = NULL;
    for (int64_t i = 0; i < 2 * ac->latent_channels * A; i++)
        alat[i] = unit_normal();
    keep(&o, "audio.in.latents", MM_F32, 3, (int64_t[]){2, ac->latent_channels, A}, alat);
    int64_t samples = 0;
    if (rc == 0 && want(what, "audio")) {
        mm_tensor hl = mm_tensor_wrap(alat, mm_cpu(), MM_F32, 3, MM_SHAPE(2, ac->latent_channels, A));
        for (int r = 0; r < reps && rc == 0; r++) {
            if (dev.kind == MM_DEVICE_CUDA)
                mm_device_reset_peak(dev);
            free(wave);
            double s = now();
            rc = mm_audio_vae_decode(av, ctx, &hl, &wave, &samples, &err);
            t[r] = now() - s;
        }
        if (rc == 0) {
            char name[64];
            snprintf(name, sizeof name, "audio_decode_%.3gs", audio_seconds);
            report(name, t, reps, dev, base);
            keep(&o, "audio.out.waveform", MM_F32, 2, (int64_t[]){2, samples}, wave);
        }
    }
    if (rc != 0)
        fprintf(stderr, "bench_vae: %s\n", err.msg);
    if (rc == 0 && out && mm_st_save(out, (size_t)o.n, o.names, o.t, &err) != 0) {
        fprintf(stderr, "bench_vae: %s\n", err.msg);
        rc = -1;
    }
    mm_video_latents_free(&kl);
    mm_video_latents_free(&vl);
    free(vs.frames);
    free(lat);
    free(img);
    free(alat);
    free(wave);
    free(fk.first);
    free(fk.final);
    mm_video_vae_free(vv);
    mm_audio_vae_free(av);
    mm_ctx_destroy(ctx);
    return rc == 0 ? 0 : 1;
}
