/* HTTP(S) downloads of checkpoint files (libcurl): resumable, size and hash
 * checked, never leaving a partial file at the destination.
 *
 * The body goes to "<dest>.part"; an existing .part is resumed with a Range
 * request (a server that answers 200 instead of 206 restarts it from zero).
 * When the transfer ends, the size is checked against the caller's expected
 * size or the size the server announced (Content-Range total, Content-Length,
 * or Hugging Face's X-Linked-Size), and the sha256 against the caller's
 * expected hash or the one the server announced (Hugging Face's X-Linked-Etag
 * / ETag of LFS files, when it is 64 hex digits). A mismatch deletes the .part
 * and fails; a network failure keeps it for the next attempt. The finished
 * file is renamed into place (parent folders are created). $HF_TOKEN, when
 * set, is sent as a bearer token.
 *
 * Builds without libcurl have these functions failing with "built without
 * libcurl". */
#ifndef MMH3_IO_DOWNLOAD_H
#define MMH3_IO_DOWNLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

typedef struct mm_download_opts {
    uint64_t expected_size;          /* 0 = unknown */
    const char *expected_sha256;     /* lower-case hex, or NULL */
    /* Called now and then with bytes present so far and the total (0 if unknown). */
    void (*progress)(void *user, uint64_t have, uint64_t total);
    void *user;
    long connect_timeout_s; /* 0 = 30 */
    long low_speed_timeout_s; /* abort when below 1 kB/s for this long; 0 = 60 */
} mm_download_opts;

/* True when this build can download. */
bool mm_download_available(void);
int mm_download(const char *url, const char *dest, const mm_download_opts *opts, mm_error *err);
/* sha256 of a file, streamed (lower-case hex). */
int mm_sha256_file(const char *path, char hex[65], mm_error *err);
/* mkdir -p of the folder that will hold `path`. */
int mm_make_parent_dirs(const char *path, mm_error *err);

#endif
