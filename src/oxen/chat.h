/* Streamed chat completions on the hub's OpenAI-compatible endpoint
 * (POST /api/ai/chat/completions with "stream": true), for the prompt
 * rewrite. The answer is read as server-sent events: each
 * `data: {"choices":[{"delta":{"content":"..."}}]}` frame yields a token,
 * `data: [DONE]` ends it. Frames may be split across network reads anywhere
 * (oxen/sse.h reassembles them). An error frame (`data: {"error":{...}}`),
 * an error status, or a stream that ends before [DONE] and before any
 * finish_reason is a failure whose message is the hub's.
 */
#ifndef MMH3_OXEN_CHAT_H
#define MMH3_OXEN_CHAT_H

#include <stddef.h>

#include "core/error.h"
#include "oxen/client.h"

#define MM_OXEN_CHAT_PATH "/api/ai/chat/completions"

/* Return -1 to stop (e.g. the browser went away). */
typedef int (*mm_chat_token_fn)(void *user, const char *token, size_t len);

typedef struct mm_chat_request {
    const char *model;
    const char *system_prompt; /* may be NULL or "" */
    const char *user_prompt;
    double temperature;        /* < 0: not sent */
    int max_tokens;            /* 0: not sent */
} mm_chat_request;

/* Streams the completion; on success *text (may be NULL) gets the whole
 * answer (caller frees). The message of a failure is fit for the user: it
 * never contains the API key. */
int mm_oxen_chat_stream(const mm_oxen_client *c, const mm_chat_request *req, mm_chat_token_fn on_token,
                        void *user, char **text, mm_error *err);

#endif
