/* The engine flags' rows and their rules (engine_flags.h). */
#include "cli/engine_flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/memplan.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "parallel/sp_options.h"

#define GEN MM_ENGINE_CMD_GENERATE
#define WRK MM_ENGINE_CMD_WORKER
#define SRV MM_ENGINE_CMD_SERVE
#define ALL (GEN | WRK | SRV)

#define ACCEPT_DEVICE "auto, cpu, cuda, cuda:N"
#define ACCEPT_EDGE "a multiple of 32 in 64..4096"

static int apply_device(const mm_flag *f, char *v, mm_error *why)
{
    mm_device d;
    mm_error e = {{0}};
    if (strcmp(v, "auto") != 0 && mm_device_parse(v, &d, &e) != 0)
        return mm_fail(why, "not a device");
    *(const char **)f->target = v;
    return 0;
}

static int apply_dtype(const mm_flag *f, char *v, mm_error *why)
{
    (void)f;
    return strcmp(v, "bf16") == 0 ? 0 : mm_fail(why, "not available for the int8 ConvRot checkpoints");
}

/* A refused edge leaves *out as it was. */
static bool edge_ok(const char *s, int *out)
{
    int v;
    if (!mm_flag_int(s, 64, 4096, &v) || v % 32 != 0)
        return false;
    *out = v;
    return true;
}

static int apply_budget(const mm_flag *f, char *v, mm_error *why)
{
    mm_error e = {{0}};
    return mm_memplan_parse_budget(v, f->target, &e) == 0 ? 0 : mm_fail(why, "not a size in GiB");
}

static int apply_edge(const mm_flag *f, char *v, mm_error *why)
{
    return edge_ok(v, f->target) ? 0 : mm_fail(why, "out of range");
}

typedef struct engine_row {
    unsigned cmds; /* the commands that take this row */
    mm_flag flag;
} engine_row;

int mm_engine_flags_rows(mm_engine_cmd cmd, mm_engine_options *o, mm_flag *rows)
{
    mm_pipeline_options *p = &o->h3;
    const char **override = p->checkpoints.override;
    /* `mmh3 serve` spells the engine's threads --cpu-threads: its --threads
     * is the FastCGI pool's. */
    const engine_row all[] = {
        {ALL, {"--device", NULL, MM_FLAG_CUSTOM, &p->device, "cpu, cuda, cuda:N: every part there (default: automatic placement)",
               .arg = "DEV", .accepted = ACCEPT_DEVICE, .apply = apply_device, .id = MM_EF_DEVICE}},
        {ALL, {"--te-device", NULL, MM_FLAG_CUSTOM, &p->te_device, "the text encoder and the VAEs there", .arg = "DEV",
               .accepted = ACCEPT_DEVICE, .apply = apply_device, .id = MM_EF_TE_DEVICE}},
        {ALL, {"--offload", NULL, MM_FLAG_TRUE, &p->offload, "load the text encoder and VAEs per use and free them after",
               .id = MM_EF_OFFLOAD}},
        {GEN, {"--dtype", NULL, MM_FLAG_CUSTOM, NULL, "compute dtype of the DiT's residual stream (bf16, the checkpoint's)",
               .arg = "bf16", .accepted = "bf16 (the released DiT computes in bf16 with int8 weights)",
               .apply = apply_dtype, .id = MM_EF_DTYPE}},
        {GEN | WRK, {"--threads", "--cpu-threads", MM_FLAG_INT, &p->threads, "CPU worker threads (default: one per core)",
                     .arg = "N", .min = 1, .max = 1024, .id = MM_EF_THREADS}},
        {SRV, {"--cpu-threads", NULL, MM_FLAG_INT, &p->threads, "CPU worker threads (default: one per core)", .arg = "N",
               .min = 1, .max = 1024, .id = MM_EF_THREADS}},
        {ALL, {"--vram-budget", NULL, MM_FLAG_CUSTOM, &p->vram_budget,
               "device memory per GPU the memory plan may use (default: free minus 1.5 GiB); `mmh3 check` shows the plan",
               .arg = "GiB", .accepted = "a number of GiB above 0, e.g. 22 or 30.5", .apply = apply_budget,
               .id = MM_EF_VRAM_BUDGET}},
        {ALL, {"--gpus", NULL, MM_FLAG_INT, &p->gpus, "the DiT sequence-parallel over N GPUs from its device (H3: 1, 2, 4, 7, 8)",
               .arg = "N", .min = 1, .max = 64,
               .accepted = "1..64 GPUs dividing the DiT's head count (H3: 1, 2, 4, 7, 8)", .id = MM_EF_GPUS}},
        {ALL, {"--peer-copy", NULL, MM_FLAG_TRUE, &p->peer_copy,
               "copy GPU to GPU directly where `mmh3 check`'s probe of the pair passes (default: staged through "
               "host memory; also $MMH3_PEER_COPY=1)",
               .id = MM_EF_PEER_COPY}},
        {ALL, {"--ref-kv-cache", NULL, MM_FLAG_TRUE, &p->ref_kv_cache,
               "ref2va: reuse the reference rows' K/V after the first forward", .id = MM_EF_REF_KV}},
        {ALL, {"--no-ref-kv-cache", NULL, MM_FLAG_FALSE, &p->ref_kv_cache, "recompute them in every forward (the default)",
               .id = MM_EF_NO_REF_KV}},
        {ALL, {"--ref-short-edge", NULL, MM_FLAG_CUSTOM, &p->ref_image_short_edge,
               "ref2va picture short edge (default $MMH3_REF_SHORT_EDGE, else 2048, the reference's)", .arg = "N",
               .accepted = ACCEPT_EDGE, .apply = apply_edge, .id = MM_EF_REF_EDGE}},
        {ALL, {"--ref-video-short-edge", NULL, MM_FLAG_CUSTOM, &p->ref_video_short_edge,
               "ref2va video canvas short edge (default $MMH3_REF_VIDEO_SHORT_EDGE, else 768)", .arg = "N",
               .accepted = ACCEPT_EDGE, .apply = apply_edge, .id = MM_EF_REF_VIDEO_EDGE}},
        {ALL, {"--models-path", "--checkpoints --models", MM_FLAG_STRING, &p->checkpoints.models_path,
               "checkpoint folder ($MODELS_PATH layout; default $MODELS_PATH)", .arg = "DIR", .id = MM_EF_MODELS}},
        {ALL, {"--dit-fl2va-path", NULL, MM_FLAG_STRING, &override[MM_COMP_DIT_FL2VA],
               "the fl2va DiT file (instead of the folder's)", .arg = "F", .id = MM_EF_DIT_FL2VA}},
        {ALL, {"--dit-ref2va-path", NULL, MM_FLAG_STRING, &override[MM_COMP_DIT_REF2VA], "the ref2va DiT file",
               .arg = "F", .id = MM_EF_DIT_REF2VA}},
        {ALL, {"--text-encoder-path", NULL, MM_FLAG_STRING, &override[MM_COMP_TEXT_ENCODER], "the text encoder file",
               .arg = "F", .id = MM_EF_TEXT_ENCODER}},
        {ALL, {"--video-vae-path", NULL, MM_FLAG_STRING, &override[MM_COMP_VIDEO_VAE], "the video VAE file", .arg = "F",
               .id = MM_EF_VIDEO_VAE}},
        {ALL, {"--audio-vae-path", NULL, MM_FLAG_STRING, &override[MM_COMP_AUDIO_VAE], "the audio VAE file", .arg = "F",
               .id = MM_EF_AUDIO_VAE}},
        {ALL, {"--config-path", NULL, MM_FLAG_STRING, &override[MM_COMP_CONFIG],
               "the release config folder (tokenizer, configs)", .arg = "DIR", .id = MM_EF_CONFIG}},
        {ALL, {"--allow-download", NULL, MM_FLAG_TRUE, &p->checkpoints.allow_download,
               "fetch missing files from the Hugging Face hub", .id = MM_EF_DOWNLOAD}},
        {WRK | SRV, {"--preload", NULL, MM_FLAG_TRUE, &o->preload, "load the weights at start instead of on the first job",
                     .id = MM_EF_PRELOAD}},
        {ALL, {"--vae-int8", NULL, MM_FLAG_TRUE, &p->vae_int8,
               "lossy, opt-in: the video VAE decoder's block linears in int8 ConvRot (faster decode; docs/VAE.md)",
               .id = MM_EF_VAE_INT8}},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && n < MM_ENGINE_FLAGS_MAX; i++)
        if (all[i].cmds & cmd)
            rows[n++] = all[i].flag;
    return n;
}

const char *mm_engine_flags_worker_name(int id)
{
    mm_engine_options o;
    mm_flag rows[MM_ENGINE_FLAGS_MAX];
    int n = mm_engine_flags_rows(MM_ENGINE_CMD_WORKER, &o, rows);
    for (int i = 0; i < n; i++)
        if (rows[i].id == id)
            return rows[i].name;
    return NULL;
}

/* The environment stands in for a flag not given: a worker started by a
 * supervisor or a test can be given small references without new flags. */
static int edge_from_env(const char *name, int *edge, mm_error *err)
{
    const char *s = getenv(name);
    if (*edge || !s || !*s)
        return 0;
    if (!edge_ok(s, edge))
        return mm_fail(err, "%s=%s (environment): out of range; accepted: " ACCEPT_EDGE ", or unset", name, s);
    return 0;
}

/* The engine's on-disk cache folder: $MMH3_CACHE_DIR, else
 * $XDG_CACHE_HOME/mmh3, else ~/.cache/mmh3 (none without a home). */
static const char *cache_dir_from_env(void)
{
    static char dir[4096];
    const char *own = getenv("MMH3_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (own && *own)
        n = snprintf(dir, sizeof dir, "%s", own);
    else if (xdg && *xdg)
        n = snprintf(dir, sizeof dir, "%s/mmh3", xdg);
    else if (home && *home)
        n = snprintf(dir, sizeof dir, "%s/.cache/mmh3", home);
    else
        return NULL;
    return n > 0 && (size_t)n < sizeof dir ? dir : NULL;
}

int mm_engine_flags_finish(mm_engine_options *o, mm_error *err)
{
    const char *peer = getenv("MMH3_PEER_COPY");
    if (peer && *peer && strcmp(peer, "0") != 0 && strcmp(peer, "1") != 0)
        return mm_fail(err, "MMH3_PEER_COPY=%s (environment): accepted: 1 (direct GPU copies where the probe "
                            "passes), 0 or unset (staged through host memory)", peer);
    if (peer && strcmp(peer, "1") == 0)
        o->h3.peer_copy = true;
    if (edge_from_env("MMH3_REF_SHORT_EDGE", &o->h3.ref_image_short_edge, err) != 0 ||
        edge_from_env("MMH3_REF_VIDEO_SHORT_EDGE", &o->h3.ref_video_short_edge, err) != 0 ||
        mm_sp_options_from_env(&o->h3.sp, err) != 0)
        return -1;
    if (!o->h3.cache_dir)
        o->h3.cache_dir = cache_dir_from_env();
    return 0;
}
