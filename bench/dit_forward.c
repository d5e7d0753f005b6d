/* mmh3-bench-dit: one DiT forward at a chosen canvas, timed, with its FLOP
 * rate and peak device memory; optionally writes a random-weight checkpoint
 * in the real Comfy pruned int8 ConvRot layout first (any size; the release's
 * by default: 50 blocks, hidden 5376, 56 x 128 heads, ffn 14336).
 *
 *   mmh3-bench-dit --write-random dit.safetensors            # ~19.5 GiB, then benchmark it
 *   mmh3-bench-dit --checkpoint dit.safetensors --device cuda --width 1344 --height 768 --frames 124 --text-rows 300
 *
 * Modes (issue 9): --modes exact,fast runs the timed forwards in each mode
 * on the same request (fast = 8-bit attention, backend/cuda/cuda_speed.h) and
 * prints the fast velocities' error against the exact ones; --profile-block N
 * times every stage of main block N with device events in one more forward
 * (CUDA; the per-kernel breakdown of one block) and prints the table.
 *
 * Sparse attention (issue 26): --sparse "dense;forced:density=0.25;sol" runs the modes once per
 * spec (model/sparse/sparse.h; "dense": none), each on its own request, every forward as forward
 * --sparse-step of --sparse-steps (default 48 of 49: a sparse step of a 50-step schedule); the
 * result line adds the spec and the density the forward achieved, and the breakdown times the
 * routing ("sparse routing") apart from the attention.
 *
 * One machine-readable line per mode (and sparse spec):
 *   RESULT mmh3 mode=exact s_per_forward=4.31 tflops=822.1 pflop=3.54 rows=38010 peak_gib=27.1 weights_gib=19.5 attention=fa3-bf16 sparse=dense density=1.000
 *
 * FLOPs count the dense work the way dit.md §8.1 does (1 multiply-add = 2):
 * the four block linears per row, QKᵀ and PV over the full sequence, the patch
 * projections and heads; AdaLN and elementwise work are left out.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_speed.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/dit/dit.h"
#include "model/dit/layout.h"
#include "sampler/torch_rng.h"
#include "stage_timer.h"

typedef struct shape_cfg {
    int hidden, heads, head_dim, ffn, layers, refiner_layers, text_dim;
    int video_width, audio_width, table_size, time_dim, rope_freqs, group;
} shape_cfg;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------ random checkpoint */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [-1, 1) from a counter (so threads and chunks agree). */
static float unit(uint64_t seed, uint64_t i) { return (float)((mix(seed ^ mix(i)) >> 40) * 0x1p-24 * 2.0 - 1.0); }

typedef enum fill_kind { FILL_UNIFORM, FILL_ONES, FILL_CONST, FILL_INT8, FILL_INV_FREQ, FILL_MARKER } fill_kind;

typedef struct fill_job {
    mm_dtype dtype;
    fill_kind kind;
    float amp;
    uint64_t seed, first; /* element index of buf[0] within the tensor */
    void *buf;
} fill_job;

static void fill_range(void *user, int64_t begin, int64_t end)
{
    const fill_job *j = user;
    for (int64_t k = begin; k < end; k++) {
        const uint64_t i = j->first + (uint64_t)k;
        float v = j->kind == FILL_ONES ? 1.0f : j->kind == FILL_CONST ? j->amp : j->amp * unit(j->seed, i);
        switch (j->dtype) {
        case MM_F32: ((float *)j->buf)[k] = v; break;
        case MM_BF16: ((uint16_t *)j->buf)[k] = mm_f32_to_bf16(v); break;
        case MM_F16: ((uint16_t *)j->buf)[k] = mm_f32_to_f16(v); break;
        case MM_I8: ((int8_t *)j->buf)[k] = (int8_t)lrintf(127.0f * unit(j->seed, i)); break;
        default: break;
        }
    }
}

typedef struct tensor_spec {
    char name[96];
    mm_dtype dtype;
    int ndim;
    int64_t shape[2];
    fill_kind kind;
    float amp;
} tensor_spec;

static const char convrot_marker[] = "{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": 256}";

static int add_spec(tensor_spec **list, int *n, int *cap, const char *name, mm_dtype dt, int ndim, int64_t a,
                    int64_t b, fill_kind kind, float amp)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        tensor_spec *grown = realloc(*list, sizeof **list * (size_t)*cap);
        if (!grown)
            return -1;
        *list = grown;
    }
    tensor_spec *t = &(*list)[(*n)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = a;
    t->shape[1] = b;
    t->kind = kind;
    t->amp = amp;
    return 0;
}

/* Every tensor of the Comfy pruned int8 ConvRot DiT (dit.md §2.1). */
static int layout_specs(const shape_cfg *c, tensor_spec **out, int *count)
{
    tensor_spec *l = NULL;
    int n = 0, cap = 0, rc = 0;
    const int64_t H = c->hidden, A = (int64_t)c->heads * c->head_dim, F = c->ffn, D = c->head_dim;
    const int64_t mods = 18 * H;
    char name[96];
#define ADD(nm, dt, nd, a, b, k, amp) rc |= add_spec(&l, &n, &cap, nm, dt, nd, a, b, k, amp)
#define LIN(nm, dt, N, K) \
    ADD(nm, dt, 2, N, K, FILL_UNIFORM, sqrtf(3.0f / (float)(K)))
    LIN("video_patch_proj.weight", MM_F32, H, c->video_width);
    ADD("video_patch_proj.bias", MM_F32, 1, H, 0, FILL_UNIFORM, 0.02f);
    LIN("audio_patch_proj.weight", MM_F32, H, c->audio_width);
    ADD("audio_patch_proj.bias", MM_F32, 1, H, 0, FILL_UNIFORM, 0.02f);
    LIN("condition_proj.weight", MM_BF16, H, c->text_dim);
    ADD("condition_proj.bias", MM_BF16, 1, H, 0, FILL_UNIFORM, 0.02f);
    ADD("adaln_t_table", MM_F32, 2, c->table_size, c->time_dim, FILL_UNIFORM, 1.0f);
    ADD("rope.inv_freq", MM_F32, 1, c->rope_freqs, 0, FILL_INV_FREQ, 0);
    for (int b = 0; b < c->refiner_layers; b++) {
#define R(leaf) (snprintf(name, sizeof name, "token_refiner.blocks.%d.%s", b, leaf), name)
        ADD(R("norm1.weight"), MM_BF16, 1, H, 0, FILL_ONES, 0);
        ADD(R("norm2.weight"), MM_BF16, 1, H, 0, FILL_ONES, 0);
        ADD(R("attn.q_norm.weight"), MM_BF16, 1, D, 0, FILL_ONES, 0);
        ADD(R("attn.k_norm.weight"), MM_BF16, 1, D, 0, FILL_ONES, 0);
        LIN(R("attn.qkv_proj.weight"), MM_BF16, 3 * A, H);
        LIN(R("attn.out_proj.weight"), MM_BF16, H, A);
        LIN(R("mlp.fc1.weight"), MM_BF16, 2 * F, H);
        LIN(R("mlp.fc2.weight"), MM_BF16, H, F);
#undef R
    }
    ADD("token_refiner.final_norm.weight", MM_BF16, 1, H, 0, FILL_ONES, 0);
    static const char *const qlin[4] = {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"};
    const int64_t qshape[4][2] = {{3 * A, H}, {H, A}, {2 * F, H}, {H, F}};
    for (int b = 0; b < c->layers; b++) {
#define B(leaf) (snprintf(name, sizeof name, "blocks.%d.%s", b, leaf), name)
        ADD(B("norm1.weight"), MM_BF16, 1, H, 0, FILL_ONES, 0);
        ADD(B("norm2.weight"), MM_BF16, 1, H, 0, FILL_ONES, 0);
        ADD(B("attn.q_norm.weight"), MM_BF16, 1, D, 0, FILL_ONES, 0);
        ADD(B("attn.k_norm.weight"), MM_BF16, 1, D, 0, FILL_ONES, 0);
        for (int q = 0; q < 4; q++) {
            char leaf[64];
            snprintf(leaf, sizeof leaf, "%s.weight", qlin[q]);
            ADD(B(leaf), MM_I8, 2, qshape[q][0], qshape[q][1], FILL_INT8, 0);
            /* q·s ~ U(-a, a) with a = sqrt(3/K): unit variance per output. */
            snprintf(leaf, sizeof leaf, "%s.weight_scale", qlin[q]);
            ADD(B(leaf), MM_F32, 2, qshape[q][0], 1, FILL_CONST, sqrtf(3.0f / (float)qshape[q][1]) / 127.0f);
            snprintf(leaf, sizeof leaf, "%s.comfy_quant", qlin[q]);
            ADD(B(leaf), MM_U8, 1, (int64_t)strlen(convrot_marker), 0, FILL_MARKER, 0);
        }
        ADD(B("adaln_proj.linear.weight"), MM_F16, 2, mods, c->time_dim, FILL_UNIFORM, 0.02f);
        ADD(B("adaln_proj.linear.bias"), MM_F16, 1, mods, 0, FILL_UNIFORM, 0.05f);
#undef B
    }
    ADD("final_layer.norm.weight", MM_BF16, 1, H, 0, FILL_ONES, 0);
    ADD("final_layer.adaln_proj.linear.weight", MM_F16, 2, 2 * H, c->time_dim, FILL_UNIFORM, 0.02f);
    ADD("final_layer.adaln_proj.linear.bias", MM_F16, 1, 2 * H, 0, FILL_UNIFORM, 0.05f);
    LIN("final_layer.video_out.weight", MM_F32, c->video_width, H);
    ADD("final_layer.video_out.bias", MM_F32, 1, c->video_width, 0, FILL_UNIFORM, 0.02f);
    LIN("final_layer.audio_out.weight", MM_F32, c->audio_width, H);
    ADD("final_layer.audio_out.bias", MM_F32, 1, c->audio_width, 0, FILL_UNIFORM, 0.02f);
#undef ADD
#undef LIN
    *out = l;
    *count = n;
    return rc;
}

static int write_random(const char *path, const shape_cfg *c, mm_ctx *cpu, mm_error *err)
{
    tensor_spec *specs;
    int n;
    if (layout_specs(c, &specs, &n) != 0)
        return mm_fail(err, "out of memory");
    mm_st_writer *w;
    if (mm_st_writer_open(&w, path, err) != 0) {
        free(specs);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (mm_st_writer_declare(w, specs[i].name, specs[i].dtype, specs[i].ndim, specs[i].shape, err) != 0) {
            mm_st_writer_abort(w);
            free(specs);
            return -1;
        }
    const size_t chunk_elems = (size_t)1 << 24;
    void *buf = malloc(chunk_elems * 4);
    if (!buf) {
        mm_st_writer_abort(w);
        free(specs);
        return mm_fail(err, "out of memory");
    }
    const mm_st_entry *e;
    uint64_t total = 0;
    int rc = 0;
    while (rc == 0 && (rc = mm_st_writer_next(w, &e, err)) == 0 && e) {
        const tensor_spec *s = NULL;
        for (int i = 0; i < n && !s; i++)
            if (strcmp(specs[i].name, e->name) == 0)
                s = &specs[i];
        int64_t numel = 1;
        for (int d = 0; d < e->ndim; d++)
            numel *= e->shape[d];
        const size_t esize = mm_dtype_nbytes(e->dtype, 1);
        if (s->kind == FILL_MARKER) {
            rc = mm_st_writer_append(w, convrot_marker, strlen(convrot_marker), err);
            continue;
        }
        if (s->kind == FILL_INV_FREQ) {
            float *v = buf;
            for (int64_t k = 0; k < numel; k++)
                v[k] = 1.0f / powf(10000.0f, (float)(2 * k) / (float)(2 * numel));
            rc = mm_st_writer_append(w, v, sizeof(float) * (size_t)numel, err);
            continue;
        }
        const uint64_t seed = mix(total + 0x5eed);
        for (int64_t first = 0; rc == 0 && first < numel; first += (int64_t)chunk_elems) {
            int64_t m = numel - first < (int64_t)chunk_elems ? numel - first : (int64_t)chunk_elems;
            fill_job job = {e->dtype, s->kind, s->amp, seed, (uint64_t)first, buf};
            mm_parallel_for(cpu, m, 1 << 16, fill_range, &job);
            rc = mm_st_writer_append(w, buf, (size_t)m * esize, err);
        }
        total += (uint64_t)numel * esize;
    }
    free(buf);
    free(specs);
    if (rc != 0) {
        mm_st_writer_abort(w);
        return -1;
    }
    return mm_st_writer_close(w, err);
}

/* --------------------------------------------------------------- benchmark */

static void stage_mark(void *user, const char *stage) { bench_stage_record(user, stage); }

/* Dense work of a stage of one block at S rows, for its rate (0: glue). */
static double stage_flop(const char *name, double S, double H, double A, double F)
{
    if (strstr(name, "qkv int8"))
        return 2.0 * S * H * 3 * A;
    if (strstr(name, "out int8"))
        return 2.0 * S * A * H;
    if (strstr(name, "fc1 int8"))
        return 2.0 * S * H * 2 * F;
    if (strstr(name, "fc2 int8"))
        return 2.0 * S * F * H;
    if (strcmp(name, "attention") == 0)
        return 4.0 * S * S * A;
    return 0;
}

static void print_breakdown(const bench_stage_timer *t, int block, int layers, double S, double H, double A,
                            double F)
{
    double ms[BENCH_MAX_STAGES];
    double total = bench_stage_times(t, ms);
    printf("per-kernel breakdown of main block %d (device events, one forward):\n", block);
    printf("  %-40s %10s %7s %12s\n", "stage", "ms", "share", "TFLOP/s|TOPS");
    for (int i = 0; i + 1 < t->n; i++) {
        double f = stage_flop(t->name[i], S, H, A, F);
        char rate[32] = "";
        if (f > 0 && ms[i] > 0)
            snprintf(rate, sizeof rate, "%.0f", f / (ms[i] * 1e-3) * 1e-12);
        printf("  %-40s %10.3f %6.1f%% %12s\n", t->name[i], ms[i], total > 0 ? 100.0 * ms[i] / total : 0.0, rate);
    }
    printf("  %-40s %10.3f  (x %d blocks = %.2f s per forward)\n", "block total", total, layers, total * layers * 1e-3);
    char label[32];
    snprintf(label, sizeof label, "block=%d", block);
    bench_stage_print_line(t, ms, total, label);
}

/* rel_l2 of a against b over n floats. */
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

static void usage(FILE *f)
{
    fprintf(f, "usage: mmh3-bench-dit [--checkpoint FILE | --write-random FILE] [--device cpu|cuda[:N]]\n"
               "         [--width 1344] [--height 768] [--frames 124] [--text-rows 300] [--keyframes 0|1|2]\n"
               "         [--warmup 1] [--iters 2] [--modes exact|fast|exact,fast] [--profile-block N|-1]\n"
               "         [--sparse \"dense;PRESET;...\"] [--sparse-step 48] [--sparse-steps 49]\n"
               "       random checkpoint shape: [--layers 50] [--hidden 5376] [--heads 56] [--ffn 14336]\n"
               "         [--text-dim 5120] [--write-only]\n");
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int main(int argc, char **argv)
{
    shape_cfg sc = {5376, 56, 128, 14336, 50, 2, 5120, 96, 32, 1025, 8, 16, 256};
    const char *ckpt = NULL, *device = NULL;
    int write = 0, write_only = 0, width = 1344, height = 768, frames = 124, text_rows = 300, keyframes = 0;
    int warmup = 1, iters = 2, profile_block = -2, sparse_step = 48, sparse_steps = 49;
    const char *modes = "exact", *sparse_list = "dense";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(flag, dst)                  \
    if (strcmp(a, flag) == 0 && v) {    \
        dst = atoi(v);                  \
        i++;                            \
        continue;                       \
    }
        if (strcmp(a, "--checkpoint") == 0 && v) {
            ckpt = argv[++i];
            continue;
        }
        if (strcmp(a, "--write-random") == 0 && v) {
            ckpt = argv[++i];
            write = 1;
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
        if (strcmp(a, "--sparse") == 0 && v) {
            sparse_list = argv[++i];
            continue;
        }
        if (strcmp(a, "--write-only") == 0) {
            write_only = 1;
            continue;
        }
        OPT("--width", width) OPT("--height", height) OPT("--frames", frames) OPT("--text-rows", text_rows)
        OPT("--keyframes", keyframes) OPT("--warmup", warmup) OPT("--iters", iters) OPT("--layers", sc.layers)
        OPT("--profile-block", profile_block) OPT("--sparse-step", sparse_step) OPT("--sparse-steps", sparse_steps)
        OPT("--hidden", sc.hidden) OPT("--heads", sc.heads) OPT("--ffn", sc.ffn) OPT("--text-dim", sc.text_dim)
#undef OPT
        usage(strcmp(a, "--help") == 0 ? stdout : stderr);
        return strcmp(a, "--help") == 0 ? 0 : 2;
    }
    if (!ckpt) {
        usage(stderr);
        return 2;
    }
    mm_error err = {{0}};
    mm_device dev = mm_cuda_device_count() > 0 ? mm_cuda(0) : mm_cpu();
    if (device && mm_device_parse(device, &dev, &err) != 0) {
        fprintf(stderr, "mmh3-bench-dit: %s\n", err.msg);
        return 2;
    }
    mm_ctx *cpu = NULL, *ctx = NULL;
    if (mm_ctx_create(&cpu, mm_cpu(), 0, &err) != 0)
        goto fail;
    if (write) {
        double t = now();
        printf("writing a random DiT (%d blocks, hidden %d, %dx%d heads, ffn %d, text %d) to %s\n", sc.layers,
               sc.hidden, sc.heads, sc.head_dim, sc.ffn, sc.text_dim, ckpt);
        fflush(stdout);
        if (write_random(ckpt, &sc, cpu, &err) != 0)
            goto fail;
        printf("written in %.1f s\n", now() - t);
        if (write_only) {
            mm_ctx_destroy(cpu);
            return 0;
        }
    }
    if (mm_ctx_create(&ctx, dev, 0, &err) != 0)
        goto fail;

    double t0 = now();
    mm_dit *dit;
    if (mm_dit_load(&dit, ckpt, ctx, NULL, &err) != 0)
        goto fail;
    const mm_dit_config *c = mm_dit_get_config(dit);
    const double load_s = now() - t0;
    mm_memory_stats ms = {0};
    mm_device_memory_stats(dev, &ms);
    const size_t weights_bytes = ms.in_use;

    /* The target clip: frames on the 17n+5 grid, latent canvas /16, audio 40 latents/s. */
    if ((frames - 5) % 17 != 0 || width % 32 || height % 32) {
        fprintf(stderr, "mmh3-bench-dit: frames must be 17n+5 and width/height multiples of 32\n");
        return 2;
    }
    const int T = (frames - 5) / 17 * 5 + 2, Hl = height / 16, Wl = width / 16;
    const int A = (int)nearbyint(frames / 24.0 * 40.0);
    int8_t *tags = malloc((size_t)text_rows);
    memset(tags, MM_DIT_TAG_TEXT, (size_t)text_rows);
    mm_dit_anchor anchors[2] = {MM_DIT_ANCHOR_FIRST, MM_DIT_ANCHOR_LAST};
    mm_dit_layout_request lr = {.text_tags = tags,
                                .text_rows = text_rows,
                                .target = {T, Hl, Wl, A, c->patch[0], c->patch[1], c->patch[2], 2},
                                .anchors = anchors,
                                .n_anchors = keyframes};
    mm_dit_layout l;
    if (mm_dit_layout_build(&lr, &l, &err) != 0)
        goto fail;

    /* Inputs: noise rows and a random text, as the sampler would feed them. */
    mm_torch_gen g;
    mm_torch_gen_seed(&g, 1234);
    const int64_t nv = l.video_rows * c->video_row_width, na = l.audio_rows * c->audio_row_width;
    const int64_t nt = (int64_t)text_rows * c->text_dim;
    float *hv = malloc(sizeof(float) * (size_t)nv), *ha = malloc(sizeof(float) * (size_t)na);
    float *ht = malloc(sizeof(float) * (size_t)nt), *row_t = malloc(sizeof(float) * (size_t)l.rows);
    mm_torch_randn_f32(&g, hv, nv);
    mm_torch_randn_f32(&g, ha, na);
    mm_torch_randn_f32(&g, ht, nt);
    mm_dit_row_timesteps(&l, 0.3f, 0.5f, 0.999f, row_t);
    mm_tensor video, audio, vv, va;
    mm_tensor text = mm_tensor_wrap(ht, mm_cpu(), MM_F32, 2, (int64_t[]){text_rows, c->text_dim});
    if (mm_tensor_alloc(&video, dev, MM_F32, 2, (int64_t[]){l.video_rows, c->video_row_width}, &err) ||
        mm_tensor_alloc(&audio, dev, MM_F32, 2, (int64_t[]){l.audio_rows, c->audio_row_width}, &err) ||
        mm_tensor_alloc(&vv, dev, MM_F32, 2, (int64_t[]){l.video_rows, c->video_row_width}, &err) ||
        mm_tensor_alloc(&va, dev, MM_F32, 2, (int64_t[]){l.audio_rows, c->audio_row_width}, &err))
        goto fail;
    mm_tensor hvt = mm_tensor_wrap(hv, mm_cpu(), MM_F32, 2, video.shape);
    mm_tensor hat = mm_tensor_wrap(ha, mm_cpu(), MM_F32, 2, audio.shape);
    mm_copy(ctx, &video, &hvt);
    mm_copy(ctx, &audio, &hat);
    if (mm_ctx_sync(ctx, &err) != 0)
        goto fail;

    char sparse_specs[512];
    snprintf(sparse_specs, sizeof sparse_specs, "%s", sparse_list);
    float *out = malloc(sizeof(float) * (size_t)nv), *exact_out = NULL;
    mm_tensor ot = mm_tensor_wrap(out, mm_cpu(), MM_F32, 2, vv.shape);
    int64_t bad_total = 0;
    for (char *ssave = NULL, *spec = strtok_r(sparse_specs, ";", &ssave); spec; spec = strtok_r(NULL, ";", &ssave)) {
        mm_sparse_config sparse_cfg;
        const bool sparse_on = strcmp(spec, "dense") != 0;
        if (sparse_on && mm_sparse_config_parse(spec, &sparse_cfg, &err) != 0)
            goto fail;
        const mm_dit_request_opts ropts = {.sparse = sparse_on ? &sparse_cfg : NULL};
        mm_device_reset_peak(dev);
        t0 = now();
        mm_dit_request *req;
        if (mm_dit_request_begin_ex(dit, ctx, &l, &text, &ropts, NULL, &req, &err) != 0)
            goto fail;
        const double refine_s = now() - t0;
        const double S = (double)l.rows, Hd = c->hidden, Ad = (double)c->heads * c->head_dim, Fd = c->ffn;
        const double per_row = 2.0 * Hd * (3 * Ad) + 2.0 * Ad * Hd + 2.0 * Hd * (2 * Fd) + 2.0 * Fd * Hd;
        const double flop = c->layers * (per_row * S + 4.0 * S * S * Ad) +
                            2.0 * Hd * (double)(l.video_rows * c->video_row_width * 2 + l.audio_rows * c->audio_row_width * 2);
        char devname[32];
        printf("device %s | S = %lld rows (text %lld, video %lld incl. %lld condition, audio %lld) | %d blocks, hidden %d\n",
               mm_device_name(dev, devname, sizeof devname), (long long)l.rows, (long long)l.text_rows,
               (long long)l.video_rows, (long long)l.cond_video_rows, (long long)l.audio_rows, c->layers, c->hidden);
        printf("load %.1f s (%.2f GiB on the device) | refiner + request setup %.3f s | workspace %.2f GiB\n", load_s,
               gib(weights_bytes), refine_s, gib(mm_dit_request_bytes(req)));
        if (sparse_on)
            printf("sparse attention %s, forward %d of %d: %s\n", spec, sparse_step, sparse_steps, mm_dit_sparse_kind(req));
        if (dev.kind == MM_DEVICE_CUDA) {
            char paths[1024];
            mm_dit_kernel_paths_describe(dev, paths, sizeof paths);
            printf("kernels in use: %s\n", paths);
        }
        fflush(stdout);

        /* Timed forwards per mode, on the same request and inputs. */
        char mode_list[64];
        snprintf(mode_list, sizeof mode_list, "%s", modes);
        for (char *save = NULL, *mode = strtok_r(mode_list, ",", &save); mode; mode = strtok_r(NULL, ",", &save)) {
            const bool fast = strcmp(mode, "fast") == 0;
            if (!fast && strcmp(mode, "exact") != 0) {
                fprintf(stderr, "mmh3-bench-dit: unknown mode %s (exact, fast)\n", mode);
                return 2;
            }
            mm_dit_request_set_fast(req, fast);
            printf("mode %s: attention %s\n", mode, mm_dit_attention_kind(req));
            fflush(stdout);
            mm_device_reset_peak(dev);
            double best = INFINITY, sum = 0;
            for (int i = 0; i < warmup + iters; i++) {
                mm_dit_request_set_step(req, sparse_step, sparse_steps);
                t0 = now();
                if (mm_dit_forward(req, row_t, &video, &audio, &vv, &va, &err) != 0)
                    goto fail;
                const double sec = now() - t0;
                if (i >= warmup) {
                    best = sec < best ? sec : best;
                    sum += sec;
                }
                printf("forward %d%s (%s): %.3f s\n", i + 1, i < warmup ? " (warm-up)" : "", mode, sec);
                fflush(stdout);
            }
            mm_device_memory_stats(dev, &ms);

            /* Sanity: the velocities are finite; fast mode against exact mode. */
            mm_copy(ctx, &ot, &vv);
            mm_ctx_sync(ctx, NULL);
            int64_t bad = 0;
            double rms = 0;
            for (int64_t i = 0; i < nv; i++) {
                bad += !isfinite(out[i]);
                rms += (double)out[i] * out[i];
            }
            rms = sqrt(rms / (double)nv);
            bad_total += bad;
            const double sec = iters > 0 ? best : NAN;
            printf("forward (%s): %.3f s best, %.3f s mean of %d | %.1f TFLOP/s (%.3f PFLOP per forward) | peak device "
                   "memory %.2f GiB\n",
                   mode, sec, iters ? sum / iters : NAN, iters, flop / sec * 1e-12, flop * 1e-15, gib(ms.peak));
            printf("output (%s): video velocity rms %.4g, %lld non-finite values\n", mode, rms, (long long)bad);
            if (!fast && !exact_out && !sparse_on) {
                exact_out = malloc(sizeof(float) * (size_t)nv);
                memcpy(exact_out, out, sizeof(float) * (size_t)nv);
            } else if (exact_out) {
                printf("QUALITY %s%s_vs_exact video_velocity_rel_l2=%.4g (same inputs, one forward; random weights: "
                       "not a quality measure)\n", mode, sparse_on ? "_sparse" : "", rel_l2(out, exact_out, nv));
            }
            char kind[96];
            snprintf(kind, sizeof kind, "%s", mm_dit_attention_kind(req));
            for (char *k = kind; *k; k++)
                *k = *k == ' ' ? '_' : *k;
            printf("RESULT mmh3 mode=%s s_per_forward=%.4f tflops=%.1f pflop=%.4f rows=%lld peak_gib=%.2f weights_gib=%.2f "
                   "nonfinite=%lld attention=%s sparse=%s density=%.4f\n",
                   mode, sec, flop / sec * 1e-12, flop * 1e-15, (long long)l.rows, gib(ms.peak), gib(weights_bytes),
                   (long long)bad, kind, spec, mm_dit_request_density(req));
            fflush(stdout);

            /* One more forward with stage events on one block (CUDA). */
            if (dev.kind == MM_DEVICE_CUDA && profile_block != -1) {
                int pb = profile_block >= 0 ? profile_block : (c->layers > 1 ? 1 : 0);
                if (pb >= c->layers)
                    pb = c->layers - 1;
                bench_stage_timer tm = {.dev = dev.index};
                mm_dit_profile prof = {pb, stage_mark, &tm};
                mm_dit_request_set_profile(req, &prof);
                mm_dit_request_set_step(req, sparse_step, sparse_steps);
                if (mm_dit_forward(req, row_t, &video, &audio, &vv, &va, &err) != 0)
                    goto fail;
                mm_dit_request_set_profile(req, NULL);
                printf("(%s, %s) ", mode, spec);
                print_breakdown(&tm, pb, c->layers, S, Hd, Ad, Fd);
                bench_stage_timer_free(&tm);
                fflush(stdout);
            }
        }
        mm_dit_request_end(req);
    }
    const int64_t bad = bad_total;
    if (bad)
        printf("FAIL mmh3-bench-dit: %lld non-finite velocities\n", (long long)bad);
    else
        printf("PASS mmh3-bench-dit %s forward (%lld rows)\n", ckpt, (long long)l.rows);
    free(exact_out);
    free(out);
    mm_tensor_free(&video);
    mm_tensor_free(&audio);
    mm_tensor_free(&vv);
    mm_tensor_free(&va);
    mm_dit_layout_free(&l);
    mm_dit_free(dit);
    free(tags);
    free(hv);
    free(ha);
    free(ht);
    free(row_t);
    mm_ctx_destroy(ctx);
    mm_ctx_destroy(cpu);
    return bad ? 1 : 0;
fail:
    fprintf(stderr, "mmh3-bench-dit: %s\n", err.msg);
    printf("FAIL mmh3-bench-dit: %s\n", err.msg);
    return 1;
}
