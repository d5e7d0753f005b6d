/* Fields given as text (command-line flags) -> mm_request_input: numbers
 * parsed whole ("22", not "22x" or ""), strings kept as they are. The values
 * are checked by mm_request_settle(), as for every front end. */
#include "request/request.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static bool parse_integer(const char *s, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return !errno && end != s && *end == '\0';
}

static bool parse_number(const char *s, double *v)
{
    char *end;
    *v = strtod(s, &end);
    return end != s && *end == '\0';
}

typedef enum text_kind { T_INTEGER, T_NUMBER, T_STRING } text_kind;

typedef struct text_field {
    const char *name;
    text_kind kind;
    const char *accepted;
    size_t has_at, value_at; /* offsets into mm_request_input; has_at = (size_t)-1: none */
} text_field;

#define NONE ((size_t)-1)
#define AT(m) offsetof(mm_request_input, m)

static const text_field fields[] = {
    {"frames", T_INTEGER, MM_ACCEPT_FRAMES, AT(has_frames), AT(frames)},
    {"seconds", T_NUMBER, MM_ACCEPT_SECONDS, AT(has_seconds), AT(seconds)},
    {"width", T_INTEGER, MM_ACCEPT_DIM, AT(has_width), AT(width)},
    {"height", T_INTEGER, MM_ACCEPT_DIM, AT(has_height), AT(height)},
    {"size", T_STRING, MM_ACCEPT_SIZE, NONE, AT(size)},
    {"short_edge", T_INTEGER, MM_ACCEPT_SHORT_EDGE, AT(has_short_edge), AT(short_edge)},
    {"aspect_ratio", T_STRING, MM_ACCEPT_ASPECT, NONE, AT(aspect_ratio)},
    {"steps", T_INTEGER, MM_ACCEPT_STEPS, AT(has_steps), AT(steps)},
    {"seed", T_INTEGER, MM_ACCEPT_SEED_NUMBER, AT(has_seed), AT(seed)},
    {"crf", T_INTEGER, MM_ACCEPT_CRF, AT(has_crf), AT(crf)},
    {"preset", T_STRING, MM_ACCEPT_PRESET, NONE, AT(preset)},
    {"partition", T_STRING, MM_ACCEPT_PARTITION, NONE, AT(partition)},
    {"sparse", T_STRING, MM_ACCEPT_SPARSE, NONE, AT(sparse)},
    {"cache", T_STRING, MM_ACCEPT_CACHE, NONE, AT(cache)},
};

int mm_request_input_set_text(mm_request_input *in, const char *field, const char *text, mm_request_error *err)
{
    char *base = (char *)in;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const text_field *f = &fields[i];
        if (strcmp(f->name, field) != 0)
            continue;
        if (f->kind == T_INTEGER && !parse_integer(text, (long long *)(base + f->value_at)))
            return mm_request_fail(err, field, f->accepted, "is not an integer");
        if (f->kind == T_NUMBER && !parse_number(text, (double *)(base + f->value_at)))
            return mm_request_fail(err, field, f->accepted, "is not a number");
        if (f->kind == T_STRING)
            *(const char **)(base + f->value_at) = text;
        if (f->has_at != NONE)
            *(bool *)(base + f->has_at) = true;
        return 0;
    }
    return mm_request_fail(err, field, NULL, "is not a field that can be given as text");
}
