/* The sequence-parallel DiT on a CPU "world": N simulated ranks, each a
 * thread with its own CPU context and model replica, exchanging q/k/v and
 * attention outputs through host memory. The decomposition is proven by
 * equality with the one-rank forward (the plain mm_dit_forward) on the
 * conformance kit's cases — rows split unevenly, ranks without text or
 * audio rows, several requests — and by the kit's own tolerance. A
 * generated 8-head model takes N = 8. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/device.h"
#include "backend/ops.h"
#include "conformance/conformance.h"
#include "conformance/dit_kit.h"
#include "model/dit/dit.h"
#include "parallel/sp_dit.h"
#include "test.h"
#include "test_sampler_kit.h"
#include "test_step_cache_run.h"

static json_t *manifest;
static mm_safetensors *cases;
static mm_ctx *ctx;
static char kit_ckpt[1024];
static double video_tol, audio_tol;

typedef struct outputs {
    float *v;
    int64_t nv, na; /* elements */
} outputs;

/* One plain forward (N = 0) or a sequence-parallel one over N ranks. */
/* mm_sp_options.exchange_self of the sequence-parallel loads forward_on makes. */
static bool sp_exchange_self;

static int forward_on(mm_ctx *ctx, const char *ckpt, const mm_dit_layout *l, const float *row_t, const mm_tensor *video,
                   const mm_tensor *audio, const mm_tensor *text, int N, int repeats, outputs *o, mm_error *err)
{
    mm_dit *dit = NULL;
    mm_sp_dit *sp = NULL;
    const mm_dit_config *c;
    if (N == 0) {
        if (mm_dit_load(&dit, ckpt, ctx, NULL, err) != 0)
            return -1;
        c = mm_dit_get_config(dit);
    } else {
        mm_sp_options opt;
        mm_sp_options_defaults(&opt);
        opt.ranks = N;
        opt.cpu_threads = 1;
        opt.exchange_self = sp_exchange_self;
        if (mm_sp_dit_load(&sp, ckpt, ctx, &opt, NULL, err) != 0)
            return -1;
        c = mm_sp_dit_config(sp);
    }
    o->nv = l->video_rows * c->video_row_width;
    o->na = l->audio_rows * c->audio_row_width;
    o->v = malloc(sizeof(float) * (size_t)(o->nv + o->na + 1));
    mm_tensor hvv = mm_tensor_wrap(o->v, mm_cpu(), MM_F32, 2, MM_SHAPE(l->video_rows, c->video_row_width));
    mm_tensor hva = mm_tensor_wrap(o->v + o->nv, mm_cpu(), MM_F32, 2, MM_SHAPE(l->audio_rows, c->audio_row_width));
    /* On a GPU the inputs and outputs live there, as the engine keeps them. */
    const mm_device dev = mm_ctx_device(ctx);
    const bool gpu = dev.kind != MM_DEVICE_CPU;
    mm_tensor vv = hvv, va = hva, dvid = *video, daud = *audio, dtext = *text;
    if (gpu) {
        if (mm_tensor_alloc(&vv, dev, MM_F32, 2, hvv.shape, err) || mm_tensor_alloc(&va, dev, MM_F32, 2, hva.shape, err) ||
            mm_tensor_alloc(&dvid, dev, video->dtype, 2, video->shape, err) ||
            mm_tensor_alloc(&daud, dev, audio->dtype, 2, audio->shape, err) ||
            mm_tensor_alloc(&dtext, dev, text->dtype, 2, text->shape, err))
            return -1;
        mm_copy(ctx, &dvid, video);
        mm_copy(ctx, &daud, audio);
        mm_copy(ctx, &dtext, text);
        if (mm_ctx_sync(ctx, err) != 0)
            return -1;
        video = &dvid;
        audio = &daud;
        text = &dtext;
    }
    int rc = -1;
    if (N == 0) {
        mm_dit_request *req;
        if (mm_dit_request_begin(dit, ctx, l, text, NULL, &req, err) == 0) {
            rc = 0;
            for (int i = 0; i < repeats && rc == 0; i++)
                rc = mm_dit_forward(req, row_t, video, audio, &vv, &va, err);
            mm_dit_request_end(req);
        }
        mm_dit_free(dit);
    } else {
        mm_sp_request *req;
        if (mm_sp_request_begin(sp, l, text, &req, err) == 0) {
            rc = 0;
            for (int i = 0; i < repeats && rc == 0; i++)
                rc = mm_sp_forward(req, row_t, video, audio, &vv, &va, err);
            mm_sp_request_end(req);
        }
        mm_sp_dit_free(sp);
    }
    if (gpu) {
        if (rc == 0) {
            mm_copy(ctx, &hvv, &vv);
            mm_copy(ctx, &hva, &va);
            rc = mm_ctx_sync(ctx, err);
        }
        mm_tensor_free(&vv);
        mm_tensor_free(&va);
        mm_tensor_free(&dvid);
        mm_tensor_free(&daud);
        mm_tensor_free(&dtext);
    }
    if (rc != 0) {
        free(o->v);
        o->v = NULL;
    }
    return rc;
}

static int forward(const char *ckpt, const mm_dit_layout *l, const float *row_t, const mm_tensor *video,
                   const mm_tensor *audio, const mm_tensor *text, int N, int repeats, outputs *o, mm_error *err)
{
    return forward_on(ctx, ckpt, l, row_t, video, audio, text, N, repeats, o, err);
}

/* SP over each N against the plain forward, and both against the kit. */
static void check_case(const char *name, const int *ranks, int n_ranks)
{
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, name) == 0, "case %s", name);
    mm_error err = {{0}};
    outputs ref;
    MM_REQUIRE(forward(kit_ckpt, &f.l, f.row_t, &f.video, &f.audio, &f.text, 0, 1, &ref, &err) == 0, "%s", err.msg);
    char key[256];
    snprintf(key, sizeof key, "%s.out.video", name);
    const float *kv = kit_f32(mm_st_find(cases, key));
    snprintf(key, sizeof key, "%s.out.audio", name);
    const float *ka = kit_f32(mm_st_find(cases, key));
    for (int i = 0; i < n_ranks; i++) {
        outputs o;
        const int N = ranks[i];
        MM_EXPECT(forward(kit_ckpt, &f.l, f.row_t, &f.video, &f.audio, &f.text, N, 2, &o, &err) == 0,
                  "%s N=%d: %s", name, N, err.msg);
        if (!o.v)
            continue;
        const double dv = mm_conf_measure(o.v, ref.v, ref.nv).rel_l2;
        const double da = mm_conf_measure(o.v + ref.nv, ref.v + ref.nv, ref.na).rel_l2;
        const bool bits = memcmp(o.v, ref.v, sizeof(float) * (size_t)(ref.nv + ref.na)) == 0;
        /* Same rows, same keys, same per-row arithmetic: equal within f32 noise (usually bit for bit). */
        MM_EXPECT(dv <= 1e-5 && da <= 1e-5, "%s N=%d vs one rank: video rel_l2 %.3g, audio %.3g", name, N, dv, da);
        if (kv && ka) {
            const double kvd = mm_conf_measure(o.v, kv, ref.nv).rel_l2;
            const double kad = mm_conf_measure(o.v + ref.nv, ka, ref.na).rel_l2;
            MM_EXPECT(kvd <= video_tol && kad <= audio_tol, "%s N=%d vs the kit: %.3g / %.3g", name, N, kvd, kad);
        }
        const double mx = mm_conf_measure(o.v, ref.v, ref.nv + ref.na).max_abs;
        printf("     %s S=%lld N=%d: vs one rank rel_l2 video %.2g audio %.2g, max |diff| %.2g%s\n", name,
               (long long)f.l.rows, N, dv, da, mx, bits ? " (bit-identical)" : "");
        free(o.v);
    }
    free(ref.v);
    kit_forward_case_free(&f);
}

static void test_t2va_over_1_2_4_ranks(void) { check_case("t2va_step0", (const int[]){1, 2, 4}, 3); }
/* One rank runs the plain forward behind the hook; exchange_self keeps its
 * pack / exchange with itself / unpack, which must agree too. */
static void test_one_rank_exchanging_with_itself(void)
{
    sp_exchange_self = true;
    check_case("t2va_step0", (const int[]){1}, 1);
    sp_exchange_self = false;
}
/* One rank stages nothing: rows that are not on rank 0's device (here host
 * rows tagged as a GPU's) are refused by name instead of being handed to the
 * DiT as they are; the request stays usable. And a rank's failure while
 * fast mode is set up names its cause. */
static void test_one_rank_refuses_rows_on_another_device(void)
{
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, "t2va_step0") == 0, "case");
    mm_sp_options opt;
    mm_sp_options_defaults(&opt);
    opt.ranks = 1;
    opt.cpu_threads = 1;
    mm_sp_dit *sp = NULL;
    mm_sp_request *req = NULL;
    mm_error err = {{0}};
    MM_REQUIRE(mm_sp_dit_load(&sp, kit_ckpt, ctx, &opt, NULL, &err) == 0 &&
                   mm_sp_request_begin(sp, &f.l, &f.text, &req, &err) == 0,
               "%s", err.msg);
    const mm_dit_config *c = mm_sp_dit_config(sp);
    float *vv = malloc(sizeof(float) * (size_t)(f.l.video_rows * c->video_row_width + 1));
    float *va = malloc(sizeof(float) * (size_t)(f.l.audio_rows * c->audio_row_width + 1));
    mm_tensor tvv = mm_tensor_wrap(vv, mm_cpu(), MM_F32, 2, MM_SHAPE(f.l.video_rows, c->video_row_width));
    mm_tensor tva = mm_tensor_wrap(va, mm_cpu(), MM_F32, 2, MM_SHAPE(f.l.audio_rows, c->audio_row_width));
    mm_tensor elsewhere = f.video;
    elsewhere.device = mm_cuda(0);
    const int rc = mm_sp_forward(req, f.row_t, &elsewhere, &f.audio, &tvv, &tva, &err);
    MM_EXPECT(rc != 0 && strstr(err.msg, "rank 0's device") && strstr(err.msg, "cuda:0"), "rc %d, message: %s", rc,
              err.msg);
    err = (mm_error){{0}};
    MM_EXPECT(mm_sp_forward(req, f.row_t, &f.video, &f.audio, &tvv, &tva, &err) == 0, "then: %s", err.msg);
    /* a failure on a rank's context while fast mode is set up comes back with its cause */
    mm_ctx_fail(ctx, "a failure the test recorded");
    err = (mm_error){{0}};
    MM_EXPECT(mm_sp_request_set_fast(req, true, &err) != 0 && strstr(err.msg, "a failure the test recorded"),
              "set_fast: %s", err.msg);
    mm_ctx_clear_error(ctx);
    free(vv);
    free(va);
    mm_sp_request_end(req);
    mm_sp_dit_free(sp);
    kit_forward_case_free(&f);
}
static void test_fl2va_over_2_and_4_ranks(void) { check_case("fl2va_firstlast_step5", (const int[]){2, 4}, 2); }
static void test_ref2va_over_4_ranks(void) { check_case("ref2va_step4", (const int[]){4}, 1); }

/* The commands' start-up reader of MMH3_SP_*: each value lands in its field,
 * unset or empty leaves the field alone, and a bad value names what is
 * accepted. */
static void test_sp_options_from_the_environment(void)
{
    mm_sp_options o;
    mm_sp_options_defaults(&o);
    mm_error err = {{0}};
    unsetenv("MMH3_SP_WORLD");
    unsetenv("MMH3_SP_ABORT_SECONDS");
    setenv("MMH3_SP_EXCHANGE_SELF", "", 1);
    MM_EXPECT(mm_sp_options_from_env(&o, &err) == 0 && o.world == -1 && o.abort_seconds == 0 && !o.exchange_self,
              "unset: %s, world %d", err.msg, o.world);
    setenv("MMH3_SP_WORLD", "host", 1);
    setenv("MMH3_SP_ABORT_SECONDS", "2.5", 1);
    setenv("MMH3_SP_EXCHANGE_SELF", "1", 1);
    MM_EXPECT(mm_sp_options_from_env(&o, &err) == 0 && o.world == MM_WORLD_HOST && o.abort_seconds == 2.5 &&
                  o.exchange_self,
              "set: %s, world %d, abort %g", err.msg, o.world, o.abort_seconds);
    setenv("MMH3_SP_WORLD", "nccl", 1);
    MM_EXPECT(mm_sp_options_from_env(&o, &err) == 0 && o.world == MM_WORLD_NCCL, "nccl: world %d", o.world);
    const char *bad[][2] = {{"MMH3_SP_WORLD", "mpi"}, {"MMH3_SP_ABORT_SECONDS", "0"},
                            {"MMH3_SP_ABORT_SECONDS", "10s"}, {"MMH3_SP_EXCHANGE_SELF", "yes"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsetenv("MMH3_SP_WORLD");
        unsetenv("MMH3_SP_ABORT_SECONDS");
        unsetenv("MMH3_SP_EXCHANGE_SELF");
        setenv(bad[i][0], bad[i][1], 1);
        memset(&err, 0, sizeof err);
        MM_EXPECT(mm_sp_options_from_env(&o, &err) != 0 && strstr(err.msg, bad[i][0]) && strstr(err.msg, "accepted"),
                  "%s=%s: rc 0 or no plain message (%s)", bad[i][0], bad[i][1], err.msg);
        unsetenv(bad[i][0]);
    }
}

static void test_ranks_that_do_not_divide_the_heads_are_refused(void)
{
    mm_sp_options opt;
    mm_sp_options_defaults(&opt);
    opt.ranks = 3;
    mm_sp_dit *sp = NULL;
    mm_error err = {{0}};
    MM_EXPECT(mm_sp_dit_load(&sp, kit_ckpt, ctx, &opt, NULL, &err) != 0, "3 ranks over 4 heads");
    MM_EXPECT(strstr(err.msg, "4 attention heads") && strstr(err.msg, "1, 2, 4"), "message: %s", err.msg);
    mm_sp_dit_free(sp);
}

/* N = 8 needs 8 heads: a generated model of the release layout. */
static void test_eight_ranks_on_an_eight_head_model(void)
{
    const char *build = getenv("MMH3_BUILD");
    char gen[1200], path[1024], cmd[3000];
    snprintf(gen, sizeof gen, "%s/mmh3-gen-tiny", build ? build : ".");
    /* The generator is built with the tests (make), so its absence is a failure. */
    MM_REQUIRE(access(gen, X_OK) == 0, "%s is not built (make builds it; MMH3_BUILD names the build folder)", gen);
    snprintf(path, sizeof path, "%s/mmh3-sp8-%d.safetensors", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    snprintf(cmd, sizeof cmd, "MMH3_THREADS=2 '%s' dit --heads 8 --layers 2 --text-dim 64 --seed 7 --out '%s' >/dev/null", gen, path);
    MM_REQUIRE(system(cmd) == 0, "%s failed", cmd);
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, "fl2va_first_step2") == 0, "case");
    mm_error err = {{0}};
    outputs ref, o;
    MM_REQUIRE(forward(path, &f.l, f.row_t, &f.video, &f.audio, &f.text, 0, 1, &ref, &err) == 0, "%s", err.msg);
    for (int N = 1; N <= 8; N *= 2) {
        MM_EXPECT(forward(path, &f.l, f.row_t, &f.video, &f.audio, &f.text, N, 1, &o, &err) == 0, "N=%d: %s", N,
                  err.msg);
        if (!o.v)
            continue;
        const double d = mm_conf_measure(o.v, ref.v, ref.nv + ref.na).rel_l2;
        MM_EXPECT(d <= 1e-5, "8 heads, N=%d: rel_l2 %.3g vs one rank", N, d);
        printf("     8-head model, S=%lld, N=%d: rel_l2 %.2g vs one rank\n", (long long)f.l.rows, N, d);
        free(o.v);
    }
    free(ref.v);
    kit_forward_case_free(&f);
    unlink(path);
}

/* The step cache over the ranks: each rank holds some rows, the decision
 * needs the sums over all of them. Through a real sampling loop (the kit
 * case, 7 forwards), every rank must skip the same forwards from the same
 * bits — a rank that skipped alone would leave the others waiting in the
 * attention exchange — and those are the forwards the one-device run skips
 * (the same sums, added in another order), with its velocities. */
#define SP_CACHE_STEPS 8

static int cached_run_one_device(mm_ctx *on, const kit_forward_case *f, const mm_step_cache_config *c, sc_run *r,
                                 mm_step_cache_report *rep, mm_error *err)
{
    mm_dit *dit = NULL;
    if (mm_dit_load(&dit, kit_ckpt, on, NULL, err) != 0)
        return -1;
    memset(r, 0, sizeof *r);
    r->f = f;
    r->cfg = mm_dit_get_config(dit);
    r->gpu = mm_ctx_device(on).kind == MM_DEVICE_CUDA ? on : NULL;
    int rc = mm_dit_request_begin(dit, on, &f->l, &f->text, NULL, &r->dreq, err);
    if (rc == 0 && (rc = mm_dit_request_set_step_cache(r->dreq, c, SP_CACHE_STEPS - 1, err)) == 0 &&
        (rc = sc_sample(r, SP_CACHE_STEPS, err)) == 0)
        *rep = *mm_dit_request_step_cache_report(r->dreq);
    mm_dit_request_end(r->dreq);
    r->dreq = NULL;
    mm_dit_free(dit);
    return rc;
}

/* The ranks on ctx0's device kind: devices NULL (CPU ranks), or the GPUs to use. */
static void check_ranks(mm_ctx *ctx0, const mm_device *devices, const kit_forward_case *f,
                        const mm_step_cache_config *c, int N, const sc_run *one, const mm_step_cache_report *one_rep,
                        double tol)
{
    mm_sp_options opt;
    mm_sp_options_defaults(&opt);
    opt.ranks = N;
    opt.cpu_threads = 1;
    opt.devices = devices;
    mm_sp_dit *sp = NULL;
    sc_run r;
    memset(&r, 0, sizeof r);
    mm_error err = {{0}};
    MM_REQUIRE(mm_sp_dit_load(&sp, kit_ckpt, ctx0, &opt, NULL, &err) == 0, "%s", err.msg);
    r.f = f;
    r.cfg = mm_sp_dit_config(sp);
    int rc = mm_sp_request_begin(sp, &f->l, &f->text, &r.sreq, &err);
    if (rc == 0)
        rc = mm_sp_request_set_step_cache(r.sreq, c, SP_CACHE_STEPS - 1, &err);
    if (rc == 0)
        rc = sc_sample(&r, SP_CACHE_STEPS, &err);
    MM_EXPECT(rc == 0, "N=%d: %s", N, err.msg);
    char want[SC_MAX_FORWARDS + 1], got[SC_MAX_FORWARDS + 1];
    sc_pattern(one_rep, SP_CACHE_STEPS - 1, want);
    const mm_step_cache_report *rank0 = rc == 0 ? mm_sp_request_step_cache_report(r.sreq, 0) : NULL;
    for (int k = 0; rank0 && k < N; k++) {
        const mm_step_cache_report *rep = mm_sp_request_step_cache_report(r.sreq, k);
        sc_pattern(rep, SP_CACHE_STEPS - 1, got);
        MM_EXPECT(rep && rep->decided == SP_CACHE_STEPS - 1 && strcmp(got, want) == 0,
                  "N=%d rank %d skipped %s, the one-device run %s", N, k, got, want);
        MM_EXPECT(rep && memcmp(rep->rel, rank0->rel, sizeof rep->rel) == 0,
                  "N=%d rank %d decided on other numbers than rank 0", N, k);
    }
    double worst = 0;
    for (int i = 0; rank0 && i < SP_CACHE_STEPS - 1; i++)
        if (isfinite(one_rep->rel[i]))
            worst = fmax(worst, fabs((double)rank0->rel[i] - one_rep->rel[i]) / one_rep->rel[i]);
    MM_EXPECT(worst < tol, "N=%d: rel differs from the one-device run by %.3g (relative)", N, worst);
    if (rc == 0) {
        const int64_t nv = f->l.video_rows * r.cfg->video_row_width, na = f->l.audio_rows * r.cfg->audio_row_width;
        const double dv = mm_conf_measure(r.video, one->video, nv).rel_l2;
        const double da = mm_conf_measure(r.audio, one->audio, na).rel_l2;
        MM_EXPECT(dv <= 50 * tol && da <= 50 * tol, "N=%d: final rows vs one device: video rel_l2 %.3g, audio %.3g",
                  N, dv, da);
        printf("     %s over %d %s ranks: skipped %s on every rank (as one device), final rows rel_l2 %.2g / %.2g\n",
               c->kind == MM_STEP_CACHE_FBC ? "FBC" : "TeaCache", N, devices ? "GPU" : "CPU", want, dv, da);
    }
    mm_sp_request_end(r.sreq);
    r.sreq = NULL;
    sc_run_free(&r);
    mm_sp_dit_free(sp);
}

/* One method's check on the kit case: the threshold between the uncached
 * run's rel values, the one-device run there, then the ranks (devices NULL:
 * CPU ranks; else the GPUs to use). */
static void step_cache_over_ranks(mm_ctx *on, const kit_forward_case *f, bool teacache, const int *ranks,
                                  int n_ranks, const mm_device *devices, double tol)
{
    const char *spec = teacache ? "teacache:0,warmup=1,final=1" : "fbc:0,warmup=1,final=1,max-cached=2";
    mm_step_cache_config c;
    mm_error err = {{0}};
    MM_REQUIRE(mm_step_cache_parse(spec, &c, &err) == 0, "%s", err.msg);
    if (teacache) { /* identity coefficients: the accumulator adds rel */
        c.n_coeffs = 2;
        c.coeffs[0] = 1.0;
        c.coeffs[1] = 0.0;
    }
    sc_run one;
    mm_step_cache_report rep;
    /* threshold 0: the uncached trajectory's rel values, to put the threshold between */
    MM_REQUIRE(cached_run_one_device(on, f, &c, &one, &rep, &err) == 0, "%s", err.msg);
    sc_run_free(&one);
    double rels[SC_MAX_FORWARDS];
    for (int i = 0; i < SP_CACHE_STEPS - 1; i++)
        rels[i] = rep.rel[i];
    c.threshold = sc_between_middle(rels, SP_CACHE_STEPS - 1) * (teacache ? 1.5 : 1.0);
    MM_REQUIRE(isfinite(c.threshold), "rel values of the uncached run");
    MM_REQUIRE(cached_run_one_device(on, f, &c, &one, &rep, &err) == 0, "%s", err.msg);
    char pattern[SC_MAX_FORWARDS + 1];
    sc_pattern(&rep, SP_CACHE_STEPS - 1, pattern);
    MM_EXPECT(rep.skipped > 0 && strchr(pattern + 1, '0') != strrchr(pattern, '0'),
              "%s at %.4g on one device skips %s: the threshold must decide both ways", spec, c.threshold, pattern);
    double margin = INFINITY; /* FBC decides on rel itself: none may sit on the threshold */
    for (int i = c.warmup; !teacache && i < SP_CACHE_STEPS - 1 - c.final; i++)
        margin = fmin(margin, fabs(rep.rel[i] - c.threshold) / c.threshold);
    /* tol bounds how far the ranks' rel may move from the one-device value:
     * three times that keeps every decision on its side */
    MM_EXPECT(margin > 3 * tol, "a rel value within %.2g of the threshold: the ranks' sums could fall either side",
              margin);
    for (int i = 0; i < n_ranks; i++)
        check_ranks(on, devices, f, &c, ranks[i], &one, &rep, tol);
    sc_run_free(&one);
}

static void test_step_cache_decides_alike_on_every_rank(void)
{
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, "fl2va_first_step2") == 0, "case");
    step_cache_over_ranks(ctx, &f, false, (const int[]){2, 4}, 2, NULL, 1e-5);
    step_cache_over_ranks(ctx, &f, true, (const int[]){2}, 1, NULL, 1e-5);
    kit_forward_case_free(&f);
}

/* On the GPU host: two ranks sharing GPU 0 (the host world: the sums cross
 * through host memory from device buffers) and, with two GPUs, two ranks
 * over NCCL. Silent without a GPU unless MMH3_REQUIRE_GPU=1. */
static void test_step_cache_ranks_on_gpus(void)
{
    const int gpus = mm_cuda_device_count();
    if (gpus == 0) {
        const char *req = getenv("MMH3_REQUIRE_GPU");
        MM_EXPECT(!(req && strcmp(req, "1") == 0), "MMH3_REQUIRE_GPU=1 but no GPU is usable");
        return;
    }
    mm_ctx *g = NULL;
    mm_error err = {{0}};
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, "fl2va_first_step2") == 0, "case");
    MM_REQUIRE(mm_ctx_create(&g, mm_cuda(0), 0, &err) == 0, "%s", err.msg);
    const mm_device shared[2] = {mm_cuda(0), mm_cuda(0)}, two[2] = {mm_cuda(0), mm_cuda(1)};
    /* bf16 on the GPU: the rows split over ranks sum in another order, so a
     * forward over N ranks is within 1e-3 rel_l2 of the one-device forward
     * (the bound of the forward test below), and the cache's rel, a ratio of
     * norms of such outputs, moves by that much; the ranks still agree with
     * each other bit for bit and skip the same forwards (checked exactly). */
    step_cache_over_ranks(g, &f, false, (const int[]){2}, 1, shared, 1e-3);
    if (gpus >= 2)
        step_cache_over_ranks(g, &f, false, (const int[]){2}, 1, two, 1e-3);
    mm_ctx_destroy(g);
    kit_forward_case_free(&f);
}

/* On the GPU host: the same decomposition over the GPUs there, against the
 * plain CUDA forward and the kit. N = 1 twice: as it runs (the plain forward
 * behind the hook) and with exchange_self (pack, NCCL exchange with
 * itself, unpack), so that one GPU checks the exchange path too. Skipped
 * without a GPU (a failure with MMH3_REQUIRE_GPU=1). */
static void test_gpus_equal_the_plain_cuda_forward(void)
{
    const int gpus = mm_cuda_device_count();
    MM_NEED_GPU(gpus);
    mm_ctx *g = NULL;
    mm_error err = {{0}};
    MM_REQUIRE(mm_ctx_create(&g, mm_cuda(0), 0, &err) == 0, "%s", err.msg);
    const char *names[] = {"t2va_step0", "fl2va_firstlast_step5", "ref2va_step4"};
    for (size_t c = 0; c < sizeof names / sizeof names[0]; c++) {
        kit_forward_case f;
        MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, names[c]) == 0, "case");
        outputs ref, o;
        MM_REQUIRE(forward_on(g, kit_ckpt, &f.l, f.row_t, &f.video, &f.audio, &f.text, 0, 1, &ref, &err) == 0, "%s",
                   err.msg);
        char key[256];
        snprintf(key, sizeof key, "%s.out.video", names[c]);
        const float *kv = kit_f32(mm_st_find(cases, key));
        for (int k = 0; k < 4; k++) {
            const int N = k < 2 ? 1 : 1 << (k - 1); /* 1, 1 exchanging with itself, 2, 4 */
            const bool self = k == 1;
            if (N > gpus)
                continue;
            o.v = NULL;
            sp_exchange_self = self;
            const int rc = forward_on(g, kit_ckpt, &f.l, f.row_t, &f.video, &f.audio, &f.text, N, 2, &o, &err);
            sp_exchange_self = false;
            MM_EXPECT(rc == 0, "%s over %d GPU(s)%s: %s", names[c], N, self ? " (exchange with itself)" : "",
                      err.msg);
            if (!o.v)
                continue;
            const double d = mm_conf_measure(o.v, ref.v, ref.nv + ref.na).rel_l2;
            const double dk = kv ? mm_conf_measure(o.v, kv, ref.nv).rel_l2 : 0;
            const char *how = self ? " (exchange with itself)" : "";
            MM_EXPECT(d <= 1e-3 && dk <= video_tol, "%s over %d GPU(s)%s: rel_l2 %.3g vs plain CUDA, %.3g vs the kit",
                      names[c], N, how, d, dk);
            printf("     %s over %d GPU(s)%s: rel_l2 %.2g vs the plain CUDA forward%s, video %.3g vs the kit\n",
                   names[c], N, how, d,
                   memcmp(o.v, ref.v, sizeof(float) * (size_t)(ref.nv + ref.na)) ? "" : " (bit-identical)", dk);
            free(o.v);
        }
        free(ref.v);
        kit_forward_case_free(&f);
    }
    mm_ctx_destroy(g);
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    json_error_t jerr;
    manifest = json_load_file(path, 0, &jerr);
    snprintf(kit_ckpt, sizeof kit_ckpt, "%s/dit/dit.safetensors", mm_test_data_dir());
    cases = kit_open("cases.safetensors");
    mm_error err = {{0}};
    if (!manifest || !cases || mm_ctx_create(&ctx, mm_cpu(), 2, &err) != 0) {
        printf("FAIL setup: %s\n", manifest ? err.msg : jerr.text);
        return 1;
    }
    mm_conf_tol tv, ta;
    if (mm_conf_tolerance(json_object_get(manifest, "tolerances"), "forward.video", &tv, &err) != 0 ||
        mm_conf_tolerance(json_object_get(manifest, "tolerances"), "forward.audio", &ta, &err) != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    video_tol = tv.rel_l2;
    audio_tol = ta.rel_l2;
    MM_RUN(test_t2va_over_1_2_4_ranks);
    MM_RUN(test_one_rank_exchanging_with_itself);
    MM_RUN(test_one_rank_refuses_rows_on_another_device);
    MM_RUN(test_fl2va_over_2_and_4_ranks);
    MM_RUN(test_ref2va_over_4_ranks);
    MM_RUN(test_sp_options_from_the_environment);
    MM_RUN(test_ranks_that_do_not_divide_the_heads_are_refused);
    MM_RUN(test_eight_ranks_on_an_eight_head_model);
    MM_RUN(test_step_cache_decides_alike_on_every_rank);
    MM_RUN(test_step_cache_ranks_on_gpus);
    MM_RUN(test_gpus_equal_the_plain_cuda_forward);
    mm_ctx_destroy(ctx);
    mm_st_close(cases);
    json_decref(manifest);
    return mm_test_exit();
}
