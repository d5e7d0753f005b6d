/* The DiT's hyper-parameters, read from the checkpoint's tensor shapes.
 *
 * Nothing here is a model constant: hidden size, heads, head size, FFN width,
 * the number of blocks and refiner blocks, text width, patch-row widths, the
 * AdaLN table and the rotary frequencies all come from the file, so the tiny
 * conformance DiT and the 33B release load through the same code. What the
 * file cannot say (norm epsilons, the patch shape, the modality count of the
 * AdaLN rows) has the release's value as a default that a caller (e.g. a
 * conformance manifest) may override, and is checked against the shapes.
 */
#ifndef MMH3_MODEL_DIT_CONFIG_H
#define MMH3_MODEL_DIT_CONFIG_H

#include "core/error.h"
#include "io/safetensors.h"

typedef struct mm_dit_config {
    int hidden;          /* H */
    int heads;           /* NH (q, k and v alike) */
    int head_dim;        /* D */
    int ffn;             /* F: fc1 is [2F, H] = [gate; up] */
    int layers;          /* main blocks */
    int refiner_layers;  /* token refiner blocks */
    int text_dim;        /* condition_proj input width */
    int video_row_width; /* latent channels x patch volume (96) */
    int audio_row_width; /* audio latent channels (32) */
    int latent_channels; /* video latent channels (24) */
    int patch[3];        /* (t, h, w) */
    int time_dim;        /* adaln_t_table columns (8) */
    int table_size;      /* adaln_t_table rows (1025) */
    int rope_freqs;      /* rope.inv_freq length per axis (16) */
    int rope_dim;        /* rotated channels per head: 3 axes x 2 x rope_freqs (96) */
    int modalities;      /* AdaLN modality rows per timestep (3: video, text, audio) */
    int convrot_group;   /* ConvRot rotation group of the block linears (0 if none), set at load */
    float norm_eps, qk_norm_eps, final_norm_eps;
} mm_dit_config;

/* What a caller may set before reading (0 = the release's value). */
typedef struct mm_dit_config_overrides {
    int patch[3];
    float norm_eps, qk_norm_eps, final_norm_eps;
} mm_dit_config_overrides;

/* Reads the configuration from an opened checkpoint (names already stripped
 * of any "model.diffusion_model." prefix) and checks the dtype and shape of
 * every tensor besides the linears (the formats layer checks those as the
 * weights load). */
int mm_dit_config_read(const mm_safetensors *st, const mm_dit_config_overrides *ov, mm_dit_config *out,
                       mm_error *err);

#endif
