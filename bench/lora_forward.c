/* mmh3-bench-lora: what LoRA adapters cost a DiT forward. On a random-weight
 * DiT in the real layout (`mmh3-bench-dit --write-random F --write-only`)
 * and random adapters in the real layouts (`mmh3-gen-tiny lora --full
 * --rank 128 --spelling diffusers --out A`: rank 128 on every linear of the
 * 50 blocks and the refiner, q/k/v split as LightX2V ships them), the same
 * inputs are timed through a request without adapters and one with them,
 * in each mode:
 *
 *   mmh3-bench-lora --checkpoint dit.safetensors --lora lora128.safetensors [--lora B:0.5 ...]
 *                   [--modes exact,fast] [--width 1344 --height 768 --frames 124 --text-rows 300]
 *
 * Per mode: the forward times, the overhead of the branch, how it ran
 * (mm_dit_lora_path), the extra workspace, the velocities' change (a branch
 * that did nothing shows 0), and one block's stage breakdown with and
 * without the adapters (device events; the branch's stages by their marks).
 *   RESULT lora mode=exact base_s=3.913 lora_s=4.012 overhead_pct=2.5 rank=128 path=fused_into_the_Hopper_int8_GEMM
 * Figures go to docs/PERFORMANCE.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "model/dit/dit.h"
#include "model/lora/lora.h"
#include "sampler/torch_rng.h"
#include "stage_timer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static void usage(FILE *f)
{
    fprintf(f, "usage: mmh3-bench-lora --checkpoint DIT --lora FILE[:S] [--lora ...] [--device cuda:0]\n"
               "         [--modes exact,fast] [--width W --height H --frames N --text-rows L] [--warmup N --iters N]\n"
               "         [--profile-block N (-1: none)]\n");
}

typedef struct inputs {
    mm_dit_layout l;
    float *row_t;
    mm_tensor text, video, audio, vv, va;
    float *host_text;
} inputs;

static int make_inputs(const mm_dit_config *c, mm_device dev, mm_ctx *ctx, int width, int height, int frames,
                       int text_rows, inputs *in, mm_error *err)
{
    const int T = (frames - 5) / 17 * 5 + 2, Hl = height / 16, Wl = width / 16;
    const int A = (int)nearbyint(frames / 24.0 * 40.0);
    int8_t *tags = malloc((size_t)text_rows);
    memset(tags, MM_DIT_TAG_TEXT, (size_t)text_rows);
    mm_dit_layout_request lr = {.text_tags = tags,
                                .text_rows = text_rows,
                                .target = {T, Hl, Wl, A, c->patch[0], c->patch[1], c->patch[2], 2}};
    int rc = mm_dit_layout_build(&lr, &in->l, err);
    free(tags);
    if (rc != 0)
        return -1;
    mm_torch_gen g;
    mm_torch_gen_seed(&g, 4321);
    const int64_t nv = in->l.video_rows * c->video_row_width, na = in->l.audio_rows * c->audio_row_width;
    float *hv = malloc(sizeof(float) * (size_t)nv), *ha = malloc(sizeof(float) * (size_t)na);
    in->host_text = malloc(sizeof(float) * (size_t)text_rows * c->text_dim);
    in->row_t = malloc(sizeof(float) * (size_t)in->l.rows);
    mm_torch_randn_f32(&g, hv, nv);
    mm_torch_randn_f32(&g, ha, na);
    mm_torch_randn_f32(&g, in->host_text, (int64_t)text_rows * c->text_dim);
    mm_dit_row_timesteps(&in->l, 0.3f, 0.5f, 0.999f, in->row_t);
    in->text = mm_tensor_wrap(in->host_text, mm_cpu(), MM_F32, 2, MM_SHAPE(text_rows, c->text_dim));
    rc = mm_tensor_alloc(&in->video, dev, MM_F32, 2, MM_SHAPE(in->l.video_rows, c->video_row_width), err) ||
         mm_tensor_alloc(&in->audio, dev, MM_F32, 2, MM_SHAPE(in->l.audio_rows, c->audio_row_width), err) ||
         mm_tensor_alloc(&in->vv, dev, MM_F32, 2, MM_SHAPE(in->l.video_rows, c->video_row_width), err) ||
         mm_tensor_alloc(&in->va, dev, MM_F32, 2, MM_SHAPE(in->l.audio_rows, c->audio_row_width), err);
    if (rc == 0) {
        mm_tensor a = mm_tensor_wrap(hv, mm_cpu(), MM_F32, 2, in->video.shape);
        mm_tensor b = mm_tensor_wrap(ha, mm_cpu(), MM_F32, 2, in->audio.shape);
        mm_copy(ctx, &in->video, &a);
        mm_copy(ctx, &in->audio, &b);
        rc = mm_ctx_sync(ctx, err);
    }
    free(hv);
    free(ha);
    return rc;
}

static void stage_mark(void *user, const char *stage) { bench_stage_record(user, stage); }

/* Best and mean seconds of `iters` forwards after `warmup`. */
static int time_forwards(mm_dit_request *r, inputs *in, int warmup, int iters, const char *label, double *best,
                         double *mean, mm_error *err)
{
    *best = INFINITY;
    double sum = 0;
    for (int i = 0; i < warmup + iters; i++) {
        double t0 = now();
        if (mm_dit_forward(r, in->row_t, &in->video, &in->audio, &in->vv, &in->va, err) != 0)
            return -1;
        double s = now() - t0;
        printf("forward %d%s (%s): %.3f s\n", i + 1, i < warmup ? " (warm-up)" : "", label, s);
        fflush(stdout);
        if (i >= warmup) {
            *best = s < *best ? s : *best;
            sum += s;
        }
    }
    *mean = iters ? sum / iters : NAN;
    return 0;
}

static void profile(mm_dit_request *r, inputs *in, int dev, int block, const char *label, mm_error *err)
{
    bench_stage_timer tm = {.dev = dev};
    mm_dit_profile prof = {block, stage_mark, &tm};
    mm_dit_request_set_profile(r, &prof);
    if (mm_dit_forward(r, in->row_t, &in->video, &in->audio, &in->vv, &in->va, err) == 0) {
        double ms[BENCH_MAX_STAGES];
        double total = bench_stage_times(&tm, ms);
        printf("block %d (%s): %.2f ms\n", block, label, total);
        for (int i = 0; i + 1 < tm.n; i++)
            printf("  %-40s %8.3f ms\n", tm.name[i], ms[i]);
        bench_stage_print_line(&tm, ms, total, label);
    }
    mm_dit_request_set_profile(r, NULL);
    bench_stage_timer_free(&tm);
}

static float *velocities(mm_ctx *ctx, const inputs *in)
{
    const int64_t n = mm_tensor_numel(&in->vv);
    float *out = malloc(sizeof(float) * (size_t)n);
    mm_tensor h = mm_tensor_wrap(out, mm_cpu(), MM_F32, 2, in->vv.shape);
    mm_copy(ctx, &h, &in->vv);
    mm_ctx_sync(ctx, NULL);
    return out;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *device = NULL, *modes = "exact,fast";
    const char *specs[MM_LORA_MAX_USES];
    int n_specs = 0, width = 1344, height = 768, frames = 124, text_rows = 300, warmup = 1, iters = 2,
        profile_block = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(flag, dst)               \
    if (strcmp(a, flag) == 0 && v) { \
        dst = atoi(v);               \
        i++;                         \
        continue;                    \
    }
        if (strcmp(a, "--checkpoint") == 0 && v) {
            ckpt = argv[++i];
            continue;
        }
        if (strcmp(a, "--lora") == 0 && v && n_specs < MM_LORA_MAX_USES) {
            specs[n_specs++] = argv[++i];
            continue;
        }
        if (strcmp(a, "--device") == 0 && v) {
            device = argv[++i];
            continue;
        }
        if (strcmp(a, "--modes") == 0 && v) {
            modes = argv[++i];
            continue;
        }
        OPT("--width", width) OPT("--height", height) OPT("--frames", frames) OPT("--text-rows", text_rows)
        OPT("--warmup", warmup) OPT("--iters", iters) OPT("--profile-block", profile_block)
#undef OPT
        usage(strcmp(a, "--help") == 0 ? stdout : stderr);
        return strcmp(a, "--help") == 0 ? 0 : 2;
    }
    if (!ckpt || !n_specs || (frames - 5) % 17 || width % 32 || height % 32) {
        usage(stderr);
        return 2;
    }
    mm_error err = {{0}};
    mm_device dev = mm_cuda_device_count() > 0 ? mm_cuda(0) : mm_cpu();
    if (device && mm_device_parse(device, &dev, &err) != 0) {
        fprintf(stderr, "mmh3-bench-lora: %s\n", err.msg);
        return 2;
    }
    mm_ctx *ctx = NULL;
    mm_dit *dit = NULL;
    mm_lora *loras[MM_LORA_MAX_USES] = {0};
    mm_lora_use uses[MM_LORA_MAX_USES];
    inputs in;
    memset(&in, 0, sizeof in);
    mm_dit_request *base = NULL, *adapted = NULL;
    int rc = 1;
    if (mm_ctx_create(&ctx, dev, 0, &err) != 0 || mm_dit_load(&dit, ckpt, ctx, NULL, &err) != 0)
        goto fail;
    const mm_dit_config *c = mm_dit_get_config(dit);
    int rank_max = 0;
    size_t adapter_bytes = 0;
    for (int i = 0; i < n_specs; i++) {
        char path[1024];
        float strength;
        double t0 = now();
        if (mm_lora_parse_spec(specs[i], path, sizeof path, &strength, &err) != 0 ||
            mm_lora_open(&loras[i], path, NULL, &err) != 0 || mm_lora_fit(loras[i], c, &err) != 0 ||
            mm_lora_upload(loras[i], ctx, &err) != 0)
            goto fail;
        uses[i] = (mm_lora_use){loras[i], strength};
        const mm_lora_summary *s = &loras[i]->summary;
        rank_max = s->rank_max > rank_max ? s->rank_max : rank_max;
        adapter_bytes += loras[i]->device_bytes;
        printf("adapter %s (strength %g): rank %d..%d, %d modules, %s; %.2f GiB resident, loaded in %.1f s\n", path,
               strength, s->rank_min, s->rank_max, s->modules, s->targets, gib(loras[i]->device_bytes), now() - t0);
    }
    if (make_inputs(c, dev, ctx, width, height, frames, text_rows, &in, &err) != 0)
        goto fail;
    mm_dit_request_opts o = {.loras = uses, .n_loras = n_specs};
    if (mm_dit_request_begin(dit, ctx, &in.l, &in.text, NULL, &base, &err) != 0 ||
        mm_dit_request_begin_ex(dit, ctx, &in.l, &in.text, &o, NULL, &adapted, &err) != 0)
        goto fail;
    char path_word[96];
    snprintf(path_word, sizeof path_word, "%s", mm_dit_lora_path(adapted));
    for (char *p = path_word; *p; p++)
        *p = *p == ' ' ? '_' : *p;
    printf("S = %lld rows, %d blocks, hidden %d | adapters: %s | workspace %.2f GiB without, %.2f GiB with (%.2f GiB "
           "of adapters resident)\n",
           (long long)in.l.rows, c->layers, c->hidden, mm_dit_lora_path(adapted), gib(mm_dit_request_bytes(base)),
           gib(mm_dit_request_bytes(adapted)), gib(adapter_bytes));
    fflush(stdout);

    char mode_list[64];
    snprintf(mode_list, sizeof mode_list, "%s", modes);
    for (char *save = NULL, *mode = strtok_r(mode_list, ",", &save); mode; mode = strtok_r(NULL, ",", &save)) {
        const bool fast = strcmp(mode, "fast") == 0;
        mm_dit_request_set_fast(base, fast);
        mm_dit_request_set_fast(adapted, fast);
        double b_best, b_mean, l_best, l_mean;
        char lb[64], ll[64];
        snprintf(lb, sizeof lb, "%s, no adapter", mode);
        snprintf(ll, sizeof ll, "%s, adapters", mode);
        if (time_forwards(base, &in, warmup, iters, lb, &b_best, &b_mean, &err) != 0)
            goto fail;
        float *v0 = velocities(ctx, &in);
        if (time_forwards(adapted, &in, warmup, iters, ll, &l_best, &l_mean, &err) != 0) {
            free(v0);
            goto fail;
        }
        float *v1 = velocities(ctx, &in);
        double num = 0, den = 0;
        int64_t bad = 0, n = mm_tensor_numel(&in.vv);
        for (int64_t i = 0; i < n; i++) {
            bad += !isfinite(v1[i]);
            num += ((double)v1[i] - v0[i]) * ((double)v1[i] - v0[i]);
            den += (double)v0[i] * v0[i];
        }
        free(v0);
        free(v1);
        const double overhead = (l_best - b_best) / b_best * 100.0;
        printf("mode %s: attention %s | %.3f s without, %.3f s with the adapters (best of %d; means %.3f / %.3f) | "
               "overhead %.2f%% | the adapters change the video velocity by %.3f (rel_l2), %lld non-finite\n",
               mode, mm_dit_attention_kind(adapted), b_best, l_best, iters, b_mean, l_mean, overhead,
               sqrt(num / (den > 0 ? den : 1)), (long long)bad);
        printf("RESULT lora mode=%s base_s=%.4f lora_s=%.4f overhead_pct=%.2f rank=%d adapters=%d rows=%lld path=%s "
               "nonfinite=%lld\n",
               mode, b_best, l_best, overhead, rank_max, n_specs, (long long)in.l.rows, path_word, (long long)bad);
        fflush(stdout);
        if (dev.kind == MM_DEVICE_CUDA && profile_block >= 0 && profile_block < c->layers) {
            profile(base, &in, dev.index, profile_block, lb, &err);
            profile(adapted, &in, dev.index, profile_block, ll, &err);
        }
        if (bad) {
            printf("FAIL mmh3-bench-lora: %lld non-finite velocities with the adapters\n", (long long)bad);
            goto fail_quiet;
        }
    }
    printf("PASS mmh3-bench-lora\n");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "mmh3-bench-lora: %s\n", err.msg);
    printf("FAIL mmh3-bench-lora: %s\n", err.msg);
fail_quiet:
    rc = 1;
done:
    mm_dit_request_end(base);
    mm_dit_request_end(adapted);
    mm_tensor *all[] = {&in.video, &in.audio, &in.vv, &in.va};
    for (int i = 0; i < 4; i++)
        mm_tensor_free(all[i]);
    mm_dit_layout_free(&in.l);
    free(in.row_t);
    free(in.host_text);
    for (int i = 0; i < n_specs; i++)
        mm_lora_free(loras[i]);
    mm_dit_free(dit);
    mm_ctx_destroy(ctx);
    return rc;
}
