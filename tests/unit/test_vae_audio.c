/* The audio VAE against the kit, one check per place a plausible mistake
 * would show (the kit's controls): latent de-normalization, the anti-aliased
 * up/down-samplers with replicate padding, SnakeBeta's log-scale
 * parameters, the MEAN of the AMP blocks, Snake1d's linear alpha, the
 * contiguous causal pre_block attention, the double LayerNorm, right
 * padding; plus the alias-free activation against a direct evaluation at
 * short lengths (where replicate padding dominates), stereo handling and
 * latent counts. */
#include "model/vae/audio_vae_internal.h"
#include "test_vae_kit.h"

#define DBG(case_, name) VK_EXPECT_NEAR(&k, name, case_ ".dbg." name, vk_tol(&k, "debug", case_ "." name))

static void test_decode(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, 0, MM_VAE_DECODER) == 0, "%s", k.err.msg);
    mm_tensor lat;
    MM_REQUIRE(mm_st_get(k.cases, "audio_decode.in.latents", &lat, &k.err) == 0, "%s", k.err.msg);
    float *wave;
    int64_t samples;
    MM_REQUIRE(mm_audio_vae_decode(k.audio, k.ctx, &lat, &wave, &samples, &k.err) == 0, "%s", k.err.msg);
    MM_EXPECT(samples == lat.shape[2] * mm_audio_vae_get_config(k.audio)->hop, "%lld samples", (long long)samples);
    DBG("audio_decode", "latents_denorm"); /* latent_denorm_skipped */
    DBG("audio_decode", "dec_in_proj");
    DBG("audio_decode", "conv_pre");
    DBG("audio_decode", "ups0");
    DBG("audio_decode", "act_up");    /* resampler_zero_padding, upsample_filter_exp */
    DBG("audio_decode", "act_snake"); /* snakebeta_linear */
    DBG("audio_decode", "act_down");  /* no_alias_free */
    DBG("audio_decode", "resblock0");
    DBG("audio_decode", "stage0"); /* amp_sum_not_mean */
    DBG("audio_decode", "activation_post");
    DBG("audio_decode", "conv_post");
    int64_t n;
    float *ref = vk_read(&k, "audio_decode.out.waveform", &n);
    MM_REQUIRE(ref && n == lat.shape[0] * samples, "waveform size");
    mm_conf_diff d = vk_diff(wave, ref, n);
    mm_conf_tol t = vk_tol(&k, "audio_decode", "waveform");
    MM_EXPECT(d.rel_l2 <= t.rel_l2 && d.max_abs <= t.max_abs, "waveform rel %g max %g", d.rel_l2, d.max_abs);
    for (int64_t i = 0; i < n; i++)
        if (wave[i] < -1.0f || wave[i] > 1.0f) {
            MM_EXPECT(0, "sample %lld = %g outside [-1, 1]", (long long)i, wave[i]);
            break;
        }
    free(ref);
    free(wave);
    vk_close(&k);
}

static void test_encode(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, 0, MM_VAE_ENCODER) == 0, "%s", k.err.msg);
    mm_tensor wav;
    MM_REQUIRE(mm_st_get(k.cases, "audio_encode.in.waveform", &wav, &k.err) == 0, "%s", k.err.msg);
    float *lat;
    int64_t T;
    MM_REQUIRE(mm_audio_vae_encode_batch(k.audio, k.ctx, &wav, &lat, &T, &k.err) == 0, "%s", k.err.msg);
    DBG("audio_encode", "padded_input"); /* encode_left_padded */
    DBG("audio_encode", "conv_in");
    DBG("audio_encode", "snake"); /* snake1d_alpha_exp */
    DBG("audio_encode", "residual_unit0");
    DBG("audio_encode", "enc_block1");
    DBG("audio_encode", "encoder_out");
    DBG("audio_encode", "preblock_attn"); /* preblock_qkv_per_head_interleaved, preblock_noncausal */
    DBG("audio_encode", "preblock_out");  /* preblock_single_layernorm */
    DBG("audio_encode", "z");
    int64_t n;
    float *ref = vk_read(&k, "audio_encode.out.latents", &n);
    MM_REQUIRE(ref && n == 2 * 32 * T, "latents size");
    mm_conf_diff d = vk_diff(lat, ref, n);
    mm_conf_tol t = vk_tol(&k, "audio_encode", "latents");
    MM_EXPECT(d.rel_l2 <= t.rel_l2 && d.max_abs <= t.max_abs, "latents rel %g max %g", d.rel_l2, d.max_abs);
    free(ref);
    /* mono goes in as both batch items: channel 0 alone gives channel 0's latents twice */
    const float *ch0 = wav.data;
    float *mono;
    int64_t Tm;
    MM_REQUIRE(mm_audio_vae_encode(k.audio, k.ctx, &ch0, 1, wav.shape[2], &mono, &Tm, &k.err) == 0, "%s", k.err.msg);
    MM_EXPECT(Tm == T, "T %lld vs %lld", (long long)Tm, (long long)T);
    mm_conf_diff d0 = vk_diff(mono, lat, 32 * T), d1 = vk_diff(mono + 32 * T, lat, 32 * T);
    MM_EXPECT(d0.max_abs < 1e-5 && d1.max_abs < 1e-5, "mono: %g / %g", d0.max_abs, d1.max_abs);
    MM_EXPECT(mm_audio_vae_encode(k.audio, k.ctx, &ch0, 3, 100, &mono, &Tm, &k.err) != 0, "3 channels accepted");
    free(mono);
    free(lat);
    vk_close(&k);
}

/* The composed alias-free SnakeBeta against a direct double-precision
 * evaluation of its definition, at lengths 1..6 where every output touches
 * the replicated edges. */
static void test_alias_free_direct(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, 0, MM_VAE_DECODER) == 0, "%s", k.err.msg);
    const av_act *act = &k.audio->amps[0].acts[0];
    const int64_t C = act->alpha.shape[0], K = act->up_w.shape[2];
    const float *fu = act->up_w.data, *fd = act->down_w.data, *al = act->alpha.data, *be = act->beta.data;
    for (int64_t L = 1; L <= 6; L++) {
        float *x = malloc(sizeof(float) * (size_t)(C * L));
        for (int64_t i = 0; i < C * L; i++)
            x[i] = sinf((float)i * 0.7f + 0.3f) * 1.5f;
        mm_tensor tx = mm_tensor_wrap(x, mm_cpu(), MM_F32, 3, MM_SHAPE(1, C, L)), out;
        MM_REQUIRE(av_alias_free(k.audio, k.ctx, act, &tx, &out, false) == 0, "alias-free failed");
        const float *o = out.data;
        double worst = 0;
        for (int64_t c = 0; c < C; c++) {
            const int pad = (int)(K / 2 - 1), crop = pad * 2 + (int)(K - 2) / 2;
            double up[64], xp[32], yp[80];
            for (int64_t i = 0; i < L + 2 * pad; i++) {
                int64_t s = i - pad < 0 ? 0 : (i - pad >= L ? L - 1 : i - pad);
                xp[i] = x[c * L + s];
            }
            for (int64_t n = 0; n < 2 * L; n++) { /* up-sampled sample n = full transposed conv at n + crop */
                double v = 0;
                for (int64_t i = 0; i < L + 2 * pad; i++) {
                    int64_t kk = n + crop - 2 * i;
                    if (kk >= 0 && kk < K)
                        v += xp[i] * (fu[c * K + kk] / 2.0) * 2.0;
                }
                double a = exp(al[c]), b = exp(be[c]), s = sin(a * v);
                up[n] = v + s * s / (b + 1e-9);
            }
            const int dl = (int)(K / 2 - 1);
            for (int64_t i = 0; i < 2 * L + K - 1; i++) {
                int64_t s = i - dl < 0 ? 0 : (i - dl >= 2 * L ? 2 * L - 1 : i - dl);
                yp[i] = up[s];
            }
            for (int64_t m = 0; m < L; m++) {
                double v = 0;
                for (int64_t kk = 0; kk < K; kk++)
                    v += yp[2 * m + kk] * fd[c * K + kk];
                worst = fmax(worst, fabs(v - o[c * L + m]));
            }
        }
        MM_EXPECT(worst < 2e-5, "L = %lld: off by %g", (long long)L, worst);
        mm_tensor_free(&out);
        free(x);
    }
    vk_close(&k);
}

/* A = round(5N/3) latents for N frames at 24 fps (40 per second). */
static void test_latent_counts(void)
{
    const int64_t pairs[][2] = {{22, 37}, {73, 122}, {90, 150}, {124, 207}, {141, 235}, {1, 2}, {2, 3}, {3, 5}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        MM_EXPECT(mm_audio_vae_latents_for_frames(pairs[i][0]) == pairs[i][1], "%lld frames -> %lld, %lld expected",
                  (long long)pairs[i][0], (long long)mm_audio_vae_latents_for_frames(pairs[i][0]),
                  (long long)pairs[i][1]);
}

/* The released audio file's layout is not the video one: loading the wrong
 * file is a clear error. */
static void test_wrong_file(void)
{
    char path[4096];
    mm_ctx *ctx;
    mm_error err;
    MM_REQUIRE(mm_ctx_create(&ctx, mm_cpu(), 1, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/vae/video_vae.safetensors", mm_test_data_dir());
    mm_audio_vae *av = NULL;
    MM_EXPECT(mm_audio_vae_load(&av, path, NULL, MM_VAE_BOTH, ctx, &err) != 0 && strstr(err.msg, "not found"),
              "video file as audio: '%s'", err.msg);
    snprintf(path, sizeof path, "%s/vae/audio_vae.safetensors", mm_test_data_dir());
    mm_video_vae *vv = NULL;
    MM_EXPECT(mm_video_vae_load(&vv, path, NULL, MM_VAE_BOTH, ctx, &err) != 0 && strstr(err.msg, "not found"),
              "audio file as video: '%s'", err.msg);
    /* the kit's audio VAE with the released rates: the kernels tell */
    MM_EXPECT(mm_audio_vae_load(&av, path, NULL, MM_VAE_BOTH, ctx, &err) != 0, "released rates accepted on the kit");
    mm_ctx_destroy(ctx);
}

int main(void)
{
    MM_RUN(test_decode);
    MM_RUN(test_encode);
    MM_RUN(test_alias_free_direct);
    MM_RUN(test_latent_counts);
    MM_RUN(test_wrong_file);
    return mm_test_exit();
}
