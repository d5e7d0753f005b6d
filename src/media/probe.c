/* mm_media_probe: classify, check limits, and prove the file decodes.
 *
 * After mm_input_classify() has checked what the headers claim, the probe
 * reads the whole file once: every packet of a video or audio clip must
 * demux (this is what catches a file cut short), the first picture must
 * decode (at its real size, which must also fit the limits), and a
 * soundtrack or audio clip must give samples. Decoding is single-threaded
 * and stops at the first picture / first audio, so a probe costs one read of
 * the file plus a few decoded frames.
 */
#include "media/probe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <libavutil/log.h>

#include "media/ff_common.h"
#include "media/media_input.h"

int mm_media_check(mm_error *err)
{
    static const char *const encoders[] = {"libx264", "aac", "png", "mjpeg", "libwebp"};
    static const enum AVCodecID decoders[] = {AV_CODEC_ID_H264, AV_CODEC_ID_PNG, AV_CODEC_ID_MJPEG, AV_CODEC_ID_AAC};
    char missing[512] = "";
    size_t n = 0;
    for (size_t i = 0; i < sizeof encoders / sizeof encoders[0]; i++)
        if (!avcodec_find_encoder_by_name(encoders[i]))
            n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%s encoder", n ? ", " : "", encoders[i]);
    for (size_t i = 0; i < sizeof decoders / sizeof decoders[0] && n < sizeof missing; i++)
        if (!avcodec_find_decoder(decoders[i]))
            n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%s decoder", n ? ", " : "",
                                  avcodec_get_name(decoders[i]));
    if (n)
        return mm_fail(err, "the FFmpeg libraries lack: %s (Debian's libavcodec59 has them all)", missing);
    return 0;
}

void mm_media_set_verbose(int verbose)
{
    av_log_set_level(verbose < 0 ? AV_LOG_QUIET : verbose ? AV_LOG_INFO : AV_LOG_ERROR);
}

typedef struct decode_state {
    AVCodecContext *dec;
    int done;      /* got what we wanted: one picture, or some samples */
    int64_t count; /* pictures or samples decoded */
    int width, height;
} decode_state;

/* Feeds pkt (NULL = drain) and counts what comes out. */
static int feed(mm_input *in, decode_state *d, const AVPacket *pkt, AVFrame *frame, const char *what, mm_error *err)
{
    if (d->done)
        return 0;
    int ret = avcodec_send_packet(d->dec, pkt);
    if (ret < 0 && ret != AVERROR_EOF && ret != AVERROR(EAGAIN))
        return mm_ff_fail(err, ret, "%s: the %s does not decode (damaged or truncated data)", in->name, what);
    for (;;) {
        ret = avcodec_receive_frame(d->dec, frame);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF)
            return 0;
        if (ret < 0)
            return mm_ff_fail(err, ret, "%s: the %s does not decode (damaged or truncated data)", in->name, what);
        if (d->dec->codec_type == AVMEDIA_TYPE_VIDEO) {
            d->width = frame->width;
            d->height = frame->height;
            d->count++;
            d->done = 1;
        } else if (frame->nb_samples > 0) {
            d->count += frame->nb_samples;
            d->done = 1;
        }
        av_frame_unref(frame);
        if (d->done)
            return 0;
    }
}

static int check_decoded_size(mm_input *in, const mm_media_limits *lim, const mm_media_info *info,
                              const decode_state *v, mm_error *err)
{
    int64_t max_pixels = info->kind == MM_MEDIA_IMAGE ? lim->max_image_pixels : lim->max_video_pixels;
    if (v->width > lim->max_side || v->height > lim->max_side || (int64_t)v->width * v->height > max_pixels)
        return mm_fail(err, "%s: the picture decodes at %dx%d, beyond the accepted %d px per side / %.1f megapixels",
                       in->name, v->width, v->height, lim->max_side, (double)max_pixels / 1e6);
    return 0;
}

static int probe_input(mm_input *in, const mm_media_limits *lim, mm_media_info *out, mm_error *err)
{
    mm_media_info info;
    if (mm_input_classify(in, lim, &info, err) < 0)
        return -1;
    int vi = info.kind == MM_MEDIA_AUDIO ? -1 : mm_input_video_stream(in);
    int ai = info.has_audio ? mm_input_audio_stream(in) : -1;
    decode_state v = {0}, a = {0};
    AVPacket *pkt = av_packet_alloc();
    AVFrame *frame = av_frame_alloc();
    int rc = -1;
    if (!pkt || !frame) {
        mm_fail(err, "out of memory");
        goto done;
    }
    int64_t max_pixels = info.kind == MM_MEDIA_IMAGE ? lim->max_image_pixels : lim->max_video_pixels;
    if (vi >= 0 && mm_input_open_decoder(in, vi, 1, max_pixels, info.kind == MM_MEDIA_IMAGE, &v.dec, err) < 0)
        goto done;
    if (ai >= 0 && mm_input_open_decoder(in, ai, 1, 0, 0, &a.dec, err) < 0)
        goto done;
    const char *picture = info.kind == MM_MEDIA_IMAGE ? "image" : "video";

    /* Read every packet (images: until the picture decodes), noting where
     * the data of every stream ends. */
    int64_t video_packets = 0;
    double data_end = 0;
    for (;;) {
        int got = mm_input_read(in, -1, pkt, err);
        if (got < 0)
            goto done;
        if (got == 0)
            break;
        const AVStream *st = in->fmt->streams[pkt->stream_index];
        video_packets += pkt->stream_index == vi && !(pkt->flags & AV_PKT_FLAG_DISCARD);
        if (pkt->pts != AV_NOPTS_VALUE && (pkt->stream_index == vi || pkt->stream_index == ai)) {
            double end = (double)(pkt->pts + (pkt->duration > 0 ? pkt->duration : 0)) * av_q2d(st->time_base);
            if (end > data_end)
                data_end = end;
        }
        int r = 0;
        if (pkt->stream_index == vi)
            r = feed(in, &v, pkt, frame, picture, err);
        else if (pkt->stream_index == ai)
            r = feed(in, &a, pkt, frame, "audio", err);
        av_packet_unref(pkt);
        if (r < 0)
            goto done;
        if (info.kind == MM_MEDIA_IMAGE && v.done)
            break;
    }
    if (v.dec && !v.done && feed(in, &v, NULL, frame, picture, err) < 0)
        goto done;
    if (a.dec && !a.done && feed(in, &a, NULL, frame, "audio", err) < 0)
        goto done;

    if (vi >= 0 && !v.done) {
        mm_fail(err, "%s: the %s has no decodable picture%s", in->name, picture,
                video_packets == 0 && info.kind == MM_MEDIA_VIDEO ? " (it contains no frames)" : "");
        goto done;
    }
    if (vi >= 0 && check_decoded_size(in, lim, &info, &v, err) < 0)
        goto done;
    if (ai >= 0 && !a.done) {
        mm_fail(err, "%s: the audio stream has no decodable audio", in->name);
        goto done;
    }
    if (info.kind == MM_MEDIA_VIDEO) {
        info.frames = video_packets;
        if (info.frames <= 0) {
            mm_fail(err, "%s: the video contains no frames", in->name);
            goto done;
        }
    }
    if (info.kind != MM_MEDIA_IMAGE) {
        double start = in->fmt->start_time != AV_NOPTS_VALUE ? (double)in->fmt->start_time / AV_TIME_BASE : 0;
        double demuxed = data_end - start;
        double claimed = in->fmt->duration > 0 ? (double)in->fmt->duration / AV_TIME_BASE : 0;
        /* An intact file's data reaches the duration its header claims,
         * within a packet or two; a cut-off file stops short. */
        if (claimed > 0 && demuxed > 0 && demuxed < claimed - 0.25 - 0.01 * claimed) {
            mm_fail(err, "%s: truncated: the header says %.2f s but the data ends at %.2f s", in->name, claimed,
                    demuxed);
            goto done;
        }
        if (demuxed > 0)
            info.duration_seconds = demuxed;
        if (info.duration_seconds <= 0 && info.kind == MM_MEDIA_VIDEO)
            info.duration_seconds = (double)info.frames / info.fps;
        if (info.duration_seconds > lim->max_seconds) {
            mm_fail(err, "%s: %s of %.1f s is too long: at most %.0f s are accepted", in->name,
                    mm_media_kind_name(info.kind), info.duration_seconds, lim->max_seconds);
            goto done;
        }
    }
    *out = info;
    rc = 0;
done:
    avcodec_free_context(&v.dec);
    avcodec_free_context(&a.dec);
    av_packet_free(&pkt);
    av_frame_free(&frame);
    return rc;
}

int mm_media_probe(const char *path, const mm_media_limits *lim, mm_media_info *out, mm_error *err)
{
    const mm_media_limits limits = mm_media_limits_or_defaults(lim);
    lim = &limits;
    mm_input in;
    if (mm_input_open_path(&in, path, lim, err) < 0)
        return -1;
    int rc = probe_input(&in, lim, out, err);
    mm_input_close(&in);
    return rc;
}

int mm_media_probe_buffer(const uint8_t *data, size_t size, const mm_media_limits *lim, mm_media_info *out,
                          mm_error *err)
{
    const mm_media_limits limits = mm_media_limits_or_defaults(lim);
    lim = &limits;
    mm_input in;
    if (mm_input_open_buffer(&in, data, size, lim, err) < 0)
        return -1;
    int rc = probe_input(&in, lim, out, err);
    mm_input_close(&in);
    return rc;
}
