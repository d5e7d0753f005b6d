/* Opening media for reading, safely (internal to src/media).
 *
 * Every input — an upload being probed, a reference the engine reads, a
 * fuzzer's bytes — is opened here, with the same fences:
 *   - a path is always a local file ("file:" URL, protocol whitelist "file");
 *     a buffer is read through our own AVIOContext, with no protocol at all;
 *   - only allowlisted demuxers may take the file (format_whitelist), so a
 *     playlist (hls, concat, ...) that would open other files is refused
 *     before its header is read;
 *   - only allowlisted decoders may run, also inside
 *     avformat_find_stream_info() (codec_whitelist);
 *   - a wall-clock deadline interrupts any blocking read or long probe;
 *   - decoders get max_pixels, so a frame larger than the limits is refused
 *     by the decoder even when the container lied about the size.
 */
#ifndef MMH3_MEDIA_MEDIA_INPUT_H
#define MMH3_MEDIA_MEDIA_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>

#include "core/error.h"
#include "media/probe.h"

typedef struct mm_input {
    AVFormatContext *fmt;
    AVIOContext *avio; /* our I/O for buffer inputs (owned) */
    int fd;             /* file inputs; -1 for buffers */
    const uint8_t *data; /* buffer inputs */
    size_t size, pos;
    int64_t deadline; /* av_gettime_relative() microseconds; 0 = none */
    int timed_out;
    int64_t bytes;     /* file size */
    char name[256];    /* for messages: the path, or "upload" */
} mm_input;

/* The demuxers and decoders we accept (the allowlists in probe.c). */
extern const char mm_media_demuxer_allowlist[];
extern const char mm_media_decoder_allowlist[];

/* "MP4/MOV", "PNG", ... for a demuxer name (the name itself when unknown). */
const char *mm_input_format_label(const char *demuxer);

/* lim's time budget bounds the open; its picture budgets are checked on the
 * header before anything is decoded (a PNG's IHDR: size and bit depth), and
 * bound the frames avformat_find_stream_info() may decode to learn the rest. */
int mm_input_open_path(mm_input *in, const char *path, const mm_media_limits *lim, mm_error *err);
int mm_input_open_buffer(mm_input *in, const uint8_t *data, size_t size, const mm_media_limits *lim, mm_error *err);
/* A picture of w x h at bytes_per_pixel against the budgets: -1 with a
 * message that names the engine's limit when it is larger. */
int mm_input_check_budget(const char *name, int w, int h, int bytes_per_pixel, const char *depth,
                          const mm_media_limits *lim, mm_error *err);
void mm_input_close(mm_input *in);

/* Opens a decoder for stream `index`; threads 0 = automatic. The codec must
 * be on the allowlist. max_pixels bounds any frame it may produce. strict:
 * damaged JPEG/PNG data is an error rather than concealed (used for still
 * images, where a cut-off JPEG would otherwise decode to a half-grey
 * picture). */
int mm_input_open_decoder(mm_input *in, int index, int threads, int64_t max_pixels, int strict,
                          AVCodecContext **out, mm_error *err);

/* Reads the next packet of stream `index` (others are skipped): 1 = packet,
 * 0 = end of file, -1 = error (damaged or truncated file, or timeout). */
int mm_input_read(mm_input *in, int index, AVPacket *pkt, mm_error *err);

/* The first video stream that is not cover art, or -1. */
int mm_input_video_stream(const mm_input *in);
/* The first audio stream, or -1. */
int mm_input_audio_stream(const mm_input *in);

/* Clockwise rotation, in quarter turns (0..3), that shows a video stream
 * upright, from its display matrix (as ffmpeg's autorotate does). */
int mm_input_stream_turns(const mm_input *in, int index);

/* Decodes the first picture of stream `index` into frame (strict as in
 * mm_input_open_decoder). Reads packets from the current position. */
int mm_input_first_picture(mm_input *in, int index, int64_t max_pixels, int strict, AVFrame *frame, mm_error *err);

/* Fills the container/codec/size/duration fields of info and classifies the
 * input as image, video or audio against the allowlists and limits. Does not
 * decode anything. */
int mm_input_classify(mm_input *in, const mm_media_limits *lim, mm_media_info *info, mm_error *err);

/* EXIF orientation 1..8 of a decoded still (its "Orientation" tag, else its
 * display matrix); 1 when it has none. */
int mm_frame_orientation(const AVFrame *f);
/* The EXIF orientation that turns a picture `turns` quarter turns clockwise. */
int mm_orientation_from_turns(int turns);
/* Applies an EXIF orientation to packed RGB24 (stride 3*w): a new buffer
 * (malloc) in *dst with its size in *dw x *dh. Orientation 1 copies. */
int mm_rgb_orient(const uint8_t *src, int w, int h, int orientation, uint8_t **dst, int *dw, int *dh, mm_error *err);

#endif
