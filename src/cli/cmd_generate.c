/* mmh3 generate — render one clip (video + audio) to an mp4 with the real
 * engine, then print where the time went.
 *
 * The flags are settled by the request rules the HTTP API applies
 * (mm_request_settle, request/request.h), so a request means the same here
 * and there:
 * 17n+5 frames (snapped down) or seconds (snapped up), a 32-px canvas
 * (snapped down with a warning), one axis following the first reference's
 * aspect or 16:9, no reference and no size → 1280x704, a reference and no
 * size → short edge 768 at its aspect, area capped at 1344x768. Each bad
 * value or clash is one line naming the flag and what is accepted (exit 2).
 *
 * Ctrl-C stops at the next DiT forward (a second one kills).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "backend/device.h"
#include "cli/engine_flags.h"
#include "cli/flags.h"
#include "cli/generate_progress.h"
#include "engine/engines.h"
#include "engine/timing.h"
#include "io/checkpoint.h"
#include "media/image.h"
#include "media/probe.h"
#include "model/lora/lora.h"
#include "model/sparse/sparse.h"
#include "request/request.h"
#include "sampler/schedule.h"

#define PROG "mmh3 generate"

/* --lora specs as given (name or path, strength); resolved and checked
 * before the engine starts (check_loras). */
typedef struct lora_args {
    int n;
    char name[MM_GEN_MAX_LORAS][1024];
    char path[MM_GEN_MAX_LORAS][2048];
    float strength[MM_GEN_MAX_LORAS];
} lora_args;

/* What the flags say, as given; the steps below check and settle it. */
typedef struct gen_args {
    const char *prompt, *file, *out, *last_image, *partition;
    const char *frames, *seconds, *width, *height, *size, *short_edge, *steps, *seed, *crf, *preset;
    const char *frames_dir, *preview_dir, *dit_path, *cache, *sampler, *sigmas, *sparse;
    int preview_interval_ms;
    const char *refs[MM_MAX_REFERENCES + 1];
    bool ref_is_audio[MM_MAX_REFERENCES + 1];
    int n_refs, verbosity;
    bool no_audio, fast, plain;
    lora_args loras;
    mm_engine_options eo;
} gen_args;

/* "PROG: FLAG VALUE: problem; accepted: ..." (cli/flags.h), exit status 2. */
static int bad(const char *flag, const char *value, const char *problem, const char *accepted)
{
    const mm_flags_cmd as = {.prog = PROG};
    return mm_flags_refuse(&as, flag, value, problem, accepted);
}

static int clash(const char *a, const char *b)
{
    fprintf(stderr, PROG ": %s and %s exclude each other; give one\n", a, b);
    return 2;
}

/* NULL with errno set when reading fails (a folder gives EISDIR) */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0)
            break;
        if (cap - n < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf && ferror(f)) {
        int saved = errno;
        free(buf);
        errno = saved ? saved : EIO;
        return NULL;
    }
    if (buf)
        buf[n] = '\0';
    else
        errno = ENOMEM;
    *len = n;
    return buf;
}

static int mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0755) == 0)
        return 0;
    struct stat st;
    if (errno != EEXIST)
        return -1;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR; /* a file of that name is in the way */
        return -1;
    }
    return 0;
}

static int mkdirs_parent(const char *file)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    return mkdirs(dir);
}

#define MM_ACCEPT_OUT "a file path in a writable folder (written as FILE.part, renamed into place when done)"

/* The mp4 is first created when the render is done; find out now, not after
 * the render, that it cannot be. The probe file is the writer's own FILE.part,
 * removed again unless it was there before. An existing FILE is left alone. */
static int check_out_writable(const char *out, int *rc)
{
    struct stat st;
    char part[4096];
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) {
        *rc = bad("--out", out, "is a folder", MM_ACCEPT_OUT);
        return -1;
    }
    if (snprintf(part, sizeof part, "%s.part", out) >= (int)sizeof part) {
        *rc = bad("--out", out, "path too long", MM_ACCEPT_OUT);
        return -1;
    }
    bool had_part = lstat(part, &st) == 0;
    int fd = open(part, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        char why[320];
        snprintf(why, sizeof why, "cannot write there (%s)", strerror(errno));
        *rc = bad("--out", out, why, MM_ACCEPT_OUT);
        return -1;
    }
    close(fd);
    if (!had_part)
        unlink(part);
    return 0;
}

/* outputs/20261129_143501-a-red-fox-runs-through.mp4 */
static void default_out(const char *prompt, char *buf, size_t n)
{
    char slug[48];
    size_t k = 0;
    bool dash = false;
    for (const char *p = prompt; *p && k < sizeof slug - 1; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c)) {
            if (dash && k > 0)
                slug[k++] = '-';
            if (k < sizeof slug - 1)
                slug[k++] = (char)tolower(c);
            dash = false;
        } else {
            dash = true;
        }
    }
    slug[k] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d_%H%M%S", &tm);
    snprintf(buf, n, "outputs/%s%s%s.mp4", stamp, k ? "-" : "", slug);
}

static volatile sig_atomic_t interrupted;
static char part_path[4096]; /* the writer's FILE.part, set before the handlers */

/* The first Ctrl-C (or SIGTERM/SIGHUP) cancels at the next step and the engine
 * removes what it began writing. A second one ends the process at once; it
 * still removes FILE.part (unlink is async-signal-safe), so no half-written
 * clip is left beside the output. */
static void on_sigint(int sig)
{
    if (interrupted) {
        if (part_path[0])
            unlink(part_path);
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    interrupted = 1;
}

static bool should_cancel(void *user)
{
    (void)user;
    return interrupted;
}

typedef struct cli_progress {
    mm_progress_view view;
    const char *preview_dir; /* --preview-dir, or NULL */
    int previews;            /* written there */
    bool preview_failed;     /* said once; the render goes on */
} cli_progress;

/* --preview-dir: every preview the engine makes, as DIR/preview_NNN.EXT
 * (NNN = forwards done), so the emerging clip can be looked at step by step. */
static void on_preview(void *user, const mm_preview *pv)
{
    cli_progress *c = user;
    char path[4096], line[4400];
    mm_error err = {{0}};
    int n = snprintf(path, sizeof path, "%s/preview_%03d.%s", c->preview_dir, pv->step, pv->ext);
    if (n > 0 && (size_t)n < sizeof path && mm_file_write_atomic(path, pv->data, pv->size, &err) == 0) {
        c->previews++;
        return;
    }
    if (!c->preview_failed) {
        snprintf(line, sizeof line, PROG ": warning: --preview-dir: %s", err.msg[0] ? err.msg : "path too long");
        mm_progress_view_line(&c->view, line);
    }
    c->preview_failed = true;
}

static void on_progress(void *user, const mm_progress *p) { mm_progress_view_update(&((cli_progress *)user)->view, p); }
static void on_stage(void *user, mm_stage s, int done, int total)
{
    mm_progress_view_stage(&((cli_progress *)user)->view, s, done, total);
}
static void on_log(void *user, const char *line)
{
    char buf[1100];
    snprintf(buf, sizeof buf, "  %s", line);
    mm_progress_view_line(&((cli_progress *)user)->view, buf);
}

/* The DiT's device from "dit=cuda:0 text_encoder=..." for the progress view. */
static mm_device dit_device(const char *device)
{
    mm_device d = mm_cpu();
    mm_error e = {{0}};
    if (device && *device && strcmp(device, "auto") != 0)
        mm_device_parse(device, &d, &e);
    else if (mm_cuda_device_count() > 0)
        d = mm_cuda(0);
    return d;
}

/* ---------------------------------------------------------------- flags */

static int add_reference(const mm_flag *f, char *value, mm_error *why)
{
    gen_args *a = f->target;
    if (a->n_refs == MM_MAX_REFERENCES)
        return mm_fail(why, "too many references");
    a->ref_is_audio[a->n_refs] = f->set_int;
    a->refs[a->n_refs++] = value;
    return 0;
}

static int add_lora(const mm_flag *f, char *value, mm_error *why)
{
    lora_args *la = &((gen_args *)f->target)->loras;
    if (la->n == MM_GEN_MAX_LORAS)
        return mm_fail(why, "too many adapters");
    if (mm_lora_parse_spec(value, la->name[la->n], sizeof la->name[0], &la->strength[la->n], why) != 0)
        return -1;
    la->n++;
    return 0;
}

#define ACCEPT_REFS "at most 9 images, 3 videos and 3 audio clips"

static mm_flags_result parse_flags(gen_args *a, int argc, char **argv)
{
    char sparse_presets[4096];
    snprintf(sparse_presets, sizeof sparse_presets, "\nsparse attention presets (--sparse PRESET[:key=value,...]):\n%s",
             mm_sparse_presets_help());
    mm_flag engine[MM_ENGINE_FLAGS_MAX];
    int n_engine = mm_engine_flags_rows(MM_ENGINE_CMD_GENERATE, &a->eo, engine);
    const mm_flag rows[] = {
        {.kind = MM_FLAG_SECTION, .help = "prompt and output"},
        {"--prompt", "-p", MM_FLAG_STRING, &a->prompt, "the prompt", .arg = "TEXT", .accepted = MM_ACCEPT_PROMPT,
         .once = true},
        {"--file", "-f", MM_FLAG_STRING, &a->file, "read the prompt from FILE ('-' = stdin)", .arg = "FILE",
         .once = true},
        {"--out", "-o", MM_FLAG_STRING, &a->out,
         "output mp4 (default outputs/<date>_<time>-<prompt>.mp4; folders created)", .arg = "PATH"},
        {.kind = MM_FLAG_SECTION, .help = "references"},
        {"--image", "-i", MM_FLAG_CUSTOM, a,
         "an image or video, repeatable, in request order (fl2va: the first picture is the first frame and sets the "
         "canvas aspect; a video gives 4 evenly spaced frames. ref2va: up to 9 images and 3 videos)",
         .arg = "PATH", .accepted = ACCEPT_REFS, .apply = add_reference, .set_int = 0},
        {"--audio", NULL, MM_FLAG_CUSTOM, a,
         "a reference audio clip (ref2va), repeatable, up to 3, at most 15 s used", .arg = "PATH",
         .accepted = ACCEPT_REFS, .apply = add_reference, .set_int = 1},
        {"--last-image", NULL, MM_FLAG_STRING, &a->last_image, "fl2va: the last frame", .arg = "PATH"},
        {"--partition", NULL, MM_FLAG_STRING, &a->partition, "fl2va or ref2va (default ref2va with --audio, else fl2va)",
         .arg = "P", .accepted = MM_ACCEPT_PARTITION},
        {.kind = MM_FLAG_SECTION, .help = "length, canvas, sampling"},
        {"--frames", NULL, MM_FLAG_STRING, &a->frames, MM_ACCEPT_FRAMES " (default 124)", .arg = "N",
         .accepted = MM_ACCEPT_FRAMES},
        {"--seconds", "-s", MM_FLAG_STRING, &a->seconds, MM_ACCEPT_SECONDS, .arg = "S", .accepted = MM_ACCEPT_SECONDS},
        {"--width", NULL, MM_FLAG_STRING, &a->width, "the canvas width: " MM_ACCEPT_DIM, .arg = "W",
         .accepted = MM_ACCEPT_DIM},
        {"--height", NULL, MM_FLAG_STRING, &a->height, "the canvas height: " MM_ACCEPT_DIM, .arg = "H",
         .accepted = MM_ACCEPT_DIM},
        {"--size", NULL, MM_FLAG_STRING, &a->size, MM_ACCEPT_SIZE, .arg = "WxH|N", .accepted = MM_ACCEPT_SIZE},
        {"--short-edge", NULL, MM_FLAG_STRING, &a->short_edge, MM_ACCEPT_SHORT_EDGE, .arg = "N",
         .accepted = MM_ACCEPT_SHORT_EDGE},
        {"--steps", NULL, MM_FLAG_STRING, &a->steps, MM_ACCEPT_STEPS "; N grid points = N-1 forwards", .arg = "N",
         .accepted = MM_ACCEPT_STEPS},
        {"--sampler", NULL, MM_FLAG_STRING, &a->sampler, "a few-step schedule (docs/PIPELINE.md), or default",
         .arg = "NAME"},
        {"--sigmas", NULL, MM_FLAG_STRING, &a->sigmas,
         "a custom σ list (strictly decreasing in [0, 1], ending at 0; the audio list defaults to the video one "
         "remapped to the audio shift)",
         .arg = "V0,...,0[;A0,...,0]"},
        {"--seed", NULL, MM_FLAG_STRING, &a->seed, MM_ACCEPT_SEED_NUMBER " (default: drawn, printed)", .arg = "N",
         .accepted = MM_ACCEPT_SEED_NUMBER},
        {"--no-audio", NULL, MM_FLAG_TRUE, &a->no_audio, .help = "silent output (no audio stream)"},
        {"--fast", NULL, MM_FLAG_TRUE, &a->fast,
         .help = "fast mode: 8-bit attention on Hopper GPUs (int8 q·k, e4m3 p·v; exact elsewhere)"},
        {"--sparse", NULL, MM_FLAG_STRING, &a->sparse,
         "sparse attention, lossy (default off; alone: preset sol): the main blocks attend exactly only where a "
         "block's score says it matters (docs/SPARSE.md); the presets are listed below",
         .arg = "PRESET", .implicit = "sol"},
        {"--lora", NULL, MM_FLAG_CUSTOM, a,
         "a LoRA adapter with strength S (default 1), repeatable, up to 8: a file, or a name in $MODELS_PATH/loras "
         "(\".safetensors\" optional); applied as a separate branch, never merged into the int8 weights "
         "(docs/LORA.md)",
         .arg = "FILE[:S]", .accepted = MM_ACCEPT_LORA, .apply = add_lora},
        {"--cache", NULL, MM_FLAG_STRING, &a->cache,
         "step caching, lossy (default off): fbc[:high|medium|low|sana|THRESHOLD] or teacache[:vllm|rtx4090|THRESHOLD] "
         "skips the blocks of forwards that change little (docs/CACHING.md)",
         .arg = "SPEC", .accepted = MM_ACCEPT_CACHE},
        {.kind = MM_FLAG_SECTION, .help = "output encoding"},
        {"--crf", NULL, MM_FLAG_STRING, &a->crf, MM_ACCEPT_CRF, .arg = "N", .accepted = MM_ACCEPT_CRF},
        {"--preset", NULL, MM_FLAG_STRING, &a->preset, "x264 preset (default medium)", .arg = "P",
         .accepted = MM_ACCEPT_PRESET},
        {"--frames-dir", NULL, MM_FLAG_STRING, &a->frames_dir, "also write every frame as DIR/frame_NNNNN.png",
         .arg = "DIR"},
        {"--preview-dir", NULL, MM_FLAG_STRING, &a->preview_dir,
         "write the live previews as DIR/preview_NNN.jpg (NNN = forwards done): the latent frames of the clean "
         "estimate side by side, 256 px high",
         .arg = "DIR"},
        {"--preview-interval", NULL, MM_FLAG_INT, &a->preview_interval_ms,
         "at most one preview per MS milliseconds (default 0: after every forward)", .arg = "MS", .min = 0,
         .max = 3600000},
        {.kind = MM_FLAG_SECTION, .help = "devices and weights (the same flags as mmh3 worker and mmh3 serve)"},
        {.kind = MM_FLAG_GROUP, .rows = engine, .n_rows = n_engine},
        {"--dit-path", NULL, MM_FLAG_STRING, &a->dit_path, "the DiT file of this run's partition", .arg = "F"},
        {.kind = MM_FLAG_SECTION, .help = "messages"},
        {"--verbose", "-v", MM_FLAG_SET_INT, &a->verbosity, "engine events (files found, loads, cache hits)",
         .set_int = 2},
        {"--quiet", "-q", MM_FLAG_SET_INT, &a->verbosity, "errors only", .set_int = 0},
        {"--plain", NULL, MM_FLAG_TRUE, &a->plain, .help = "plain progress lines even on a terminal"},
        {"--dump-layout", NULL, MM_FLAG_STRING, &a->eo.h3.layout_dump,
         "write the packed DiT layout (safetensors) for inspection", .arg = "FILE"},
        {"--dump-latents", NULL, MM_FLAG_STRING, &a->eo.h3.latents_dump,
         "write the final target rows (safetensors) to compare runs", .arg = "FILE"},
        {"--help", "-h", MM_FLAG_HELP, NULL, .help = "this text"},
    };
    const mm_flags_cmd cmd = {
        .prog = PROG,
        .synopsis = "usage: mmh3 generate (-p PROMPT | -f FILE) [options]\n"
                    "\n"
                    "Renders one clip with MiniMax-H3 (video + audio) to an mp4 and prints a timing table.\n"
                    "\n",
        .epilogue = sparse_presets,
        .positional_hint = "the prompt goes after -p",
        .rows = rows,
        .n_rows = MM_FLAGS_COUNT(rows),
        .help_column = 27,
    };
    return mm_flags_parse(&cmd, argc, argv);
}

/* One prompt, from -p or -f. */
static int check_prompt_flags(const gen_args *a)
{
    if (a->prompt && a->file)
        return clash("--prompt", "--file");
    if (!a->prompt && !a->file) {
        fprintf(stderr, PROG ": no prompt; give -p TEXT or -f FILE ('-' reads stdin)\n");
        return 2;
    }
    return 0;
}

/* --------------------------------------------------------------- prompt */

/* The prompt from -p or -f (the prompt rule is settle's); *buf owns what -f
 * read. */
static int read_prompt(const gen_args *a, char **buf, const char **prompt)
{
    size_t len;
    *buf = NULL;
    if (a->file) {
        FILE *f = strcmp(a->file, "-") == 0 ? stdin : fopen(a->file, "rb");
        if (!f) {
            fprintf(stderr, PROG ": --file %s: %s\n", a->file, strerror(errno));
            return 2;
        }
        *buf = read_all(f, &len);
        int read_errno = errno;
        if (f != stdin)
            fclose(f);
        if (!*buf) {
            fprintf(stderr, PROG ": --file %s: cannot read it: %s; accepted: a UTF-8 text file, or '-' for stdin\n",
                    a->file, strerror(read_errno));
            return 2;
        }
        /* one trailing newline is the file's, not the prompt's */
        if (len && (*buf)[len - 1] == '\n')
            (*buf)[--len] = '\0';
        *prompt = *buf;
    } else {
        len = strlen(a->prompt);
        *prompt = a->prompt;
    }
    if (strlen(*prompt) != len)
        return bad(a->file ? "--file" : "--prompt", NULL, "contains a NUL byte", MM_ACCEPT_PROMPT);
    return 0;
}

/* ------------------------------------------------------- request policy */

#define CLI_TEXT_FIELDS 11

/* What the request was given as, for naming flags in messages. */
typedef struct cli_request {
    const gen_args *a;
    const char *texts[CLI_TEXT_FIELDS][2]; /* {API field name, the flag's value} */
} cli_request;

/* The flag of an API field name ("frames" -> "--frames"); NULL when none. */
static const char *flag_of(void *user, const char *field)
{
    (void)user;
    static const char *const flags[][2] = {
        {"frames", "--frames"},       {"seconds", "--seconds"},         {"width", "--width"},
        {"height", "--height"},       {"size", "--size"},               {"steps", "--steps"},
        {"short_edge", "--short-edge"},
        {"seed", "--seed"},           {"crf", "--crf"},                 {"preset", "--preset"},
        {"partition", "--partition"}, {"no_audio", "--no-audio"},       {"image_ids", "-i/--audio"},
        {"last_image_id", "--last-image"}, {"prompt", "--prompt"},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (strcmp(flags[i][0], field) == 0)
            return flags[i][1];
    return NULL;
}

/* A refused request as one line: "mmh3 generate: --frames 3: 3 is below the
 * minimum 5; accepted: ..."; exit status 2. */
static int refused(const mm_request_error *e, const cli_request *cr)
{
    char message[sizeof e->message], accepted[sizeof e->accepted], flag[4200];
    mm_request_render(e->message, flag_of, NULL, message, sizeof message);
    mm_request_render(e->accepted, flag_of, NULL, accepted, sizeof accepted);
    const char *value = NULL, *named = flag_of(NULL, e->field);
    int ref = -1;
    if (sscanf(e->field, "image_ids[%d]", &ref) == 1 && ref >= 0 && ref < cr->a->n_refs) {
        named = cr->a->ref_is_audio[ref] ? "--audio" : "--image";
        value = cr->a->refs[ref];
    } else if (strcmp(e->field, "last_image_id") == 0) {
        value = cr->a->last_image;
    }
    for (int i = 0; i < CLI_TEXT_FIELDS && !value; i++)
        if (cr->texts[i][0] && strcmp(cr->texts[i][0], e->field) == 0)
            value = cr->texts[i][1];
    if (strcmp(e->field, "prompt") == 0) {
        fprintf(stderr, PROG ": %s: the prompt %s; accepted: %s\n", cr->a->file ? "--file" : "--prompt", message,
                accepted);
        return 2;
    }
    /* "--image a.png" or, for a field as a whole, "-i/--audio" */
    snprintf(flag, sizeof flag, "%s%s%s", named ? named : e->field, value ? " " : "", value ? value : "");
    if (strstr(message, "; accepted: "))
        fprintf(stderr, PROG ": %s: %s\n", flag, message);
    else
        fprintf(stderr, PROG ": %s: %s; accepted: %s\n", flag, message, accepted);
    return 2;
}

/* The references are files: probed for their kind and size (-i takes
 * pictures and videos, --audio sounds); a bad file gets our one line, not
 * FFmpeg's demuxer chatter. */
static int probe_references(void *user, mm_request_refs *refs, mm_request_error *re)
{
    const cli_request *cr = user;
    mm_error e = {{0}};
    for (int i = 0; i < refs->n_refs + (refs->has_last ? 1 : 0); i++) {
        mm_request_ref *r = &refs->refs[i];
        bool last = i == refs->n_refs, audio = !last && cr->a->ref_is_audio[i];
        char field[32];
        snprintf(field, sizeof field, last ? "last_image_id" : "image_ids[%d]", i);
        mm_media_info info;
        if (mm_media_probe(r->source, NULL, &info, &e) != 0)
            return mm_request_fail(re, field,
                                   last    ? "a still image (PNG, JPEG, WebP, ...)"
                                   : audio ? "an audio file (wav, mp3, flac, ogg, m4a)"
                                           : "an image (PNG, JPEG, WebP, ...) or a video (mp4, ...)",
                                   "%s", e.msg);
        if (audio && info.kind != MM_MEDIA_AUDIO)
            return mm_request_fail(re, field, "an audio file; give pictures and videos with -i", "is not audio");
        if (!audio && !last && info.kind == MM_MEDIA_AUDIO)
            return mm_request_fail(re, field, "an image or a video; give audio clips with --audio", "is audio");
        r->kind = info.kind == MM_MEDIA_IMAGE ? MM_REF_IMAGE : info.kind == MM_MEDIA_VIDEO ? MM_REF_VIDEO : MM_REF_AUDIO;
        r->width = r->kind == MM_REF_AUDIO ? 0 : info.width;
        r->height = r->kind == MM_REF_AUDIO ? 0 : info.height;
        refs->found[i] = true;
    }
    return 0;
}

/* The request's common fields through mm_request_settle, the rules every
 * front end shares (partition, references, last frame, frames, canvas,
 * steps, seed, encoding, audio, fast mode); q owns what req points into. */
static int settle_common(const gen_args *a, const char *prompt, mm_request *q, mm_gen_request *req)
{
    mm_request_input in;
    mm_request_input_init(&in);
    in.prompt = prompt;
    in.prompt_len = strlen(prompt);
    for (int i = 0; i < a->n_refs; i++)
        in.refs[in.n_refs++] = a->refs[i];
    in.last_image = a->last_image;
    in.has_no_audio = in.no_audio = a->no_audio;
    in.fast = a->fast;
    cli_request cr = {.a = a,
                      .texts = {{"frames", a->frames}, {"seconds", a->seconds}, {"width", a->width},
                                {"height", a->height}, {"size", a->size}, {"steps", a->steps}, {"seed", a->seed},
                                {"crf", a->crf}, {"preset", a->preset}, {"partition", a->partition},
                                {"short_edge", a->short_edge}}};
    mm_request_error re;
    for (int k = 0; k < CLI_TEXT_FIELDS; k++)
        if (cr.texts[k][1] && mm_request_input_set_text(&in, cr.texts[k][0], cr.texts[k][1], &re) != 0)
            return refused(&re, &cr);
    mm_media_set_verbose(-1);
    if (mm_request_settle(&in, probe_references, &cr, q, &re) != 0)
        return refused(&re, &cr);
    for (int i = 0; i < q->n_refs; i++)
        req->references[req->n_references++] = (mm_reference){q->refs[i].kind, q->refs[i].source};
    req->last_image_path = q->has_last_image ? q->last_image.source : NULL;
    req->prompt = q->prompt;
    req->partition = q->partition;
    req->width = q->width;
    req->height = q->height;
    req->frames = q->frames;
    req->steps = q->steps;
    req->seed = q->seeds[0];
    req->no_audio = q->no_audio;
    req->fast = q->fast;
    req->crf = q->crf;
    req->preset = q->preset;
    return 0;
}

/* A few-step schedule: a preset or a custom list, checked here against the
 * release's shifts (the engine rebuilds it with the loaded config's); an
 * explicit --steps is the release grid, so an adapter's own sampler then
 * stays unused. */
static int settle_schedule(const gen_args *a, mm_gen_request *req)
{
    mm_error e = {{0}};
    mm_schedule s;
    if (a->sampler && a->sigmas)
        return clash("--sampler", "--sigmas");
    if (a->steps && (a->sigmas || (a->sampler && strcmp(a->sampler, "default") != 0))) /* a schedule fixes its forwards */
        return clash("--steps", a->sigmas ? "--sigmas" : "--sampler");
    if (a->sampler && strcmp(a->sampler, "default") != 0) {
        if (mm_schedule_preset(a->sampler, &s, &e) != 0)
            return bad("--sampler", a->sampler, e.msg, mm_schedule_preset_names());
        mm_schedule_free(&s);
    }
    if (a->sigmas) {
        if (mm_schedule_parse(a->sigmas, 12.0f, 3.0f, &s, &e) != 0)
            return bad("--sigmas", a->sigmas, e.msg, "V0,...,0[;A0,...,0]");
        mm_schedule_free(&s);
    }
    req->sampler = a->sampler ? a->sampler : a->steps ? "default" : NULL;
    req->sigmas = a->sigmas;
    return 0;
}

/* Sparse attention: a preset with its overrides, checked now. */
static int settle_sparse(const gen_args *a, mm_gen_request *req)
{
    if (!a->sparse)
        return 0;
    mm_sparse_config sc;
    mm_error e = {{0}};
    if (mm_sparse_config_parse(a->sparse, &sc, &e) != 0)
        return bad("--sparse", a->sparse, e.msg, "a preset listed by --help, e.g. sol");
    req->sparse = a->sparse;
    return 0;
}

/* Step caching: parsed, then checked against the partition. */
static int settle_cache(const gen_args *a, mm_gen_request *req)
{
    mm_error e = {{0}};
    if (a->cache && mm_step_cache_parse(a->cache, &req->cache, &e) != 0)
        return bad("--cache", a->cache, e.msg, MM_ACCEPT_CACHE);
    if (mm_step_cache_check(&req->cache, strcmp(req->partition, "ref2va") == 0, &e) != 0) {
        fprintf(stderr, PROG ": --cache: %s\n", e.msg);
        return 2;
    }
    return 0;
}

/* The request policy in one step: the shared rules, then the CLI's few-step
 * schedule and step cache; q holds what req points into, and the notes of
 * what was snapped. */
static int settle_request(const gen_args *a, const char *prompt, mm_request *q, mm_gen_request *req)
{
    int rc;
    if ((rc = settle_common(a, prompt, q, req)) != 0 || (rc = settle_schedule(a, req)) != 0 ||
        (rc = settle_sparse(a, req)) != 0 || (rc = settle_cache(a, req)) != 0)
        return rc;
    return 0;
}

/* Each --lora resolves to a file whose header reads as an adapter (the
 * load names file and keys); its summary is shown, and the request carries
 * the resolved paths. */
static int check_loras(gen_args *a, mm_gen_request *req)
{
    lora_args *la = &a->loras;
    for (int i = 0; i < la->n; i++) {
        mm_error e = {{0}};
        mm_lora *l = NULL;
        mm_lora_open_opts o = {.header_only = true};
        if (mm_lora_resolve(la->name[i], a->eo.h3.checkpoints.models_path, true, la->path[i], sizeof la->path[0],
                            &e) != 0 ||
            mm_lora_open(&l, la->path[i], &o, &e) != 0) {
            fprintf(stderr, PROG ": --lora %s: %s\n", la->name[i], e.msg);
            return 2;
        }
        const mm_lora_summary *s = &l->summary;
        if (a->verbosity > 0) {
            fprintf(stderr, "lora %s (strength %g): %s, rank %d", l->name, la->strength[i], s->family, s->rank_min);
            if (s->rank_max != s->rank_min)
                fprintf(stderr, "..%d", s->rank_max);
            fprintf(stderr, ", alpha %g", s->alpha_min);
            if (s->alpha_max != s->alpha_min)
                fprintf(stderr, "..%g", s->alpha_max);
            fprintf(stderr, ", %s%s%s\n", s->targets, s->hint[0] ? "; " : "", s->hint);
            for (int w = 0; w < s->n_warnings; w++)
                fprintf(stderr, PROG ": warning: %s: %s\n", l->name, s->warnings[w]);
        }
        mm_lora_free(l);
        req->loras[i] = (mm_gen_lora){la->path[i], la->strength[i]};
    }
    req->n_loras = la->n;
    if (la->n)
        a->eo.h3.lora_paths = true;
    return 0;
}

/* --------------------------------------------------------------- output */

/* The output file (default name from the prompt) and --frames-dir, created
 * or probed now rather than after the render. */
static int prepare_output(const gen_args *a, const char *prompt, char *out_default, size_t n, const char **out)
{
    *out = a->out;
    if (!*out) {
        default_out(prompt, out_default, n);
        *out = out_default;
    }
    if (!**out)
        return bad("--out", "", "empty", MM_ACCEPT_OUT);
    if (mkdirs_parent(*out) != 0) {
        fprintf(stderr, PROG ": --out %s: cannot create its folder: %s\n", *out, strerror(errno));
        return 1;
    }
    int rc = 0;
    if (check_out_writable(*out, &rc) != 0)
        return rc;
    if (a->frames_dir && mkdirs(a->frames_dir) != 0) {
        fprintf(stderr, PROG ": --frames-dir %s: cannot create it: %s\n", a->frames_dir, strerror(errno));
        return 1;
    }
    if (a->preview_dir && mkdirs(a->preview_dir) != 0) {
        fprintf(stderr, PROG ": --preview-dir %s: cannot create it: %s\n", a->preview_dir, strerror(errno));
        return 1;
    }
    return 0;
}

/* --------------------------------------------------------------- render */

/* The progress view, the snapping warnings and the one line saying what
 * will be rendered. */
static void show_plan(gen_args *a, const mm_gen_request *req, const mm_rule_notes *notes, cli_progress *view,
                      double t_start)
{
    mm_media_set_verbose(0); /* libav* logs errors only; our own lines say what happens */
    mm_progress_mode mode = a->verbosity == 0                        ? MM_PROGRESS_QUIET
                            : (!a->plain && isatty(STDERR_FILENO)) ? MM_PROGRESS_BARS
                                                                   : MM_PROGRESS_PLAIN;
    mm_progress_view_init(&view->view, mode, stderr, dit_device(a->eo.h3.device), t_start);
    for (int i = 0; i < notes->n && a->verbosity > 0; i++)
        fprintf(stderr, PROG ": warning: %s\n", notes->msg[i]);
    char cache_name[64] = "";
    if (req->cache.kind != MM_STEP_CACHE_OFF) {
        memcpy(cache_name, ", cache ", 8);
        mm_step_cache_name(&req->cache, cache_name + 8, sizeof cache_name - 8);
    }
    char sampling[64];
    if (req->sigmas)
        snprintf(sampling, sizeof sampling, "a custom σ list");
    else if (req->sampler && strcmp(req->sampler, "default") != 0)
        snprintf(sampling, sizeof sampling, "sampler %s", req->sampler);
    else if (!a->steps && a->loras.n > 0)
        snprintf(sampling, sizeof sampling, "%d steps unless an adapter names its sampler", req->steps);
    else
        snprintf(sampling, sizeof sampling, "%d steps", req->steps);
    if (a->verbosity > 0)
        fprintf(stderr, "%s %dx%d, %d frames (%.2f s), %s, seed %llu%s%s%s%s%s -> %s\n", req->partition, req->width,
                req->height, req->frames, req->frames / (double)MM_FPS, sampling, (unsigned long long)req->seed,
                req->no_audio ? ", no audio" : "", req->fast ? ", fast mode" : "", req->sparse ? ", sparse " : "",
                req->sparse ? req->sparse : "", cache_name, req->out_path);
    if (a->verbosity > 1) {
        a->eo.h3.log = on_log;
        a->eo.h3.log_user = view;
    }
}

static void catch_interrupts(void (*handler)(int))
{
    signal(SIGINT, handler);
    signal(SIGTERM, handler);
    signal(SIGHUP, handler);
}

/* Loads the engine, renders with Ctrl-C as a cancel, prints the timing
 * table and the output's path. */
static int render(gen_args *a, const mm_gen_request *req, cli_progress *view, double t_start)
{
    mm_error e = {{0}};
    mm_engine *engine = NULL;
    double t0 = mm_timing_now();
    if (mm_engine_create("h3", &a->eo, &engine, &e) != 0) {
        mm_progress_view_finish(&view->view);
        fprintf(stderr, PROG ": %s\n", e.msg);
        return 1;
    }
    double resolve_s = mm_timing_now() - t0;
    snprintf(part_path, sizeof part_path, "%s.part", req->out_path);
    catch_interrupts(on_sigint);
    mm_gen_callbacks cb = {
        .progress = on_progress, .should_cancel = should_cancel, .user = view, .stage_progress = on_stage};
    view->preview_dir = a->preview_dir;
    if (a->preview_dir) {
        cb.preview = on_preview;
        cb.preview_interval_ms = a->preview_interval_ms;
    }
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    int grc = mm_engine_generate(engine, req, &cb, &res, &e);
    mm_progress_view_finish(&view->view);
    catch_interrupts(SIG_DFL);
    mm_engine_destroy(engine);
    if (grc == MM_CANCELLED) {
        fprintf(stderr, PROG ": cancelled; nothing written\n");
        return 130;
    }
    if (grc != 0) {
        fprintf(stderr, PROG ": %s\n", e.msg);
        return 1;
    }
    if (interrupted) /* too late to cancel: the engine had already finished the clip */
        fprintf(stderr, PROG ": the interrupt came after the clip was finished; kept %s\n", req->out_path);
    mm_timing_add(&res.timing, MM_TG_LOADING, "resolve checkpoints", resolve_s);
    res.timing.wall = mm_timing_now() - t_start;
    if (a->verbosity > 0) {
        char table[4096];
        mm_timing_format(&res.timing, table, sizeof table);
        fprintf(stderr, "\n%s", table);
        fprintf(stderr, "placement: %s\n", res.placement);
        if (a->preview_dir)
            fprintf(stderr, "previews: %d in %s\n", view->previews, a->preview_dir);
    }
    printf("%s\n", req->out_path);
    return 0;
}

/* ------------------------------------------------------------ the command */

static int generate(gen_args *a, const char *prompt, double t_start)
{
    mm_gen_request req = {0};
    mm_request q;
    char out_default[512];
    int rc;
    if ((rc = settle_request(a, prompt, &q, &req)) != 0)
        return rc;
    if (a->dit_path)
        a->eo.h3.checkpoints.override[strcmp(req.partition, "ref2va") == 0 ? MM_COMP_DIT_REF2VA : MM_COMP_DIT_FL2VA] =
            a->dit_path;
    if ((rc = prepare_output(a, prompt, out_default, sizeof out_default, &req.out_path)) != 0)
        return rc;
    req.frames_dir = a->frames_dir;
    /* The memory plan sizes the activations for this clip. */
    a->eo.h3.plan_width = req.width;
    a->eo.h3.plan_height = req.height;
    a->eo.h3.plan_frames = req.frames;
    if ((rc = check_loras(a, &req)) != 0)
        return rc;
    cli_progress view = {0};
    show_plan(a, &req, &q.notes, &view, t_start);
    return render(a, &req, &view, t_start);
}

int mm_cmd_generate(int argc, char **argv)
{
    double t_start = mm_timing_now();
    gen_args a = {.verbosity = 1};
    mm_engine_options_defaults(&a.eo);
    mm_flags_result parsed = parse_flags(&a, argc, argv);
    if (parsed != MM_FLAGS_RUN)
        return mm_flags_exit_status(parsed);
    mm_error e = {{0}};
    if (mm_engine_flags_finish(&a.eo, &e) != 0) {
        fprintf(stderr, PROG ": %s\n", e.msg);
        return 2;
    }
    int rc = check_prompt_flags(&a);
    if (rc != 0)
        return rc;
    char *prompt_buf;
    const char *prompt;
    if ((rc = read_prompt(&a, &prompt_buf, &prompt)) == 0)
        rc = generate(&a, prompt, t_start);
    free(prompt_buf);
    return rc;
}
