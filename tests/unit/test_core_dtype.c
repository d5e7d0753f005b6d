/* dtype conversions and tensor views. */
#include <math.h>

#include "core/dtype.h"
#include "core/tensor.h"
#include "test.h"

static void test_bf16_round_to_nearest_even(void)
{
    MM_EXPECT(mm_f32_to_bf16(1.0f) == 0x3f80, "1.0");
    /* 1 + 2^-8 is exactly half-way between bf16 1.0 and 1.0078125: ties to even (1.0). */
    MM_EXPECT(mm_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "tie down got %04x", mm_f32_to_bf16(1.0f + 0x1p-8f));
    MM_EXPECT(mm_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82, "tie up");
    MM_EXPECT(isnan(mm_bf16_to_f32(mm_f32_to_bf16(NAN))), "NaN stays NaN");
}

static void test_f16_roundtrip_and_overflow(void)
{
    for (int i = 0; i < 0x7c00; i += 7) {
        float f = mm_f16_to_f32((uint16_t)i);
        MM_REQUIRE(mm_f32_to_f16(f) == (uint16_t)i, "code %04x -> %g -> %04x", i, f, mm_f32_to_f16(f));
    }
    MM_EXPECT(mm_f32_to_f16(65504.0f) == 0x7bff, "max");
    MM_EXPECT(mm_f32_to_f16(70000.0f) == 0x7c00, "overflow to inf");
    MM_EXPECT(mm_f16_to_f32(0x0001) == 0x1p-24f, "smallest subnormal");
}

static void test_e4m3_and_e2m1(void)
{
    MM_EXPECT(mm_e4m3_to_f32(0x7e) == 448.0f, "max e4m3 %g", mm_e4m3_to_f32(0x7e));
    MM_EXPECT(mm_e4m3_to_f32(0x38) == 1.0f, "one");
    MM_EXPECT(mm_e4m3_to_f32(0x01) == 0x1p-9f, "min subnormal");
    for (int c = 0; c < 0x7f; c++)
        MM_REQUIRE(mm_f32_to_e4m3(mm_e4m3_to_f32((uint8_t)c)) == c, "e4m3 roundtrip %02x", c);
    MM_EXPECT(mm_e2m1_to_f32(0x7) == 6.0f && mm_e2m1_to_f32(0xf) == -6.0f, "e2m1 extremes");
    for (int c = 0; c < 16; c++)
        if (c != 8)
            MM_REQUIRE(mm_f32_to_e2m1(mm_e2m1_to_f32((uint8_t)c)) == c, "e2m1 roundtrip %x", c);
}

/* The nearest-code search the fast conversions must agree with. */
static uint8_t e4m3_brute(float f)
{
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 464.0f)
        return sign | 0x7e;
    uint8_t best = 0;
    float best_err = INFINITY;
    for (uint8_t c = 0; c <= 0x7e; c++) {
        float e = fabsf(mm_e4m3_to_f32(c) - a);
        if (e < best_err || (e == best_err && (c & 1) == 0 && (best & 1))) {
            best_err = e;
            best = c;
        }
    }
    return sign | best;
}

static uint8_t e2m1_brute(float f)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    uint8_t sign = signbit(f) ? 8 : 0, best = 0;
    float a = fabsf(f), best_err = INFINITY;
    for (uint8_t c = 0; c < 8; c++) {
        float e = fabsf(mag[c] - a);
        if (e < best_err || (e == best_err && (c & 1) == 0)) {
            best_err = e;
            best = c;
        }
    }
    return sign | best;
}

static void test_fp8_fp4_rounding_matches_nearest_search(void)
{
    uint32_t s = 12345;
    int bad8 = 0, bad4 = 0;
    for (int i = 0; i < 400000; i++) {
        s = s * 1664525u + 1013904223u;
        /* log-uniform magnitudes 2^-12 .. 2^10, plus exact midpoints between codes */
        float v = ldexpf(1.0f + (float)(s >> 8) * 0x1p-24f, (int)(s % 23) - 12);
        if (i % 4 == 1) {
            uint8_t c = (uint8_t)(s % 0x7e);
            v = 0.5f * (mm_e4m3_to_f32(c) + mm_e4m3_to_f32((uint8_t)(c + 1)));
        }
        if (s & 0x80000000u)
            v = -v;
        bad8 += mm_f32_to_e4m3(v) != e4m3_brute(v);
        float w = v * 0x1p-4f;
        if (i % 4 == 2)
            w = (float)(s % 13) * 0.25f; /* includes the e2m1 midpoints */
        bad4 += mm_f32_to_e2m1(w) != e2m1_brute(w);
    }
    MM_EXPECT(bad8 == 0, "%d e4m3 mismatches", bad8);
    MM_EXPECT(bad4 == 0, "%d e2m1 mismatches", bad4);
    MM_EXPECT(mm_f32_to_e4m3(500.0f) == 0x7e && mm_f32_to_e4m3(-1e9f) == 0xfe, "saturation");
    MM_EXPECT(mm_f32_to_e4m3(0x1p-10f) == 0 && mm_f32_to_e4m3(0x1p-9f) == 1, "smallest subnormal boundary");
}

static void test_tensor_views(void)
{
    mm_error err = {0};
    mm_tensor t;
    MM_REQUIRE(mm_tensor_zeros(&t, mm_cpu(), MM_F32, 2, MM_SHAPE(3, 4), &err) == 0, "%s", err.msg);
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 4; j++)
            mm_tensor_set(&t, MM_SHAPE(i, j), (double)(i * 10 + j));
    mm_tensor col = mm_tensor_narrow(&t, 1, 1, 2);
    MM_EXPECT(mm_tensor_get(&col, MM_SHAPE(2, 1)) == 22.0, "narrow");
    MM_EXPECT(!mm_tensor_is_contiguous(&col), "narrowed columns are strided");
    mm_tensor tr = mm_tensor_transpose(&t, 0, 1);
    MM_EXPECT(mm_tensor_get(&tr, MM_SHAPE(3, 1)) == 13.0, "transpose");
    mm_tensor r;
    MM_EXPECT(mm_tensor_reshape(&r, &t, 1, MM_SHAPE(12), &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_tensor_reshape(&r, &col, 1, MM_SHAPE(6), &err) == -1, "reshape of a strided view fails");
    MM_EXPECT(mm_tensor_reshape(&r, &t, 1, MM_SHAPE(13), &err) == -1 && strstr(err.msg, "[3, 4]"), "%s", err.msg);
    mm_tensor_free(&t);
}

int main(void)
{
    MM_RUN(test_bf16_round_to_nearest_even);
    MM_RUN(test_f16_roundtrip_and_overflow);
    MM_RUN(test_e4m3_and_e2m1);
    MM_RUN(test_fp8_fp4_rounding_matches_nearest_search);
    MM_RUN(test_tensor_views);
    return mm_test_exit();
}
