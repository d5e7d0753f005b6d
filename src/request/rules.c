#include "request/rules.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mm_notes_add(mm_rule_notes *notes, const char *fmt, ...)
{
    if (!notes || notes->n >= MM_NOTES_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes->msg[notes->n++], sizeof notes->msg[0], fmt, ap);
    va_end(ap);
}

int mm_frames_snap_down(int frames)
{
    if (frames < MM_FRAMES_MIN)
        return 0;
    return (frames - 5) / 17 * 17 + 5;
}

int mm_frames_snap_up(int frames)
{
    if (frames <= MM_FRAMES_MIN)
        return MM_FRAMES_MIN;
    return (frames - 5 + 16) / 17 * 17 + 5;
}

int mm_rule_frames(long long frames, int *out, mm_rule_notes *notes, mm_error *err)
{
    if (frames < MM_FRAMES_MIN)
        return mm_fail(err, "%lld is below the minimum %d", frames, MM_FRAMES_MIN);
    if (frames > MM_FRAMES_MAX)
        return mm_fail(err, "%lld is above the maximum %d (%.2f s)", frames, MM_FRAMES_MAX,
                       (double)MM_FRAMES_MAX / MM_FPS);
    int g = mm_frames_snap_down((int)frames);
    if (g != frames)
        mm_notes_add(notes, "frames %lld is off the 17n+5 grid; using %d", frames, g);
    *out = g;
    return 0;
}

int mm_rule_seconds(double seconds, int *out, mm_rule_notes *notes, mm_error *err)
{
    if (!isfinite(seconds) || seconds <= 0)
        return mm_fail(err, "%g is not a positive duration", seconds);
    double exact = seconds * MM_FPS;
    if (exact > MM_FRAMES_MAX)
        return mm_fail(err, "%g s is above the maximum %.2f s (%d frames)", seconds,
                       (double)MM_FRAMES_MAX / MM_FPS, MM_FRAMES_MAX);
    /* The tolerance keeps 5.0 s from becoming 121 frames through rounding. */
    int f = (int)ceil(exact - 1e-6);
    int g = mm_frames_snap_up(f);
    if (g > MM_FRAMES_MAX)
        return mm_fail(err, "%g s is above the maximum %.2f s (%d frames)", seconds,
                       (double)MM_FRAMES_MAX / MM_FPS, MM_FRAMES_MAX);
    if (fabs(exact - g) > 1e-6)
        mm_notes_add(notes, "%g s is %d frames at 24 fps; snapped up to %d on the 17n+5 grid", seconds, f, g);
    *out = g;
    return 0;
}

int mm_rule_dim(const char *what, long long v, int *out, mm_rule_notes *notes, mm_error *err)
{
    if (v < MM_DIM_MIN)
        return mm_fail(err, "%lld is below the minimum %d", v, MM_DIM_MIN);
    if (v > MM_DIM_MAX)
        return mm_fail(err, "%lld is above the maximum %d", v, MM_DIM_MAX);
    /* Nearest, not down: 700 is closer to 704 than to 672. Halfway goes down,
     * so 720 (720p) keeps the model's own 16:9 canvas, 1280x704. */
    int g = (int)((v + MM_DIM_GRID / 2 - 1) / MM_DIM_GRID * MM_DIM_GRID);
    if (g > MM_DIM_MAX)
        g = MM_DIM_MAX;
    if (g != v)
        mm_notes_add(notes, "%s %lld is off the 32-px grid; using %d", what, v, g);
    *out = g;
    return 0;
}

int mm_rule_steps(long long steps, int *out, mm_error *err)
{
    if (steps < MM_STEPS_MIN || steps > MM_STEPS_MAX)
        return mm_fail(err, "%lld is out of range", steps);
    *out = (int)steps;
    return 0;
}

int mm_rule_crf(long long crf, int *out, mm_error *err)
{
    if (crf < 0 || crf > 51)
        return mm_fail(err, "%lld is out of range", crf);
    *out = (int)crf;
    return 0;
}

bool mm_rule_preset_valid(const char *preset)
{
    static const char *const presets[] = {"ultrafast", "superfast", "veryfast", "faster", "fast",
                                          "medium",    "slow",      "slower",   "veryslow"};
    for (size_t i = 0; preset && i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(preset, presets[i]) == 0)
            return true;
    return false;
}

int mm_rule_prompt(const char *s, size_t len, mm_error *err)
{
    size_t chars = 0;
    bool visible = false;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (n == 0 || i + n > len || (n == 2 && c < 0xC2))
            return mm_fail(err, "has invalid UTF-8 at byte %zu", i);
        for (size_t k = 1; k < n; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80)
                return mm_fail(err, "has invalid UTF-8 at byte %zu", i);
        if (c == 0)
            return mm_fail(err, "contains a NUL character at byte %zu", i);
        if (n > 1 || (c != ' ' && c != '\t' && c != '\n' && c != '\r'))
            visible = true;
        i += n;
        chars++;
    }
    if (!visible)
        return mm_fail(err, "is empty");
    if (chars > MM_PROMPT_MAX_CHARS)
        return mm_fail(err, "has %zu characters, more than %d", chars, MM_PROMPT_MAX_CHARS);
    return 0;
}

/* One term of a size: digits that strtoll would saturate are refused with
 * the digits as typed, not LLONG_MAX. */
static int size_term(const char *what, const char *digits, char **end, int *out, mm_rule_notes *notes, mm_error *err)
{
    errno = 0;
    long long v = strtoll(digits, end, 10);
    if (errno == ERANGE)
        return mm_fail(err, "%s %.*s is above the maximum %d", what, (int)(*end - digits), digits, MM_DIM_MAX);
    return mm_rule_dim(what, v, out, notes, err);
}

int mm_rule_size(const char *size, mm_canvas_spec *spec, mm_rule_notes *notes, mm_error *err)
{
    char *end;
    if (!size || !*size || *size < '0' || *size > '9')
        return mm_fail(err, "'%s' is not a size", size ? size : "");
    size_t first = strspn(size, "0123456789");
    if (size[first] == '\0')
        return size_term("size", size, &end, &spec->short_edge, notes, err);
    if (size[first] != 'x' || size[first + 1] < '0' || size[first + 1] > '9' ||
        size[first + 1 + strspn(size + first + 1, "0123456789")] != '\0')
        return mm_fail(err, "'%s' is not a size", size);
    if (size_term("width", size, &end, &spec->width, notes, err) < 0 ||
        size_term("height", size + first + 1, &end, &spec->height, notes, err) < 0)
        return -1;
    return 0;
}

int mm_rule_aspect_ratio(const char *ratio, int *aspect_w, int *aspect_h, mm_error *err)
{
    char *end;
    if (!ratio || *ratio < '0' || *ratio > '9')
        return mm_fail(err, "'%s' is not an aspect ratio", ratio ? ratio : "");
    long w = strtol(ratio, &end, 10);
    if (*end != ':' || end[1] < '0' || end[1] > '9')
        return mm_fail(err, "'%s' is not an aspect ratio", ratio);
    long h = strtol(end + 1, &end, 10);
    if (*end != '\0')
        return mm_fail(err, "'%s' is not an aspect ratio", ratio);
    if (w < 1 || h < 1 || w > 64 || h > 64)
        return mm_fail(err, "'%s' has a term outside 1..64", ratio);
    if (w > 4 * h || h > 4 * w)
        return mm_fail(err, "'%s' is more extreme than 4:1", ratio);
    *aspect_w = (int)w;
    *aspect_h = (int)h;
    return 0;
}

static int grid_clamp(double v)
{
    int g = (int)(v / MM_DIM_GRID) * MM_DIM_GRID;
    return g < MM_DIM_MIN ? MM_DIM_MIN : g > MM_DIM_MAX ? MM_DIM_MAX : g;
}

void mm_canvas_resolve(const mm_canvas_spec *spec, int *width, int *height)
{
    bool has_ref = spec->ref_width > 0 && spec->ref_height > 0;
    double aspect = has_ref ? (double)spec->ref_width / spec->ref_height : 16.0 / 9.0; /* w / h */
    if (spec->width && spec->height) {
        *width = spec->width, *height = spec->height;
    } else if (spec->width) {
        *width = spec->width, *height = grid_clamp(spec->width / aspect);
    } else if (spec->height) {
        *height = spec->height, *width = grid_clamp(spec->height * aspect);
    } else if (spec->short_edge) {
        if (aspect >= 1)
            *height = spec->short_edge, *width = grid_clamp(spec->short_edge * aspect);
        else
            *width = spec->short_edge, *height = grid_clamp(spec->short_edge / aspect);
    } else if (!has_ref) {
        *width = MM_DEFAULT_WIDTH, *height = MM_DEFAULT_HEIGHT;
    } else {
        /* Snap first, then cap: a 16:9 reference gives exactly 1344x768. */
        int w = grid_clamp(aspect >= 1 ? MM_REF_SHORT_EDGE * aspect : MM_REF_SHORT_EDGE);
        int h = grid_clamp(aspect >= 1 ? MM_REF_SHORT_EDGE : MM_REF_SHORT_EDGE / aspect);
        if ((double)w * h > MM_REF_MAX_AREA) {
            double s = sqrt((double)MM_REF_MAX_AREA / ((double)w * h));
            w = grid_clamp(w * s), h = grid_clamp(h * s);
        }
        *width = w, *height = h;
    }
}

int mm_rule_lora_name(const char *name, mm_error *err)
{
    size_t n = strlen(name);
    if (n == 0)
        return mm_fail(err, "is empty");
    if (n > MM_LORA_NAME_MAX)
        return mm_fail(err, "has %zu characters, more than %d", n, MM_LORA_NAME_MAX);
    /* A name becomes a path under the adapter folder: each '/'-separated
     * part non-empty and not hidden, so none climbs out ("..") or is absolute. */
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool part_start = i == 0 || name[i - 1] == '/';
        if (part_start && (c == '.' || c == '/'))
            return mm_fail(err, "'%.40s' has a part starting with '%c'", name, c);
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-' || c == '/'))
            return mm_fail(err, "'%.40s' has the character '%c' at %zu", name, c > ' ' && c < 127 ? c : '?', i);
    }
    if (name[n - 1] == '/')
        return mm_fail(err, "'%.40s' ends with '/'", name);
    return 0;
}

int mm_rule_lora_strength(double strength, mm_error *err)
{
    if (!isfinite(strength) || strength < -MM_LORA_STRENGTH_MAX || strength > MM_LORA_STRENGTH_MAX)
        return mm_fail(err, "%g is out of range", strength);
    return 0;
}

int mm_rule_preset_name(const char *name, mm_error *err)
{
    size_t n = strlen(name);
    if (n == 0)
        return mm_fail(err, "is empty");
    if (n > MM_PRESET_NAME_MAX)
        return mm_fail(err, "has %zu characters, more than %d", n, MM_PRESET_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return mm_fail(err, "'%.40s' is not a preset name", name);
    }
    return 0;
}

int mm_rule_sigmas(const double *sigmas, int n, mm_error *err)
{
    if (n < MM_SIGMAS_MIN || n > MM_SIGMAS_MAX)
        return mm_fail(err, "has %d sigmas, not %d..%d", n, MM_SIGMAS_MIN, MM_SIGMAS_MAX);
    for (int i = 0; i < n; i++) {
        if (!isfinite(sigmas[i]) || sigmas[i] < 0 || sigmas[i] > 1)
            return mm_fail(err, "sigma %d (%g) is outside 0..1", i, sigmas[i]);
        if (i && !(sigmas[i] < sigmas[i - 1]))
            return mm_fail(err, "sigma %d (%g) is not below sigma %d (%g)", i, sigmas[i], i - 1, sigmas[i - 1]);
    }
    if (sigmas[n - 1] != 0)
        return mm_fail(err, "ends at %g, not 0", sigmas[n - 1]);
    return 0;
}

void mm_number_shortest(double v, char *buf, size_t n)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}
