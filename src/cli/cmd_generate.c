/* mmh3 generate — render one clip (video + audio) to an mp4 with the real
 * engine, then print where the time went.
 *
 * The flags follow the request rules the HTTP API applies
 * (engine/request_rules.h), so a request means the same here and there:
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
#include "engine/request_rules.h"
#include "engine/timing.h"
#include "io/checkpoint.h"
#include "media/probe.h"
#include "model/sparse/sparse.h"

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
            "      --sparse [PRESET]    sparse attention (default preset sol; off without the flag). Presets:\n%s"
            "output encoding\n"
            "      --crf N              %s\n"
            "      --preset P           x264 preset (default medium)\n"
            "      --frames-dir DIR     also write every frame as DIR/frame_NNNNN.png\n"
            "devices and weights (the same flags as mmh3 worker and mmh3 serve)\n",
            MM_ACCEPT_FRAMES, MM_ACCEPT_SECONDS, MM_ACCEPT_DIM, MM_ACCEPT_SIZE, MM_ACCEPT_STEPS, MM_ACCEPT_SEED,
            mm_sparse_presets_help(), MM_ACCEPT_CRF);
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

static bool parse_ll(const char *s, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return !errno && end != s && *end == '\0';
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

enum {
    O_AUDIO = 256, O_LAST, O_PARTITION, O_FRAMES, O_WIDTH, O_HEIGHT, O_SIZE, O_STEPS, O_SEED, O_NO_AUDIO, O_CRF,
    O_PRESET, O_FRAMES_DIR, O_DIT, O_PLAIN, O_DUMP_LAYOUT, O_DUMP_LATENTS, O_FAST, O_SPARSE,
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
        {"sparse", optional_argument, 0, O_SPARSE},
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
    const char *seed_arg = NULL, *preset = MM_PRESET_DEFAULT, *frames_dir = NULL, *dit_path = NULL;
    const char *refs[MM_MAX_REFERENCES + 1];
    bool ref_is_audio[MM_MAX_REFERENCES + 1];
    int n_refs = 0, steps = MM_STEPS_DEFAULT, crf = MM_CRF_DEFAULT, verbosity = 1;
    bool no_audio = false, fast = false, plain_lines = false;
    const char *sparse = NULL;
    mm_engine_options eo;
    mm_engine_options_defaults(&eo);
    long long v;
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
        case O_PARTITION:
            if (strcmp(optarg, "fl2va") != 0 && strcmp(optarg, "ref2va") != 0)
                return bad("--partition", optarg, "unknown partition", MM_ACCEPT_PARTITION);
            partition = optarg;
            break;
        case O_FRAMES: frames_arg = optarg; break;
        case 's': seconds_arg = optarg; break;
        case O_WIDTH: width_arg = optarg; break;
        case O_HEIGHT: height_arg = optarg; break;
        case O_SIZE: size_arg = optarg; break;
        case O_STEPS: {
            mm_error e = {{0}};
            if (!parse_ll(optarg, &v))
                return bad("--steps", optarg, "not an integer", MM_ACCEPT_STEPS);
            if (mm_rule_steps(v, &steps, &e) != 0)
                return bad("--steps", optarg, e.msg, MM_ACCEPT_STEPS);
            break;
        }
        case O_SEED: seed_arg = optarg; break;
        case O_NO_AUDIO: no_audio = true; break;
        case O_FAST: fast = true; break;
        case O_SPARSE: {
            /* --sparse, --sparse=PRESET or --sparse PRESET (nothing positional follows otherwise) */
            if (!optarg && optind < argc && argv[optind][0] != '-')
                optarg = argv[optind++];
            mm_sparse_config sc;
            mm_error e = {{0}};
            if (mm_sparse_config_parse(optarg, &sc, &e) != 0)
                return bad("--sparse", optarg ? optarg : "", e.msg, "a preset listed by --help, e.g. sol");
            sparse = optarg ? optarg : "sol";
            break;
        }
        case O_CRF: {
            mm_error e = {{0}};
            if (!parse_ll(optarg, &v))
                return bad("--crf", optarg, "not an integer", MM_ACCEPT_CRF);
            if (mm_rule_crf(v, &crf, &e) != 0)
                return bad("--crf", optarg, e.msg, MM_ACCEPT_CRF);
            break;
        }
        case O_PRESET:
            if (!mm_rule_preset_valid(optarg))
                return bad("--preset", optarg, "unknown preset", MM_ACCEPT_PRESET);
            preset = optarg;
            break;
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
    if (frames_arg && seconds_arg)
        return clash("--frames", "--seconds");
    if (size_arg && (width_arg || height_arg))
        return clash("--size", width_arg ? "--width" : "--height");

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
    mm_rule_notes notes = {0};
    if (strlen(prompt) != prompt_len) {
        fprintf(stderr, PROG ": %s: contains a NUL byte; accepted: %s\n", file_arg ? "--file" : "--prompt",
                MM_ACCEPT_PROMPT);
        goto out;
    }
    if (mm_rule_prompt(prompt, prompt_len, &e) != 0) {
        fprintf(stderr, PROG ": %s: the prompt %s; accepted: %s\n", file_arg ? "--file" : "--prompt", e.msg,
                MM_ACCEPT_PROMPT);
        goto out;
    }

    /* ---- references: probe each, kinds decide partition and canvas; a bad
     * file gets our one line, not FFmpeg's demuxer chatter */
    mm_media_set_verbose(-1);
    mm_gen_request req = {0};
    int counts[3] = {0};
    int ref_w = 0, ref_h = 0;
    for (int i = 0; i < n_refs; i++) {
        mm_media_info info;
        const char *flag = ref_is_audio[i] ? "--audio" : "--image";
        if (mm_media_probe(refs[i], NULL, &info, &e) != 0) {
            rc = bad(flag, refs[i], e.msg, ref_is_audio[i] ? "an audio file (wav, mp3, flac, ogg, m4a)"
                                                             : "an image (PNG, JPEG, WebP, ...) or a video (mp4, ...)");
            goto out;
        }
        if (ref_is_audio[i] && info.kind != MM_MEDIA_AUDIO) {
            rc = bad(flag, refs[i], "is not audio", "an audio file; give pictures and videos with -i");
            goto out;
        }
        if (!ref_is_audio[i] && info.kind == MM_MEDIA_AUDIO) {
            rc = bad(flag, refs[i], "is audio", "an image or a video; give audio clips with --audio");
            goto out;
        }
        mm_reference_kind k = info.kind == MM_MEDIA_IMAGE ? MM_REF_IMAGE
                              : info.kind == MM_MEDIA_VIDEO ? MM_REF_VIDEO
                                                            : MM_REF_AUDIO;
        counts[k]++;
        req.references[req.n_references++] = (mm_reference){k, refs[i]};
        if (k != MM_REF_AUDIO && !ref_w) {
            ref_w = info.width;
            ref_h = info.height;
        }
    }
    if (counts[MM_REF_IMAGE] > MM_MAX_REF_IMAGES || counts[MM_REF_VIDEO] > MM_MAX_REF_VIDEOS ||
        counts[MM_REF_AUDIO] > MM_MAX_REF_AUDIO) {
        fprintf(stderr, PROG ": -i/--audio: %d images, %d videos and %d audio clips; accepted: at most %d images, "
                        "%d videos and %d audio clips\n",
                counts[0], counts[1], counts[2], MM_MAX_REF_IMAGES, MM_MAX_REF_VIDEOS, MM_MAX_REF_AUDIO);
        goto out;
    }
    if (!partition)
        partition = counts[MM_REF_AUDIO] ? "ref2va" : "fl2va";
    if (counts[MM_REF_AUDIO] && strcmp(partition, "fl2va") == 0) {
        fprintf(stderr, PROG ": --audio needs --partition ref2va (fl2va takes pictures and videos only)\n");
        goto out;
    }
    if (last_image) {
        mm_media_info info;
        if (strcmp(partition, "fl2va") != 0) {
            fprintf(stderr, PROG ": --last-image is fl2va only; ref2va takes references in order with -i\n");
            goto out;
        }
        if (mm_media_probe(last_image, NULL, &info, &e) != 0 || info.kind != MM_MEDIA_IMAGE) {
            rc = bad("--last-image", last_image, info.kind != MM_MEDIA_IMAGE && !e.msg[0] ? "is not a still image" : e.msg,
                     "a still image (PNG, JPEG, WebP, ...)");
            goto out;
        }
        req.last_image_path = last_image;
        if (!ref_w) {
            ref_w = info.width;
            ref_h = info.height;
        }
    }
    if (dit_path)
        eo.h3.checkpoints.override[strcmp(partition, "ref2va") == 0 ? MM_COMP_DIT_REF2VA : MM_COMP_DIT_FL2VA] = dit_path;

    /* ---- length and canvas */
    int frames = MM_FRAMES_DEFAULT;
    if (frames_arg) {
        if (!parse_ll(frames_arg, &v)) {
            rc = bad("--frames", frames_arg, "not an integer", MM_ACCEPT_FRAMES);
            goto out;
        }
        if (mm_rule_frames(v, &frames, &notes, &e) != 0) {
            rc = bad("--frames", frames_arg, e.msg, MM_ACCEPT_FRAMES);
            goto out;
        }
    } else if (seconds_arg) {
        char *end;
        double s = strtod(seconds_arg, &end);
        if (end == seconds_arg || *end) {
            rc = bad("--seconds", seconds_arg, "not a number", MM_ACCEPT_SECONDS);
            goto out;
        }
        if (mm_rule_seconds(s, &frames, &notes, &e) != 0) {
            rc = bad("--seconds", seconds_arg, e.msg, MM_ACCEPT_SECONDS);
            goto out;
        }
    }
    mm_canvas_spec spec = {.ref_width = ref_w, .ref_height = ref_h};
    if (size_arg && mm_rule_size(size_arg, &spec, &notes, &e) != 0) {
        rc = bad("--size", size_arg, e.msg, MM_ACCEPT_SIZE);
        goto out;
    }
    const char *dims[2] = {width_arg, height_arg};
    int *dst[2] = {&spec.width, &spec.height};
    for (int k = 0; k < 2; k++) {
        if (!dims[k])
            continue;
        const char *flag = k ? "--height" : "--width";
        if (!parse_ll(dims[k], &v)) {
            rc = bad(flag, dims[k], "not an integer", MM_ACCEPT_DIM);
            goto out;
        }
        if (mm_rule_dim(k ? "height" : "width", v, dst[k], &notes, &e) != 0) {
            rc = bad(flag, dims[k], e.msg, MM_ACCEPT_DIM);
            goto out;
        }
    }
    mm_canvas_resolve(&spec, &req.width, &req.height);

    /* ---- seed */
    uint64_t seed;
    if (seed_arg) {
        if (!parse_ll(seed_arg, &v) || v < 0 || v > MM_SEED_MAX) {
            rc = bad("--seed", seed_arg, "out of range", MM_ACCEPT_SEED);
            goto out;
        }
        seed = (uint64_t)v;
    } else {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        seed = r % ((uint64_t)MM_SEED_MAX + 1);
    }

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

    req.prompt = prompt;
    req.partition = partition;
    req.frames = frames;
    req.steps = steps;
    req.seed = seed;
    req.no_audio = no_audio;
    req.fast = fast;
    req.sparse = sparse;
    req.crf = crf;
    req.preset = preset;
    req.out_path = out_arg;
    req.frames_dir = frames_dir;

    /* ---- messages */
    mm_media_set_verbose(0); /* libav* logs errors only; our own lines say what happens */
    cli_progress view;
    mm_progress_mode mode = verbosity == 0                          ? MM_PROGRESS_QUIET
                            : (!plain_lines && isatty(STDERR_FILENO)) ? MM_PROGRESS_BARS
                                                                    : MM_PROGRESS_PLAIN;
    mm_progress_view_init(&view.view, mode, stderr, dit_device(eo.h3.device), t_start);
    for (int i = 0; i < notes.n && verbosity > 0; i++)
        fprintf(stderr, PROG ": warning: %s\n", notes.msg[i]);
    if (verbosity > 0)
        fprintf(stderr, "%s %dx%d, %d frames (%.2f s), %d steps, seed %llu%s%s%s%s -> %s\n", partition, req.width,
                req.height, frames, frames / (double)MM_FPS, steps, (unsigned long long)seed,
                no_audio ? ", no audio" : "", fast ? ", fast mode" : "", sparse ? ", sparse " : "",
                sparse ? sparse : "", out_arg);
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
