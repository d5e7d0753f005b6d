/* mmh3 generate — render one clip (video + audio) to an mp4 with the real
 * engine, then print where the time went.
 *
 * The flags are settled by the request rules the HTTP API applies
 * (mm_request_settle, request/request.h), so a request means the same here and there:
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
#include <getopt.h>
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
#include "cli/generate_progress.h"
#include "engine/engines.h"
#include "request/request.h"
#include "engine/timing.h"
#include "io/checkpoint.h"
#include "media/probe.h"

#define PROG "mmh3 generate"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mmh3 generate (-p PROMPT | -f FILE) [options]\n"
            "\n"
            "Renders one clip with MiniMax-H3 (video + audio) to an mp4 and prints a timing table.\n"
            "\n"
            "prompt and output\n"
            "  -p, --prompt TEXT        the prompt\n"
            "  -f, --file FILE          read the prompt from FILE ('-' = stdin)\n"
            "  -o, --out PATH           output mp4 (default outputs/<date>_<time>-<prompt>.mp4; folders created)\n"
            "references\n"
            "  -i, --image PATH         an image or video, repeatable, in request order (fl2va: the first picture is\n"
            "                           the first frame and sets the canvas aspect; a video gives 4 evenly spaced\n"
            "                           frames. ref2va: up to 9 images and 3 videos)\n"
            "      --audio PATH         a reference audio clip (ref2va), repeatable, up to 3, at most 15 s used\n"
            "      --last-image PATH    fl2va: the last frame\n"
            "      --partition P        fl2va or ref2va (default ref2va with --audio, else fl2va)\n"
            "length, canvas, sampling\n"
            "      --frames N           %s (default 124)\n"
            "  -s, --seconds S          %s\n"
            "      --width W, --height H  %s\n"
            "      --size WxH|N         %s\n"
            "      --steps N            %s; N grid points = N-1 forwards\n"
            "      --seed N             %s (default: drawn, printed)\n"
            "      --no-audio           silent output (no audio stream)\n"
            "      --fast               fast mode: 8-bit attention on Hopper GPUs (int8 q·k, e4m3 p·v; exact elsewhere)\n"
            "output encoding\n"
            "      --crf N              %s\n"
            "      --preset P           x264 preset (default medium)\n"
            "      --frames-dir DIR     also write every frame as DIR/frame_NNNNN.png\n"
            "devices and weights (the same flags as mmh3 worker and mmh3 serve)\n",
            MM_ACCEPT_FRAMES, MM_ACCEPT_SECONDS, MM_ACCEPT_DIM, MM_ACCEPT_SIZE, MM_ACCEPT_STEPS, MM_ACCEPT_SEED,
            MM_ACCEPT_CRF);
    mm_engine_flags_usage(f, MM_ENGINE_CMD_GENERATE, 6, 27);
    fprintf(f,
            "      --dit-path F         the DiT file of this run's partition\n"
            "messages\n"
            "  -v, --verbose            engine events (files found, loads, cache hits)\n"
            "  -q, --quiet              errors only\n"
            "      --plain              plain progress lines even on a terminal\n"
            "      --dump-layout FILE   write the packed DiT layout (safetensors) for inspection\n"
            "      --dump-latents FILE  write the final target rows (safetensors) to compare runs\n");
}

static int bad(const char *flag, const char *value, const char *problem, const char *accepted)
{
    /* a media probe's message may already list what it accepts */
    if (strstr(problem, "; accepted: "))
        fprintf(stderr, PROG ": %s %s: %s\n", flag, value, problem);
    else
        fprintf(stderr, PROG ": %s %s: %s; accepted: %s\n", flag, value, problem, accepted);
    return 2;
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
} cli_progress;

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

/* ---- the request's fields as the command line gives them */

#define CLI_TEXT_FIELDS 10

/* What the request was given as, for naming flags in messages. */
typedef struct cli_request {
    const char *const *refs;
    const bool *ref_is_audio;
    int n_refs;
    const char *last_image;
    const char *file_arg;
    const char *texts[CLI_TEXT_FIELDS][2]; /* {API field name, the flag's value} */
} cli_request;

/* The flag of an API field name ("frames" -> "--frames"); NULL when none. */
static const char *flag_of(void *user, const char *field)
{
    (void)user;
    static const char *const flags[][2] = {
        {"frames", "--frames"},       {"seconds", "--seconds"}, {"width", "--width"},     {"height", "--height"},
        {"size", "--size"},           {"steps", "--steps"},     {"seed", "--seed"},       {"crf", "--crf"},
        {"preset", "--preset"},       {"partition", "--partition"}, {"no_audio", "--no-audio"},
        {"image_ids", "-i/--audio"}, {"last_image_id", "--last-image"}, {"prompt", "--prompt"},
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
    if (sscanf(e->field, "image_ids[%d]", &ref) == 1 && ref >= 0 && ref < cr->n_refs) {
        named = cr->ref_is_audio[ref] ? "--audio" : "--image";
        value = cr->refs[ref];
    } else if (strcmp(e->field, "last_image_id") == 0) {
        value = cr->last_image;
    }
    for (int i = 0; i < CLI_TEXT_FIELDS && !value; i++)
        if (cr->texts[i][0] && strcmp(cr->texts[i][0], e->field) == 0)
            value = cr->texts[i][1];
    if (strcmp(e->field, "prompt") == 0) {
        fprintf(stderr, PROG ": %s: the prompt %s; accepted: %s\n", cr->file_arg ? "--file" : "--prompt", message,
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
 * pictures and videos, --audio sounds). */
static int probe_references(void *user, mm_request_refs *refs, mm_request_error *re)
{
    const cli_request *cr = user;
    mm_error e = {{0}};
    for (int i = 0; i < refs->n_refs + (refs->has_last ? 1 : 0); i++) {
        mm_request_ref *r = &refs->refs[i];
        bool last = i == refs->n_refs, audio = !last && cr->ref_is_audio[i];
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

enum {
    O_AUDIO = 256, O_LAST, O_PARTITION, O_FRAMES, O_WIDTH, O_HEIGHT, O_SIZE, O_STEPS, O_SEED, O_NO_AUDIO, O_CRF,
    O_PRESET, O_FRAMES_DIR, O_DIT, O_PLAIN, O_DUMP_LAYOUT, O_DUMP_LATENTS, O_FAST,
};

int mm_cmd_generate(int argc, char **argv)
{
    double t_start = mm_timing_now();
    static const struct option own[] = {
        {"prompt", required_argument, 0, 'p'},
        {"file", required_argument, 0, 'f'},
        {"out", required_argument, 0, 'o'},
        {"image", required_argument, 0, 'i'},
        {"audio", required_argument, 0, O_AUDIO},
        {"last-image", required_argument, 0, O_LAST},
        {"partition", required_argument, 0, O_PARTITION},
        {"frames", required_argument, 0, O_FRAMES},
        {"seconds", required_argument, 0, 's'},
        {"width", required_argument, 0, O_WIDTH},
        {"height", required_argument, 0, O_HEIGHT},
        {"size", required_argument, 0, O_SIZE},
        {"steps", required_argument, 0, O_STEPS},
        {"seed", required_argument, 0, O_SEED},
        {"no-audio", no_argument, 0, O_NO_AUDIO},
        {"fast", no_argument, 0, O_FAST},
        {"crf", required_argument, 0, O_CRF},
        {"preset", required_argument, 0, O_PRESET},
        {"frames-dir", required_argument, 0, O_FRAMES_DIR},
        {"dit-path", required_argument, 0, O_DIT},
        {"verbose", no_argument, 0, 'v'},
        {"quiet", no_argument, 0, 'q'},
        {"plain", no_argument, 0, O_PLAIN},
        {"dump-layout", required_argument, 0, O_DUMP_LAYOUT},
        {"dump-latents", required_argument, 0, O_DUMP_LATENTS},
        {"help", no_argument, 0, 'h'},
    };
    struct option opts[sizeof own / sizeof own[0] + MM_ENGINE_FLAGS_MAX + 1];
    int n_opts = (int)(sizeof own / sizeof own[0]);
    memcpy(opts, own, sizeof own);
    mm_engine_flags_options(MM_ENGINE_CMD_GENERATE, opts, &n_opts);
    const char *prompt_arg = NULL, *file_arg = NULL, *out_arg = NULL, *last_image = NULL, *partition = NULL;
    const char *frames_arg = NULL, *seconds_arg = NULL, *width_arg = NULL, *height_arg = NULL, *size_arg = NULL;
    const char *seed_arg = NULL, *preset = NULL, *frames_dir = NULL, *dit_path = NULL;
    const char *steps_arg = NULL, *crf_arg = NULL;
    const char *refs[MM_MAX_REFERENCES + 1];
    bool ref_is_audio[MM_MAX_REFERENCES + 1];
    int n_refs = 0, verbosity = 1;
    bool no_audio = false, fast = false, plain_lines = false;
    mm_engine_options eo;
    mm_engine_options_defaults(&eo);
    int c, li = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":p:f:o:i:s:vqh", opts, &li)) != -1) {
        switch (c) {
        case 'p':
            if (prompt_arg)
                return bad("--prompt", "", "given twice", "one prompt");
            prompt_arg = optarg;
            break;
        case 'f':
            if (file_arg)
                return bad("--file", optarg, "given twice", "one prompt file");
            file_arg = optarg;
            break;
        case 'o': out_arg = optarg; break;
        case 'i':
        case O_AUDIO:
            if (n_refs == MM_MAX_REFERENCES)
                return bad(c == 'i' ? "--image" : "--audio", optarg, "too many references",
                           "at most 9 images, 3 videos and 3 audio clips");
            ref_is_audio[n_refs] = c == O_AUDIO;
            refs[n_refs++] = optarg;
            break;
        case O_LAST: last_image = optarg; break;
        case O_PARTITION: partition = optarg; break;
        case O_FRAMES: frames_arg = optarg; break;
        case 's': seconds_arg = optarg; break;
        case O_WIDTH: width_arg = optarg; break;
        case O_HEIGHT: height_arg = optarg; break;
        case O_SIZE: size_arg = optarg; break;
        case O_STEPS: steps_arg = optarg; break;
        case O_SEED: seed_arg = optarg; break;
        case O_NO_AUDIO: no_audio = true; break;
        case O_FAST: fast = true; break;
        case O_CRF: crf_arg = optarg; break;
        case O_PRESET: preset = optarg; break;
        case O_FRAMES_DIR: frames_dir = optarg; break;
        case O_DIT: dit_path = optarg; break;
        case 'v': verbosity = 2; break;
        case 'q': verbosity = 0; break;
        case O_PLAIN: plain_lines = true; break;
        case O_DUMP_LAYOUT: eo.h3.layout_dump = optarg; break;
        case O_DUMP_LATENTS: eo.h3.latents_dump = optarg; break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, PROG ": %s needs a value\n", argv[optind - 1]);
            return 2;
        default: {
            mm_error e = {{0}};
            if (!mm_engine_flags_owns(c)) {
                fprintf(stderr, PROG ": unknown option '%s' (see mmh3 generate --help)\n", argv[optind - 1]);
                return 2;
            }
            if (mm_engine_flags_apply(c, opts[li].name, optarg, &eo, &e) != 0) {
                fprintf(stderr, PROG ": %s\n", e.msg);
                return 2;
            }
            break;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s' (the prompt goes after -p)\n", argv[optind]);
        return 2;
    }

    {
        mm_error e = {{0}};
        if (mm_engine_flags_finish(&eo, &e) != 0) {
            fprintf(stderr, PROG ": %s\n", e.msg);
            return 2;
        }
    }

    /* ---- exclusive flags */
    if (prompt_arg && file_arg)
        return clash("--prompt", "--file");
    if (!prompt_arg && !file_arg) {
        fprintf(stderr, PROG ": no prompt; give -p TEXT or -f FILE ('-' reads stdin)\n");
        return 2;
    }

    /* ---- prompt */
    char *prompt_buf = NULL;
    size_t prompt_len;
    if (file_arg) {
        FILE *f = strcmp(file_arg, "-") == 0 ? stdin : fopen(file_arg, "rb");
        if (!f) {
            fprintf(stderr, PROG ": --file %s: %s\n", file_arg, strerror(errno));
            return 2;
        }
        prompt_buf = read_all(f, &prompt_len);
        int read_errno = errno;
        if (f != stdin)
            fclose(f);
        if (!prompt_buf) {
            fprintf(stderr, PROG ": --file %s: cannot read it: %s; accepted: a UTF-8 text file, or '-' for stdin\n",
                    file_arg, strerror(read_errno));
            return 2;
        }
        /* one trailing newline is the file's, not the prompt's */
        if (prompt_len && prompt_buf[prompt_len - 1] == '\n')
            prompt_buf[--prompt_len] = '\0';
    } else {
        prompt_len = strlen(prompt_arg);
    }
    const char *prompt = prompt_buf ? prompt_buf : prompt_arg;
    int rc = 2;
    mm_error e = {{0}};
    if (strlen(prompt) != prompt_len) {
        fprintf(stderr, PROG ": %s: contains a NUL byte; accepted: %s\n", file_arg ? "--file" : "--prompt",
                MM_ACCEPT_PROMPT);
        goto out;
    }

    /* ---- the request, settled by the rules every front end shares; a bad
     * reference file gets our one line, not FFmpeg's demuxer chatter */
    mm_request_input in;
    mm_request_input_init(&in);
    in.prompt = prompt;
    in.prompt_len = prompt_len;
    for (int i = 0; i < n_refs; i++)
        in.refs[in.n_refs++] = refs[i];
    in.last_image = last_image;
    in.has_no_audio = in.no_audio = no_audio;
    in.fast = fast;
    cli_request cr = {.refs = refs, .ref_is_audio = ref_is_audio, .n_refs = n_refs, .last_image = last_image,
                      .file_arg = file_arg,
                      .texts = {{"frames", frames_arg}, {"seconds", seconds_arg}, {"width", width_arg},
                                {"height", height_arg}, {"size", size_arg}, {"steps", steps_arg}, {"seed", seed_arg},
                                {"crf", crf_arg}, {"preset", preset}, {"partition", partition}}};
    mm_request_error re;
    for (int k = 0; k < CLI_TEXT_FIELDS; k++)
        if (cr.texts[k][1] && mm_request_input_set_text(&in, cr.texts[k][0], cr.texts[k][1], &re) != 0) {
            rc = refused(&re, &cr);
            goto out;
        }
    mm_media_set_verbose(-1);
    mm_request q;
    if (mm_request_settle(&in, probe_references, &cr, &q, &re) != 0) {
        rc = refused(&re, &cr);
        goto out;
    }
    mm_gen_request req = {0};
    for (int i = 0; i < q.n_refs; i++)
        req.references[req.n_references++] = (mm_reference){q.refs[i].kind, q.refs[i].source};
    req.last_image_path = q.has_last_image ? q.last_image.source : NULL;
    req.width = q.width;
    req.height = q.height;
    partition = q.partition;
    if (dit_path)
        eo.h3.checkpoints.override[strcmp(partition, "ref2va") == 0 ? MM_COMP_DIT_REF2VA : MM_COMP_DIT_FL2VA] = dit_path;

    /* ---- output */
    char out_default[512];
    if (!out_arg) {
        default_out(prompt, out_default, sizeof out_default);
        out_arg = out_default;
    }
    if (!*out_arg) {
        rc = bad("--out", "''", "empty", MM_ACCEPT_OUT);
        goto out;
    }
    if (mkdirs_parent(out_arg) != 0) {
        fprintf(stderr, PROG ": --out %s: cannot create its folder: %s\n", out_arg, strerror(errno));
        rc = 1;
        goto out;
    }
    if (check_out_writable(out_arg, &rc) != 0)
        goto out;
    if (frames_dir && mkdirs(frames_dir) != 0) {
        fprintf(stderr, PROG ": --frames-dir %s: cannot create it: %s\n", frames_dir, strerror(errno));
        rc = 1;
        goto out;
    }

    req.prompt = q.prompt;
    req.partition = partition;
    req.frames = q.frames;
    req.steps = q.steps;
    req.seed = q.seeds[0];
    req.no_audio = q.no_audio;
    req.fast = q.fast;
    req.crf = q.crf;
    req.preset = q.preset;
    req.out_path = out_arg;
    req.frames_dir = frames_dir;

    /* ---- messages */
    mm_media_set_verbose(0); /* libav* logs errors only; our own lines say what happens */
    cli_progress view;
    mm_progress_mode mode = verbosity == 0                          ? MM_PROGRESS_QUIET
                            : (!plain_lines && isatty(STDERR_FILENO)) ? MM_PROGRESS_BARS
                                                                    : MM_PROGRESS_PLAIN;
    mm_progress_view_init(&view.view, mode, stderr, dit_device(eo.h3.device), t_start);
    for (int i = 0; i < q.notes.n && verbosity > 0; i++)
        fprintf(stderr, PROG ": warning: %s\n", q.notes.msg[i]);
    if (verbosity > 0)
        fprintf(stderr, "%s %dx%d, %d frames (%.2f s), %d steps, seed %llu%s%s -> %s\n", partition, req.width,
                req.height, req.frames, req.frames / (double)MM_FPS, req.steps, (unsigned long long)req.seed,
                req.no_audio ? ", no audio" : "", req.fast ? ", fast mode" : "", out_arg);
    if (verbosity > 1) {
        eo.h3.log = on_log;
        eo.h3.log_user = &view;
    }

    /* ---- the engine */
    mm_engine *engine = NULL;
    double t0 = mm_timing_now();
    if (mm_engine_create("h3", &eo, &engine, &e) != 0) {
        mm_progress_view_finish(&view.view);
        fprintf(stderr, PROG ": %s\n", e.msg);
        rc = 1;
        goto out;
    }
    double resolve_s = mm_timing_now() - t0;
    snprintf(part_path, sizeof part_path, "%s.part", out_arg);
    signal(SIGINT, on_sigint);
    signal(SIGTERM, on_sigint);
    signal(SIGHUP, on_sigint);
    mm_gen_callbacks cb = {
        .progress = on_progress, .should_cancel = should_cancel, .user = &view, .stage_progress = on_stage};
    mm_gen_result res;
    memset(&res, 0, sizeof res);
    int grc = mm_engine_generate(engine, &req, &cb, &res, &e);
    mm_progress_view_finish(&view.view);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    mm_engine_destroy(engine);
    if (grc == MM_CANCELLED) {
        fprintf(stderr, PROG ": cancelled; nothing written\n");
        rc = 130;
        goto out;
    }
    if (grc != 0) {
        fprintf(stderr, PROG ": %s\n", e.msg);
        rc = 1;
        goto out;
    }
    if (interrupted) /* too late to cancel: the engine had already finished the clip */
        fprintf(stderr, PROG ": the interrupt came after the clip was finished; kept %s\n", out_arg);
    mm_timing_add(&res.timing, MM_TG_LOADING, "resolve checkpoints", resolve_s);
    res.timing.wall = mm_timing_now() - t_start;
    if (verbosity > 0) {
        char table[4096];
        mm_timing_format(&res.timing, table, sizeof table);
        fprintf(stderr, "\n%s", table);
        fprintf(stderr, "placement: %s\n", res.placement);
    }
    printf("%s\n", out_arg);
    rc = 0;
out:
    free(prompt_buf);
    return rc;
}
