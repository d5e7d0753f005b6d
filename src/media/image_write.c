#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

#include "media/ff_common.h"
#include "media/image.h"

typedef struct still_format {
    const char *ext;
    const char *encoder;
    enum AVPixelFormat pix_fmt;
} still_format;

/* JPEG as full-range BT.601 (JFIF); WebP from BGRA so libwebp does its own
 * (sharper) RGB to YUV conversion; PNG straight from RGB. */
static const still_format formats[] = {
    {"png", "png", AV_PIX_FMT_RGB24},
    {"jpg", "mjpeg", AV_PIX_FMT_YUVJ420P},
    {"jpeg", "mjpeg", AV_PIX_FMT_YUVJ420P},
    {"webp", "libwebp", AV_PIX_FMT_BGRA},
};

static const still_format *format_for(const char *path)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash))
        return NULL;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcasecmp(dot + 1, formats[i].ext))
            return &formats[i];
    return NULL;
}

int mm_image_write(const char *path, const uint8_t *rgb, int width, int height, int stride, int quality,
                   mm_error *err)
{
    const still_format *fmt = format_for(path);
    if (!fmt)
        return mm_fail(err, "%s: unknown image type: name it .png, .jpg, .jpeg or .webp", path);
    uint8_t *out = NULL;
    size_t out_n = 0;
    if (mm_image_encode(fmt->ext, rgb, width, height, stride, quality, &out, &out_n, err) != 0)
        return mm_error_prefix(err, "%s", path);
    int rc = mm_file_write_atomic(path, out, out_n, err);
    free(out);
    return rc;
}

/* An encoder for one still of fmt at width x height, and its frame. */
static int open_still(const still_format *fmt, int width, int height, int quality, AVCodecContext **cc,
                      AVFrame **fr, mm_error *err)
{
    *cc = NULL;
    *fr = NULL;
    if (quality <= 0)
        quality = 90;
    if (quality > 100)
        quality = 100;
    const AVCodec *codec = avcodec_find_encoder_by_name(fmt->encoder);
    if (!codec)
        return mm_fail(err, "this FFmpeg build has no %s encoder", fmt->encoder);
    AVCodecContext *c = avcodec_alloc_context3(codec);
    AVFrame *frame = av_frame_alloc();
    int ret;
    *cc = c;
    *fr = frame;
    if (!c || !frame)
        return mm_fail(err, "out of memory");
    c->width = width;
    c->height = height;
    c->pix_fmt = fmt->pix_fmt;
    c->time_base = (AVRational){1, 25};
    if (codec->id == AV_CODEC_ID_MJPEG) {
        /* quality 100 -> qscale 2, 1 -> 31 */
        c->flags |= AV_CODEC_FLAG_QSCALE;
        c->global_quality = FF_QP2LAMBDA * (2 + (100 - quality) * 29 / 99);
        c->color_range = AVCOL_RANGE_JPEG;
    } else if (codec->id == AV_CODEC_ID_WEBP) {
        av_opt_set_double(c->priv_data, "quality", quality, 0);
    }
    if ((ret = avcodec_open2(c, codec, NULL)) < 0)
        return mm_ff_fail(err, ret, "opening the %s encoder", fmt->encoder);
    frame->format = c->pix_fmt;
    frame->width = width;
    frame->height = height;
    frame->color_range = c->color_range;
    if ((ret = av_frame_get_buffer(frame, 0)) < 0)
        return mm_ff_fail(err, ret, "frame buffer");
    return 0;
}

/* The filled frame through the encoder into one malloc'ed buffer. */
static int encode_still(AVCodecContext *c, AVFrame *frame, const char *encoder, uint8_t **data, size_t *size,
                        mm_error *err)
{
    AVPacket *pkt = av_packet_alloc();
    uint8_t *out = NULL;
    size_t out_n = 0;
    int ret, rc = -1;
    if (!pkt)
        return mm_fail(err, "out of memory");
    frame->pts = 0;
    if ((ret = avcodec_send_frame(c, frame)) < 0 || (ret = avcodec_send_frame(c, NULL)) < 0) {
        mm_ff_fail(err, ret, "encoding");
        goto done;
    }
    while ((ret = avcodec_receive_packet(c, pkt)) >= 0) {
        uint8_t *grown = realloc(out, out_n + (size_t)pkt->size);
        if (!grown) {
            mm_fail(err, "out of memory");
            goto done;
        }
        out = grown;
        memcpy(out + out_n, pkt->data, (size_t)pkt->size);
        out_n += (size_t)pkt->size;
        av_packet_unref(pkt);
    }
    if (ret != AVERROR_EOF && ret != AVERROR(EAGAIN)) {
        mm_ff_fail(err, ret, "encoding");
        goto done;
    }
    if (out_n == 0) {
        mm_fail(err, "the %s encoder produced nothing", encoder);
        goto done;
    }
    *data = out;
    *size = out_n;
    out = NULL;
    rc = 0;
done:
    free(out);
    av_packet_free(&pkt);
    return rc;
}

int mm_image_encode(const char *type, const uint8_t *rgb, int width, int height, int stride, int quality,
                    uint8_t **data, size_t *size, mm_error *err)
{
    const still_format *fmt = NULL;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0] && !fmt; i++)
        if (!strcasecmp(type, formats[i].ext))
            fmt = &formats[i];
    *data = NULL;
    *size = 0;
    if (!fmt)
        return mm_fail(err, "unknown image type '%s': accepted: png, jpg, jpeg, webp", type);
    if (width <= 0 || height <= 0 || stride < 3 * width)
        return mm_fail(err, "bad picture geometry %dx%d (stride %d)", width, height, stride);
    AVCodecContext *c;
    AVFrame *frame;
    struct SwsContext *sws = NULL;
    int rc = open_still(fmt, width, height, quality, &c, &frame, err);
    if (rc == 0) {
        sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, c->pix_fmt,
                             SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, NULL, NULL, NULL);
        if (!sws)
            rc = mm_fail(err, "cannot convert RGB for the %s encoder", fmt->encoder);
    }
    if (rc == 0) {
        const uint8_t *src[4] = {rgb, NULL, NULL, NULL};
        int src_stride[4] = {stride, 0, 0, 0};
        sws_scale(sws, src, src_stride, 0, height, frame->data, frame->linesize);
        rc = encode_still(c, frame, fmt->encoder, data, size, err);
    }
    sws_freeContext(sws);
    av_frame_free(&frame);
    avcodec_free_context(&c);
    return rc;
}

int mm_image_encode_strip(const uint8_t *const *frames, int n, int width, int height, int frame_width,
                          int frame_height, int quality, uint8_t **data, size_t *size, mm_error *err)
{
    static const still_format jpeg = {"jpg", "mjpeg", AV_PIX_FMT_YUVJ420P};
    *data = NULL;
    *size = 0;
    if (n < 1 || width < 1 || height < 1 || frame_width < 2 || frame_height < 2 || frame_width % 2 ||
        frame_height % 2 || (int64_t)n * frame_width > 65500)
        return mm_fail(err, "bad strip geometry: %d frames of %dx%d to %dx%d (even sizes, at most 65500 px wide)", n,
                       width, height, frame_width, frame_height);
    AVCodecContext *c;
    AVFrame *frame;
    struct SwsContext *sws = NULL;
    int rc = open_still(&jpeg, n * frame_width, frame_height, quality, &c, &frame, err);
    if (rc == 0) {
        /* scaling and the YUV conversion in one pass, straight into the frame's part of the strip */
        sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, frame_width, frame_height, AV_PIX_FMT_YUVJ420P,
                             SWS_BILINEAR, NULL, NULL, NULL);
        if (!sws)
            rc = mm_fail(err, "cannot scale %dx%d RGB to a %dx%d JPEG frame", width, height, frame_width, frame_height);
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        const uint8_t *src[4] = {frames[i], NULL, NULL, NULL};
        int src_stride[4] = {3 * width, 0, 0, 0};
        uint8_t *dst[4] = {frame->data[0] + (size_t)i * frame_width, frame->data[1] + (size_t)i * frame_width / 2,
                           frame->data[2] + (size_t)i * frame_width / 2, NULL};
        sws_scale(sws, src, src_stride, 0, height, dst, frame->linesize);
    }
    if (rc == 0)
        rc = encode_still(c, frame, jpeg.encoder, data, size, err);
    sws_freeContext(sws);
    av_frame_free(&frame);
    avcodec_free_context(&c);
    return rc;
}

int mm_frames_dir_write(const char *dir, int index, const uint8_t *rgb, int width, int height, int stride,
                        mm_error *err)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/frame_%05d.png", dir, index);
    if (n < 0 || (size_t)n >= sizeof path)
        return mm_fail(err, "frames folder path too long: %s", dir);
    return mm_image_write(path, rgb, width, height, stride, 0, err);
}

int mm_image_fit(const uint8_t *rgb, int width, int height, int stride, int max_edge, mm_image *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    int w = width, h = height;
    if (max_edge > 0 && (w > max_edge || h > max_edge)) {
        if (w >= h) {
            w = max_edge;
            h = (int)((int64_t)height * max_edge / width);
        } else {
            h = max_edge;
            w = (int)((int64_t)width * max_edge / height);
        }
        if (w < 1)
            w = 1;
        if (h < 1)
            h = 1;
    }
    out->rgb = malloc((size_t)w * h * 3);
    if (!out->rgb)
        return mm_fail(err, "out of memory (%dx%d picture)", w, h);
    out->width = w;
    out->height = h;
    out->stride = w * 3;
    if (w == width && h == height) {
        for (int y = 0; y < h; y++)
            memcpy(out->rgb + (size_t)y * out->stride, rgb + (size_t)y * stride, (size_t)w * 3);
        return 0;
    }
    struct SwsContext *sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, w, h, AV_PIX_FMT_RGB24,
                                            SWS_AREA | SWS_ACCURATE_RND, NULL, NULL, NULL);
    if (!sws) {
        mm_image_free(out);
        return mm_fail(err, "cannot scale %dx%d to %dx%d", width, height, w, h);
    }
    const uint8_t *src[4] = {rgb, NULL, NULL, NULL};
    int src_stride[4] = {stride, 0, 0, 0};
    uint8_t *dst[4] = {out->rgb, NULL, NULL, NULL};
    int dst_stride[4] = {out->stride, 0, 0, 0};
    sws_scale(sws, src, src_stride, 0, height, dst, dst_stride);
    sws_freeContext(sws);
    return 0;
}
