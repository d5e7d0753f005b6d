/* The released configuration compiled into vae_release.c equals the
 * release's own files (FL2VA/video_vae/config.json, source/config.json,
 * FL2VA/audio_vae/config.json, metadata.json) as float32 / integers. The
 * release folder is read from the shared folder beside the checkout
 * ($MMH3_SHARED, or ../shared, ../../shared ... from $MMH3_SRC); it is never
 * committed (MiniMax H3 Community License). Missing data is a failure. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/vae/vae.h"
#include "test.h"

static const char *fl2va_dir(void)
{
    static char found[4096];
    if (found[0])
        return found;
    const char *shared = getenv("MMH3_SHARED"), *src = getenv("MMH3_SRC");
    const char *ups[] = {"/..", "/../..", "/../../..", "/../../../.."};
    char cand[4096], probe[4200];
    struct stat st;
    for (int i = -1; i < 4; i++) {
        if (i < 0 && !(shared && *shared))
            continue;
        if (i < 0)
            snprintf(cand, sizeof cand, "%s/minimax-h3/FL2VA", shared);
        else
            snprintf(cand, sizeof cand, "%s%s/shared/minimax-h3/FL2VA", src && *src ? src : ".", ups[i]);
        snprintf(probe, sizeof probe, "%s/video_vae/config.json", cand);
        if (stat(probe, &st) == 0) {
            snprintf(found, sizeof found, "%s", cand);
            return found;
        }
    }
    return NULL;
}

static json_t *load(const char *rel)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", fl2va_dir(), rel);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        printf("     %s: %s\n", path, je.text);
    return j;
}

static int floats_equal(const json_t *arr, const float *v, int n)
{
    if (!json_is_array(arr) || (int)json_array_size(arr) != n)
        return 0;
    for (int i = 0; i < n; i++)
        if ((float)json_number_value(json_array_get(arr, (size_t)i)) != v[i])
            return 0;
    return 1;
}

static int ints_equal(const json_t *arr, const int *v, int n)
{
    if (!json_is_array(arr) || (int)json_array_size(arr) != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (json_integer_value(json_array_get(arr, (size_t)i)) != v[i])
            return 0;
    return 1;
}

static void test_video_release(void)
{
    MM_REQUIRE(fl2va_dir(), "the release folder (shared/minimax-h3/FL2VA) was not found; set MMH3_SHARED");
    json_t *cfg = load("video_vae/config.json"), *src = load("video_vae/source/config.json");
    MM_REQUIRE(cfg && src, "release video_vae configs unreadable");
    mm_video_vae_options o;
    mm_video_vae_options_release(&o);
    MM_EXPECT(o.n_latent_const == json_integer_value(json_object_get(cfg, "latent_channels")), "latent channels");
    MM_EXPECT(floats_equal(json_object_get(cfg, "latents_mean"), o.latents_mean, o.n_latent_const), "latents_mean");
    MM_EXPECT(floats_equal(json_object_get(cfg, "latents_std"), o.latents_std, o.n_latent_const), "latents_std");
    MM_EXPECT(o.clip_length == json_integer_value(json_object_get(cfg, "vae_clip_length")), "clip length");
    MM_EXPECT(o.token_drop == json_integer_value(json_object_get(cfg, "vae_token_drop")), "token drop");
    MM_EXPECT(o.tile_size == json_integer_value(json_object_get(cfg, "vae_tile_size")), "tile size");
    MM_EXPECT(o.tile_overlap_min == json_integer_value(json_object_get(cfg, "vae_tile_overlap_min")), "overlap");
    MM_EXPECT(o.tiling == (json_integer_value(json_object_get(cfg, "vae_decoder_tiling")) != 0), "tiling");
    MM_EXPECT(ints_equal(json_object_get(src, "space_down"), o.space_down, o.levels), "space_down");
    MM_EXPECT(ints_equal(json_object_get(src, "time_down"), o.time_down, o.levels), "time_down");
    const json_t *vit = json_object_get(src, "vit_decoder_kwargs");
    MM_EXPECT(o.head_dim == json_integer_value(json_object_get(vit, "dim_head")), "head dim");
    MM_EXPECT(o.rope_theta == (float)json_number_value(json_object_get(vit, "rope_theta")), "rope theta");
    MM_EXPECT(o.rope_dim_ratio == (float)json_number_value(json_object_get(vit, "rope_dim_ratio")), "rope ratio");
    MM_EXPECT(strcmp(json_string_value(json_object_get(src, "pixel_norm_type")), "imagenet") == 0, "pixel norm");
    MM_EXPECT(o.pixel_mean[0] == 0.485f && o.pixel_std[2] == 0.225f, "ImageNet constants");
    json_decref(cfg);
    json_decref(src);
}

static void test_audio_release(void)
{
    MM_REQUIRE(fl2va_dir(), "the release folder (shared/minimax-h3/FL2VA) was not found; set MMH3_SHARED");
    json_t *cfg = load("audio_vae/config.json"), *meta = load("audio_vae/metadata.json");
    MM_REQUIRE(cfg && meta, "release audio_vae configs unreadable");
    mm_audio_vae_options o;
    mm_audio_vae_options_release(&o);
    MM_EXPECT(o.n_latent_const == json_integer_value(json_object_get(cfg, "latent_channels")), "latent channels");
    MM_EXPECT(floats_equal(json_object_get(cfg, "latents_mean"), o.latents_mean, o.n_latent_const), "latents_mean");
    MM_EXPECT(floats_equal(json_object_get(cfg, "latents_std"), o.latents_std, o.n_latent_const), "latents_std");
    MM_EXPECT(o.sample_rate == json_integer_value(json_object_get(cfg, "sample_rate")), "sample rate");
    const json_t *kw = json_object_get(json_object_get(meta, "metadata"), "kwargs");
    MM_EXPECT(ints_equal(json_object_get(kw, "encoder_rates"), o.encoder_rates, o.n_encoder_rates), "encoder rates");
    MM_EXPECT(ints_equal(json_object_get(kw, "decoder_rates"), o.decoder_rates, o.n_decoder_rates), "decoder rates");
    json_decref(cfg);
    json_decref(meta);
}

int main(void)
{
    MM_RUN(test_video_release);
    MM_RUN(test_audio_release);
    return mm_test_exit();
}
