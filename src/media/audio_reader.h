/* Reading audio — an audio file, or the soundtrack of a video — as float
 * stereo at the audio VAE's rate (vae.md §3.7):
 *   - decoded with the FFmpeg libraries, converted to float (swresample,
 *     format only);
 *   - mono is duplicated to stereo; of more channels the first two are kept
 *     (as ai-toolkit does);
 *   - cut to max_seconds at the source rate (floor(max_seconds * rate)
 *     samples), then resampled with torchaudio's windowed sinc
 *     (media/resample.h) to ceil(n * 32000 / rate) samples.
 * Same fences as mm_media_probe(): local file, allowlists, limits, budget.
 */
#ifndef MMH3_MEDIA_AUDIO_READER_H
#define MMH3_MEDIA_AUDIO_READER_H

#include <stdint.h>

#include "core/error.h"
#include "media/probe.h"

typedef struct mm_audio_options {
    int rate;                      /* output rate; 0 = 32000 */
    double max_seconds;            /* keep at most this much (0 = all) */
    const mm_media_limits *limits; /* NULL = defaults */
} mm_audio_options;

/* Planar, channel-major: samples[0..frames) is the left channel,
 * samples[frames..2*frames) the right — the [2, L] layout the audio VAE
 * takes (two batch items). Owns samples. */
typedef struct mm_audio {
    float *samples;
    int64_t frames; /* samples per channel */
    int rate;
    int channels; /* always 2 */
    int source_rate, source_channels;
} mm_audio;

int mm_audio_read(const char *path, const mm_audio_options *opt, mm_audio *out, mm_error *err);
void mm_audio_free(mm_audio *a);

#endif
