#include "io/checkpoint.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* snprintf that says nothing when a path is cut (paths are bounded by
 * PATH_MAX-sized buffers; a cut path simply is not found). */
static void fmt(char *buf, size_t n, const char *f, ...) MM_PRINTF(3, 4);
static void fmt(char *buf, size_t n, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, n, f, ap);
    va_end(ap);
}

static const mm_component_info components[MM_COMP_COUNT] = {
    [MM_COMP_DIT_FL2VA] = {"dit_fl2va", "DiT (fl2va)", "--dit-path", "Comfy-Org/MiniMax-H3",
                           "diffusion_models/minimax_h3_fl2va_pruned_int8_convrot.safetensors", "minimax_h3_fl2va"},
    [MM_COMP_DIT_REF2VA] = {"dit_ref2va", "DiT (ref2va)", "--dit-ref2va-path", "Comfy-Org/MiniMax-H3",
                            "diffusion_models/minimax_h3_ref2va_pruned_int8_convrot.safetensors", "minimax_h3_ref2va"},
    [MM_COMP_TEXT_ENCODER] = {"text_encoder", "text encoder", "--text-encoder-path", "Comfy-Org/MiniMax-H3",
                              "text_encoders/qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors", "qwen3vl_32b_minimax_h3"},
    [MM_COMP_VIDEO_VAE] = {"video_vae", "video VAE", "--video-vae-path", "Comfy-Org/MiniMax-H3",
                           "vae/minimax_h3_video_vae_fp16.safetensors", "minimax_h3_video_vae"},
    [MM_COMP_AUDIO_VAE] = {"audio_vae", "audio VAE", "--audio-vae-path", "Comfy-Org/MiniMax-H3",
                           "vae/minimax_h3_audio_vae_fp32.safetensors", "minimax_h3_audio_vae"},
    [MM_COMP_CONFIG] = {"config", "config", "--config-path", "MiniMaxAI/MiniMax-H3", "FL2VA",
                        NULL},
};

const char *const mm_config_files[] = {
    "tokenizer/vocab.json",
    "tokenizer/merges.txt",
    "tokenizer/tokenizer_config.json",
    "processor/preprocessor_config.json",
    "processor/video_preprocessor_config.json",
    "text_encoder/config.json",
    NULL,
};

const mm_component_info *mm_component_get(mm_component c)
{
    return (unsigned)c < MM_COMP_COUNT ? &components[c] : NULL;
}

const char *mm_found_where_name(mm_found_where w)
{
    switch (w) {
    case MM_FOUND_OVERRIDE: return "explicit path";
    case MM_FOUND_MODELS_REL: return "$MODELS_PATH";
    case MM_FOUND_MODELS_BARE: return "$MODELS_PATH (bare name)";
    case MM_FOUND_HF_CACHE: return "Hugging Face cache";
    case MM_FOUND_DOWNLOADED: return "downloaded";
    }
    return "?";
}

void mm_checkpoint_models_path(const mm_checkpoint_opts *o, char *buf, size_t n)
{
    const char *m = o && o->models_path ? o->models_path : getenv("MODELS_PATH");
    fmt(buf, n, "%s", m && *m ? m : "/data/shared/models");
}

void mm_checkpoint_hf_cache(const mm_checkpoint_opts *o, char *buf, size_t n)
{
    const char *e;
    if (o && o->hf_cache)
        fmt(buf, n, "%s", o->hf_cache);
    else if ((e = getenv("HF_HUB_CACHE")) && *e)
        fmt(buf, n, "%s", e);
    else if ((e = getenv("HF_HOME")) && *e)
        fmt(buf, n, "%s/hub", e);
    else
        fmt(buf, n, "%s/.cache/huggingface/hub", getenv("HOME") ? getenv("HOME") : "");
}

/* "not found" would mislead when something is there: say what it is */
static void note_unusable(char *looked, size_t n, const char *cand)
{
    struct stat sb;
    size_t used = strlen(looked);
    if (stat(cand, &sb) == 0) {
        if (!S_ISREG(sb.st_mode))
            fmt(looked + used, n - used, " (%s, not a file)", S_ISDIR(sb.st_mode) ? "a folder" : "a special file");
        return;
    }
    int why = errno;
    if (lstat(cand, &sb) == 0)
        fmt(looked + used, n - used, " (a link that leads nowhere: %s)", strerror(why));
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

const char *mm_checkpoint_variant(mm_component c, const char *name)
{
    const mm_component_info *ci = mm_component_get(c);
    if (!ci || !ci->family)
        return NULL;
    size_t fl = strlen(ci->family), nl = strlen(name);
    if (strncmp(name, ci->family, fl) != 0 || nl < 12 || strcmp(name + nl - 12, ".safetensors") != 0)
        return NULL;
    if (strcmp(name, base_name(ci->rel_path)) == 0)
        return NULL;
    if (strstr(name, "bf16"))
        return "the bf16 export";
    if (strstr(name, "fp8"))
        return "an fp8 export";
    if (strstr(name, "gguf") || strstr(name, "GGUF"))
        return "a GGUF export";
    if ((c == MM_COMP_DIT_FL2VA || c == MM_COMP_DIT_REF2VA) && !strstr(name, "pruned"))
        return "the non-pruned DiT (full AdaLN, not the pruned table)";
    if (strstr(name, "nvfp4") && (c == MM_COMP_DIT_FL2VA || c == MM_COMP_DIT_REF2VA))
        return "a community nvfp4 DiT";
    if (strstr(name, "fp32") && c == MM_COMP_VIDEO_VAE)
        return "the fp32 export";
    if (strstr(name, "fp16") && c == MM_COMP_AUDIO_VAE)
        return "the fp16 export";
    return "a different variant";
}

/* Appends "name (variant)" of every wrong variant found in dir. */
static void scan_variants(mm_component c, const char *dir, char *out, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *v = mm_checkpoint_variant(c, e->d_name);
        if (!v)
            continue;
        size_t used = strlen(out);
        fmt(out + used, n - used, "%s%s/%s (%s)", used ? "; " : "", dir, e->d_name, v);
    }
    closedir(d);
}

/* The snapshot folder of repo in the HF cache: refs/main's revision when
 * present, else the first snapshot holding `rel` (NULL rel: any). */
static bool hf_snapshot(const char *cache, const char *repo, const char *rel, char *out, size_t n)
{
    char base[4096], repo_dir[512] = "models--";
    for (const char *p = repo; *p && strlen(repo_dir) + 3 < sizeof repo_dir; p++) {
        size_t u = strlen(repo_dir);
        if (*p == '/') {
            memcpy(repo_dir + u, "--", 3);
        } else {
            repo_dir[u] = *p;
            repo_dir[u + 1] = '\0';
        }
    }
    fmt(base, sizeof base, "%s/%s", cache, repo_dir);
    char refp[4200], rev[128] = "";
    fmt(refp, sizeof refp, "%s/refs/main", base);
    FILE *f = fopen(refp, "r");
    if (f) {
        if (fgets(rev, sizeof rev, f))
            rev[strcspn(rev, "\r\n ")] = '\0';
        fclose(f);
    }
    if (rev[0]) {
        fmt(out, n, "%s/snapshots/%s", base, rev);
        char probe[8400];
        fmt(probe, sizeof probe, "%s/%s", out, rel ? rel : "");
        if (rel ? (is_file(probe) || is_dir(probe)) : is_dir(out))
            return true;
    }
    char snaps[4200];
    fmt(snaps, sizeof snaps, "%s/snapshots", base);
    DIR *d = opendir(snaps);
    if (!d)
        return false;
    struct dirent *e;
    bool found = false;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        fmt(out, n, "%s/%s", snaps, e->d_name);
        char probe[8400];
        fmt(probe, sizeof probe, "%s/%s", out, rel ? rel : "");
        found = rel ? (is_file(probe) || is_dir(probe)) : is_dir(out);
    }
    closedir(d);
    return found;
}

static void dl_progress(void *user, uint64_t have, uint64_t total)
{
    const void **u = user;
    const mm_checkpoint_opts *o = u[0];
    if (o->progress)
        o->progress(o->user, u[1], have, total);
}

static bool config_folder_ok(const char *dir)
{
    char p[4300];
    fmt(p, sizeof p, "%s/tokenizer/tokenizer.json", dir);
    bool have_json = is_file(p);
    for (int i = 0; mm_config_files[i]; i++) {
        if (have_json && strncmp(mm_config_files[i], "tokenizer/", 10) == 0 &&
            strcmp(mm_config_files[i], "tokenizer/tokenizer_config.json") != 0)
            continue;
        fmt(p, sizeof p, "%s/%s", dir, mm_config_files[i]);
        if (!is_file(p))
            return false;
    }
    return true;
}

static int resolve_config(const mm_checkpoint_opts *o, mm_resolved *out, mm_error *err)
{
    const mm_component_info *ci = &components[MM_COMP_CONFIG];
    char models[4096], cache[4096], cand[4400], looked[3000] = "";
    mm_checkpoint_models_path(o, models, sizeof models);
    mm_checkpoint_hf_cache(o, cache, sizeof cache);
    const char *ov = o ? o->override[MM_COMP_CONFIG] : NULL;
    if (ov) {
        fmt(cand, sizeof cand, "%s/FL2VA", ov);
        const char *dirs[2] = {ov, cand};
        for (int i = 0; i < 2; i++)
            if (config_folder_ok(dirs[i])) {
                fmt(out->path, sizeof out->path, "%s", dirs[i]);
                out->where = MM_FOUND_OVERRIDE;
                return 0;
            }
        return mm_fail(err, "%s %s: neither it nor %s/FL2VA holds the config files (%s, ...)", ci->flag, ov, ov,
                       mm_config_files[0]);
    }
    const char *rels[2] = {"MiniMax-H3/FL2VA", "FL2VA"};
    for (int i = 0; i < 2; i++) {
        fmt(cand, sizeof cand, "%s/%s", models, rels[i]);
        size_t u = strlen(looked);
        fmt(looked + u, sizeof looked - u, "%s%s", u ? ", " : "", cand);
        if (config_folder_ok(cand)) {
            fmt(out->path, sizeof out->path, "%s", cand);
            out->where = MM_FOUND_MODELS_REL;
            return 0;
        }
    }
    char snap[4096];
    if (hf_snapshot(cache, ci->repo, "FL2VA", snap, sizeof snap)) {
        fmt(cand, sizeof cand, "%s/FL2VA", snap);
        if (config_folder_ok(cand)) {
            fmt(out->path, sizeof out->path, "%s", cand);
            out->where = MM_FOUND_HF_CACHE;
            return 0;
        }
    }
    size_t u = strlen(looked);
    fmt(looked + u, sizeof looked - u, ", the Hugging Face cache %s (%s)", cache, ci->repo);
    if (!o || !o->allow_download)
        return mm_fail(err,
                       "%s (%s/FL2VA: tokenizer, processor, text_encoder config) not found; looked in: %s. Pass %s, "
                       "copy the FL2VA folder to $MODELS_PATH/MiniMax-H3/FL2VA, or add --allow-download",
                       ci->title, ci->repo, looked, ci->flag);
    char endpoint[1024];
    const char *ep = o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
    fmt(endpoint, sizeof endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    fmt(out->path, sizeof out->path, "%s/MiniMax-H3/FL2VA", models);
    for (int i = 0; mm_config_files[i]; i++) {
        char url[2048], dest[4400];
        fmt(url, sizeof url, "%s/%s/resolve/main/FL2VA/%s", endpoint, ci->repo, mm_config_files[i]);
        fmt(dest, sizeof dest, "%s/%s", out->path, mm_config_files[i]);
        if (is_file(dest))
            continue;
        const void *u2[2] = {o, mm_config_files[i]};
        mm_download_opts d = {.progress = o->progress ? dl_progress : NULL, .user = u2};
        if (mm_download(url, dest, &d, err) != 0)
            return -1;
    }
    out->where = MM_FOUND_DOWNLOADED;
    return 0;
}

int mm_checkpoint_resolve(mm_component c, const mm_checkpoint_opts *o, mm_resolved *out, mm_error *err)
{
    const mm_component_info *ci = mm_component_get(c);
    if (!ci)
        return mm_fail(err, "unknown checkpoint component %d", (int)c);
    memset(out, 0, sizeof *out);
    if (c == MM_COMP_CONFIG)
        return resolve_config(o, out, err);
    const char *ov = o ? o->override[c] : NULL;
    if (ov) {
        if (!is_file(ov))
            return mm_fail(err, "%s %s: %s", ci->flag, ov, access(ov, F_OK) == 0 ? "not a regular file" : "no such file");
        fmt(out->path, sizeof out->path, "%s", ov);
        out->where = MM_FOUND_OVERRIDE;
        return 0;
    }
    char models[4096], cache[4096], cand[8400], looked[3000] = "", variants[3000] = "";
    mm_checkpoint_models_path(o, models, sizeof models);
    mm_checkpoint_hf_cache(o, cache, sizeof cache);
    const char *bare = base_name(ci->rel_path);

    fmt(cand, sizeof cand, "%s/%s", models, ci->rel_path);
    fmt(looked, sizeof looked, "%s", cand);
    note_unusable(looked, sizeof looked, cand);
    if (is_file(cand)) {
        fmt(out->path, sizeof out->path, "%s", cand);
        out->where = MM_FOUND_MODELS_REL;
        return 0;
    }
    fmt(cand, sizeof cand, "%s/%s", models, bare);
    fmt(looked + strlen(looked), sizeof looked - strlen(looked), ", %s", cand);
    note_unusable(looked, sizeof looked, cand);
    if (is_file(cand)) {
        fmt(out->path, sizeof out->path, "%s", cand);
        out->where = MM_FOUND_MODELS_BARE;
        return 0;
    }
    char snap[4096];
    if (hf_snapshot(cache, ci->repo, ci->rel_path, snap, sizeof snap)) {
        fmt(out->path, sizeof out->path, "%s/%s", snap, ci->rel_path);
        out->where = MM_FOUND_HF_CACHE;
        return 0;
    }
    fmt(looked + strlen(looked), sizeof looked - strlen(looked), ", the Hugging Face cache %s (%s)", cache,
             ci->repo);

    /* other variants next to where the file should be */
    char dir[8400];
    fmt(dir, sizeof dir, "%s/%s", models, ci->rel_path);
    *strrchr(dir, '/') = '\0';
    scan_variants(c, dir, variants, sizeof variants);
    scan_variants(c, models, variants, sizeof variants);
    if (hf_snapshot(cache, ci->repo, NULL, snap, sizeof snap)) {
        fmt(dir, sizeof dir, "%s/%s", snap, ci->rel_path);
        *strrchr(dir, '/') = '\0';
        scan_variants(c, dir, variants, sizeof variants);
    }

    if (!o || !o->allow_download)
        return mm_fail(err, "%s (%s) not found; looked in: %s.%s%s%s Pass %s, put the file under $MODELS_PATH, or add "
                            "--allow-download",
                       ci->title, bare, looked, variants[0] ? " Found other variants that mmh3 cannot use: " : "",
                       variants, variants[0] ? "." : "", ci->flag);
    char endpoint[1024], url[2048];
    const char *ep = o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
    fmt(endpoint, sizeof endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    fmt(url, sizeof url, "%s/%s/resolve/main/%s", endpoint, ci->repo, ci->rel_path);
    fmt(out->path, sizeof out->path, "%s/%s", models, ci->rel_path);
    const void *u2[2] = {o, ci->key};
    mm_download_opts d = {.progress = o->progress ? dl_progress : NULL, .user = u2};
    if (mm_download(url, out->path, &d, err) != 0)
        return mm_error_prefix(err, "%s", ci->title);
    out->where = MM_FOUND_DOWNLOADED;
    return 0;
}
