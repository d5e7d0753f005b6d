/* The resident H3 engine as the worker drives it, on tiny checkpoints
 * written by mmh3-gen-tiny (CPU): weights load once and stay; stages are
 * reported in order with per-step progress; reference encodes are served
 * from the content cache the second time; a failed job leaves the engine
 * serving; cancel stops at the next forward; status JSON says residency and
 * placement. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engines.h"
#include "io/safetensors.h"
#include "media/image.h"
#include "media/probe.h"
#include "test.h"

static char dir[256], gen[512];
static mm_engine *engine;
static char log_text[65536];

static void on_log(void *user, const char *line)
{
    (void)user;
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof log_text - n, "%s\n", line);
}

typedef struct watch {
    mm_stage stages[64];
    int n_stages;
    int last_step, total, step_reports;
    int cancel_after; /* forwards; 0 = never */
} watch;

static void on_progress(void *user, const mm_progress *p)
{
    watch *w = user;
    if (w->n_stages == 0 || w->stages[w->n_stages - 1] != p->stage)
        if (w->n_stages < 64)
            w->stages[w->n_stages++] = p->stage;
    if (p->stage == MM_STAGE_DENOISING && p->step > 0) {
        w->step_reports++;
        w->last_step = p->step;
        w->total = p->total_steps;
    }
}

static bool on_cancel(void *user)
{
    watch *w = user;
    return w->cancel_after && w->last_step >= w->cancel_after;
}

static mm_gen_request request(const char *out, uint64_t seed)
{
    mm_gen_request r = {
        .prompt = "a small test clip",
        .partition = "fl2va",
        .width = 64,
        .height = 64,
        .frames = 22,
        .steps = 3,
        .seed = seed,
        .no_audio = true,
        .crf = 18,
        .preset = "ultrafast",
        .out_path = out,
    };
    return r;
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void test_status_before_and_after_load(void)
{
    char buf[4096];
    MM_REQUIRE(mm_engine_status_json(engine, buf, sizeof buf) == 0, "status json");
    json_t *j = json_loads(buf, 0, NULL);
    MM_REQUIRE(j, "valid JSON: %s", buf);
    MM_EXPECT(json_is_false(json_object_get(j, "resident")), "not resident before load: %s", buf);
    json_decref(j);
    mm_error err = {{0}};
    MM_REQUIRE(mm_engine_load(engine, &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_engine_status_json(engine, buf, sizeof buf) == 0, "status json");
    j = json_loads(buf, 0, NULL);
    MM_REQUIRE(j, "valid JSON: %s", buf);
    MM_EXPECT(json_is_true(json_object_get(j, "resident")), "resident after load: %s", buf);
    MM_EXPECT(strcmp(json_string_value(json_object_get(j, "placement")), "dit=cpu text_encoder=cpu vae=cpu") == 0,
              "placement: %s", buf);
    MM_EXPECT(json_is_object(json_object_get(j, "memory")), "memory: %s", buf);
    json_decref(j);
}

static void test_resident_jobs_report_stages_and_reuse_references(void)
{
    char key[512], out1[512], out2[512];
    snprintf(key, sizeof key, "%s/key.png", dir);
    snprintf(out1, sizeof out1, "%s/one.mp4", dir);
    snprintf(out2, sizeof out2, "%s/two.mp4", dir);
    uint8_t rgb[96 * 64 * 3];
    for (int i = 0; i < (int)sizeof rgb; i++)
        rgb[i] = (uint8_t)(i * 7 + i / 300);
    mm_error err = {{0}};
    MM_REQUIRE(mm_image_write(key, rgb, 96, 64, 96 * 3, 0, &err) == 0, "%s", err.msg);

    mm_gen_request r = request(out1, 1);
    r.n_references = 1;
    r.references[0] = (mm_reference){MM_REF_IMAGE, key};
    watch w = {0};
    mm_gen_callbacks cb = {.progress = on_progress, .should_cancel = on_cancel, .user = &w};
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    log_text[0] = '\0';
    MM_REQUIRE(mm_engine_generate(engine, &r, &cb, &res, &err) == 0, "%s", err.msg);
    MM_EXPECT(exists(out1), "the clip");
    const mm_stage order[] = {MM_STAGE_ENCODING_PROMPT, MM_STAGE_ENCODING_REFERENCES, MM_STAGE_DENOISING,
                              MM_STAGE_DECODING_VIDEO, MM_STAGE_WRITING};
    bool same = w.n_stages == 5;
    for (int i = 0; same && i < 5; i++)
        same = w.stages[i] == order[i];
    MM_EXPECT(same, "stage order (%d stages, first %s)", w.n_stages, mm_stage_name(w.stages[0]));
    MM_EXPECT(w.step_reports == 2 && w.last_step == 2 && w.total == 2, "3 grid points = 2 forwards reported: %d %d/%d",
              w.step_reports, w.last_step, w.total);
    MM_EXPECT(res.stage_seconds[MM_STAGE_DENOISING] > 0 && res.total_seconds > 0 && res.timing.forwards == 2,
              "timings");
    MM_EXPECT(strcmp(res.placement, "dit=cpu text_encoder=cpu vae=cpu") == 0, "placement %s", res.placement);
    MM_EXPECT(strstr(log_text, "1 encoded, 0 from the cache"), "first job encodes the keyframe:\n%s", log_text);

    r = request(out2, 2);
    r.n_references = 1;
    r.references[0] = (mm_reference){MM_REF_IMAGE, key};
    memset(&w, 0, sizeof w);
    memset(&res, 0, sizeof res);
    log_text[0] = '\0';
    MM_REQUIRE(mm_engine_generate(engine, &r, &cb, &res, &err) == 0, "%s", err.msg);
    MM_EXPECT(strstr(log_text, "0 encoded, 1 from the cache"), "second job reuses it:\n%s", log_text);
    MM_EXPECT(!strstr(log_text, "loaded in"), "nothing is loaded again:\n%s", log_text);
    MM_EXPECT(w.stages[0] == MM_STAGE_ENCODING_PROMPT, "the job starts at the prompt, not at loading");
}

static void test_failed_job_then_next_one_succeeds(void)
{
    char out[512], missing[512];
    snprintf(out, sizeof out, "%s/after_failure.mp4", dir);
    snprintf(missing, sizeof missing, "%s/no_such_picture.png", dir);
    mm_gen_request r = request(out, 3);
    r.n_references = 1;
    r.references[0] = (mm_reference){MM_REF_IMAGE, missing};
    watch w = {0};
    mm_gen_callbacks cb = {.progress = on_progress, .should_cancel = on_cancel, .user = &w};
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    mm_error err = {{0}};
    MM_EXPECT(mm_engine_generate(engine, &r, &cb, &res, &err) == -1, "a missing reference fails the job");
    MM_EXPECT(strstr(err.msg, "no_such_picture.png") && strstr(err.msg, "reference 1"), "message: %s", err.msg);
    MM_EXPECT(!exists(out), "nothing written");
    r = request(out, 3);
    memset(&res, 0, sizeof res);
    err.msg[0] = '\0';
    MM_EXPECT(mm_engine_generate(engine, &r, &cb, &res, &err) == 0, "the next job runs: %s", err.msg);
    MM_EXPECT(exists(out), "and writes its clip");
    /* a request the rules refuse */
    r = request(out, 3);
    r.frames = 23;
    MM_EXPECT(mm_engine_generate(engine, &r, &cb, &res, &err) == -1 && strstr(err.msg, "17n+5"), "off-grid frames: %s",
              err.msg);
}

/* A failure on the writer thread (here: the PNG dump) fails the job with its
 * message and leaves no partial mp4. */
static void test_writer_failure_fails_the_job_cleanly(void)
{
    char out[512], part[600];
    snprintf(out, sizeof out, "%s/writer_failure.mp4", dir);
    snprintf(part, sizeof part, "%s.part", out);
    mm_gen_request r = request(out, 5);
    r.frames_dir = "/nonexistent-mmh3-dir/frames";
    watch w = {0};
    mm_gen_callbacks cb = {.progress = on_progress, .should_cancel = on_cancel, .user = &w};
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    mm_error err = {{0}};
    MM_EXPECT(mm_engine_generate(engine, &r, &cb, &res, &err) == -1 && strstr(err.msg, "--frames-dir"),
              "the dump's failure is the job's: %s", err.msg);
    MM_EXPECT(!exists(out) && !exists(part), "no partial mp4");
}

/* --sparse (issue 26): the preset reaches the DiT, the table gets the
 * density of every forward (the dense first one at 1), a bad preset fails
 * the job by name. */
static void test_sparse_job_reports_density_per_step(void)
{
    char out[512];
    snprintf(out, sizeof out, "%s/sparse.mp4", dir);
    mm_gen_request r = request(out, 6);
    r.steps = 4;
    r.sparse = "sol:dense_steps=1,dense_layers=0,band=-1,tau=1.5,sinks=none,dense_queries=none";
    watch w = {0};
    mm_gen_callbacks cb = {.progress = on_progress, .should_cancel = on_cancel, .user = &w};
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    mm_error err = {{0}};
    log_text[0] = '\0';
    MM_REQUIRE(mm_engine_generate(engine, &r, &cb, &res, &err) == 0, "%s", err.msg);
    const mm_timing *t = &res.timing;
    MM_EXPECT(t->n_density == 3 && t->density[0] == 1.0f && t->density[1] < 1.0f && t->density[2] < 1.0f &&
                  t->density[1] >= 0.0f,
              "3 forwards, the first dense: %d densities %.3f %.3f %.3f", t->n_density, t->density[0], t->density[1],
              t->density[2]);
    MM_EXPECT(strstr(log_text, "sparse attention: sol (tau 1.50"), "the log names the preset:\n%s", log_text);
    char table[4096];
    mm_timing_format(t, table, sizeof table);
    MM_EXPECT(strstr(table, "attention density per step: 1.00 "), "the table shows it:\n%s", table);
    r = request(out, 6);
    r.sparse = "sol:tau=fast";
    MM_EXPECT(mm_engine_generate(engine, &r, &cb, &res, &err) == -1 && strstr(err.msg, "tau=fast"),
              "a bad preset fails the job by name: %s", err.msg);
}

static void test_cancel_stops_at_the_next_forward(void)
{
    char out[512];
    snprintf(out, sizeof out, "%s/cancelled.mp4", dir);
    mm_gen_request r = request(out, 4);
    r.steps = 50;
    watch w = {.cancel_after = 1};
    mm_gen_callbacks cb = {.progress = on_progress, .should_cancel = on_cancel, .user = &w};
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    mm_error err = {{0}};
    MM_EXPECT(mm_engine_generate(engine, &r, &cb, &res, &err) == MM_CANCELLED, "cancelled: %s", err.msg);
    MM_EXPECT(w.last_step == 1, "stopped after forward 1 (last reported %d)", w.last_step);
    char part[600];
    snprintf(part, sizeof part, "%s.part", out);
    MM_EXPECT(!exists(out) && !exists(part), "nothing left behind");
}

/* The final target rows the engine dumped (video then audio), malloc'ed. */
static void *read_latents(const char *path, size_t *bytes)
{
    mm_safetensors *st = NULL;
    mm_error err = {{0}};
    if (mm_st_open(&st, path, &err) != 0)
        return NULL;
    const mm_st_entry *v = mm_st_find(st, "video_rows"), *a = mm_st_find(st, "audio_rows");
    char *out = NULL;
    if (v && a) {
        const size_t nv = v->end - v->begin, na = a->end - a->begin;
        out = malloc(nv + na);
        memcpy(out, v->data, nv);
        memcpy(out + nv, a->data, na);
        *bytes = nv + na;
    }
    mm_st_close(st);
    return out;
}

/* Step caching through the resident engine (the real pipeline): threshold
 * 0 renders the uncached latents bit for bit; a huge threshold skips what
 * the guards leave, changes the latents, and the result's timings name the
 * skipped forwards, also when the reference KV cache moves forwards 2.. to
 * another request; TeaCache on ref2va is refused before anything runs. */
static void test_step_cache_through_the_pipeline(void)
{
    char models[512], dump[512], out[512];
    snprintf(models, sizeof models, "%s/models", dir);
    snprintf(dump, sizeof dump, "%s/latents.safetensors", dir);
    snprintf(out, sizeof out, "%s/cached.mp4", dir);
    mm_engine_options o;
    mm_engine_options_defaults(&o);
    o.h3.checkpoints.models_path = models;
    o.h3.device = "cpu";
    o.h3.latents_dump = dump;
    mm_engine *e = NULL;
    mm_error err = {{0}};
    MM_REQUIRE(mm_engine_create("h3", &o, &e, &err) == 0, "%s", err.msg);
    const char *specs[3] = {NULL, "fbc:0,warmup=0,final=0,max-cached=0", "fbc:1e30,warmup=2,final=1,max-cached=2"};
    void *rows[3] = {NULL, NULL, NULL};
    size_t bytes[3] = {0, 0, 0};
    mm_gen_result res[3];
    for (int i = 0; i < 3; i++) {
        mm_gen_request r = request(out, 11);
        r.steps = 8; /* 7 forwards */
        if (specs[i])
            MM_EXPECT(mm_step_cache_parse(specs[i], &r.cache, &err) == 0, "%s: %s", specs[i], err.msg);
        memset(&res[i], 0, sizeof res[i]);
        MM_EXPECT(mm_engine_generate(e, &r, NULL, &res[i], &err) == 0, "%s: %s", specs[i] ? specs[i] : "no cache",
                  err.msg);
        rows[i] = read_latents(dump, &bytes[i]);
    }
    MM_EXPECT(rows[0] && rows[1] && bytes[0] == bytes[1] && memcmp(rows[0], rows[1], bytes[0]) == 0,
              "threshold 0: the uncached latents, bit for bit");
    MM_EXPECT(rows[2] && bytes[2] == bytes[0] && memcmp(rows[0], rows[2], bytes[0]) != 0,
              "skipping forwards changes the latents");
    const mm_step_cache_summary *none = &res[0].timing.step_cache, *zero = &res[1].timing.step_cache,
                                *huge = &res[2].timing.step_cache;
    MM_EXPECT(!none->policy[0], "no cache, no record: %s", none->policy);
    MM_EXPECT(zero->forwards == 7 && zero->skipped == 0 && strcmp(zero->policy, specs[1]) == 0, "%s: %d of %d",
              zero->policy, zero->skipped, zero->forwards);
    char list[64];
    mm_step_cache_format_skipped(huge->skipped_bits, huge->forwards, list, sizeof list);
    MM_EXPECT(huge->forwards == 7 && huge->skipped == 3 && strcmp(list, "3-4, 6") == 0, "%s: %d of %d, forwards %s",
              huge->policy, huge->skipped, huge->forwards, list);
    char table[4096];
    res[2].timing.wall = res[2].total_seconds;
    mm_timing_format(&res[2].timing, table, sizeof table);
    MM_EXPECT(strstr(table, "step cache fbc:1e+30,warmup=2,max-cached=2: 3 of 7 forwards skipped their blocks "
                            "(forwards 3-4, 6)"),
              "the timing table names them:\n%s", table);
    for (int i = 0; i < 3; i++)
        free(rows[i]);

    /* with the reference KV cache, forwards 2.. run another request (the reduced layout): one record */
    mm_engine_destroy(e);
    char key[512];
    snprintf(key, sizeof key, "%s/cache_key.png", dir);
    uint8_t rgb[64 * 64 * 3];
    for (int i = 0; i < (int)sizeof rgb; i++)
        rgb[i] = (uint8_t)(i * 5 + i / 200);
    MM_REQUIRE(mm_image_write(key, rgb, 64, 64, 64 * 3, 0, &err) == 0, "%s", err.msg);
    o.h3.ref_kv_cache = true;
    o.h3.log = on_log;
    MM_REQUIRE(mm_engine_create("h3", &o, &e, &err) == 0, "%s", err.msg);
    mm_gen_request kr = request(out, 13);
    kr.steps = 8;
    kr.n_references = 1;
    kr.references[0] = (mm_reference){MM_REF_IMAGE, key};
    MM_EXPECT(mm_step_cache_parse(specs[2], &kr.cache, &err) == 0, "%s", err.msg);
    memset(&res[0], 0, sizeof res[0]);
    log_text[0] = '\0';
    MM_EXPECT(mm_engine_generate(e, &kr, NULL, &res[0], &err) == 0, "keyframe + reference KV cache: %s", err.msg);
    mm_step_cache_format_skipped(res[0].timing.step_cache.skipped_bits, res[0].timing.step_cache.forwards, list,
                                 sizeof list);
    MM_EXPECT(strstr(log_text, "reference KV cache: forwards 2..") && res[0].timing.step_cache.forwards == 7 &&
                  strcmp(list, "3-4, 6") == 0,
              "with the reference KV cache: %d forwards, skipped %s\n%s", res[0].timing.step_cache.forwards, list,
              log_text);

    mm_gen_request r = request(out, 12);
    r.partition = "ref2va";
    MM_EXPECT(mm_step_cache_parse("teacache", &r.cache, &err) == 0, "%s", err.msg);
    memset(&res[0], 0, sizeof res[0]);
    MM_EXPECT(mm_engine_generate(e, &r, NULL, &res[0], &err) == -1 && strstr(err.msg, "teacache") &&
                  strstr(err.msg, "fl2va model only"),
              "TeaCache on ref2va: %s", err.msg);
    mm_engine_destroy(e);
}

typedef struct preview_watch {
    int n, steps[16], frames, frame_width, frame_height, decoded, sized;
    int last_forward; /* progress seen before each preview */
    bool before_progress;
    uint8_t *first, *last;
    size_t first_size, last_size;
    watch *w;
} preview_watch;

static void on_preview(void *user, const mm_preview *pv)
{
    preview_watch *p = user;
    if (p->n < 16)
        p->steps[p->n] = pv->step;
    p->n++;
    p->before_progress = p->w->last_step == pv->step - 1;
    p->frames = pv->frames;
    p->frame_width = pv->frame_width;
    p->frame_height = pv->frame_height;
    char path[600];
    snprintf(path, sizeof path, "%s/preview.%s", dir, pv->ext);
    mm_error err = {{0}};
    mm_image img;
    if (mm_file_write_atomic(path, pv->data, pv->size, &err) == 0 && mm_image_read(path, NULL, &img, &err) == 0) {
        p->decoded++;
        p->sized += img.width == pv->frames * pv->frame_width && img.height == pv->frame_height;
        mm_image_free(&img);
    }
    uint8_t **keep = p->first ? &p->last : &p->first;
    size_t *size = p->first ? &p->last_size : &p->first_size;
    free(*keep);
    *keep = malloc(pv->size);
    if (*keep)
        memcpy(*keep, pv->data, pv->size);
    *size = pv->size;
}

static void on_progress_for_preview(void *user, const mm_progress *p)
{
    on_progress(((preview_watch *)user)->w, p);
}

/* Previews after every forward (or as the interval allows), JPEG strips
 * FFmpeg decodes, each one before that forward's progress; the projection
 * fitted once and cached, a second engine loading it from the cache. */
static void test_previews_follow_the_steps(void)
{
    char out[512], cache[512], cmd[1200];
    snprintf(out, sizeof out, "%s/preview.mp4", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    mm_engine_options o;
    mm_engine_options_defaults(&o);
    char models[512];
    snprintf(models, sizeof models, "%s/models", dir);
    o.h3.checkpoints.models_path = models;
    o.h3.device = "cpu";
    o.h3.log = on_log;
    o.h3.cache_dir = cache;
    mm_engine *e = NULL;
    mm_error err = {{0}};
    MM_REQUIRE(mm_engine_create("h3", &o, &e, &err) == 0, "%s", err.msg);
    watch w = {0};
    preview_watch pw = {.w = &w};
    mm_gen_callbacks cb = {.progress = on_progress_for_preview, .user = &pw, .preview = on_preview};
    mm_gen_request r = request(out, 21);
    r.steps = 4; /* 3 forwards */
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    log_text[0] = '\0';
    MM_REQUIRE(mm_engine_generate(e, &r, &cb, &res, &err) == 0, "%s", err.msg);
    MM_EXPECT(pw.n == 3 && pw.steps[0] == 1 && pw.steps[2] == 3, "one preview per forward: %d (%d..%d)", pw.n,
              pw.steps[0], pw.steps[2]);
    MM_EXPECT(pw.before_progress, "a forward's preview comes before its progress");
    MM_EXPECT(pw.decoded == 3 && pw.sized == 3, "FFmpeg decodes each as a strip of its stated size: %d, %d",
              pw.decoded, pw.sized);
    MM_EXPECT(pw.frames == 7 && pw.frame_width == 256 && pw.frame_height == 256,
              "22 frames = 7 latent frames of 256x256: %d of %dx%d", pw.frames, pw.frame_width, pw.frame_height);
    MM_EXPECT(pw.first && pw.last && (pw.first_size != pw.last_size || memcmp(pw.first, pw.last, pw.last_size) != 0),
              "the estimate changes between the first and the last forward");
    MM_EXPECT(strstr(log_text, "previews: projection fitted"), "fitted on first use:\n%s", log_text);
    char table[4096];
    res.timing.wall = res.total_seconds;
    mm_timing_format(&res.timing, table, sizeof table);
    MM_EXPECT(strstr(table, "live previews") && strstr(table, "preview projection (once per VAE)"),
              "their time and the fit's have rows of their own:\n%s", table);
    snprintf(cmd, sizeof cmd, "ls '%s'/preview-*.txt >/dev/null 2>&1", cache);
    MM_EXPECT(system(cmd) == 0, "the projection is cached in %s", cache);

    /* an interval longer than the job: the first forward's preview only */
    memset(&w, 0, sizeof w);
    pw.n = 0;
    cb.preview_interval_ms = 3600000;
    log_text[0] = '\0';
    MM_REQUIRE(mm_engine_generate(e, &r, &cb, &res, &err) == 0, "%s", err.msg);
    MM_EXPECT(pw.n == 1 && pw.steps[0] == 1, "rate limited: %d previews", pw.n);
    MM_EXPECT(!strstr(log_text, "previews: projection"), "no second fit:\n%s", log_text);
    mm_engine_destroy(e);

    /* a new process (here: engine) finds the projection in the cache */
    MM_REQUIRE(mm_engine_create("h3", &o, &e, &err) == 0, "%s", err.msg);
    pw.n = 0;
    cb.preview_interval_ms = 0;
    log_text[0] = '\0';
    MM_REQUIRE(mm_engine_generate(e, &r, &cb, &res, &err) == 0, "%s", err.msg);
    MM_EXPECT(pw.n == 3 && strstr(log_text, "previews: projection from") && !strstr(log_text, "fitted"),
              "loaded from the cache: %d previews\n%s", pw.n, log_text);
    mm_engine_destroy(e);
    free(pw.first);
    free(pw.last);
}

int main(void)
{
    mm_media_set_verbose(0);
    const char *b = getenv("MMH3_BUILD");
    snprintf(gen, sizeof gen, "%s/mmh3-gen-tiny", b ? b : ".");
    if (access(gen, X_OK) != 0) {
        printf("FAIL setup: %s not built\n", gen);
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/mmh3-test-engine-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' all --out '%s/models' >/dev/null", gen, dir);
    if (system(cmd) != 0) {
        printf("FAIL setup: %s\n", cmd);
        return 1;
    }
    char models[512];
    snprintf(models, sizeof models, "%s/models", dir);
    mm_engine_options o;
    mm_engine_options_defaults(&o);
    o.h3.checkpoints.models_path = models;
    o.h3.device = "cpu";
    o.h3.log = on_log;
    mm_error err = {{0}};
    if (mm_engine_create("h3", &o, &engine, &err) != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    MM_RUN(test_status_before_and_after_load);
    MM_RUN(test_resident_jobs_report_stages_and_reuse_references);
    MM_RUN(test_failed_job_then_next_one_succeeds);
    MM_RUN(test_writer_failure_fails_the_job_cleanly);
    MM_RUN(test_sparse_job_reports_density_per_step);
    MM_RUN(test_cancel_stops_at_the_next_forward);
    MM_RUN(test_step_cache_through_the_pipeline);
    MM_RUN(test_previews_follow_the_steps);
    mm_engine_destroy(engine);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", dir);
    return mm_test_exit();
}
