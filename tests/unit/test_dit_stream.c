/* Streamed DiT blocks on the CPU, through the same code path a GPU runs
 * (the plan, the upload queue, the per-block swaps into two slots): on a
 * generated 12-block model the streamed forwards equal the resident ones bit
 * for bit, forward after forward (the prefetch wraps into the next forward);
 * the header's sizes are what the loader allocates; and under a simulated
 * device of the plan's budget the streamed model runs with its peak under
 * the budget, where the resident one runs out of memory. */
#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include "backend/device.h"
#include "backend/memplan.h"
#include "backend/ops.h"
#include "model/dit/dit.h"
#include "test.h"
#include "test_sampler_kit.h"

#define LAYERS 12
#define FORWARDS 2

static json_t *manifest;
static mm_safetensors *cases;
static mm_ctx *ctx;
static char model[1024];
static kit_forward_case fc;

/* FORWARDS forwards of the case (timesteps moving as a sampler's do);
 * returns their velocities one after another (malloc'ed), or NULL. */
static float *run(mm_dit *dit, mm_error *err)
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    const int64_t nv = fc.l.video_rows * c->video_row_width, na = fc.l.audio_rows * c->audio_row_width;
    float *out = calloc((size_t)((nv + na) * FORWARDS), sizeof(float));
    float *row_t = malloc(sizeof(float) * (size_t)fc.l.rows);
    mm_dit_request *req = NULL;
    if (!out || !row_t || mm_dit_request_begin(dit, ctx, &fc.l, &fc.text, NULL, &req, err) != 0) {
        free(out);
        free(row_t);
        return NULL;
    }
    for (int k = 0; k < FORWARDS; k++) {
        for (int64_t i = 0; i < fc.l.rows; i++)
            row_t[i] = fc.row_t[i] * (1.0f - 0.25f * (float)k);
        float *o = out + k * (nv + na);
        mm_tensor vv = mm_tensor_wrap(o, mm_cpu(), MM_F32, 2, (int64_t[]){fc.l.video_rows, c->video_row_width});
        mm_tensor va = mm_tensor_wrap(o + nv, mm_cpu(), MM_F32, 2, (int64_t[]){fc.l.audio_rows, c->audio_row_width});
        if (mm_dit_forward(req, row_t, &fc.video, &fc.audio, &vv, &va, err) != 0) {
            free(out);
            out = NULL;
            break;
        }
    }
    mm_dit_request_end(req);
    free(row_t);
    return out;
}

static size_t outputs(void)
{
    return (size_t)((fc.l.video_rows * 96 + fc.l.audio_rows * 32) * FORWARDS) * sizeof(float);
}

static void test_streamed_equals_resident(void)
{
    mm_error err = {{0}};
    mm_dit *dit = NULL;
    MM_REQUIRE(mm_dit_load(&dit, model, ctx, NULL, &err) == 0, "%s", err.msg);
    float *ref = run(dit, &err);
    mm_dit_free(dit);
    MM_REQUIRE(ref, "resident: %s", err.msg);
    /* Every streamed set the planner could pick and a few it would not (one,
     * two, adjacent, all but block 0). */
    static const char *const sets[] = {"010110101101", "000001000000", "011111111111", "001000000001"};
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
        bool stream[LAYERS];
        for (int b = 0; b < LAYERS; b++)
            stream[b] = sets[k][b] == '1';
        mm_dit_residency res = {.stream = stream, .n = LAYERS, .own_cpu_weights = k % 2 == 0};
        MM_REQUIRE(mm_dit_load_ex(&dit, model, ctx, NULL, &res, &err) == 0, "%s: %s", sets[k], err.msg);
        int n = 0;
        for (int b = 0; b < LAYERS; b++)
            n += stream[b];
        MM_EXPECT(mm_dit_streamed_blocks(dit) == n, "%s: %d streamed", sets[k], mm_dit_streamed_blocks(dit));
        float *got = run(dit, &err);
        mm_dit_free(dit);
        MM_REQUIRE(got, "streamed %s: %s", sets[k], err.msg);
        MM_EXPECT(memcmp(got, ref, outputs()) == 0, "streamed %s: the velocities differ from the resident ones",
                  sets[k]);
        free(got);
    }
    bool bad[LAYERS] = {true};
    mm_dit_residency res = {.stream = bad, .n = LAYERS};
    MM_EXPECT(mm_dit_load_ex(&dit, model, ctx, NULL, &res, &err) != 0 && strstr(err.msg, "block 0"), "%s", err.msg);
    free(ref);
}

/* The plan's inputs from the header and the request estimate, against
 * what the loader and a request allocate on the simulated device. */
static void sizes(mm_memplan_sizes *s, mm_dit_config *cfg)
{
    mm_error err = {{0}};
    memset(s, 0, sizeof *s);
    MM_REQUIRE(mm_dit_file_sizes(model, &s->dit_fixed, s->dit_block, MM_MEMPLAN_MAX_BLOCKS, cfg, &err) == 0, "%s",
               err.msg);
    s->dit_blocks = cfg->layers;
    s->dit_work = mm_dit_request_bytes_for(cfg, fc.l.rows, fc.l.text_rows, false);
}

static size_t in_use(void)
{
    mm_memory_stats st;
    mm_device_memory_stats(mm_cpu(), &st);
    return st.in_use;
}

static void test_sizes_are_what_loads(void)
{
    mm_memplan_sizes s;
    mm_dit_config cfg;
    sizes(&s, &cfg);
    MM_REQUIRE(cfg.layers == LAYERS, "%d layers", cfg.layers);
    uint64_t all = s.dit_fixed;
    for (int b = 0; b < LAYERS; b++)
        all += s.dit_block[b];
    mm_error err = {{0}};
    mm_device_simulate_cpu((size_t)1 << 40); /* accounted as a GPU's allocator would */
    size_t before = in_use();
    mm_dit *dit = NULL;
    mm_dit_residency res = {.own_cpu_weights = true};
    MM_REQUIRE(mm_dit_load_ex(&dit, model, ctx, NULL, &res, &err) == 0, "%s", err.msg);
    size_t loaded = in_use() - before;
    MM_EXPECT(loaded == all && mm_dit_weight_bytes(dit) == all, "resident: header says %llu, %zu allocated, %zu counted",
              (unsigned long long)all, loaded, mm_dit_weight_bytes(dit));
    mm_dit_request *req = NULL;
    size_t pre = in_use();
    MM_REQUIRE(mm_dit_request_begin(dit, ctx, &fc.l, &fc.text, NULL, &req, &err) == 0, "%s", err.msg);
    size_t work = in_use() - pre;
    MM_EXPECT(work <= s.dit_work && s.dit_work - work <= ((size_t)2 << 20) + 4096,
              "request: estimated %llu, allocated %zu", (unsigned long long)s.dit_work, work);
    mm_dit_request_end(req);
    mm_dit_free(dit);
    bool stream[LAYERS] = {false, true, true, false, true, true, false, true, false, true, true, true};
    res.stream = stream;
    res.n = LAYERS;
    MM_REQUIRE(mm_dit_load_ex(&dit, model, ctx, NULL, &res, &err) == 0, "%s", err.msg);
    uint64_t want = s.dit_fixed, slot = 0;
    for (int b = 0; b < LAYERS; b++) {
        if (stream[b])
            slot = s.dit_block[b] > slot ? s.dit_block[b] : slot;
        else
            want += s.dit_block[b];
    }
    /* Each slot is one allocation of the packed block: at most the plan's
     * slot (the block's per-tensor sizes + one allocator rounding). */
    size_t streamed = in_use() - before;
    MM_EXPECT(streamed <= want + 2 * (slot + MM_MEMPLAN_SLOT_ROUNDING) && streamed >= want + 2 * slot / 2,
              "streamed: plan %llu, allocated %zu", (unsigned long long)(want + 2 * slot), streamed);
    mm_dit_free(dit);
    MM_EXPECT(in_use() == before, "everything freed: %zu left", in_use() - before);
    mm_device_simulate_cpu(0);
}

/* The planner's choice on a device too small for the resident model. */
static void test_plan_runs_under_its_budget(void)
{
    mm_memplan_sizes s;
    mm_dit_config cfg;
    sizes(&s, &cfg);
    uint64_t all = s.dit_fixed;
    for (int b = 0; b < LAYERS; b++)
        all += s.dit_block[b];
    /* Room for the request and the fixed part, block 0, two slots and one
     * more block: the plan must stream most blocks. */
    mm_memplan_in in = {.n_gpus = 1, .s = s};
    in.budget = s.dit_fixed + s.dit_work + s.dit_block[0] + s.dit_block[1] + 2 * (s.dit_block[1] + MM_MEMPLAN_SLOT_ROUNDING);
    in.gpu_total[0] = in.budget;
    mm_memplan plan;
    mm_error err = {{0}};
    MM_REQUIRE(mm_memplan_choose(&in, &plan, NULL, &err) == 0, "%s", err.msg);
    MM_REQUIRE(plan.streamed >= 3, "%d streamed: %s", plan.streamed, plan.summary);
    printf("     %s\n", plan.summary);
    const size_t device = (size_t)in.budget;
    size_t base = in_use();
    mm_device_simulate_cpu(base + device);
    mm_device_reset_peak(mm_cpu());
    mm_dit *dit = NULL;
    mm_dit_residency res = {.stream = plan.stream, .n = LAYERS, .own_cpu_weights = true};
    MM_REQUIRE(mm_dit_load_ex(&dit, model, ctx, NULL, &res, &err) == 0, "%s", err.msg);
    float *got = run(dit, &err);
    mm_dit_free(dit);
    MM_EXPECT(got, "streamed under the simulated device: %s", err.msg);
    mm_memory_stats st;
    mm_device_memory_stats(mm_cpu(), &st);
    MM_EXPECT(st.peak - base <= device, "peak %zu over the simulated device of %zu", st.peak - base, device);
    printf("     budget %.1f KiB (model %.1f KiB resident): peak %.1f KiB, the plan's %.1f KiB\n", in.budget / 1024.0,
           all / 1024.0, (st.peak - base) / 1024.0, plan.peak_denoise / 1024.0);
    free(got);
    res.stream = NULL;
    int rc = mm_dit_load_ex(&dit, model, ctx, NULL, &res, &err);
    if (rc == 0) {
        got = run(dit, &err);
        MM_EXPECT(!got, "the resident model ran within a device the plan had to stream for");
        free(got);
        mm_dit_free(dit);
    }
    MM_EXPECT(strstr(err.msg, "simulated device"), "the resident model fails for want of memory: %s", err.msg);
    mm_device_simulate_cpu(0);
}

int main(void)
{
    const char *b = getenv("MMH3_BUILD");
    char gen[1200], cmd[3000], path[1024];
    snprintf(gen, sizeof gen, "%s/mmh3-gen-tiny", b ? b : ".");
    snprintf(model, sizeof model, "%s/mmh3-stream-%d.safetensors", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    snprintf(cmd, sizeof cmd, "MMH3_THREADS=2 '%s' dit --layers %d --text-dim 64 --seed 11 --out '%s' >/dev/null", gen,
             LAYERS, model);
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    json_error_t jerr;
    manifest = json_load_file(path, 0, &jerr);
    cases = kit_open("cases.safetensors");
    mm_error err = {{0}};
    if (access(gen, X_OK) != 0 || system(cmd) != 0 || !manifest || !cases ||
        kit_forward_case_load(&fc, manifest, cases, "fl2va_first_step2") != 0 ||
        mm_ctx_create(&ctx, mm_cpu(), 2, &err) != 0) {
        printf("FAIL setup: %s (the generator %s is built with the tests; MMH3_BUILD names the build folder)\n",
               manifest ? err.msg : jerr.text, gen);
        return 1;
    }
    MM_RUN(test_streamed_equals_resident);
    MM_RUN(test_sizes_are_what_loads);
    MM_RUN(test_plan_runs_under_its_budget);
    kit_forward_case_free(&fc);
    mm_ctx_destroy(ctx);
    mm_st_close(cases);
    json_decref(manifest);
    unlink(model);
    return mm_test_exit();
}
