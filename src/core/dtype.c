#include "core/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    int bits;
    int is_float;
} dtype_info[MM_DTYPE_COUNT] = {
    [MM_F32] = {"F32", 32, 1},       [MM_F16] = {"F16", 16, 1},
    [MM_BF16] = {"BF16", 16, 1},     [MM_F64] = {"F64", 64, 1},
    [MM_I8] = {"I8", 8, 0},          [MM_U8] = {"U8", 8, 0},
    [MM_I16] = {"I16", 16, 0},       [MM_I32] = {"I32", 32, 0},
    [MM_I64] = {"I64", 64, 0},       [MM_BOOL] = {"BOOL", 8, 0},
    [MM_F8_E4M3] = {"F8_E4M3", 8, 1}, [MM_F8_E5M2] = {"F8_E5M2", 8, 1},
    [MM_F4_E2M1] = {"F4_E2M1", 4, 1},
};

int mm_dtype_bits(mm_dtype t) { return (unsigned)t < MM_DTYPE_COUNT ? dtype_info[t].bits : 0; }
int mm_dtype_is_float(mm_dtype t) { return (unsigned)t < MM_DTYPE_COUNT && dtype_info[t].is_float; }

size_t mm_dtype_nbytes(mm_dtype t, int64_t n)
{
    return (size_t)(((int64_t)mm_dtype_bits(t) * n + 7) / 8);
}

const char *mm_dtype_name(mm_dtype t)
{
    return (unsigned)t < MM_DTYPE_COUNT ? dtype_info[t].name : "?";
}

int mm_dtype_from_name(const char *name, mm_dtype *out)
{
    for (int i = 0; i < MM_DTYPE_COUNT; i++) {
        if (strcmp(dtype_info[i].name, name) == 0) {
            *out = (mm_dtype)i;
            return 0;
        }
    }
    return -1;
}

float mm_bf16_to_f32(uint16_t h) { return mm_f32_from_bits((uint32_t)h << 16); }

uint16_t mm_f32_to_bf16(float f)
{
    uint32_t u = mm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and a NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float mm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: value = man * 2^-24 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return mm_f32_from_bits(sign | 0x7f800000u | (man << 13));
    return mm_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t mm_f32_to_f16(float f)
{
    uint32_t u = mm_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)
        return sign | 0x7e00u;
    if (absu >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return sign | 0x7c00u;
    if (absu < 0x38800000u) {
        /* subnormal in f16 (or zero): round abs/2^-24 to nearest even integer */
        float a = mm_f32_from_bits(absu);
        float q = a * 0x1p24f;
        float r = nearbyintf(q); /* default rounding mode is nearest-even */
        return sign | (uint16_t)r;
    }
    uint32_t exp = ((absu >> 23) - 112u) << 10;
    uint32_t man = (absu >> 13) & 0x3ffu;
    uint32_t rest = absu & 0x1fffu;
    uint32_t h = exp | man;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h += 1;
    return sign | (uint16_t)h;
}

float mm_e4m3_to_f32(uint8_t v)
{
    int sign = v & 0x80;
    int exp = (v >> 3) & 0xf;
    int man = v & 0x7;
    float r;
    if (exp == 0xf && man == 0x7)
        return NAN;
    if (exp == 0)
        r = ldexpf((float)man, -9); /* subnormal: man/8 * 2^-6 */
    else
        r = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -r : r;
}

uint8_t mm_f32_to_e4m3(float f)
{
    if (isnan(f))
        return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 464.0f) /* saturate: the fn variant has no infinity (448 is the largest) */
        return sign | 0x7e;
    if (a < 0x1p-6f) /* subnormal: units of 2^-9; 8 units is the smallest normal, code 0x08 */
        return sign | (uint8_t)nearbyintf(a * 0x1p9f);
    int e;
    frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    e -= 1;        /* a = 1.f 2^e */
    float man = nearbyintf((ldexpf(a, -e) - 1.0f) * 8.0f); /* exact scaling, RNE on 3 bits */
    if (man == 8.0f) {
        man = 0.0f;
        e++;
    }
    return sign | (uint8_t)(((e + 7) << 3) | (int)man);
}

float mm_e2m1_to_f32(uint8_t nibble)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float m = mag[nibble & 7];
    return (nibble & 8) ? -m : m;
}

uint8_t mm_f32_to_e2m1(float f)
{
    /* nearest of {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even code, saturating */
    uint8_t sign = signbit(f) ? 8 : 0;
    float a = fabsf(f);
    uint8_t c = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
              : a <= 2.5f  ? 4 : a < 3.5f  ? 5 : a <= 5.0f  ? 6 : 7;
    if (isnan(f))
        c = 7;
    return sign | c;
}
