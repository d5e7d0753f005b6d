/* Errors as values.
 *
 * Every fallible function returns 0 on success and -1 on failure, writing a
 * human-readable message into the caller's mm_error (which may be NULL when the
 * caller does not care). Messages say what was wrong and what is accepted;
 * callers add context with mm_error_prefix() as the error travels up, so the
 * final line reads like "loading dit: blocks.3.attn.qkv_proj.weight: shape
 * [21504, 5376] expected, file has [21504, 5120]".
 */
#ifndef MMH3_CORE_ERROR_H
#define MMH3_CORE_ERROR_H

#include <stdarg.h>

#include <stddef.h>

#define MM_ERROR_MAX 1024

typedef struct mm_error {
    char msg[MM_ERROR_MAX];
} mm_error;

#if defined(__GNUC__)
#define MM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MM_PRINTF(a, b)
#endif

/* Sets the message and returns -1, so `return mm_fail(err, "...")` reads well. */
int mm_fail(mm_error *err, const char *fmt, ...) MM_PRINTF(2, 3);
/* Prepends "context: " to an existing message and returns -1. */
int mm_error_prefix(mm_error *err, const char *fmt, ...) MM_PRINTF(2, 3);
/* Sets the message from errno: "<what>: <strerror(errno)>". Returns -1. */
int mm_fail_errno(mm_error *err, const char *fmt, ...) MM_PRINTF(2, 3);
/* "<what>: <cause>", what from fmt and ap: the shape of mm_fail_errno for
 * libraries with error codes of their own (FFmpeg's). Returns -1. */
int mm_vfail_cause(mm_error *err, const char *cause, const char *fmt, va_list ap) MM_PRINTF(3, 0);
void mm_error_clear(mm_error *err);

#endif
