/* Pillow's LANCZOS, bit for bit: our resize against outputs Pillow produced
 * (tests/data/media/pil_lanczos.bin, see its NOTE.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "media/resize.h"
#include "test.h"

static uint8_t *lcg_image(int w, int h, uint32_t seed)
{
    uint8_t *b = malloc((size_t)w * h * 3);
    uint32_t s = seed;
    for (size_t i = 0; i < (size_t)w * h * 3; i++) {
        s = (s * 1103515245u + 12345u) & 0x7fffffffu;
        b[i] = (uint8_t)((s >> 16) & 255);
    }
    return b;
}

static uint8_t *ramp_image(int w, int h)
{
    uint8_t *b = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = b + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 255 / (w > 1 ? w - 1 : 1));
            p[1] = (uint8_t)(y * 255 / (h > 1 ? h - 1 : 1));
            p[2] = (uint8_t)(((x + y) * 7) & 255);
        }
    return b;
}

static uint8_t *load(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc((size_t)len);
    *n = fread(d, 1, (size_t)len, f);
    fclose(f);
    return d;
}

static uint32_t u32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void test_resize_matches_pillow_lanczos(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/media/pil_lanczos.bin", mm_test_data_dir());
    size_t n = 0;
    uint8_t *d = load(path, &n);
    MM_REQUIRE(d && n > 8 && !memcmp(d, "MMPL", 4), "cannot read %s", path);
    uint32_t cases = u32(d + 4);
    size_t at = 8;
    int checked = 0;
    for (uint32_t c = 0; c < cases; c++) {
        MM_REQUIRE(at + 28 <= n, "truncated data file");
        uint32_t kind = u32(d + at), sw = u32(d + at + 4), sh = u32(d + at + 8), seed = u32(d + at + 12);
        uint32_t ow = u32(d + at + 16), oh = u32(d + at + 20), mode = u32(d + at + 24);
        at += 28;
        size_t bytes = (size_t)ow * oh * 3;
        MM_REQUIRE(at + bytes <= n, "truncated data file");
        uint8_t *src = kind == 0 ? lcg_image((int)sw, (int)sh, seed) : ramp_image((int)sw, (int)sh);
        uint8_t *out = malloc(bytes);
        mm_error err = {{0}};
        int rc = mode == 0 ? mm_resize_lanczos_u8(src, (int)sh, (int)sw, 3, out, (int)oh, (int)ow, &err)
                           : mm_resize_cover_lanczos_u8(src, (int)sh, (int)sw, 3, out, (int)oh, (int)ow, &err);
        MM_EXPECT(rc == 0, "case %u: %s", c, err.msg);
        size_t differ = 0;
        int worst = 0;
        for (size_t i = 0; rc == 0 && i < bytes; i++) {
            int diff = abs(out[i] - d[at + i]);
            differ += diff != 0;
            worst = diff > worst ? diff : worst;
        }
        MM_EXPECT(rc == 0 && differ == 0, "case %u (%s %ux%u -> %ux%u%s): %zu of %zu bytes differ, worst by %d", c,
                  kind ? "ramp" : "noise", sw, sh, ow, oh, mode ? " cover" : "", differ, bytes, worst);
        checked++;
        free(src);
        free(out);
        at += bytes;
    }
    MM_EXPECT(checked == 12, "%d cases in the data file, expected 12", checked);
    free(d);
}

static void test_resize_large_cases_by_digest(void)
{
    static const struct {
        int w, h;
        const char *sha;
    } cases[] = {{1008, 756, "2f5df63002995076a065a45e7147f7193e583b86bd884bd9e7f99a1f3f03a3b4"},
                 {160, 90, "6e238dc9b644ccd0cba61038ae7ab6e3d001b9771dd1ec204a036bfa25fccf6d"}};
    uint8_t *src = lcg_image(400, 300, 3);
    for (int i = 0; i < 2; i++) {
        size_t bytes = (size_t)cases[i].w * cases[i].h * 3;
        uint8_t *out = malloc(bytes);
        mm_error err = {{0}};
        int rc = mm_resize_lanczos_u8(src, 300, 400, 3, out, cases[i].h, cases[i].w, &err);
        MM_EXPECT(rc == 0, "%s", err.msg);
        uint8_t digest[32];
        char hex[65];
        mm_sha256(out, bytes, digest);
        mm_sha256_hex(digest, hex);
        MM_EXPECT(rc == 0 && !strcmp(hex, cases[i].sha), "400x300 -> %dx%d: sha256 %s, Pillow %s", cases[i].w,
                  cases[i].h, hex, cases[i].sha);
        free(out);
    }
    free(src);
}

static void test_resize_edge_cases(void)
{
    uint8_t px[4 * 3 * 3], out[4 * 3 * 3];
    for (int i = 0; i < (int)sizeof px; i++)
        px[i] = (uint8_t)(i * 11);
    mm_error err = {{0}};
    MM_EXPECT(mm_resize_lanczos_u8(px, 3, 4, 3, out, 3, 4, &err) == 0 && !memcmp(px, out, sizeof px),
              "same size must copy");
    MM_EXPECT(mm_resize_lanczos_u8(px, 3, 4, 3, out, 0, 4, &err) < 0 && strstr(err.msg, "positive"), "zero size: %s",
              err.msg);
    /* a flat picture stays flat at any size (weights sum to one) */
    uint8_t flat[10 * 10];
    memset(flat, 77, sizeof flat);
    uint8_t *big = malloc(37 * 23);
    int rc = mm_resize_lanczos_u8(flat, 10, 10, 1, big, 23, 37, &err);
    int bad = rc != 0;
    for (int i = 0; !bad && i < 37 * 23; i++)
        bad = big[i] != 77;
    MM_EXPECT(!bad, "flat grey did not stay flat");
    free(big);
}

int main(void)
{
    MM_RUN(test_resize_matches_pillow_lanczos);
    MM_RUN(test_resize_large_cases_by_digest);
    MM_RUN(test_resize_edge_cases);
    return mm_test_exit();
}
