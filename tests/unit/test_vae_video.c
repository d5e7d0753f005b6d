/* The video VAE against the kit, one test per place a plausible mistake
 * would show (the kit's controls): latent de-normalization, the per-head
 * interleaved qkv and rotate-half RoPE (block0_attn), the [gate; value] FFN
 * (block0_out), spatial tiling (tiled pixels), the chunk cross-fade, the
 * encoder's zero causal padding, reflect padding and right/bottom
 * downsample padding, ImageNet input normalization, per-frame GroupNorm and
 * causality (exact), the seed-42 sample; plus the streaming API's edges. */
#include <unistd.h>

#include "test_vae_kit.h"

typedef struct sink {
    float *pixels; /* [3, T, H, W] */
    uint8_t *frames;
    int64_t T, H, W, got, stop_at;
    mm_ctx *ctx;
} sink;

static int on_frame(void *user, int64_t index, const uint8_t *rgb, int width, int height, const mm_tensor *pixels,
                    mm_error *err)
{
    sink *s = user;
    if (s->stop_at >= 0 && index == s->stop_at)
        return mm_fail(err, "stopped by the test");
    if (index != s->got || index >= s->T || width != s->W || height != s->H)
        return mm_fail(err, "frame %lld out of order or size", (long long)index);
    const int64_t plane = s->H * s->W;
    if (s->frames)
        memcpy(s->frames + index * plane * 3, rgb, (size_t)(plane * 3));
    if (s->pixels) {
        float *p = vk_host(s->ctx, pixels);
        for (int c = 0; c < 3 && p; c++)
            memcpy(s->pixels + (c * s->T + index) * plane, p + c * plane, sizeof(float) * (size_t)plane);
        free(p);
    }
    s->got++;
    return 0;
}

static int decode_case(vk *k, const char *name, sink *s)
{
    char tn[128];
    snprintf(tn, sizeof tn, "%s.in.latents", name);
    mm_tensor lat;
    if (mm_st_get(k->cases, tn, &lat, &k->err) != 0)
        return -1;
    const mm_video_vae_config *c = mm_video_vae_get_config(k->video);
    s->T = mm_video_vae_pixel_frames(c, lat.shape[2]);
    s->H = lat.shape[3] * c->patch_s;
    s->W = lat.shape[4] * c->patch_s;
    s->ctx = k->ctx;
    s->pixels = malloc(sizeof(float) * (size_t)(3 * s->T * s->H * s->W));
    s->frames = malloc((size_t)(3 * s->T * s->H * s->W));
    return mm_video_vae_decode(k->video, k->ctx, &lat, on_frame, s, &k->err);
}

static void sink_free(sink *s)
{
    free(s->pixels);
    free(s->frames);
}

static void expect_target(vk *k, const char *ref, const float *mine, int64_t n, mm_conf_tol tol)
{
    int64_t rn = 0;
    float *r = vk_read(k, ref, &rn);
    MM_EXPECT(r && rn == n, "%s: %lld values, kit %lld", ref, (long long)n, (long long)rn);
    if (r && rn == n) {
        mm_conf_diff d = vk_diff(mine, r, n);
        MM_EXPECT(d.rel_l2 <= tol.rel_l2 && d.max_abs <= tol.max_abs, "%s: rel_l2 %.3g (tol %.3g) max_abs %.3g (tol %.3g)",
                  ref, d.rel_l2, tol.rel_l2, d.max_abs, tol.max_abs);
    }
    free(r);
}

/* One tile, one chunk: every decoder intermediate of the kit. */
static void test_decode_single_intermediates(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_DECODER, 0) == 0, "%s", k.err.msg);
    sink s = {.stop_at = -1};
    MM_REQUIRE(decode_case(&k, "video_decode_single", &s) == 0, "%s", k.err.msg);
    MM_EXPECT(s.got == 22, "%lld frames", (long long)s.got);
    /* latents_normalized_not_denormalized / latent_denorm_skipped */
    VK_EXPECT_NEAR(&k, "latents_denorm", "video_decode_single.dbg.latents_denorm",
                   vk_tol(&k, "debug", "video_decode_single.latents_denorm"));
    VK_EXPECT_NEAR(&k, "post_quant_conv", "video_decode_single.dbg.post_quant_conv",
                   vk_tol(&k, "debug", "video_decode_single.post_quant_conv"));
    VK_EXPECT_NEAR(&k, "rope_cos", "video_decode_single.dbg.rope_cos", vk_tol(&k, "debug", "video_decode_single.rope_cos"));
    VK_EXPECT_NEAR(&k, "rope_sin", "video_decode_single.dbg.rope_sin", vk_tol(&k, "debug", "video_decode_single.rope_sin"));
    /* registers and the zero token */
    VK_EXPECT_NEAR(&k, "block0_in", "video_decode_single.dbg.block0_in", vk_tol(&k, "debug", "video_decode_single.block0_in"));
    /* qkv_read_contiguous, rope_interleaved_pairs */
    VK_EXPECT_NEAR(&k, "block0_attn", "video_decode_single.dbg.block0_attn",
                   vk_tol(&k, "debug", "video_decode_single.block0_attn"));
    /* ffn_value_gate_swapped */
    VK_EXPECT_NEAR(&k, "block0_out", "video_decode_single.dbg.block0_out", vk_tol(&k, "debug", "video_decode_single.block0_out"));
    VK_EXPECT_NEAR(&k, "blocks_out", "video_decode_single.dbg.blocks_out", vk_tol(&k, "debug", "video_decode_single.blocks_out"));
    expect_target(&k, "video_decode_single.out.pixels", s.pixels, 3 * s.T * s.H * s.W, vk_tol(&k, "video_decode", "pixels"));
    sink_free(&s);
    vk_close(&k);
}

/* 2 x 2 tiles, 2 chunks: the tiled pixels, and the cross-fade of the
 * engine's own chunk halves (frame 17 + k = tail[k](1 − k/5) + head[k]·k/5). */
static void test_decode_tiled_crossfade(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_DECODER, 0) == 0, "%s", k.err.msg);
    sink s = {.stop_at = -1};
    MM_REQUIRE(decode_case(&k, "video_decode_tiled", &s) == 0, "%s", k.err.msg);
    MM_EXPECT(s.got == 39, "%lld frames", (long long)s.got);
    /* tiling_disabled, minimum_overlap_only, stitch_blended_neighbours */
    expect_target(&k, "video_decode_tiled.out.pixels", s.pixels, 3 * s.T * s.H * s.W, vk_tol(&k, "video_decode", "pixels"));
    const vk_capture *tail = vk_captured(&k, "chunk0_tail"), *head = vk_captured(&k, "chunk1_head");
    MM_REQUIRE(tail && head && tail->numel == head->numel, "chunk halves not captured");
    const int64_t plane = s.H * s.W;
    double worst = 0, moved = 0;
    for (int c = 0; c < 3; c++)
        for (int f = 0; f < 5; f++)
            for (int64_t q = 0; q < plane; q++) {
                float a = tail->data[(c * 5 + f) * plane + q], b = head->data[(c * 5 + f) * plane + q];
                float w = (float)f / 5.0f, want = a * (1.0f - w) + b * w;
                float got = s.pixels[(c * s.T + 17 + f) * plane + q];
                worst = fmax(worst, fabs(got - want));
                moved = fmax(moved, fabs(got - b));
            }
    MM_EXPECT(worst < 1e-5, "cross-fade off by %g", worst);
    /* no_chunk_crossfade would emit the head unblended */
    MM_EXPECT(moved > 1e-2, "the fade changed nothing (%g)", moved);
    sink_free(&s);
    vk_close(&k);
}

/* Batching the tiles of a chunk into one ViT pass (block-diagonal attention)
 * computes the same thing as one tile per pass: the two differ only by
 * summation order (f32 rounding, then an occasional F16 code of an
 * intermediate), far below the kit tolerance (1.3e-3); attention leaking
 * across tiles would move pixels by percents. */
static void test_decode_tile_batching(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_DECODER, 0) == 0, "%s", k.err.msg);
    sink a = {.stop_at = -1}, b = {.stop_at = -1};
    MM_REQUIRE(decode_case(&k, "video_decode_tiled", &a) == 0, "%s", k.err.msg);
    mm_video_vae_free(k.video);
    k.vo.max_batch_tiles = 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/vae/video_vae.safetensors", mm_test_data_dir());
    MM_REQUIRE(mm_video_vae_load(&k.video, path, &k.vo, MM_VAE_DECODER, k.ctx, &k.err) == 0, "%s", k.err.msg);
    MM_REQUIRE(decode_case(&k, "video_decode_tiled", &b) == 0, "%s", k.err.msg);
    MM_REQUIRE(a.got == b.got, "%lld vs %lld frames", (long long)a.got, (long long)b.got);
    mm_conf_diff d = vk_diff(a.pixels, b.pixels, 3 * a.T * a.H * a.W);
    MM_EXPECT(d.rel_l2 < 2e-4 && d.max_abs < 5e-3, "batched vs one tile per pass: rel_l2 %g max_abs %g", d.rel_l2,
              d.max_abs);
    sink_free(&a);
    sink_free(&b);
    vk_close(&k);
}

/* A callback error stops the decode and comes back; one latent gives one frame. */
static void test_decode_stream_edges(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_DECODER, 0) == 0, "%s", k.err.msg);
    sink s = {.stop_at = 3};
    MM_EXPECT(decode_case(&k, "video_decode_single", &s) != 0, "decode ignored the callback's error");
    MM_EXPECT(s.got == 3 && strstr(k.err.msg, "stopped by the test"), "got %lld frames, error '%s'", (long long)s.got,
              k.err.msg);
    sink_free(&s);
    /* one latent: the reference decodes [z, z] and keeps frame 0 */
    mm_tensor lat;
    MM_REQUIRE(mm_st_get(k.cases, "video_decode_single.in.latents", &lat, &k.err) == 0, "%s", k.err.msg);
    mm_tensor one = mm_tensor_narrow(&lat, 2, 0, 1);
    float *buf = malloc(sizeof(float) * (size_t)mm_tensor_numel(&one));
    mm_tensor c1 = mm_tensor_wrap(buf, mm_cpu(), MM_F32, 5, one.shape);
    mm_copy(k.ctx, &c1, &one);
    sink s1 = {.stop_at = -1, .T = 1, .H = 32, .W = 48, .ctx = k.ctx};
    MM_EXPECT(mm_video_vae_decode(k.video, k.ctx, &c1, on_frame, &s1, &k.err) == 0, "%s", k.err.msg);
    MM_EXPECT(s1.got == 1, "%lld frames for one latent", (long long)s1.got);
    /* wrong channel count: an error naming what is accepted */
    mm_tensor bad = mm_tensor_narrow(&lat, 1, 0, 12);
    MM_EXPECT(mm_video_vae_decode(k.video, k.ctx, &bad, on_frame, &s1, &k.err) != 0 && strstr(k.err.msg, "[24, T"),
              "bad latents: '%s'", k.err.msg);
    /* the encoder was not loaded */
    mm_video_latents r;
    uint8_t px[32 * 32 * 3] = {0};
    MM_EXPECT(mm_video_vae_encode_image(k.video, k.ctx, px, 32, 32, 96, NULL, &r, &k.err) != 0 &&
                  strstr(k.err.msg, "encoder was not loaded"),
              "'%s'", k.err.msg);
    free(buf);
    vk_close(&k);
}

/* Inputs the encoder cannot take come back as errors that say what is accepted. */
static void test_encode_bad_inputs(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_ENCODER, 0) == 0, "%s", k.err.msg);
    uint8_t px[16 * 16 * 3] = {0};
    mm_video_latents r;
    MM_EXPECT(mm_video_vae_encode_image(k.video, k.ctx, px, 16, 16, 48, NULL, &r, &k.err) != 0 &&
                  strstr(k.err.msg, "at least 17 px"),
              "16x16: '%s'", k.err.msg);
    MM_EXPECT(mm_video_vae_encode_image(k.video, k.ctx, px, 16, 16, 10, NULL, &r, &k.err) != 0 &&
                  strstr(k.err.msg, "stride"),
              "short stride: '%s'", k.err.msg);
    MM_EXPECT(mm_video_vae_encode_image(k.video, k.ctx, NULL, 16, 16, 48, NULL, &r, &k.err) != 0, "NULL image");
    MM_EXPECT(mm_video_vae_encode_video(k.video, k.ctx, 0, 32, 32, 96, NULL, NULL, NULL, &r, &k.err) != 0,
              "no frames");
    vk_close(&k);
}

/* The keyframe encode: input normalization, the encoder's padding, the
 * seed-42 sample rounded to fp16, and the posterior outputs. */
static void test_encode_keyframe(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_ENCODER, 0) == 0, "%s", k.err.msg);
    mm_tensor fr;
    MM_REQUIRE(mm_st_get(k.cases, "video_encode_keyframe.in.frames", &fr, &k.err) == 0, "%s", k.err.msg);
    const int H = (int)fr.shape[1], W = (int)fr.shape[2];
    mm_video_latents r;
    MM_REQUIRE(mm_video_vae_encode_image(k.video, k.ctx, fr.data, W, H, 3 * W, NULL, &r, &k.err) == 0, "%s",
               k.err.msg);
    MM_EXPECT(r.shape[0] == 24 && r.shape[1] == 1 && r.shape[2] == H / 16 && r.shape[3] == W / 16, "shape");
    /* pixels_minus1_1 */
    VK_EXPECT_NEAR(&k, "input", "video_encode_keyframe.dbg.input", vk_tol(&k, "debug", "video_encode_keyframe.input"));
    /* temporal_pad_replicate_first, temporal_pad_symmetric, spatial_pad_zeros */
    VK_EXPECT_NEAR(&k, "conv_in", "video_encode_keyframe.dbg.conv_in", vk_tol(&k, "debug", "video_encode_keyframe.conv_in"));
    VK_EXPECT_NEAR(&k, "down0_block0", "video_encode_keyframe.dbg.down0_block0",
                   vk_tol(&k, "debug", "video_encode_keyframe.down0_block0"));
    /* downsample_symmetric_pad */
    VK_EXPECT_NEAR(&k, "level0", "video_encode_keyframe.dbg.level0", vk_tol(&k, "debug", "video_encode_keyframe.level0"));
    VK_EXPECT_NEAR(&k, "level5", "video_encode_keyframe.dbg.level5", vk_tol(&k, "debug", "video_encode_keyframe.level5"));
    const int64_t n = 24 * r.shape[1] * r.shape[2] * r.shape[3];
    /* noise_other_seed: the torch CPU generator, bit for bit */
    int64_t rn;
    float *noise = vk_read(&k, "video_encode_keyframe.dbg.noise", &rn);
    MM_REQUIRE(noise && rn == n, "noise");
    MM_EXPECT(memcmp(noise, r.noise, sizeof(float) * (size_t)n) == 0, "noise differs from torch.randn(seed 42)");
    free(noise);
    expect_target(&k, "video_encode_keyframe.out.posterior_mean", r.mean, n, vk_tol(&k, "video_encode", "posterior_mean"));
    expect_target(&k, "video_encode_keyframe.out.posterior_logvar", r.logvar, n,
                  vk_tol(&k, "video_encode", "posterior_logvar"));
    expect_target(&k, "video_encode_keyframe.out.latents", r.latents, n, vk_tol(&k, "video_encode", "latents"));
    /* posterior_mean_not_sample: the mean recipe lands on mean_latents, far from the sample */
    mm_video_encode_options mo = {.sample = false, .seed = 42, .fp16_round = false};
    mm_video_latents m;
    MM_REQUIRE(mm_video_vae_encode_image(k.video, k.ctx, fr.data, W, H, 3 * W, &mo, &m, &k.err) == 0, "%s",
               k.err.msg);
    expect_target(&k, "video_encode_keyframe.out.mean_latents", m.latents, n, vk_tol(&k, "video_encode", "mean_latents"));
    mm_conf_diff d = vk_diff(m.latents, r.latents, n);
    MM_EXPECT(d.rel_l2 > 5 * vk_tol(&k, "video_encode", "latents").rel_l2, "sample == mean (rel %g)", d.rel_l2);
    mm_video_latents_free(&m);
    mm_video_latents_free(&r);
    vk_close(&k);
}

static const uint8_t *pull(void *user, int64_t index, mm_error *err)
{
    (void)err;
    return (const uint8_t *)user + index * 32 * 32 * 3;
}

/* Causality and per-frame GroupNorm, exactly: in a 17-frame clip latent 0
 * sees frame 0 only, so changing frames 1..4 leaves it bit for bit (a
 * symmetric temporal pad or statistics across frames would move it), while
 * latent 1 moves; and latent 0 equals the one-frame (keyframe) encode. */
static void test_encode_causal_per_frame(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_ENCODER, 0) == 0, "%s", k.err.msg);
    const int S = 32, F = 5;
    uint8_t *a = malloc((size_t)(F * S * S * 3)), *b = malloc((size_t)(F * S * S * 3));
    uint32_t seed = 1;
    for (int i = 0; i < F * S * S * 3; i++) {
        seed = seed * 1103515245u + 12345u;
        a[i] = b[i] = (uint8_t)(seed >> 16);
    }
    for (int i = S * S * 3; i < F * S * S * 3; i++)
        b[i] = (uint8_t)(255 - b[i]);
    mm_video_encode_options mo = {.sample = false, .seed = 42, .fp16_round = false};
    mm_video_latents ra, rb, ri;
    MM_REQUIRE(mm_video_vae_encode_video(k.video, k.ctx, F, S, S, 3 * S, pull, a, &mo, &ra, &k.err) == 0, "%s",
               k.err.msg);
    MM_REQUIRE(mm_video_vae_encode_video(k.video, k.ctx, F, S, S, 3 * S, pull, b, &mo, &rb, &k.err) == 0, "%s",
               k.err.msg);
    MM_REQUIRE(mm_video_vae_encode_image(k.video, k.ctx, a, S, S, 3 * S, &mo, &ri, &k.err) == 0, "%s", k.err.msg);
    MM_REQUIRE(ra.shape[1] == 2 && ri.shape[1] == 1, "latent frames %lld / %lld", (long long)ra.shape[1],
               (long long)ri.shape[1]);
    const int64_t hw = ra.shape[2] * ra.shape[3];
    int same0 = 1;
    double moved1 = 0, d_img = 0, ref = 0;
    for (int c = 0; c < 24; c++)
        for (int64_t q = 0; q < hw; q++) {
            float a0 = ra.mean[(c * 2 + 0) * hw + q], b0 = rb.mean[(c * 2 + 0) * hw + q];
            float a1 = ra.mean[(c * 2 + 1) * hw + q], b1 = rb.mean[(c * 2 + 1) * hw + q];
            same0 &= memcmp(&a0, &b0, sizeof a0) == 0;
            moved1 = fmax(moved1, fabs(a1 - b1));
            double di = a0 - ri.mean[c * hw + q];
            d_img += di * di;
            ref += (double)a0 * a0;
        }
    MM_EXPECT(same0, "latent 0 depends on later frames");
    MM_EXPECT(moved1 > 1e-2, "latent 1 ignores frames 1..4 (%g)", moved1);
    /* the same math in another summation order, through six fp16 levels */
    MM_EXPECT(sqrt(d_img / ref) < 2e-2, "latent 0 of the clip vs the keyframe encode: rel %g", sqrt(d_img / ref));
    mm_video_latents_free(&ra);
    mm_video_latents_free(&rb);
    mm_video_latents_free(&ri);
    free(a);
    free(b);
    vk_close(&k);
}

/* The last clip of a video runs on only the frames its kept latents see (the
 * rest are dropped: token_drop). A video of one clip's length keeps fewer
 * latents than a clip holds, so its one clip is cut short; its latents must
 * equal, bit for bit, the first latents of the same frames encoded as the
 * full first clip of a two-clip video. */
static void test_encode_last_clip_cut_short(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_ENCODER, 0) == 0, "%s", k.err.msg);
    const int S = 32, T = mm_video_vae_get_config(k.video)->clip_length, F = 2 * T;
    uint8_t *a = malloc((size_t)F * S * S * 3);
    MM_REQUIRE(a, "out of memory");
    uint32_t seed = 7;
    for (int64_t i = 0; i < (int64_t)F * S * S * 3; i++) {
        seed = seed * 1103515245u + 12345u;
        a[i] = (uint8_t)(seed >> 16);
    }
    mm_video_encode_options mo = {.sample = false, .seed = 42, .fp16_round = false};
    mm_video_latents two, one;
    MM_REQUIRE(mm_video_vae_encode_video(k.video, k.ctx, F, S, S, 3 * S, pull, a, &mo, &two, &k.err) == 0, "%s",
               k.err.msg);
    MM_REQUIRE(mm_video_vae_encode_video(k.video, k.ctx, T, S, S, 3 * S, pull, a, &mo, &one, &k.err) == 0, "%s",
               k.err.msg);
    /* two clips keep 2·tl − drop latents, one clip tl − drop */
    const int64_t C = one.shape[0], kept = one.shape[1], tl = two.shape[1] - one.shape[1];
    const int64_t hw = one.shape[2] * one.shape[3];
    MM_REQUIRE(kept >= 1 && kept < tl && two.shape[0] == C && two.shape[2] * two.shape[3] == hw,
               "one clip keeps %lld of %lld latents: nothing to cut short", (long long)kept, (long long)tl);
    int64_t differ = 0;
    for (int64_t c = 0; c < C; c++)
        for (int64_t t = 0; t < kept; t++) {
            const size_t o1 = (size_t)((c * kept + t) * hw), o2 = (size_t)((c * two.shape[1] + t) * hw);
            differ += memcmp(one.mean + o1, two.mean + o2, sizeof(float) * (size_t)hw) != 0;
            differ += memcmp(one.logvar + o1, two.logvar + o2, sizeof(float) * (size_t)hw) != 0;
        }
    MM_EXPECT(differ == 0, "%lld latent planes of the cut-short clip differ from the full clip's", (long long)differ);
    mm_video_latents_free(&two);
    mm_video_latents_free(&one);
    free(a);
    vk_close(&k);
}

/* A header may pair a huge dimension with a zero one: no data, so the file-size
 * check passes, but the configuration read from it would truncate to int.
 * Both VAE loaders refuse it by name before reading anything else. */
static int write_header_only(const char *path, const char *json)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint64_t n = strlen(json);
    int ok = fwrite(&n, 8, 1, f) == 1 && fwrite(json, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static void test_hostile_shapes(void)
{
    char dir[] = "/tmp/mmh3-vae-hostile-XXXXXX", path[64];
    MM_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/vae.safetensors", dir);
    mm_ctx *ctx = NULL;
    mm_error err = {0};
    MM_REQUIRE(mm_ctx_create(&ctx, mm_cpu(), 0, &err) == 0, "%s", err.msg);
    const char *video = "{\"encoder.conv_in.weight\":{\"dtype\":\"F16\",\"shape\":[4294967424,0,3,3,3],"
                        "\"data_offsets\":[0,0]}}";
    const char *audio = "{\"mean_proj.weight\":{\"dtype\":\"F32\",\"shape\":[0,64,33554433],"
                        "\"data_offsets\":[0,0]}}";
    mm_video_vae *vv = NULL;
    mm_audio_vae *av = NULL;
    MM_REQUIRE(write_header_only(path, video) == 0, "write %s", path);
    MM_EXPECT(mm_video_vae_load(&vv, path, NULL, MM_VAE_ENCODER, ctx, &err) != 0 &&
                  strstr(err.msg, "encoder.conv_in.weight") && strstr(err.msg, "each dimension must be 1.."),
              "video: '%s'", err.msg);
    MM_REQUIRE(write_header_only(path, audio) == 0, "write %s", path);
    err = (mm_error){0};
    MM_EXPECT(mm_audio_vae_load(&av, path, NULL, MM_VAE_ENCODER, ctx, &err) != 0 &&
                  strstr(err.msg, "mean_proj.weight") && strstr(err.msg, "each dimension must be 1.."),
              "audio: '%s'", err.msg);
    MM_EXPECT(vv == NULL && av == NULL, "nothing returned on failure");
    mm_ctx_destroy(ctx);
    remove(path);
    rmdir(dir);
}

int main(void)
{
    MM_RUN(test_decode_single_intermediates);
    MM_RUN(test_decode_tiled_crossfade);
    MM_RUN(test_decode_tile_batching);
    MM_RUN(test_decode_stream_edges);
    MM_RUN(test_encode_bad_inputs);
    MM_RUN(test_encode_keyframe);
    MM_RUN(test_encode_causal_per_frame);
    MM_RUN(test_encode_last_clip_cut_short);
    MM_RUN(test_hostile_shapes);
    return mm_test_exit();
}
