/* Checkpoint resolution (search order, wrong variants named) and downloads
 * (full, resumed, cut short then resumed, corrupt, missing) against a local
 * HTTP server with Range support started by this test
 * (tests/fixtures/range_http_server.py). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/sha256.h"
#include "io/checkpoint.h"
#include "io/download.h"
#include "test.h"

static char dir[256], root[320], endpoint[128], logf[320];
static pid_t server = -1;

static void put(const char *path, const void *data, size_t n)
{
    mm_error err = {{0}};
    mm_make_parent_dirs(path, &err);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static int same_file(const char *a, const char *b)
{
    char ha[65], hb[65];
    mm_error err = {{0}};
    return mm_sha256_file(a, ha, &err) == 0 && mm_sha256_file(b, hb, &err) == 0 && strcmp(ha, hb) == 0;
}

static unsigned char *payload(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (unsigned char)(seed >> 16);
    }
    return p;
}

static int start_server(void)
{
    const char *src = getenv("MMH3_SRC");
    char script[512], portf[320];
    snprintf(script, sizeof script, "%s/tests/fixtures/range_http_server.py", src ? src : ".");
    snprintf(portf, sizeof portf, "%s/port", dir);
    snprintf(logf, sizeof logf, "%s/requests.log", dir);
    server = fork();
    if (server == 0) {
        execlp("python3", "python3", script, root, portf, logf, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(portf, "r");
        int port = 0;
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port > 0) {
            snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", port);
            return 0;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static int log_has(const char *needle)
{
    FILE *f = fopen(logf, "r");
    char line[1024];
    int hit = 0;
    while (f && fgets(line, sizeof line, f))
        hit |= strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return hit;
}

/* --------------------------------------------------------------- download */

static void test_download_full_resume_cut_and_corrupt(void)
{
    MM_REQUIRE(mm_download_available(), "this build has libcurl");
    const size_t n = 700001;
    unsigned char *data = payload(n, 7);
    char src[512], dst[512], part[520], url[512];
    snprintf(src, sizeof src, "%s/Comfy-Org/MiniMax-H3/blob.bin", root);
    put(src, data, n);
    snprintf(url, sizeof url, "%s/Comfy-Org/MiniMax-H3/resolve/main/blob.bin", endpoint);
    snprintf(dst, sizeof dst, "%s/out/sub/blob.bin", dir);
    snprintf(part, sizeof part, "%s.part", dst);
    mm_error err = {{0}};

    MM_EXPECT(mm_download(url, dst, NULL, &err) == 0 && same_file(src, dst), "full download: %s", err.msg);

    /* resume from a correct third */
    unlink(dst);
    put(part, data, n / 3);
    MM_EXPECT(mm_download(url, dst, NULL, &err) == 0 && same_file(src, dst), "resumed: %s", err.msg);
    char want[64];
    snprintf(want, sizeof want, "bytes=%zu-", n / 3);
    MM_EXPECT(log_has(want), "the server saw a Range request from byte %zu", n / 3);
    MM_EXPECT(file_size(part) == -1, "no .part left");

    /* the connection drops halfway: .part kept, the next run completes it */
    unlink(dst);
    char cut[520];
    snprintf(cut, sizeof cut, "%s.cut", src);
    put(cut, "", 0);
    MM_EXPECT(mm_download(url, dst, NULL, &err) == -1 && strstr(err.msg, "resume"), "cut short: %s", err.msg);
    long kept = file_size(part);
    MM_EXPECT(kept > 0 && kept < (long)n && file_size(dst) == -1, "partial data kept (%ld bytes), nothing at dest",
              kept);
    unlink(cut);
    MM_EXPECT(mm_download(url, dst, NULL, &err) == 0 && same_file(src, dst), "completed on retry: %s", err.msg);

    /* a .part with wrong bytes fails the announced sha256 and is deleted */
    unlink(dst);
    unsigned char *junk = payload(n / 2, 99);
    put(part, junk, n / 2);
    MM_EXPECT(mm_download(url, dst, NULL, &err) == -1 && strstr(err.msg, "sha256"), "corrupt: %s", err.msg);
    MM_EXPECT(file_size(part) == -1 && file_size(dst) == -1, "corrupt .part deleted, nothing at dest");

    /* the caller's expectations win */
    mm_download_opts o = {.expected_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"};
    MM_EXPECT(mm_download(url, dst, &o, &err) == -1 && strstr(err.msg, "expected 0000"), "%s", err.msg);
    mm_download_opts o2 = {.expected_size = n + 5};
    MM_EXPECT(mm_download(url, dst, &o2, &err) == -1 && strstr(err.msg, "expected"), "size: %s", err.msg);
    unlink(part);

    snprintf(url, sizeof url, "%s/Comfy-Org/MiniMax-H3/resolve/main/nope.bin", endpoint);
    MM_EXPECT(mm_download(url, dst, NULL, &err) == -1 && strstr(err.msg, "HTTP 404") && strstr(err.msg, "nope.bin"),
              "404: %s", err.msg);
    free(data);
    free(junk);
}

/* ------------------------------------------------------------- resolution */

static void test_resolution_order_and_variants(void)
{
    char models[320], cache[320], p[1024];
    snprintf(models, sizeof models, "%s/models", dir);
    snprintf(cache, sizeof cache, "%s/hf/hub", dir);
    mm_checkpoint_opts o = {.models_path = models, .hf_cache = cache};
    mm_resolved r;
    mm_error err = {{0}};
    const mm_component_info *ci = mm_component_get(MM_COMP_VIDEO_VAE);

    /* nothing anywhere, two wrong variants lying around */
    snprintf(p, sizeof p, "%s/vae/minimax_h3_video_vae_bf16.safetensors", models);
    put(p, "x", 1);
    snprintf(p, sizeof p, "%s/minimax_h3_video_vae_fp32.safetensors", models);
    put(p, "x", 1);
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_VIDEO_VAE, &o, &r, &err) == -1, "not found");
    MM_EXPECT(strstr(err.msg, "minimax_h3_video_vae_bf16.safetensors (the bf16 export)") &&
                  strstr(err.msg, "minimax_h3_video_vae_fp32.safetensors (the fp32 export)") &&
                  strstr(err.msg, "looked in") && strstr(err.msg, "--video-vae-path") &&
                  strstr(err.msg, "--allow-download"),
              "%s", err.msg);

    /* 4. the HF cache (refs/main revision) */
    char snap[600];
    snprintf(snap, sizeof snap, "%s/models--Comfy-Org--MiniMax-H3/snapshots/abc123/%s", cache, ci->rel_path);
    put(snap, "hf", 2);
    snprintf(p, sizeof p, "%s/models--Comfy-Org--MiniMax-H3/refs/main", cache);
    put(p, "abc123\n", 7);
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_VIDEO_VAE, &o, &r, &err) == 0 && r.where == MM_FOUND_HF_CACHE &&
                  strcmp(r.path, snap) == 0,
              "HF cache: %s %s", err.msg, r.path);
    /* 3. the bare name under $MODELS_PATH beats the cache */
    snprintf(p, sizeof p, "%s/minimax_h3_video_vae_fp16.safetensors", models);
    put(p, "bare", 4);
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_VIDEO_VAE, &o, &r, &err) == 0 && r.where == MM_FOUND_MODELS_BARE,
              "bare: %s", r.path);
    /* 2. the comfy-relative path beats the bare name */
    snprintf(p, sizeof p, "%s/%s", models, ci->rel_path);
    put(p, "rel", 3);
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_VIDEO_VAE, &o, &r, &err) == 0 && r.where == MM_FOUND_MODELS_REL &&
                  strcmp(r.path, p) == 0,
              "rel: %s", r.path);
    /* 1. an explicit path beats everything, and must exist */
    char ov[512];
    snprintf(ov, sizeof ov, "%s/elsewhere.safetensors", dir);
    o.override[MM_COMP_VIDEO_VAE] = ov;
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_VIDEO_VAE, &o, &r, &err) == -1 && strstr(err.msg, "--video-vae-path") &&
                  strstr(err.msg, "no such file"),
              "%s", err.msg);
    put(ov, "ov", 2);
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_VIDEO_VAE, &o, &r, &err) == 0 && r.where == MM_FOUND_OVERRIDE, "override");
    o.override[MM_COMP_VIDEO_VAE] = NULL;

    /* variant names */
    MM_EXPECT(strstr(mm_checkpoint_variant(MM_COMP_DIT_FL2VA, "minimax_h3_fl2va_int8_convrot.safetensors"),
                     "non-pruned") != NULL,
              "non-pruned DiT named");
    MM_EXPECT(strstr(mm_checkpoint_variant(MM_COMP_DIT_REF2VA, "minimax_h3_ref2va_bf16.safetensors"), "bf16") != NULL,
              "bf16 DiT named");
    MM_EXPECT(mm_checkpoint_variant(MM_COMP_DIT_FL2VA, "minimax_h3_fl2va_pruned_int8_convrot.safetensors") == NULL,
              "the right file is not a variant");

    /* 5. downloads only when allowed: to $MODELS_PATH/<rel>, checked */
    unsigned char *data = payload(300000, 3);
    char src[600];
    const mm_component_info *ta = mm_component_get(MM_COMP_AUDIO_VAE);
    snprintf(src, sizeof src, "%s/Comfy-Org/MiniMax-H3/%s", root, ta->rel_path);
    put(src, data, 300000);
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_AUDIO_VAE, &o, &r, &err) == -1 && strstr(err.msg, "--allow-download"),
              "no download without permission");
    o.allow_download = true;
    o.endpoint = endpoint;
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_AUDIO_VAE, &o, &r, &err) == 0 && r.where == MM_FOUND_DOWNLOADED,
              "downloaded: %s", err.msg);
    snprintf(p, sizeof p, "%s/%s", models, ta->rel_path);
    MM_EXPECT(strcmp(r.path, p) == 0 && same_file(src, p), "to $MODELS_PATH/<comfy path>");
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_AUDIO_VAE, &o, &r, &err) == 0 && r.where == MM_FOUND_MODELS_REL,
              "found locally afterwards");
    free(data);
}

static void test_config_folder(void)
{
    char models[320], p[1024];
    snprintf(models, sizeof models, "%s/models2", dir);
    mm_checkpoint_opts o = {.models_path = models, .hf_cache = "/nonexistent"};
    mm_resolved r;
    mm_error err = {{0}};
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_CONFIG, &o, &r, &err) == -1 && strstr(err.msg, "--config-path"), "%s",
              err.msg);
    for (int i = 0; mm_config_files[i]; i++) {
        snprintf(p, sizeof p, "%s/MiniMax-H3/FL2VA/%s", models, mm_config_files[i]);
        put(p, "{}", 2);
    }
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_CONFIG, &o, &r, &err) == 0 && strstr(r.path, "MiniMax-H3/FL2VA"), "%s",
              err.msg);
    /* an explicit checkout root holding FL2VA/ */
    char ov[400];
    snprintf(ov, sizeof ov, "%s/MiniMax-H3", models);
    o.override[MM_COMP_CONFIG] = ov;
    MM_EXPECT(mm_checkpoint_resolve(MM_COMP_CONFIG, &o, &r, &err) == 0 && r.where == MM_FOUND_OVERRIDE, "%s", err.msg);
    /* the shared release folder itself resolves */
    const char *shared = "/work/shared/minimax-h3";
    if (access(shared, F_OK) == 0) {
        o.override[MM_COMP_CONFIG] = shared;
        MM_EXPECT(mm_checkpoint_resolve(MM_COMP_CONFIG, &o, &r, &err) == 0, "release folder: %s", err.msg);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/mmh3-test-ckpt-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    snprintf(root, sizeof root, "%s/served", dir);
    mkdir(root, 0755);
    if (mm_download_available() && start_server() != 0) {
        printf("FAIL setup: the local HTTP server did not start (python3 needed)\n");
        return 1;
    }
    if (mm_download_available())
        MM_RUN(test_download_full_resume_cut_and_corrupt);
    MM_RUN(test_resolution_order_and_variants);
    MM_RUN(test_config_folder);
    if (server > 0) {
        kill(server, SIGTERM);
        waitpid(server, NULL, 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", dir);
    return mm_test_exit();
}
