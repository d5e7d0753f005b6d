/* The tokenizer's behaviour: the spec's test vectors, MiniMax's added tokens
 * under both tokenizer_config.json versions, added-token matching rules, BPE
 * merge order on small hand-made tokenizers, malformed UTF-8, decoding,
 * lookups, load errors, and sharing one tokenizer between threads. */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#include "model/text/pretokenize.h"
#include "model/text/tokenizer.h"
#include "test.h"
#include "test_text_tokenizer_data.h"

static mm_tokenizer *tok; /* the release tokenizer */

static int encode(const mm_tokenizer *t, const char *s, size_t n, int match_added, mm_token_ids *ids)
{
    mm_error err = {{0}};
    ids->n = 0;
    int rc = mm_tokenizer_encode(t, s, n, match_added, ids, &err);
    if (rc)
        printf("       encode error: %s\n", err.msg);
    return rc;
}

static int ids_eq(const mm_token_ids *ids, const int32_t *want, size_t n)
{
    if (ids->n != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (ids->v[i] != want[i])
            return 0;
    return 1;
}

#define EXPECT_IDS(t, text, added, ...)                                                                   \
    do {                                                                                                  \
        const int32_t want_[] = {__VA_ARGS__};                                                            \
        mm_token_ids got_ = {0};                                                                          \
        int rc_ = encode(t, text, sizeof(text) - 1, added, &got_);                                        \
        MM_EXPECT(rc_ == 0 && ids_eq(&got_, want_, sizeof want_ / sizeof want_[0]), "%s: got %zu ids, first %d", \
                  #text, got_.n, got_.n ? got_.v[0] : -1);                                                \
        mm_token_ids_free(&got_);                                                                         \
    } while (0)

/* ---------------------------------------------------------------- temp folders */

static char tmp_root[256];

static void make_tmp_root(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/mmh3-tok-XXXXXX");
    if (!mkdtemp(tmp_root))
        tmp_root[0] = '\0';
}

static void rm_rf(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        printf("       could not remove %s\n", path);
}

static int write_file(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* A folder with the release vocab.json + merges.txt (symlinked) and the given
 * tokenizer_config.json text (NULL: none). */
static int make_release_variant(char *dir, size_t n, const char *name, const char *config)
{
    snprintf(dir, n, "%s/%s", tmp_root, name);
    if (mkdir(dir, 0700) != 0)
        return -1;
    const char *files[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        char src[4200], dst[1024];
        snprintf(src, sizeof src, "%s/%s", tt_release_dir(), files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        char abs[4200];
        if (!realpath(src, abs) || symlink(abs, dst) != 0)
            return -1;
    }
    return config ? write_file(dir, "tokenizer_config.json", config) : 0;
}

/* The release config with its added_tokens_decoder extended by the seven
 * MiniMax tokens at 151669.. (the later upstream tokenizer_config.json). */
static char *later_release_config(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tt_release_dir());
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg)
        return NULL;
    const char *names[] = {"<d>", "</d>", "<|cutoff|>", "<|lyrics_start|>", "<|lyrics_end|>", "<|caption_start|>",
                           "<|caption_end|>"};
    json_t *dec = json_object_get(cfg, "added_tokens_decoder");
    for (int i = 0; i < 7; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", 151669 + i);
        json_object_set_new(dec, key,
                            json_pack("{s:s, s:b, s:b, s:b, s:b, s:b}", "content", names[i], "lstrip", 0, "normalized",
                                      0, "rstrip", 0, "single_word", 0, "special", 1));
    }
    char *s = json_dumps(cfg, JSON_INDENT(2));
    json_decref(cfg);
    return s;
}

/* ---------------------------------------------------------------- cases */

static void test_load(void)
{
    const char *dir = tt_release_dir();
    MM_REQUIRE(dir, "release tokenizer not found: expected ../shared/minimax-h3/FL2VA/tokenizer beside the checkout "
                    "(or set MMH3_TOKENIZER_RELEASE)");
    mm_error err = {{0}};
    MM_REQUIRE(mm_tokenizer_load(dir, &tok, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_tokenizer_vocab_size(tok) == 151676, "vocab size %d", mm_tokenizer_vocab_size(tok));
    MM_EXPECT(mm_tokenizer_added_count(tok) == 33, "%zu added tokens", mm_tokenizer_added_count(tok));
}

/* text-encoder.md §5.4 */
static void test_spec_vectors(void)
{
    MM_REQUIRE(tok, "no tokenizer");
    EXPECT_IDS(tok, "Hello world", 1, 9707, 1879);
    EXPECT_IDS(tok, " Hello world", 1, 21927, 1879);
    EXPECT_IDS(tok, "<d>", 1, 151669);
    EXPECT_IDS(tok, "</d>", 1, 151670);
    /* a stock Qwen tokenizer (no MiniMax tokens) sees plain text */
    EXPECT_IDS(tok, "<d>", 0, 90707, 29);
    EXPECT_IDS(tok, "</d>", 0, 522, 67, 29);
    mm_token_ids none = {0};
    MM_EXPECT(encode(tok, "", 0, 1, &none) == 0 && none.n == 0, "empty text gives %zu ids", none.n);
    mm_token_ids_free(&none);
}

struct piece_acc {
    char *buf;
    size_t *k;
};

static int collect_piece(void *user, const char *p, size_t n)
{
    struct piece_acc *c = user;
    if (*c->k && *c->k < 250)
        c->buf[(*c->k)++] = '|';
    for (size_t j = 0; j < n && *c->k < 250; j++)
        c->buf[(*c->k)++] = p[j];
    c->buf[*c->k] = '\0';
    return 0;
}

static void test_pretokenizer_pieces(void)
{
    mm_pretok *pt;
    mm_error err = {{0}};
    MM_REQUIRE(mm_pretok_create(mm_qwen2_pretokenize_regex, &pt, &err) == 0, "%s", err.msg);
    mm_pretok_state *st = mm_pretok_state_new(pt);
    static const struct {
        const char *text;
        const char *pieces; /* joined with '|' */
    } cases[] = {
        {"<Picture 1>: ", "<Picture| |1|>:| "}, /* §5.4 */
        {"don't", "don|'t"},
        {"I'M HERE", "I|'M| HERE"},
        {"abc123", "abc|1|2|3"},
        {"a  b", "a| | b"},
        {"x \r\n y", "x| \r\n| y"},
        {"end   ", "end|   "},
        {"a\xe1\xa0\x8e" "b", "a|\xe1\xa0\x8e" "b"}, /* U+180E may start a word */
        {"x\xe1\xa0\x8e\xe1\xa0\x8e'Re", "x|\xe1\xa0\x8e\xe1\xa0\x8e'|Re"}, /* and is no space (Oniguruma) */
        {"(\"hi\")\n\n", "(\"|hi|\")\n\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char joined[256] = "";
        size_t k = 0;
        struct piece_acc a = {joined, &k};
        MM_EXPECT(mm_pretok_split(pt, st, cases[i].text, strlen(cases[i].text), collect_piece, &a, &err) == 0, "%s",
                  err.msg);
        MM_EXPECT(strcmp(joined, cases[i].pieces) == 0, "\"%s\" -> \"%s\", expected \"%s\"", cases[i].text, joined,
                  cases[i].pieces);
    }
    mm_pretok_state_free(st);
    mm_pretok_free(pt);
}

static int count_piece(void *user, const char *p, size_t n)
{
    (void)p;
    (void)n;
    (*(size_t *)user)++;
    return 0;
}

/* A match that outgrows the JIT's default stack is retried with a large one
 * (this pattern fails with PCRE2_ERROR_JIT_STACKLIMIT on the default). */
static void test_pretokenizer_deep_match(void)
{
    mm_pretok *pt;
    mm_error err = {{0}};
    MM_REQUIRE(mm_pretok_create("(?:(a)|b)+", &pt, &err) == 0, "%s", err.msg);
    mm_pretok_state *st = mm_pretok_state_new(pt);
    size_t n = 1 << 18, pieces = 0;
    char *s = malloc(n);
    MM_REQUIRE(s && st, "alloc");
    memset(s, 'a', n);
    MM_EXPECT(mm_pretok_split(pt, st, s, n, count_piece, &pieces, &err) == 0 && pieces == 1, "%zu pieces: %s",
              pieces, err.msg);
    free(s);
    mm_pretok_state_free(st);
    mm_pretok_free(pt);
}

static void test_added_tokens_by_name(void)
{
    MM_REQUIRE(tok, "no tokenizer");
    static const struct {
        const char *name;
        int32_t id;
    } want[] = {
        {"<|endoftext|>", 151643}, {"<|vision_start|>", 151652}, {"<|vision_end|>", 151653},
        {"<|image_pad|>", 151655}, {"<|video_pad|>", 151656},    {"<think>", 151667},
        {"<d>", 151669},           {"</d>", 151670},             {"<|cutoff|>", 151671},
        {"<|lyrics_start|>", 151672}, {"<|lyrics_end|>", 151673}, {"<|caption_start|>", 151674},
        {"<|caption_end|>", 151675},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        MM_EXPECT(mm_tokenizer_token_id(tok, want[i].name) == want[i].id, "%s -> %d, expected %d", want[i].name,
                  mm_tokenizer_token_id(tok, want[i].name), want[i].id);
        const char *back = mm_tokenizer_token(tok, want[i].id);
        MM_EXPECT(back && strcmp(back, want[i].name) == 0, "%d -> %s", want[i].id, back ? back : "(null)");
    }
    MM_EXPECT(mm_tokenizer_is_special(tok, 151669), "<d> should be special");
    MM_EXPECT(mm_tokenizer_is_special(tok, 151652), "<|vision_start|> should be special");
    MM_EXPECT(!mm_tokenizer_is_special(tok, 151657), "<tool_call> is not special");
    MM_EXPECT(!mm_tokenizer_is_special(tok, 9707), "Hello is not special");
    MM_EXPECT(mm_tokenizer_token_id(tok, "Hello") == 9707, "Hello -> %d", mm_tokenizer_token_id(tok, "Hello"));
    MM_EXPECT(mm_tokenizer_token_id(tok, "\xc4\xa0world") == 1879, "Gworld");
    MM_EXPECT(mm_tokenizer_token_id(tok, "no-such-token-xyz") == -1, "unknown token");
    MM_EXPECT(mm_tokenizer_token(tok, -1) == NULL && mm_tokenizer_token(tok, 151676) == NULL &&
                  mm_tokenizer_token(tok, 1 << 30) == NULL,
              "out-of-range ids");
    const char *hello = mm_tokenizer_token(tok, 9707);
    MM_EXPECT(hello && strcmp(hello, "Hello") == 0, "9707 -> %s", hello ? hello : "(null)");
}

/* Both tokenizer_config.json versions (MiniMax tokens named only in
 * additional_special_tokens, or listed in added_tokens_decoder), the
 * transformers 5 key, and no config at all. */
static void test_config_versions(void)
{
    MM_REQUIRE(tt_release_dir() && tmp_root[0], "no release tokenizer or temp folder");
    char dir[1024], path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tt_release_dir());
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    MM_REQUIRE(cfg, "%s", je.text);
    char *snapshot = json_dumps(cfg, 0);
    /* transformers 5 spelling: extra_special_tokens */
    json_t *v5 = json_deep_copy(cfg);
    json_object_set(v5, "extra_special_tokens", json_object_get(v5, "additional_special_tokens"));
    json_object_del(v5, "additional_special_tokens");
    char *v5s = json_dumps(v5, 0);
    char *later = later_release_config();
    json_decref(cfg);
    json_decref(v5);
    const struct {
        const char *name;
        const char *config;
    } variants[] = {{"snapshot", snapshot}, {"later", later}, {"v5", v5s}};
    for (int i = 0; i < 3; i++) {
        mm_tokenizer *t = NULL;
        mm_error err = {{0}};
        if (!variants[i].config || make_release_variant(dir, sizeof dir, variants[i].name, variants[i].config) ||
            mm_tokenizer_load(dir, &t, &err)) {
            MM_EXPECT(0, "%s: %s", variants[i].name, err.msg);
            continue;
        }
        const char *text = "<d>[English] Hi.</d><|cutoff|><|caption_end|>";
        mm_token_ids got = {0}, want = {0};
        MM_EXPECT(encode(t, text, strlen(text), 1, &got) == 0 && encode(tok, text, strlen(text), 1, &want) == 0 &&
                      got.n == want.n && got.n > 4 && memcmp(got.v, want.v, got.n * sizeof *got.v) == 0 &&
                      got.v[0] == 151669 && got.v[got.n - 3] == 151670 && got.v[got.n - 2] == 151671 &&
                      got.v[got.n - 1] == 151675,
                  "%s: MiniMax tokens not as in the release", variants[i].name);
        mm_token_ids_free(&got);
        mm_token_ids_free(&want);
        MM_EXPECT(mm_tokenizer_vocab_size(t) == 151676, "%s: vocab size %d", variants[i].name,
                  mm_tokenizer_vocab_size(t));
        mm_tokenizer_free(t);
    }
    /* No tokenizer_config.json: vocab and merges only, no added tokens. */
    mm_tokenizer *bare = NULL;
    mm_error err = {{0}};
    if (make_release_variant(dir, sizeof dir, "bare", NULL) || mm_tokenizer_load(dir, &bare, &err)) {
        MM_EXPECT(0, "bare: %s", err.msg);
    } else {
        EXPECT_IDS(bare, "<d>", 1, 90707, 29);
        MM_EXPECT(mm_tokenizer_token_id(bare, "<|endoftext|>") == -1, "no added tokens without a config");
        MM_EXPECT(mm_tokenizer_vocab_size(bare) == 151643, "bare vocab size %d", mm_tokenizer_vocab_size(bare));
        mm_tokenizer_free(bare);
    }
    free(snapshot);
    free(v5s);
    free(later);
}

/* Leftmost-longest matching (HF's aho-corasick LeftmostLongest), specials
 * as text under split_special_tokens, and a config id clash. */
static void test_added_matching_rules(void)
{
    MM_REQUIRE(tt_release_dir() && tmp_root[0] && tok, "no release tokenizer or temp folder");
    char dir[1024];
    const char *config = "{\"added_tokens_decoder\": {"
                         "\"151643\": {\"content\": \"<|endoftext|>\", \"special\": true, \"normalized\": false},"
                         "\"151700\": {\"content\": \"<a>\", \"special\": false, \"normalized\": false},"
                         "\"151701\": {\"content\": \"<a>b\", \"special\": false, \"normalized\": false},"
                         "\"151702\": {\"content\": \"a>b\", \"special\": false, \"normalized\": false}},"
                         "\"split_special_tokens\": true}";
    mm_tokenizer *t = NULL;
    mm_error err = {{0}};
    MM_REQUIRE(make_release_variant(dir, sizeof dir, "rules", config) == 0 && mm_tokenizer_load(dir, &t, &err) == 0,
               "%s", err.msg);
    mm_token_ids x = {0}, c = {0}, eot = {0};
    encode(tok, "x", 1, 1, &x);
    encode(tok, "c", 1, 1, &c);
    encode(tok, "<|endoftext|>", 13, 0, &eot);
    MM_REQUIRE(x.n == 1 && c.n == 1 && eot.n > 1, "helper encodes");
    EXPECT_IDS(t, "x<a>bc", 1, x.v[0], 151701, c.v[0]); /* longest at the leftmost start */
    EXPECT_IDS(t, "xa>b<a>", 1, x.v[0], 151702, 151700); /* leftmost wins over longer later */
    EXPECT_IDS(t, "<a><a>b", 1, 151700, 151701);
    /* split_special_tokens: the special <|endoftext|> is text, non-special
     * added tokens still match */
    mm_token_ids got = {0};
    MM_EXPECT(encode(t, "<|endoftext|>", 13, 1, &got) == 0 && got.n == eot.n &&
                  memcmp(got.v, eot.v, eot.n * sizeof eot.v[0]) == 0,
              "special token should be text under split_special_tokens");
    mm_token_ids_free(&got);
    mm_token_ids_free(&x);
    mm_token_ids_free(&c);
    mm_token_ids_free(&eot);
    mm_tokenizer_free(t);

    /* an added token may not take an id the vocabulary uses for another token */
    const char *clash = "{\"added_tokens_decoder\": {\"9707\": {\"content\": \"<x>\", \"special\": true}}}";
    t = NULL;
    MM_EXPECT(make_release_variant(dir, sizeof dir, "clash", clash) == 0 && mm_tokenizer_load(dir, &t, &err) != 0 &&
                  strstr(err.msg, "9707") && strstr(err.msg, "Hello"),
              "clash not reported: %s", err.msg);
    mm_tokenizer_free(t);
}

static void test_segments_append(void)
{
    MM_REQUIRE(tok, "no tokenizer");
    mm_token_ids all = {0}, a = {0}, b = {0};
    mm_error err = {{0}};
    const char *label = "<Picture 1>: ", *prompt = "A cat on a windowsill.";
    MM_EXPECT(mm_token_ids_push(&all, 151652, &err) == 0, "push");
    MM_EXPECT(mm_tokenizer_encode(tok, label, strlen(label), true, &all, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_tokenizer_encode(tok, prompt, strlen(prompt), true, &all, &err) == 0, "%s", err.msg);
    encode(tok, label, strlen(label), 1, &a);
    encode(tok, prompt, strlen(prompt), 1, &b);
    MM_EXPECT(all.n == 1 + a.n + b.n && all.v[0] == 151652 &&
                  memcmp(all.v + 1, a.v, a.n * sizeof *a.v) == 0 &&
                  memcmp(all.v + 1 + a.n, b.v, b.n * sizeof *b.v) == 0,
              "appending segments: %zu ids, expected %zu", all.n, 1 + a.n + b.n);
    mm_token_ids_free(&all);
    mm_token_ids_free(&a);
    mm_token_ids_free(&b);
}

static void test_malformed_utf8(void)
{
    MM_REQUIRE(tok, "no tokenizer");
    static const struct {
        const char *bytes;
        size_t len, bad_at;
    } cases[] = {
        {"\xff", 1, 0},
        {"ab\xfe", 3, 2},
        {"a\x80" "b", 3, 1},                  /* lone continuation byte */
        {"\xc0\xaf", 2, 0},                   /* overlong '/' */
        {"x\xe0\x80\xaf", 4, 1},              /* overlong, 3 bytes */
        {"\xed\xa0\x80", 3, 0},               /* UTF-16 surrogate D800 */
        {"ok \xed\xbf\xbf", 6, 3},            /* surrogate DFFF */
        {"\xf4\x90\x80\x80", 4, 0},           /* above U+10FFFF */
        {"\xf8\x88\x80\x80\x80", 5, 0},       /* 5-byte form */
        {"\xe4\xbd", 2, 0},                   /* truncated at the end */
        {"\xe4\xbd" "a", 3, 0},               /* truncated before ASCII */
        {"<d>\xc3", 4, 3},                    /* after an added token */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mm_token_ids ids = {0};
        mm_error err = {{0}};
        MM_EXPECT(mm_token_ids_push(&ids, 7, &err) == 0, "push");
        int rc = mm_tokenizer_encode(tok, cases[i].bytes, cases[i].len, true, &ids, &err);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", cases[i].bad_at);
        MM_EXPECT(rc == -1 && strstr(err.msg, want), "case %zu: rc %d, message \"%s\" (expected \"%s\")", i, rc,
                  err.msg, want);
        MM_EXPECT(ids.n == 1 && ids.v[0] == 7, "case %zu: output changed on error", i);
        mm_token_ids_free(&ids);
    }
    /* edges that are valid */
    static const char *valid[] = {"\xf4\x8f\xbf\xbf", "\xef\xbf\xbd", "\xee\x80\x80", "\xef\xbf\xbf",
                                  "\xed\x9f\xbf", "\xee\x80\x80", "\xc2\x80", "\xf0\x90\x80\x80"};
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        mm_token_ids ids = {0};
        MM_EXPECT(encode(tok, valid[i], strlen(valid[i]), 1, &ids) == 0 && ids.n > 0, "valid case %zu rejected", i);
        mm_token_ids_free(&ids);
    }
    /* NUL is an ordinary character */
    mm_token_ids ids = {0};
    MM_EXPECT(encode(tok, "a\0b", 3, 1, &ids) == 0 && ids.n == 3, "NUL inside text: %zu ids", ids.n);
    mm_token_ids_free(&ids);
}

/* decode(encode(text)) == NFC(text) over the hard cases. */
static void test_decode_round_trip(void)
{
    MM_REQUIRE(tok, "no tokenizer");
    char path[4096];
    tt_data_path(path, sizeof path, "hard_cases.jsonl");
    FILE *f = fopen(path, "rb");
    MM_REQUIRE(f, "cannot open %s", path);
    char *line = NULL;
    size_t cap = 0, n = 0, bad = 0;
    mm_token_ids ids = {0};
    while (getline(&line, &cap, f) >= 0) {
        json_t *o = json_loads(line, JSON_ALLOW_NUL, NULL);
        const json_t *t = json_object_get(o, "text");
        const char *s = json_string_value(t);
        size_t len = json_string_length(t);
        char *text = NULL;
        size_t tlen = 0;
        mm_error err = {{0}};
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t nlen = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &nfc,
                                             UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (!s || encode(tok, s, len, 1, &ids) || mm_tokenizer_decode(tok, ids.v, ids.n, &text, &tlen, &err) ||
            nlen < 0 || (size_t)nlen != tlen || memcmp(nfc, text, tlen) != 0) {
            if (bad++ < 3)
                MM_EXPECT(0, "round trip of line %zu: %s", n + 1, err.msg);
        }
        free(nfc);
        free(text);
        json_decref(o);
        n++;
    }
    free(line);
    fclose(f);
    mm_token_ids_free(&ids);
    MM_EXPECT(n > 100 && bad == 0, "%zu of %zu lines do not round-trip", bad, n);
    /* unknown ids are refused */
    char *text = NULL;
    size_t tlen;
    mm_error err = {{0}};
    int32_t unknown[] = {9707, 151676};
    MM_EXPECT(mm_tokenizer_decode(tok, unknown, 2, &text, &tlen, &err) != 0 && strstr(err.msg, "151676"),
              "unknown id: %s", err.msg);
    free(text);
}

/* ---------------------------------------------------------------- tiny tokenizers */

/* GPT-2's bytes_to_unicode spelling of byte B, UTF-8 encoded into OUT. */
static void byte_char(int b, char *out)
{
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = b;
    if (!printable) {
        int k = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255)))
                k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* Writes a tokenizer.json with the 256 byte tokens (ids 0..255), EXTRA tokens
 * (ids from 256), MERGES (a JSON array text) and the given pre-tokenizer /
 * normalizer / ignore_merges. */
static int write_tiny(const char *dir, const char *const *extra, size_t nextra, const char *merges,
                      const char *normalizer, const char *pre_tokenizer, int ignore_merges, const char *added)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char u[4];
        byte_char(b, u);
        json_object_set_new(vocab, u, json_integer(b));
    }
    for (size_t i = 0; i < nextra; i++)
        json_object_set_new(vocab, extra[i], json_integer(256 + (json_int_t)i));
    json_error_t je;
    json_t *root = json_pack("{s:o, s:o?, s:o?, s:{s:s, s:o, s:o, s:b}}", "added_tokens",
                             json_loads(added ? added : "[]", 0, &je), "normalizer",
                             normalizer ? json_loads(normalizer, 0, &je) : json_null(), "pre_tokenizer",
                             json_loads(pre_tokenizer, 0, &je), "model", "type", "BPE", "vocab", vocab, "merges",
                             json_loads(merges, 0, &je), "ignore_merges", ignore_merges);
    if (!root)
        return -1;
    char p[1024];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    int rc = json_dump_file(root, p, 0);
    json_decref(root);
    return rc;
}

static const char *QWEN_PRE = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                              "{\"Regex\": \"\\\\p{L}+|\\\\p{N}|\\\\s+|[^\\\\s\\\\p{L}\\\\p{N}]+\"}, \"behavior\": "
                              "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                              "\"use_regex\": false}]}";

static mm_tokenizer *load_tiny(const char *name, const char *const *extra, size_t nextra, const char *merges,
                               int ignore_merges, const char *normalizer, const char *added)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    mm_tokenizer *t = NULL;
    mm_error err = {{0}};
    if (mkdir(dir, 0700) != 0 || write_tiny(dir, extra, nextra, merges, normalizer, QWEN_PRE, ignore_merges, added) ||
        mm_tokenizer_load(dir, &t, &err))
        printf("       %s: %s\n", name, err.msg);
    return t;
}

static void test_bpe_merge_order(void)
{
    MM_REQUIRE(tmp_root[0], "no temp folder");
    const char *extra[] = {"ab", "bc", "abc", "aa", "aaa"};
    /* ids: bytes are their own ids (a=97 b=98 c=99); ab=256 bc=257 abc=258 aa=259 aaa=260 */
    mm_tokenizer *t = load_tiny("order1", extra, 5, "[\"a b\", \"b c\", \"ab c\", \"a a\"]", 0, NULL, NULL);
    MM_REQUIRE(t, "tiny tokenizer 1");
    EXPECT_IDS(t, "abc", 1, 258);        /* a b (rank 0), then ab c */
    EXPECT_IDS(t, "bc", 1, 257);
    EXPECT_IDS(t, "aaa", 1, 259, 97);    /* equal ranks: leftmost first */
    EXPECT_IDS(t, "aaaa", 1, 259, 259);
    EXPECT_IDS(t, "cab", 1, 99, 256);
    mm_tokenizer_free(t);
    /* the pair form of merges, and a different rank order: b c before a b */
    t = load_tiny("order2", extra, 5, "[[\"b\", \"c\"], [\"a\", \"b\"], [\"ab\", \"c\"]]", 0, NULL, NULL);
    MM_REQUIRE(t, "tiny tokenizer 2");
    EXPECT_IDS(t, "abc", 1, 97, 257);    /* bc first leaves a + bc, and there is no a+bc merge */
    EXPECT_IDS(t, "abab", 1, 256, 256);
    mm_tokenizer_free(t);
    /* ignore_merges: a piece that is a vocabulary entry is taken whole */
    t = load_tiny("ignore", extra, 5, "[\"a b\"]", 1, NULL, NULL);
    MM_REQUIRE(t, "tiny tokenizer 3");
    EXPECT_IDS(t, "abc", 1, 258);
    EXPECT_IDS(t, "abcc", 1, 256, 99, 99);
    mm_tokenizer_free(t);
    /* no normalizer: e + combining acute stays two characters (4 bytes) */
    t = load_tiny("nonfc", extra, 5, "[]", 0, NULL, NULL);
    MM_REQUIRE(t, "tiny tokenizer 4");
    mm_token_ids ids = {0};
    MM_EXPECT(encode(t, "e\xcc\x81", 3, 1, &ids) == 0 && ids.n == 3, "no NFC: %zu ids", ids.n);
    mm_tokenizer_free(t);
    /* NFC: it becomes U+00E9 (2 bytes) */
    t = load_tiny("nfc", extra, 5, "[]", 0, "{\"type\": \"NFC\"}", NULL);
    MM_REQUIRE(t, "tiny tokenizer 5");
    MM_EXPECT(encode(t, "e\xcc\x81", 3, 1, &ids) == 0 && ids.n == 2, "NFC: %zu ids", ids.n);
    mm_tokenizer_free(t);
    mm_token_ids_free(&ids);
}

/* normalized=true added tokens match after NFC; lstrip/rstrip swallow the
 * spaces around a token; single_word tokens only match as whole words. */
static void test_added_token_options(void)
{
    MM_REQUIRE(tmp_root[0], "no temp folder");
    const char *extra[] = {"ab"};
    const char *added = "[{\"id\": 300, \"content\": \"caf\\u00e9\", \"normalized\": true, \"special\": false},"
                        " {\"id\": 301, \"content\": \"[L]\", \"lstrip\": true, \"normalized\": false, \"special\": true},"
                        " {\"id\": 302, \"content\": \"[R]\", \"rstrip\": true, \"normalized\": false, \"special\": true},"
                        " {\"id\": 303, \"content\": \"xy\", \"single_word\": true, \"normalized\": false}]";
    mm_tokenizer *t = load_tiny("options", extra, 1, "[\"a b\"]", 0, "{\"type\": \"NFC\"}", added);
    MM_REQUIRE(t, "tiny tokenizer");
    EXPECT_IDS(t, "cafe\xcc\x81", 1, 300);   /* decomposed input still finds it */
    EXPECT_IDS(t, "ab  [L]ab", 1, 256, 301, 256);
    EXPECT_IDS(t, "ab[R]  ab", 1, 256, 302, 256);
    EXPECT_IDS(t, "xy ab", 1, 303, 32, 256);
    EXPECT_IDS(t, "abxy", 1, 256, 120, 121);   /* inside a word: text */
    mm_tokenizer_free(t);
}

static void test_load_errors(void)
{
    MM_REQUIRE(tmp_root[0], "no temp folder");
    mm_tokenizer *t = NULL;
    mm_error err = {{0}};
    MM_EXPECT(mm_tokenizer_load("/nonexistent/tokenizer", &t, &err) != 0 && strstr(err.msg, "/nonexistent/tokenizer"),
              "missing path: %s", err.msg);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/empty", tmp_root);
    MM_EXPECT(mkdir(dir, 0700) == 0 && mm_tokenizer_load(dir, &t, &err) != 0 && strstr(err.msg, "vocab.json"),
              "empty folder: %s", err.msg);
    snprintf(dir, sizeof dir, "%s/badjson", tmp_root);
    MM_EXPECT(mkdir(dir, 0700) == 0 && write_file(dir, "tokenizer.json", "{\"model\": [1, 2") == 0 &&
                  mm_tokenizer_load(dir, &t, &err) != 0 && strstr(err.msg, "tokenizer.json:1:"),
              "bad JSON: %s", err.msg);
    snprintf(dir, sizeof dir, "%s/badmerge", tmp_root);
    MM_EXPECT(mkdir(dir, 0700) == 0 && write_file(dir, "vocab.json", "{\"a\": 0, \"b\": 1}") == 0 &&
                  write_file(dir, "merges.txt", "#version: 0.2\na b\n") == 0 && mm_tokenizer_load(dir, &t, &err) != 0 &&
                  strstr(err.msg, "merges.txt:2") && strstr(err.msg, "merged token"),
              "merge without its token: %s", err.msg);
    snprintf(dir, sizeof dir, "%s/badline", tmp_root);
    MM_EXPECT(mkdir(dir, 0700) == 0 && write_file(dir, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}") == 0 &&
                  write_file(dir, "merges.txt", "a b\nab\n") == 0 && mm_tokenizer_load(dir, &t, &err) != 0 &&
                  strstr(err.msg, "merges.txt:2") && strstr(err.msg, "two tokens"),
              "one-token merge line: %s", err.msg);
    snprintf(dir, sizeof dir, "%s/nobytes", tmp_root);
    MM_EXPECT(mkdir(dir, 0700) == 0 && write_file(dir, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}") == 0 &&
                  write_file(dir, "merges.txt", "a b\n") == 0 && mm_tokenizer_load(dir, &t, &err) != 0 &&
                  strstr(err.msg, "byte-level"),
              "vocabulary without byte tokens: %s", err.msg);
    snprintf(dir, sizeof dir, "%s/nfkc", tmp_root);
    const char *extra[] = {"ab"};
    MM_EXPECT(mkdir(dir, 0700) == 0 &&
                  write_tiny(dir, extra, 1, "[]", "{\"type\": \"NFKC\"}", QWEN_PRE, 0, NULL) == 0 &&
                  mm_tokenizer_load(dir, &t, &err) != 0 && strstr(err.msg, "NFKC"),
              "unsupported normalizer: %s", err.msg);
    MM_EXPECT(t == NULL, "failed loads leave no tokenizer");
}

/* One tokenizer shared by threads gives the same ids as a single thread. */
typedef struct {
    const char *text;
    size_t len;
    int ok;
} thread_arg;

static void *encode_many(void *p)
{
    thread_arg *a = p;
    mm_token_ids ref = {0}, ids = {0};
    mm_error err = {{0}};
    a->ok = mm_tokenizer_encode(tok, a->text, a->len, true, &ref, &err) == 0;
    for (int i = 0; i < 200 && a->ok; i++) {
        ids.n = 0;
        a->ok = mm_tokenizer_encode(tok, a->text, a->len, true, &ids, &err) == 0 && ids.n == ref.n &&
                memcmp(ids.v, ref.v, ref.n * sizeof *ref.v) == 0;
    }
    mm_token_ids_free(&ref);
    mm_token_ids_free(&ids);
    return NULL;
}

static void test_threads(void)
{
    MM_REQUIRE(tok, "no tokenizer");
    static const char *texts[] = {
        "integrated_multimodal_description: [Shot 1] Live-action, a lighthouse keeper <d>[English] Now.</d>",
        "东京的夜晚很安静，雨声渐弱，远处有电车铃声。",
        "Straße, café, naïve — don't they'll've 1234567890 🙂👩‍👩‍👧",
        "<|vision_start|><|image_pad|><|vision_end|> a  b   c\n\n\td",
    };
    pthread_t th[8];
    thread_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (thread_arg){texts[i % 4], strlen(texts[i % 4]), 0};
        MM_REQUIRE(pthread_create(&th[i], NULL, encode_many, &args[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        MM_EXPECT(args[i].ok, "thread %d saw different ids", i);
    }
}

/* Long pieces go through the heap merge; no quadratic blow-up, no failure. */
static void test_long_inputs(void)
{
    MM_REQUIRE(tok, "no tokenizer");
    size_t n = 1 << 20;
    char *s = malloc(n);
    MM_REQUIRE(s, "malloc");
    for (size_t i = 0; i < n; i++)
        s[i] = "abcdefghij"[i % 10];
    mm_token_ids ids = {0};
    MM_EXPECT(encode(tok, s, n, 1, &ids) == 0 && ids.n > 0 && ids.n < n, "1 MiB word: %zu ids", ids.n);
    char *back = NULL;
    size_t blen = 0;
    mm_error err = {{0}};
    MM_EXPECT(mm_tokenizer_decode(tok, ids.v, ids.n, &back, &blen, &err) == 0 && blen == n && memcmp(back, s, n) == 0,
              "1 MiB word does not round-trip");
    free(back);
    memset(s, ' ', n);
    MM_EXPECT(encode(tok, s, n, 1, &ids) == 0 && ids.n > 0, "1 MiB of spaces");
    for (size_t i = 0; i < n; i++)
        s[i] = i % 3 ? ' ' : '\n';
    MM_EXPECT(encode(tok, s, n, 1, &ids) == 0 && ids.n > 0, "1 MiB of spaces and newlines");
    free(s);
    mm_token_ids_free(&ids);
}

/* Not a test: prints what a 300-token prompt costs (no timing assertion). */
static void report_speed(void)
{
    if (!tok)
        return;
    const char *prompt =
        "integrated_multimodal_description: [Shot 1] Live-action, cinematic, a medium-wide shot frames a night "
        "market under strings of paper lanterns; steam drifts from a noodle stall while a woman in a yellow raincoat "
        "counts coins. She looks up and says <d>[English] Two bowls, please, extra scallions.</d> The vendor laughs "
        "and wipes his hands on a towel. [Shot 2] At 00:03.500, the camera cuts to a close-up of the ladle; broth "
        "splashes into a white porcelain bowl, the sizzle of oil rising from a wok behind it. [Shot 3] At 00:06.250, "
        "the shot switches to a wide view of the street: scooters weave between stalls, a child points at a paper "
        "dragon.\n\noverall_soundscape: crowd murmur, rain ticking on tarpaulin, a scooter passing at 00:05.250, "
        "porcelain clinking, distant thunder rolling once near the end.\n\nnon_diegetic_music: a warm lo-fi beat "
        "with soft electric piano chords, 84 BPM, fading out over the final two seconds.";
    mm_token_ids ids = {0};
    size_t len = strlen(prompt);
    encode(tok, prompt, len, 1, &ids);
    struct timespec a, b;
    int reps = 2000;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < reps; i++) {
        mm_error err;
        ids.n = 0;
        mm_tokenizer_encode(tok, prompt, len, true, &ids, &err);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / reps;
    printf("info: encoding a %zu-token prompt (%zu bytes) takes %.1f us\n", ids.n, len, us);
    mm_token_ids_free(&ids);
}

int main(void)
{
    make_tmp_root();
    MM_RUN(test_load);
    MM_RUN(test_spec_vectors);
    MM_RUN(test_pretokenizer_pieces);
    MM_RUN(test_pretokenizer_deep_match);
    MM_RUN(test_added_tokens_by_name);
    MM_RUN(test_config_versions);
    MM_RUN(test_added_matching_rules);
    MM_RUN(test_segments_append);
    MM_RUN(test_malformed_utf8);
    MM_RUN(test_decode_round_trip);
    MM_RUN(test_bpe_merge_order);
    MM_RUN(test_added_token_options);
    MM_RUN(test_load_errors);
    MM_RUN(test_threads);
    MM_RUN(test_long_inputs);
    report_speed();
    mm_tokenizer_free(tok);
    if (tmp_root[0])
        rm_rf(tmp_root);
    return mm_test_exit();
}
