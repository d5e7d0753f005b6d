/* The pre-tokenizer: the text is cut into pieces by a regex whose every match
 * is a piece ("Isolated" splitting; text between matches is a piece too).
 * PCRE2 with UTF and UCP stands in for the Oniguruma engine HF tokenizers
 * uses; the Qwen2 pattern only needs ordered alternation, \p{L}, \p{N}, \s,
 * a lookahead and a caseless group, which both engines read the same way. */
#ifndef MMH3_MODEL_TEXT_PRETOKENIZE_H
#define MMH3_MODEL_TEXT_PRETOKENIZE_H

#include <stddef.h>

#include "core/error.h"

/* The Qwen2 family's pattern (transformers' PRETOKENIZE_REGEX), used when the
 * files do not carry one (vocab.json + merges.txt form). */
extern const char mm_qwen2_pretokenize_regex[];
/* GPT-2's pattern: the ByteLevel pre-tokenizer with use_regex=true. */
extern const char mm_gpt2_pretokenize_regex[];

typedef struct mm_pretok mm_pretok;

int mm_pretok_create(const char *pattern, mm_pretok **out, mm_error *err);
void mm_pretok_free(mm_pretok *pt);
const char *mm_pretok_pattern(const mm_pretok *pt);

/* Per-call matching state (match data); one per thread or call. */
typedef struct mm_pretok_state mm_pretok_state;
mm_pretok_state *mm_pretok_state_new(const mm_pretok *pt);
void mm_pretok_state_free(mm_pretok_state *st);

/* Calls PIECE(user, start, len) for each piece of the well-formed UTF-8
 * S[0..N), in order; stops at the first non-zero return and returns it.
 * Returns -1 with ERR set when the regex engine fails (resource limits). */
typedef int (*mm_pretok_piece_fn)(void *user, const char *piece, size_t len);
int mm_pretok_split(const mm_pretok *pt, mm_pretok_state *st, const char *s, size_t n,
                    mm_pretok_piece_fn piece, void *user, mm_error *err);

#endif
