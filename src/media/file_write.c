/* Atomic file replacement (image.h): plain POSIX, in both builds. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "media/image.h"

int mm_file_write_atomic(const char *path, const uint8_t *data, size_t n, mm_error *err)
{
    size_t len = strlen(path);
    char *part = malloc(len + 6);
    if (!part)
        return mm_fail(err, "out of memory");
    snprintf(part, len + 6, "%s.part", path);
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        mm_fail_errno(err, "creating %s", part);
        free(part);
        return -1;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, data + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            mm_fail_errno(err, "writing %s", part);
            close(fd);
            unlink(part);
            free(part);
            return -1;
        }
        done += (size_t)w;
    }
    if (fsync(fd) < 0 || close(fd) < 0) {
        mm_fail_errno(err, "writing %s", part);
        unlink(part);
        free(part);
        return -1;
    }
    if (rename(part, path) < 0) {
        mm_fail_errno(err, "renaming %s into place", part);
        unlink(part);
        free(part);
        return -1;
    }
    free(part);
    return 0;
}
