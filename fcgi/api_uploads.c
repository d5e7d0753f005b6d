/* POST /api/images (multipart upload of reference images, videos and audio)
 * and GET /api/images/{id}.
 *
 * The body (already buffered whole by nginx) is spooled to a hidden file in
 * the uploads folder and mapped; each file part is written under a generated
 * name, opened and decoded with the FFmpeg libraries (src/media/probe.h:
 * file protocol only, demuxer/decoder allowlists, size/dimension/duration
 * limits), renamed to <id>.<extension of the detected format>, and videos get
 * a JPEG poster. Either every part is stored and recorded, or none is.
 */
#include "config.h"

#include "fcgi/app.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "fcgi/multipart.h"
#include "store/uploads.h"

#if defined(__has_include)
#if __has_include("media/probe.h") && __has_include("media/poster.h") && defined(MMH3_HAVE_FFMPEG)
#include "media/poster.h"
#include "media/probe.h"
#define HAVE_MEDIA_PROBE 1
#endif
#endif

#define MAX_FILES 15
#define MAX_PARTS 32
#define POSTER_EDGE 640
/* Files checked at once per mmh3-fcgi process: a check decodes a picture
 * (up to the media budget, 128 MiB), so N parallel uploads must not
 * multiply the peak by N; the others wait their turn. */
#define MAX_DECODES 2

#ifdef HAVE_MEDIA_PROBE
typedef mm_store_upload stored;

static pthread_mutex_t decode_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t decode_free = PTHREAD_COND_INITIALIZER;
static int decodes_running;

static void decode_enter(void)
{
    pthread_mutex_lock(&decode_lock);
    while (decodes_running >= MAX_DECODES)
        pthread_cond_wait(&decode_free, &decode_lock);
    decodes_running++;
    pthread_mutex_unlock(&decode_lock);
}

static void decode_leave(void)
{
    pthread_mutex_lock(&decode_lock);
    decodes_running--;
    pthread_cond_signal(&decode_free);
    pthread_mutex_unlock(&decode_lock);
}

static void abs_path(mm_req *r, const char *rel, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", r->app->outputs, rel);
}

static void unstore(mm_req *r, stored *s, int n)
{
    char p[4096];
    for (int i = 0; i < n; i++) {
        if (s[i].rel[0]) {
            abs_path(r, s[i].rel, p, sizeof p);
            unlink(p);
        }
        if (s[i].poster_rel[0]) {
            abs_path(r, s[i].poster_rel, p, sizeof p);
            unlink(p);
        }
    }
}

/* The client's file name, for display only: its last path component,
 * control characters dropped. */
static void display_name(const char *in, char *out, size_t n)
{
    const char *base = in;
    for (const char *p = in; *p; p++)
        if (*p == '/' || *p == '\\')
            base = p + 1;
    size_t w = 0;
    for (const char *p = base; *p && w + 1 < n; p++)
        if ((unsigned char)*p >= 0x20 && *p != 0x7f)
            out[w++] = *p;
    out[w] = '\0';
}

static int write_file(const char *path, const uint8_t *data, size_t len, mm_error *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return mm_fail_errno(err, "creating %s", path);
    size_t done = 0;
    while (done < len) {
        ssize_t k = write(fd, data + done, len - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            close(fd);
            unlink(path);
            return mm_fail_errno(err, "writing %s", path);
        }
        done += (size_t)k;
    }
    /* On disk before it gets its public name (a crash must not leave a
     * short file where nginx serves it). */
    if (fsync(fd) < 0 && errno != EINVAL) {
        close(fd);
        unlink(path);
        return mm_fail_errno(err, "writing %s", path);
    }
    if (close(fd) < 0) {
        unlink(path);
        return mm_fail_errno(err, "writing %s", path);
    }
    return 0;
}

/* Spools the request body into `path` (the body can be hundreds of MB). */
static int spool_body(mm_req *r, const char *path, size_t *len, int *status, mm_error *err)
{
    const char *cl = mm_req_header(r, "CONTENT_LENGTH");
    char *end;
    unsigned long long n = cl && *cl ? strtoull(cl, &end, 10) : 0;
    if (!cl || !*cl || *end) {
        *status = 411;
        return mm_fail(err, "the upload has no Content-Length");
    }
    if (n > r->app->max_upload_bytes) {
        *status = 413;
        return mm_fail(err, "the upload is %llu bytes, more than the %zu accepted", n, r->app->max_upload_bytes);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        *status = 500;
        return mm_fail_errno(err, "creating %s", path);
    }
    char buf[1 << 16];
    unsigned long long got = 0;
    while (got < n) {
        int want = n - got < sizeof buf ? (int)(n - got) : (int)sizeof buf;
        int k = FCGX_GetStr(buf, want, r->fcgx->in);
        if (k <= 0)
            break;
        if (write(fd, buf, (size_t)k) != k) {
            close(fd);
            *status = 500;
            return mm_fail_errno(err, "writing %s", path);
        }
        got += (unsigned long long)k;
    }
    close(fd);
    if (got != n) {
        *status = 400;
        return mm_fail(err, "the upload ended after %llu of %llu bytes", got, n);
    }
    *len = (size_t)n;
    return 0;
}

static const char *kind_name(int kind)
{
    return kind == MM_MEDIA_VIDEO ? "video" : kind == MM_MEDIA_AUDIO ? "audio" : "image";
}

static int check_and_name(mm_req *r, const mm_mp_part *part, stored *s, const char *tmp, mm_error *err);

/* Writes, checks and names one file part; the check (probe and poster)
 * waits for a decode slot. */
static int store_part(mm_req *r, const mm_mp_part *part, stored *s, mm_error *err)
{
    mm_uuid_v4(s->id);
    char tmp_rel[128], tmp[4096];
    snprintf(tmp_rel, sizeof tmp_rel, "uploads/.incoming-%s", s->id);
    abs_path(r, tmp_rel, tmp, sizeof tmp);
    if (write_file(tmp, part->data, part->len, err) < 0)
        return -1;
    decode_enter();
    int rc = check_and_name(r, part, s, tmp, err);
    decode_leave();
    return rc;
}

static int check_and_name(mm_req *r, const mm_mp_part *part, stored *s, const char *tmp, mm_error *err)
{
    char final[4096];
    mm_media_info info;
    if (mm_media_probe(tmp, NULL, &info, err) < 0) {
        unlink(tmp);
        /* The client needs the verdict, not our file system layout. */
        size_t tl = strlen(tmp);
        if (strncmp(err->msg, tmp, tl) == 0 && err->msg[tl] == ':')
            memmove(err->msg, err->msg + tl + 2, strlen(err->msg + tl + 2) + 1);
        return -1;
    }
    snprintf(s->kind, sizeof s->kind, "%s", kind_name(info.kind));
    snprintf(s->content_type, sizeof s->content_type, "%s", info.mime_type);
    snprintf(s->format_name, sizeof s->format_name, "%s", info.format_name);
    snprintf(s->codec_name, sizeof s->codec_name, "%s",
             info.kind == MM_MEDIA_AUDIO ? info.audio_codec : info.video_codec);
    s->bytes = (long long)part->len;
    s->width = info.kind == MM_MEDIA_AUDIO ? 0 : info.width;
    s->height = info.kind == MM_MEDIA_AUDIO ? 0 : info.height;
    s->duration = info.kind == MM_MEDIA_IMAGE ? 0 : info.duration_seconds;
    s->has_audio = info.has_audio;
    display_name(part->filename, s->original_name, sizeof s->original_name);
    snprintf(s->rel, sizeof s->rel, "uploads/%s.%s", s->id, info.extension);
    abs_path(r, s->rel, final, sizeof final);
    if (rename(tmp, final) < 0) {
        unlink(tmp);
        s->rel[0] = '\0';
        return mm_fail_errno(err, "storing the upload");
    }
    if (info.kind == MM_MEDIA_VIDEO) {
        char poster[4096];
        snprintf(s->poster_rel, sizeof s->poster_rel, "uploads/%s.poster.jpg", s->id);
        abs_path(r, s->poster_rel, poster, sizeof poster);
        if (mm_media_poster(final, poster, POSTER_EDGE, err) < 0) {
            s->poster_rel[0] = '\0';
            return mm_error_prefix(err, "making its poster frame");
        }
    }
    return 0;
}

#endif

void mm_api_upload(mm_req *r)
{
    static const char accept[] = "multipart/form-data with 1..15 file parts (field name 'files'): images (PNG, JPEG, "
                                 "WebP, BMP, TIFF, GIF), videos (mp4, mov, webm, mkv) or audio (wav, mp3, flac, ogg, "
                                 "m4a)";
    char boundary[128];
    mm_error err = {{0}};
    if (mm_multipart_boundary(mm_req_header(r, "CONTENT_TYPE"), boundary, sizeof boundary, &err) < 0) {
        mm_reply_error(r, 415, NULL, accept, "%s", err.msg);
        return;
    }
#ifndef HAVE_MEDIA_PROBE
    mm_reply_error(r, 503, NULL, NULL,
                   "uploads are checked with the FFmpeg libraries, and this build has no media probe");
#else
    char dir[4096], spool[4096], spool_rel[128], id[37];
    abs_path(r, "uploads", dir, sizeof dir);
    mkdir(dir, 0755);
    mm_uuid_v4(id);
    snprintf(spool_rel, sizeof spool_rel, "uploads/.body-%s", id);
    abs_path(r, spool_rel, spool, sizeof spool);
    size_t len = 0;
    int status = 400;
    if (spool_body(r, spool, &len, &status, &err) < 0) {
        unlink(spool);
        mm_reply_error(r, status, NULL, accept, "%s", err.msg);
        return;
    }
    int fd = open(spool, O_RDONLY | O_CLOEXEC);
    unlink(spool); /* the mapping keeps it alive */
    uint8_t *body = NULL;
    if (fd >= 0 && len > 0) {
        void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        body = m == MAP_FAILED ? NULL : m;
    }
    if (fd >= 0)
        close(fd);
    if (!body) {
        mm_reply_error(r, 400, NULL, accept, "the upload is empty");
        return;
    }
    mm_mp_part *parts = calloc(MAX_PARTS, sizeof *parts);
    stored *files = calloc(MAX_FILES, sizeof *files);
    json_t *images = json_array(), *ids = json_array();
    int n_parts = 0, n_files = 0, n_stored = 0;
    if (!parts || !files) {
        mm_reply_error(r, 500, NULL, NULL, "out of memory");
        goto done;
    }
    if (mm_multipart_parse(boundary, body, len, parts, MAX_PARTS, &n_parts, &err) < 0) {
        mm_reply_error(r, 400, NULL, accept, "%s", err.msg);
        goto done;
    }
    for (int i = 0; i < n_parts; i++)
        n_files += parts[i].filename[0] != '\0';
    if (n_files == 0) {
        mm_reply_error(r, 400, "files", accept, "the upload has no file parts");
        goto done;
    }
    if (n_files > MAX_FILES) {
        mm_reply_error(r, 400, "files", accept, "the upload has %d files, more than %d", n_files, MAX_FILES);
        goto done;
    }
    for (int i = 0, k = 0; i < n_parts; i++) {
        if (!parts[i].filename[0])
            continue;
        char field[32];
        snprintf(field, sizeof field, "files[%d]", k);
        if (parts[i].len == 0) {
            unstore(r, files, n_stored);
            mm_reply_error(r, 400, field, accept, "'%s' is empty", parts[i].filename);
            goto done;
        }
        if (store_part(r, &parts[i], &files[n_stored], &err) < 0) {
            n_stored++;
            unstore(r, files, n_stored);
            mm_reply_error(r, 400, field, accept, "'%s': %s", parts[i].filename, err.msg);
            goto done;
        }
        n_stored++;
        k++;
    }
    PGconn *db = mm_req_db(r);
    if (!db) {
        unstore(r, files, n_stored);
        goto done;
    }
    if (mm_store_uploads_insert(db, files, n_stored, images, &err) < 0) {
        unstore(r, files, n_stored);
        if (PQstatus(db) != CONNECTION_OK)
            mm_reply_error(r, 503, NULL, NULL, "the database went away while recording the upload; nothing was "
                                               "kept, send it again");
        else
            mm_reply_error(r, 500, NULL, NULL, "recording the upload: %s", err.msg);
        goto done;
    }
    for (int i = 0; i < n_stored; i++)
        json_array_append_new(ids, json_string(files[i].id));
    mm_reply_json(r, 200, json_pack("{s:O, s:O}", "image_ids", ids, "images", images));
done:
    json_decref(images);
    json_decref(ids);
    free(parts);
    free(files);
    munmap(body, len);
#endif
}

void mm_api_upload_get(mm_req *r, const char *id)
{
    PGconn *db = mm_req_db(r);
    if (!db)
        return;
    char *json = NULL;
    mm_error err = {{0}};
    if (mm_store_upload_json(db, id, &json, &err) < 0) {
        mm_reply_error(r, 500, NULL, NULL, "%s", err.msg);
        return;
    }
    if (!json)
        mm_reply_error(r, 404, NULL, NULL, "no upload has the id %s", id);
    else
        mm_reply_raw_json(r, 200, json);
    free(json);
}
