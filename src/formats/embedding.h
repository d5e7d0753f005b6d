/* Token embeddings in the stored formats: a dense float table, or the int8
 * table with one f32 scale per row (`<p>.weight` I8 [V, H],
 * `<p>.weight_scale` F32 [V, 1], `<p>.comfy_quant` {"format":
 * "int8_tensorwise"} without convrot; text-encoder spec 6.6). Rows are
 * gathered and dequantized on the fly: out[r] = round(f32(q[id]) * s[id]). */
#ifndef MMH3_FORMATS_EMBEDDING_H
#define MMH3_FORMATS_EMBEDDING_H

#include "backend/ops.h"
#include "io/safetensors.h"

typedef struct mm_embedding {
    bool quantized;
    int64_t vocab, dim;
    mm_tensor weight; /* I8 [V, H] or float [V, H] */
    mm_tensor scale;  /* F32 [V] when quantized */
    char name[160];
} mm_embedding;

/* Views into st's mapping (st must outlive it). */
int mm_embedding_load(mm_embedding *e, const mm_safetensors *st, const char *prefix, mm_error *err);
void mm_embedding_free(mm_embedding *e);
/* out [R, H] (any float dtype) = rows ids (I32 [R], on the ctx device). */
int mm_embedding_forward(mm_ctx *ctx, mm_tensor *out, const mm_tensor *ids, const mm_embedding *e);

#endif
