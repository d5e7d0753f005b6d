/* The Qwen2-family byte-level BPE tokenizer (MiniMax-H3's prompt tokenizer).
 *
 * Agrees token-for-token with Hugging Face `tokenizers` for the files the
 * release ships: NFC normalization, the Qwen2 pre-tokenizer regex (PCRE2 with
 * Unicode properties), GPT-2 byte-to-unicode mapping, BPE merges by rank, and
 * added tokens (<|vision_start|>, <think>, MiniMax's <d> ...) matched in the
 * raw text before anything else, leftmost-longest, as HF does.
 *
 *   mm_tokenizer *tok;
 *   if (mm_tokenizer_load("FL2VA/tokenizer", &tok, &err)) ...
 *   mm_token_ids ids = {0};
 *   mm_tokenizer_encode(tok, "<Picture 1>: ", 13, true, &ids, &err);   // appends
 *   mm_tokenizer_encode(tok, prompt, strlen(prompt), true, &ids, &err);
 *   ... ids.v[0 .. ids.n) ...
 *   mm_token_ids_free(&ids);
 *   mm_tokenizer_free(tok);
 *
 * A loaded tokenizer is immutable apart from an internal, locked word cache:
 * one instance may be shared by any number of threads.
 */
#ifndef MMH3_MODEL_TEXT_TOKENIZER_H
#define MMH3_MODEL_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct mm_tokenizer mm_tokenizer;

/* A growable id array owned by the caller; start from {0}. Encoding appends,
 * so segments (labels, prompt, raw vision ids) concatenate into one array. */
typedef struct mm_token_ids {
    int32_t *v;
    size_t n, cap;
} mm_token_ids;

int mm_token_ids_push(mm_token_ids *ids, int32_t id, mm_error *err);
int mm_token_ids_reserve(mm_token_ids *ids, size_t extra, mm_error *err);
void mm_token_ids_free(mm_token_ids *ids);

/* Loads a tokenizer. PATH is
 *   - a tokenizer.json file (HF format; a tokenizer_config.json beside it is
 *     read too, for its added tokens), or
 *   - a folder holding tokenizer.json, or vocab.json + merges.txt, plus
 *     optionally tokenizer_config.json.
 * Added tokens come from tokenizer.json's added_tokens and from
 * tokenizer_config.json: added_tokens_decoder (explicit ids), then the special
 * tokens it names (bos/eos/unk/sep/pad/cls/mask, additional_special_tokens)
 * that are still unknown, appended with new ids in that order — which is how
 * the release's <d>, </d>, <|cutoff|> ... get 151669..151675 from a config
 * that lists them only by name. */
int mm_tokenizer_load(const char *path, mm_tokenizer **out, mm_error *err);
void mm_tokenizer_free(mm_tokenizer *tok);

/* Encodes LEN bytes of UTF-8 TEXT and appends the ids to OUT. No special
 * tokens are added (no BOS/EOS, no template). With MATCH_ADDED, added and
 * special tokens written in the text become their ids (HF's default,
 * add_special_tokens=False, split_special_tokens=False); without it the whole
 * text is ordinary text ("<d>" -> "<", "d", ">"-style pieces).
 * Malformed UTF-8 (including encoded surrogates and overlong forms) is
 * rejected: -1 with the byte offset in ERR, OUT unchanged. NUL bytes are
 * ordinary characters. */
int mm_tokenizer_encode(const mm_tokenizer *tok, const char *text, size_t len, bool match_added,
                        mm_token_ids *out, mm_error *err);

/* Decodes ids back to UTF-8 bytes (byte-level inverse; added tokens give
 * their content). *TEXT is malloc'ed and NUL-terminated, *LEN excludes the
 * NUL. The bytes may be invalid UTF-8 when the ids cut a character. Unknown
 * ids are an error. */
int mm_tokenizer_decode(const mm_tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len,
                        mm_error *err);

/* Id of a token string: an added token's content ("<|image_pad|>", "<d>") or a
 * vocabulary entry in its byte-level spelling ("Ġhello"). -1 when unknown. */
int32_t mm_tokenizer_token_id(const mm_tokenizer *tok, const char *token);
/* The token string of ID (NUL-terminated, owned by TOK), or NULL. */
const char *mm_tokenizer_token(const mm_tokenizer *tok, int32_t id);
/* Whether ID is an added token marked special. */
bool mm_tokenizer_is_special(const mm_tokenizer *tok, int32_t id);
/* One past the largest id (vocabulary and added tokens). */
int32_t mm_tokenizer_vocab_size(const mm_tokenizer *tok);
/* Number of added tokens. */
size_t mm_tokenizer_added_count(const mm_tokenizer *tok);

#endif
