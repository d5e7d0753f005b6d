/* Built with --without-ffmpeg (GPU test hosts): every media entry point
 * exists and fails with a message saying why. */
#include <stdlib.h>
#include <string.h>

#include "media/audio_reader.h"
#include "media/image.h"
#include "media/mp4_writer.h"
#include "media/poster.h"
#include "media/probe.h"
#include "media/video_reader.h"

static int no_ffmpeg(mm_error *err)
{
    return mm_fail(err, "mmh3 was built without the FFmpeg libraries (configure --without-ffmpeg): no media "
                        "input or output; rebuild with libavformat-dev libavcodec-dev libswscale-dev "
                        "libswresample-dev installed");
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

int mm_mp4_write_audio_planar(mm_mp4_writer *w, const float *const *channels, int n, mm_error *err)
{
    (void)w, (void)channels, (void)n;
    return no_ffmpeg(err);
}

int mm_mp4_writer_close(mm_mp4_writer *w, mm_error *err)
{
    (void)w;
    return no_ffmpeg(err);
}

int mm_mp4_writer_finish_video(mm_mp4_writer *w, mm_error *err)
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

/* probe.h */

void mm_media_set_verbose(int verbose) { (void)verbose; }

int mm_media_check(mm_error *err) { return no_ffmpeg(err); }

int mm_media_probe(const char *path, const mm_media_limits *lim, mm_media_info *out, mm_error *err)
{
    (void)path, (void)lim, (void)out;
    return no_ffmpeg(err);
}

int mm_media_probe_buffer(const uint8_t *data, size_t size, const mm_media_limits *lim, mm_media_info *out,
                          mm_error *err)
{
    (void)data, (void)size, (void)lim, (void)out;
    return no_ffmpeg(err);
}

/* image.h */

int mm_image_read(const char *path, const mm_media_limits *lim, mm_image *out, mm_error *err)
{
    (void)path, (void)lim;
    memset(out, 0, sizeof *out);
    return no_ffmpeg(err);
}

void mm_image_free(mm_image *img)
{
    if (img) {
        free(img->rgb);
        memset(img, 0, sizeof *img);
    }
}

int mm_image_write(const char *path, const uint8_t *rgb, int width, int height, int stride, int quality,
                   mm_error *err)
{
    (void)path, (void)rgb, (void)width, (void)height, (void)stride, (void)quality;
    return no_ffmpeg(err);
}

int mm_image_encode(const char *type, const uint8_t *rgb, int width, int height, int stride, int quality,
                    uint8_t **data, size_t *size, mm_error *err)
{
    (void)type, (void)rgb, (void)width, (void)height, (void)stride, (void)quality;
    *data = NULL;
    *size = 0;
    return no_ffmpeg(err);
}

int mm_image_encode_strip(const uint8_t *const *frames, int n, int width, int height, int frame_width,
                          int frame_height, int quality, uint8_t **data, size_t *size, mm_error *err)
{
    (void)frames, (void)n, (void)width, (void)height, (void)frame_width, (void)frame_height, (void)quality;
    *data = NULL;
    *size = 0;
    return no_ffmpeg(err);
}

int mm_frames_dir_write(const char *dir, int index, const uint8_t *rgb, int width, int height, int stride,
                        mm_error *err)
{
    (void)dir, (void)index, (void)rgb, (void)width, (void)height, (void)stride;
    return no_ffmpeg(err);
}

int mm_image_fit(const uint8_t *rgb, int width, int height, int stride, int max_edge, mm_image *out, mm_error *err)
{
    (void)rgb, (void)width, (void)height, (void)stride, (void)max_edge;
    memset(out, 0, sizeof *out);
    return no_ffmpeg(err);
}

/* poster.h */

int mm_media_poster(const char *in, const char *out, int max_edge, mm_error *err)
{
    (void)in, (void)out, (void)max_edge;
    return no_ffmpeg(err);
}

/* video_reader.h, audio_reader.h, resample.h */

int mm_h3_grid_floor(int frames) { return frames < 22 ? 0 : 17 * ((frames - 5) / 17) + 5; }

int mm_video_open(mm_video_reader **out, const char *path, const mm_video_options *opt, mm_error *err)
{
    (void)path, (void)opt;
    *out = NULL;
    return no_ffmpeg(err);
}

const mm_media_info *mm_video_info(const mm_video_reader *r)
{
    (void)r;
    return NULL;
}

int mm_video_planned_frames(const mm_video_reader *r)
{
    (void)r;
    return 0;
}

int mm_video_next(mm_video_reader *r, mm_video_frame *f, mm_error *err)
{
    (void)r, (void)f;
    return no_ffmpeg(err);
}

void mm_video_close(mm_video_reader *r) { (void)r; }

int mm_video_read(const char *path, const mm_video_options *opt, mm_video_frame_fn fn, void *user, mm_error *err)
{
    (void)path, (void)opt, (void)fn, (void)user;
    return no_ffmpeg(err);
}

int mm_audio_read(const char *path, const mm_audio_options *opt, mm_audio *out, mm_error *err)
{
    (void)path, (void)opt;
    memset(out, 0, sizeof *out);
    return no_ffmpeg(err);
}

void mm_audio_free(mm_audio *a)
{
    if (a) {
        free(a->samples);
        memset(a, 0, sizeof *a);
    }
}
