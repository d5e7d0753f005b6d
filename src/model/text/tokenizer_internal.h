/* The tokenizer's internals, shared by its loader and its encoder. */
#ifndef MMH3_MODEL_TEXT_TOKENIZER_INTERNAL_H
#define MMH3_MODEL_TEXT_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/text/bpe.h"
#include "model/text/pretokenize.h"
#include "model/text/tokenizer.h"

typedef struct mm_added_token {
    char *content;       /* as declared; what decoding gives back */
    size_t len;
    char *match;         /* what is searched for: content, or NFC(content) for normalized tokens */
    size_t match_len;
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
} mm_added_token;

/* The tokens searched in one pass, grouped by first byte, longest first within
 * a group, so the first hit at the leftmost position is the longest. */
typedef struct mm_added_set {
    uint32_t first[257]; /* order[first[c] .. first[c+1]) start with byte c */
    uint32_t *order;     /* indices into mm_tokenizer.added */
    uint32_t count;
} mm_added_set;

struct mm_tokenizer {
    mm_bpe *bpe;
    mm_pretok *pretok;
    bool nfc;
    bool split_special; /* tokenizer_config split_special_tokens: special tokens are text */
    mm_added_token *added;
    size_t nadded, added_cap;
    uint32_t *by_id;     /* indices into added, sorted by id */
    mm_added_set raw_set;        /* normalized=false: matched in the raw text */
    mm_added_set normalized_set; /* normalized=true: matched after NFC */
    int32_t id_limit;
};

#endif
