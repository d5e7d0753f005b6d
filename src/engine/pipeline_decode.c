/* Latents → the mp4: the target video rows are unpatchified and decoded by
 * the video VAE; each frame, as soon as it is final, is handed to a writer
 * thread that feeds the H.264 encoder (and the optional PNG dump), so x264
 * works while the VAE decodes the next chunk instead of holding the GPU
 * idle in the frame callback. After the last frame the writer flushes x264's
 * delayed frames while the GPU decodes the target audio rows; it then muxes
 * that audio as AAC, writes the index and renames the file into place
 * (vae.md §3.8, MEDIA.md). The writer owns the mp4 from open to close.
 *
 * Timing rows add up to the wall clock: the decode row is the decode minus
 * the time it waited for a free frame slot; that wait is the "mux video"
 * row; the audio decode is its own row; the wait for the writer after it is
 * the "finish mp4" row (the part of the encode the decodes did not hide).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline_internal.h"
#include "media/image.h"
#include "media/mp4_writer.h"
#include "model/dit/patchify.h"
#include "model/vae/vae.h"

/* Frames in flight between the decode and the encoder. The VAE finalizes a
 * chunk's frames at once (124 frames come in 7 chunks with the release's
 * config), and the writer converts each to yuv420p before x264 takes it; with
 * room for a whole chunk the decode never waits for that conversion
 * (32 × 3.1 MB of host memory at 1344x768). */
#define SLOTS 32

typedef struct frame_queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint8_t *slot[SLOTS];
    int64_t index[SLOTS];
    int head, count;   /* ring of filled slots */
    bool done, failed; /* producer finished / writer failed */
    mm_error err;      /* the writer's failure */
    double busy;       /* seconds the writer spent encoding */
    /* the audio, handed over once the GPU has decoded it (owned by the
     * writer from then on); audio_given without a wave = a silent clip */
    bool audio_given;
    float *wave;
    int64_t samples;
} frame_queue;

typedef struct decode_state {
    pl_job *j;
    mm_mp4_writer *w;
    frame_queue q;
    pthread_t writer;
    bool writer_started;
    size_t frame_bytes;
    double wait_seconds; /* decode blocked on a full queue */
    int64_t frames;
    bool cancelled;
} decode_state;

/* The writer's encoding time and its first failure; called with q->lock held. */
static void writer_record_locked(frame_queue *q, int rc, const mm_error *err, double seconds)
{
    q->busy += seconds;
    if (rc != 0 && !q->failed) {
        q->failed = true;
        q->err = *err;
    }
}

/* After the last frame: x264's delayed frames are encoded while the GPU still
 * decodes the audio, then the audio is muxed and the file closed (renamed into
 * place). A failure anywhere, the writer's or the decode's, leaves the mp4 to
 * the caller's abort. */
static void writer_finish(decode_state *s)
{
    frame_queue *q = &s->q;
    mm_error err = {{0}};
    double t0 = mm_timing_now();
    pthread_mutex_lock(&q->lock);
    bool failed = q->failed;
    pthread_mutex_unlock(&q->lock);
    int rc = failed ? 0 : mm_mp4_writer_finish_video(s->w, &err);
    double t = mm_timing_now() - t0;

    pthread_mutex_lock(&q->lock);
    while (!q->audio_given)
        pthread_cond_wait(&q->cond, &q->lock);
    failed = q->failed;
    float *wave = q->wave;
    int64_t samples = q->samples;
    q->wave = NULL;
    pthread_mutex_unlock(&q->lock);

    t0 = mm_timing_now();
    if (!failed && rc == 0 && wave) {
        const float *chans[2] = {wave, wave + samples};
        rc = mm_mp4_write_audio_planar(s->w, chans, (int)samples, &err);
    }
    free(wave);
    if (!failed && rc == 0) {
        rc = mm_mp4_writer_close(s->w, &err); /* frees the writer, also on failure */
        s->w = NULL;
    }
    pthread_mutex_lock(&q->lock);
    writer_record_locked(q, rc, &err, t + mm_timing_now() - t0);
    pthread_mutex_unlock(&q->lock);
}

static void *writer_main(void *arg)
{
    decode_state *s = arg;
    frame_queue *q = &s->q;
    pl_job *j = s->j;
    for (;;) {
        pthread_mutex_lock(&q->lock);
        while (q->count == 0 && !q->done)
            pthread_cond_wait(&q->cond, &q->lock);
        if (q->count == 0) {
            pthread_mutex_unlock(&q->lock);
            writer_finish(s);
            return NULL;
        }
        uint8_t *rgb = q->slot[q->head];
        int64_t index = q->index[q->head];
        bool failed = q->failed;
        pthread_mutex_unlock(&q->lock);

        mm_error err = {{0}};
        int rc = 0;
        double t0 = mm_timing_now();
        if (!failed) {
            rc = mm_mp4_write_rgb(s->w, rgb, j->width * 3, &err);
            if (rc == 0 && j->req->frames_dir &&
                mm_frames_dir_write(j->req->frames_dir, (int)index, rgb, j->width, j->height, j->width * 3, &err) != 0)
                rc = mm_error_prefix(&err, "--frames-dir");
        }
        double t = mm_timing_now() - t0;

        pthread_mutex_lock(&q->lock);
        writer_record_locked(q, rc, &err, t);
        q->head = (q->head + 1) % SLOTS;
        q->count--;
        pthread_cond_broadcast(&q->cond);
        pthread_mutex_unlock(&q->lock);
    }
}

static int on_frame(void *user, int64_t index, const uint8_t *rgb, int width, int height, const mm_tensor *pixels,
                    mm_error *err)
{
    (void)pixels;
    decode_state *s = user;
    pl_job *j = s->j;
    frame_queue *q = &s->q;
    if (pl_cancelled(j)) {
        s->cancelled = true;
        return mm_fail(err, "cancelled");
    }
    if (width != j->width || height != j->height)
        return mm_fail(err, "the video VAE decoded %dx%d frames for a %dx%d canvas", width, height, j->width,
                       j->height);
    double t0 = mm_timing_now();
    pthread_mutex_lock(&q->lock);
    while (q->count == SLOTS && !q->failed)
        pthread_cond_wait(&q->cond, &q->lock);
    if (q->failed) {
        *err = q->err;
        pthread_mutex_unlock(&q->lock);
        return -1;
    }
    int tail = (q->head + q->count) % SLOTS;
    pthread_mutex_unlock(&q->lock);
    s->wait_seconds += mm_timing_now() - t0;
    /* the slot is ours until it is counted: the writer only reads filled slots */
    memcpy(q->slot[tail], rgb, s->frame_bytes);
    pthread_mutex_lock(&q->lock);
    q->index[tail] = index;
    q->count++;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
    s->frames = index + 1;
    if (j->cb && j->cb->stage_progress)
        j->cb->stage_progress(j->cb->user, MM_STAGE_DECODING_VIDEO, (int)s->frames, j->frames);
    return 0;
}

static int writer_start(decode_state *s, mm_error *err)
{
    frame_queue *q = &s->q;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    s->frame_bytes = (size_t)s->j->width * s->j->height * 3;
    for (int i = 0; i < SLOTS; i++)
        if (!(q->slot[i] = malloc(s->frame_bytes)))
            return mm_fail(err, "out of memory for the frame queue");
    if (pthread_create(&s->writer, NULL, writer_main, s) != 0)
        return mm_fail(err, "cannot start the mp4 writer thread");
    s->writer_started = true;
    return 0;
}

/* No frame follows: the writer goes on to flush the encoder. */
static void writer_end_frames(decode_state *s)
{
    frame_queue *q = &s->q;
    if (!s->writer_started)
        return;
    pthread_mutex_lock(&q->lock);
    q->done = true;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

/* Hands the audio (NULL = none) to the writer, which frees it, lets it finish
 * the file (or drop everything when `drop`) and returns its failure, if any. */
static int writer_stop(decode_state *s, float *wave, int64_t samples, bool drop, mm_error *err)
{
    frame_queue *q = &s->q;
    int rc = 0;
    if (s->writer_started) {
        pthread_mutex_lock(&q->lock);
        q->done = true;
        q->audio_given = true;
        q->wave = wave;
        q->samples = samples;
        wave = NULL;
        if (drop)
            q->failed = true;
        pthread_cond_broadcast(&q->cond);
        pthread_mutex_unlock(&q->lock);
        pthread_join(s->writer, NULL);
        s->writer_started = false;
        if (q->failed && !drop) {
            *err = q->err;
            rc = -1;
        }
        pthread_mutex_destroy(&q->lock);
        pthread_cond_destroy(&q->cond);
    }
    free(wave);
    for (int i = 0; i < SLOTS; i++) {
        free(q->slot[i]);
        q->slot[i] = NULL;
    }
    return rc;
}

/* The frames go to the writer as they come; on return no frame follows and
 * the writer is flushing the encoder (the caller stops it). */
static int decode_video(pl_job *j, const mm_dit_config *cfg, decode_state *s, mm_error *err)
{
    mm_pipeline *p = j->p;
    const mm_dit_layout *l = &j->layout;
    const int C = cfg->latent_channels;
    mm_video_shape shape = {C, j->T, j->Hl, j->Wl, cfg->patch[0], cfg->patch[1], cfg->patch[2]};
    float *lat = malloc(sizeof(float) * (size_t)C * j->T * j->Hl * j->Wl);
    if (!lat)
        return mm_fail(err, "out of memory for the video latents");
    mm_unpatchify_video(&shape, j->video_rows + l->cond_video_rows * cfg->video_row_width, lat);
    mm_tensor dev = {0};
    int rc = pl_upload_f32(p->vae_ctx, &dev, lat, 4, (int64_t[]){C, j->T, j->Hl, j->Wl}, err);
    free(lat);
    if (rc != 0)
        return -1;
    if (writer_start(s, err) != 0) {
        mm_tensor_free(&dev);
        return -1;
    }
    double t0 = mm_timing_now();
    rc = mm_video_vae_decode(p->vvae, p->vae_ctx, &dev, on_frame, s, err);
    if (rc == 0)
        rc = mm_ctx_sync(p->vae_ctx, err);
    mm_tensor_free(&dev);
    writer_end_frames(s);
    double decode = mm_timing_now() - t0;
    mm_timing_add(j->t, MM_TG_INFERENCE, "decode video (VAE)", decode - s->wait_seconds);
    mm_timing_add(j->t, MM_TG_ENCODE, j->req->frames_dir ? "mux video (H.264 + PNG, not overlapped)"
                                                          : "mux video (H.264, not overlapped)",
                  s->wait_seconds);
    pl_log(p, "video: %lld frames decoded in %.2f s, %.2f s of it waiting for the encoder", (long long)s->frames,
           decode, s->wait_seconds);
    if (s->cancelled)
        return MM_CANCELLED;
    if (rc != 0)
        return mm_error_prefix(err, "video decode");
    if (s->frames != j->frames)
        return mm_fail(err, "the video VAE decoded %lld frames, %d expected", (long long)s->frames, j->frames);
    return 0;
}

/* The waveform ([2, samples] planar) for the writer, decoded on the GPU while
 * the writer drains the video encoder. */
static int decode_audio(pl_job *j, const mm_dit_config *cfg, float **wave, int64_t *samples, mm_error *err)
{
    mm_pipeline *p = j->p;
    const mm_dit_layout *l = &j->layout;
    const int aw = cfg->audio_row_width;
    float *lat = malloc(sizeof(float) * (size_t)2 * aw * j->A);
    if (!lat)
        return mm_fail(err, "out of memory for the audio latents");
    mm_unpack_audio(2, aw, j->A, j->audio_rows + l->cond_audio_rows * aw, lat);
    mm_tensor dev = {0};
    int rc = pl_upload_f32(p->vae_ctx, &dev, lat, 3, (int64_t[]){2, aw, j->A}, err);
    free(lat);
    if (rc != 0)
        return -1;
    double t0 = mm_timing_now();
    rc = mm_audio_vae_decode(p->avae, p->vae_ctx, &dev, wave, samples, err);
    mm_tensor_free(&dev);
    mm_timing_add(j->t, MM_TG_INFERENCE, "decode audio (VAE)", mm_timing_now() - t0);
    if (rc != 0) {
        free(*wave);
        *wave = NULL;
        return mm_error_prefix(err, "audio decode");
    }
    return 0;
}

static void mp4_options(const pl_job *j, mm_mp4_options *mo)
{
    mm_mp4_options_defaults(mo, j->width, j->height);
    mo->crf = j->req->crf;
    if (j->req->preset)
        mo->preset = j->req->preset;
    mo->audio_channels = j->req->no_audio ? 0 : 2;
    mo->audio_rate = mm_audio_vae_get_config(j->p->avae)->sample_rate;
    mo->expected_frames = j->frames;
}

/* Waits for the writer to finish the file: the x264 flush, the AAC encode,
 * the index and the rename that the decodes did not hide. */
static int finish_mp4(pl_job *j, decode_state *s, float *wave, int64_t samples, int rc, mm_error *err)
{
    if (rc == 0)
        pl_report(j, MM_STAGE_WRITING, 0, 0);
    double t0 = mm_timing_now();
    mm_error werr = {{0}};
    int wrc = writer_stop(s, wave, samples, rc != 0, &werr);
    if (rc != 0)
        return rc;
    mm_timing_add(j->t, MM_TG_ENCODE, "finish mp4 (x264 flush, AAC, index; not overlapped)", mm_timing_now() - t0);
    pl_log(j->p, "mp4: the writer worked %.2f s in all", s->q.busy);
    if (wrc != 0) {
        *err = werr;
        return mm_error_prefix(err, "writing %s", j->req->out_path);
    }
    return 0;
}

int pl_decode(pl_job *j, mm_error *err)
{
    mm_pipeline *p = j->p;
    const mm_dit_config *cfg = &j->dit_cfg;
    pl_report(j, MM_STAGE_DECODING_VIDEO, 0, 0);
    if (pl_ensure_vaes(p, j->t, err) != 0)
        return -1;
    pl_preview_fit_late(j);
    mm_mp4_options mo;
    mp4_options(j, &mo);
    decode_state *s = calloc(1, sizeof *s);
    if (!s)
        return mm_fail(err, "out of memory");
    s->j = j;
    if (mm_mp4_writer_open(&s->w, j->req->out_path, &mo, err) != 0) {
        free(s);
        return mm_error_prefix(err, "output %s", j->req->out_path);
    }
    float *wave = NULL;
    int64_t samples = 0;
    int rc = decode_video(j, cfg, s, err);
    if (rc == 0 && !j->req->no_audio) {
        pl_report(j, MM_STAGE_DECODING_AUDIO, 0, 0);
        rc = pl_cancelled(j) ? MM_CANCELLED : decode_audio(j, cfg, &wave, &samples, err);
    }
    rc = finish_mp4(j, s, wave, samples, rc, err);
    if (s->w)
        mm_mp4_writer_abort(s->w);
    free(s);
    pl_release_vaes(p);
    return rc;
}
