/* Live previews (engine/preview.h) on a tiny random video VAE written by
 * mmh3-gen-tiny: the fitted latent->RGB projection reproduces the VAE's own
 * decode of smooth latents it was not fitted on, within the bound below; the
 * projection survives its cache file; the key tells two VAE files apart;
 * the strip is a JPEG FFmpeg decodes at the stated size; the rate limit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/preview.h"
#include "media/image.h"
#include "media/probe.h"
#include "model/vae/vae.h"
#include "test.h"

/* The stated error, on latents the fit never saw: RMSE at most 0.01 of RGB
 * 0..1 (2.6 levels of 255) and at most 0.8 of the spread around each
 * channel's mean (what the best constant colour scores), i.e. the
 * projection explains over a third of the variance. A random-weight ViT
 * decoder is far less linear than a trained one and its frames barely vary
 * (spread ~0.008); measured here: RMSE 0.0059, ratio 0.71 (0.0056 on the
 * fit's own samples, so the rest is the decoder's non-linearity, not
 * over-fitting). A projection with its signs flipped scores over 1. */
#define HELD_OUT_RATIO 0.8
#define HELD_OUT_RMSE 0.01

static char dir[256], gen[512], vae_a[600], vae_b[600];
static mm_video_vae *vv;
static mm_ctx *ctx;
static mm_preview_projection proj;

static void test_fit_reproduces_the_decode_of_smooth_latents(void)
{
    mm_preview_fit_report rep = {0};
    mm_error err = {{0}};
    MM_REQUIRE(mm_preview_fit(vv, ctx, 1, &proj, &rep, &err) == 0, "%s", err.msg);
    const mm_video_vae_config *c = mm_video_vae_get_config(vv);
    MM_EXPECT(proj.channels == c->latent_channels, "one weight per latent channel: %d", proj.channels);
    MM_EXPECT(rep.samples > 100 && rep.rmse < rep.target_std, "the fit explains its samples: RMSE %.4f, spread %.4f",
              rep.rmse, rep.target_std);

    /* held out: latents of another seed, decoded by the VAE, against the projection */
    const int C = c->latent_channels, T = (int)mm_video_vae_latent_frames(c, 22), h = 10, w = 8;
    const int64_t n = (int64_t)T * h * w;
    float *lat = malloc(sizeof(float) * (size_t)(C * n)), *want = malloc(sizeof(float) * (size_t)(n * 3));
    float *got = malloc(sizeof(float) * (size_t)(n * 3));
    MM_REQUIRE(lat && want && got, "memory");
    mm_preview_smooth_latents(977, C, T, h, w, lat);
    MM_REQUIRE(mm_preview_decode_pooled(vv, ctx, lat, T, h, w, want, &err) == 0, "%s", err.msg);
    mm_preview_project(&proj, lat, T, h, w, got);
    /* the spread around each channel's own mean: a bias alone explains the channels' offsets */
    double se = 0, sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0}, var = 0;
    for (int64_t i = 0; i < n * 3; i++) {
        double g = got[i] < 0 ? 0 : got[i] > 1 ? 1 : got[i];
        se += (g - want[i]) * (g - want[i]);
        sum[i % 3] += want[i];
        sq[i % 3] += (double)want[i] * want[i];
    }
    for (int ch = 0; ch < 3; ch++)
        var += sq[ch] / n - (sum[ch] / n) * (sum[ch] / n);
    const double rmse = sqrt(se / (n * 3)), spread = sqrt(var / 3);
    printf("     held out: RMSE %.4f of RGB 0..1 (%.1f levels of 255), spread %.4f, ratio %.3f; fit: RMSE %.4f\n", rmse,
           rmse * 255, spread, rmse / spread, rep.rmse);
    MM_EXPECT(spread > 0.004, "the decodes vary (spread %.4f)", spread);
    MM_EXPECT(rmse <= HELD_OUT_RATIO * spread && rmse <= HELD_OUT_RMSE, "held-out RMSE %.4f <= %.2f x spread %.4f and <= %.2f",
              rmse, HELD_OUT_RATIO, spread, HELD_OUT_RMSE);
    /* a projection with the wrong sign scores far worse: the bound can fail */
    mm_preview_projection flipped = proj;
    for (int ch = 0; ch < 3; ch++)
        for (int k = 0; k < C; k++)
            flipped.weight[ch][k] = -flipped.weight[ch][k];
    mm_preview_project(&flipped, lat, T, h, w, got);
    double se_flipped = 0;
    for (int64_t i = 0; i < n * 3; i++)
        se_flipped += (got[i] - want[i]) * (got[i] - want[i]);
    MM_EXPECT(sqrt(se_flipped / (n * 3)) > HELD_OUT_RATIO * spread, "a flipped projection fails the bound (%.4f)",
              sqrt(se_flipped / (n * 3)));
    free(lat);
    free(want);
    free(got);
}

static void test_cache_file_round_trip_and_key(void)
{
    char ka[65], kb[65], ka2[65], path[700];
    mm_error err = {{0}};
    MM_REQUIRE(mm_preview_vae_key(vae_a, ka, &err) == 0 && mm_preview_vae_key(vae_a, ka2, &err) == 0 &&
                   mm_preview_vae_key(vae_b, kb, &err) == 0,
               "%s", err.msg);
    MM_EXPECT(strcmp(ka, ka2) == 0, "the same file, the same key");
    MM_EXPECT(strcmp(ka, kb) != 0, "another seed's VAE (same shapes, same header), another key");
    snprintf(path, sizeof path, "%s/cache/sub/preview-%s.txt", dir, ka);
    mm_preview_projection back;
    MM_EXPECT(mm_preview_projection_load(path, proj.channels, &back, &err) == 0, "absent before it is saved");
    MM_REQUIRE(mm_preview_projection_save(path, &proj, &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_preview_projection_load(path, proj.channels, &back, &err) == 1, "loads back");
    float worst = 0;
    for (int ch = 0; ch < 3; ch++) {
        for (int k = 0; k < proj.channels; k++)
            worst = fmaxf(worst, fabsf(back.weight[ch][k] - proj.weight[ch][k]));
        worst = fmaxf(worst, fabsf(back.bias[ch] - proj.bias[ch]));
    }
    MM_EXPECT(worst == 0, "the same floats (%g apart)", worst);
    MM_EXPECT(mm_preview_projection_load(path, proj.channels + 1, &back, &err) == 0,
              "a file for another channel count is not used");
    FILE *f = fopen(path, "w");
    MM_REQUIRE(f, "rewrite");
    fputs("mmh3 preview projection 1\nchannels 4\n1 2 nan\n", f);
    fclose(f);
    MM_EXPECT(mm_preview_projection_load(path, 4, &back, &err) == 0, "a damaged file is fitted again, not used");
}

static void test_strip_decodes_as_a_jpeg_of_the_stated_size(void)
{
    const mm_video_vae_config *c = mm_video_vae_get_config(vv);
    const int C = c->latent_channels, T = 37, h = 6, w = 10;
    float *lat = malloc(sizeof(float) * (size_t)(C * T * h * w));
    MM_REQUIRE(lat, "memory");
    mm_preview_smooth_latents(5, C, T, h, w, lat);
    mm_preview_image img;
    mm_error err = {{0}};
    MM_REQUIRE(mm_preview_from_latents(&proj, lat, T, h, w, &img, &err) == 0, "%s", err.msg);
    free(lat);
    MM_EXPECT(img.frames == MM_PREVIEW_MAX_FRAMES, "37 latent frames show as %d: %d", MM_PREVIEW_MAX_FRAMES, img.frames);
    MM_EXPECT(img.frame_height == 256 && img.frame_width == 428, "a 10x6 latent frame is 428x256 (426.7, even): %dx%d",
              img.frame_width, img.frame_height);
    char path[600];
    snprintf(path, sizeof path, "%s/strip.jpg", dir);
    MM_REQUIRE(mm_file_write_atomic(path, img.data, img.size, &err) == 0, "%s", err.msg);
    mm_image back;
    MM_REQUIRE(mm_image_read(path, NULL, &back, &err) == 0, "FFmpeg reads the strip: %s", err.msg);
    MM_EXPECT(back.width == img.frames * img.frame_width && back.height == img.frame_height, "strip %dx%d",
              back.width, back.height);
    mm_image_free(&back);
    mm_preview_image_free(&img);
    MM_EXPECT(mm_preview_strip_pick(0, 16, 37) == 0 && mm_preview_strip_pick(15, 16, 37) == 36,
              "the strip spans the first and the last latent frame");
}

static void test_rate_limit(void)
{
    double last = -1;
    MM_EXPECT(mm_preview_due(&last, 10.0, 500), "the first is due");
    MM_EXPECT(!mm_preview_due(&last, 10.3, 500), "not 300 ms later");
    MM_EXPECT(mm_preview_due(&last, 10.5, 500), "500 ms later");
    MM_EXPECT(mm_preview_due(&last, 10.5, 0), "interval 0: every one");
}

int main(void)
{
    mm_media_set_verbose(0);
    const char *b = getenv("MMH3_BUILD");
    snprintf(gen, sizeof gen, "%s/mmh3-gen-tiny", b ? b : ".");
    snprintf(dir, sizeof dir, "/tmp/mmh3-test-preview-XXXXXX");
    if (access(gen, X_OK) != 0 || !mkdtemp(dir)) {
        printf("FAIL setup: %s not built, or no temporary folder\n", gen);
        return 1;
    }
    snprintf(vae_a, sizeof vae_a, "%s/vae_a.safetensors", dir);
    snprintf(vae_b, sizeof vae_b, "%s/vae_b.safetensors", dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' video-vae --seed 1 --out '%s' >/dev/null && '%s' video-vae --seed 2 --out '%s' >/dev/null",
             gen, vae_a, gen, vae_b);
    mm_error err = {{0}};
    if (system(cmd) != 0 || mm_ctx_create(&ctx, mm_cpu(), 0, &err) != 0 ||
        mm_video_vae_load(&vv, vae_a, NULL, MM_VAE_DECODER, ctx, &err) != 0) {
        printf("FAIL setup: %s %s\n", cmd, err.msg);
        return 1;
    }
    MM_RUN(test_fit_reproduces_the_decode_of_smooth_latents);
    MM_RUN(test_cache_file_round_trip_and_key);
    MM_RUN(test_strip_decodes_as_a_jpeg_of_the_stated_size);
    MM_RUN(test_rate_limit);
    mm_video_vae_free(vv);
    mm_ctx_destroy(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", dir);
    return mm_test_exit();
}
