/* mp4 output: libx264 video + native AAC audio, muxed by libavformat.
 *
 * Timing: video frame i has pts i in a 1/fps time base and a duration of one
 * frame, so the mp4 holds every frame at an exact constant rate and the last
 * frame keeps its full duration (a zero last duration is how players come to
 * drop it). Audio is encoded only up to the video written so far and, at
 * close, cut or padded with silence to exactly round(frames * rate / fps)
 * samples, so both streams end together (the reference's VAE gives up to 267
 * samples more than the video; see docs/MEDIA.md).
 *
 * Colour: RGB is converted to BT.709 limited-range yuv420p and the stream is
 * tagged BT.709, so players that honour tags and players that assume BT.709
 * for HD both show the colours we computed.
 */
#include "media/mp4_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/audio_fifo.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>

#include "media/ff_common.h"

struct mm_mp4_writer {
    mm_mp4_options opt;
    char *path, *part_path;
    AVFormatContext *fmt;
    AVCodecContext *venc, *aenc;
    AVStream *vst, *ast;
    struct SwsContext *sws;
    SwrContext *swr;
    AVAudioFifo *fifo; /* encoder-format samples waiting for their video */
    AVFrame *vframe;
    AVPacket *pkt;
    float *clamp_buf;
    size_t clamp_cap;
    int64_t frames;    /* video frames sent to the encoder */
    int64_t audio_out; /* samples per channel sent to the audio encoder */
    int io_open;
    int video_done; /* the video encoder was flushed: no more frames */
    int failed;     /* a write failed: close() only cleans up */
};

static const char *const x264_presets[] = {"ultrafast", "superfast", "veryfast", "faster", "fast",
                                           "medium",    "slow",      "slower",   "veryslow", "placebo"};

static int preset_known(const char *p)
{
    for (size_t i = 0; i < sizeof x264_presets / sizeof x264_presets[0]; i++)
        if (strcmp(p, x264_presets[i]) == 0)
            return 1;
    return 0;
}

static int check_options(const mm_mp4_options *o, mm_error *err)
{
    if (o->width <= 0 || o->height <= 0 || (o->width & 1) || (o->height & 1) || o->width > 16384 || o->height > 16384)
        return mm_fail(err, "video size %dx%d: width and height must be even and in 2..16384 (yuv420p)", o->width,
                       o->height);
    if (o->fps <= 0 || o->fps > 240)
        return mm_fail(err, "fps %d: must be in 1..240", o->fps);
    if (o->crf < 0 || o->crf > 51)
        return mm_fail(err, "crf %d: must be in 0..51", o->crf);
    if (!o->preset || !preset_known(o->preset))
        return mm_fail(err,
                       "x264 preset '%s' unknown: use ultrafast, superfast, veryfast, faster, fast, medium, slow, "
                       "slower, veryslow or placebo",
                       o->preset ? o->preset : "(null)");
    if (o->audio_channels < 0 || o->audio_channels > 2)
        return mm_fail(err, "audio_channels %d: use 0 (silent), 1 or 2", o->audio_channels);
    if (o->audio_channels > 0 && (o->audio_rate < 8000 || o->audio_rate > 192000))
        return mm_fail(err, "audio rate %d Hz: must be in 8000..192000", o->audio_rate);
    return 0;
}

static int64_t audio_for_frames(const mm_mp4_writer *w, int64_t frames);

static void writer_free(mm_mp4_writer *w)
{
    if (!w)
        return;
    if (w->fmt) {
        if (w->io_open)
            avio_closep(&w->fmt->pb);
        avformat_free_context(w->fmt);
    }
    avcodec_free_context(&w->venc);
    avcodec_free_context(&w->aenc);
    sws_freeContext(w->sws);
    swr_free(&w->swr);
    if (w->fifo)
        av_audio_fifo_free(w->fifo);
    av_frame_free(&w->vframe);
    av_packet_free(&w->pkt);
    free(w->clamp_buf);
    free(w->path);
    free(w->part_path);
    free(w);
}

/* The rate AAC can carry nearest to the requested one (swresample converts). */
static int aac_rate(const AVCodec *c, int want)
{
    if (!c->supported_samplerates)
        return want;
    int best = 0;
    for (const int *r = c->supported_samplerates; *r; r++)
        if (!best || abs(*r - want) < abs(best - want))
            best = *r;
    return best;
}

static int open_video(mm_mp4_writer *w, mm_error *err)
{
    const mm_mp4_options *o = &w->opt;
    const AVCodec *codec = avcodec_find_encoder_by_name("libx264");
    if (!codec)
        return mm_fail(err, "this FFmpeg build has no libx264 encoder (H.264 output needs libavcodec built with "
                            "libx264, e.g. Debian's libavcodec59)");
    w->venc = avcodec_alloc_context3(codec);
    if (!w->venc)
        return mm_fail(err, "out of memory");
    AVCodecContext *c = w->venc;
    c->width = o->width;
    c->height = o->height;
    c->time_base = (AVRational){1, o->fps};
    c->framerate = (AVRational){o->fps, 1};
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->color_range = AVCOL_RANGE_MPEG;
    c->colorspace = AVCOL_SPC_BT709;
    c->color_primaries = AVCOL_PRI_BT709;
    c->color_trc = AVCOL_TRC_BT709;
    if (w->fmt->oformat->flags & AVFMT_GLOBALHEADER)
        c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    char crf[16];
    snprintf(crf, sizeof crf, "%d", o->crf);
    av_opt_set(c->priv_data, "preset", o->preset, 0);
    av_opt_set(c->priv_data, "crf", crf, 0);
    int ret = avcodec_open2(c, codec, NULL);
    if (ret < 0)
        return mm_ff_fail(err, ret, "opening libx264 (%dx%d, crf %d, preset %s)", o->width, o->height, o->crf,
                          o->preset);
    w->vst = avformat_new_stream(w->fmt, NULL);
    if (!w->vst)
        return mm_fail(err, "out of memory");
    w->vst->time_base = c->time_base;
    w->vst->avg_frame_rate = c->framerate;
    w->vst->r_frame_rate = c->framerate;
    ret = avcodec_parameters_from_context(w->vst->codecpar, c);
    if (ret < 0)
        return mm_ff_fail(err, ret, "video stream parameters");

    w->vframe = av_frame_alloc();
    if (!w->vframe)
        return mm_fail(err, "out of memory");
    w->vframe->format = c->pix_fmt;
    w->vframe->width = c->width;
    w->vframe->height = c->height;
    w->vframe->color_range = c->color_range;
    w->vframe->colorspace = c->colorspace;
    w->vframe->color_primaries = c->color_primaries;
    w->vframe->color_trc = c->color_trc;
    ret = av_frame_get_buffer(w->vframe, 0);
    if (ret < 0)
        return mm_ff_fail(err, ret, "allocating a %dx%d frame", c->width, c->height);

    /* Full-resolution chroma input and accurate rounding: this runs once per
     * output frame, its cost is small next to x264's. */
    w->sws = sws_getContext(o->width, o->height, AV_PIX_FMT_RGB24, o->width, o->height, AV_PIX_FMT_YUV420P,
                            SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, NULL, NULL, NULL);
    if (!w->sws)
        return mm_fail(err, "cannot create the RGB to yuv420p converter");
    const int *bt709 = sws_getCoefficients(SWS_CS_ITU709);
    sws_setColorspaceDetails(w->sws, bt709, 1, bt709, 0, 0, 1 << 16, 1 << 16);
    return 0;
}

static int open_audio(mm_mp4_writer *w, mm_error *err)
{
    const mm_mp4_options *o = &w->opt;
    const AVCodec *codec = avcodec_find_encoder_by_name("aac");
    if (!codec)
        return mm_fail(err, "this FFmpeg build has no native AAC encoder");
    w->aenc = avcodec_alloc_context3(codec);
    if (!w->aenc)
        return mm_fail(err, "out of memory");
    AVCodecContext *c = w->aenc;
    c->sample_fmt = AV_SAMPLE_FMT_FLTP;
    c->sample_rate = aac_rate(codec, o->audio_rate);
    av_channel_layout_default(&c->ch_layout, o->audio_channels);
    c->bit_rate = 64000 * o->audio_channels;
    c->time_base = (AVRational){1, c->sample_rate};
    if (w->fmt->oformat->flags & AVFMT_GLOBALHEADER)
        c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    int ret = avcodec_open2(c, codec, NULL);
    if (ret < 0)
        return mm_ff_fail(err, ret, "opening the AAC encoder (%d Hz, %d channels)", c->sample_rate,
                          o->audio_channels);
    w->ast = avformat_new_stream(w->fmt, NULL);
    if (!w->ast)
        return mm_fail(err, "out of memory");
    w->ast->time_base = c->time_base;
    ret = avcodec_parameters_from_context(w->ast->codecpar, c);
    if (ret < 0)
        return mm_ff_fail(err, ret, "audio stream parameters");

    AVChannelLayout in_layout;
    av_channel_layout_default(&in_layout, o->audio_channels);
    ret = swr_alloc_set_opts2(&w->swr, &c->ch_layout, c->sample_fmt, c->sample_rate, &in_layout, AV_SAMPLE_FMT_FLT,
                              o->audio_rate, 0, NULL);
    av_channel_layout_uninit(&in_layout);
    if (ret < 0 || (ret = swr_init(w->swr)) < 0)
        return mm_ff_fail(err, ret, "audio converter (float %d Hz to AAC's %d Hz)", o->audio_rate, c->sample_rate);
    w->fifo = av_audio_fifo_alloc(c->sample_fmt, o->audio_channels, c->frame_size > 0 ? 4 * c->frame_size : 4096);
    if (!w->fifo)
        return mm_fail(err, "out of memory");
    return 0;
}

/* An upper bound of the moov atom for `frames` video frames and their audio:
 * per sample at most stsz 4 + stts 8 + ctts 8 + stss 4 + stsc 12 + co64 8 +
 * sdtp 1 + sbgp 8 bytes (53, one chunk per sample being the worst case), plus
 * the fixed boxes (headers, avcC, esds, edit lists, udta), well under 16 KiB. */
static int64_t moov_bound(const mm_mp4_writer *w, int64_t frames)
{
    int64_t samples = frames;
    if (w->aenc) {
        int frame_size = w->aenc->frame_size > 0 ? w->aenc->frame_size : 1024;
        samples += audio_for_frames(w, frames) / frame_size + 4; /* + priming and the short last frame */
    }
    return 16384 + 64 * samples;
}

/* The moov atom goes in front so browsers can start playing before the whole
 * file has arrived. With the length known its room is reserved now and the
 * index written into it at the end; otherwise the muxer re-reads the .part
 * file at the end to move the index in front (faststart). */
static void set_moov_placement(mm_mp4_writer *w, AVDictionary **mux_opts)
{
    if (w->opt.expected_frames > 0)
        av_dict_set_int(mux_opts, "moov_size", moov_bound(w, w->opt.expected_frames), 0);
    else
        av_dict_set(mux_opts, "movflags", "+faststart", 0);
}

int mm_mp4_writer_open(mm_mp4_writer **out, const char *path, const mm_mp4_options *opt, mm_error *err)
{
    *out = NULL;
    if (!path || !*path)
        return mm_fail(err, "mp4 output: no path given");
    if (check_options(opt, err) < 0)
        return mm_error_prefix(err, "mp4 output %s", path);
    mm_mp4_writer *w = calloc(1, sizeof *w);
    if (!w)
        return mm_fail(err, "out of memory");
    w->opt = *opt;
    w->path = strdup(path);
    size_t n = strlen(path);
    w->part_path = malloc(n + 6);
    w->pkt = av_packet_alloc();
    if (!w->path || !w->part_path || !w->pkt) {
        writer_free(w);
        return mm_fail(err, "out of memory");
    }
    snprintf(w->part_path, n + 6, "%s.part", path);

    char *url = mm_ff_file_url(w->part_path);
    int ret = url ? avformat_alloc_output_context2(&w->fmt, NULL, "mp4", url) : AVERROR(ENOMEM);
    free(url);
    if (ret < 0) {
        writer_free(w);
        return mm_ff_fail(err, ret, "mp4 output %s", path);
    }
    if (open_video(w, err) < 0 || (opt->audio_channels > 0 && open_audio(w, err) < 0)) {
        writer_free(w);
        return mm_error_prefix(err, "mp4 output %s", path);
    }

    AVDictionary *io_opts = NULL;
    mm_ff_local_only(&io_opts);
    ret = avio_open2(&w->fmt->pb, w->fmt->url, AVIO_FLAG_WRITE, NULL, &io_opts);
    av_dict_free(&io_opts);
    if (ret < 0) {
        writer_free(w);
        return mm_ff_fail(err, ret, "mp4 output: cannot create %s.part", path);
    }
    w->io_open = 1;

    AVDictionary *mux_opts = NULL;
    set_moov_placement(w, &mux_opts);
    ret = avformat_write_header(w->fmt, &mux_opts);
    av_dict_free(&mux_opts);
    if (ret < 0) {
        mm_mp4_writer_abort(w);
        return mm_ff_fail(err, ret, "mp4 output %s: writing the header", path);
    }
    *out = w;
    return 0;
}

/* Sends frame (NULL = flush) and writes every packet the encoder returns. */
static int encode(mm_mp4_writer *w, AVCodecContext *c, AVStream *st, AVFrame *frame, mm_error *err)
{
    int ret = avcodec_send_frame(c, frame);
    if (ret < 0)
        return mm_ff_fail(err, ret, "%s encoder", c->codec->name);
    for (;;) {
        ret = avcodec_receive_packet(c, w->pkt);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF)
            return 0;
        if (ret < 0)
            return mm_ff_fail(err, ret, "%s encoder", c->codec->name);
        /* Every video frame lasts one frame; the muxer uses the last packet's
         * duration as the last sample's, so it must not be 0. */
        if (c == w->venc && w->pkt->duration <= 0)
            w->pkt->duration = 1;
        av_packet_rescale_ts(w->pkt, c->time_base, st->time_base);
        w->pkt->stream_index = st->index;
        ret = av_interleaved_write_frame(w->fmt, w->pkt);
        av_packet_unref(w->pkt);
        if (ret < 0)
            return mm_ff_fail(err, ret, "writing %s.part", w->path);
    }
}

/* Samples per channel of audio that belong to `frames` video frames. */
static int64_t audio_for_frames(const mm_mp4_writer *w, int64_t frames)
{
    return av_rescale_rnd(frames, w->aenc->sample_rate, w->opt.fps, AV_ROUND_NEAR_INF);
}

/* Encodes queued audio up to `limit` samples per channel; partial frames only
 * when `final` (AAC allows a short last frame). */
static int pump_audio(mm_mp4_writer *w, int64_t limit, int final, mm_error *err)
{
    AVCodecContext *c = w->aenc;
    int frame_size = c->frame_size > 0 ? c->frame_size : 1024;
    for (;;) {
        int64_t room = limit - w->audio_out;
        int avail = av_audio_fifo_size(w->fifo);
        int n = (int)(room < avail ? room : avail);
        if (n > frame_size)
            n = frame_size;
        if (n <= 0 || (n < frame_size && !final))
            return 0;
        AVFrame *f = av_frame_alloc();
        if (!f)
            return mm_fail(err, "out of memory");
        f->nb_samples = n;
        f->format = c->sample_fmt;
        f->sample_rate = c->sample_rate;
        av_channel_layout_copy(&f->ch_layout, &c->ch_layout);
        int ret = av_frame_get_buffer(f, 0);
        if (ret >= 0 && av_audio_fifo_read(w->fifo, (void **)f->data, n) != n)
            ret = AVERROR_BUG;
        if (ret < 0) {
            av_frame_free(&f);
            return mm_ff_fail(err, ret, "audio frame");
        }
        f->pts = w->audio_out;
        w->audio_out += n;
        ret = encode(w, c, w->ast, f, err);
        av_frame_free(&f);
        if (ret < 0)
            return -1;
    }
}

int mm_mp4_write_rgb(mm_mp4_writer *w, const uint8_t *rgb, int stride, mm_error *err)
{
    if (w->failed)
        return mm_fail(err, "mp4 output %s: an earlier write failed", w->path);
    if (w->video_done)
        return mm_fail(err, "mp4 output %s: a frame after the video was finished", w->path);
    if (w->opt.expected_frames > 0 && w->frames >= w->opt.expected_frames)
        return mm_fail(err, "mp4 output %s: frame %lld is beyond the %lld the file was opened for", w->path,
                       (long long)w->frames + 1, (long long)w->opt.expected_frames);
    if (stride < 3 * w->opt.width)
        return mm_fail(err, "mp4 output: RGB stride %d is less than 3 x width %d", stride, w->opt.width);
    int ret = av_frame_make_writable(w->vframe);
    if (ret < 0) {
        w->failed = 1;
        return mm_ff_fail(err, ret, "mp4 output %s: frame buffer", w->path);
    }
    const uint8_t *src[4] = {rgb, NULL, NULL, NULL};
    int src_stride[4] = {stride, 0, 0, 0};
    sws_scale(w->sws, src, src_stride, 0, w->opt.height, w->vframe->data, w->vframe->linesize);
    w->vframe->pts = w->frames;
    if (encode(w, w->venc, w->vst, w->vframe, err) < 0) {
        w->failed = 1;
        return mm_error_prefix(err, "mp4 output %s: frame %lld", w->path, (long long)w->frames);
    }
    w->frames++;
    if (w->aenc && pump_audio(w, audio_for_frames(w, w->frames), 0, err) < 0) {
        w->failed = 1;
        return mm_error_prefix(err, "mp4 output %s", w->path);
    }
    return 0;
}

/* Converts interleaved float at the caller's rate into the encoder's format
 * and queues it. NULL input drains the resampler. */
static int queue_audio(mm_mp4_writer *w, const float *in, int n, mm_error *err)
{
    AVCodecContext *c = w->aenc;
    int out_max = swr_get_out_samples(w->swr, in ? n : 0);
    if (out_max <= 0)
        return 0;
    uint8_t **planes = NULL;
    int ret = av_samples_alloc_array_and_samples(&planes, NULL, c->ch_layout.nb_channels, out_max, c->sample_fmt, 0);
    if (ret < 0)
        return mm_ff_fail(err, ret, "audio buffer");
    const uint8_t *src[1] = {(const uint8_t *)in};
    int got = swr_convert(w->swr, planes, out_max, in ? src : NULL, in ? n : 0);
    if (got < 0)
        ret = mm_ff_fail(err, got, "audio conversion");
    else if (got > 0 && av_audio_fifo_write(w->fifo, (void **)planes, got) < got)
        ret = mm_fail(err, "out of memory");
    else
        ret = 0;
    av_freep(&planes[0]);
    av_freep(&planes);
    return ret;
}

/* Copies n samples per channel into the clamp buffer, interleaved, clamped
 * to [-1, 1] with NaN as 0 (a decoder can overshoot and NaN must not reach
 * the encoder; the reference clamps before its int16 conversion too). */
static int clamp_into_buffer(mm_mp4_writer *w, const float *interleaved, const float *const *planar, int n,
                             mm_error *err)
{
    int ch = w->opt.audio_channels;
    size_t total = (size_t)n * (size_t)ch;
    if (total > w->clamp_cap) {
        float *b = realloc(w->clamp_buf, total * sizeof *b);
        if (!b)
            return mm_fail(err, "out of memory");
        w->clamp_buf = b;
        w->clamp_cap = total;
    }
    for (size_t i = 0; i < total; i++) {
        float v = interleaved ? interleaved[i] : planar[i % (size_t)ch][i / (size_t)ch];
        w->clamp_buf[i] = v > 1.0f ? 1.0f : v < -1.0f ? -1.0f : v == v ? v : 0.0f;
    }
    return 0;
}

static int write_audio(mm_mp4_writer *w, const float *interleaved, const float *const *planar, int n, mm_error *err)
{
    if (w->failed)
        return mm_fail(err, "mp4 output %s: an earlier write failed", w->path);
    if (!w->aenc)
        return mm_fail(err, "mp4 output %s: opened silent (audio_channels 0), cannot take audio", w->path);
    if (n < 0)
        return mm_fail(err, "mp4 output: negative sample count %d", n);
    if (n == 0)
        return 0;
    if (clamp_into_buffer(w, interleaved, planar, n, err) < 0 || queue_audio(w, w->clamp_buf, n, err) < 0 ||
        pump_audio(w, audio_for_frames(w, w->frames), 0, err) < 0) {
        w->failed = 1;
        return mm_error_prefix(err, "mp4 output %s", w->path);
    }
    return 0;
}

int mm_mp4_write_audio(mm_mp4_writer *w, const float *interleaved, int n, mm_error *err)
{
    return write_audio(w, interleaved, NULL, n, err);
}

int mm_mp4_write_audio_planar(mm_mp4_writer *w, const float *const *channels, int n, mm_error *err)
{
    return write_audio(w, NULL, channels, n, err);
}

/* Pads the queued audio with silence up to `total` samples per channel. */
static int pad_audio(mm_mp4_writer *w, int64_t total, mm_error *err)
{
    int64_t have = w->audio_out + av_audio_fifo_size(w->fifo);
    if (have >= total)
        return 0;
    int missing = (int)(total - have);
    uint8_t **planes = NULL;
    int ret = av_samples_alloc_array_and_samples(&planes, NULL, w->aenc->ch_layout.nb_channels, missing,
                                                 w->aenc->sample_fmt, 0);
    if (ret < 0)
        return mm_ff_fail(err, ret, "audio buffer");
    av_samples_set_silence(planes, 0, missing, w->aenc->ch_layout.nb_channels, w->aenc->sample_fmt);
    ret = av_audio_fifo_write(w->fifo, (void **)planes, missing) < missing ? mm_fail(err, "out of memory") : 0;
    av_freep(&planes[0]);
    av_freep(&planes);
    return ret;
}

static int sync_file(const char *path, mm_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mm_fail_errno(err, "reopening %s", path);
    int r = fsync(fd);
    close(fd);
    return r < 0 ? mm_fail_errno(err, "fsync %s", path) : 0;
}

int mm_mp4_writer_close(mm_mp4_writer *w, mm_error *err)
{
    if (!w)
        return 0;
    if (w->failed) {
        mm_fail(err, "mp4 output %s: an earlier write failed; nothing written", w->path);
        mm_mp4_writer_abort(w);
        return -1;
    }
    if (w->frames == 0) {
        mm_fail(err, "mp4 output %s: no video frames were written", w->path);
        mm_mp4_writer_abort(w);
        return -1;
    }
    int ok = mm_mp4_writer_finish_video(w, err) == 0;
    if (ok && w->aenc) {
        int64_t total = audio_for_frames(w, w->frames);
        ok = queue_audio(w, NULL, 0, err) == 0 && pad_audio(w, total, err) == 0 &&
             pump_audio(w, total, 1, err) == 0 && encode(w, w->aenc, w->ast, NULL, err) == 0;
    }
    if (ok) {
        int ret = av_write_trailer(w->fmt);
        if (ret < 0)
            ok = mm_ff_fail(err, ret, "writing the mp4 index") == 0;
    }
    if (ok) {
        avio_closep(&w->fmt->pb);
        w->io_open = 0;
        ok = sync_file(w->part_path, err) == 0;
    }
    if (ok && rename(w->part_path, w->path) < 0)
        ok = mm_fail_errno(err, "renaming %s into place", w->part_path) == 0;
    if (!ok) {
        mm_error_prefix(err, "mp4 output %s", w->path);
        mm_mp4_writer_abort(w);
        return -1;
    }
    writer_free(w);
    return 0;
}

int mm_mp4_writer_finish_video(mm_mp4_writer *w, mm_error *err)
{
    if (w->failed)
        return mm_fail(err, "mp4 output %s: an earlier write failed", w->path);
    if (w->video_done)
        return 0;
    w->video_done = 1;
    if (encode(w, w->venc, w->vst, NULL, err) < 0) {
        w->failed = 1;
        return mm_error_prefix(err, "mp4 output %s: flushing the video", w->path);
    }
    return 0;
}

void mm_mp4_writer_abort(mm_mp4_writer *w)
{
    if (!w)
        return;
    if (w->fmt && w->io_open) {
        avio_closep(&w->fmt->pb);
        w->io_open = 0;
    }
    if (w->part_path)
        unlink(w->part_path);
    writer_free(w);
}

int64_t mm_mp4_writer_frames(const mm_mp4_writer *w) { return w->frames; }
