#include <stdlib.h>
#include <string.h>

#include <libswscale/swscale.h>

#include "media/ff_common.h"
#include "media/image.h"
#include "media/media_input.h"

void mm_image_free(mm_image *img)
{
    if (!img)
        return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

int mm_image_read(const char *path, const mm_media_limits *lim, mm_image *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    const mm_media_limits limits = mm_media_limits_or_defaults(lim);
    lim = &limits;
    mm_input in;
    if (mm_input_open_path(&in, path, lim, err) < 0)
        return -1;
    mm_media_info info;
    AVFrame *frame = av_frame_alloc();
    struct SwsContext *sws = NULL;
    uint8_t *rgb = NULL;
    int rc = -1;
    if (!frame) {
        mm_fail(err, "out of memory");
        goto done;
    }
    if (mm_input_classify(&in, lim, &info, err) < 0)
        goto done;
    if (info.kind != MM_MEDIA_IMAGE) {
        mm_fail(err, "%s: a %s (%s), not an image; accepted images: PNG, JPEG, WebP, BMP, GIF, TIFF", path,
                mm_media_kind_name(info.kind), info.format_name);
        goto done;
    }
    if (mm_input_first_picture(&in, mm_input_video_stream(&in), lim->max_image_pixels, 1, frame, err) < 0)
        goto done;
    int w = frame->width, h = frame->height;
    if (w > lim->max_side || h > lim->max_side || (int64_t)w * h > lim->max_image_pixels) {
        mm_fail(err, "%s: the image decodes at %dx%d, beyond the accepted limits", path, w, h);
        goto done;
    }
    rgb = malloc((size_t)w * h * 3);
    if (!rgb) {
        mm_fail(err, "out of memory (%dx%d image)", w, h);
        goto done;
    }
    if (mm_ff_frame_to_rgb(&sws, frame, rgb, w * 3, err) < 0) {
        mm_error_prefix(err, "%s", path);
        goto done;
    }
    int orientation = mm_frame_orientation(frame);
    if (orientation != 1) {
        uint8_t *turned;
        int tw, th;
        if (mm_rgb_orient(rgb, w, h, orientation, &turned, &tw, &th, err) < 0)
            goto done;
        free(rgb);
        rgb = turned;
        w = tw;
        h = th;
    }
    out->width = w;
    out->height = h;
    out->stride = w * 3;
    out->rgb = rgb;
    rgb = NULL;
    rc = 0;
done:
    free(rgb);
    sws_freeContext(sws);
    av_frame_free(&frame);
    mm_input_close(&in);
    return rc;
}
