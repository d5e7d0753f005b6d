#include "model/text/text_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int encode(void *user, const char *text, size_t len, int32_t **ids, size_t *n, mm_error *err)
{
    mm_token_ids out = {0};
    if (mm_tokenizer_encode(user, text, len, true, &out, err) < 0) {
        mm_token_ids_free(&out);
        return -1;
    }
    /* Ownership of the array moves to the caller (malloc'ed, freed with free()). */
    *ids = out.v;
    *n = out.n;
    return 0;
}

mm_text_tokenizer mm_text_tokenizer_bind(const mm_tokenizer *tok)
{
    return (mm_text_tokenizer){encode, (void *)tok};
}

int mm_text_tokenizer_open(const char *path, mm_text_tokenizer *out, void **owner, mm_error *err)
{
    mm_tokenizer *tok;
    if (mm_tokenizer_load(path, &tok, err) < 0)
        return -1;
    *out = mm_text_tokenizer_bind(tok);
    *owner = tok;
    return 0;
}

void mm_text_tokenizer_close(void *owner) { mm_tokenizer_free(owner); }

const char *mm_text_tokenizer_find_release(const char *dir, char *buf, size_t n)
{
    const char *shared = getenv("MMH3_SHARED");
    char probe[4400];
    for (int i = -1; i < 4; i++) {
        if (i < 0) {
            if (!shared || !*shared)
                continue;
            snprintf(buf, n, "%s/minimax-h3/FL2VA/tokenizer", shared);
        } else {
            static const char *ups[] = {"/..", "/../..", "/../../..", "/../../../.."};
            snprintf(buf, n, "%s%s/shared/minimax-h3/FL2VA/tokenizer", dir, ups[i]);
        }
        snprintf(probe, sizeof probe, "%s/vocab.json", buf);
        if (access(probe, R_OK) == 0)
            return buf;
    }
    return NULL;
}
