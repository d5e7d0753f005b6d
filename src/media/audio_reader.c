#include "media/audio_reader.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/channel_layout.h>
#include <libswresample/swresample.h>

#include "media/ff_common.h"
#include "media/media_input.h"
#include "media/resample.h"

void mm_audio_free(mm_audio *a)
{
    if (!a)
        return;
    free(a->samples);
    memset(a, 0, sizeof *a);
}

/* Two growable float channels at the source rate. */
typedef struct pcm {
    float *ch[2];
    int64_t n, cap, max;
} pcm;

static int pcm_append(pcm *p, const float *left, const float *right, int n, mm_error *err)
{
    if (p->max >= 0 && p->n + n > p->max)
        n = (int)(p->max - p->n);
    if (n <= 0)
        return 0;
    if (p->n + n > p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 65536;
        while (cap < p->n + n)
            cap *= 2;
        for (int c = 0; c < 2; c++) {
            float *g = realloc(p->ch[c], (size_t)cap * sizeof *g);
            if (!g)
                return mm_fail(err, "out of memory (audio of %lld samples)", (long long)cap);
            p->ch[c] = g;
        }
        p->cap = cap;
    }
    memcpy(p->ch[0] + p->n, left, (size_t)n * sizeof(float));
    memcpy(p->ch[1] + p->n, right, (size_t)n * sizeof(float));
    p->n += n;
    return 0;
}

/* Converts a decoded frame to float planar (format only, same rate and
 * layout) and appends its first two channels. */
static int take_frame(SwrContext **swr, const AVFrame *f, pcm *p, mm_error *err)
{
    int channels = f->ch_layout.nb_channels;
    if (channels < 1 || f->nb_samples <= 0)
        return 0;
    const float *planes[2];
    float *conv = NULL;
    if (f->format == AV_SAMPLE_FMT_FLTP) {
        planes[0] = (const float *)f->extended_data[0];
        planes[1] = (const float *)f->extended_data[channels > 1 ? 1 : 0];
    } else {
        AVChannelLayout layout = {0}; /* a copy: FFmpeg 5 takes it non-const */
        int ret = av_channel_layout_copy(&layout, &f->ch_layout);
        if (ret >= 0)
            ret = swr_alloc_set_opts2(swr, &layout, AV_SAMPLE_FMT_FLTP, f->sample_rate, &layout,
                                      (enum AVSampleFormat)f->format, f->sample_rate, 0, NULL);
        av_channel_layout_uninit(&layout);
        if (ret >= 0)
            ret = swr_init(*swr);
        if (ret < 0)
            return mm_ff_fail(err, ret, "audio sample format conversion");
        conv = malloc((size_t)f->nb_samples * channels * sizeof *conv);
        uint8_t **out = malloc((size_t)channels * sizeof *out);
        if (!conv || !out) {
            free(conv);
            free(out);
            return mm_fail(err, "out of memory");
        }
        for (int c = 0; c < channels; c++)
            out[c] = (uint8_t *)(conv + (size_t)c * f->nb_samples);
        int got = swr_convert(*swr, out, f->nb_samples, (const uint8_t **)f->extended_data, f->nb_samples);
        free(out);
        if (got != f->nb_samples) {
            free(conv);
            return mm_fail(err, "audio sample format conversion failed");
        }
        planes[0] = conv;
        planes[1] = conv + (channels > 1 ? (size_t)f->nb_samples : 0);
    }
    int rc = pcm_append(p, planes[0], planes[1], f->nb_samples, err);
    free(conv);
    return rc;
}

int mm_audio_read(const char *path, const mm_audio_options *opt, mm_audio *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    mm_audio_options o = {0};
    if (opt)
        o = *opt;
    if (o.rate == 0)
        o.rate = 32000;
    const mm_media_limits lim = mm_media_limits_or_defaults(o.limits);

    mm_input in;
    if (mm_input_open_path(&in, path, &lim, err) < 0)
        return -1;
    mm_media_info info;
    AVCodecContext *dec = NULL;
    SwrContext *swr = NULL;
    AVPacket *pkt = av_packet_alloc();
    AVFrame *frame = av_frame_alloc();
    pcm p = {{NULL, NULL}, 0, 0, -1};
    int rc = -1, rate = 0;
    if (!pkt || !frame) {
        mm_fail(err, "out of memory");
        goto done;
    }
    if (mm_input_classify(&in, &lim, &info, err) < 0)
        goto done;
    if (!info.has_audio) {
        mm_fail(err, "%s: %s without audio; accepted: an audio file (WAV, MP3, FLAC, Ogg, AAC/M4A) or a video with "
                     "a soundtrack",
                path, info.kind == MM_MEDIA_IMAGE ? "an image" : "a video");
        goto done;
    }
    int ai = mm_input_audio_stream(&in);
    rate = info.audio_rate;
    double keep = o.max_seconds > 0 && o.max_seconds < lim.max_seconds ? o.max_seconds : lim.max_seconds;
    p.max = (int64_t)floor(keep * rate);
    if (mm_input_open_decoder(&in, ai, 1, 0, 0, &dec, err) < 0)
        goto done;
    int eof = 0;
    while (p.n < p.max) {
        int ret = avcodec_receive_frame(dec, frame);
        if (ret >= 0) {
            if (frame->sample_rate != rate) {
                mm_fail(err, "%s: the audio changes sample rate mid-stream (%d to %d Hz)", path, rate,
                        frame->sample_rate);
                goto done;
            }
            int r = take_frame(&swr, frame, &p, err);
            av_frame_unref(frame);
            if (r < 0)
                goto done;
            continue;
        }
        if (ret == AVERROR_EOF)
            break;
        if (ret != AVERROR(EAGAIN)) {
            mm_ff_fail(err, ret, "%s: the audio does not decode", path);
            goto done;
        }
        int got = eof ? 0 : mm_input_read(&in, ai, pkt, err);
        if (got < 0)
            goto done;
        eof |= !got;
        ret = avcodec_send_packet(dec, got ? pkt : NULL);
        av_packet_unref(pkt);
        if (ret < 0 && ret != AVERROR_EOF) {
            mm_ff_fail(err, ret, "%s: the audio does not decode", path);
            goto done;
        }
    }
    if (p.n == 0) {
        mm_fail(err, "%s: the audio stream holds no samples", path);
        goto done;
    }
    int64_t n = mm_resample_length(p.n, rate, o.rate);
    out->samples = malloc((size_t)n * 2 * sizeof(float));
    if (!out->samples) {
        mm_fail(err, "out of memory (audio of %lld samples)", (long long)n);
        goto done;
    }
    for (int c = 0; c < 2; c++)
        if (mm_resample_sinc(p.ch[c], p.n, rate, o.rate, out->samples + (size_t)c * n, err) < 0) {
            mm_audio_free(out);
            goto done;
        }
    out->frames = n;
    out->rate = o.rate;
    out->channels = 2;
    out->source_rate = rate;
    out->source_channels = info.audio_channels;
    rc = 0;
done:
    if (rc < 0 && err && strncmp(err->msg, path, strlen(path)) != 0)
        mm_error_prefix(err, "%s", path);
    free(p.ch[0]);
    free(p.ch[1]);
    swr_free(&swr);
    avcodec_free_context(&dec);
    av_packet_free(&pkt);
    av_frame_free(&frame);
    mm_input_close(&in);
    return rc;
}
