/* mmh3-bench-vram: DiT forwards under device-memory budgets against the
 * fully resident model, in one process on one GPU: for each budget the
 * memory plan (backend/memplan.h, the sizes `mmh3 generate` plans with),
 * the DiT loaded with the blocks it streams, timed forwards, the peak device
 * memory of the denoising phase measured by the allocator beside the plan's
 * phase peaks, and the velocities compared bit for bit with the resident run.
 *
 *   mmh3-bench-vram --checkpoint dit.safetensors --budgets resident,22,30,46 \
 *       [--width 1344 --height 768 --frames 124 --text-rows 300] [--warmup 1 --iters 2] [--device cuda:0]
 *       [--text-encoder F --video-vae F --audio-vae F]   (sizes; default: the released files' sizes)
 *       [--dit-only]   plan the denoising phase alone (no text encoder, no VAEs: for small models)
 * On the CPU (--device cpu, a stand-in run) the plan is for a device of the budget's size.
 *
 * One line per budget:
 *   RESULT vram budget=22 mode=streamed streamed=39 s_per_forward=4.61 ratio=1.03 peak_gib=12.9
 *          plan_denoise_gib=13.0 plan_peak_gib=21.9 bit_exact=1
 * ratio = s/forward over the resident run's; bit_exact compares every video and audio velocity.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/device.h"
#include "backend/memplan.h"
#include "backend/ops.h"
#include "engine/memory_plan.h"
#include "model/dit/dit.h"
#include "model/dit/layout.h"
#include "sampler/torch_rng.h"

#define GIB 1073741824.0

typedef struct bench {
    const char *ckpt, *te, *vvae, *avae;
    bool dit_only;
    mm_device dev;
    mm_ctx *ctx;
    int width, height, frames, text_rows, warmup, iters;
    mm_dit_layout l;
    float *hv, *ha, *ht, *row_t;
    float *ref; /* the resident run's velocities [video | audio] */
    int64_t nv, na;
    double resident_s;
} bench;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int setup_inputs(bench *b, const mm_dit_config *c, mm_error *err)
{
    const int T = (b->frames - 5) / 17 * 5 + 2, Hl = b->height / 16, Wl = b->width / 16;
    const int A = (int)nearbyint(b->frames / 24.0 * 40.0);
    int8_t *tags = malloc((size_t)b->text_rows);
    memset(tags, MM_DIT_TAG_TEXT, (size_t)b->text_rows);
    mm_dit_layout_request lr = {.text_tags = tags, .text_rows = b->text_rows,
                                .target = {T, Hl, Wl, A, c->patch[0], c->patch[1], c->patch[2], 2}};
    int rc = mm_dit_layout_build(&lr, &b->l, err);
    free(tags);
    if (rc != 0)
        return -1;
    b->nv = b->l.video_rows * c->video_row_width;
    b->na = b->l.audio_rows * c->audio_row_width;
    const int64_t nt = (int64_t)b->text_rows * c->text_dim;
    b->hv = malloc(sizeof(float) * (size_t)b->nv);
    b->ha = malloc(sizeof(float) * (size_t)b->na);
    b->ht = malloc(sizeof(float) * (size_t)nt);
    b->row_t = malloc(sizeof(float) * (size_t)b->l.rows);
    mm_torch_gen g;
    mm_torch_gen_seed(&g, 1234);
    mm_torch_randn_f32(&g, b->hv, b->nv);
    mm_torch_randn_f32(&g, b->ha, b->na);
    mm_torch_randn_f32(&g, b->ht, nt);
    mm_dit_row_timesteps(&b->l, 0.3f, 0.5f, 0.999f, b->row_t);
    return 0;
}

/* Timed forwards of a loaded DiT; the last one's velocities into out. */
static int forwards(bench *b, mm_dit *dit, float *out, double *best, mm_error *err)
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    mm_tensor video = {0}, audio = {0}, vv = {0}, va = {0};
    mm_tensor text = mm_tensor_wrap(b->ht, mm_cpu(), MM_F32, 2, (int64_t[]){b->text_rows, c->text_dim});
    mm_dit_request *req = NULL;
    int rc = -1;
    if (mm_tensor_alloc(&video, b->dev, MM_F32, 2, (int64_t[]){b->l.video_rows, c->video_row_width}, err) ||
        mm_tensor_alloc(&audio, b->dev, MM_F32, 2, (int64_t[]){b->l.audio_rows, c->audio_row_width}, err) ||
        mm_tensor_alloc(&vv, b->dev, MM_F32, 2, video.shape, err) ||
        mm_tensor_alloc(&va, b->dev, MM_F32, 2, audio.shape, err))
        goto done;
    mm_tensor hvt = mm_tensor_wrap(b->hv, mm_cpu(), MM_F32, 2, video.shape);
    mm_tensor hat = mm_tensor_wrap(b->ha, mm_cpu(), MM_F32, 2, audio.shape);
    mm_copy(b->ctx, &video, &hvt);
    mm_copy(b->ctx, &audio, &hat);
    if (mm_ctx_sync(b->ctx, err) != 0 || mm_dit_request_begin(dit, b->ctx, &b->l, &text, NULL, &req, err) != 0)
        goto done;
    *best = INFINITY;
    for (int i = 0; i < b->warmup + b->iters; i++) {
        double t0 = now();
        if (mm_dit_forward(req, b->row_t, &video, &audio, &vv, &va, err) != 0)
            goto done;
        double s = now() - t0;
        printf("  forward %d%s: %.3f s\n", i + 1, i < b->warmup ? " (warm-up)" : "", s);
        fflush(stdout);
        if (i >= b->warmup && s < *best)
            *best = s;
    }
    mm_tensor ov = mm_tensor_wrap(out, mm_cpu(), MM_F32, 2, vv.shape);
    mm_tensor oa = mm_tensor_wrap(out + b->nv, mm_cpu(), MM_F32, 2, va.shape);
    mm_copy(b->ctx, &ov, &vv);
    mm_copy(b->ctx, &oa, &va);
    rc = mm_ctx_sync(b->ctx, err);
done:
    mm_dit_request_end(req);
    mm_tensor_free(&video);
    mm_tensor_free(&audio);
    mm_tensor_free(&vv);
    mm_tensor_free(&va);
    return rc;
}

/* One budget ("resident" or GiB): plan, load, forwards, figures. */
static int run_budget(bench *b, const char *budget, mm_error *err)
{
    const bool resident = strcmp(budget, "resident") == 0;
    mm_memplan plan = {0};
    if (!resident) {
        mm_memplan_sizes s;
        uint64_t bytes;
        const mm_plan_clip clip = {.width = b->width, .height = b->height, .frames = b->frames,
                                   .text_rows = b->text_rows};
        if (mm_memplan_parse_budget(budget, &bytes, err) != 0 ||
            mm_plan_sizes(b->ckpt, b->te, b->vvae, b->avae, &clip, &s, err) != 0)
            return -1;
        if (!b->te)
            s.te_bytes = 15700000000ull; /* the released nvfp4 text encoder's file */
        if (!b->vvae)
            s.vae_bytes = 5800000000ull; /* the released f16 video + f32 audio VAE files */
        if (b->dit_only)
            s.te_bytes = s.te_work = s.vae_bytes = s.vae_work = 0;
        const mm_memplan_in in = {.n_gpus = 1, .gpu_total = {bytes}, .budget = bytes, .s = s};
        if (b->dev.kind == MM_DEVICE_CUDA ? mm_plan_for_host(1, 0, bytes, &s, &plan, err) != 0
                                          : mm_memplan_choose(&in, &plan, NULL, err) != 0)
            return -1;
        printf("budget %s GiB: %s\n", budget, plan.summary);
    }
    if (b->dev.kind == MM_DEVICE_CUDA)
        mm_cuda_release_cached(b->dev.index, NULL);
    mm_device_reset_peak(b->dev);
    mm_dit_residency res = {.stream = plan.streamed ? plan.stream : NULL};
    mm_dit *dit = NULL;
    double t0 = now();
    mm_dit_config cfg;
    uint64_t fixed, blocks[MM_MEMPLAN_MAX_BLOCKS];
    if (mm_dit_file_sizes(b->ckpt, &fixed, blocks, MM_MEMPLAN_MAX_BLOCKS, &cfg, err) != 0)
        return -1;
    res.n = cfg.layers;
    if (mm_dit_load_ex(&dit, b->ckpt, b->ctx, NULL, &res, err) != 0)
        return -1;
    printf("  loaded in %.1f s: %.2f GiB on the device, %d blocks streamed\n", now() - t0,
           mm_dit_weight_bytes(dit) / GIB, mm_dit_streamed_blocks(dit));
    if (!b->l.rows && setup_inputs(b, mm_dit_get_config(dit), err) != 0) {
        mm_dit_free(dit);
        return -1;
    }
    float *out = malloc(sizeof(float) * (size_t)(b->nv + b->na));
    double best = NAN;
    int rc = forwards(b, dit, out, &best, err);
    mm_dit_free(dit);
    if (rc != 0) {
        free(out);
        return -1;
    }
    mm_memory_stats ms;
    mm_device_memory_stats(b->dev, &ms);
    int exact = -1;
    if (resident) {
        free(b->ref);
        b->ref = out;
        b->resident_s = best;
        out = NULL;
    } else if (b->ref) {
        exact = memcmp(out, b->ref, sizeof(float) * (size_t)(b->nv + b->na)) == 0;
    }
    printf("RESULT vram budget=%s mode=%s streamed=%d s_per_forward=%.4f ratio=%.3f rows=%lld peak_gib=%.2f "
           "plan_denoise_gib=%.2f plan_peak_gib=%.2f bit_exact=%d\n",
           budget, resident ? "resident" : mm_memplan_mode_name(plan.mode), plan.streamed, best,
           b->resident_s > 0 ? best / b->resident_s : NAN, (long long)b->l.rows, ms.peak / GIB,
           plan.peak_denoise / GIB, plan.peak[0] / GIB, exact);
    fflush(stdout);
    free(out);
    return exact == 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    bench b = {.width = 1344, .height = 768, .frames = 124, .text_rows = 300, .warmup = 1, .iters = 2};
    const char *budgets = "resident,22,30,46", *device = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--dit-only") == 0) {
            b.dit_only = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "usage: see the head of bench/vram_forward.c\n");
            return 2;
        }
        i++;
        if (strcmp(a, "--checkpoint") == 0) b.ckpt = v;
        else if (strcmp(a, "--budgets") == 0) budgets = v;
        else if (strcmp(a, "--device") == 0) device = v;
        else if (strcmp(a, "--text-encoder") == 0) b.te = v;
        else if (strcmp(a, "--video-vae") == 0) b.vvae = v;
        else if (strcmp(a, "--audio-vae") == 0) b.avae = v;
        else if (strcmp(a, "--width") == 0) b.width = atoi(v);
        else if (strcmp(a, "--height") == 0) b.height = atoi(v);
        else if (strcmp(a, "--frames") == 0) b.frames = atoi(v);
        else if (strcmp(a, "--text-rows") == 0) b.text_rows = atoi(v);
        else if (strcmp(a, "--warmup") == 0) b.warmup = atoi(v);
        else if (strcmp(a, "--iters") == 0) b.iters = atoi(v);
        else {
            fprintf(stderr, "mmh3-bench-vram: unknown option %s\n", a);
            return 2;
        }
    }
    mm_error err = {{0}};
    b.dev = mm_cuda_device_count() > 0 ? mm_cuda(0) : mm_cpu();
    if (!b.ckpt || (device && mm_device_parse(device, &b.dev, &err) != 0) ||
        (b.frames - 5) % 17 || b.width % 32 || b.height % 32) {
        fprintf(stderr, "mmh3-bench-vram: --checkpoint FILE, frames 17n+5, sides multiples of 32 %s\n",
                err.msg);
        return 2;
    }
    if (mm_ctx_create(&b.ctx, b.dev, 0, &err) != 0) {
        fprintf(stderr, "mmh3-bench-vram: %s\n", err.msg);
        return 1;
    }
    char list[256];
    snprintf(list, sizeof list, "%s", budgets);
    int differ = 0, failed = 0;
    for (char *save = NULL, *bud = strtok_r(list, ",", &save); bud; bud = strtok_r(NULL, ",", &save)) {
        int r = run_budget(&b, bud, &err);
        if (r < 0) {
            printf("FAIL mmh3-bench-vram budget %s: %s\n", bud, err.msg);
            failed++;
        }
        differ += r > 0;
    }
    if (differ)
        printf("FAIL mmh3-bench-vram: %d streamed runs differ from the resident one\n", differ);
    else if (!failed)
        printf("PASS mmh3-bench-vram (%lld rows)\n", (long long)b.l.rows);
    free(b.ref);
    free(b.hv);
    free(b.ha);
    free(b.ht);
    free(b.row_t);
    mm_dit_layout_free(&b.l);
    mm_ctx_destroy(b.ctx);
    return differ || failed ? 1 : 0;
}
