/* The tokenizer pipeline (what HF tokenizers does for a Qwen2 tokenizer.json):
 *
 *   text -> split out added tokens whose normalized=false (raw text)
 *        -> each gap: NFC -> split out added tokens whose normalized=true
 *        -> each gap: pre-tokenizer regex -> each piece: byte-level BPE -> ids
 *
 * Loading (both file forms, tokenizer_config.json) is in tokenizer_load.c. */
#include "model/text/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "model/text/normalize.h"

/* ---------------------------------------------------------------- id arrays */

int mm_token_ids_reserve(mm_token_ids *ids, size_t extra, mm_error *err)
{
    if (extra <= ids->cap - ids->n)
        return 0;
    if (extra > SIZE_MAX / sizeof(int32_t) / 2 - ids->n)
        return mm_fail(err, "token array too large");
    size_t cap = ids->cap ? ids->cap : 64;
    while (cap < ids->n + extra)
        cap *= 2;
    int32_t *v = realloc(ids->v, cap * sizeof *v);
    if (!v)
        return mm_fail(err, "out of memory (%zu token ids)", cap);
    ids->v = v;
    ids->cap = cap;
    return 0;
}

int mm_token_ids_push(mm_token_ids *ids, int32_t id, mm_error *err)
{
    if (ids->n == ids->cap && mm_token_ids_reserve(ids, 1, err))
        return -1;
    ids->v[ids->n++] = id;
    return 0;
}

void mm_token_ids_free(mm_token_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

/* ---------------------------------------------------------------- added tokens */

static int32_t char_before(const char *s, size_t at)
{
    if (at == 0)
        return -1;
    size_t i = at - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    int32_t cp;
    mm_utf8_decode(s + i, at - i, &cp);
    return cp;
}

/* Leftmost-longest match of a token of SET in S[from..N): returns the token
 * index and its start, or -1. */
static int find_added(const mm_added_set *set, const mm_tokenizer *tok, bool with_special, const char *s, size_t n,
                      size_t from, size_t *at)
{
    for (size_t i = from; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        for (uint32_t k = set->first[c]; k < set->first[c + 1]; k++) {
            const mm_added_token *t = &tok->added[set->order[k]];
            if (!with_special && t->special)
                continue;
            if (t->match_len <= n - i && memcmp(s + i, t->match, t->match_len) == 0) {
                *at = i;
                return (int)set->order[k]; /* order is longest first within a byte */
            }
        }
    }
    return -1;
}

/* Cuts S[0..N) at the added tokens of SET, the way HF's AddedVocabulary
 * find_matches does (single_word, lstrip, rstrip included), calling SEGMENT
 * for each text gap (id < 0) and each token (id >= 0) in order. */
typedef int (*segment_fn)(void *user, const char *s, size_t n, int32_t id);

static int split_added(const mm_tokenizer *tok, const mm_added_set *set, bool with_special, const char *s, size_t n,
                       segment_fn segment, void *user)
{
    size_t emitted = 0, from = 0;
    int r;
    while (set->count && from < n) {
        size_t start;
        int k = find_added(set, tok, with_special, s, n, from, &start);
        if (k < 0)
            break;
        const mm_added_token *t = &tok->added[k];
        size_t stop = start + t->match_len;
        from = stop;
        if (t->single_word) {
            int32_t before = char_before(s, start), after = -1;
            if (stop < n)
                mm_utf8_decode(s + stop, n - stop, &after);
            if ((before >= 0 && mm_unicode_is_word(before)) || (after >= 0 && mm_unicode_is_word(after)))
                continue; /* inside a word: not this token; the text stays text */
        }
        if (t->lstrip) { /* swallow the whitespace before it, not past the last cut */
            while (start > emitted) {
                size_t i = start - 1;
                while (i > emitted && ((unsigned char)s[i] & 0xC0) == 0x80)
                    i--;
                int32_t cp;
                mm_utf8_decode(s + i, start - i, &cp);
                if (!mm_unicode_is_space(cp))
                    break;
                start = i;
            }
        }
        if (t->rstrip) {
            for (int32_t cp; stop < n;) {
                size_t k2 = mm_utf8_decode(s + stop, n - stop, &cp);
                if (!mm_unicode_is_space(cp))
                    break;
                stop += k2;
            }
            from = stop;
        }
        if (start > emitted && (r = segment(user, s + emitted, start - emitted, -1)) != 0)
            return r;
        if ((r = segment(user, s + start, stop - start, t->id)) != 0)
            return r;
        emitted = stop;
    }
    if (n > emitted)
        return segment(user, s + emitted, n - emitted, -1);
    return 0;
}

/* ---------------------------------------------------------------- encoding */

typedef struct encode_ctx {
    const mm_tokenizer *tok;
    mm_pretok_state *st;
    mm_token_ids *out;
    mm_error *err;
    bool match_added;
} encode_ctx;

static int on_piece(void *user, const char *piece, size_t len)
{
    encode_ctx *c = user;
    return mm_bpe_encode_piece(c->tok->bpe, piece, len, c->out, c->err);
}

static int on_normalized_segment(void *user, const char *s, size_t n, int32_t id)
{
    encode_ctx *c = user;
    if (id >= 0)
        return mm_token_ids_push(c->out, id, c->err);
    return mm_pretok_split(c->tok->pretok, c->st, s, n, on_piece, c, c->err);
}

static int on_raw_segment(void *user, const char *s, size_t n, int32_t id)
{
    encode_ctx *c = user;
    if (id >= 0)
        return mm_token_ids_push(c->out, id, c->err);
    const char *norm = s;
    size_t nlen = n;
    bool owned = false;
    if (c->tok->nfc && mm_utf8_nfc(s, n, &norm, &nlen, &owned, c->err))
        return -1;
    int r;
    if (c->match_added && c->tok->normalized_set.count)
        r = split_added(c->tok, &c->tok->normalized_set, !c->tok->split_special, norm, nlen, on_normalized_segment, c);
    else
        r = on_normalized_segment(c, norm, nlen, -1);
    if (owned)
        free((void *)norm);
    return r;
}

int mm_tokenizer_encode(const mm_tokenizer *tok, const char *text, size_t len, bool match_added, mm_token_ids *out,
                        mm_error *err)
{
    if (len && !text)
        return mm_fail(err, "encode: text is NULL");
    if (mm_utf8_validate(text, len, err))
        return -1;
    encode_ctx c = {tok, mm_pretok_state_new(tok->pretok), out, err, match_added};
    if (!c.st)
        return mm_fail(err, "out of memory (regex state)");
    size_t before = out->n;
    int r;
    if (match_added)
        r = split_added(tok, &tok->raw_set, !tok->split_special, text, len, on_raw_segment, &c);
    else
        r = on_raw_segment(&c, text, len, -1);
    mm_pretok_state_free(c.st);
    if (r) {
        out->n = before; /* all or nothing */
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- lookups */

static const mm_added_token *added_by_id(const mm_tokenizer *tok, int32_t id)
{
    size_t lo = 0, hi = tok->nadded;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int32_t m = tok->added[tok->by_id[mid]].id;
        if (m == id)
            return &tok->added[tok->by_id[mid]];
        if (m < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int32_t mm_tokenizer_token_id(const mm_tokenizer *tok, const char *token)
{
    size_t n = strlen(token);
    for (size_t i = 0; i < tok->nadded; i++)
        if (tok->added[i].len == n && memcmp(tok->added[i].content, token, n) == 0)
            return tok->added[i].id;
    return mm_bpe_token_id(tok->bpe, token, n);
}

const char *mm_tokenizer_token(const mm_tokenizer *tok, int32_t id)
{
    const mm_added_token *t = added_by_id(tok, id);
    if (t)
        return t->content;
    return mm_bpe_token(tok->bpe, id, NULL);
}

bool mm_tokenizer_is_special(const mm_tokenizer *tok, int32_t id)
{
    const mm_added_token *t = added_by_id(tok, id);
    return t && t->special;
}

int32_t mm_tokenizer_vocab_size(const mm_tokenizer *tok) { return tok->id_limit; }
size_t mm_tokenizer_added_count(const mm_tokenizer *tok) { return tok->nadded; }

int mm_tokenizer_decode(const mm_tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len, mm_error *err)
{
    char *buf = NULL;
    size_t blen = 0, cap = 0;
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        const mm_added_token *t = added_by_id(tok, ids[i]);
        int r;
        if (t) {
            size_t need = blen + t->len + 1;
            if (need > cap) {
                size_t c = cap ? cap : 64;
                while (c < need)
                    c *= 2;
                char *p = realloc(buf, c);
                if (!p) {
                    free(buf);
                    return mm_fail(err, "out of memory");
                }
                buf = p;
                cap = c;
            }
            memcpy(buf + blen, t->content, t->len);
            blen += t->len;
            buf[blen] = '\0';
            r = 0;
        } else {
            r = mm_bpe_token_bytes(tok->bpe, ids[i], &buf, &blen, &cap, err);
        }
        if (r) {
            free(buf);
            return mm_error_prefix(err, "decode: position %zu", i);
        }
    }
    if (!buf && !(buf = calloc(1, 1)))
        return mm_fail(err, "out of memory");
    *text = buf;
    *len = blen;
    return 0;
}
