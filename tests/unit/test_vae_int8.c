/* The video VAE's opt-in int8 decoder linears (mm_video_vae_options
 * .int8_linears) on a tiny random-weight VAE written by mmh3-gen-tiny: the
 * frames stay within 45 dB PSNR of the stored-precision (fp16) decode, and
 * they are not the fp16 frames (the int8 path ran). On the CPU here; the
 * same ops' CUDA kernels run it on the device (tests/device/vae.sh --part
 * int8, which measures it at full size). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/ops.h"
#include "model/vae/vae.h"
#include "test.h"

#define PSNR_MIN_DB 45.0

static char dir[256], vae[600];
static mm_ctx *ctx;

typedef struct frames {
    uint8_t *rgb;
    int64_t n, bytes;
} frames;

static int keep(void *user, int64_t index, const uint8_t *rgb, int w, int h, const mm_tensor *px, mm_error *err)
{
    (void)px;
    frames *f = user;
    if ((int64_t)w * h * 3 != f->bytes || index != f->n)
        return mm_fail(err, "frame %lld of %dx%d unexpected", (long long)index, w, h);
    uint8_t *grown = realloc(f->rgb, (size_t)(f->bytes * (index + 1)));
    if (!grown)
        return mm_fail(err, "out of memory");
    f->rgb = grown;
    memcpy(f->rgb + f->bytes * index, rgb, (size_t)f->bytes);
    f->n++;
    return 0;
}

static int decode(bool int8, const float *lat, int C, int T, int h, int w, frames *out, mm_error *err)
{
    mm_video_vae_options o;
    mm_video_vae_options_release(&o);
    o.int8_linears = int8;
    mm_video_vae *vv = NULL;
    if (mm_video_vae_load(&vv, vae, &o, MM_VAE_DECODER, ctx, err) != 0)
        return -1;
    const mm_video_vae_config *c = mm_video_vae_get_config(vv);
    memset(out, 0, sizeof *out);
    out->bytes = (int64_t)h * c->patch_s * w * c->patch_s * 3;
    mm_tensor t = mm_tensor_wrap((void *)lat, mm_cpu(), MM_F32, 4, (int64_t[]){C, T, h, w});
    int rc = mm_video_vae_decode(vv, ctx, &t, keep, out, err);
    mm_video_vae_free(vv);
    return rc;
}

static void test_int8_frames_within_45_db_of_fp16(void)
{
    mm_error err = {{0}};
    mm_video_vae *probe = NULL;
    MM_REQUIRE(mm_video_vae_load(&probe, vae, NULL, MM_VAE_DECODER, ctx, &err) == 0, "%s", err.msg);
    const int C = mm_video_vae_get_config(probe)->latent_channels;
    mm_video_vae_free(probe);
    const int T = 7, h = 4, w = 6; /* 22 frames of 64 x 96 */
    float *lat = malloc(sizeof(float) * (size_t)(C * T * h * w));
    MM_REQUIRE(lat, "memory");
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < C * T * h * w; i++) { /* seeded normal latents, the decoder's input distribution */
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double u1 = ((s >> 11) + 1.0) / 9007199254740993.0;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        lat[i] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * (double)(s >> 11) / 9007199254740992.0));
    }
    frames ref, q;
    MM_REQUIRE(decode(false, lat, C, T, h, w, &ref, &err) == 0, "fp16: %s", err.msg);
    MM_REQUIRE(decode(true, lat, C, T, h, w, &q, &err) == 0, "int8: %s", err.msg);
    MM_REQUIRE(ref.n == 22 && q.n == 22, "22 frames each: %lld, %lld", (long long)ref.n, (long long)q.n);
    double se = 0;
    int worst = 0;
    int64_t differ = 0;
    for (int64_t i = 0; i < ref.n * ref.bytes; i++) {
        int d = abs((int)ref.rgb[i] - (int)q.rgb[i]);
        se += (double)d * d;
        worst = d > worst ? d : worst;
        differ += d != 0;
    }
    const double mse = se / (double)(ref.n * ref.bytes);
    const double psnr = mse > 0 ? 10.0 * log10(255.0 * 255.0 / mse) : INFINITY;
    printf("     int8 vs fp16: PSNR %.2f dB over %lld values, %lld differ, worst %d levels\n", psnr,
           (long long)(ref.n * ref.bytes), (long long)differ, worst);
    MM_EXPECT(psnr >= PSNR_MIN_DB, "PSNR %.2f dB >= %.0f dB", psnr, PSNR_MIN_DB);
    MM_EXPECT(differ > 0, "the int8 path changes some pixel (it ran)");
    free(ref.rgb);
    free(q.rgb);
    free(lat);
}

static void test_int8_needs_rotatable_widths(void)
{
    /* every width of the tiny and the released decoder is a multiple of 4: loading works */
    mm_video_vae_options o;
    mm_video_vae_options_release(&o);
    o.int8_linears = true;
    mm_video_vae *vv = NULL;
    mm_error err = {{0}};
    MM_EXPECT(mm_video_vae_load(&vv, vae, &o, MM_VAE_DECODER, ctx, &err) == 0, "%s", err.msg);
    MM_EXPECT(!vv || mm_video_vae_weight_bytes(vv) > 0, "the int8 copies are the model's own bytes");
    mm_video_vae_free(vv);
}

int main(void)
{
    const char *b = getenv("MMH3_BUILD");
    char gen[512], cmd[2048];
    snprintf(gen, sizeof gen, "%s/mmh3-gen-tiny", b ? b : ".");
    snprintf(dir, sizeof dir, "/tmp/mmh3-test-vae-int8-XXXXXX");
    if (access(gen, X_OK) != 0 || !mkdtemp(dir)) {
        printf("FAIL setup: %s not built, or no temporary folder\n", gen);
        return 1;
    }
    snprintf(vae, sizeof vae, "%s/vae.safetensors", dir);
    snprintf(cmd, sizeof cmd, "'%s' video-vae --seed 3 --out '%s' >/dev/null", gen, vae);
    mm_error err = {{0}};
    if (system(cmd) != 0 || mm_ctx_create(&ctx, mm_cpu(), 0, &err) != 0) {
        printf("FAIL setup: %s %s\n", cmd, err.msg);
        return 1;
    }
    MM_RUN(test_int8_frames_within_45_db_of_fp16);
    MM_RUN(test_int8_needs_rotatable_widths);
    mm_ctx_destroy(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", dir);
    return mm_test_exit();
}
