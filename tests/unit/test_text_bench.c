/* bench/bench_text_encoder, the program the GPU run depends on: its random
 * checkpoint has exactly the kit's (= the release's) layout when sized from
 * the kit's config, the real loader takes it, and the timing mode runs. */
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "text_kit.h"

static text_kit kit;
static char dir[256], cfg[300], ckpt[300], ip[300], vp[300];

static int run(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_generated_layout_matches_the_kit(void)
{
    const char *build = getenv("MMH3_BUILD") ? getenv("MMH3_BUILD") : "build";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/bench/bench_text_encoder --generate %s --config %s --layers %lld >%s/gen.log 2>&1",
             build, ckpt, cfg,
             (long long)json_integer_value(json_object_get(json_object_get(json_object_get(kit.manifest, "config"), "text"), "tap")),
             dir);
    MM_REQUIRE(run(cmd) == 0, "generate failed: %s", cmd);
    mm_safetensors *a, *b;
    mm_error err = {{0}};
    char kitfile[1200];
    snprintf(kitfile, sizeof kitfile, "%s/text_encoder.safetensors", kit.dir);
    TK_OK(mm_st_open(&a, ckpt, &err), "%s", err.msg);
    TK_OK(mm_st_open(&b, kitfile, &err), "%s", err.msg);
    MM_EXPECT(mm_st_count(a) == mm_st_count(b), "%zu tensors, the kit has %zu", mm_st_count(a), mm_st_count(b));
    for (size_t i = 0; i < mm_st_count(b); i++) {
        const mm_st_entry *r = mm_st_at(b, i), *g = mm_st_find(a, r->name);
        MM_REQUIRE(g, "%s missing from the generated file", r->name);
        int same = g->dtype == r->dtype && g->ndim == r->ndim;
        for (int d = 0; same && d < r->ndim; d++)
            same = g->shape[d] == r->shape[d];
        MM_REQUIRE(same, "%s: dtype/shape differ from the kit", r->name);
    }
    mm_st_close(a);
    mm_st_close(b);
    /* The timing mode loads it with the real loader and encodes both cases. */
    snprintf(cmd, sizeof cmd,
             "%s/bench/bench_text_encoder --checkpoint %s --config %s --image-proc %s --video-proc %s --device cpu "
             "--reps 1 --prompt-tokens 20 --keyframe 64x64 >%s/bench.log 2>&1",
             build, ckpt, cfg, ip, vp, dir);
    MM_EXPECT(run(cmd) == 0, "bench failed (see %s/bench.log)", dir);
    snprintf(cmd, sizeof cmd, "grep -q '^TE_BENCH t2va_prompt .*rows *20 ' %s/bench.log && grep -q '^TE_BENCH fl2va_keyframe' %s/bench.log", dir, dir);
    MM_EXPECT(run(cmd) == 0, "TE_BENCH lines missing from %s/bench.log", dir);
}

static int dump(const char *path, const json_t *j)
{
    return json_dump_file(j, path, 0);
}

int main(void)
{
    if (text_kit_open(&kit) < 0)
        return 1;
    snprintf(dir, sizeof dir, "%s/mmh3-te-bench-%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(ckpt, sizeof ckpt, "%s/te.safetensors", dir);
    snprintf(ip, sizeof ip, "%s/ip.json", dir);
    snprintf(vp, sizeof vp, "%s/vp.json", dir);
    const json_t *pc = json_object_get(kit.manifest, "processor_config");
    if (mkdir(dir, 0700) != 0 || dump(cfg, json_object_get(kit.manifest, "hf_config")) != 0 ||
        dump(ip, json_object_get(pc, "image")) != 0 || dump(vp, json_object_get(pc, "video")) != 0) {
        printf("FAIL setup: %s\n", dir);
        return 1;
    }
    MM_RUN(test_generated_layout_matches_the_kit);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    run(cmd);
    text_kit_close(&kit);
    return mm_test_exit();
}
