/* mmh3-gen-tiny: the files it writes load through the real loaders in the
 * expected formats, their quantized values are what the producers' recipes
 * give, and they are deterministic (independent of the thread count). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sha256.h"
#include "formats/embedding.h"
#include "formats/linear.h"
#include "io/checkpoint.h"
#include "io/download.h"
#include "io/safetensors.h"
#include "test_backend_util.h"

static char dir[256], gen[512];
static mm_ctx *ctx;

static int run(const char *env, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s '%s' %s >/dev/null", env, gen, args);
    return system(cmd);
}

static void path_of(char *buf, size_t n, mm_component c)
{
    snprintf(buf, n, "%s/a/%s", dir, mm_component_get(c)->rel_path);
}

static void test_all_files_load_in_their_formats(void)
{
    char args[600];
    snprintf(args, sizeof args, "all --out '%s/a'", dir);
    MM_REQUIRE(run("MMH3_THREADS=3", args) == 0, "generator ran");
    mm_error err = {{0}};
    char p[1024];
    /* DiT: ConvRot linears, F16 AdaLN, F32 islands */
    path_of(p, sizeof p, MM_COMP_DIT_FL2VA);
    mm_safetensors *st;
    MM_REQUIRE(mm_st_open(&st, p, &err) == 0, "%s", err.msg);
    mm_linear lin;
    MM_REQUIRE(mm_linear_load(&lin, st, "blocks.1.mlp.fc1", &err) == 0, "%s", err.msg);
    MM_EXPECT(lin.format == MM_WEIGHT_CONVROT_I8 && lin.group == 256, "fc1 is ConvRot");
    /* every row reaches +-127 exactly once scaled by its absmax */
    const int8_t *q = lin.weight.data;
    int rows_at_127 = 0;
    for (int64_t r = 0; r < lin.out_features; r++) {
        int m = 0;
        for (int64_t k = 0; k < lin.in_features; k++)
            m = abs(q[r * lin.in_features + k]) > m ? abs(q[r * lin.in_features + k]) : m;
        rows_at_127 += m == 127;
    }
    MM_EXPECT(rows_at_127 == lin.out_features, "per-row absmax quantization (%d of %lld rows reach 127)", rows_at_127,
              (long long)lin.out_features);
    /* dequantized (and rotated back) weights have the master's variance 1/K */
    mm_tensor w = tb_zeros(MM_F32, 2, MM_SHAPE(lin.out_features, lin.in_features));
    mm_linear_dequantize(ctx, &w, &lin);
    mm_hadamard_rotate(ctx, &w, &w, 256);
    double ss = 0;
    const float *wv = w.data;
    for (int64_t i = 0; i < lin.out_features * lin.in_features; i++)
        ss += (double)wv[i] * wv[i];
    double var = ss / (double)(lin.out_features * lin.in_features);
    MM_EXPECT(fabs(var * (double)lin.in_features - 1.0) < 0.1, "weight variance %.3g x K", var * lin.in_features);
    mm_tensor_free(&w);
    MM_EXPECT(mm_st_find(st, "adaln_t_table") && mm_st_find(st, "blocks.0.adaln_proj.linear.weight")->dtype == MM_F16,
              "pruned AdaLN layout");
    mm_tensor inv;
    MM_REQUIRE(mm_st_get(st, "rope.inv_freq", &inv, &err) == 0, "%s", err.msg);
    MM_EXPECT(((float *)inv.data)[1] == 1.0f / powf(10000.0f, 2.0f / 32.0f), "inv_freq[1] = 10000^(-1/16) in f32");
    mm_st_close(st);

    /* text encoder: nvfp4 (AWQ on o/down), int8 embedding */
    path_of(p, sizeof p, MM_COMP_TEXT_ENCODER);
    MM_REQUIRE(mm_st_open(&st, p, &err) == 0, "%s", err.msg);
    const char *names[3] = {"model.layers.0.self_attn.q_proj", "model.layers.3.mlp.down_proj",
                            "model.layers.2.self_attn.o_proj"};
    for (int i = 0; i < 3; i++) {
        MM_REQUIRE(mm_linear_load(&lin, st, names[i], &err) == 0, "%s", err.msg);
        MM_EXPECT(lin.format == MM_WEIGHT_NVFP4 && (i > 0) == (lin.pre_quant_scale.data != NULL), "%s nvfp4",
                  names[i]);
        mm_tensor d = tb_zeros(MM_F32, 2, MM_SHAPE(lin.out_features, lin.in_features));
        mm_linear_dequantize(ctx, &d, &lin);
        const float *dv = d.data;
        double s2 = 0, amax = 0;
        int64_t n = lin.out_features * lin.in_features;
        for (int64_t e = 0; e < n; e++) {
            s2 += (double)dv[e] * dv[e];
            amax = fmax(amax, fabs(dv[e]));
        }
        double v = s2 / (double)n * (double)lin.in_features;
        MM_EXPECT(v > 0.8 && v < 1.2, "%s: dequantized variance %.3g x K", names[i], v);
        /* the per-tensor scale maps the largest element onto 6 x 448 */
        MM_EXPECT(fabs(amax / (6.0 * 448.0 * lin.weight_scale_2) - 1.0) < 0.07, "%s: amax %.4g vs scale2 %.4g",
                  names[i], amax, lin.weight_scale_2);
        mm_tensor_free(&d);
    }
    mm_embedding e;
    MM_REQUIRE(mm_embedding_load(&e, st, "model.embed_tokens", &err) == 0 && e.quantized, "%s", err.msg);
    MM_EXPECT(e.vocab == 151936, "the full Qwen vocabulary (real token ids work)");
    mm_st_close(st);

    /* VAEs: the released dtypes */
    path_of(p, sizeof p, MM_COMP_VIDEO_VAE);
    MM_REQUIRE(mm_st_open(&st, p, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_st_find(st, "decoder.transformer_blocks.0.scale1") &&
                  mm_st_find(st, "encoder.down.5.block.0.conv1.weight")->dtype == MM_F16,
              "video VAE: ComfyUI's detection keys, F16");
    mm_st_close(st);
    path_of(p, sizeof p, MM_COMP_AUDIO_VAE);
    MM_REQUIRE(mm_st_open(&st, p, &err) == 0, "%s", err.msg);
    /* `all` gives the audio VAE the released strides (5 encoder, 7 decoder
     * blocks) so the engine runs it with the released options */
    MM_EXPECT(mm_st_find(st, "pre_block.attn.zero_k_bias") && mm_st_count(st) == 915, "audio VAE: %zu tensors",
              mm_st_count(st));
    mm_st_close(st);
    MM_EXPECT(!mm_ctx_failed(ctx), "ctx");
}

static void test_deterministic_across_thread_counts(void)
{
    char args[600], a[1024], b[1024], ha[65], hb[65];
    mm_error err = {{0}};
    snprintf(args, sizeof args, "text-encoder --layers 1 --vocab 1000 --out '%s/t1.safetensors'", dir);
    MM_REQUIRE(run("MMH3_THREADS=1", args) == 0, "run 1");
    snprintf(args, sizeof args, "text-encoder --layers 1 --vocab 1000 --out '%s/t2.safetensors'", dir);
    MM_REQUIRE(run("MMH3_THREADS=4", args) == 0, "run 2");
    snprintf(a, sizeof a, "%s/t1.safetensors", dir);
    snprintf(b, sizeof b, "%s/t2.safetensors", dir);
    MM_REQUIRE(mm_sha256_file(a, ha, &err) == 0 && mm_sha256_file(b, hb, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(ha, hb) == 0, "1 and 4 threads write the same bytes");
    snprintf(args, sizeof args, "text-encoder --layers 1 --vocab 1000 --seed 7 --out '%s/t2.safetensors'", dir);
    MM_REQUIRE(run("", args) == 0, "run 3");
    MM_REQUIRE(mm_sha256_file(b, hb, &err) == 0, "%s", err.msg);
    MM_EXPECT(strcmp(ha, hb) != 0, "another seed, other values");
    snprintf(args, sizeof args, "dit --hidden 300 --out '%s/bad.safetensors' 2>/dev/null", dir);
    MM_EXPECT(run("", args) != 0, "a hidden size off the ConvRot grid is refused");
}

int main(void)
{
    const char *b = getenv("MMH3_BUILD");
    snprintf(gen, sizeof gen, "%s/mmh3-gen-tiny", b ? b : ".");
    if (access(gen, X_OK) != 0) {
        printf("FAIL setup: %s not built\n", gen);
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/mmh3-test-gen-XXXXXX");
    mm_error e = {{0}};
    if (!mkdtemp(dir) || mm_ctx_create(&ctx, mm_cpu(), 0, &e) != 0) {
        printf("FAIL setup: %s\n", e.msg);
        return 1;
    }
    MM_RUN(test_all_files_load_in_their_formats);
    MM_RUN(test_deterministic_across_thread_counts);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", dir);
    mm_ctx_destroy(ctx);
    return mm_test_exit();
}
