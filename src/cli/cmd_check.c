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
#include <time.h>

#include "backend/device.h"
#include "backend/kernel_policy.h"
#include "backend/placement.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_speed.h"
#include "parallel/nccl_lib.h"
#include "parallel/transfer.h"
#include "cli/check_loras.h"
#include "cli/commands.h"
#include "io/checkpoint.h"
#include "io/inspect.h"
#include "io/safetensors.h"
#include "model/dit/config.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mmh3 check [options]\n"
            "\n"
            "Finds the MiniMax-H3 files, checks their headers (tensor names, dtypes, shapes), reports the GPUs and\n"
            "the placement the engine would choose. Reads no weights; exits 1 on any problem.\n"
            "\n"
            "  --partition fl2va|ref2va   the DiT generate will use (default fl2va; the other one is optional)\n"
            "  --dit-path PATH            that partition's DiT\n"
            "  --dit-fl2va-path PATH   --dit-ref2va-path PATH   (as for generate; the messages name them)\n"
            "  --text-encoder-path PATH   --video-vae-path PATH   --audio-vae-path PATH\n"
            "  --config-path DIR          MiniMaxAI/MiniMax-H3 FL2VA folder (tokenizer, processor, text_encoder config)\n"
            "  --models-path DIR          instead of $MODELS_PATH (default /data/shared/models)\n"
            "  --allow-download           fetch missing files from the Hugging Face hub\n"
            "  --device auto|cpu|cuda:N   --te-device auto|cpu|cuda:N   (as for generate)\n"
            "  --json                     one JSON object on stdout instead of the report\n");
}

typedef struct file_result {
    bool found, ok, optional;
    mm_resolved where;
    mm_inspect_report rep;
    char msg[MM_ERROR_MAX];
} file_result;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

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

int mm_cmd_check(int argc, char **argv)
{
    mm_checkpoint_opts o = {0};
    const char *partition = "fl2va", *device = NULL, *te_device = NULL, *dit_path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            json = true;
            continue;
        }
        if (strcmp(a, "--allow-download") == 0) {
            o.allow_download = true;
            continue;
        }
        const char **dst = strcmp(a, "--partition") == 0           ? &partition
                           : strcmp(a, "--dit-path") == 0          ? &dit_path
                           : strcmp(a, "--dit-fl2va-path") == 0    ? &o.override[MM_COMP_DIT_FL2VA]
                           : strcmp(a, "--dit-ref2va-path") == 0   ? &o.override[MM_COMP_DIT_REF2VA]
                           : strcmp(a, "--text-encoder-path") == 0 ? &o.override[MM_COMP_TEXT_ENCODER]
                           : strcmp(a, "--video-vae-path") == 0    ? &o.override[MM_COMP_VIDEO_VAE]
                           : strcmp(a, "--audio-vae-path") == 0    ? &o.override[MM_COMP_AUDIO_VAE]
                           : strcmp(a, "--config-path") == 0       ? &o.override[MM_COMP_CONFIG]
                           : strcmp(a, "--models-path") == 0       ? &o.models_path
                           : strcmp(a, "--device") == 0            ? &device
                           : strcmp(a, "--te-device") == 0         ? &te_device
                                                                   : NULL;
        if (!dst) {
            fprintf(stderr, "mmh3 check: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "mmh3 check: %s needs a value\n", a);
            return 2;
        }
        *dst = v;
        i++;
    }
    mm_component used = MM_COMP_DIT_FL2VA;
    if (strcmp(partition, "ref2va") == 0)
        used = MM_COMP_DIT_REF2VA;
    else if (strcmp(partition, "fl2va") != 0) {
        fprintf(stderr, "mmh3 check: --partition %s: accepted: fl2va, ref2va\n", partition);
        return 2;
    }
    if (dit_path)
        o.override[used] = dit_path;
    if (o.allow_download && !json)
        o.progress = progress;

    double t0 = now_ms();
    file_result res[MM_COMP_COUNT];
    memset(res, 0, sizeof res);
    int failures = 0;
    for (int c = 0; c < MM_COMP_COUNT; c++) {
        file_result *r = &res[c];
        r->optional = (c == MM_COMP_DIT_FL2VA || c == MM_COMP_DIT_REF2VA) && c != (int)used;
        mm_error err = {{0}};
        if (mm_checkpoint_resolve((mm_component)c, &o, &r->where, &err) != 0) {
            snprintf(r->msg, sizeof r->msg, "%s", err.msg);
            failures += !r->optional;
            continue;
        }
        r->found = true;
        if (c == MM_COMP_CONFIG) {
            r->ok = true;
            continue;
        }
        mm_safetensors *st;
        if (mm_st_open(&st, r->where.path, &err) != 0) {
            snprintf(r->msg, sizeof r->msg, "%s", err.msg);
            failures++;
            continue;
        }
        size_t stripped;
        if (mm_st_strip_prefix(st, "model.diffusion_model.", &stripped, &err) != 0 ||
            mm_inspect((mm_component)c, st, &r->rep, &err) != 0) {
            snprintf(r->msg, sizeof r->msg, "%s", err.msg);
            failures++;
        } else {
            r->ok = true;
        }
        mm_st_close(st);
    }
    /* the parts must fit together */
    char consistency[512] = "";
    const file_result *dit = &res[used], *te = &res[MM_COMP_TEXT_ENCODER];
    if (dit->ok && te->ok && dit->rep.dims[6] != te->rep.dims[0]) {
        snprintf(consistency, sizeof consistency,
                 "the DiT reads %lld-wide text features but the text encoder is %lld wide: files of different models",
                 (long long)dit->rep.dims[6], (long long)te->rep.dims[0]);
        failures++;
    }

    /* GPUs and placement */
    int n_gpus = mm_cuda_device_count();
    mm_placement_in pin = {.n_gpus = n_gpus, .device = device, .te_device = te_device};
    pin.dit_bytes = dit->rep.bytes;
    pin.te_bytes = te->rep.bytes;
    pin.vae_bytes = res[MM_COMP_VIDEO_VAE].rep.bytes + res[MM_COMP_AUDIO_VAE].rep.bytes;
    char gpu_lines[16][300];
    int n_lines = n_gpus < 16 ? n_gpus : 16;
    char kernels[512] = "";
    for (int g = 0; g < n_lines; g++) {
        mm_cuda_device_info info;
        mm_error err = {{0}};
        if (mm_cuda_device_info_get(g, &info, &err) == 0) {
            pin.gpu_total[g] = info.total_bytes;
            snprintf(gpu_lines[g], sizeof gpu_lines[g], "cuda:%d %.120s, %.1f GiB (%.1f free), compute %d.%d, %d SMs", g,
                     info.name, info.total_bytes / 1073741824.0, info.free_bytes / 1073741824.0, info.cc_major,
                     info.cc_minor, info.sm_count);
        } else {
            snprintf(gpu_lines[g], sizeof gpu_lines[g], "cuda:%d: %.280s", g, err.msg);
            failures++;
        }
    }
    mm_placement pl;
    mm_error perr = {{0}};
    bool placed = mm_placement_choose(&pin, &pl, &perr) == 0;
    failures += !placed;
    bool kernels_ok = true;
    bool cuda_used = placed && (pl.dit.kind == MM_DEVICE_CUDA || pl.text_encoder.kind == MM_DEVICE_CUDA);
    if (!cuda_used) {
        snprintf(kernels, sizeof kernels, "CPU backend (built in)");
    } else {
        int devs[2] = {pl.dit.index, pl.text_encoder.index};
        for (int k = 0; k < 2 && kernels_ok; k++) {
            if (k == 1 && devs[1] == devs[0])
                break;
            mm_error err = {{0}};
            char summary[256] = "";
            if (mm_cuda_check_kernels(devs[k], summary, sizeof summary, &err) != 0) {
                snprintf(kernels, sizeof kernels, "%.500s", err.msg);
                kernels_ok = false;
            } else {
                snprintf(kernels + strlen(kernels), sizeof kernels - strlen(kernels), "%scuda:%d %s", k ? "; " : "",
                         devs[k], summary);
            }
        }
    }
    failures += !kernels_ok;
    /* the process's kernel policy; a knob's value it did not take is a failure */
    const mm_kernel_policy *policy = mm_kernel_policy_get();
    char policy_line[256];
    mm_kernel_policy_describe(policy, policy_line, sizeof policy_line);
    failures += policy->n_problems;
    /* which attention and int8 GEMM kernels the DiT's GPU runs (the Hopper
     * ones after their first-use self-checks; owner: speed) */
    char paths[1024] = "";
    if (kernels_ok && placed && pl.dit.kind == MM_DEVICE_CUDA)
        mm_cuda_speed_describe(pl.dit.index, paths, sizeof paths);
    /* Several GPUs: peer copies checked word by word (some machines return
     * zeros while reporting success; a broken pair is not fatal, transfers
     * between those GPUs are staged through host memory), and NCCL for
     * --gpus N. Owner of this block: multi-GPU (src/parallel/). */
    char peer[600] = "", nccl[600] = "";
    int peer_failed = 0;
    if (n_gpus >= 2) {
        peer_failed = mm_transfer_probe_all(n_gpus, (size_t)16 << 20, NULL, 0, peer, sizeof peer);
        mm_nccl_describe(nccl, sizeof nccl);
    }
    mm_dit_config dit_cfg;
    const bool have_dit_cfg = dit->ok && dit_config(dit->where.path, &dit_cfg);
    double ms = now_ms() - t0;

    if (json) {
        json_t *root = json_object(), *files = json_object();
        for (int c = 0; c < MM_COMP_COUNT; c++) {
            const mm_component_info *ci = mm_component_get((mm_component)c);
            const file_result *r = &res[c];
            json_t *f = json_pack("{s:b, s:b, s:b}", "found", r->found, "ok", r->ok, "optional", r->optional);
            if (r->found) {
                json_object_set_new(f, "path", json_string(r->where.path));
                json_object_set_new(f, "source", json_string(mm_found_where_name(r->where.where)));
            }
            if (r->ok && c != MM_COMP_CONFIG) {
                json_object_set_new(f, "bytes", json_integer((json_int_t)r->rep.bytes));
                json_object_set_new(f, "tensors", json_integer((json_int_t)r->rep.tensors));
                json_object_set_new(f, "summary", json_string(r->rep.summary));
            }
            if (r->msg[0])
                json_object_set_new(f, "error", json_string(r->msg));
            json_object_set_new(files, ci->key, f);
        }
        json_object_set_new(root, "files", files);
        json_t *gpus = json_array();
        for (int g = 0; g < n_lines; g++)
            json_array_append_new(gpus, json_string(gpu_lines[g]));
        json_object_set_new(root, "gpus", gpus);
        json_object_set_new(root, "placement", json_string(placed ? pl.summary : perr.msg));
        json_object_set_new(root, "kernels", json_string(kernels));
        json_object_set_new(root, "kernel_policy", json_string(policy_line));
        json_t *problems = json_array();
        for (int i = 0; i < policy->n_problems; i++)
            json_array_append_new(problems, json_string(policy->problems[i]));
        json_object_set_new(root, "kernel_policy_problems", problems);
        if (paths[0])
            json_object_set_new(root, "kernel_paths", json_string(paths));
        if (n_gpus >= 2) {
            json_object_set_new(root, "peer_copies", json_string(peer));
            json_object_set_new(root, "peer_copies_ok", json_boolean(peer_failed == 0));
            json_object_set_new(root, "nccl", json_string(nccl));
        }
        if (consistency[0])
            json_object_set_new(root, "consistency", json_string(consistency));
        mm_check_loras(o.models_path, have_dit_cfg ? &dit_cfg : NULL, root, NULL);
        json_object_set_new(root, "ok", json_boolean(failures == 0));
        json_object_set_new(root, "milliseconds", json_real(ms));
        char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s ? s : "{}");
        free(s);
        json_decref(root);
        return failures ? 1 : 0;
    }

    char mp[4096];
    mm_checkpoint_models_path(&o, mp, sizeof mp);
    printf("files ($MODELS_PATH = %s)\n", mp);
    for (int c = 0; c < MM_COMP_COUNT; c++) {
        const mm_component_info *ci = mm_component_get((mm_component)c);
        const file_result *r = &res[c];
        if (!r->found) {
            printf("  %s  %-14s %s\n", r->optional ? "--  " : "FAIL", ci->title, r->msg);
            if (r->optional)
                printf("        (needed only for --partition %s)\n", c == MM_COMP_DIT_REF2VA ? "ref2va" : "fl2va");
            continue;
        }
        if (c == MM_COMP_CONFIG) {
            printf("  ok    %-14s %s  [%s]\n", "config", r->where.path, mm_found_where_name(r->where.where));
            continue;
        }
        char size[32];
        gib(size, sizeof size, r->rep.bytes);
        printf("  %s  %-14s %10s  %s  [%s]\n", r->ok ? "ok  " : "FAIL", ci->title, size, r->where.path,
               mm_found_where_name(r->where.where));
        if (r->ok)
            printf("        %zu tensors: %s\n", r->rep.tensors, r->rep.summary);
        else
            printf("        %s\n", r->msg);
    }
    if (consistency[0])
        printf("FAIL  %s\n", consistency);
    printf("gpus\n");
    if (n_gpus == 0)
        printf("  none%s\n",
#ifdef MMH3_HAVE_CUDA
               " usable (no driver or no device)"
#else
               " (this mmh3 was built without CUDA)"
#endif
        );
    for (int g = 0; g < n_lines; g++)
        printf("  %s\n", gpu_lines[g]);
    printf("kernels\n  %s  %s\n", kernels_ok ? "ok  " : "FAIL", kernels);
    printf("  policy  %s\n", policy_line);
    for (int i = 0; i < policy->n_problems; i++)
        printf("  FAIL  %s\n", policy->problems[i]);
    if (paths[0])
        printf("  in use  %s\n", paths);
    if (n_gpus >= 2)
        printf("multi-gpu\n  %s  %s\n  %s  %s\n", peer_failed ? "WARN" : "ok  ", peer,
               strncmp(nccl, "NCCL ", 5) == 0 ? "ok  " : "--  ", nccl);
    printf("placement\n");
    if (placed)
        printf("  %s\n  %s\n", pl.summary, pl.reason);
    else
        printf("  FAIL  %s\n", perr.msg);
    mm_check_loras(o.models_path, have_dit_cfg ? &dit_cfg : NULL, NULL, stdout);
    printf("%s in %.1f ms\n", failures ? "check FAILED" : "check passed", ms);
    return failures ? 1 : 0;
}
