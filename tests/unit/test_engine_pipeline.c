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
    mm_engine_destroy(engine);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", dir);
    return mm_test_exit();
}
