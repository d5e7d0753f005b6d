/* Fast structural checks of the five weight files, from their headers only
 * (no weight bytes are read, apart from the few-byte comfy_quant markers):
 * every tensor the model needs is present with the right dtype and a shape
 * consistent with the sizes the file itself implies (hidden width, heads,
 * layers, ...), and known wrong variants are named (the bf16 or fp8 exports,
 * the non-pruned DiT, the diffusers layout, un-folded weight norm).
 * `mmh3 check` runs these; loaders may run them first to fail in
 * milliseconds instead of after a slow load. */
#ifndef MMH3_IO_INSPECT_H
#define MMH3_IO_INSPECT_H

#include "io/checkpoint.h"
#include "io/safetensors.h"

typedef struct mm_inspect_report {
    char summary[512];   /* "50 blocks, hidden 5376, 56x128 heads, ffn 14336, ..." */
    size_t tensors;
    uint64_t bytes;      /* the file's size */
    int64_t dims[8];     /* component-specific sizes (see inspect.c) */
} mm_inspect_report;

/* 0 when st has the layout component c needs; -1 with a message naming the
 * first problem (and the variant when one is recognised). st may have had
 * the "model.diffusion_model." prefix stripped. */
int mm_inspect(mm_component c, const mm_safetensors *st, mm_inspect_report *r, mm_error *err);

#endif
