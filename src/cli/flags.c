/* One flag parser for the mmh3 commands (flags.h). */
#include "cli/flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 256  /* flag rows of one command, groups included */
#define HELP_WIDTH 110
#define SHOWN_VALUE 60 /* longer values are cut in messages */

/* The command's flag rows, groups expanded, in table order. */
typedef struct flat {
    const mm_flag *row[MAX_ROWS];
    int n;
} flat;

static void flatten(const mm_flag *rows, int n, flat *out)
{
    for (int i = 0; i < n; i++) {
        if (rows[i].kind == MM_FLAG_GROUP)
            flatten(rows[i].rows, rows[i].n_rows, out);
        else if (rows[i].kind != MM_FLAG_SECTION && out->n < MAX_ROWS)
            out->row[out->n++] = &rows[i];
    }
}

static bool takes_value(const mm_flag *f)
{
    switch (f->kind) {
    case MM_FLAG_STRING:
    case MM_FLAG_INT:
    case MM_FLAG_DOUBLE:
    case MM_FLAG_CHOICE: return true;
    case MM_FLAG_CUSTOM: return f->arg != NULL;
    default: return false;
    }
}

/* The spellings of f: its name, then the words of its alias. */
typedef struct spelling {
    char text[64];
} spelling;

static int spellings(const mm_flag *f, spelling *out, int max)
{
    int n = 0;
    if (f->name && n < max)
        snprintf(out[n++].text, sizeof out[0].text, "%s", f->name);
    for (const char *p = f->alias; p && *p && n < max;) {
        size_t len = strcspn(p, " ");
        if (len) {
            snprintf(out[n++].text, sizeof out[0].text, "%.*s", (int)len, p);
        }
        p += len;
        p += strspn(p, " ");
    }
    return n;
}

static bool is_short(const char *s) { return s[0] == '-' && s[1] && s[1] != '-' && !s[2]; }

/* ------------------------------------------------------------ messages */

static FILE *err_of(const mm_flags_cmd *cmd) { return cmd->err ? cmd->err : stderr; }

/* The value as a message shows it: '' when empty, cut when long. */
static void show_value(const char *v, char *buf, size_t n)
{
    if (!*v)
        snprintf(buf, n, "''");
    else if (strlen(v) > SHOWN_VALUE)
        snprintf(buf, n, "%.*s...", SHOWN_VALUE - 3, v);
    else
        snprintf(buf, n, "%s", v);
}

/* What a value of f may be: the row's words, else what its kind accepts. */
static const char *accepted_of(const mm_flag *f, char *buf, size_t n)
{
    if (f->accepted)
        return f->accepted;
    switch (f->kind) {
    case MM_FLAG_INT: snprintf(buf, n, "an integer %.0f..%.0f", f->min, f->max); return buf;
    case MM_FLAG_DOUBLE:
        if (f->above_min)
            snprintf(buf, n, "a number > %g and <= %g", f->min, f->max);
        else
            snprintf(buf, n, "a number %g..%g", f->min, f->max);
        return buf;
    case MM_FLAG_CHOICE: {
        size_t k = 0;
        buf[0] = '\0';
        for (const char *p = f->choices; p && *p && k < n;) {
            size_t len = strcspn(p, " ");
            k += (size_t)snprintf(buf + k, n - k, "%s%.*s", k ? ", " : "", (int)len, p);
            p += len;
            p += strspn(p, " ");
        }
        return buf;
    }
    default: return NULL;
    }
}

int mm_flags_refuse(const mm_flags_cmd *cmd, const char *flag, const char *value, const char *problem,
                    const char *accepted)
{
    FILE *f = err_of(cmd);
    char shown[SHOWN_VALUE + 8];
    fprintf(f, "%s: %s", cmd->prog, flag);
    if (value) {
        show_value(value, shown, sizeof shown);
        fprintf(f, " %s", shown);
    }
    fprintf(f, ": %s", problem);
    if (accepted && !strstr(problem, "; accepted: "))
        fprintf(f, "; accepted: %s", accepted);
    fputc('\n', f);
    return 2;
}

static mm_flags_result say(const mm_flags_cmd *cmd, const char *fmt_what, const char *word, const char *accepted)
{
    FILE *f = err_of(cmd);
    fprintf(f, "%s: ", cmd->prog);
    fprintf(f, fmt_what, word);
    if (accepted)
        fprintf(f, "; accepted: %s", accepted);
    fputc('\n', f);
    return MM_FLAGS_BAD;
}

/* ------------------------------------------------------------- values */

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

/* Applies one value (NULL for a switch) to f; -1 with the problem in why. */
static int apply_value(const mm_flag *f, char *v, mm_error *why)
{
    switch (f->kind) {
    case MM_FLAG_TRUE: *(bool *)f->target = true; return 0;
    case MM_FLAG_FALSE: *(bool *)f->target = false; return 0;
    case MM_FLAG_SET_INT: *(int *)f->target = f->set_int; return 0;
    case MM_FLAG_SET_STR: *(const char **)f->target = f->set_str; return 0;
    case MM_FLAG_STRING: *(const char **)f->target = v; return 0;
    case MM_FLAG_INT: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (end == v || *end)
            return mm_fail(why, "not an integer");
        if (errno || x < (long long)f->min || x > (long long)f->max)
            return mm_fail(why, "out of range");
        *(int *)f->target = (int)x;
        return 0;
    }
    case MM_FLAG_DOUBLE: {
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end || isnan(x))
            return mm_fail(why, "not a number");
        if (!(f->above_min ? x > f->min : x >= f->min) || !(x <= f->max))
            return mm_fail(why, "out of range");
        *(double *)f->target = x;
        return 0;
    }
    case MM_FLAG_CHOICE:
        for (const char *p = f->choices; p && *p;) {
            size_t len = strcspn(p, " ");
            if (len && strlen(v) == len && strncmp(p, v, len) == 0) {
                *(const char **)f->target = v;
                return 0;
            }
            p += len;
            p += strspn(p, " ");
        }
        return mm_fail(why, "unknown value");
    case MM_FLAG_CUSTOM: return f->apply(f, v, why);
    default: return mm_fail(why, "not a flag");
    }
}

/* ------------------------------------------------------------- lookup */

typedef struct match {
    int row;                           /* index into flat, -1: none */
    char spelled[sizeof(spelling)];    /* the spelling it matched, in full */
    bool ambiguous;
    char candidates[256];
} match;

/* A long name: exact spellings first, else an unambiguous prefix (several
 * spellings of one row are one candidate). */
static void find_long(const flat *fl, const char *name, size_t len, match *m)
{
    m->row = -1;
    m->ambiguous = false;
    m->candidates[0] = '\0';
    int prefix_row = -1;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < fl->n; i++) {
            spelling sp[8];
            int n = spellings(fl->row[i], sp, 8);
            for (int k = 0; k < n; k++) {
                const char *s = sp[k].text;
                if (is_short(s))
                    continue;
                bool exact = strlen(s) == len && strncmp(s, name, len) == 0;
                bool prefix = strlen(s) > len && strncmp(s, name, len) == 0;
                if (pass == 0 && exact) {
                    m->row = i;
                    snprintf(m->spelled, sizeof m->spelled, "%.*s", (int)sizeof m->spelled - 1, s);
                    return;
                }
                if (pass == 1 && prefix) {
                    size_t u = strlen(m->candidates);
                    if (prefix_row != i)
                        snprintf(m->candidates + u, sizeof m->candidates - u, "%s%s", u ? ", " : "", s);
                    if (prefix_row >= 0 && prefix_row != i)
                        m->ambiguous = true;
                    if (prefix_row < 0) {
                        prefix_row = i;
                        snprintf(m->spelled, sizeof m->spelled, "%s", s);
                    }
                    break; /* one spelling per row */
                }
            }
        }
    }
    if (!m->ambiguous)
        m->row = prefix_row;
}

static int find_short(const flat *fl, char c, match *m)
{
    for (int i = 0; i < fl->n; i++) {
        spelling sp[8];
        int n = spellings(fl->row[i], sp, 8);
        for (int k = 0; k < n; k++)
            if (is_short(sp[k].text) && sp[k].text[1] == c) {
                m->row = i;
                memcpy(m->spelled, sp[k].text, sizeof m->spelled);
                return i;
            }
    }
    m->row = -1;
    return -1;
}

/* -------------------------------------------------------------- parse */

typedef struct parse_state {
    const mm_flags_cmd *cmd;
    flat fl;
    bool given[MAX_ROWS];
} parse_state;

/* Applies row `i` as spelled with value v (NULL for a switch). */
static mm_flags_result take(parse_state *ps, int i, const char *spelled, char *v)
{
    const mm_flags_cmd *cmd = ps->cmd;
    const mm_flag *f = ps->fl.row[i];
    char acc[512];
    if (f->kind == MM_FLAG_HELP) {
        mm_flags_help(cmd, cmd->out ? cmd->out : stdout);
        return MM_FLAGS_HELP;
    }
    if (f->once && ps->given[i]) {
        char once[96];
        snprintf(once, sizeof once, "%s once", f->name);
        mm_flags_refuse(cmd, spelled, v, "given twice", once);
        return MM_FLAGS_BAD;
    }
    ps->given[i] = true;
    mm_error why = {{0}};
    if (apply_value(f, v, &why) != 0) {
        mm_flags_refuse(cmd, spelled, v, why.msg, accepted_of(f, acc, sizeof acc));
        return MM_FLAGS_BAD;
    }
    if (cmd->seen && cmd->seen(cmd->user, f, spelled, v, &why) != 0) {
        mm_flags_refuse(cmd, spelled, v, why.msg, NULL);
        return MM_FLAGS_BAD;
    }
    return MM_FLAGS_RUN;
}

static mm_flags_result missing_value(parse_state *ps, int i, const char *spelled)
{
    const mm_flag *f = ps->fl.row[i];
    char acc[512], what[128];
    snprintf(what, sizeof what, "%s needs a value", spelled);
    const char *accepted = accepted_of(f, acc, sizeof acc);
    if (!accepted) { /* at least the form: "--out PATH" */
        snprintf(acc, sizeof acc, "%s %s", spelled, f->arg ? f->arg : "VALUE");
        accepted = acc;
    }
    return say(ps->cmd, "%s", what, accepted);
}

/* "--name", "--name=value", "--name value". */
static mm_flags_result parse_long(parse_state *ps, int argc, char **argv, int *ai)
{
    char *word = argv[*ai];
    char *eq = strchr(word, '=');
    size_t len = eq ? (size_t)(eq - word) : strlen(word);
    match m;
    find_long(&ps->fl, word, len, &m);
    char typed[128];
    snprintf(typed, sizeof typed, "%.*s", (int)len, word);
    if (m.ambiguous) {
        char acc[300];
        snprintf(acc, sizeof acc, "one of %s", m.candidates);
        return say(ps->cmd, "ambiguous option '%s'", typed, acc);
    }
    if (m.row < 0) {
        char acc[128];
        snprintf(acc, sizeof acc, "the flags of %s --help", ps->cmd->prog);
        return say(ps->cmd, "unknown option '%s'", typed, acc);
    }
    const mm_flag *f = ps->fl.row[m.row];
    if (!takes_value(f)) {
        if (eq) {
            char what[200], acc[96];
            snprintf(what, sizeof what, "%s=%s: takes no value", m.spelled, eq + 1);
            snprintf(acc, sizeof acc, "%s alone", m.spelled);
            return say(ps->cmd, "%s", what, acc);
        }
        return take(ps, m.row, m.spelled, NULL);
    }
    if (eq)
        return take(ps, m.row, m.spelled, eq + 1);
    if (f->implicit && (*ai + 1 >= argc || argv[*ai + 1][0] == '-'))
        return take(ps, m.row, m.spelled, (char *)f->implicit);
    if (*ai + 1 >= argc)
        return missing_value(ps, m.row, m.spelled);
    return take(ps, m.row, m.spelled, argv[++*ai]);
}

/* "-x", "-xvalue", "-x value", "-vq". */
static mm_flags_result parse_short(parse_state *ps, int argc, char **argv, int *ai)
{
    char *word = argv[*ai];
    for (char *p = word + 1; *p; p++) {
        match m;
        if (find_short(&ps->fl, *p, &m) < 0) {
            char typed[3] = {'-', *p, '\0'};
            char acc[128];
            snprintf(acc, sizeof acc, "the flags of %s --help", ps->cmd->prog);
            return say(ps->cmd, "unknown option '%s'", typed, acc);
        }
        if (!takes_value(ps->fl.row[m.row])) {
            mm_flags_result r = take(ps, m.row, m.spelled, NULL);
            if (r != MM_FLAGS_RUN)
                return r;
            continue;
        }
        if (p[1])
            return take(ps, m.row, m.spelled, p + 1);
        if (*ai + 1 >= argc)
            return missing_value(ps, m.row, m.spelled);
        return take(ps, m.row, m.spelled, argv[++*ai]);
    }
    return MM_FLAGS_RUN;
}

mm_flags_result mm_flags_parse(const mm_flags_cmd *cmd, int argc, char **argv)
{
    parse_state *ps = calloc(1, sizeof *ps);
    if (!ps) {
        fprintf(err_of(cmd), "%s: out of memory\n", cmd->prog);
        return MM_FLAGS_BAD;
    }
    ps->cmd = cmd;
    flatten(cmd->rows, cmd->n_rows, &ps->fl);
    const char *positional = NULL;
    bool only_positional = false;
    mm_flags_result r = MM_FLAGS_RUN;
    /* argv[0] is the command's name. Flags after a positional word still
     * count (and their refusals come first), as with getopt's permutation. */
    for (int ai = 1; ai < argc && r == MM_FLAGS_RUN; ai++) {
        char *w = argv[ai];
        if (only_positional || w[0] != '-' || !w[1]) {
            if (!positional)
                positional = w;
        } else if (strcmp(w, "--") == 0) {
            only_positional = true;
        } else if (w[1] == '-') {
            r = parse_long(ps, argc, argv, &ai);
        } else {
            r = parse_short(ps, argc, argv, &ai);
        }
    }
    free(ps);
    if (r == MM_FLAGS_RUN && positional) {
        char acc[200];
        snprintf(acc, sizeof acc, "flags only%s%s%s", cmd->positional_hint ? " (" : "",
                 cmd->positional_hint ? cmd->positional_hint : "", cmd->positional_hint ? ")" : "");
        return say(cmd, "unexpected argument '%s'", positional, acc);
    }
    return r;
}

/* --------------------------------------------------------------- help */

/* Whether the listed flags have short spellings (then the long ones are
 * indented past "-x, "); --help's own -h does not count. */
static bool any_short(const flat *fl)
{
    for (int i = 0; i < fl->n; i++) {
        if (fl->row[i]->kind == MM_FLAG_HELP || !fl->row[i]->help)
            continue;
        spelling sp[8];
        int n = spellings(fl->row[i], sp, 8);
        for (int k = 0; k < n; k++)
            if (is_short(sp[k].text))
                return true;
    }
    return false;
}

/* Writes text from column `col` (the cursor is there), wrapped at
 * HELP_WIDTH, continuation lines indented to `indent`. */
static void wrap(FILE *out, const char *text, int col, int indent)
{
    const char *p = text;
    while (*p) {
        size_t word = strcspn(p, " ");
        if (col > indent && col + (int)word > HELP_WIDTH) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        }
        fprintf(out, "%.*s", (int)word, p);
        col += (int)word;
        p += word;
        size_t spaces = strspn(p, " ");
        if (spaces && p[spaces]) {
            if (col + 1 + (int)strcspn(p + spaces, " ") > HELP_WIDTH) {
                fprintf(out, "\n%*s", indent, "");
                col = indent;
            } else {
                fputc(' ', out);
                col++;
            }
        }
        p += spaces;
    }
    fputc('\n', out);
}

static void help_row(FILE *out, const mm_flag *f, bool shorts, int column)
{
    spelling sp[8];
    int n = spellings(f, sp, 8);
    const char *short_name = NULL;
    char also[200] = "";
    for (int k = 1; k < n; k++) {
        if (is_short(sp[k].text) && !short_name && shorts) {
            short_name = sp[k].text;
        } else {
            size_t u = strlen(also);
            snprintf(also + u, sizeof also - u, "%s%s", u ? ", " : "", sp[k].text);
        }
    }
    char left[160];
    int w = snprintf(left, sizeof left, "  %s%s%s%s%s", short_name ? short_name : "", short_name ? ", " : "",
                     !short_name && shorts ? "    " : "", f->name,
                     takes_value(f) ? " " : "");
    if (takes_value(f))
        w += snprintf(left + w, sizeof left - (size_t)w, f->implicit ? "[%s]" : "%s", f->arg ? f->arg : "VALUE");
    fputs(left, out);
    int pad = w <= column - 2 ? column - w : 2;
    fprintf(out, "%*s", pad, "");
    char text[1200];
    snprintf(text, sizeof text, "%s%s%s%s", f->help, also[0] ? " (also " : "", also, also[0] ? ")" : "");
    wrap(out, text, w + pad, column);
}

static void help_rows(FILE *out, const mm_flag *rows, int n, bool shorts, int column)
{
    for (int i = 0; i < n; i++) {
        const mm_flag *f = &rows[i];
        if (f->kind == MM_FLAG_GROUP)
            help_rows(out, f->rows, f->n_rows, shorts, column);
        else if (f->kind == MM_FLAG_SECTION)
            fprintf(out, "%s\n", f->help);
        else if (f->help)
            help_row(out, f, shorts, column);
    }
}

void mm_flags_help(const mm_flags_cmd *cmd, FILE *out)
{
    flat fl = {.n = 0};
    flatten(cmd->rows, cmd->n_rows, &fl);
    if (cmd->synopsis)
        fputs(cmd->synopsis, out);
    help_rows(out, cmd->rows, cmd->n_rows, any_short(&fl), cmd->help_column ? cmd->help_column : 28);
    if (cmd->epilogue)
        fputs(cmd->epilogue, out);
}
