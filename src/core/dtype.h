/* Element types, their safetensors names, and scalar conversions.
 *
 * Conversions to narrower floats round to nearest, ties to even (what
 * PyTorch's .to() does), and keep NaN a NaN. fp8 e4m3 is the "fn" variant
 * (no infinities, max 448) as used by the nvfp4 block scales.
 */
#ifndef MMH3_CORE_DTYPE_H
#define MMH3_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum mm_dtype {
    MM_F32 = 0,
    MM_F16,
    MM_BF16,
    MM_F64,
    MM_I8,
    MM_U8,
    MM_I16,
    MM_I32,
    MM_I64,
    MM_BOOL,
    MM_F8_E4M3,
    MM_F8_E5M2,
    MM_F4_E2M1, /* packed, two elements per byte */
    MM_DTYPE_COUNT
} mm_dtype;

/* Bits per element (4 for MM_F4_E2M1). */
int mm_dtype_bits(mm_dtype t);
/* Bytes for n elements, rounding packed types up to whole bytes. */
size_t mm_dtype_nbytes(mm_dtype t, int64_t n);
/* The safetensors spelling ("F32", "BF16", "F8_E4M3", ...). */
const char *mm_dtype_name(mm_dtype t);
/* Parses a safetensors dtype string; returns -1 for an unknown name. */
int mm_dtype_from_name(const char *name, mm_dtype *out);
int mm_dtype_is_float(mm_dtype t);

float mm_bf16_to_f32(uint16_t h);
uint16_t mm_f32_to_bf16(float f);
float mm_f16_to_f32(uint16_t h);
uint16_t mm_f32_to_f16(float f);
float mm_e4m3_to_f32(uint8_t v);
uint8_t mm_f32_to_e4m3(float f);
/* e2m1 nibble (low 4 bits of v) to float: {0, .5, 1, 1.5, 2, 3, 4, 6} with sign. */
float mm_e2m1_to_f32(uint8_t nibble);
uint8_t mm_f32_to_e2m1(float f);

/* Rounds a float through bf16 / f16 and back (the value a bf16 tensor would hold). */
static inline float mm_round_bf16(float f) { return mm_bf16_to_f32(mm_f32_to_bf16(f)); }
static inline float mm_round_f16(float f) { return mm_f16_to_f32(mm_f32_to_f16(f)); }

/* The bits of an f32 and back (memcpy: the pun strict aliasing allows). */
static inline uint32_t mm_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mm_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
