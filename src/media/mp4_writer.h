/* mp4 output with the FFmpeg libraries: H.264 (libx264, yuv420p, CRF +
 * preset) at an exact constant frame rate, plus optional AAC stereo audio,
 * muxed so the last video frame is never dropped. Frames stream in; nothing
 * is buffered to disk besides the output itself.
 *
 * The file is written to "<path>.part" and renamed to <path> by
 * mm_mp4_writer_close(), so a reader never sees a half-written mp4.
 */
#ifndef MMH3_MEDIA_MP4_WRITER_H
#define MMH3_MEDIA_MP4_WRITER_H

#include <stdint.h>

#include "core/error.h"

typedef struct mm_mp4_options {
    int width, height;  /* even, > 0 */
    int fps;            /* frames per second (24 for H3) */
    int crf;            /* 0..51 */
    const char *preset; /* "ultrafast" ... "veryslow" */
    int audio_channels; /* 0 = silent output (no audio stream), 1 or 2 */
    int audio_rate;     /* samples per second, e.g. 32000 */
    /* The clip's length when known up front (0 = not known): the moov atom's
     * room is then reserved in front of mdat, so closing writes the index in
     * place instead of rewriting the whole file to move it there (faststart
     * either way). The writer refuses a frame beyond this count. */
    int64_t expected_frames;
} mm_mp4_options;

typedef struct mm_mp4_writer mm_mp4_writer;

int mm_mp4_writer_open(mm_mp4_writer **out, const char *path, const mm_mp4_options *opt, mm_error *err);
/* One frame of packed RGB24, `stride` bytes per row. */
int mm_mp4_write_rgb(mm_mp4_writer *w, const uint8_t *rgb, int stride, mm_error *err);
/* `n` samples per channel, interleaved float in [-1, 1]. */
int mm_mp4_write_audio(mm_mp4_writer *w, const float *interleaved, int n, mm_error *err);
/* Flushes, writes the trailer, renames into place, frees w (also on error). */
int mm_mp4_writer_close(mm_mp4_writer *w, mm_error *err);
/* Abandons the file: removes the partial output and frees w. */
void mm_mp4_writer_abort(mm_mp4_writer *w);

/* Additions (media owner). H3's output settings: 24 fps, CRF 18, preset
 * "medium", AAC stereo at 32 kHz. */
void mm_mp4_options_defaults(mm_mp4_options *opt, int width, int height);
/* The same as mm_mp4_write_audio for planar input: channels[c][i], one
 * pointer per channel (the audio VAE's [2, L] rows). */
int mm_mp4_write_audio_planar(mm_mp4_writer *w, const float *const *channels, int n, mm_error *err);
/* Ends the video stream: the encoder's delayed frames (x264's lookahead) are
 * encoded now, so a caller can drain them while it still computes the audio;
 * no frame may follow. mm_mp4_writer_close does it when nobody did. */
int mm_mp4_writer_finish_video(mm_mp4_writer *w, mm_error *err);
/* Video frames accepted so far. */
int64_t mm_mp4_writer_frames(const mm_mp4_writer *w);

/* Behaviour worth knowing (see docs/MEDIA.md):
 * - audio may be written before, between or after the frames; at close it is
 *   cut or padded with silence to round(frames * rate / fps) samples, so both
 *   streams end together;
 * - samples are clamped to [-1, 1] (NaN becomes 0);
 * - after a failed write, close() removes the partial file and fails;
 * - close() with no frames written fails and leaves nothing behind. */

#endif
