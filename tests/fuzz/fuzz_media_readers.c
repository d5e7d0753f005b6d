/* libFuzzer target: the readers the worker runs on references — image,
 * video frames (every sampling mode, a few frames each) and audio — on
 * arbitrary bytes, through an in-memory file (memfd). Whatever the input,
 * each returns 0 or -1 with a message; never a crash, leak or overread. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <libavutil/log.h>
#include <libavutil/mem.h>

#include "media/audio_reader.h"
#include "media/ff_common.h"
#include "media/image.h"
#include "media/video_reader.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    av_log_set_level(AV_LOG_QUIET);
    /* The product's allocation cap first (it is set once), then a tighter one to match this harness's
     * tighter limits: one input may not hold libFuzzer's 2 GB by itself. */
    mm_ff_cap_allocations();
    av_max_alloc((size_t)64 << 20);
    return 0;
}

static int touch_frame(void *user, const mm_video_frame *f, mm_error *err)
{
    (void)err;
    /* read the first and last pixel: the buffer must hold the whole frame */
    *(unsigned *)user += f->rgb[0] + f->rgb[(size_t)(f->height - 1) * f->stride + (size_t)(f->width - 1) * 3 + 2];
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-media", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (size > 0 && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    mm_media_limits lim;
    mm_media_limits_defaults(&lim);
    lim.max_side = 1024;
    lim.max_image_pixels = 1 << 20;
    lim.max_video_pixels = 1 << 19;
    lim.max_seconds = 30;
    lim.timeout_seconds = 5;
    mm_error err;

    mm_image img;
    err.msg[0] = '\0';
    if (mm_image_read(path, &lim, &img, &err) == 0) {
        if (img.width <= 0 || img.height <= 0 || !img.rgb)
            __builtin_trap();
        mm_image_free(&img);
    } else if (!err.msg[0]) {
        __builtin_trap();
    }

    unsigned sum = 0;
    for (int mode = MM_FRAMES_ALL; mode <= MM_FRAMES_H3_GRID; mode++) {
        mm_video_options o = {0};
        o.sampling = (mm_frame_sampling)mode;
        o.count = 3;
        o.fps = 7.5;
        o.max_frames = mode == MM_FRAMES_H3_GRID ? 22 : 4;
        o.threads = 1;
        o.limits = &lim;
        err.msg[0] = '\0';
        if (mm_video_read(path, &o, touch_frame, &sum, &err) < 0 && !err.msg[0])
            __builtin_trap();
    }

    mm_audio a;
    mm_audio_options ao = {0};
    ao.max_seconds = 2;
    ao.limits = &lim;
    err.msg[0] = '\0';
    if (mm_audio_read(path, &ao, &a, &err) == 0)
        mm_audio_free(&a);
    else if (!err.msg[0])
        __builtin_trap();
    close(fd);
    return (int)(sum & 0);
}
