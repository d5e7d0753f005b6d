/* Loading a tokenizer from either form the release ships:
 *   tokenizer.json                        (HF tokenizers' serialization)
 *   vocab.json + merges.txt               (read as transformers' Qwen2Tokenizer:
 *                                          NFC, the Qwen2 regex, byte-level BPE)
 * plus tokenizer_config.json for added tokens in both cases. */
#include "model/text/tokenizer_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/text/normalize.h"

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static int load_json(const char *path, json_t **out, mm_error *err)
{
    json_error_t je;
    *out = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!*out)
        return mm_fail(err, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    return 0;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (k && p[k - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

/* ---------------------------------------------------------------- added tokens */

static int find_added_content(const mm_tokenizer *tok, const char *s, size_t n)
{
    for (size_t i = 0; i < tok->nadded; i++)
        if (tok->added[i].len == n && memcmp(tok->added[i].content, s, n) == 0)
            return (int)i;
    return -1;
}

static int added_push(mm_tokenizer *tok, const mm_added_token *t, mm_error *err)
{
    if (tok->nadded == tok->added_cap) {
        size_t cap = tok->added_cap ? tok->added_cap * 2 : 32;
        mm_added_token *a = realloc(tok->added, cap * sizeof *a);
        if (!a)
            return mm_fail(err, "out of memory");
        tok->added = a;
        tok->added_cap = cap;
    }
    mm_added_token copy = *t;
    copy.content = malloc(t->len + 1);
    if (!copy.content)
        return mm_fail(err, "out of memory");
    memcpy(copy.content, t->content, t->len);
    copy.content[t->len] = '\0';
    copy.match = NULL;
    tok->added[tok->nadded++] = copy;
    return 0;
}

/* An AddedToken as HF serializes it: {"content": ..., "special": ..., ...}.
 * T->content borrows from O until added_push copies it. */
static int parse_added_token(const json_t *o, mm_added_token *t, mm_error *err)
{
    const json_t *content = json_object_get(o, "content");
    if (!json_is_string(content))
        return mm_fail(err, "an added token needs a string \"content\"");
    memset(t, 0, sizeof *t);
    t->content = (char *)json_string_value(content);
    t->len = json_string_length(content);
    const json_t *v;
    t->special = json_is_true(json_object_get(o, "special"));
    /* Unset "normalized" means "not special", as in transformers' AddedToken. */
    v = json_object_get(o, "normalized");
    t->normalized = json_is_boolean(v) ? json_is_true(v) : !t->special;
    t->lstrip = json_is_true(json_object_get(o, "lstrip"));
    t->rstrip = json_is_true(json_object_get(o, "rstrip"));
    t->single_word = json_is_true(json_object_get(o, "single_word"));
    if (mm_utf8_validate(t->content, t->len, err))
        return mm_error_prefix(err, "added token content");
    return 0;
}

static int check_id_free(const mm_tokenizer *tok, const mm_added_token *t, mm_error *err)
{
    for (size_t i = 0; i < tok->nadded; i++)
        if (tok->added[i].id == t->id)
            return mm_fail(err, "added token \"%s\" and \"%.*s\" share id %d", tok->added[i].content, (int)t->len,
                           t->content, t->id);
    size_t vlen;
    const char *v = mm_bpe_token(tok->bpe, t->id, &vlen);
    if (v && (vlen != t->len || memcmp(v, t->content, vlen) != 0))
        return mm_fail(err, "added token \"%.*s\" has id %d, which the vocabulary gives to \"%s\"", (int)t->len,
                       t->content, t->id, v);
    return 0;
}

/* An added token with an explicit id (tokenizer.json added_tokens,
 * tokenizer_config.json added_tokens_decoder). */
static int add_with_id(mm_tokenizer *tok, const mm_added_token *t, mm_error *err)
{
    if (t->len == 0)
        return 0; /* HF ignores empty added tokens */
    if (t->id < 0 || t->id >= MM_BPE_MAX_ID)
        return mm_fail(err, "added token \"%.*s\": id %d out of range", (int)t->len, t->content, t->id);
    int k = find_added_content(tok, t->content, t->len);
    if (k >= 0) {
        if (tok->added[k].id != t->id)
            return mm_fail(err, "added token \"%.*s\" has id %d here but %d elsewhere", (int)t->len, t->content,
                           t->id, tok->added[k].id);
        return 0; /* the same token described twice (tokenizer.json and config) */
    }
    if (check_id_free(tok, t, err))
        return -1;
    return added_push(tok, t, err);
}

/* A special token named only by content (tokenizer_config.json eos_token,
 * additional_special_tokens, ...): known contents are marked special, a
 * vocabulary entry keeps its id, anything else is appended after the largest
 * id so far, as HF's AddedVocabulary::add_tokens numbers new tokens. */
static int add_by_name(mm_tokenizer *tok, mm_added_token *t, mm_error *err)
{
    if (t->len == 0)
        return 0; /* HF ignores empty added tokens */
    int k = find_added_content(tok, t->content, t->len);
    if (k >= 0) {
        tok->added[k].special = true;
        return 0;
    }
    int32_t id = mm_bpe_token_id(tok->bpe, t->content, t->len);
    if (id < 0) {
        int64_t next = (int64_t)mm_bpe_vocab_count(tok->bpe);
        for (size_t i = 0; i < tok->nadded; i++)
            if (tok->added[i].id + 1 > next && tok->added[i].id >= (int32_t)mm_bpe_vocab_count(tok->bpe))
                next = tok->added[i].id + 1;
        if (next >= MM_BPE_MAX_ID)
            return mm_fail(err, "too many tokens");
        /* a new id must not land on a vocabulary entry of a sparse vocabulary */
        while (mm_bpe_token(tok->bpe, (int32_t)next, NULL))
            next++;
        id = (int32_t)next;
    }
    t->id = id;
    t->special = true;
    return added_push(tok, t, err);
}

static int add_special_value(mm_tokenizer *tok, const json_t *v, const char *what, mm_error *err)
{
    mm_added_token t;
    if (json_is_null(v) || !v)
        return 0;
    if (json_is_string(v)) {
        memset(&t, 0, sizeof t);
        t.content = (char *)json_string_value(v);
        t.len = json_string_length(v);
        if (t.len == 0)
            return 0;
        if (mm_utf8_validate(t.content, t.len, err))
            return mm_error_prefix(err, "%s", what);
        t.special = true;
        t.normalized = false;
    } else if (json_is_object(v)) {
        if (parse_added_token(v, &t, err))
            return mm_error_prefix(err, "%s", what);
    } else {
        return mm_fail(err, "%s: expected a string or an AddedToken object, got %s", what, json_type_name(v));
    }
    return add_by_name(tok, &t, err) ? mm_error_prefix(err, "%s", what) : 0;
}

/* ---------------------------------------------------------------- tokenizer.json */

static int parse_normalizer(mm_tokenizer *tok, const json_t *n, mm_error *err)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type)
        return mm_fail(err, "normalizer: no \"type\"");
    if (strcmp(type, "NFC") == 0) {
        tok->nfc = true;
        return 0;
    }
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        size_t i;
        const json_t *e;
        if (!json_is_array(list))
            return mm_fail(err, "normalizer: Sequence without a \"normalizers\" array");
        json_array_foreach(list, i, e) if (parse_normalizer(tok, e, err)) return -1;
        return 0;
    }
    return mm_fail(err, "normalizer type \"%s\" is not supported (NFC, or none, as the Qwen2 family uses)", type);
}

/* Escapes a literal for PCRE2 (Split with a "String" pattern). */
static char *regex_escape(const char *s, size_t n)
{
    char *out = malloc(2 * n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (strchr("\\^$.|?*+()[]{}-#/ ", s[i]) && s[i])
            *o++ = '\\';
        *o++ = s[i];
    }
    *o = '\0';
    return out;
}

static int parse_pre_tokenizer(const json_t *p, char **pattern, mm_error *err)
{
    *pattern = NULL;
    if (!p || json_is_null(p))
        return mm_fail(err, "pre_tokenizer: none; only byte-level BPE (a ByteLevel pre-tokenizer) is supported");
    const json_t *list = p, *single[1] = {p};
    size_t count = 1;
    const char *type = json_string_value(json_object_get(p, "type"));
    bool sequence = type && strcmp(type, "Sequence") == 0;
    if (sequence) {
        list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return mm_fail(err, "pre_tokenizer: Sequence without a \"pretokenizers\" array");
        count = json_array_size(list);
    }
    bool byte_level = false;
    for (size_t i = 0; i < count; i++) {
        const json_t *e = sequence ? json_array_get(list, i) : single[0];
        const char *t = json_string_value(json_object_get(e, "type"));
        if (!t)
            return mm_fail(err, "pre_tokenizer %zu: no \"type\"", i);
        if (byte_level)
            return mm_fail(err, "pre_tokenizer: %s after ByteLevel is not supported", t);
        if (strcmp(t, "Split") == 0) {
            if (*pattern)
                return mm_fail(err, "pre_tokenizer: more than one Split is not supported");
            const char *behavior = json_string_value(json_object_get(e, "behavior"));
            if (!behavior || strcmp(behavior, "Isolated") != 0)
                return mm_fail(err, "pre_tokenizer: Split behavior \"%s\" is not supported (Isolated)",
                               behavior ? behavior : "(none)");
            if (json_is_true(json_object_get(e, "invert")))
                return mm_fail(err, "pre_tokenizer: Split with invert=true is not supported");
            const json_t *pat = json_object_get(e, "pattern");
            const json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
            if (json_is_string(re))
                *pattern = strdup(json_string_value(re));
            else if (json_is_string(lit))
                *pattern = regex_escape(json_string_value(lit), json_string_length(lit));
            else
                return mm_fail(err, "pre_tokenizer: Split needs a pattern {\"Regex\": ...} or {\"String\": ...}");
            if (!*pattern)
                return mm_fail(err, "out of memory");
        } else if (strcmp(t, "ByteLevel") == 0) {
            if (json_is_true(json_object_get(e, "add_prefix_space")))
                return mm_fail(err, "pre_tokenizer: ByteLevel add_prefix_space=true is not supported");
            const json_t *use_regex = json_object_get(e, "use_regex");
            if (!use_regex || json_is_true(use_regex)) {
                if (*pattern)
                    return mm_fail(err, "pre_tokenizer: Split followed by ByteLevel with use_regex=true is not "
                                        "supported");
                *pattern = strdup(mm_gpt2_pretokenize_regex);
                if (!*pattern)
                    return mm_fail(err, "out of memory");
            }
            byte_level = true;
        } else {
            return mm_fail(err, "pre_tokenizer type \"%s\" is not supported (Split, ByteLevel)", t);
        }
    }
    if (!byte_level)
        return mm_fail(err, "pre_tokenizer: no ByteLevel step; only byte-level BPE is supported");
    if (!*pattern)
        return mm_fail(err, "pre_tokenizer: no splitting regex");
    return 0;
}

static int parse_merge_string(mm_bpe *bpe, const char *s, size_t n, mm_error *err)
{
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp + 1 == s + n || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
        return mm_fail(err, "merge \"%.*s\" is not two tokens separated by one space", (int)(n > 80 ? 80 : n), s);
    return mm_bpe_add_merge(bpe, s, (size_t)(sp - s), sp + 1, (size_t)(s + n - sp - 1), err);
}

static int load_tokenizer_json(mm_tokenizer *tok, const char *path, char **pattern, mm_error *err)
{
    json_t *root;
    if (load_json(path, &root, err))
        return -1;
    int rc = -1;
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) {
        mm_fail(err, "no \"model\" object: not a tokenizer.json");
        goto out;
    }
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE") != 0) {
        mm_fail(err, "model type \"%s\" is not supported (BPE)", type);
        goto out;
    }
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *a = json_object_get(model, affixes[i]);
        if (a && !json_is_null(a) && !(json_is_string(a) && json_string_length(a) == 0)) {
            mm_fail(err, "model.%s is not supported (byte-level BPE has none)", affixes[i]);
            goto out;
        }
    }
    const json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) != 0.0) {
        mm_fail(err, "model.dropout is not supported (inference has none)");
        goto out;
    }
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        mm_fail(err, "model needs a \"vocab\" object and a \"merges\" array");
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v)
    {
        size_t klen = strlen(key);
        if (!json_is_integer(v)) {
            mm_fail(err, "model.vocab[\"%.*s\"]: expected an integer id, got %s", (int)klen, key, json_type_name(v));
            goto out;
        }
        json_int_t id = json_integer_value(v);
        if (mm_bpe_add_token(tok->bpe, key, klen, id < 0 || id >= MM_BPE_MAX_ID ? -1 : (int32_t)id, err))
            goto out;
    }
    size_t i;
    json_array_foreach(merges, i, v)
    {
        int r;
        if (json_is_string(v)) {
            r = parse_merge_string(tok->bpe, json_string_value(v), json_string_length(v), err);
        } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                   json_is_string(json_array_get(v, 1))) {
            const json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
            r = mm_bpe_add_merge(tok->bpe, json_string_value(a), json_string_length(a), json_string_value(b),
                                 json_string_length(b), err);
        } else {
            r = mm_fail(err, "expected \"a b\" or [\"a\", \"b\"], got %s", json_type_name(v));
        }
        if (r) {
            mm_error_prefix(err, "model.merges[%zu]", i);
            goto out;
        }
    }
    if (mm_bpe_finish(tok->bpe, json_is_true(json_object_get(model, "ignore_merges")), err))
        goto out;
    if (parse_normalizer(tok, json_object_get(root, "normalizer"), err) ||
        parse_pre_tokenizer(json_object_get(root, "pre_tokenizer"), pattern, err))
        goto out;
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) {
        mm_fail(err, "\"added_tokens\" must be an array");
        goto out;
    }
    json_array_foreach(added, i, v)
    {
        mm_added_token t;
        const json_t *id = json_object_get(v, "id");
        int r;
        if (!json_is_object(v))
            r = mm_fail(err, "expected an object, got %s", json_type_name(v));
        else if (!json_is_integer(id))
            r = mm_fail(err, "no integer \"id\"");
        else if ((r = parse_added_token(v, &t, err)) == 0) {
            json_int_t idv = json_integer_value(id);
            t.id = idv < 0 || idv >= MM_BPE_MAX_ID ? -1 : (int32_t)idv;
            r = add_with_id(tok, &t, err);
        }
        if (r) {
            mm_error_prefix(err, "added_tokens[%zu]", i);
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------- vocab.json + merges.txt */

static int load_vocab_merges(mm_tokenizer *tok, const char *vocab_path, const char *merges_path, mm_error *err)
{
    json_t *vocab;
    if (load_json(vocab_path, &vocab, err))
        return -1;
    int rc = -1;
    char *buf = NULL;
    FILE *f = NULL;
    if (!json_is_object(vocab)) {
        mm_fail(err, "%s: expected an object {token: id}", vocab_path);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v)
    {
        size_t klen = strlen(key);
        if (!json_is_integer(v)) {
            mm_fail(err, "%s: \"%.*s\": expected an integer id, got %s", vocab_path, (int)klen, key,
                    json_type_name(v));
            goto out;
        }
        json_int_t id = json_integer_value(v);
        if (mm_bpe_add_token(tok->bpe, key, klen, id < 0 || id >= MM_BPE_MAX_ID ? -1 : (int32_t)id, err)) {
            mm_error_prefix(err, "%s", vocab_path);
            goto out;
        }
    }
    f = fopen(merges_path, "rb");
    if (!f) {
        mm_fail_errno(err, "%s", merges_path);
        goto out;
    }
    size_t cap = 0;
    ssize_t got;
    /* transformers' Qwen2Tokenizer: strip each line, skip a leading
     * "#version" line and empty lines, split on whitespace into two tokens. */
    for (size_t line = 1; (got = getline(&buf, &cap, f)) >= 0; line++) {
        char *s = buf, *e = buf + got;
        while (s < e && strchr(" \t\r\n\v\f", *s))
            s++;
        while (e > s && strchr(" \t\r\n\v\f", e[-1]))
            e--;
        if (s == e || (line == 1 && e - s >= 9 && memcmp(s, "#version:", 9) == 0))
            continue;
        char *sp = s;
        while (sp < e && !strchr(" \t\v\f", *sp))
            sp++;
        char *r = sp;
        while (r < e && strchr(" \t\v\f", *r))
            r++;
        char *re = r;
        while (re < e && !strchr(" \t\v\f", *re))
            re++;
        if (sp == e || r == e || re != e) {
            mm_fail(err, "%s:%zu: expected two tokens separated by a space", merges_path, line);
            goto out;
        }
        if (memchr(s, '\0', (size_t)(e - s))) {
            mm_fail(err, "%s:%zu: NUL byte", merges_path, line);
            goto out;
        }
        if (mm_bpe_add_merge(tok->bpe, s, (size_t)(sp - s), r, (size_t)(e - r), err)) {
            mm_error_prefix(err, "%s:%zu", merges_path, line);
            goto out;
        }
    }
    if (ferror(f)) {
        mm_fail_errno(err, "%s: read", merges_path);
        goto out;
    }
    if (mm_bpe_finish(tok->bpe, false, err))
        goto out;
    tok->nfc = true;
    rc = 0;
out:
    free(buf);
    if (f)
        fclose(f);
    json_decref(vocab);
    return rc;
}

/* ---------------------------------------------------------------- tokenizer_config.json */

static int cmp_decoder_ids(const void *a, const void *b)
{
    long x = strtol(*(const char *const *)a, NULL, 10), y = strtol(*(const char *const *)b, NULL, 10);
    return x < y ? -1 : x > y;
}

static int apply_config(mm_tokenizer *tok, const char *path, mm_error *err)
{
    json_t *cfg;
    if (load_json(path, &cfg, err))
        return -1;
    int rc = -1;
    const char **keys = NULL;
    if (!json_is_object(cfg)) {
        mm_fail(err, "%s: expected an object", path);
        goto out;
    }
    tok->split_special = json_is_true(json_object_get(cfg, "split_special_tokens"));
    const json_t *decoder = json_object_get(cfg, "added_tokens_decoder");
    if (decoder && !json_is_object(decoder)) {
        mm_fail(err, "%s: added_tokens_decoder must be an object {id: token}", path);
        goto out;
    }
    size_t n = json_object_size(decoder), k = 0;
    keys = calloc(n ? n : 1, sizeof *keys);
    if (!keys) {
        mm_fail(err, "out of memory");
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)decoder, key, v) keys[k++] = key;
    qsort(keys, n, sizeof *keys, cmp_decoder_ids);
    for (k = 0; k < n; k++) {
        char *end;
        errno = 0;
        long id = strtol(keys[k], &end, 10);
        mm_added_token t;
        v = json_object_get(decoder, keys[k]);
        if (errno || *end || end == keys[k] || id < 0 || id >= MM_BPE_MAX_ID) {
            mm_fail(err, "key is not a token id");
        } else if (!json_is_object(v)) {
            mm_fail(err, "expected an AddedToken object, got %s", json_type_name(v));
        } else if (parse_added_token(v, &t, err) == 0) {
            t.id = (int32_t)id;
            if (add_with_id(tok, &t, err) == 0)
                continue;
        }
        mm_error_prefix(err, "%s: added_tokens_decoder[\"%s\"]", path, keys[k]);
        goto out;
    }
    /* The special tokens transformers adds on top, in its order. */
    static const char *const attrs[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};
    for (size_t a = 0; a < sizeof attrs / sizeof attrs[0]; a++)
        if (add_special_value(tok, json_object_get(cfg, attrs[a]), attrs[a], err)) {
            mm_error_prefix(err, "%s", path);
            goto out;
        }
    /* "additional_special_tokens" (transformers 4) or "extra_special_tokens"
     * (transformers 5; a list, or an object of named tokens). */
    static const char *const lists[] = {"additional_special_tokens", "extra_special_tokens"};
    for (size_t l = 0; l < 2; l++) {
        const json_t *list = json_object_get(cfg, lists[l]);
        size_t i;
        char what[64];
        if (json_is_array(list)) {
            json_array_foreach(list, i, v)
            {
                snprintf(what, sizeof what, "%s[%zu]", lists[l], i);
                if (add_special_value(tok, v, what, err)) {
                    mm_error_prefix(err, "%s", path);
                    goto out;
                }
            }
        } else if (json_is_object(list)) {
            json_object_foreach((json_t *)list, key, v)
            {
                snprintf(what, sizeof what, "%s.%.40s", lists[l], key);
                if (add_special_value(tok, v, what, err)) {
                    mm_error_prefix(err, "%s", path);
                    goto out;
                }
            }
        } else if (list && !json_is_null(list)) {
            mm_fail(err, "%s: %s must be a list", path, lists[l]);
            goto out;
        }
    }
    rc = 0;
out:
    free(keys);
    json_decref(cfg);
    return rc;
}

/* ---------------------------------------------------------------- assembly */

static int cmp_by_id(const void *a, const void *b, void *ctx)
{
    const mm_tokenizer *tok = ctx;
    int32_t x = tok->added[*(const uint32_t *)a].id, y = tok->added[*(const uint32_t *)b].id;
    return x < y ? -1 : x > y;
}

static int cmp_for_match(const void *a, const void *b, void *ctx)
{
    const mm_tokenizer *tok = ctx;
    const mm_added_token *x = &tok->added[*(const uint32_t *)a], *y = &tok->added[*(const uint32_t *)b];
    unsigned char cx = (unsigned char)x->match[0], cy = (unsigned char)y->match[0];
    if (cx != cy)
        return cx < cy ? -1 : 1;
    if (x->match_len != y->match_len)
        return x->match_len > y->match_len ? -1 : 1; /* longest first */
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static int build_set(mm_tokenizer *tok, mm_added_set *set, bool normalized, mm_error *err)
{
    set->order = malloc((tok->nadded ? tok->nadded : 1) * sizeof *set->order);
    if (!set->order)
        return mm_fail(err, "out of memory");
    set->count = 0;
    for (size_t i = 0; i < tok->nadded; i++)
        if (tok->added[i].normalized == normalized && tok->added[i].match_len > 0)
            set->order[set->count++] = (uint32_t)i;
    qsort_r(set->order, set->count, sizeof *set->order, cmp_for_match, tok);
    memset(set->first, 0, sizeof set->first);
    for (uint32_t k = 0; k < set->count; k++)
        set->first[(unsigned char)tok->added[set->order[k]].match[0] + 1]++;
    for (int c = 0; c < 256; c++)
        set->first[c + 1] += set->first[c];
    return 0;
}

static int finish(mm_tokenizer *tok, const char *pattern, mm_error *err)
{
    tok->id_limit = mm_bpe_id_limit(tok->bpe);
    for (size_t i = 0; i < tok->nadded; i++) {
        mm_added_token *t = &tok->added[i];
        if (t->id >= tok->id_limit)
            tok->id_limit = t->id + 1;
        /* Normalized tokens are searched for in normalized text, so in their
         * normalized spelling (HF normalizes them once when they are added). */
        if (t->normalized && tok->nfc) {
            const char *m;
            size_t mlen;
            bool owned;
            if (mm_utf8_nfc(t->content, t->len, &m, &mlen, &owned, err))
                return -1;
            t->match = owned ? (char *)m : t->content;
            t->match_len = mlen;
        } else {
            t->match = t->content;
            t->match_len = t->len;
        }
    }
    tok->by_id = malloc((tok->nadded ? tok->nadded : 1) * sizeof *tok->by_id);
    if (!tok->by_id)
        return mm_fail(err, "out of memory");
    for (size_t i = 0; i < tok->nadded; i++)
        tok->by_id[i] = (uint32_t)i;
    qsort_r(tok->by_id, tok->nadded, sizeof *tok->by_id, cmp_by_id, tok);
    if (build_set(tok, &tok->raw_set, false, err) || build_set(tok, &tok->normalized_set, true, err))
        return -1;
    return mm_pretok_create(pattern, &tok->pretok, err);
}

void mm_tokenizer_free(mm_tokenizer *tok)
{
    if (!tok)
        return;
    for (size_t i = 0; i < tok->nadded; i++) {
        if (tok->added[i].match != tok->added[i].content)
            free(tok->added[i].match);
        free(tok->added[i].content);
    }
    free(tok->added);
    free(tok->by_id);
    free(tok->raw_set.order);
    free(tok->normalized_set.order);
    mm_pretok_free(tok->pretok);
    mm_bpe_free(tok->bpe);
    free(tok);
}

static int load(mm_tokenizer *tok, const char *path, mm_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return mm_fail_errno(err, "tokenizer %s", path);
    char *json_path = NULL, *vocab_path = NULL, *merges_path = NULL, *config_path = NULL, *pattern = NULL;
    int rc = -1;
    if (S_ISDIR(st.st_mode)) {
        json_path = join_path(path, "tokenizer.json");
        vocab_path = join_path(path, "vocab.json");
        merges_path = join_path(path, "merges.txt");
        config_path = join_path(path, "tokenizer_config.json");
        if (!json_path || !vocab_path || !merges_path || !config_path) {
            mm_fail(err, "out of memory");
            goto out;
        }
        if (is_file(json_path)) {
            if (load_tokenizer_json(tok, json_path, &pattern, err)) {
                mm_error_prefix(err, "%s", json_path);
                goto out;
            }
        } else if (is_file(vocab_path) && is_file(merges_path)) {
            if (load_vocab_merges(tok, vocab_path, merges_path, err))
                goto out;
            pattern = strdup(mm_qwen2_pretokenize_regex);
        } else {
            mm_fail(err, "tokenizer folder %s holds neither tokenizer.json nor vocab.json + merges.txt", path);
            goto out;
        }
    } else {
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, (size_t)(slash - path + 1)) : strdup(".");
        config_path = dir ? join_path(dir, "tokenizer_config.json") : NULL;
        free(dir);
        if (!config_path) {
            mm_fail(err, "out of memory");
            goto out;
        }
        if (load_tokenizer_json(tok, path, &pattern, err)) {
            mm_error_prefix(err, "%s", path);
            goto out;
        }
    }
    if (!pattern) {
        mm_fail(err, "out of memory");
        goto out;
    }
    if (is_file(config_path) && apply_config(tok, config_path, err))
        goto out;
    rc = finish(tok, pattern, err);
out:
    free(json_path);
    free(vocab_path);
    free(merges_path);
    free(config_path);
    free(pattern);
    return rc;
}

int mm_tokenizer_load(const char *path, mm_tokenizer **out, mm_error *err)
{
    *out = NULL;
    mm_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok || !(tok->bpe = mm_bpe_new())) {
        free(tok);
        return mm_fail(err, "out of memory");
    }
    if (load(tok, path, err)) {
        mm_tokenizer_free(tok);
        return -1;
    }
    *out = tok;
    return 0;
}
