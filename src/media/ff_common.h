/* Helpers shared by the media files (internal to src/media).
 *
 * Every path handed to libavformat goes through mm_ff_file_url(): a bare path
 * is a URL to FFmpeg, so "rtmp://x" or "concat:a|b" would open a network
 * stream or another file. Prefixing "file:" and whitelisting only the file
 * protocol keeps every open a plain local file.
 */
#ifndef MMH3_MEDIA_FF_COMMON_H
#define MMH3_MEDIA_FF_COMMON_H

#include <stdint.h>

#include <libavutil/dict.h>
#include <libavutil/frame.h>
#include <libavutil/pixfmt.h>

#include "core/error.h"

/* Fills err with "<what>: <FFmpeg's message for averr>" and returns -1. */
int mm_ff_fail(mm_error *err, int averr, const char *fmt, ...) MM_PRINTF(3, 4);

/* "file:<path>", malloc'ed; NULL when out of memory. */
char *mm_ff_file_url(const char *path);

/* The most one FFmpeg allocation may take (av_max_alloc), set once for the
 * process by mm_ff_cap_allocations(): a header field of a few bytes can ask
 * a demuxer for gigabytes (fuzzing found a 267-byte WAV whose LIST chunk
 * claims 1.6 GB, zeroed by av_mallocz before anything is read), so an
 * upload could make the server touch memory far beyond its size. The
 * largest allocation an accepted input needs is one plane of the biggest
 * picture the limits accept (50 megapixels × 8 bytes of 16-bit RGBA ≈ 400 MB). */
#define MM_FF_MAX_ALLOC ((size_t)512 << 20)
void mm_ff_cap_allocations(void);

/* Sets protocol_whitelist=file on an options dictionary. */
int mm_ff_local_only(AVDictionary **opts);

/* The swscale colour coefficients (SWS_CS_*) for a frame's colour space;
 * untagged frames are BT.601, as FFmpeg, PyAV and PIL read them. */
int mm_ff_sws_colorspace(enum AVColorSpace cs);

/* Whether a YUV frame's samples use the full 0..255 range (JPEG) rather
 * than the video range 16..235. */
int mm_ff_full_range(const AVFrame *f);

/* Converts any decoded frame to packed RGB24 of the same size into dst
 * (stride dst_stride), honouring its colour space and range. Uses and
 * updates the cached context *sws (free with sws_freeContext). */
struct SwsContext;
int mm_ff_frame_to_rgb(struct SwsContext **sws, const AVFrame *f, uint8_t *dst, int dst_stride, mm_error *err);

#endif
