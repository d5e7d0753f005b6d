/* Unicode text checks and normalization for the tokenizer (utf8proc tables). */
#ifndef MMH3_MODEL_TEXT_NORMALIZE_H
#define MMH3_MODEL_TEXT_NORMALIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* 0 when S[0..N) is well-formed UTF-8 (no surrogates, no overlong forms, no
 * code point above U+10FFFF); otherwise -1 with the offending byte offset and
 * value in ERR. */
int mm_utf8_validate(const char *s, size_t n, mm_error *err);

/* NFC of the well-formed UTF-8 S[0..N). *OUT is either S itself (*OWNED set
 * to false: the text was already NFC, the common case) or a new malloc'ed
 * NUL-terminated buffer the caller frees. */
int mm_utf8_nfc(const char *s, size_t n, const char **out, size_t *out_len, bool *owned, mm_error *err);

/* Decodes the code point at S (well-formed, N > 0 bytes left); returns its
 * length in bytes. */
size_t mm_utf8_decode(const char *s, size_t n, int32_t *cp);

/* Unicode White_Space, and "word" characters as regex \w understands them
 * (letters, marks, decimal digits, connector punctuation, ZWJ/ZWNJ). Used for
 * the lstrip/rstrip/single_word options of added tokens. */
bool mm_unicode_is_space(int32_t cp);
bool mm_unicode_is_word(int32_t cp);

#endif
