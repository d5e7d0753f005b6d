/* The engine flags' table and their rules (engine_flags.h). */
#include "cli/engine_flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "io/checkpoint.h"

#define GEN MM_ENGINE_CMD_GENERATE
#define WRK MM_ENGINE_CMD_WORKER
#define SRV MM_ENGINE_CMD_SERVE
#define ALL (GEN | WRK | SRV)

typedef struct engine_flag {
    const char *flag;  /* "--device" */
    int id;            /* MM_EF_* */
    unsigned cmds;     /* the commands that take this spelling */
    const char *value; /* the value's name in the help, NULL for a switch */
    const char *help;  /* NULL: an alias, listed with the first row of its id */
} engine_flag;

/* Rows of one id are adjacent; the first carries the help. `mmh3 serve`
 * spells the engine's threads --cpu-threads: its --threads is the FastCGI
 * pool's. */
static const engine_flag flags[] = {
    {"--device", MM_EF_DEVICE, ALL, "DEV", "cpu, cuda, cuda:N: every part there (default: automatic placement)"},
    {"--te-device", MM_EF_TE_DEVICE, ALL, "DEV", "the text encoder and the VAEs there"},
    {"--offload", MM_EF_OFFLOAD, ALL, NULL, "load the text encoder and VAEs per use and free them after"},
    {"--dtype", MM_EF_DTYPE, GEN, "bf16", "compute dtype of the DiT's residual stream (bf16, the checkpoint's)"},
    {"--threads", MM_EF_THREADS, GEN | WRK, "N", "CPU worker threads (default: one per core)"},
    {"--cpu-threads", MM_EF_THREADS, ALL, "N", NULL},
    {"--gpus", MM_EF_GPUS, ALL, "N", "the DiT sequence-parallel over N GPUs from its device (H3: 1, 2, 4, 7, 8)"},
    {"--ref-kv-cache", MM_EF_REF_KV, ALL, NULL, "ref2va: reuse the reference rows' K/V after the first forward"},
    {"--no-ref-kv-cache", MM_EF_NO_REF_KV, ALL, NULL, "recompute them in every forward (the default)"},
    {"--ref-short-edge", MM_EF_REF_EDGE, ALL, "N",
     "ref2va picture short edge (default $MMH3_REF_SHORT_EDGE, else 2048, the reference's)"},
    {"--ref-video-short-edge", MM_EF_REF_VIDEO_EDGE, ALL, "N",
     "ref2va video canvas short edge (default $MMH3_REF_VIDEO_SHORT_EDGE, else 768)"},
    {"--models-path", MM_EF_MODELS, ALL, "DIR", "checkpoint folder ($MODELS_PATH layout; default $MODELS_PATH)"},
    {"--checkpoints", MM_EF_MODELS, ALL, "DIR", NULL},
    {"--models", MM_EF_MODELS, ALL, "DIR", NULL},
    {"--dit-fl2va-path", MM_EF_DIT_FL2VA, ALL, "F", "the fl2va DiT file (instead of the folder's)"},
    {"--dit-ref2va-path", MM_EF_DIT_REF2VA, ALL, "F", "the ref2va DiT file"},
    {"--text-encoder-path", MM_EF_TEXT_ENCODER, ALL, "F", "the text encoder file"},
    {"--video-vae-path", MM_EF_VIDEO_VAE, ALL, "F", "the video VAE file"},
    {"--audio-vae-path", MM_EF_AUDIO_VAE, ALL, "F", "the audio VAE file"},
    {"--config-path", MM_EF_CONFIG, ALL, "DIR", "the release config folder (tokenizer, configs)"},
    {"--allow-download", MM_EF_DOWNLOAD, ALL, NULL, "fetch missing files from the Hugging Face hub"},
    {"--preload", MM_EF_PRELOAD, WRK | SRV, NULL, "load the weights at start instead of on the first job"},
};
#define N_FLAGS (int)(sizeof flags / sizeof flags[0])

static const engine_flag *first_of(int id)
{
    for (int i = 0; i < N_FLAGS; i++)
        if (flags[i].id == id)
            return &flags[i];
    return NULL;
}

void mm_engine_flags_options(mm_engine_cmd cmd, struct option *opts, int *n)
{
    for (int i = 0; i < N_FLAGS; i++) {
        if (!(flags[i].cmds & cmd))
            continue;
        opts[(*n)++] = (struct option){flags[i].flag + 2, flags[i].value ? required_argument : no_argument, 0,
                                       flags[i].id};
    }
    opts[*n] = (struct option){0, 0, 0, 0};
}

const char *mm_engine_flags_name(int c)
{
    const engine_flag *f = first_of(c);
    return f ? f->flag : "?";
}

bool mm_engine_flags_has_value(int c)
{
    const engine_flag *f = first_of(c);
    return f && f->value;
}

bool mm_flag_int(const char *s, long long lo, long long hi, int *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

#define ACCEPT_EDGE "a multiple of 32 in 64..4096"

static bool edge_ok(const char *s, int *out) { return mm_flag_int(s, 64, 4096, out) && *out % 32 == 0; }

int mm_engine_flags_apply(int c, const char *spelled, const char *v, mm_engine_options *o, mm_error *err)
{
    mm_pipeline_options *p = &o->h3;
    char given[64];
    if (spelled)
        snprintf(given, sizeof given, "--%s", spelled);
    const char *flag = spelled ? given : mm_engine_flags_name(c);
    switch (c) {
    case MM_EF_DEVICE:
    case MM_EF_TE_DEVICE: {
        mm_device d;
        mm_error e = {{0}};
        if (strcmp(v, "auto") != 0 && mm_device_parse(v, &d, &e) != 0)
            return mm_fail(err, "%s %s: not a device; accepted: auto, cpu, cuda, cuda:N", flag, v);
        *(c == MM_EF_DEVICE ? &p->device : &p->te_device) = v;
        return 0;
    }
    case MM_EF_OFFLOAD: p->offload = true; return 0;
    case MM_EF_DTYPE:
        if (strcmp(v, "bf16") != 0)
            return mm_fail(err, "%s %s: not available for the int8 ConvRot checkpoints; accepted: bf16 (the "
                                "released DiT computes in bf16 with int8 weights)", flag, v);
        return 0;
    case MM_EF_THREADS:
        if (!mm_flag_int(v, 1, 1024, &p->threads))
            return mm_fail(err, "%s %s: out of range; accepted: an integer 1..1024", flag, v);
        return 0;
    case MM_EF_GPUS:
        if (!mm_flag_int(v, 1, 64, &p->gpus))
            return mm_fail(err, "%s %s: out of range; accepted: 1..64 GPUs dividing the DiT's head count "
                                "(H3: 1, 2, 4, 7, 8)", flag, v);
        return 0;
    case MM_EF_REF_KV: p->ref_kv_cache = true; return 0;
    case MM_EF_NO_REF_KV: p->ref_kv_cache = false; return 0;
    case MM_EF_REF_EDGE:
    case MM_EF_REF_VIDEO_EDGE:
        if (!edge_ok(v, c == MM_EF_REF_EDGE ? &p->ref_image_short_edge : &p->ref_video_short_edge))
            return mm_fail(err, "%s %s: out of range; accepted: " ACCEPT_EDGE, flag, v);
        return 0;
    case MM_EF_MODELS: p->checkpoints.models_path = v; return 0;
    case MM_EF_DIT_FL2VA: p->checkpoints.override[MM_COMP_DIT_FL2VA] = v; return 0;
    case MM_EF_DIT_REF2VA: p->checkpoints.override[MM_COMP_DIT_REF2VA] = v; return 0;
    case MM_EF_TEXT_ENCODER: p->checkpoints.override[MM_COMP_TEXT_ENCODER] = v; return 0;
    case MM_EF_VIDEO_VAE: p->checkpoints.override[MM_COMP_VIDEO_VAE] = v; return 0;
    case MM_EF_AUDIO_VAE: p->checkpoints.override[MM_COMP_AUDIO_VAE] = v; return 0;
    case MM_EF_CONFIG: p->checkpoints.override[MM_COMP_CONFIG] = v; return 0;
    case MM_EF_DOWNLOAD: p->checkpoints.allow_download = true; return 0;
    case MM_EF_PRELOAD: o->preload = true; return 0;
    default: return mm_fail(err, "engine flag %d is unknown", c);
    }
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

int mm_engine_flags_finish(mm_engine_options *o, mm_error *err)
{
    if (edge_from_env("MMH3_REF_SHORT_EDGE", &o->h3.ref_image_short_edge, err) != 0 ||
        edge_from_env("MMH3_REF_VIDEO_SHORT_EDGE", &o->h3.ref_video_short_edge, err) != 0)
        return -1;
    return 0;
}

void mm_engine_flags_usage(FILE *f, mm_engine_cmd cmd, int indent, int column)
{
    for (int i = 0; i < N_FLAGS; i++) {
        if (!flags[i].help)
            continue;
        /* The flag as cmd spells it (the first row of the id it takes), then its other spellings. */
        const engine_flag *shown = NULL;
        char also[128] = "";
        for (int j = i; j < N_FLAGS && flags[j].id == flags[i].id; j++) {
            if (!(flags[j].cmds & cmd))
                continue;
            if (!shown) {
                shown = &flags[j];
            } else {
                size_t u = strlen(also);
                snprintf(also + u, sizeof also - u, "%s%s", u ? ", " : "", flags[j].flag);
            }
        }
        if (!shown)
            continue;
        char name[64];
        int w = snprintf(name, sizeof name, "%*s%s%s%s", indent, "", shown->flag, shown->value ? " " : "",
                         shown->value ? shown->value : "");
        fprintf(f, "%s%*s%s", name, w <= column - 2 ? column - w : 2, "", flags[i].help);
        if (also[0])
            fprintf(f, " (also %s)", also);
        fputc('\n', f);
    }
}
