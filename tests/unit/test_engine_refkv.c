/* The reference KV cache on the DiT kit's ref2va case (its tiny checkpoint,
 * its inputs): the capturing forward is the plain forward bit for bit; a
 * reduced forward fed the K/V captured from the same inputs gives the
 * plain forward's target velocities (only the attention's summation order
 * differs: within 0.02 rel_l2, where dropping the kept K/V gives 0.2); and
 * over a short sampler run the cached path stays within a bound of the
 * uncached one that the same mistake exceeds (run alongside as a control),
 * and the deviation is printed (the figure docs/PERFORMANCE.md quotes for
 * CPU; the device run measures the full-size one). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "conformance/dit_kit.h"
#include "engine/pipeline_refkv.h"
#include "model/dit/dit.h"
#include "sampler/flow_sampler.h"
#include "sampler/sigmas.h"
#include "test.h"
#include "test_sampler_kit.h"

static json_t *manifest;
static mm_safetensors *cases;
static mm_ctx *ctx;
static mm_dit *dit;
static const char *CASE = "ref2va_step4";

/* f32 copies of the inputs (the forward takes f32 rows) */
static mm_tensor f32_copy(const mm_tensor *t)
{
    mm_tensor o = {0};
    mm_error err = {{0}};
    if (mm_tensor_alloc(&o, mm_cpu(), MM_F32, 2, t->shape, &err) == 0)
        mm_copy(ctx, &o, t);
    return o;
}

static void test_capture_is_plain_and_cached_matches_same_step(void)
{
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, CASE) == 0, "kit case %s", CASE);
    const mm_dit_config *cfg = mm_dit_get_config(dit);
    const mm_dit_layout *l = &f.l;
    MM_REQUIRE(l->cond_video_rows > 0 && l->cond_audio_rows > 0, "the case pins video and audio rows");
    mm_tensor video = f32_copy(&f.video), audio = f32_copy(&f.audio), vv0 = {0}, va0 = {0}, vv1 = {0}, va1 = {0};
    mm_tensor vv2 = {0}, va2 = {0}, refined = {0};
    mm_error err = {{0}};
    mm_dit_request *plain = NULL, *cap = NULL, *red = NULL;
    pl_refkv *kv = NULL;
    const int64_t vs[2] = {l->video_rows, cfg->video_row_width}, as[2] = {l->audio_rows, cfg->audio_row_width};
    const int64_t nv = l->video_rows - l->cond_video_rows, na = l->audio_rows - l->cond_audio_rows;
    MM_REQUIRE(mm_tensor_alloc(&vv0, mm_cpu(), MM_F32, 2, vs, &err) == 0 &&
                   mm_tensor_alloc(&va0, mm_cpu(), MM_F32, 2, as, &err) == 0 &&
                   mm_tensor_alloc(&vv1, mm_cpu(), MM_F32, 2, vs, &err) == 0 &&
                   mm_tensor_alloc(&va1, mm_cpu(), MM_F32, 2, as, &err) == 0 &&
                   mm_tensor_alloc(&vv2, mm_cpu(), MM_F32, 2, (int64_t[]){nv, cfg->video_row_width}, &err) == 0 &&
                   mm_tensor_alloc(&va2, mm_cpu(), MM_F32, 2, (int64_t[]){na, cfg->audio_row_width}, &err) == 0,
               "%s", err.msg);
    MM_REQUIRE(mm_dit_request_begin(dit, ctx, l, &f.text, NULL, &plain, &err) == 0 &&
                   mm_dit_forward(plain, f.row_t, &video, &audio, &vv0, &va0, &err) == 0,
               "plain forward: %s", err.msg);
    mm_dit_request_end(plain);

    MM_REQUIRE(pl_refkv_create(&kv, ctx, cfg, l, &err) == 0, "%s", err.msg);
    MM_EXPECT(pl_refkv_rows(kv) == l->cond_video_rows + l->cond_audio_rows, "pinned rows %lld",
              (long long)pl_refkv_rows(kv));
    MM_REQUIRE(mm_tensor_alloc(&refined, mm_cpu(), MM_BF16, 2, (int64_t[]){l->text_rows, cfg->hidden}, &err) == 0 &&
                   mm_dit_refine_text(dit, ctx, &f.text, &refined, &err) == 0,
               "%s", err.msg);
    mm_dit_request_opts o = pl_refkv_capture_opts(kv, &refined);
    pl_refkv_begin_forward(kv);
    MM_REQUIRE(mm_dit_request_begin_ex(dit, ctx, l, NULL, &o, NULL, &cap, &err) == 0, "%s", err.msg);
    pl_refkv_attach(kv, cap); /* the hooks run the request's own SDPA, as the pipeline has them */
    MM_REQUIRE(mm_dit_forward(cap, f.row_t, &video, &audio, &vv1, &va1, &err) == 0, "capturing forward: %s", err.msg);
    mm_dit_request_end(cap);
    pl_refkv_attach(kv, NULL);
    MM_EXPECT(memcmp(vv0.data, vv1.data, mm_tensor_nbytes(&vv0)) == 0 &&
                  memcmp(va0.data, va1.data, mm_tensor_nbytes(&va0)) == 0,
              "the capturing forward equals the plain forward bit for bit");

    /* the reduced layout: the same target rows, pinned rows gone */
    const mm_dit_layout *r = pl_refkv_reduced(kv);
    MM_EXPECT(r->rows == l->rows - pl_refkv_rows(kv) && r->video_rows == nv && r->audio_rows == na &&
                  r->cond_video_rows == 0 && r->cond_audio_rows == 0,
              "reduced layout %lld rows", (long long)r->rows);
    float *rt = malloc(sizeof(float) * (size_t)r->rows);
    mm_dit_row_timesteps(r, (float)f.c.t_video, (float)f.c.t_audio, (float)f.c.condition_t, rt);
    bool same_t = true;
    for (int64_t i = 0, k = 0; i < l->rows; i++)
        if (l->roles[i] != MM_DIT_ROW_COND_VIDEO && l->roles[i] != MM_DIT_ROW_REF_AUDIO) {
            same_t &= rt[k] == f.row_t[i] && memcmp(&r->positions[3 * k], &l->positions[3 * i], 24) == 0;
            k++;
        }
    MM_EXPECT(same_t, "kept rows keep their positions and timesteps");
    mm_tensor tv = mm_tensor_narrow(&video, 0, l->cond_video_rows, nv);
    mm_tensor ta = mm_tensor_narrow(&audio, 0, l->cond_audio_rows, na);
    mm_tensor tv_c = f32_copy(&tv), ta_c = f32_copy(&ta);
    o = pl_refkv_cached_opts(kv, &refined);
    pl_refkv_begin_forward(kv);
    MM_REQUIRE(mm_dit_request_begin_ex(dit, ctx, r, NULL, &o, NULL, &red, &err) == 0, "%s", err.msg);
    pl_refkv_attach(kv, red);
    MM_REQUIRE(mm_dit_forward(red, rt, &tv_c, &ta_c, &vv2, &va2, &err) == 0, "cached forward: %s", err.msg);
    mm_dit_request_end(red);
    const float *p0v = (const float *)vv0.data + l->cond_video_rows * cfg->video_row_width;
    const float *p0a = (const float *)va0.data + l->cond_audio_rows * cfg->audio_row_width;
    double ev = mm_conf_measure(vv2.data, p0v, nv * cfg->video_row_width).rel_l2;
    double ea = mm_conf_measure(va2.data, p0a, na * cfg->audio_row_width).rel_l2;
    printf("     cached forward with same-step K/V vs plain: video rel_l2 %.3g, audio %.3g\n", ev, ea);
    /* Only the order of the attention sum differs, and the bf16 stream and
     * int8 codes turn that into ~1e-2 (the kit's forward tolerance is 0.039
     * for such differences); leaving the kept K/V out gives ~0.2 here. */
    MM_EXPECT(ev < 0.02 && ea < 0.02, "same-step K/V reproduce the targets (video %.3g, audio %.3g)", ev, ea);
    free(rt);
    pl_refkv_free(kv);
    mm_tensor *all[] = {&video, &audio, &vv0, &va0, &vv1, &va1, &vv2, &va2, &refined, &tv_c, &ta_c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    kit_forward_case_free(&f);
}

/* ------------------------------------------------- a short sampler run */

/* How a sampler run gets its velocities. */
typedef enum run_mode {
    RUN_UNCACHED,      /* every forward over every row */
    RUN_CACHED,        /* forward 1 captures the pinned rows' K/V, later ones use it (the product) */
    RUN_CACHED_NO_KV,  /* control: later forwards drop the pinned rows without their kept K/V */
} run_mode;

typedef struct run {
    run_mode mode;
    const mm_dit_layout *l;
    mm_dit_request *full, *red;
    pl_refkv *kv;
    mm_tensor *refined;
    float *row_t;
} run;

static int velocity(void *user, int step, float t_video, float t_audio, const mm_flow_stream *video,
                    const mm_flow_stream *audio, float *v_video, float *v_audio, mm_error *err)
{
    run *s = user;
    const mm_dit_config *cfg = mm_dit_get_config(dit);
    bool cached = s->kv && step > 0;
    const mm_dit_layout *l = cached ? pl_refkv_reduced(s->kv) : s->l;
    int64_t cv = cached ? video->cond_rows : 0, ca = cached ? audio->cond_rows : 0;
    if (cached && !s->red) {
        /* the control's reduced forwards attend over the kept rows only (no hook) */
        mm_dit_request_opts o = s->mode == RUN_CACHED_NO_KV ? (mm_dit_request_opts){.refined_text = s->refined}
                                                            : pl_refkv_cached_opts(s->kv, s->refined);
        if (mm_dit_request_begin_ex(dit, ctx, l, NULL, &o, NULL, &s->red, err) != 0)
            return -1;
    }
    if (s->kv && !(cached && s->mode == RUN_CACHED_NO_KV)) {
        pl_refkv_begin_forward(s->kv);
        pl_refkv_attach(s->kv, cached ? s->red : s->full);
    }
    mm_dit_row_timesteps(l, t_video, t_audio, 0.999f, s->row_t);
    int64_t nv = video->n_rows - cv, na = audio->n_rows - ca;
    mm_tensor hv = mm_tensor_wrap(video->rows + cv * video->width, mm_cpu(), MM_F32, 2,
                                  (int64_t[]){nv, cfg->video_row_width});
    mm_tensor ha = mm_tensor_wrap(audio->rows + ca * audio->width, mm_cpu(), MM_F32, 2,
                                  (int64_t[]){na, cfg->audio_row_width});
    mm_tensor ov = mm_tensor_wrap(v_video + cv * video->width, mm_cpu(), MM_F32, 2, hv.shape);
    mm_tensor oa = mm_tensor_wrap(v_audio + ca * audio->width, mm_cpu(), MM_F32, 2, ha.shape);
    return mm_dit_forward(cached ? s->red : s->full, s->row_t, &hv, &ha, &ov, &oa, err);
}

static int sample(const kit_forward_case *f, run_mode mode, float *video_rows, float *audio_rows, mm_error *err)
{
    const mm_dit_config *cfg = mm_dit_get_config(dit);
    const mm_dit_layout *l = &f->l;
    const bool with_kv = mode != RUN_UNCACHED;
    mm_sigma_schedule sv = {0}, sa = {0};
    run s = {.mode = mode, .l = l, .row_t = malloc(sizeof(float) * (size_t)l->rows)};
    mm_tensor refined = {0};
    int rc = -1;
    if (mm_sigma_schedule_build(6, 12.0f, &sv, err) != 0 || mm_sigma_schedule_build(6, 3.0f, &sa, err) != 0)
        goto done;
    if (with_kv) {
        if (pl_refkv_create(&s.kv, ctx, cfg, l, err) != 0 ||
            mm_tensor_alloc(&refined, mm_cpu(), MM_BF16, 2, (int64_t[]){l->text_rows, cfg->hidden}, err) != 0 ||
            mm_dit_refine_text(dit, ctx, &f->text, &refined, err) != 0)
            goto done;
        s.refined = &refined;
        mm_dit_request_opts o = pl_refkv_capture_opts(s.kv, &refined);
        if (mm_dit_request_begin_ex(dit, ctx, l, NULL, &o, NULL, &s.full, err) != 0)
            goto done;
    } else if (mm_dit_request_begin(dit, ctx, l, &f->text, NULL, &s.full, err) != 0) {
        goto done;
    }
    mm_flow_stream vs = {video_rows, l->video_rows, l->cond_video_rows, cfg->video_row_width, &sv};
    mm_flow_stream as = {audio_rows, l->audio_rows, l->cond_audio_rows, cfg->audio_row_width, &sa};
    rc = mm_flow_sample(&vs, &as, velocity, &s, NULL, err);
done:
    mm_dit_request_end(s.full);
    mm_dit_request_end(s.red);
    pl_refkv_free(s.kv);
    mm_tensor_free(&refined);
    mm_sigma_schedule_free(&sv);
    mm_sigma_schedule_free(&sa);
    free(s.row_t);
    return rc;
}

/* The bound on the cached run's final targets against the uncached run's
 * (rel_l2, video and audio). Measured on the CPU (1 to 8 threads alike):
 * 0.024 / 0.020; dropping the kept K/V (the control below) ends at 0.12 /
 * 0.10. 0.05 sits 2x above the one and 2x under the other. */
#define CACHED_RUN_BOUND 0.05

static void test_deviation_over_a_short_run(void)
{
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, CASE) == 0, "kit case %s", CASE);
    const mm_dit_config *cfg = mm_dit_get_config(dit);
    const mm_dit_layout *l = &f.l;
    const int64_t nvv = l->video_rows * cfg->video_row_width, naa = l->audio_rows * cfg->audio_row_width;
    const run_mode modes[3] = {RUN_UNCACHED, RUN_CACHED, RUN_CACHED_NO_KV};
    const char *what[3] = {"uncached run", "cached run", "control run (kept K/V dropped)"};
    float *v[3], *a[3];
    int rc[3];
    mm_error err = {{0}};
    for (int k = 0; k < 3; k++) {
        mm_tensor tv = f32_copy(&f.video), ta = f32_copy(&f.audio);
        v[k] = malloc(sizeof(float) * (size_t)nvv);
        a[k] = malloc(sizeof(float) * (size_t)naa);
        memcpy(v[k], tv.data, sizeof(float) * (size_t)nvv);
        memcpy(a[k], ta.data, sizeof(float) * (size_t)naa);
        mm_tensor_free(&tv);
        mm_tensor_free(&ta);
        rc[k] = sample(&f, modes[k], v[k], a[k], &err);
        MM_EXPECT(rc[k] == 0, "%s: %s", what[k], err.msg);
    }
    if (rc[0] == 0 && rc[1] == 0 && rc[2] == 0) {
        const int64_t ov = l->cond_video_rows * cfg->video_row_width, oa = l->cond_audio_rows * cfg->audio_row_width;
        double ev[3], ea[3];
        for (int k = 1; k < 3; k++) {
            ev[k] = mm_conf_measure(v[k] + ov, v[0] + ov, nvv - ov).rel_l2;
            ea[k] = mm_conf_measure(a[k] + oa, a[0] + oa, naa - oa).rel_l2;
        }
        printf("     5 forwards, cached vs uncached final targets: video rel_l2 %.3g, audio %.3g "
               "(%lld of %lld rows pinned); without the kept K/V: %.3g, %.3g (bound %.3g)\n",
               ev[1], ea[1], (long long)(l->cond_video_rows + l->cond_audio_rows), (long long)l->rows, ev[2], ea[2],
               CACHED_RUN_BOUND);
        MM_EXPECT(isfinite(ev[1]) && isfinite(ea[1]) && ev[1] > 0, "a measurable, finite deviation (%.3g, %.3g)",
                  ev[1], ea[1]);
        MM_EXPECT(ev[1] <= CACHED_RUN_BOUND && ea[1] <= CACHED_RUN_BOUND,
                  "the cached run ends within %.3g of the uncached one (video %.3g, audio %.3g)", CACHED_RUN_BOUND,
                  ev[1], ea[1]);
        /* The control: the bound is one the known mistake does not meet. */
        MM_EXPECT(ev[2] > CACHED_RUN_BOUND && ea[2] > CACHED_RUN_BOUND,
                  "dropping the kept K/V should exceed the bound %.3g (video %.3g, audio %.3g)", CACHED_RUN_BOUND,
                  ev[2], ea[2]);
        MM_EXPECT(memcmp(v[0], v[1], sizeof(float) * (size_t)ov) == 0, "pinned rows are never updated");
    }
    for (int k = 0; k < 3; k++) {
        free(v[k]);
        free(a[k]);
    }
    kit_forward_case_free(&f);
}

int main(void)
{
    mm_error err = {{0}};
    char path[1024];
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    manifest = json_load_file(path, 0, NULL);
    snprintf(path, sizeof path, "%s/dit/cases.safetensors", mm_test_data_dir());
    if (!manifest || mm_st_open(&cases, path, &err) != 0 || mm_ctx_create(&ctx, mm_cpu(), 0, &err) != 0) {
        printf("FAIL setup: the DiT kit in tests/data/dit: %s\n", err.msg);
        return 1;
    }
    snprintf(path, sizeof path, "%s/dit/dit.safetensors", mm_test_data_dir());
    if (mm_dit_load(&dit, path, ctx, NULL, &err) != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    MM_RUN(test_capture_is_plain_and_cached_matches_same_step);
    MM_RUN(test_deviation_over_a_short_run);
    mm_dit_free(dit);
    mm_st_close(cases);
    json_decref(manifest);
    mm_ctx_destroy(ctx);
    return mm_test_exit();
}
