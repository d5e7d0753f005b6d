/* The packed sequence of one DiT forward: which row is what, where it sits on
 * the rotary clock, and which timestep it is conditioned on.
 *
 *   t2va / fl2va : [ text (L) | keyframe rows | target audio | target video ]
 *   ref2va       : [ text (L) | reference blocks in request order | target audio | target video ]
 *
 * A video reference's soundtrack rows come immediately before its own video
 * rows. Positions are built in float64 exactly as the reference does (see
 * docs/DIT.md "Packing"), because the text length shifts every media position
 * and the conformance kits check them bit for bit.
 *
 * Ownership: mm_dit_layout_build() allocates every array of the layout;
 * mm_dit_layout_free() releases them.
 */
#ifndef MMH3_MODEL_DIT_LAYOUT_H
#define MMH3_MODEL_DIT_LAYOUT_H

#include <stdint.h>

#include "core/error.h"

/* Modality tags: they index the AdaLN table, so the values are a checkpoint contract. */
enum { MM_DIT_TAG_VIDEO = 0, MM_DIT_TAG_TEXT = 1, MM_DIT_TAG_AUDIO = 2 };

/* What a row is, for its timestep (dit.md §5.4). */
typedef enum mm_dit_row_role {
    MM_DIT_ROW_TEXT = 0,      /* t_v (vision-pad rows included) */
    MM_DIT_ROW_VIDEO,         /* target video: t_v */
    MM_DIT_ROW_AUDIO,         /* target audio: t_a */
    MM_DIT_ROW_COND_VIDEO,    /* keyframe / reference video rows: max(t_v, condition_t) */
    MM_DIT_ROW_REF_AUDIO,     /* reference soundtracks and audio clips: 1 (clean) */
} mm_dit_row_role;

typedef enum mm_dit_anchor { MM_DIT_ANCHOR_FIRST = 0, MM_DIT_ANCHOR_LAST } mm_dit_anchor;

typedef enum mm_dit_ref_kind { MM_DIT_REF_IMAGE = 0, MM_DIT_REF_VIDEO, MM_DIT_REF_AUDIO } mm_dit_ref_kind;

/* One ref2va reference block. Images: latent_frames = 1, no audio. Videos:
 * latent_frames, their own latent canvas, and audio_latents soundtrack
 * latents per channel (0 = silent). Audio clips: audio_latents only. */
typedef struct mm_dit_ref {
    mm_dit_ref_kind kind;
    int latent_frames;
    int latent_height, latent_width;
    int audio_latents;
} mm_dit_ref;

/* The target clip and the packing constants of the checkpoint. */
typedef struct mm_dit_geometry {
    int latent_frames, latent_height, latent_width; /* T, Hl, Wl (latent grid, before patching) */
    int audio_latents;                              /* A per channel */
    int patch_t, patch_h, patch_w;                  /* (1, 2, 2) for H3 */
    int audio_channels;                             /* 2 (stereo rows, channel-major) */
} mm_dit_geometry;

typedef struct mm_dit_layout_request {
    const int8_t *text_tags; /* [text_rows]: 1 text, 0 vision-block rows (from the prompt presentation) */
    int text_rows;
    mm_dit_geometry target;
    const mm_dit_anchor *anchors; /* fl2va keyframes, packed order (or NULL) */
    int n_anchors;
    const mm_dit_ref *refs; /* ref2va references, request order (or NULL) */
    int n_refs;
} mm_dit_layout_request;

typedef struct mm_dit_layout {
    int64_t rows;                   /* S */
    int64_t text_rows;              /* L */
    int64_t video_rows, audio_rows; /* all video / audio rows, condition rows included */
    int64_t cond_video_rows, cond_audio_rows;
    double *positions;      /* [S][3] (t, h, w), float64 */
    int8_t *tags;           /* [S] */
    uint8_t *roles;         /* [S] mm_dit_row_role */
    int64_t *video_index;   /* [video_rows] packed row of each video row, condition rows first */
    int64_t *audio_index;   /* [audio_rows] same for audio, reference rows first */
    int64_t *text_index;    /* [L] */
} mm_dit_layout;

int mm_dit_layout_build(const mm_dit_layout_request *req, mm_dit_layout *out, mm_error *err);
void mm_dit_layout_free(mm_dit_layout *l);

/* Rows one latent frame patches into. */
static inline int64_t mm_dit_rows_per_frame(int latent_height, int latent_width, int patch_h, int patch_w)
{
    return (int64_t)(latent_height / patch_h) * (latent_width / patch_w);
}

/* Per-row timesteps (fp32) for one forward: t_v, t_a and the pin of the
 * condition video rows (0.999; they ride at max(t_v, pin)). */
void mm_dit_row_timesteps(const mm_dit_layout *l, float t_video, float t_audio, float condition_t, float *row_t);

/* Sorted distinct values of row_t[0..n) into unique[] (at most max_unique),
 * and each row's index into it. Returns the count M, or -1 when there are
 * more than max_unique distinct values. */
int mm_dit_unique_timesteps(const float *row_t, int64_t n, float *unique, int max_unique, int32_t *row_index);

/* Rotary building blocks, exposed for tests. */
/* Coordinates of the n = dim/patch rows of one spatial axis on the
 * area-normalized grid (numpy linspace(endpoint=False) semantics, ×32). */
void mm_dit_spatial_grid(int dim, int patch, double sqrt_area, double *out);
/* Rotary time of latent frame k of a block starting at origin (sequential float64 sum). */
void mm_dit_temporal_grid(int latent_frames, double origin, double *out);
/* Σ_{k<T} (5/3)·pat(k) as the reference evaluates the keyframe anchor (numpy pairwise sum). */
double mm_dit_temporal_span_pairwise(int latent_frames);
/* The same sum, sequential (the ref2va clock). */
double mm_dit_temporal_span_sequential(int latent_frames);

#endif
