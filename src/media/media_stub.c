/* Built with --without-ffmpeg (GPU test hosts): every media entry point
 * exists and fails with a message saying why. */
#include "media/mp4_writer.h"

#include <string.h>

static int no_ffmpeg(mm_error *err)
{
    return mm_fail(err, "mmh3 was built without the FFmpeg libraries (configure --without-ffmpeg): no media "
                        "input or output; rebuild with libavformat-dev libavcodec-dev libswscale-dev "
                        "libswresample-dev installed");
}

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

int mm_mp4_writer_open(mm_mp4_writer **out, const char *path, const mm_mp4_options *opt, mm_error *err)
{
    (void)path, (void)opt;
    *out = NULL;
    return no_ffmpeg(err);
}

int mm_mp4_write_rgb(mm_mp4_writer *w, const uint8_t *rgb, int stride, mm_error *err)
{
    (void)w, (void)rgb, (void)stride;
    return no_ffmpeg(err);
}

int mm_mp4_write_audio(mm_mp4_writer *w, const float *interleaved, int n, mm_error *err)
{
    (void)w, (void)interleaved, (void)n;
    return no_ffmpeg(err);
}

int mm_mp4_writer_close(mm_mp4_writer *w, mm_error *err)
{
    (void)w;
    return no_ffmpeg(err);
}

void mm_mp4_writer_abort(mm_mp4_writer *w) { (void)w; }

int64_t mm_mp4_writer_frames(const mm_mp4_writer *w)
{
    (void)w;
    return 0;
}
