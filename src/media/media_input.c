#include "media/media_input.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavutil/avstring.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/time.h>

#include "media/ff_common.h"

/* Demuxers, by libavformat name. Images go through the content-probed
 * *_pipe demuxers, never image2 (which picks by extension and expands
 * "%d" patterns into other files). */
const char mm_media_demuxer_allowlist[] = "png_pipe,jpeg_pipe,webp_pipe,bmp_pipe,gif,gif_pipe,tiff_pipe,"
                                          "mov,matroska,wav,mp3,flac,ogg,aac";
/* Decoders, by libavcodec name (several implement one codec). */
const char mm_media_decoder_allowlist[] =
    "h264,hevc,vp8,vp9,libdav1d,av1,libaom-av1,mpeg4,"
    "png,mjpeg,webp,bmp,gif,tiff,"
    "aac,aac_fixed,mp3float,mp3,flac,vorbis,libvorbis,opus,libopus,alac,"
    "pcm_s16le,pcm_s16be,pcm_s24le,pcm_s32le,pcm_f32le,pcm_f64le,pcm_u8";

#define IO_BUFFER_SIZE (64 * 1024)
#define PROBE_BYTES (1 << 20)

static int deadline_passed(mm_input *in)
{
    if (in->deadline && av_gettime_relative() > in->deadline)
        in->timed_out = 1;
    return in->timed_out;
}

static int interrupt_cb(void *opaque) { return deadline_passed(opaque); }

/* ------------------------------------------------------------ our I/O */

static int fd_read(void *opaque, uint8_t *buf, int n)
{
    mm_input *in = opaque;
    if (deadline_passed(in))
        return AVERROR_EXIT;
    ssize_t got;
    do
        got = read(in->fd, buf, (size_t)n);
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return AVERROR(errno);
    return got == 0 ? AVERROR_EOF : (int)got;
}

static int64_t fd_seek(void *opaque, int64_t offset, int whence)
{
    mm_input *in = opaque;
    if (whence & AVSEEK_SIZE)
        return in->bytes;
    off_t r = lseek(in->fd, (off_t)offset, whence & ~AVSEEK_FORCE);
    return r < 0 ? AVERROR(errno) : (int64_t)r;
}

static int buf_read(void *opaque, uint8_t *buf, int n)
{
    mm_input *in = opaque;
    if (deadline_passed(in))
        return AVERROR_EXIT;
    size_t left = in->size - in->pos;
    if (left == 0)
        return AVERROR_EOF;
    size_t k = (size_t)n < left ? (size_t)n : left;
    memcpy(buf, in->data + in->pos, k);
    in->pos += k;
    return (int)k;
}

static int64_t buf_seek(void *opaque, int64_t offset, int whence)
{
    mm_input *in = opaque;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE: return (int64_t)in->size;
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = (int64_t)in->pos; break;
    case SEEK_END: base = (int64_t)in->size; break;
    default: return AVERROR(EINVAL);
    }
    if (offset > INT64_MAX - base)
        return AVERROR(EINVAL);
    int64_t to = base + offset;
    if (to < 0 || to > (int64_t)in->size)
        return AVERROR(EINVAL);
    in->pos = (size_t)to;
    return to;
}

/* ------------------------------------------------------------ open */

const char *mm_input_format_label(const char *demuxer)
{
    static const struct {
        const char *demuxer, *label;
    } labels[] = {
        {"png_pipe", "PNG"}, {"jpeg_pipe", "JPEG"}, {"webp_pipe", "WebP"}, {"bmp_pipe", "BMP"},
        {"gif", "GIF"},      {"gif_pipe", "GIF"},   {"tiff_pipe", "TIFF"}, {"mov", "MP4/MOV"},
        {"matroska", "WebM/Matroska"}, {"wav", "WAV"}, {"mp3", "MP3"}, {"flac", "FLAC"},
        {"ogg", "Ogg"},      {"aac", "AAC"},
    };
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++)
        if (av_match_list(demuxer, labels[i].demuxer, ',') > 0)
            return labels[i].label;
    return demuxer;
}

int mm_input_check_budget(const char *name, int w, int h, int bytes_per_pixel, const char *depth,
                          const mm_media_limits *lim, mm_error *err)
{
    int64_t pixels = (int64_t)w * h, bytes = pixels * bytes_per_pixel;
    if (pixels <= lim->max_image_pixels && bytes <= lim->max_decoded_bytes)
        return 0;
    return mm_fail(err,
                   "%s: a %dx%d picture%s%s needs %.0f MiB to decode: refused before decoding, since the engine uses "
                   "a picture at most at %.1f megapixels (%.0f MiB decoded); accepted: up to %.1f megapixels and "
                   "%.0f MiB decoded (e.g. 8192x4096 at 8 bits per channel)",
                   name, w, h, depth ? " at " : "", depth ? depth : "", (double)bytes / 1048576.0,
                   (double)lim->max_image_pixels / 1e6, (double)lim->max_decoded_bytes / 1048576.0,
                   (double)lim->max_image_pixels / 1e6, (double)lim->max_decoded_bytes / 1048576.0);
}

/* A PNG's size and depth from its IHDR, the chunk every PNG starts with: the
 * PNG decoder that avformat_find_stream_info() runs to learn them would
 * decode the whole picture first (8000x6000 at 16 bits: 366 MiB). */
static int check_png_header(mm_input *in, const uint8_t *h, size_t n, const mm_media_limits *lim, mm_error *err)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 29 || memcmp(h, sig, 8) != 0 || memcmp(h + 12, "IHDR", 4) != 0)
        return 0; /* not a PNG, or not one FFmpeg will read: its own checks answer */
    uint32_t w = (uint32_t)h[16] << 24 | (uint32_t)h[17] << 16 | (uint32_t)h[18] << 8 | h[19];
    uint32_t ht = (uint32_t)h[20] << 24 | (uint32_t)h[21] << 16 | (uint32_t)h[22] << 8 | h[23];
    int bits = h[24], colour = h[25];
    /* channels per colour type (0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA); FFmpeg
     * decodes a palette to 4-byte RGBA, and depths below 8 to a byte per channel */
    int channels = colour == 2 ? 3 : colour == 4 ? 2 : colour == 6 ? 4 : 1;
    int per_channel = bits == 16 ? 2 : 1;
    int bpp = colour == 3 ? 4 : channels * per_channel;
    if (w == 0 || ht == 0 || w > (uint32_t)lim->max_side || ht > (uint32_t)lim->max_side)
        return mm_fail(err, "%s: image of %ux%u is too large: at most %d pixels per side are accepted", in->name, w, ht,
                       lim->max_side);
    return mm_input_check_budget(in->name, (int)w, (int)ht, bpp, bits == 16 ? "16 bits per channel" : NULL, lim,
                                 err);
}

/* The first bytes of the input, without moving its read position. */
static size_t peek_header(mm_input *in, uint8_t *buf, size_t n)
{
    if (in->data)
        return in->size < n ? in->size : n;
    ssize_t k = pread(in->fd, buf, n, 0);
    return k > 0 ? (size_t)k : 0;
}

static int finish_open(mm_input *in, int (*rd)(void *, uint8_t *, int), int64_t (*sk)(void *, int64_t, int),
                       const mm_media_limits *lim, mm_error *err)
{
    mm_ff_cap_allocations();
    uint8_t head[32];
    size_t got = peek_header(in, head, sizeof head);
    if (check_png_header(in, in->data ? in->data : head, got, lim, err) < 0)
        return -1;
    uint8_t *iobuf = av_malloc(IO_BUFFER_SIZE);
    if (!iobuf)
        return mm_fail(err, "out of memory");
    in->avio = avio_alloc_context(iobuf, IO_BUFFER_SIZE, 0, in, rd, NULL, sk);
    if (!in->avio) {
        av_free(iobuf);
        return mm_fail(err, "out of memory");
    }

    /* Detect the format ourselves, so a refused one can be named. */
    const AVInputFormat *ifmt = NULL;
    int ret = av_probe_input_buffer2(in->avio, &ifmt, "", NULL, 0, PROBE_BYTES);
    if (in->timed_out)
        return mm_fail(err, "%s: reading took longer than the time budget", in->name);
    if (ret < 0 || !ifmt)
        return mm_fail(err,
                       "%s: not a media file we can read (the data matches no known image, video or audio format); "
                       "accepted: PNG, JPEG, WebP, BMP, GIF, TIFF images; MP4/MOV, WebM/MKV videos; WAV, MP3, FLAC, "
                       "Ogg, AAC/M4A audio",
                       in->name);
    if (av_match_list(ifmt->name, mm_media_demuxer_allowlist, ',') <= 0)
        return mm_fail(err,
                       "%s: the %s format (%s) is not accepted; accepted: PNG, JPEG, WebP, BMP, GIF, TIFF images; "
                       "MP4/MOV, WebM/MKV videos; WAV, MP3, FLAC, Ogg, AAC/M4A audio",
                       in->name, ifmt->name, ifmt->long_name ? ifmt->long_name : "?");

    in->fmt = avformat_alloc_context();
    if (!in->fmt)
        return mm_fail(err, "out of memory");
    in->fmt->pb = in->avio;
    in->fmt->interrupt_callback = (AVIOInterruptCB){interrupt_cb, in};
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "format_whitelist", mm_media_demuxer_allowlist, 0);
    av_dict_set(&opts, "codec_whitelist", mm_media_decoder_allowlist, 0);
    /* No nested opens at all (external data references, playlists): the
     * only bytes a demuxer sees are the ones we hand it. */
    av_dict_set(&opts, "protocol_whitelist", "none", 0);
    av_dict_set(&opts, "max_streams", "64", 0);
    ret = avformat_open_input(&in->fmt, NULL, ifmt, &opts);
    av_dict_free(&opts);
    if (ret < 0) {
        in->fmt = NULL; /* freed by avformat_open_input */
        if (in->timed_out)
            return mm_fail(err, "%s: reading took longer than the time budget", in->name);
        return mm_ff_fail(err, ret, "%s: damaged or truncated %s file", in->name, mm_input_format_label(ifmt->name));
    }
    /* The decoders avformat_find_stream_info() opens get the pixel budget
     * too, so no container's claim makes it decode a larger frame. */
    int64_t budget = lim->max_image_pixels > lim->max_video_pixels ? lim->max_image_pixels : lim->max_video_pixels;
    unsigned n_streams = in->fmt->nb_streams;
    AVDictionary **stream_opts = n_streams ? av_calloc(n_streams, sizeof *stream_opts) : NULL;
    for (unsigned i = 0; stream_opts && i < n_streams; i++) {
        av_dict_set_int(&stream_opts[i], "max_pixels", budget, 0);
        av_dict_set(&stream_opts[i], "threads", "1", 0);
    }
    ret = avformat_find_stream_info(in->fmt, stream_opts);
    for (unsigned i = 0; stream_opts && i < n_streams; i++)
        av_dict_free(&stream_opts[i]);
    av_free(stream_opts);
    if (in->timed_out)
        return mm_fail(err, "%s: reading took longer than the time budget", in->name);
    if (ret < 0)
        return mm_ff_fail(err, ret, "%s: cannot read the stream parameters", in->name);
    return 0;
}

static void set_deadline(mm_input *in, double timeout_seconds)
{
    if (timeout_seconds > 0)
        in->deadline = av_gettime_relative() + (int64_t)(timeout_seconds * 1e6);
}

int mm_input_open_path(mm_input *in, const char *path, const mm_media_limits *lim, mm_error *err)
{
    memset(in, 0, sizeof *in);
    in->fd = -1;
    snprintf(in->name, sizeof in->name, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return mm_fail_errno(err, "%s", path);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mm_fail(err, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return mm_fail(err, "%s: empty file (0 bytes)", path);
    }
    in->bytes = st.st_size;
    in->fd = fd;
    set_deadline(in, lim->timeout_seconds);
    if (finish_open(in, fd_read, fd_seek, lim, err) < 0) {
        mm_input_close(in);
        return -1;
    }
    return 0;
}

int mm_input_open_buffer(mm_input *in, const uint8_t *data, size_t size, const mm_media_limits *lim, mm_error *err)
{
    memset(in, 0, sizeof *in);
    in->fd = -1;
    snprintf(in->name, sizeof in->name, "upload");
    if (size == 0)
        return mm_fail(err, "upload: empty file (0 bytes)");
    in->data = data;
    in->size = size;
    in->bytes = (int64_t)size;
    set_deadline(in, lim->timeout_seconds);
    if (finish_open(in, buf_read, buf_seek, lim, err) < 0) {
        mm_input_close(in);
        return -1;
    }
    return 0;
}

void mm_input_close(mm_input *in)
{
    if (in->fmt)
        avformat_close_input(&in->fmt);
    if (in->avio) {
        av_freep(&in->avio->buffer);
        avio_context_free(&in->avio);
    }
    if (in->fd >= 0)
        close(in->fd);
    memset(in, 0, sizeof *in);
    in->fd = -1;
}

/* ------------------------------------------------------------ streams */

int mm_input_video_stream(const mm_input *in)
{
    for (unsigned i = 0; i < in->fmt->nb_streams; i++) {
        const AVStream *st = in->fmt->streams[i];
        if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && !(st->disposition & AV_DISPOSITION_ATTACHED_PIC))
            return (int)i;
    }
    return -1;
}

int mm_input_audio_stream(const mm_input *in)
{
    for (unsigned i = 0; i < in->fmt->nb_streams; i++)
        if (in->fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_AUDIO)
            return (int)i;
    return -1;
}

int mm_input_stream_turns(const mm_input *in, int index)
{
    if (index < 0)
        return 0;
    const AVStream *st = in->fmt->streams[index];
    const int32_t *matrix = NULL;
#if LIBAVCODEC_VERSION_INT >= AV_VERSION_INT(60, 29, 100)
    const AVPacketSideData *sd = av_packet_side_data_get(st->codecpar->coded_side_data,
                                                         st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
    if (sd && sd->size >= 9 * sizeof(int32_t))
        matrix = (const int32_t *)sd->data;
#else
    size_t size = 0;
    const uint8_t *sd = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (sd && size >= 9 * sizeof(int32_t))
        matrix = (const int32_t *)sd;
#endif
    if (!matrix)
        return 0;
    double ccw = av_display_rotation_get(matrix);
    if (isnan(ccw))
        return 0;
    /* The matrix rotates counter-clockwise; showing it upright turns the
     * picture clockwise by the same angle, snapped to quarter turns. */
    long turns = lround(-ccw / 90.0) % 4;
    return (int)(turns < 0 ? turns + 4 : turns);
}

int mm_input_open_decoder(mm_input *in, int index, int threads, int64_t max_pixels, int strict,
                          AVCodecContext **out, mm_error *err)
{
    *out = NULL;
    const AVStream *st = in->fmt->streams[index];
    const AVCodec *dec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!dec || av_match_list(dec->name, mm_media_decoder_allowlist, ',') <= 0)
        return mm_fail(err, "%s: no accepted decoder for %s", in->name, avcodec_get_name(st->codecpar->codec_id));
    AVCodecContext *c = avcodec_alloc_context3(dec);
    if (!c)
        return mm_fail(err, "out of memory");
    int ret = avcodec_parameters_to_context(c, st->codecpar);
    if (ret < 0) {
        avcodec_free_context(&c);
        return mm_ff_fail(err, ret, "%s: decoder parameters", in->name);
    }
    c->pkt_timebase = st->time_base;
    c->thread_count = threads;
    if (max_pixels > 0)
        av_opt_set_int(c, "max_pixels", max_pixels, 0);
    /* JPEG and PNG decoders conceal damage (a cut-off JPEG decodes to a
     * half-grey picture); explode makes it an error. Not for TIFF, whose
     * decoder would also explode on harmless unknown tags. */
    if (strict && (dec->id == AV_CODEC_ID_MJPEG || dec->id == AV_CODEC_ID_PNG))
        c->err_recognition |= AV_EF_EXPLODE | AV_EF_BUFFER | AV_EF_BITSTREAM | AV_EF_CRCCHECK;
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "codec_whitelist", mm_media_decoder_allowlist, 0);
    ret = avcodec_open2(c, dec, &opts);
    av_dict_free(&opts);
    if (ret < 0) {
        avcodec_free_context(&c);
        return mm_ff_fail(err, ret, "%s: opening the %s decoder", in->name, dec->name);
    }
    *out = c;
    return 0;
}

int mm_input_read(mm_input *in, int index, AVPacket *pkt, mm_error *err)
{
    for (;;) {
        int ret = av_read_frame(in->fmt, pkt);
        if (in->timed_out) {
            av_packet_unref(pkt);
            return mm_fail(err, "%s: reading took longer than the time budget", in->name);
        }
        if (ret == AVERROR_EOF)
            return 0;
        if (ret < 0)
            return mm_ff_fail(err, ret, "%s: damaged or truncated data", in->name);
        if (index < 0 || pkt->stream_index == index)
            return 1;
        av_packet_unref(pkt);
    }
}

/* ------------------------------------------------------------ classify */

typedef struct format_row {
    const char *demuxer, *name, *mime, *ext;
} format_row;

static const format_row image_formats[] = {
    {"png_pipe", "png", "image/png", "png"},    {"jpeg_pipe", "jpeg", "image/jpeg", "jpg"},
    {"webp_pipe", "webp", "image/webp", "webp"}, {"bmp_pipe", "bmp", "image/bmp", "bmp"},
    {"gif", "gif", "image/gif", "gif"},          {"gif_pipe", "gif", "image/gif", "gif"},
    {"tiff_pipe", "tiff", "image/tiff", "tif"},
};
static const format_row audio_formats[] = {
    {"wav", "wav", "audio/wav", "wav"}, {"mp3", "mp3", "audio/mpeg", "mp3"}, {"flac", "flac", "audio/flac", "flac"},
    {"ogg", "ogg", "audio/ogg", "ogg"}, {"aac", "aac", "audio/aac", "aac"},
};

static const enum AVCodecID image_codecs[] = {AV_CODEC_ID_PNG, AV_CODEC_ID_MJPEG, AV_CODEC_ID_WEBP,
                                              AV_CODEC_ID_BMP, AV_CODEC_ID_GIF,   AV_CODEC_ID_TIFF};
static const enum AVCodecID video_codecs[] = {AV_CODEC_ID_H264, AV_CODEC_ID_HEVC, AV_CODEC_ID_VP8,
                                              AV_CODEC_ID_VP9,  AV_CODEC_ID_AV1,  AV_CODEC_ID_MPEG4};
static const enum AVCodecID audio_codecs[] = {
    AV_CODEC_ID_AAC,       AV_CODEC_ID_MP3,       AV_CODEC_ID_FLAC,      AV_CODEC_ID_VORBIS,    AV_CODEC_ID_OPUS,
    AV_CODEC_ID_ALAC,      AV_CODEC_ID_PCM_S16LE, AV_CODEC_ID_PCM_S16BE, AV_CODEC_ID_PCM_S24LE, AV_CODEC_ID_PCM_S32LE,
    AV_CODEC_ID_PCM_F32LE, AV_CODEC_ID_PCM_F64LE, AV_CODEC_ID_PCM_U8};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int codec_in(enum AVCodecID id, const enum AVCodecID *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == id)
            return 1;
    return 0;
}

static const format_row *find_format(const char *demuxer, const format_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (av_match_list(demuxer, rows[i].demuxer, ',') > 0)
            return &rows[i];
    return NULL;
}

static void set_names(mm_media_info *info, const char *name, const char *mime, const char *ext)
{
    av_strlcpy(info->format_name, name, sizeof info->format_name);
    av_strlcpy(info->mime_type, mime, sizeof info->mime_type);
    av_strlcpy(info->extension, ext, sizeof info->extension);
}

static int check_picture(mm_input *in, const mm_media_limits *lim, mm_media_info *info, const AVStream *st,
                         int64_t max_pixels, mm_error *err)
{
    int w = st->codecpar->width, h = st->codecpar->height;
    const char *what = info->kind == MM_MEDIA_IMAGE ? "image" : "video";
    if (w <= 0 || h <= 0)
        return mm_fail(err, "%s: cannot read the %s's size: the file is damaged or truncated, or larger than "
                            "FFmpeg decodes (at most %d pixels per side are accepted)",
                       in->name, what, lim->max_side);
    if (w > lim->max_side || h > lim->max_side)
        return mm_fail(err, "%s: %s of %dx%d is too large: at most %d pixels per side are accepted", in->name, what, w,
                       h, lim->max_side);
    if ((int64_t)w * h > max_pixels)
        return mm_fail(err, "%s: %s of %dx%d has %.1f megapixels: at most %.1f are accepted", in->name, what, w, h,
                       (double)w * h / 1e6, (double)max_pixels / 1e6);
    /* What the decoded picture will cost, from the pixel format the header
     * gave (16 bits per channel doubles it). */
    int bytes = info->kind == MM_MEDIA_IMAGE && st->codecpar->format >= 0
                    ? av_image_get_buffer_size((enum AVPixelFormat)st->codecpar->format, w, h, 1)
                    : 0;
    if (bytes > 0 && mm_input_check_budget(in->name, w, h, (int)(((int64_t)bytes + (int64_t)w * h - 1) / ((int64_t)w * h)),
                                           NULL, lim, err) < 0)
        return -1;
    double aspect = w > h ? (double)w / h : (double)h / w;
    if (aspect > lim->max_aspect)
        return mm_fail(err, "%s: %s of %dx%d has an aspect ratio of %.0f:1; at most %.0f:1 is accepted", in->name,
                       what, w, h, aspect, lim->max_aspect);
    int turns = info->kind == MM_MEDIA_VIDEO ? mm_input_stream_turns(in, st->index) : 0;
    info->rotation = 90 * turns;
    info->width = turns & 1 ? h : w;
    info->height = turns & 1 ? w : h;
    return 0;
}

static int check_audio(mm_input *in, mm_media_info *info, const AVStream *st, mm_error *err)
{
    const AVCodecParameters *p = st->codecpar;
    if (!codec_in(p->codec_id, audio_codecs, COUNT(audio_codecs)))
        return mm_fail(err,
                       "%s: audio codec %s is not accepted; accepted: AAC, MP3, FLAC, Vorbis, Opus, ALAC, PCM (WAV)",
                       in->name, avcodec_get_name(p->codec_id));
    if (p->sample_rate < 1000 || p->sample_rate > 384000)
        return mm_fail(err, "%s: audio sample rate %d Hz: 1000..384000 Hz is accepted", in->name, p->sample_rate);
    if (p->ch_layout.nb_channels < 1 || p->ch_layout.nb_channels > 8)
        return mm_fail(err, "%s: audio with %d channels: 1..8 are accepted (the first two are used)", in->name,
                       p->ch_layout.nb_channels);
    info->has_audio = 1;
    info->audio_rate = p->sample_rate;
    info->audio_channels = p->ch_layout.nb_channels;
    av_strlcpy(info->audio_codec, avcodec_get_name(p->codec_id), sizeof info->audio_codec);
    return 0;
}

static double stream_seconds(const mm_input *in, const AVStream *st)
{
    if (st && st->duration != AV_NOPTS_VALUE && st->duration > 0)
        return (double)st->duration * av_q2d(st->time_base);
    if (in->fmt->duration != AV_NOPTS_VALUE && in->fmt->duration > 0)
        return (double)in->fmt->duration / AV_TIME_BASE;
    return 0;
}

int mm_input_classify(mm_input *in, const mm_media_limits *lim, mm_media_info *info, mm_error *err)
{
    memset(info, 0, sizeof *info);
    info->bytes = in->bytes;
    if (in->bytes > lim->max_bytes)
        return mm_fail(err, "%s: file of %.1f MiB is too large: at most %.1f MiB are accepted", in->name,
                       (double)in->bytes / (1 << 20), (double)lim->max_bytes / (1 << 20));
    const char *demuxer = in->fmt->iformat->name;
    int vi = mm_input_video_stream(in), ai = mm_input_audio_stream(in);
    const format_row *row;

    if ((row = find_format(demuxer, image_formats, COUNT(image_formats)))) {
        info->kind = MM_MEDIA_IMAGE;
        set_names(info, row->name, row->mime, row->ext);
        if (vi < 0)
            return mm_fail(err, "%s: %s file without a picture", in->name, row->name);
        const AVStream *st = in->fmt->streams[vi];
        if (!codec_in(st->codecpar->codec_id, image_codecs, COUNT(image_codecs)))
            return mm_fail(err, "%s: image codec %s is not accepted", in->name,
                           avcodec_get_name(st->codecpar->codec_id));
        av_strlcpy(info->video_codec, avcodec_get_name(st->codecpar->codec_id), sizeof info->video_codec);
        return check_picture(in, lim, info, st, lim->max_image_pixels, err);
    }

    if ((row = find_format(demuxer, audio_formats, COUNT(audio_formats)))) {
        info->kind = MM_MEDIA_AUDIO;
        set_names(info, row->name, row->mime, row->ext);
        if (vi >= 0)
            return mm_fail(err, "%s: %s file with a video stream: only audio is accepted in %s", in->name, row->name,
                           row->name);
        if (ai < 0)
            return mm_fail(err, "%s: %s file without an audio stream", in->name, row->name);
    } else if (av_match_list(demuxer, "mov,matroska", ',') > 0) {
        int mov = av_match_list(demuxer, "mov", ',') > 0;
        if (vi >= 0) {
            info->kind = MM_MEDIA_VIDEO;
            const AVStream *st = in->fmt->streams[vi];
            enum AVCodecID vc = st->codecpar->codec_id;
            if (!codec_in(vc, video_codecs, COUNT(video_codecs)))
                return mm_fail(err,
                               "%s: video codec %s is not accepted; accepted: H.264, HEVC, VP8, VP9, AV1, MPEG-4 "
                               "in MP4/MOV or WebM/MKV",
                               in->name, avcodec_get_name(vc));
            av_strlcpy(info->video_codec, avcodec_get_name(vc), sizeof info->video_codec);
            if (check_picture(in, lim, info, st, lim->max_video_pixels, err) < 0)
                return -1;
            /* The average rate, as the reference reads it (stream.average_rate),
             * else FFmpeg's guess. */
            AVRational fr = st->avg_frame_rate;
            if (!(fr.num > 0 && fr.den > 0 && av_q2d(fr) >= 0.01 && av_q2d(fr) <= 1000))
                fr = av_guess_frame_rate(in->fmt, (AVStream *)st, NULL);
            info->fps = fr.num > 0 && fr.den > 0 ? av_q2d(fr) : 0;
            if (!(info->fps >= 0.01 && info->fps <= 1000))
                return mm_fail(err, "%s: the video has no usable frame rate", in->name);
            info->frames = st->nb_frames;
            info->duration_seconds = stream_seconds(in, st);
            if (mov) {
                AVDictionaryEntry *brand = av_dict_get(in->fmt->metadata, "major_brand", NULL, 0);
                if (brand && !strncmp(brand->value, "qt", 2))
                    set_names(info, "mov", "video/quicktime", "mov");
                else
                    set_names(info, "mp4", "video/mp4", "mp4");
            } else {
                int ac = ai >= 0 ? (int)in->fmt->streams[ai]->codecpar->codec_id : AV_CODEC_ID_NONE;
                int webm = (vc == AV_CODEC_ID_VP8 || vc == AV_CODEC_ID_VP9 || vc == AV_CODEC_ID_AV1) &&
                           (ac == AV_CODEC_ID_NONE || ac == AV_CODEC_ID_OPUS || ac == AV_CODEC_ID_VORBIS);
                if (webm)
                    set_names(info, "webm", "video/webm", "webm");
                else
                    set_names(info, "mkv", "video/x-matroska", "mkv");
            }
        } else if (ai >= 0) {
            info->kind = MM_MEDIA_AUDIO;
            if (mov)
                set_names(info, "m4a", "audio/mp4", "m4a");
            else
                set_names(info, "mka", "audio/x-matroska", "mka");
        } else {
            return mm_fail(err, "%s: %s file with no video frames and no audio", in->name,
                           mm_input_format_label(demuxer));
        }
    } else {
        return mm_fail(err, "%s: the %s format is not accepted", in->name, mm_input_format_label(demuxer));
    }

    if (ai >= 0 && check_audio(in, info, in->fmt->streams[ai], err) < 0)
        return -1;
    if (info->kind == MM_MEDIA_AUDIO)
        info->duration_seconds = stream_seconds(in, in->fmt->streams[ai]);
    if (info->duration_seconds > lim->max_seconds)
        return mm_fail(err, "%s: %s of %.1f s is too long: at most %.0f s are accepted", in->name,
                       mm_media_kind_name(info->kind), info->duration_seconds, lim->max_seconds);
    return 0;
}

/* ------------------------------------------------------------ pictures */

int mm_input_first_picture(mm_input *in, int index, int64_t max_pixels, int strict, AVFrame *frame, mm_error *err)
{
    AVCodecContext *dec = NULL;
    AVPacket *pkt = av_packet_alloc();
    int rc = -1, sent_eof = 0;
    if (!pkt) {
        mm_fail(err, "out of memory");
        goto done;
    }
    if (mm_input_open_decoder(in, index, 1, max_pixels, strict, &dec, err) < 0)
        goto done;
    for (;;) {
        int ret = avcodec_receive_frame(dec, frame);
        if (ret >= 0) {
            rc = 0;
            break;
        }
        if (ret == AVERROR_EOF) {
            mm_fail(err, "%s: no picture decodes (the stream holds no frames)", in->name);
            break;
        }
        if (ret != AVERROR(EAGAIN)) {
            mm_ff_fail(err, ret, "%s: the picture does not decode (damaged or truncated data)", in->name);
            break;
        }
        int got = sent_eof ? 0 : mm_input_read(in, index, pkt, err);
        if (got < 0)
            break;
        ret = avcodec_send_packet(dec, got ? pkt : NULL);
        av_packet_unref(pkt);
        sent_eof |= !got;
        if (ret < 0 && ret != AVERROR_EOF) {
            mm_ff_fail(err, ret, "%s: the picture does not decode (damaged or truncated data)", in->name);
            break;
        }
    }
done:
    avcodec_free_context(&dec);
    av_packet_free(&pkt);
    return rc;
}

int mm_frame_orientation(const AVFrame *f)
{
    AVDictionaryEntry *e = av_dict_get(f->metadata, "Orientation", NULL, 0);
    if (e) {
        long v = strtol(e->value, NULL, 10);
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
    AVFrameSideData *sd = av_frame_get_side_data(f, AV_FRAME_DATA_DISPLAYMATRIX);
    if (!sd || sd->size < 9 * sizeof(int32_t))
        return 1;
    const int32_t *m = (const int32_t *)sd->data;
    double ccw = av_display_rotation_get(m);
    if (isnan(ccw))
        return 1;
    long turns = lround(-ccw / 90.0) % 4;
    if (turns < 0)
        turns += 4;
    /* A negative determinant means a mirror image as well. */
    int mirrored = (int64_t)m[0] * m[4] - (int64_t)m[1] * m[3] < 0;
    static const int plain[4] = {1, 6, 3, 8}, mirror[4] = {2, 7, 4, 5};
    return mirrored ? mirror[turns] : plain[turns];
}

int mm_orientation_from_turns(int turns)
{
    static const int o[4] = {1, 6, 3, 8};
    return o[((turns % 4) + 4) % 4];
}

int mm_rgb_orient(const uint8_t *src, int w, int h, int orientation, uint8_t **dst, int *dw, int *dh, mm_error *err)
{
    int swap = orientation >= 5 && orientation <= 8;
    int ow = swap ? h : w, oh = swap ? w : h;
    uint8_t *out = malloc((size_t)ow * oh * 3);
    if (!out)
        return mm_fail(err, "out of memory (%dx%d picture)", ow, oh);
    for (int oy = 0; oy < oh; oy++) {
        uint8_t *row = out + (size_t)oy * ow * 3;
        for (int ox = 0; ox < ow; ox++) {
            int sx, sy;
            switch (orientation) {
            case 2: sx = w - 1 - ox, sy = oy; break;              /* mirror left-right */
            case 3: sx = w - 1 - ox, sy = h - 1 - oy; break;      /* 180 */
            case 4: sx = ox, sy = h - 1 - oy; break;              /* mirror top-bottom */
            case 5: sx = oy, sy = ox; break;                      /* transpose */
            case 6: sx = oy, sy = h - 1 - ox; break;              /* 90 clockwise */
            case 7: sx = w - 1 - oy, sy = h - 1 - ox; break;      /* transverse */
            case 8: sx = w - 1 - oy, sy = ox; break;              /* 90 counter-clockwise */
            default: sx = ox, sy = oy; break;
            }
            memcpy(row + (size_t)ox * 3, src + ((size_t)sy * w + sx) * 3, 3);
        }
    }
    *dst = out;
    *dw = ow;
    *dh = oh;
    return 0;
}
