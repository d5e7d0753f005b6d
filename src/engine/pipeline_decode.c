/* Latents → the mp4: the target video rows are unpatchified and decoded by
 * the video VAE, each frame going straight into the H.264 encoder (and the
 * optional PNG dump) as soon as it is final; the target audio rows are
 * unpacked and decoded by the audio VAE into the AAC stream; the writer
 * renames the file into place at the end (vae.md §3.8, MEDIA.md). */
#include <stdlib.h>

#include "engine/pipeline_internal.h"
#include "model/vae/vae.h"
#include "media/image.h"
#include "media/mp4_writer.h"
#include "model/dit/patchify.h"

typedef struct decode_state {
    pl_job *j;
    mm_mp4_writer *w;
    double mux_seconds, png_seconds;
    int64_t frames;
    bool cancelled;
} decode_state;

static int on_frame(void *user, int64_t index, const uint8_t *rgb, int width, int height, const mm_tensor *pixels,
                    mm_error *err)
{
    (void)pixels;
    decode_state *s = user;
    pl_job *j = s->j;
    if (pl_cancelled(j)) {
        s->cancelled = true;
        return mm_fail(err, "cancelled");
    }
    if (width != j->width || height != j->height)
        return mm_fail(err, "the video VAE decoded %dx%d frames for a %dx%d canvas", width, height, j->width,
                       j->height);
    double t0 = mm_timing_now();
    if (mm_mp4_write_rgb(s->w, rgb, width * 3, err) != 0)
        return -1;
    double t1 = mm_timing_now();
    s->mux_seconds += t1 - t0;
    if (j->req->frames_dir) {
        if (mm_frames_dir_write(j->req->frames_dir, (int)index, rgb, width, height, width * 3, err) != 0)
            return mm_error_prefix(err, "--frames-dir");
        s->png_seconds += mm_timing_now() - t1;
    }
    s->frames = index + 1;
    if (j->cb && j->cb->stage_progress)
        j->cb->stage_progress(j->cb->user, MM_STAGE_DECODING_VIDEO, (int)s->frames, j->frames);
    return 0;
}

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
    double t0 = mm_timing_now();
    rc = mm_video_vae_decode(p->vvae, p->vae_ctx, &dev, on_frame, s, err);
    if (rc == 0)
        rc = mm_ctx_sync(p->vae_ctx, err);
    mm_tensor_free(&dev);
    double s_all = mm_timing_now() - t0;
    mm_timing_add(j->t, MM_TG_INFERENCE, "decode video (VAE)", s_all - s->mux_seconds - s->png_seconds);
    mm_timing_add(j->t, MM_TG_ENCODE, "mux video (H.264)", s->mux_seconds);
    if (j->req->frames_dir)
        mm_timing_add(j->t, MM_TG_ENCODE, "write PNG frames", s->png_seconds);
    if (s->cancelled)
        return MM_CANCELLED;
    if (rc != 0)
        return mm_error_prefix(err, "video decode");
    if (s->frames != j->frames)
        return mm_fail(err, "the video VAE decoded %lld frames, %d expected", (long long)s->frames, j->frames);
    return 0;
}

static int decode_audio(pl_job *j, const mm_dit_config *cfg, decode_state *s, mm_error *err)
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
    float *wave = NULL;
    int64_t samples = 0;
    rc = mm_audio_vae_decode(p->avae, p->vae_ctx, &dev, &wave, &samples, err);
    mm_tensor_free(&dev);
    mm_timing_add(j->t, MM_TG_INFERENCE, "decode audio (VAE)", mm_timing_now() - t0);
    if (rc != 0) {
        free(wave);
        return mm_error_prefix(err, "audio decode");
    }
    t0 = mm_timing_now();
    const float *chans[2] = {wave, wave + samples};
    rc = mm_mp4_write_audio_planar(s->w, chans, (int)samples, err);
    free(wave);
    mm_timing_add(j->t, MM_TG_ENCODE, "mux audio (AAC)", mm_timing_now() - t0);
    return rc;
}

int pl_decode(pl_job *j, mm_error *err)
{
    mm_pipeline *p = j->p;
    const mm_dit_config *cfg = &j->dit_cfg;
    pl_report(j, MM_STAGE_DECODING_VIDEO, 0, 0);
    if (pl_ensure_vaes(p, j->t, err) != 0)
        return -1;
    mm_mp4_options mo;
    mm_mp4_options_defaults(&mo, j->width, j->height);
    mo.crf = j->req->crf;
    if (j->req->preset)
        mo.preset = j->req->preset;
    mo.audio_channels = j->req->no_audio ? 0 : 2;
    mo.audio_rate = mm_audio_vae_get_config(p->avae)->sample_rate;
    decode_state s = {.j = j};
    if (mm_mp4_writer_open(&s.w, j->req->out_path, &mo, err) != 0)
        return mm_error_prefix(err, "output %s", j->req->out_path);
    int rc = decode_video(j, cfg, &s, err);
    if (rc == 0 && !j->req->no_audio) {
        pl_report(j, MM_STAGE_DECODING_AUDIO, 0, 0);
        rc = pl_cancelled(j) ? MM_CANCELLED : decode_audio(j, cfg, &s, err);
    }
    if (rc == 0) {
        pl_report(j, MM_STAGE_WRITING, 0, 0);
        double t0 = mm_timing_now();
        rc = mm_mp4_writer_close(s.w, err);
        s.w = NULL;
        mm_timing_add(j->t, MM_TG_ENCODE, "finish mp4 (flush, faststart)", mm_timing_now() - t0);
        if (rc != 0)
            mm_error_prefix(err, "writing %s", j->req->out_path);
    }
    if (s.w)
        mm_mp4_writer_abort(s.w);
    pl_release_vaes(p);
    return rc;
}
