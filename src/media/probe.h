/* Media probing and upload validation with the FFmpeg libraries.
 *
 * mm_media_probe() answers "is this an image, a video or an audio clip we
 * accept, and what is it?" for an untrusted file, without ever crashing or
 * reaching beyond the file itself:
 *   - local files only (no network protocols), an allowlist of containers and
 *     codecs (no playlists, no exotic decoders), a wall-clock budget;
 *   - limits on file size, width, height, pixels, aspect ratio and duration;
 *   - the file must actually decode: the first frame of an image or video,
 *     some audio of an audio clip or soundtrack, and every packet of a
 *     video/audio must demux (a truncated file fails);
 *   - on failure the error says what was wrong and what is accepted.
 *
 * Accepted (docs/MEDIA.md has the table):
 *   images  PNG, JPEG, WebP, BMP, GIF (first frame), TIFF
 *   videos  MP4/MOV, WebM/Matroska with H.264, HEVC, VP8, VP9, AV1, MPEG-4
 *           video, with or without one of the audio codecs below
 *   audio   WAV (PCM), MP3, FLAC, Ogg (Vorbis, Opus), AAC (ADTS, M4A), ALAC
 */
#ifndef MMH3_MEDIA_PROBE_H
#define MMH3_MEDIA_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum mm_media_kind {
    MM_MEDIA_UNKNOWN = 0,
    MM_MEDIA_IMAGE,
    MM_MEDIA_VIDEO,
    MM_MEDIA_AUDIO,
} mm_media_kind;

/* "image", "video", "audio" or "unknown". */
const char *mm_media_kind_name(mm_media_kind k);

typedef struct mm_media_limits {
    int64_t max_bytes;        /* file size */
    int max_side;             /* width and height, images and videos */
    int64_t max_image_pixels; /* width * height of an image */
    int64_t max_decoded_bytes; /* one decoded picture in memory: pixels * bytes per pixel */
    int64_t max_video_pixels; /* width * height of a video frame */
    double max_aspect;        /* long side / short side */
    double max_seconds;       /* duration of a video or audio clip */
    double timeout_seconds;   /* wall-clock budget of one probe or open */
} mm_media_limits;

/* 512 MiB; 8192 px per side; images up to 8192x4096 (33.6 MP) and 128 MiB
 * decoded — the largest picture the engine uses (a reference at
 * --ref-short-edge's top, 4096, capped at 8192 per side), so a larger or
 * deeper one (16 bits per channel) costs memory for nothing and is refused
 * from its header; 4096x2304 video frames; aspect 200 (the vision
 * processor's limit); 10 minutes; 30 s budget. */
void mm_media_limits_defaults(mm_media_limits *lim);
/* A copy of *lim, or the defaults when lim is NULL (what the readers'
 * lim NULL means). */
mm_media_limits mm_media_limits_or_defaults(const mm_media_limits *lim);

typedef struct mm_media_info {
    mm_media_kind kind;
    char format_name[16]; /* "png", "jpeg", "webp", "bmp", "gif", "tiff", "mp4", "mov", "webm", "mkv",
                             "wav", "mp3", "flac", "ogg", "aac", "m4a" */
    char mime_type[24];   /* "image/png", "video/mp4", "audio/mpeg", ... (serve with this, never sniff) */
    char extension[8];    /* "png", "jpg", "mp4", ... for a generated file name */
    char video_codec[16]; /* "h264", "png", "mjpeg", ... ("" for audio) */
    char audio_codec[16]; /* "aac", "mp3", "opus", ... ("" when there is no audio) */
    int width, height;    /* display size, rotation applied (images and videos) */
    int rotation;         /* degrees clockwise applied for display: 0, 90, 180, 270 */
    double duration_seconds; /* videos and audio; 0 for images */
    double fps;           /* videos: average frame rate */
    int64_t frames;       /* videos: frames in the file (packets counted by the probe) */
    int has_audio;        /* a video with a soundtrack, or an audio clip */
    int audio_rate, audio_channels;
    int64_t bytes;        /* file size */
} mm_media_info;

/* Probes an untrusted file. lim NULL = defaults. out is filled on success. */
int mm_media_probe(const char *path, const mm_media_limits *lim, mm_media_info *out, mm_error *err);
/* The same for bytes in memory (nothing is read from anywhere else). */
int mm_media_probe_buffer(const uint8_t *data, size_t size, const mm_media_limits *lim, mm_media_info *out,
                          mm_error *err);

/* Checks that this FFmpeg build has what mmh3 uses: the libx264, aac, png,
 * mjpeg and libwebp encoders and the decoders for H.264, PNG, JPEG and AAC.
 * For `mmh3 check` and /api/status; the message lists what is missing. */
int mm_media_check(mm_error *err);

/* Sets FFmpeg's log level for programs that use the media code: quiet
 * (errors only) unless verbose; silent when verbose < 0 (while probing
 * a user's file, whose every problem our own message already names).
 * FFmpeg logs to stderr; libx264 prints its statistics at the default level. */
void mm_media_set_verbose(int verbose);

#endif
