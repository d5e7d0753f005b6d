/* The media API's plain-C parts (defaults, names), built with and without
 * the FFmpeg libraries so both builds agree on them. */
#include <string.h>

#include "media/mp4_writer.h"
#include "media/probe.h"

void mm_mp4_options_defaults(mm_mp4_options *opt, int width, int height)
{
    memset(opt, 0, sizeof *opt);
    opt->width = width;
    opt->height = height;
    opt->fps = 24;
    opt->crf = 18;
    opt->preset = "medium";
    opt->audio_channels = 2;
    opt->audio_rate = 32000;
}

const char *mm_media_kind_name(mm_media_kind k)
{
    switch (k) {
    case MM_MEDIA_IMAGE: return "image";
    case MM_MEDIA_VIDEO: return "video";
    case MM_MEDIA_AUDIO: return "audio";
    default: return "unknown";
    }
}

void mm_media_limits_defaults(mm_media_limits *lim)
{
    lim->max_bytes = (int64_t)512 << 20;
    lim->max_side = 8192;
    lim->max_image_pixels = (int64_t)8192 * 4096;
    lim->max_decoded_bytes = (int64_t)8192 * 4096 * 4; /* 8-bit RGBA */
    lim->max_video_pixels = 4096 * 2304;
    lim->max_aspect = 200;
    lim->max_seconds = 600;
    lim->timeout_seconds = 30;
}

mm_media_limits mm_media_limits_or_defaults(const mm_media_limits *lim)
{
    mm_media_limits l;
    if (lim)
        l = *lim;
    else
        mm_media_limits_defaults(&l);
    return l;
}
