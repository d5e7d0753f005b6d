#include "media/ff_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include <libavutil/error.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

static void cap_once(void) { av_max_alloc(MM_FF_MAX_ALLOC); }

void mm_ff_cap_allocations(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cap_once);
}

int mm_ff_fail(mm_error *err, int averr, const char *fmt, ...)
{
    char cause[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(averr, cause, sizeof cause);
    va_list ap;
    va_start(ap, fmt);
    mm_vfail_cause(err, cause, fmt, ap);
    va_end(ap);
    return -1;
}

char *mm_ff_file_url(const char *path)
{
    size_t n = strlen(path);
    char *url = malloc(n + 6);
    if (!url)
        return NULL;
    memcpy(url, "file:", 5);
    memcpy(url + 5, path, n + 1);
    return url;
}

int mm_ff_local_only(AVDictionary **opts)
{
    return av_dict_set(opts, "protocol_whitelist", "file", 0);
}

int mm_ff_sws_colorspace(enum AVColorSpace cs)
{
    switch (cs) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_FCC: return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    default: return SWS_CS_ITU601;
    }
}

/* The deprecated "J" formats are the plain ones at full range. */
static enum AVPixelFormat unjpeg(enum AVPixelFormat f, int *full)
{
    switch (f) {
    case AV_PIX_FMT_YUVJ420P: *full = 1; return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P: *full = 1; return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P: *full = 1; return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P: *full = 1; return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P: *full = 1; return AV_PIX_FMT_YUV411P;
    default: return f;
    }
}

int mm_ff_full_range(const AVFrame *f)
{
    int full = f->color_range == AVCOL_RANGE_JPEG;
    unjpeg((enum AVPixelFormat)f->format, &full);
    return full;
}

int mm_ff_frame_to_rgb(struct SwsContext **sws, const AVFrame *f, uint8_t *dst, int dst_stride, mm_error *err)
{
    int full = mm_ff_full_range(f);
    enum AVPixelFormat src_fmt = unjpeg((enum AVPixelFormat)f->format, &full);
    if (f->width <= 0 || f->height <= 0 || src_fmt == AV_PIX_FMT_NONE)
        return mm_fail(err, "decoded frame has no picture (%dx%d, format %d)", f->width, f->height, f->format);
    /* Bilinear, as PyAV's to_ndarray() converts (the reference reads media
     * that way); at equal sizes only the chroma upsampling uses it. */
    *sws = sws_getCachedContext(*sws, f->width, f->height, src_fmt, f->width, f->height, AV_PIX_FMT_RGB24,
                                SWS_BILINEAR, NULL, NULL, NULL);
    if (!*sws) {
        const char *name = av_get_pix_fmt_name(src_fmt);
        return mm_fail(err, "cannot convert pixel format %s to RGB", name ? name : "unknown");
    }
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(src_fmt);
    if (d && !(d->flags & AV_PIX_FMT_FLAG_RGB) && d->nb_components >= 3) {
        const int *coef = sws_getCoefficients(mm_ff_sws_colorspace(f->colorspace));
        int *inv, *tab, src_range, dst_range, bright, contrast, sat;
        if (sws_getColorspaceDetails(*sws, &inv, &src_range, &tab, &dst_range, &bright, &contrast, &sat) >= 0)
            sws_setColorspaceDetails(*sws, coef, full, tab, 1, bright, contrast, sat);
    }
    uint8_t *dst_planes[4] = {dst, NULL, NULL, NULL};
    int dst_strides[4] = {dst_stride, 0, 0, 0};
    int h = sws_scale(*sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst_planes, dst_strides);
    if (h != f->height)
        return mm_fail(err, "converting a %dx%d frame to RGB failed", f->width, f->height);
    return 0;
}
