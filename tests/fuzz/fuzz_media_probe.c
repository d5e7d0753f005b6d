/* libFuzzer target: mm_media_probe_buffer on arbitrary bytes. Whatever the
 * input, the probe must return 0 or -1 with a message, never crash, leak,
 * hang past its budget or read outside the buffer. Seeds: one small file of
 * each accepted kind plus refused ones (tests/fuzz/corpus/media_probe). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <libavutil/log.h>
#include <libavutil/mem.h>

#include "media/ff_common.h"
#include "media/probe.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mm_media_limits lim;
    mm_media_limits_defaults(&lim);
    /* Tighter than production so one input stays cheap. */
    lim.max_side = 2048;
    lim.max_image_pixels = 4 << 20;
    lim.max_video_pixels = 2 << 20;
    lim.timeout_seconds = 5;
    mm_media_info info;
    mm_error err;
    err.msg[0] = '\0';
    int rc = mm_media_probe_buffer(data, size, &lim, &info, &err);
    if (rc < 0 && err.msg[0] == '\0')
        __builtin_trap(); /* every failure explains itself */
    if (rc == 0 && (info.kind < MM_MEDIA_IMAGE || info.kind > MM_MEDIA_AUDIO))
        __builtin_trap();
    if (rc == 0 && info.kind != MM_MEDIA_AUDIO && (info.width <= 0 || info.height <= 0))
        __builtin_trap();
    return 0;
}
