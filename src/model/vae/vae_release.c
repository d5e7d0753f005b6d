/* The released configuration of both VAEs: the numbers the checkpoints
 * cannot tell (strides, heads, tile geometry, clip length) and the
 * normalization constants, which the released files do not carry.
 *
 * Source: the MiniMax-H3 release, FL2VA/video_vae/config.json (latents_mean,
 * latents_std, vae_clip_length, vae_token_drop, vae_tile_size,
 * vae_tile_overlap_min), FL2VA/video_vae/source/config.json (space_down,
 * time_down, ch_mult, vit_decoder_kwargs: dim_head 64, rope_theta 100,
 * rope_dim_ratio 0.75; pixel_norm_type imagenet), FL2VA/audio_vae/config.json
 * (latents_mean, latents_std, sample_rate) and metadata.json (encoder_rates,
 * decoder_rates). The ImageNet mean/std and the audio head count (8), AMP
 * dilations (1,3,5), residual dilations (1,3,9), GroupNorm (32 groups, eps
 * 1e-6) and norm eps (1e-5) are the reference modules' fixed values
 * (spec vae.md §2.2, §2.3, §2.6, §3.3-3.5). The float literals are the
 * configs' values; C rounds them to the float32 the references hold.
 * tests/unit/test_vae_release.c checks them against the release files. */
#include <string.h>

#include "model/vae/vae.h"

static const float video_latents_mean[24] = {
    0.858090341091156f,    -0.9606591463088989f,  1.0661640167236328f,   -0.5090325474739075f,
    -0.2727581858634949f,  -1.3675414323806763f,  -0.2553254961967468f,  -0.26907554268836975f,
    -0.5376840829849243f,  -0.0464097298681736f,  0.6657370328903198f,   0.19690127670764923f,
    -0.5460608005523682f,  -0.4035342037677765f,  -0.23683024942874908f, 0.25928452610969543f,
    -0.30133944749832153f, 0.211341992020607f,    -1.1206848621368408f,  0.3581933379173279f,
    -0.04225143790245056f, 0.2604829967021942f,   0.22864092886447906f,  0.7056031823158264f,
};
static const float video_latents_std[24] = {
    1.2223774194717407f,  1.2767263650894165f, 1.68317747116088865f, 1.7549455165863037f,
    1.5636216402053833f,  2.194143533706665f,  0.96531379222869875f, 1.05698859691619875f,
    0.841948926448822f,   0.7729952931404114f, 1.8955937623977661f,  0.946841835975647f,
    0.7996809482574463f,  0.44988900423049925f, 0.7197399735450745f, 0.69362932443618775f,
    2.961095094680786f,   2.7694199085235595f, 3.0496184825897215f,  2.1088054180145265f,
    3.276226282119751f,   3.1627357006073f,    2.28168129920959475f, 2.6127843856811525f,
};

static const float audio_latents_mean[32] = {
    -0.020211687488382354f, 0.3876466479950502f,    -0.04398279799186767f,  -0.28591514936373f,
    0.08179686214561671f,   -0.35782641352446604f,  0.040623809960919084f,  -0.01552534501956604f,
    -0.223362481667332f,    0.1821006842509091f,    0.2941778783780663f,    -0.07901167601970885f,
    -0.056815072777201f,    -0.3699028221860095f,   -0.31616315591624855f,  0.5905951377425391f,
    -0.052139568068853864f, 0.013673160263486295f,  -0.03691647864630577f,  0.09732660653298163f,
    -0.3394662328788498f,   -0.30685677538541667f,  -0.24504598907458763f,  -0.034698524462007344f,
    0.02868032184767538f,   -0.21217779266454084f,  -0.1678263169941987f,   0.3221287889040614f,
    -0.1223055851554907f,   0.4356604928128464f,    -0.0502599202236253f,   0.3979258376211797f,
};
static const float audio_latents_std[32] = {
    1.6895524230479284f, 2.76263727217653f,   1.7945344281264435f, 1.6801681847309828f, 1.6390226546605453f,
    2.7788298348882177f, 1.7659090095747236f, 1.6199757612137327f, 2.6336525640336896f, 1.8539356672817833f,
    2.5056497896915633f, 1.811019237886178f,  1.9579657790720237f, 1.6685498243529284f, 1.4922469314453364f,
    3.298670198067373f,  1.9491804496832168f, 1.8720003270431442f, 1.8334080103291832f, 1.6488070416529093f,
    1.6176957696319716f, 1.9131449234774398f, 1.5695245398428617f, 1.6943659940415912f, 1.8318420762504692f,
    1.5540637421583379f, 1.9344930328968526f, 1.599198216109855f,  1.718045989838149f,  1.6307219190837705f,
    1.8661226051202384f, 1.5613768203168363f,
};

void mm_video_vae_options_release(mm_video_vae_options *o)
{
    static const int space_down[6] = {2, 2, 2, 2, 1, 1}, time_down[6] = {1, 2, 2, 1, 1, 1};
    memset(o, 0, sizeof *o);
    o->levels = 6;
    memcpy(o->space_down, space_down, sizeof space_down);
    memcpy(o->time_down, time_down, sizeof time_down);
    o->norm_groups = 32;
    o->groupnorm_eps = 1e-6f;
    o->head_dim = 64;
    o->norm_eps = 1e-5f;
    o->rope_theta = 100.0f;
    o->rope_dim_ratio = 0.75f;
    o->clip_length = 17;
    o->token_drop = 3;
    o->tiling = true;
    o->tile_size = 256;
    o->tile_overlap_min = 64;
    o->n_latent_const = 24;
    memcpy(o->latents_mean, video_latents_mean, sizeof video_latents_mean);
    memcpy(o->latents_std, video_latents_std, sizeof video_latents_std);
    o->pixel_mean[0] = 0.485f, o->pixel_mean[1] = 0.456f, o->pixel_mean[2] = 0.406f;
    o->pixel_std[0] = 0.229f, o->pixel_std[1] = 0.224f, o->pixel_std[2] = 0.225f;
    o->max_batch_tiles = 0;
}

void mm_video_encode_options_release(mm_video_encode_options *o)
{
    o->sample = true;
    o->seed = 42;
    o->fp16_round = true;
}

void mm_audio_vae_options_release(mm_audio_vae_options *o)
{
    static const int enc[5] = {2, 4, 4, 5, 5}, dec[7] = {5, 5, 2, 2, 2, 2, 2};
    memset(o, 0, sizeof *o);
    o->n_encoder_rates = 5;
    memcpy(o->encoder_rates, enc, sizeof enc);
    o->n_decoder_rates = 7;
    memcpy(o->decoder_rates, dec, sizeof dec);
    o->heads = 8;
    o->dilations[0] = 1, o->dilations[1] = 3, o->dilations[2] = 5;
    o->residual_dilations[0] = 1, o->residual_dilations[1] = 3, o->residual_dilations[2] = 9;
    o->layernorm_eps = 1e-5f;
    o->sample_rate = 32000;
    o->n_latent_const = 32;
    memcpy(o->latents_mean, audio_latents_mean, sizeof audio_latents_mean);
    memcpy(o->latents_std, audio_latents_std, sizeof audio_latents_std);
}
