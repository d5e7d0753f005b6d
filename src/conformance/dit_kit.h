/* The DiT conformance kit (manifest "kit": "minimax-h3-dit-conformance"):
 * layout reconstruction from a case's metadata, shared by the kit runner and
 * the unit tests. */
#ifndef MMH3_CONFORMANCE_DIT_KIT_H
#define MMH3_CONFORMANCE_DIT_KIT_H

#include <jansson.h>

#include "conformance/conformance.h"
#include "model/dit/layout.h"

/* Everything a case (or sampler run) says about its packed sequence. Fields
 * a sampler entry lacks fall back to the manifest's "config". */
typedef struct mm_dit_kit_case {
    char name[128];
    char task[16];
    mm_dit_layout_request req; /* arrays below are owned by this struct */
    int8_t *text_tags;
    mm_dit_anchor anchors[8];
    mm_dit_ref refs[32];
    int vision_rows;       /* text rows tagged 0 */
    double t_video, t_audio, condition_t;
    int64_t sequence_length;
} mm_dit_kit_case;

/* Reads a case entry (manifest "cases"[i] or "sampler"[i]) into *out,
 * rebuilding the text presentation's tags with the kit's convention: per
 * conditioning block in packed order a text label (tag 1) followed by its
 * vision block (the block's video rows + vision_start/vision_end, tag 0),
 * then the prompt (tag 1). */
int mm_dit_kit_case_read(const json_t *manifest, const json_t *entry, mm_dit_kit_case *out, mm_error *err);
void mm_dit_kit_case_free(mm_dit_kit_case *c);

/* Compares a built layout with the kit's stored inputs "<prefix>.in.*"
 * (token_tags, position_ids bit for bit, the three index maps) and, when
 * row_t is given, in.row_timesteps and meta.{unique_timesteps,
 * timestep_index, adaln_index} (whichever the kit stores). Returns 1 when
 * everything matches, 0 with the first difference described in why. */
int mm_dit_kit_check_layout(const mm_safetensors *st, const char *prefix, const mm_dit_layout *l, const float *row_t,
                            char *why, size_t why_len, mm_error *err);

#endif
