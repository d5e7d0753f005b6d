/* The byte-level BPE model: vocabulary, merge ranks, the GPT-2 byte-to-unicode
 * alphabet, and the merge loop that turns one pre-tokenized piece into ids. */
#ifndef MMH3_MODEL_TEXT_BPE_H
#define MMH3_MODEL_TEXT_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/text/tokenizer.h"

/* Ids above this are refused at load (a guard against absurd files). */
#define MM_BPE_MAX_ID (1 << 24)

typedef struct mm_bpe mm_bpe;

mm_bpe *mm_bpe_new(void);
void mm_bpe_free(mm_bpe *b);

/* Building, in this order: every vocabulary entry (token in its byte-level
 * spelling), then the merges in rank order, then finish. */
int mm_bpe_add_token(mm_bpe *b, const char *tok, size_t len, int32_t id, mm_error *err);
int mm_bpe_add_merge(mm_bpe *b, const char *left, size_t llen, const char *right, size_t rlen, mm_error *err);
int mm_bpe_finish(mm_bpe *b, bool ignore_merges, mm_error *err);

size_t mm_bpe_vocab_count(const mm_bpe *b);  /* entries */
int32_t mm_bpe_id_limit(const mm_bpe *b);    /* largest id + 1 */
size_t mm_bpe_merge_count(const mm_bpe *b);

int32_t mm_bpe_token_id(const mm_bpe *b, const char *tok, size_t len); /* -1 if absent */
const char *mm_bpe_token(const mm_bpe *b, int32_t id, size_t *len);   /* NULL if absent */

/* Appends the raw bytes a byte-level token spells (its inverse mapping). */
int mm_bpe_token_bytes(const mm_bpe *b, int32_t id, char **buf, size_t *len, size_t *cap, mm_error *err);

/* Encodes one piece (raw UTF-8 bytes, before byte-level mapping) and appends
 * its ids. Thread-safe; short pieces go through a shared, locked cache. */
int mm_bpe_encode_piece(mm_bpe *b, const char *piece, size_t len, mm_token_ids *out, mm_error *err);

#endif
