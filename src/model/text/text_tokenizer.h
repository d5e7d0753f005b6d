/* The presentation's tokenizer callback bound to the project's Qwen2 BPE
 * tokenizer (tokenizer.h): added tokens matched in the text, no special
 * tokens added — Hugging Face's tokenizer(text, add_special_tokens=False). */
#ifndef MMH3_MODEL_TEXT_TEXT_TOKENIZER_H
#define MMH3_MODEL_TEXT_TEXT_TOKENIZER_H

#include "model/text/presentation.h"
#include "model/text/tokenizer.h"

/* Binds an already loaded tokenizer (borrowed). */
mm_text_tokenizer mm_text_tokenizer_bind(const mm_tokenizer *tok);
/* Loads PATH (any form mm_tokenizer_load reads) and binds it; *owner is the
 * loaded tokenizer, released with mm_text_tokenizer_close. */
int mm_text_tokenizer_open(const char *path, mm_text_tokenizer *out, void **owner, mm_error *err);
void mm_text_tokenizer_close(void *owner);

/* The release tokenizer folder beside a checkout (for tests and the kit
 * runner): $MMH3_SHARED/minimax-h3/FL2VA/tokenizer, else
 * <dir>/../shared/... up to four levels above `dir`. NULL when absent. */
const char *mm_text_tokenizer_find_release(const char *dir, char *buf, size_t n);

#endif
