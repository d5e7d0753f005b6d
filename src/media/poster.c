#include "media/poster.h"

#include <stdlib.h>

#include <libswscale/swscale.h>

#include "media/ff_common.h"
#include "media/image.h"
#include "media/media_input.h"

int mm_media_poster(const char *in_path, const char *out_path, int max_edge, mm_error *err)
{
    mm_media_limits lim;
    mm_media_limits_defaults(&lim);
    mm_input in;
    if (mm_input_open_path(&in, in_path, &lim, err) < 0)
        return mm_error_prefix(err, "poster");
    mm_media_info info;
    AVFrame *frame = av_frame_alloc();
    struct SwsContext *sws = NULL;
    uint8_t *rgb = NULL, *upright = NULL;
    mm_image fitted = {0};
    int rc = -1;
    if (!frame) {
        mm_fail(err, "out of memory");
        goto done;
    }
    if (mm_input_classify(&in, &lim, &info, err) < 0)
        goto done;
    if (info.kind == MM_MEDIA_AUDIO) {
        mm_fail(err, "%s: an audio file has no picture for a poster", in_path);
        goto done;
    }
    int is_image = info.kind == MM_MEDIA_IMAGE;
    int64_t max_pixels = is_image ? lim.max_image_pixels : lim.max_video_pixels;
    int vi = mm_input_video_stream(&in);
    if (mm_input_first_picture(&in, vi, max_pixels, is_image, frame, err) < 0)
        goto done;
    int w = frame->width, h = frame->height;
    rgb = malloc((size_t)w * h * 3);
    if (!rgb) {
        mm_fail(err, "out of memory (%dx%d picture)", w, h);
        goto done;
    }
    if (mm_ff_frame_to_rgb(&sws, frame, rgb, w * 3, err) < 0)
        goto done;
    int orientation = is_image ? mm_frame_orientation(frame) : mm_orientation_from_turns(mm_input_stream_turns(&in, vi));
    if (mm_rgb_orient(rgb, w, h, orientation, &upright, &w, &h, err) < 0)
        goto done;
    if (mm_image_fit(upright, w, h, w * 3, max_edge, &fitted, err) < 0)
        goto done;
    rc = mm_image_write(out_path, fitted.rgb, fitted.width, fitted.height, fitted.stride, 85, err);
done:
    if (rc < 0)
        mm_error_prefix(err, "poster");
    mm_image_free(&fitted);
    free(upright);
    free(rgb);
    sws_freeContext(sws);
    av_frame_free(&frame);
    mm_input_close(&in);
    return rc;
}
