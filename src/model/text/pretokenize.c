#include "model/text/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char mm_qwen2_pretokenize_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char mm_gpt2_pretokenize_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct mm_pretok {
    pcre2_code *re;
    char *pattern;
};

struct mm_pretok_state {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
};

/* Unicode's White_Space property as the body of a character class. */
#define WHITE_SPACE "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Grows *o (*cap bytes) to at least `need` bytes; false, with *o freed and
 * the failure in err, when memory runs out. */
static bool reserve(char **o, size_t *cap, size_t need, mm_error *err)
{
    if (need <= *cap)
        return true;
    size_t c = *cap;
    while (c < need)
        c *= 2;
    char *q = realloc(*o, c);
    if (!q) {
        free(*o);
        *o = NULL;
        mm_fail(err, "out of memory");
        return false;
    }
    *o = q;
    *cap = c;
    return true;
}

/* Oniguruma's \s is exactly White_Space; PCRE2's (10.42, UCP) also matches
 * U+180E MONGOLIAN VOWEL SEPARATOR, a format character since Unicode 6.3, so
 * \s and \S are spelled out as explicit classes before compiling. The scan
 * knows escapes, \Q..\E and character classes, enough for tokenizer
 * patterns; \S inside a class has no class-body spelling and is refused. */
static char *spell_out_white_space(const char *p, mm_error *err)
{
    size_t n = strlen(p), cap = n * 8 + sizeof WHITE_SPACE * 8 + 16, k = 0;
    size_t grow = sizeof WHITE_SPACE + 4;
    char *o = malloc(cap);
    if (!o) {
        mm_fail(err, "out of memory");
        return NULL;
    }
    bool in_class = false;
    for (size_t i = 0; i < n;) {
        if (!reserve(&o, &cap, k + grow + 8 + 1, err))
            return NULL;
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 's' || e == 'S') {
                if (in_class && e == 'S') {
                    free(o);
                    mm_fail(err, "pre-tokenizer regex: \\S inside a character class is not supported");
                    return NULL;
                }
                const char *open = in_class ? "" : e == 's' ? "[" : "[^";
                k += (size_t)sprintf(o + k, "%s%s%s", open, WHITE_SPACE, in_class ? "" : "]");
                i += 2;
                continue;
            }
            if (e == 'Q') { /* literal run up to \E, copied as is */
                const char *end = strstr(p + i + 2, "\\E");
                size_t stop = end ? (size_t)(end - p) + 2 : n;
                if (!reserve(&o, &cap, k + (stop - i) + 8 + 1, err))
                    return NULL;
                memcpy(o + k, p + i, stop - i);
                k += stop - i;
                i = stop;
                continue;
            }
            o[k++] = p[i++];
            o[k++] = p[i++];
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            o[k++] = p[i++];
            if (i < n && p[i] == '^')
                o[k++] = p[i++];
            if (i < n && p[i] == ']') /* a leading ] is a literal */
                o[k++] = p[i++];
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *end = strstr(p + i + 2, ":]");
            size_t stop = end && end - (p + i) <= 16 ? (size_t)(end - p) + 2 : i + 1; /* names are short */
            while (i < stop)
                o[k++] = p[i++];
            continue;
        }
        if (in_class && c == ']')
            in_class = false;
        o[k++] = p[i++];
    }
    o[k] = '\0';
    return o;
}

int mm_pretok_create(const char *pattern, mm_pretok **out, mm_error *err)
{
    *out = NULL;
    int code;
    PCRE2_SIZE off;
    char *spelled = spell_out_white_space(pattern, err);
    if (!spelled)
        return -1;
    /* UCP: \p{..} and caseless matching follow Unicode, as in Oniguruma. */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)spelled, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    free(spelled);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return mm_fail(err, "pre-tokenizer regex does not compile at offset %zu: %s", (size_t)off, (char *)msg);
    }
    /* The JIT is an optimisation only: where it is unavailable the
     * interpreter gives the same matches. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    mm_pretok *pt = calloc(1, sizeof *pt);
    char *copy = strdup(pattern);
    if (!pt || !copy) {
        free(pt);
        free(copy);
        pcre2_code_free(re);
        return mm_fail(err, "out of memory");
    }
    pt->re = re;
    pt->pattern = copy;
    *out = pt;
    return 0;
}

void mm_pretok_free(mm_pretok *pt)
{
    if (!pt)
        return;
    pcre2_code_free(pt->re);
    free(pt->pattern);
    free(pt);
}

const char *mm_pretok_pattern(const mm_pretok *pt) { return pt->pattern; }

mm_pretok_state *mm_pretok_state_new(const mm_pretok *pt)
{
    mm_pretok_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->md = pcre2_match_data_create_from_pattern(pt->re, NULL);
    if (!st->md) {
        free(st);
        return NULL;
    }
    return st;
}

void mm_pretok_state_free(mm_pretok_state *st)
{
    if (!st)
        return;
    pcre2_match_data_free(st->md);
    pcre2_match_context_free(st->mctx);
    pcre2_jit_stack_free(st->jit_stack);
    free(st);
}

/* The JIT's default 32 KiB machine-stack area covers ordinary text; only
 * pathological inputs exhaust it, and those are retried with a large JIT
 * stack made on demand, so the common call allocates nothing. */
static int match_at(const mm_pretok *pt, mm_pretok_state *st, const char *s, size_t n, size_t pos)
{
    int rc = pcre2_match(pt->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, st->md, st->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !st->jit_stack) {
        st->mctx = pcre2_match_context_create(NULL);
        st->jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        if (!st->mctx || !st->jit_stack)
            return rc;
        pcre2_jit_stack_assign(st->mctx, NULL, st->jit_stack);
        rc = pcre2_match(pt->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, st->md, st->mctx);
    }
    return rc;
}

static size_t utf8_char_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

int mm_pretok_split(const mm_pretok *pt, mm_pretok_state *st, const char *s, size_t n,
                    mm_pretok_piece_fn piece, void *user, mm_error *err)
{
    size_t pos = 0, emitted = 0; /* emitted: end of the last piece handed out */
    while (pos < n) {
        /* NO_UTF_CHECK: the caller validated the text once; PCRE2 would
         * otherwise re-check the whole subject on every call (quadratic). */
        int rc = match_at(pt, st, s, n, pos);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return mm_fail(err, "pre-tokenizer regex failed at byte %zu: %s", pos, (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match cuts nothing; step over one character */
            pos = ms + utf8_char_len((unsigned char)s[ms]);
            continue;
        }
        int r;
        if (ms > emitted && (r = piece(user, s + emitted, ms - emitted)) != 0)
            return r;
        if ((r = piece(user, s + ms, me - ms)) != 0)
            return r;
        emitted = pos = me;
    }
    if (n > emitted)
        return piece(user, s + emitted, n - emitted);
    return 0;
}
