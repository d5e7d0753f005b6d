/* `mmh3 check` end to end: on files written by mmh3-gen-tiny it passes and
 * describes them; each kind of broken or wrong file makes it fail with a
 * line that names the problem (non-pruned DiT, bf16 export, truncated file,
 * wrong variant lying where the file should be, mismatched parts). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "io/download.h"
#include "io/safetensors.h"
#include "backend/device.h"
#include "test.h"

static char dir[256], mmh3[512], gen[512], cfg[512], out_path[600];

/* Runs mmh3 check with MODELS_PATH=models and extra args; output in out_path. */
static int check(const char *models, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "MODELS_PATH='%s' HF_HUB_CACHE=/nonexistent '%s' check --config-path '%s' %s >'%s' 2>&1",
             models, mmh3, cfg, args, out_path);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *output(void)
{
    static char buf[1 << 16];
    FILE *f = fopen(out_path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return buf;
}

/* Copies src to dst, passing each tensor through edit (may rename, change
 * dtype, or drop by returning false). */
typedef bool (*edit_fn)(const mm_st_entry *e, char *name, mm_dtype *dt);

static int rewrite(const char *src, const char *dst, edit_fn edit)
{
    mm_error err = {{0}};
    mm_safetensors *st;
    if (mm_st_open(&st, src, &err) != 0 || mm_make_parent_dirs(dst, &err) != 0)
        return -1;
    size_t n = mm_st_count(st), k = 0;
    char (*names)[192] = calloc(n, sizeof *names);
    const char **np = calloc(n, sizeof *np);
    mm_tensor *ts = calloc(n, sizeof *ts);
    for (size_t i = 0; i < n; i++) {
        const mm_st_entry *e = mm_st_at(st, i);
        mm_dtype dt = e->dtype;
        snprintf(names[k], sizeof names[k], "%s", e->name);
        if (!edit(e, names[k], &dt))
            continue;
        if (dt != e->dtype) { /* a same-sized re-typed tensor: byte-compatible is enough for header checks */
            mm_tensor t;
            mm_tensor_zeros(&t, mm_cpu(), dt, e->ndim, e->shape, &err);
            ts[k] = t;
        } else {
            ts[k] = mm_tensor_wrap((void *)e->data, mm_cpu(), e->dtype, e->ndim, e->shape);
        }
        np[k] = names[k];
        k++;
    }
    int rc = mm_st_save(dst, k, np, ts, &err);
    for (size_t i = 0; i < k; i++)
        mm_tensor_free(&ts[i]);
    free(names);
    free(np);
    free(ts);
    mm_st_close(st);
    return rc;
}

static bool drop_table(const mm_st_entry *e, char *name, mm_dtype *dt)
{
    (void)dt;
    if (strcmp(e->name, "adaln_t_table") == 0)
        snprintf(name, 192, "time_embedder.proj_in.weight");
    return true;
}

static bool qkv_bf16(const mm_st_entry *e, char *name, mm_dtype *dt)
{
    (void)name;
    if (strcmp(e->name, "blocks.0.attn.qkv_proj.weight") == 0)
        *dt = MM_BF16;
    return true;
}

static bool with_prefix(const mm_st_entry *e, char *name, mm_dtype *dt)
{
    (void)dt;
    snprintf(name, 192, "model.diffusion_model.%s", e->name);
    return true;
}

static void test_generated_files_pass(void)
{
    char models[400];
    snprintf(models, sizeof models, "%s/m", dir);
    MM_REQUIRE(check(models, "") == 0, "check passes:\n%s", output());
    char *o = output();
    MM_EXPECT(strstr(o, "check passed") && strstr(o, "2 blocks + 2 refiner, hidden 256") &&
                  strstr(o, "4 layers nvfp4 AWQ") && strstr(o, "dit=cpu"),
              "report:\n%s", o);
    MM_REQUIRE(check(models, "--json") == 0, "json run");
    json_error_t je;
    json_t *j = json_loads(output(), 0, &je);
    MM_REQUIRE(j, "JSON output: %s", je.text);
    MM_EXPECT(json_is_true(json_object_get(j, "ok")), "ok true");
    json_t *d = json_object_get(json_object_get(j, "files"), "dit_fl2va");
    MM_EXPECT(json_integer_value(json_object_get(d, "tensors")) == 68 &&
                  strcmp(json_string_value(json_object_get(d, "source")), "$MODELS_PATH") == 0,
              "dit_fl2va entry");
    json_decref(j);
    /* the ComfyUI export prefix is stripped */
    char p[600], src[600];
    snprintf(src, sizeof src, "%s/m/%s", dir, mm_component_get(MM_COMP_DIT_FL2VA)->rel_path);
    snprintf(p, sizeof p, "%s/prefixed.safetensors", dir);
    MM_REQUIRE(rewrite(src, p, with_prefix) == 0, "rewrite");
    char args[700];
    snprintf(args, sizeof args, "--dit-path '%s'", p);
    MM_EXPECT(check(models, args) == 0, "model.diffusion_model. prefix accepted:\n%s", output());
}

static void test_wrong_files_fail_loudly(void)
{
    char models[400], p[600], src[600], args[700];
    snprintf(models, sizeof models, "%s/m", dir);
    snprintf(src, sizeof src, "%s/m/%s", dir, mm_component_get(MM_COMP_DIT_FL2VA)->rel_path);

    snprintf(p, sizeof p, "%s/nonpruned.safetensors", dir);
    MM_REQUIRE(rewrite(src, p, drop_table) == 0, "rewrite");
    snprintf(args, sizeof args, "--dit-path '%s'", p);
    MM_EXPECT(check(models, args) == 1 && strstr(output(), "non-pruned DiT"), "non-pruned:\n%s", output());

    snprintf(p, sizeof p, "%s/bf16.safetensors", dir);
    MM_REQUIRE(rewrite(src, p, qkv_bf16) == 0, "rewrite");
    snprintf(args, sizeof args, "--dit-path '%s'", p);
    MM_EXPECT(check(models, args) == 1 && strstr(output(), "bf16 export"), "bf16:\n%s", output());

    /* truncated: the error names the file and the tensor that runs past the end */
    snprintf(p, sizeof p, "%s/trunc.safetensors", dir);
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "head -c 3000000 '%s' > '%s'", src, p);
    MM_REQUIRE(system(cmd) == 0, "truncate");
    snprintf(args, sizeof args, "--dit-path '%s'", p);
    MM_EXPECT(check(models, args) == 1 && strstr(output(), "trunc.safetensors") && strstr(output(), "truncated?") &&
                  strstr(output(), "tensor '"),
              "truncated:\n%s", output());

    /* nothing at the expected place, a non-pruned file next to it */
    char m2[400];
    snprintf(m2, sizeof m2, "%s/m2", dir);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && mv '%s/diffusion_models/minimax_h3_fl2va_pruned_int8_convrot.safetensors' "
                              "'%s/diffusion_models/minimax_h3_fl2va_int8_convrot.safetensors'",
             models, m2, m2, m2);
    MM_REQUIRE(system(cmd) == 0, "copy");
    MM_EXPECT(check(m2, "") == 1 && strstr(output(), "minimax_h3_fl2va_int8_convrot.safetensors (the non-pruned DiT"),
              "wrong variant named:\n%s", output());
    /* ... but ref2va is fine without an fl2va DiT */
    MM_EXPECT(check(m2, "--partition ref2va") == 0, "ref2va alone:\n%s", output());

    /* parts of different models: the kit DiT reads 64-wide text, the generated encoder is 256 wide */
    const char *data = mm_test_data_dir();
    snprintf(args, sizeof args, "--dit-path '%s/dit/dit.safetensors'", data);
    if (access(data, F_OK) == 0)
        MM_EXPECT(check(models, args) == 1 && strstr(output(), "files of different models"), "mismatch:\n%s",
                  output());
    MM_EXPECT(check(models, "--device cuda:1") == 1 && strstr(output(), "cuda:1"), "bad device:\n%s", output());
    MM_EXPECT(check(models, "--bogus") == 2, "unknown option");
}

/* The memory plan: on a host without a GPU, --vram-budget plans for one
 * GPU of that size (--gpus N: N of them); a budget no plan fits fails the check with the smallest
 * one that works, which then passes; a malformed budget is refused. */
static void test_memory_plan(void)
{
    char models[400];
    snprintf(models, sizeof models, "%s/m", dir);
    if (mm_cuda_device_count() > 0)
        MM_SKIP("the plan below is for a host without a GPU");
    MM_REQUIRE(check(models, "") == 0, "no budget: %s", output());
    MM_EXPECT(strstr(output(), "memory plan") && strstr(output(), "no GPU"), "%s", output());
    MM_REQUIRE(check(models, "--vram-budget 40") == 0, "40 GiB: %s", output());
    MM_EXPECT(strstr(output(), "for one GPU of the budget") && strstr(output(), "resident: budget 40.0 GiB"), "%s",
              output());
    MM_EXPECT(check(models, "--vram-budget 0.5") == 1, "0.5 GiB is too small for the VAE decode");
    char *o = output(), *hint = strstr(o, "--vram-budget ");
    MM_REQUIRE(strstr(o, "FAIL") && strstr(o, "cannot work") && hint, "%s", o);
    char args[64];
    snprintf(args, sizeof args, "--vram-budget %g", strtod(hint + strlen("--vram-budget "), NULL));
    MM_EXPECT(check(models, args) == 0, "the budget named (%s) passes: %s", args, output());
    MM_EXPECT(check(models, "--vram-budget lots") == 1 && strstr(output(), "accepted"), "%s", output());
    /* --gpus N: the sequence-parallel plan, each GPU with a DiT replica and its rows. */
    MM_REQUIRE(check(models, "--vram-budget 40 --gpus 2") == 0, "2 GPUs: %s", output());
    MM_EXPECT(strstr(output(), "for 2 GPUs of the budget") && strstr(output(), "sequence parallel over 2 GPUs"),
              "%s", output());
    MM_EXPECT(check(models, "--vram-budget 40 --gpus 0") == 2, "--gpus 0 is refused");
}

int main(void)
{
    const char *b = getenv("MMH3_BUILD"), *src = getenv("MMH3_SRC");
    snprintf(mmh3, sizeof mmh3, "%s/mmh3", b ? b : ".");
    snprintf(gen, sizeof gen, "%s/mmh3-gen-tiny", b ? b : ".");
    snprintf(dir, sizeof dir, "/tmp/mmh3-test-check-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    snprintf(out_path, sizeof out_path, "%s/out.txt", dir);
    /* the config folder: the release's own when present, else empty stand-ins */
    snprintf(cfg, sizeof cfg, "%s/cfg", dir);
    for (int i = 0; mm_config_files[i]; i++) {
        char p[700];
        mm_error err = {{0}};
        snprintf(p, sizeof p, "%s/%s", cfg, mm_config_files[i]);
        mm_make_parent_dirs(p, &err);
        FILE *f = fopen(p, "w");
        if (f) {
            fputs("{}\n", f);
            fclose(f);
        }
    }
    (void)src;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' all --out '%s/m' >/dev/null", gen, dir);
    if (system(cmd) != 0) {
        printf("FAIL setup: %s failed\n", gen);
        return 1;
    }
    MM_RUN(test_generated_files_pass);
    MM_RUN(test_wrong_files_fail_loudly);
    MM_RUN(test_memory_plan);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", dir);
    return mm_test_exit();
}
