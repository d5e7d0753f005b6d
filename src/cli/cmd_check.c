/* mmh3 check — resolves the model files, checks their headers against what
 * the model needs (no weight is read), reports the GPUs, the kernels and the
 * placement the engine would choose. Milliseconds; exit status 1 and one
 * FAIL line per problem when anything is wrong. */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/device.h"
#include "backend/fused.h"
#include "backend/gpu.h"
#include "backend/kernel_policy.h"
#include "backend/placement.h"
#include "parallel/nccl_lib.h"
#include "parallel/transfer.h"
#include "cli/check_loras.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/clock.h"
#include "engine/memory_plan.h"
#include "io/checkpoint.h"
#include "io/inspect.h"
#include "io/safetensors.h"
#include "model/dit/config.h"
#include "request/rules.h"

typedef struct file_result {
    bool found, ok, optional;
    mm_resolved where;
    mm_inspect_report rep;
    char msg[MM_ERROR_MAX];
} file_result;

static void gib(char *buf, size_t n, uint64_t b)
{
    if (b >= (1ull << 30))
        snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else
        snprintf(buf, n, "%.1f MiB", b / 1048576.0);
}

/* The found DiT's configuration, for checking the adapters against it. */
static bool dit_config(const char *path, mm_dit_config *cfg)
{
    mm_safetensors *st;
    if (mm_st_open(&st, path, NULL) != 0)
        return false;
    bool ok = mm_st_strip_prefix(st, "model.diffusion_model.", NULL, NULL) == 0 &&
              mm_dit_config_read(st, NULL, cfg, NULL) == 0;
    mm_st_close(st);
    return ok;
}

static void progress(void *user, const char *what, uint64_t have, uint64_t total)
{
    (void)user;
    fprintf(stderr, "\rdownloading %s: %.1f / %.1f MB", what, have / 1e6, total / 1e6);
    if (total && have == total)
        fprintf(stderr, "\n");
}

/* What the flags say. */
typedef struct check_args {
    mm_checkpoint_opts o;
    const char *partition, *device, *te_device, *dit_path, *vram_budget;
    int gpus; /* --gpus N: plan the DiT sequence-parallel over N GPUs */
    bool json;
} check_args;

static mm_flags_result parse_flags(check_args *a, int argc, char **argv)
{
    const char **override = a->o.override;
    const mm_flag rows[] = {
        {"--partition", NULL, MM_FLAG_CHOICE, &a->partition,
         "the DiT generate will use (default fl2va; the other one is optional)", .arg = "fl2va|ref2va",
         .choices = "fl2va ref2va"},
        {"--dit-path", NULL, MM_FLAG_STRING, &a->dit_path, "that partition's DiT", .arg = "PATH"},
        {"--dit-fl2va-path", NULL, MM_FLAG_STRING, &override[MM_COMP_DIT_FL2VA],
         "the fl2va DiT (as for generate; the messages name them)", .arg = "PATH"},
        {"--dit-ref2va-path", NULL, MM_FLAG_STRING, &override[MM_COMP_DIT_REF2VA], "the ref2va DiT", .arg = "PATH"},
        {"--text-encoder-path", NULL, MM_FLAG_STRING, &override[MM_COMP_TEXT_ENCODER], "the text encoder",
         .arg = "PATH"},
        {"--video-vae-path", NULL, MM_FLAG_STRING, &override[MM_COMP_VIDEO_VAE], "the video VAE", .arg = "PATH"},
        {"--audio-vae-path", NULL, MM_FLAG_STRING, &override[MM_COMP_AUDIO_VAE], "the audio VAE", .arg = "PATH"},
        {"--config-path", NULL, MM_FLAG_STRING, &override[MM_COMP_CONFIG],
         "MiniMaxAI/MiniMax-H3 FL2VA folder (tokenizer, processor, text_encoder config)", .arg = "DIR"},
        {"--models-path", NULL, MM_FLAG_STRING, &a->o.models_path,
         "instead of $MODELS_PATH (default /data/shared/models)", .arg = "DIR"},
        {"--allow-download", NULL, MM_FLAG_TRUE, &a->o.allow_download,
         .help = "fetch missing files from the Hugging Face hub"},
        {"--device", NULL, MM_FLAG_STRING, &a->device, "as for generate", .arg = "auto|cpu|cuda:N"},
        {"--te-device", NULL, MM_FLAG_STRING, &a->te_device, "as for generate", .arg = "auto|cpu|cuda:N"},
        {"--vram-budget", NULL, MM_FLAG_STRING, &a->vram_budget,
         "device memory per GPU the plan may use (default: free minus 1.5 GiB; without a GPU: plan for one such GPU)",
         .arg = "GiB"},
        {"--gpus", NULL, MM_FLAG_INT, &a->gpus,
         "plan the DiT sequence-parallel over N GPUs, as generate --gpus N (without GPUs: N of the budget)",
         .arg = "N", .min = 1, .max = 64, .accepted = "1..64 GPUs dividing the DiT's head count (H3: 1, 2, 4, 7, 8)"},
        {"--json", NULL, MM_FLAG_TRUE, &a->json, .help = "one JSON object on stdout instead of the report"},
        {"--help", "-h", MM_FLAG_HELP, NULL, .help = "this text"},
    };
    const mm_flags_cmd cmd = {
        .prog = "mmh3 check",
        .synopsis = "usage: mmh3 check [options]\n"
                    "\n"
                    "Finds the MiniMax-H3 files, checks their headers (tensor names, dtypes, shapes), reports the "
                    "GPUs and\nthe placement the engine would choose. Reads no weights; exits 1 on any problem.\n"
                    "\n",
        .rows = rows,
        .n_rows = MM_FLAGS_COUNT(rows),
        .help_column = 32,
    };
    return mm_flags_parse(&cmd, argc, argv);
}

/* Everything check found, for either report. */
typedef struct check_report {
    mm_component used; /* the DiT of --partition */
    file_result res[MM_COMP_COUNT];
    char consistency[512];
    int failures;
    int n_gpus, n_lines;
    char gpu_lines[16][300];
    mm_placement pl;
    bool placed;
    mm_error perr;
    bool kernels_ok;
    char kernels[512], paths[1024];
    const mm_kernel_policy *policy; /* the process's kernel policy */
    char policy_line[256];
    char peer[600], nccl[600];
    int peer_failed;
    char plan[800];        /* the memory plan's summary, or why there is none */
    bool plan_failed;
    mm_dit_config dit_cfg; /* the found DiT's, for the adapters' listing */
    bool have_dit_cfg;
    double ms;
} check_report;

/* One file: found where, and its header against what the model needs. */
static void inspect_file(const mm_checkpoint_opts *o, mm_component c, check_report *r)
{
    file_result *f = &r->res[c];
    f->optional = (c == MM_COMP_DIT_FL2VA || c == MM_COMP_DIT_REF2VA) && c != r->used;
    mm_error err = {{0}};
    if (mm_checkpoint_resolve(c, o, &f->where, &err) != 0) {
        snprintf(f->msg, sizeof f->msg, "%s", err.msg);
        r->failures += !f->optional;
        return;
    }
    f->found = true;
    if (c == MM_COMP_CONFIG) {
        f->ok = true;
        return;
    }
    mm_safetensors *st;
    if (mm_st_open(&st, f->where.path, &err) != 0) {
        snprintf(f->msg, sizeof f->msg, "%s", err.msg);
        r->failures++;
        return;
    }
    size_t stripped;
    if (mm_st_strip_prefix(st, "model.diffusion_model.", &stripped, &err) != 0 ||
        mm_inspect(c, st, &f->rep, &err) != 0) {
        snprintf(f->msg, sizeof f->msg, "%s", err.msg);
        r->failures++;
    } else {
        f->ok = true;
    }
    mm_st_close(st);
}

/* The parts must fit together. */
static void check_consistency(check_report *r)
{
    const file_result *dit = &r->res[r->used], *te = &r->res[MM_COMP_TEXT_ENCODER];
    if (dit->ok && te->ok && dit->rep.dims[6] != te->rep.dims[0]) {
        snprintf(r->consistency, sizeof r->consistency,
                 "the DiT reads %lld-wide text features but the text encoder is %lld wide: files of different models",
                 (long long)dit->rep.dims[6], (long long)te->rep.dims[0]);
        r->failures++;
    }
}

/* The GPUs, and the placement the engine would choose for these files. */
static void choose_placement(const check_args *a, check_report *r)
{
    r->n_gpus = mm_cuda_device_count();
    mm_placement_in pin = {.n_gpus = r->n_gpus, .device = a->device, .te_device = a->te_device};
    pin.dit_bytes = r->res[r->used].rep.bytes;
    pin.te_bytes = r->res[MM_COMP_TEXT_ENCODER].rep.bytes;
    pin.vae_bytes = r->res[MM_COMP_VIDEO_VAE].rep.bytes + r->res[MM_COMP_AUDIO_VAE].rep.bytes;
    r->n_lines = r->n_gpus < 16 ? r->n_gpus : 16;
    for (int g = 0; g < r->n_lines; g++) {
        mm_gpu_info info;
        mm_error err = {{0}};
        if (mm_gpu_info_get(g, &info, &err) == 0) {
            pin.gpu_total[g] = info.total_bytes;
            char choice[160];
#ifdef MMH3_CUDA_SM90A
            const bool sm90a = true;
#else
            const bool sm90a = false;
#endif
            mm_kernel_choice_describe(info.cc_major, info.cc_minor, sm90a, mm_kernel_policy_get(), choice,
                                      sizeof choice);
            snprintf(r->gpu_lines[g], sizeof r->gpu_lines[g], "cuda:%d %.80s, %.1f GiB (%.1f free), %d SMs; %.150s", g,
                     info.name, info.total_bytes / 1073741824.0, info.free_bytes / 1073741824.0, info.sm_count, choice);
        } else {
            snprintf(r->gpu_lines[g], sizeof r->gpu_lines[g], "cuda:%d: %.280s", g, err.msg);
            r->failures++;
        }
    }
    r->placed = mm_placement_choose(&pin, &r->pl, &r->perr) == 0;
    r->failures += !r->placed;
}

/* The plan over the GPUs found, or over GPUs of the budget on a host
 * without any; --gpus N: the DiT sequence-parallel over N of them. */
static int plan_for_gpus(const check_args *a, const check_report *r, uint64_t budget, mm_memplan *p,
                         mm_error *err)
{
    const file_result *res = r->res;
    const int sp = a->gpus >= 2 ? a->gpus : 0;
    mm_plan_clip clip = {.sp_ranks = sp};
    mm_memplan_sizes s;
    if (mm_plan_sizes(res[r->used].where.path, res[MM_COMP_TEXT_ENCODER].where.path,
                      res[MM_COMP_VIDEO_VAE].where.path, res[MM_COMP_AUDIO_VAE].where.path, &clip, &s, err) != 0)
        return -1;
    if (!r->n_gpus)
        return mm_memplan_choose(&(mm_memplan_in){.n_gpus = sp ? sp : 1, .sp_ranks = sp, .budget = budget, .s = s},
                                 p, NULL, err);
    if (sp > r->n_gpus)
        return mm_fail(err, "--gpus %d: this host has %d GPUs", sp, r->n_gpus);
    return mm_plan_for_host(sp ? sp : r->n_gpus > 2 ? 2 : r->n_gpus, sp, budget, &s, p, err);
}

/* The memory plan for the default clip (plan_for_gpus), or why there is none. */
static void plan_memory(const check_args *a, check_report *r)
{
    mm_error err = {{0}};
    uint64_t budget = 0;
    mm_memplan p;
    const file_result *res = r->res;
    const bool pinned_cpu = a->device && strcmp(a->device, "cpu") == 0;
    if (a->vram_budget && mm_memplan_parse_budget(a->vram_budget, &budget, &err) != 0) {
        snprintf(r->plan, sizeof r->plan, "%.690s", err.msg);
        r->plan_failed = true;
    } else if (pinned_cpu || (!r->n_gpus && !budget)) {
        snprintf(r->plan, sizeof r->plan, "none: %s", pinned_cpu ? "--device cpu" : "no GPU (--vram-budget GiB plans for one)");
    } else if (!res[r->used].ok || !res[MM_COMP_TEXT_ENCODER].ok || !res[MM_COMP_VIDEO_VAE].ok ||
               !res[MM_COMP_AUDIO_VAE].ok) {
        snprintf(r->plan, sizeof r->plan, "none: a model file is missing (above)");
    } else if (plan_for_gpus(a, r, budget, &p, &err) != 0) {
        snprintf(r->plan, sizeof r->plan, "%.690s", err.msg);
        r->plan_failed = true;
    } else if (r->n_gpus) {
        snprintf(r->plan, sizeof r->plan, "%.760s", p.summary);
    } else {
        char gpus[32] = "one GPU";
        if (a->gpus >= 2)
            snprintf(gpus, sizeof gpus, "%d GPUs", a->gpus);
        snprintf(r->plan, sizeof r->plan, "(no GPU found: for %s of the budget) %.700s", gpus, p.summary);
    }
    r->failures += r->plan_failed;
}

/* The CUDA kernels verified on the devices the placement uses, and which
 * attention and int8 GEMM kernels the DiT's GPU runs (the Hopper ones after
 * their first-use self-checks). */
static void check_kernels(check_report *r)
{
    r->kernels_ok = true;
    const mm_placement *pl = &r->pl;
    bool cuda_used = r->placed && (pl->dit.kind == MM_DEVICE_CUDA || pl->text_encoder.kind == MM_DEVICE_CUDA);
    if (!cuda_used) {
        snprintf(r->kernels, sizeof r->kernels, "CPU backend (built in)");
    } else {
        int devs[2] = {pl->dit.index, pl->text_encoder.index};
        for (int k = 0; k < 2 && r->kernels_ok; k++) {
            if (k == 1 && devs[1] == devs[0])
                break;
            mm_error err = {{0}};
            char summary[256] = "";
            size_t used = strlen(r->kernels);
            if (mm_gpu_check_kernels(devs[k], summary, sizeof summary, &err) != 0) {
                snprintf(r->kernels, sizeof r->kernels, "%.500s", err.msg);
                r->kernels_ok = false;
            } else {
                snprintf(r->kernels + used, sizeof r->kernels - used, "%scuda:%d %s", k ? "; " : "", devs[k], summary);
            }
        }
    }
    r->failures += !r->kernels_ok;
    /* a knob's value the policy did not take is a failure */
    r->policy = mm_kernel_policy_get();
    mm_kernel_policy_describe(r->policy, r->policy_line, sizeof r->policy_line);
    r->failures += r->policy->n_problems;
    if (r->kernels_ok && r->placed && pl->dit.kind == MM_DEVICE_CUDA)
        mm_dit_kernel_paths_describe(pl->dit, r->paths, sizeof r->paths);
}

/* Several GPUs: peer copies checked word by word (some machines return
 * zeros while reporting success; a broken pair is not fatal, transfers
 * between those GPUs are staged through host memory), and NCCL for --gpus N
 * (src/parallel/). */
static void check_multi_gpu(check_report *r)
{
    if (r->n_gpus < 2)
        return;
    r->peer_failed = mm_transfer_probe_all(r->n_gpus, (size_t)16 << 20, NULL, 0, r->peer, sizeof r->peer);
    mm_nccl_describe(r->nccl, sizeof r->nccl);
}

static void print_json(const mm_checkpoint_opts *o, const check_report *r)
{
    json_t *root = json_object(), *files = json_object();
    for (int c = 0; c < MM_COMP_COUNT; c++) {
        const mm_component_info *ci = mm_component_get((mm_component)c);
        const file_result *f = &r->res[c];
        json_t *jf = json_pack("{s:b, s:b, s:b}", "found", f->found, "ok", f->ok, "optional", f->optional);
        if (f->found) {
            json_object_set_new(jf, "path", json_string(f->where.path));
            json_object_set_new(jf, "source", json_string(mm_found_where_name(f->where.where)));
        }
        if (f->ok && c != MM_COMP_CONFIG) {
            json_object_set_new(jf, "bytes", json_integer((json_int_t)f->rep.bytes));
            json_object_set_new(jf, "tensors", json_integer((json_int_t)f->rep.tensors));
            json_object_set_new(jf, "summary", json_string(f->rep.summary));
        }
        if (f->msg[0])
            json_object_set_new(jf, "error", json_string(f->msg));
        json_object_set_new(files, ci->key, jf);
    }
    json_object_set_new(root, "files", files);
    json_t *gpus = json_array();
    for (int g = 0; g < r->n_lines; g++)
        json_array_append_new(gpus, json_string(r->gpu_lines[g]));
    json_object_set_new(root, "gpus", gpus);
    json_object_set_new(root, "placement", json_string(r->placed ? r->pl.summary : r->perr.msg));
    json_object_set_new(root, "kernels", json_string(r->kernels));
    json_object_set_new(root, "kernel_policy", json_string(r->policy_line));
    json_object_set_new(root, "memory_plan", json_string(r->plan));
    json_t *problems = json_array();
    for (int i = 0; i < r->policy->n_problems; i++)
        json_array_append_new(problems, json_string(r->policy->problems[i]));
    json_object_set_new(root, "kernel_policy_problems", problems);
    if (r->paths[0])
        json_object_set_new(root, "kernel_paths", json_string(r->paths));
    if (r->n_gpus >= 2) {
        json_object_set_new(root, "peer_copies", json_string(r->peer));
        json_object_set_new(root, "peer_copies_ok", json_boolean(r->peer_failed == 0));
        json_object_set_new(root, "nccl", json_string(r->nccl));
    }
    if (r->consistency[0])
        json_object_set_new(root, "consistency", json_string(r->consistency));
    mm_check_loras(o->models_path, r->have_dit_cfg ? &r->dit_cfg : NULL, root, NULL);
    json_object_set_new(root, "ok", json_boolean(r->failures == 0));
    json_object_set_new(root, "milliseconds", json_real(r->ms));
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    puts(s ? s : "{}");
    free(s);
    json_decref(root);
}

static void print_files(const mm_checkpoint_opts *o, const check_report *r)
{
    char mp[4096];
    mm_checkpoint_models_path(o, mp, sizeof mp);
    printf("files ($MODELS_PATH = %s)\n", mp);
    for (int c = 0; c < MM_COMP_COUNT; c++) {
        const mm_component_info *ci = mm_component_get((mm_component)c);
        const file_result *f = &r->res[c];
        if (!f->found) {
            printf("  %s  %-14s %s\n", f->optional ? "--  " : "FAIL", ci->title, f->msg);
            if (f->optional)
                printf("        (needed only for --partition %s)\n", c == MM_COMP_DIT_REF2VA ? "ref2va" : "fl2va");
            continue;
        }
        if (c == MM_COMP_CONFIG) {
            printf("  ok    %-14s %s  [%s]\n", "config", f->where.path, mm_found_where_name(f->where.where));
            continue;
        }
        char size[32];
        gib(size, sizeof size, f->rep.bytes);
        printf("  %s  %-14s %10s  %s  [%s]\n", f->ok ? "ok  " : "FAIL", ci->title, size, f->where.path,
               mm_found_where_name(f->where.where));
        if (f->ok)
            printf("        %zu tensors: %s\n", f->rep.tensors, f->rep.summary);
        else
            printf("        %s\n", f->msg);
    }
    if (r->consistency[0])
        printf("FAIL  %s\n", r->consistency);
}

static void print_devices(const check_report *r)
{
    printf("gpus\n");
    if (r->n_gpus == 0)
        printf("  none%s\n",
#ifdef MMH3_HAVE_CUDA
               " usable (no driver or no device)"
#else
               " (this mmh3 was built without CUDA)"
#endif
        );
    for (int g = 0; g < r->n_lines; g++)
        printf("  %s\n", r->gpu_lines[g]);
#ifdef MMH3_HAVE_CUDA
    printf("  kernels built for:%s\n", MMH3_CUDA_ARCH_LIST);
#endif
    printf("kernels\n  %s  %s\n", r->kernels_ok ? "ok  " : "FAIL", r->kernels);
    printf("  policy  %s\n", r->policy_line);
    for (int i = 0; i < r->policy->n_problems; i++)
        printf("  FAIL  %s\n", r->policy->problems[i]);
    if (r->paths[0])
        printf("  in use  %s\n", r->paths);
    if (r->n_gpus >= 2)
        printf("multi-gpu\n  %s  %s\n  %s  %s\n", r->peer_failed ? "WARN" : "ok  ", r->peer,
               strncmp(r->nccl, "NCCL ", 5) == 0 ? "ok  " : "--  ", r->nccl);
    printf("placement\n");
    if (r->placed)
        printf("  %s\n  %s\n", r->pl.summary, r->pl.reason);
    else
        printf("  FAIL  %s\n", r->perr.msg);
    printf("memory plan (%d x %d, %d frames)\n  %s", MM_DEFAULT_WIDTH, MM_DEFAULT_HEIGHT, MM_FRAMES_DEFAULT,
           r->plan_failed ? "FAIL  " : "");
    for (const char *c = r->plan; *c; c++) {
        putchar(*c);
        if (*c == '\n')
            fputs("  ", stdout);
    }
    putchar('\n');
}

int mm_cmd_check(int argc, char **argv)
{
    check_args a = {.partition = "fl2va"};
    mm_flags_result parsed = parse_flags(&a, argc, argv);
    if (parsed != MM_FLAGS_RUN)
        return mm_flags_exit_status(parsed);
    check_report *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "mmh3 check: out of memory\n");
        return 1;
    }
    r->used = strcmp(a.partition, "ref2va") == 0 ? MM_COMP_DIT_REF2VA : MM_COMP_DIT_FL2VA;
    if (a.dit_path)
        a.o.override[r->used] = a.dit_path;
    if (a.o.allow_download && !a.json)
        a.o.progress = progress;

    double t0 = mm_clock_now();
    for (int c = 0; c < MM_COMP_COUNT; c++)
        inspect_file(&a.o, (mm_component)c, r);
    check_consistency(r);
    choose_placement(&a, r);
    plan_memory(&a, r);
    check_kernels(r);
    check_multi_gpu(r);
    const file_result *dit = &r->res[r->used];
    r->have_dit_cfg = dit->ok && dit_config(dit->where.path, &r->dit_cfg);
    r->ms = (mm_clock_now() - t0) * 1e3;

    if (a.json) {
        print_json(&a.o, r);
    } else {
        print_files(&a.o, r);
        print_devices(r);
        mm_check_loras(a.o.models_path, r->have_dit_cfg ? &r->dit_cfg : NULL, NULL, stdout);
        printf("%s in %.1f ms\n", r->failures ? "check FAILED" : "check passed", r->ms);
    }
    int rc = r->failures ? 1 : 0;
    free(r);
    return rc;
}
