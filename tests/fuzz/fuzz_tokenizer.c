/* libFuzzer target for the tokenizer's encoder. The first input byte picks
 * the mode, the rest is the text:
 *   bit 0: match added tokens
 *   bit 1: use a tokenizer whose config adds tokens with every matching option
 *          (normalized, lstrip, rstrip, single_word, overlapping prefixes)
 * Checked: well-formed UTF-8 always encodes, malformed never does and says
 * where; ids are in range; decoding succeeds; without added-token matching
 * decode(encode(text)) is exactly NFC(text).
 *
 * The release tokenizer comes from $MMH3_FUZZ_TOKENIZER or
 * ../shared/minimax-h3/FL2VA/tokenizer beside the checkout ($MMH3_SRC).
 * Built and run by tests/suites/fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include "model/text/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mm_tokenizer *release, *options;

static int find_release(char *out, size_t n)
{
    const char *env = getenv("MMH3_FUZZ_TOKENIZER");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return 0;
    }
    const char *src = getenv("MMH3_SRC");
    const char *ups[] = {"/..", "/../..", "/../../.."};
    for (int i = 0; i < 3; i++) {
        char probe[4200];
        snprintf(out, n, "%s%s/shared/minimax-h3/FL2VA/tokenizer", src && *src ? src : ".", ups[i]);
        snprintf(probe, sizeof probe, "%s/vocab.json", out);
        if (access(probe, R_OK) == 0)
            return 0;
    }
    return -1;
}

/* The release vocabulary and merges with a config full of option-laden added
 * tokens, in a temp folder. */
static int make_options_tokenizer(const char *release_dir)
{
    char dir[] = "/tmp/mmh3-fuzztok-XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    const char *files[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        char src[4200], dst[256], abs[4200];
        snprintf(src, sizeof src, "%s/%s", release_dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        if (!realpath(src, abs) || symlink(abs, dst) != 0)
            return -1;
    }
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(cfg, "w");
    if (!f)
        return -1;
    fputs("{\"added_tokens_decoder\": {"
          "\"151643\": {\"content\": \"<|endoftext|>\", \"special\": true, \"normalized\": false},"
          "\"151700\": {\"content\": \"<a>\", \"normalized\": false},"
          "\"151701\": {\"content\": \"<a>b\", \"normalized\": false},"
          "\"151702\": {\"content\": \"a>b\", \"normalized\": false},"
          "\"151703\": {\"content\": \"caf\\u00e9\", \"normalized\": true},"
          "\"151704\": {\"content\": \"[L]\", \"lstrip\": true, \"normalized\": false},"
          "\"151705\": {\"content\": \"[R]\", \"rstrip\": true, \"normalized\": false},"
          "\"151706\": {\"content\": \"xy\", \"single_word\": true, \"normalized\": false},"
          "\"151707\": {\"content\": \"\\u00e9\\u0301\", \"normalized\": true, \"lstrip\": true, \"rstrip\": true}},"
          "\"additional_special_tokens\": [\"<d>\", \"</d>\", \"<|cutoff|>\"]}",
          f);
    if (fclose(f))
        return -1;
    mm_error err = {{0}};
    int rc = mm_tokenizer_load(dir, &options, &err);
    if (rc)
        fprintf(stderr, "fuzz_tokenizer: options tokenizer: %s\n", err.msg);
    unlink(cfg);
    for (int i = 0; i < 2; i++) {
        char dst[256];
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        unlink(dst);
    }
    rmdir(dir);
    return rc;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char dir[4096];
    mm_error err = {{0}};
    if (find_release(dir, sizeof dir) != 0) {
        fprintf(stderr, "fuzz_tokenizer: release tokenizer not found (set MMH3_FUZZ_TOKENIZER)\n");
        abort();
    }
    if (mm_tokenizer_load(dir, &release, &err) != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
    if (make_options_tokenizer(dir) != 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int mode = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const mm_tokenizer *tok = (mode & 2) ? options : release;
    int match_added = mode & 1;

    /* An independent verdict on the bytes, from utf8proc directly. */
    int valid = 1;
    for (size_t i = 0; i < len && valid;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0)
            valid = 0;
        else
            i += (size_t)k;
    }

    mm_token_ids ids = {0};
    mm_error err = {{0}};
    int rc = mm_tokenizer_encode(tok, text, len, match_added, &ids, &err);
    if (!valid) {
        if (rc == 0 || !strstr(err.msg, "invalid UTF-8 at byte") || ids.n != 0)
            abort();
        mm_token_ids_free(&ids);
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "valid text refused: %s\n", err.msg);
        abort();
    }
    if (len > 0 && ids.n == 0)
        abort();
    for (size_t i = 0; i < ids.n; i++)
        if (ids.v[i] < 0 || ids.v[i] >= mm_tokenizer_vocab_size(tok) || !mm_tokenizer_token(tok, ids.v[i]))
            abort();
    char *back = NULL;
    size_t blen = 0;
    if (mm_tokenizer_decode(tok, ids.v, ids.n, &back, &blen, &err) != 0) {
        fprintf(stderr, "decode failed: %s\n", err.msg);
        abort();
    }
    if (!match_added) {
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t nlen = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc,
                                             UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (nlen < 0 || (size_t)nlen != blen || memcmp(nfc, back, blen) != 0) {
            fprintf(stderr, "decode(encode(text)) != NFC(text)\n");
            abort();
        }
        free(nfc);
    }
    free(back);
    mm_token_ids_free(&ids);
    return 0;
}
