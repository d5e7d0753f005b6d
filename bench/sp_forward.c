/* mmh3-bench-sp: the sequence-parallel DiT forward over 1, 2, 4, 8 GPUs next
 * to the plain one-GPU forward: seconds per forward, speed-up, scaling
 * efficiency, and the output of every group size against the one-GPU output.
 *
 *   mmh3-bench-sp --checkpoint dit.safetensors --gpus 1,2,4,8 \
 *                 --width 1344 --height 768 --frames 124 --text-rows 300
 *
 * Efficiency(N) = t_plain / (N · t_N): 1.0 is perfect scaling (SGLang's
 * Ulysses-8 reaches about 0.89 on 8×H200). The plain forward runs first and
 * its velocities are kept on the host; then each group is loaded (one model
 * replica per GPU), timed, compared and freed. Lines:
 *
 *   RESULT sp gpus=4 s_per_forward=1.13 speedup=3.71 efficiency=0.93 rel_l2_video=0 rel_l2_audio=0 ...
 *   PASS/FAIL lines for the equality checks (tolerance: --tol, default the DiT
 *   kit's forward rel_l2 0.039).
 *
 * --device cpu runs the same on CPU ranks (a host world), for a quick check
 * of the program with a tiny checkpoint.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "conformance/conformance.h"
#include "model/dit/dit.h"
#include "model/dit/layout.h"
#include "parallel/sp_dit.h"
#include "sampler/torch_rng.h"
#include "stage_timer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static void usage(FILE *f)
{
    fprintf(f, "usage: mmh3-bench-sp --checkpoint FILE [--gpus 1,2,4,8] [--device cuda|cpu] [--no-plain]\n"
               "         [--width 1344] [--height 768] [--frames 124] [--text-rows 300] [--keyframes 0|1|2]\n"
               "         [--warmup 1] [--iters 2] [--tol 0.039] [--cpu-ranks-threads N]\n");
}

typedef struct bench_in {
    mm_dit_layout l;
    float *row_t;
    mm_tensor text;         /* host f32 */
    mm_tensor video, audio; /* on ctx0's device */
    mm_tensor vv, va;       /* outputs on ctx0's device */
    float *out;             /* host copy of the last outputs [video | audio] */
    int64_t nv, na;
} bench_in;

static int download(mm_ctx *ctx, bench_in *in, mm_error *err)
{
    mm_tensor hv = mm_tensor_wrap(in->out, mm_cpu(), MM_F32, 2, in->vv.shape);
    mm_tensor ha = mm_tensor_wrap(in->out + in->nv, mm_cpu(), MM_F32, 2, in->va.shape);
    if (in->vv.device.kind == MM_DEVICE_CPU) {
        memcpy(in->out, in->vv.data, sizeof(float) * (size_t)in->nv);
        memcpy(in->out + in->nv, in->va.data, sizeof(float) * (size_t)in->na);
        return 0;
    }
    mm_copy(ctx, &hv, &in->vv);
    mm_copy(ctx, &ha, &in->va);
    return mm_ctx_sync(ctx, err);
}

/* The profiled block's stages (device events on rank 0's stream) and,
 * inside its "attention" stage, the Ulysses ones (pack, all-to-all, SDPA,
 * unpack). */
typedef struct sp_timer {
    bench_stage_timer t;
    bool in_attention; /* between the profiled block's "attention" mark and its next one */
} sp_timer;

static void stage_mark(void *user, const char *stage)
{
    sp_timer *st = user;
    if (stage && strncmp(stage, "Ulysses", 7) == 0) { /* every block's: keep the profiled one's */
        if (st->in_attention)
            bench_stage_record(&st->t, stage);
        return;
    }
    st->in_attention = stage && strcmp(stage, "attention") == 0;
    bench_stage_record(&st->t, stage);
}

static void print_breakdown(const bench_stage_timer *t, const char *what, int block, int layers)
{
    double ms[BENCH_MAX_STAGES];
    double total = bench_stage_times(t, ms);
    printf("  stages of main block %d, %s (device events on rank 0, last forward):\n", block, what);
    for (int i = 0; i + 1 < t->n; i++)
        printf("    %-48s %9.3f ms %6.1f%%\n", t->name[i], ms[i], total > 0 ? 100.0 * ms[i] / total : 0.0);
    printf("    %-48s %9.3f ms  (x %d blocks = %.3f s)\n", "block total", total, layers, total * layers * 1e-3);
    char label[96];
    snprintf(label, sizeof label, "%s block=%d", what, block);
    bench_stage_print_line(t, ms, total, label);
}

/* Times warmup + iters forwards; best time into *best. N = 0: the plain DiT. */
static int run(const char *ckpt, mm_ctx *ctx0, int N, int cpu_threads, bench_in *in, int warmup, int iters,
               double *best, double *load_s, size_t *peak, char *desc, size_t desc_len, mm_error *err)
{
    mm_dit *dit = NULL;
    mm_sp_dit *sp = NULL;
    mm_dit_request *dreq = NULL;
    mm_sp_request *sreq = NULL;
    const mm_device dev0 = mm_ctx_device(ctx0);
    double t0 = now();
    if (N == 0) {
        if (mm_dit_load(&dit, ckpt, ctx0, NULL, err) != 0)
            return -1;
        snprintf(desc, desc_len, "plain DiT on one device");
    } else {
        mm_sp_options o;
        mm_sp_options_defaults(&o);
        o.ranks = N;
        o.cpu_threads = cpu_threads;
        if (mm_sp_options_from_env(&o, err) != 0)
            return -1;
        if (mm_sp_dit_load(&sp, ckpt, ctx0, &o, NULL, err) != 0)
            return -1;
        mm_sp_dit_describe(sp, desc, desc_len);
    }
    *load_s = now() - t0;
    for (int g = 0; g < (N ? N : 1); g++)
        if (dev0.kind == MM_DEVICE_CUDA)
            mm_device_reset_peak(mm_cuda(dev0.index + g));
    int rc = N == 0 ? mm_dit_request_begin(dit, ctx0, &in->l, &in->text, NULL, &dreq, err)
                    : mm_sp_request_begin(sp, &in->l, &in->text, &sreq, err);
    const int layers = mm_dit_get_config(N == 0 ? dit : mm_sp_dit_replica(sp, 0))->layers;
    sp_timer tm = {.t = {.dev = dev0.index}};
    mm_dit_profile prof = {layers / 2, stage_mark, &tm};
    if (rc == 0) {
        char kind[200];
        if (N == 0)
            snprintf(kind, sizeof kind, "%s", mm_dit_attention_kind(dreq));
        else
            mm_sp_request_attention_kind(sreq, kind, sizeof kind);
        printf("  attention of the main blocks: %s\n", kind);
    }
    *best = INFINITY;
    for (int i = 0; rc == 0 && i < warmup + iters; i++) {
        const bool profile = dev0.kind == MM_DEVICE_CUDA && i == warmup + iters - 1;
        if (profile && N == 0)
            mm_dit_request_set_profile(dreq, &prof);
        else if (profile)
            mm_sp_request_set_profile(sreq, &prof);
        t0 = now();
        rc = N == 0 ? mm_dit_forward(dreq, in->row_t, &in->video, &in->audio, &in->vv, &in->va, err)
                    : mm_sp_forward(sreq, in->row_t, &in->video, &in->audio, &in->vv, &in->va, err);
        if (rc == 0)
            rc = mm_ctx_sync(ctx0, err);
        const double s = now() - t0;
        if (rc == 0 && i >= warmup && s < *best)
            *best = s;
        if (rc == 0) {
            printf("  %s forward %d%s: %.3f s\n", N ? "sp" : "plain", i + 1, i < warmup ? " (warm-up)" : "", s);
            fflush(stdout);
        }
    }
    if (tm.t.n > 1) {
        char what[32];
        snprintf(what, sizeof what, N == 0 ? "plain" : "sp_gpus=%d", N);
        print_breakdown(&tm.t, what, layers / 2, layers);
    }
    bench_stage_timer_free(&tm.t);
    if (dreq)
        mm_dit_request_set_profile(dreq, NULL);
    if (sreq)
        mm_sp_request_set_profile(sreq, NULL);
    if (rc == 0)
        rc = download(ctx0, in, err);
    *peak = 0;
    for (int g = 0; g < (N ? N : 1); g++) {
        mm_memory_stats ms = {0};
        if (dev0.kind == MM_DEVICE_CUDA && mm_device_memory_stats(mm_cuda(dev0.index + g), &ms) == 0 &&
            ms.peak > *peak)
            *peak = ms.peak;
    }
    mm_dit_request_end(dreq);
    mm_sp_request_end(sreq);
    mm_dit_free(dit);
    mm_sp_dit_free(sp);
    for (int g = 0; g < (N ? N : 1); g++)
        if (dev0.kind == MM_DEVICE_CUDA)
            mm_cuda_release_cached(dev0.index + g, NULL);
    return rc;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *device = NULL, *gpus = "1,2,4,8";
    int width = 1344, height = 768, frames = 124, text_rows = 300, keyframes = 0, warmup = 1, iters = 2;
    int plain = 1, cpu_threads = 0;
    double tol = 0.039;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(flag, dst)               \
    if (strcmp(a, flag) == 0 && v) { \
        dst = atoi(v);               \
        i++;                         \
        continue;                    \
    }
#define SOPT(flag, dst)              \
    if (strcmp(a, flag) == 0 && v) { \
        dst = v;                     \
        i++;                         \
        continue;                    \
    }
        SOPT("--checkpoint", ckpt) SOPT("--device", device) SOPT("--gpus", gpus)
        OPT("--width", width) OPT("--height", height) OPT("--frames", frames) OPT("--text-rows", text_rows)
        OPT("--keyframes", keyframes) OPT("--warmup", warmup) OPT("--iters", iters)
        OPT("--cpu-ranks-threads", cpu_threads)
        if (strcmp(a, "--tol") == 0 && v) {
            tol = atof(v);
            i++;
            continue;
        }
        if (strcmp(a, "--no-plain") == 0) {
            plain = 0;
            continue;
        }
#undef OPT
#undef SOPT
        usage(strcmp(a, "--help") == 0 ? stdout : stderr);
        return strcmp(a, "--help") == 0 ? 0 : 2;
    }
    if (!ckpt || (frames - 5) % 17 != 0 || width % 32 || height % 32) {
        usage(stderr);
        return 2;
    }
    mm_error err = {{0}};
    mm_device dev = mm_cuda_device_count() > 0 ? mm_cuda(0) : mm_cpu();
    if (device && mm_device_parse(device, &dev, &err) != 0) {
        fprintf(stderr, "mmh3-bench-sp: %s\n", err.msg);
        return 2;
    }
    int counts[16], n_counts = 0;
    for (const char *p = gpus; *p && n_counts < 16;) {
        counts[n_counts++] = atoi(p);
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    const int have = dev.kind == MM_DEVICE_CUDA ? mm_cuda_device_count() - dev.index : 64;
    mm_ctx *ctx = NULL;
    if (mm_ctx_create(&ctx, dev, 0, &err) != 0)
        goto fail;

    /* The packed sequence of the canvas and random inputs, as in mmh3-bench-dit. */
    mm_dit *probe;
    if (mm_dit_load(&probe, ckpt, ctx, NULL, &err) != 0) /* for the configuration only */
        goto fail;
    const mm_dit_config cfg = *mm_dit_get_config(probe);
    mm_dit_free(probe);
    if (dev.kind == MM_DEVICE_CUDA)
        mm_cuda_release_cached(dev.index, NULL);
    const int T = (frames - 5) / 17 * 5 + 2, Hl = height / 16, Wl = width / 16;
    const int A = (int)nearbyint(frames / 24.0 * 40.0);
    int8_t *tags = malloc((size_t)text_rows);
    memset(tags, MM_DIT_TAG_TEXT, (size_t)text_rows);
    mm_dit_anchor anchors[2] = {MM_DIT_ANCHOR_FIRST, MM_DIT_ANCHOR_LAST};
    mm_dit_layout_request lr = {.text_tags = tags,
                                .text_rows = text_rows,
                                .target = {T, Hl, Wl, A, cfg.patch[0], cfg.patch[1], cfg.patch[2], 2},
                                .anchors = anchors,
                                .n_anchors = keyframes};
    bench_in in;
    memset(&in, 0, sizeof in);
    if (mm_dit_layout_build(&lr, &in.l, &err) != 0)
        goto fail;
    mm_torch_gen g;
    mm_torch_gen_seed(&g, 1234);
    in.nv = in.l.video_rows * cfg.video_row_width;
    in.na = in.l.audio_rows * cfg.audio_row_width;
    const int64_t nt = (int64_t)text_rows * cfg.text_dim;
    float *hv = malloc(sizeof(float) * (size_t)in.nv), *ha = malloc(sizeof(float) * (size_t)in.na);
    float *ht = malloc(sizeof(float) * (size_t)nt);
    in.row_t = malloc(sizeof(float) * (size_t)in.l.rows);
    in.out = malloc(sizeof(float) * (size_t)(in.nv + in.na));
    float *ref = malloc(sizeof(float) * (size_t)(in.nv + in.na));
    mm_torch_randn_f32(&g, hv, in.nv);
    mm_torch_randn_f32(&g, ha, in.na);
    mm_torch_randn_f32(&g, ht, nt);
    mm_dit_row_timesteps(&in.l, 0.3f, 0.5f, 0.999f, in.row_t);
    in.text = mm_tensor_wrap(ht, mm_cpu(), MM_F32, 2, MM_SHAPE(text_rows, cfg.text_dim));
    if (mm_tensor_alloc(&in.video, dev, MM_F32, 2, MM_SHAPE(in.l.video_rows, cfg.video_row_width), &err) ||
        mm_tensor_alloc(&in.audio, dev, MM_F32, 2, MM_SHAPE(in.l.audio_rows, cfg.audio_row_width), &err) ||
        mm_tensor_alloc(&in.vv, dev, MM_F32, 2, MM_SHAPE(in.l.video_rows, cfg.video_row_width), &err) ||
        mm_tensor_alloc(&in.va, dev, MM_F32, 2, MM_SHAPE(in.l.audio_rows, cfg.audio_row_width), &err))
        goto fail;
    if (dev.kind == MM_DEVICE_CPU) {
        memcpy(in.video.data, hv, sizeof(float) * (size_t)in.nv);
        memcpy(in.audio.data, ha, sizeof(float) * (size_t)in.na);
    } else {
        mm_tensor a = mm_tensor_wrap(hv, mm_cpu(), MM_F32, 2, in.video.shape);
        mm_tensor b = mm_tensor_wrap(ha, mm_cpu(), MM_F32, 2, in.audio.shape);
        mm_copy(ctx, &in.video, &a);
        mm_copy(ctx, &in.audio, &b);
        if (mm_ctx_sync(ctx, &err) != 0)
            goto fail;
    }
    char devname[32];
    printf("mmh3-bench-sp: %s | S = %lld rows (text %lld, video %lld, audio %lld) | %d blocks, hidden %d, %d heads "
           "| GPUs here from %s: %d\n",
           ckpt, (long long)in.l.rows, (long long)in.l.text_rows, (long long)in.l.video_rows,
           (long long)in.l.audio_rows, cfg.layers, cfg.hidden, cfg.heads, mm_device_name(dev, devname, sizeof devname),
           dev.kind == MM_DEVICE_CUDA ? have : 0);
    fflush(stdout);

    int failures = 0;
    double t_plain = NAN, t_one = NAN;
    char desc[800];
    double best, load_s;
    size_t peak;
    if (plain) {
        printf("== plain forward (the reference for equality and scaling)\n");
        fflush(stdout);
        if (run(ckpt, ctx, 0, cpu_threads, &in, warmup, iters, &best, &load_s, &peak, desc, sizeof desc, &err) != 0)
            goto fail;
        t_plain = best;
        memcpy(ref, in.out, sizeof(float) * (size_t)(in.nv + in.na));
        printf("RESULT plain s_per_forward=%.4f load_s=%.1f peak_gib=%.2f rows=%lld\n", best, load_s, gib(peak),
               (long long)in.l.rows);
        fflush(stdout);
    }
    for (int k = 0; k < n_counts; k++) {
        const int N = counts[k];
        if (N < 1 || N > have) {
            printf("SKIP sp gpus=%d: only %d GPU%s here\n", N, have, have == 1 ? "" : "s");
            continue;
        }
        if (cfg.heads % N != 0) {
            printf("SKIP sp gpus=%d: %d heads do not split over %d\n", N, cfg.heads, N);
            continue;
        }
        printf("== sequence parallel over %d\n", N);
        fflush(stdout);
        if (run(ckpt, ctx, N, cpu_threads, &in, warmup, iters, &best, &load_s, &peak, desc, sizeof desc, &err) != 0) {
            printf("FAIL sp gpus=%d: %s\n", N, err.msg);
            failures++;
            continue;
        }
        if (N == 1)
            t_one = best;
        const double base = plain ? t_plain : t_one;
        const double dv = plain ? mm_conf_measure(in.out, ref, in.nv).rel_l2 : NAN;
        const double da = plain ? mm_conf_measure(in.out + in.nv, ref + in.nv, in.na).rel_l2 : NAN;
        const double mx = plain ? mm_conf_measure(in.out, ref, in.nv + in.na).max_abs : NAN;
        int64_t bad = 0;
        for (int64_t i = 0; i < in.nv + in.na; i++)
            bad += !isfinite(in.out[i]);
        printf("  %s\n", desc);
        printf("RESULT sp gpus=%d s_per_forward=%.4f speedup=%.3f efficiency=%.3f rel_l2_video=%.3g rel_l2_audio=%.3g "
               "max_abs=%.3g load_s=%.1f peak_gib=%.2f nonfinite=%lld\n",
               N, best, base / best, base / (N * best), dv, da, mx, load_s, gib(peak), (long long)bad);
        if (plain) {
            const bool ok = dv <= tol && da <= tol && bad == 0;
            printf("%s sp gpus=%d equals the one-GPU forward: rel_l2 video %.3g audio %.3g (tolerance %.3g)%s\n",
                   ok ? "PASS" : "FAIL", N, dv, da, tol,
                   memcmp(in.out, ref, sizeof(float) * (size_t)(in.nv + in.na)) == 0 ? ", bit-identical" : "");
            failures += !ok;
        }
        fflush(stdout);
    }
    mm_tensor_free(&in.video);
    mm_tensor_free(&in.audio);
    mm_tensor_free(&in.vv);
    mm_tensor_free(&in.va);
    mm_dit_layout_free(&in.l);
    free(tags);
    free(hv);
    free(ha);
    free(ht);
    free(in.row_t);
    free(in.out);
    free(ref);
    mm_ctx_destroy(ctx);
    return failures ? 1 : 0;
fail:
    fprintf(stderr, "mmh3-bench-sp: %s\n", err.msg);
    printf("FAIL mmh3-bench-sp: %s\n", err.msg);
    return 1;
}
