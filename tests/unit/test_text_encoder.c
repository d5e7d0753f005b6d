/* The conditioner's model paths on the CPU against the kit: the nvfp4 AWQ
 * decode (bit-exact unit weights), the vision tower's host tables, and the
 * production conditioner end to end with the prompt cache in front. (The
 * full per-case, per-intermediate check is `mmh3 conformance
 * tests/data/text_encoder`.) */
#include <unistd.h>

#include "backend/ops.h"
#include "model/text/conditioner.h"
#include "model/text/qwen3vl_text.h"
#include "model/text/qwen3vl_vision.h"
#include "text_kit.h"

static text_kit kit;
static mm_qwen3vl_config cfg;
static mm_safetensors *ckpt;
static mm_ctx *ctx;

/* The kit's ids: the manifest's recorded segments folded into its vocabulary. */
static int fold_encode(void *user, const char *text, size_t len, int32_t **ids, size_t *n, mm_error *err)
{
    if (text_kit_segment_encode(user, text, len, ids, n, err) < 0)
        return -1;
    for (size_t i = 0; i < *n; i++)
        (*ids)[i] = (int32_t)text_kit_fold(user, (*ids)[i]);
    return 0;
}

static void test_nvfp4_unit_weights_bit_exact(void)
{
    mm_qwen3vl_text m;
    mm_error err = {{0}};
    TK_OK(mm_qwen3vl_text_load(&m, &cfg, ckpt, 0, false, ctx, &err), "%s", err.msg);
    MM_EXPECT(m.n_layers == json_integer_value(json_object_get(
                                json_object_get(json_object_get(kit.manifest, "config"), "text"), "tap")),
              "tap = layers in the file (%d)", m.n_layers);
    struct {
        const char *unit;
        const mm_linear *lin;
    } u[] = {{"unit.layers.0.self_attn.o_proj", &m.layers[0].o}, {NULL, NULL}};
    char last[96];
    snprintf(last, sizeof last, "unit.layers.%d.mlp.down_proj", m.n_layers - 1);
    u[1].unit = last;
    u[1].lin = &m.layers[m.n_layers - 1].down;
    for (int i = 0; i < 2; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s.w_f32", u[i].unit);
        const mm_st_entry *ref = mm_st_find(kit.cases, name);
        MM_REQUIRE(ref, "%s missing", name);
        mm_tensor w;
        MM_REQUIRE(u[i].lin->format == MM_WEIGHT_NVFP4, "%s: format %s", u[i].unit,
                   mm_weight_format_name(u[i].lin->format));
        TK_OK(mm_tensor_alloc(&w, mm_cpu(), MM_F32, 2, MM_SHAPE(u[i].lin->out_features, u[i].lin->in_features), &err),
              "%s", err.msg);
        mm_linear_dequantize(ctx, &w, u[i].lin);
        MM_EXPECT(mm_ctx_error(ctx, &err) == 0, "%s", err.msg);
        /* Bit for bit up to the sign of zero: the kit's w_f32 holds +0 where
         * the spec's decode (and manifest's fp32_sha256, checked by the kit
         * runner) has -0 codes. */
        const float *a = w.data, *b = ref->data;
        int64_t differ = 0, neg_zero = 0;
        for (int64_t e = 0; e < mm_tensor_numel(&w); e++) {
            if (a[e] != b[e] || (a[e] != 0 && memcmp(&a[e], &b[e], 4)))
                differ++;
            neg_zero += a[e] == 0 && signbit(a[e]);
        }
        MM_EXPECT(differ == 0 && neg_zero > 0, "%s: %lld values differ from w_f32 (%lld -0 codes decoded)", u[i].unit,
                  (long long)differ, (long long)neg_zero);
        snprintf(name, sizeof name, "%s.pre_quant_scale", u[i].unit);
        const mm_st_entry *pq = mm_st_find(kit.cases, name);
        MM_EXPECT(pq && u[i].lin->pre_quant_scale.data &&
                      !memcmp(pq->data, u[i].lin->pre_quant_scale.data, (size_t)u[i].lin->in_features * 2),
                  "%s: AWQ vector", u[i].unit);
        mm_tensor_free(&w);
    }
    MM_EXPECT(m.layers[0].q.pre_quant_scale.data == NULL, "q_proj has no AWQ vector (folded into the norm)");
    mm_qwen3vl_text_free(&m);
}

static void test_vision_tables(void)
{
    mm_qwen3vl_vision v;
    mm_error err = {{0}};
    TK_OK(mm_qwen3vl_vision_load(&v, &cfg, ckpt, ctx, &err), "%s", err.msg);
    const mm_st_entry *g = text_kit_entry(&kit, "fl2va_one", "in.image_grid_thw");
    const mm_st_entry *pe = text_kit_entry(&kit, "fl2va_one", "dbg.vision_image.pos_embed");
    const mm_st_entry *rc = text_kit_entry(&kit, "fl2va_one", "dbg.vision_image.rotary_cos");
    MM_REQUIRE(g && pe && rc, "kit tensors missing");
    int64_t grid[1][3] = {{(int64_t)text_kit_at(g, 0), (int64_t)text_kit_at(g, 1), (int64_t)text_kit_at(g, 2)}};
    int64_t N = grid[0][0] * grid[0][1] * grid[0][2], D = cfg.vision.hidden, HD = D / cfg.vision.n_heads;
    float *pos = malloc(sizeof(float) * (size_t)(N * D)), *cs = malloc(sizeof(float) * (size_t)(N * HD)),
          *sn = malloc(sizeof(float) * (size_t)(N * HD));
    TK_OK(mm_qwen3vl_vision_pos_embed(&v, (const int64_t(*)[3])grid, 1, pos, &err), "%s", err.msg);
    TK_OK(mm_qwen3vl_vision_rotary(&cfg.vision, (const int64_t(*)[3])grid, 1, cs, sn, &err), "%s", err.msg);
    double rel, mx;
    /* f32 taps summed in the reference's order, one bf16 rounding: bit for bit. */
    text_kit_diff(pos, pe, &rel, &mx);
    MM_EXPECT(mx == 0, "pos_embed max_abs %g (bit-exact expected)", mx);
    text_kit_diff(cs, rc, &rel, &mx);
    MM_EXPECT(mx <= 4e-6, "rotary_cos max_abs %g", mx);
    free(pos), free(cs), free(sn);
    mm_qwen3vl_vision_free(&v);
}

static int open_conditioner_mode(mm_conditioner **c, mm_prompt_cache *cache, bool bf16_weights, mm_error *err)
{
    mm_conditioner_options o = {
        .config = cfg, .tokenizer = {fold_encode, kit.manifest}, .cache = cache, .bf16_weights = bf16_weights};
    char path[1200];
    snprintf(path, sizeof path, "%s/text_encoder.safetensors", kit.dir);
    o.checkpoint = path;
    const json_t *pc = json_object_get(kit.manifest, "processor_config");
    if (mm_qwen3vl_processor_config_from_json(&o.image_proc, json_object_get(pc, "image"), err) < 0 ||
        mm_qwen3vl_processor_config_from_json(&o.video_proc, json_object_get(pc, "video"), err) < 0)
        return -1;
    return mm_conditioner_load(c, &o, ctx, err);
}

static int open_conditioner(mm_conditioner **c, mm_prompt_cache *cache, mm_error *err)
{
    return open_conditioner_mode(c, cache, false, err);
}

/* Weights dequantized once at load compute exactly what the per-forward decode does. */
static void test_bf16_resident_weights_identical(void)
{
    mm_error err = {{0}};
    mm_conditioner *a, *b;
    TK_OK(open_conditioner_mode(&a, NULL, false, &err), "%s", err.msg);
    TK_OK(open_conditioner_mode(&b, NULL, true, &err), "%s", err.msg);
    const mm_st_entry *img = text_kit_entry(&kit, "fl2va_one", "raw.image0");
    mm_cond_reference ref = {.kind = MM_PRES_PICTURE, .rgb = img->data, .width = img->shape[1],
                             .height = img->shape[0]};
    const char *prompt =
        json_string_value(json_object_get(json_object_get(json_object_get(kit.manifest, "config"), "prompts"), "fl2va"));
    MM_REQUIRE(prompt, "manifest config.prompts.fl2va missing");
    mm_cond_result ra, rb;
    TK_OK(mm_conditioner_encode(a, ctx, prompt, strlen(prompt), &ref, 1, &ra, NULL, &err), "%s", err.msg);
    TK_OK(mm_conditioner_encode(b, ctx, prompt, strlen(prompt), &ref, 1, &rb, NULL, &err), "%s", err.msg);
    MM_EXPECT(ra.len == rb.len && !memcmp(ra.rows.data, rb.rows.data, mm_tensor_nbytes(&ra.rows)),
              "bf16-resident and per-forward decode differ");
    mm_cond_result_free(&ra), mm_cond_result_free(&rb);
    mm_conditioner_free(a), mm_conditioner_free(b);
}

static void test_conditioner_and_cache(void)
{
    mm_error err = {{0}};
    mm_prompt_cache *cache;
    TK_OK(mm_prompt_cache_create(&cache, NULL, 1 << 24, 0, &err), "%s", err.msg);
    mm_conditioner *c;
    TK_OK(open_conditioner(&c, cache, &err), "%s", err.msg);
    /* fl2va_one: one keyframe and a caption. */
    const json_t *cases = json_object_get(kit.manifest, "cases");
    const json_t *cj = NULL;
    for (size_t i = 0; i < json_array_size(cases); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(cases, i), "name")), "fl2va_one"))
            cj = json_array_get(cases, i);
    MM_REQUIRE(cj, "fl2va_one missing");
    const char *prompt = json_string_value(json_object_get(cj, "prompt"));
    const mm_st_entry *img = text_kit_entry(&kit, "fl2va_one", "raw.image0");
    mm_cond_reference ref = {.kind = MM_PRES_PICTURE, .rgb = img->data, .width = img->shape[1],
                             .height = img->shape[0]};
    mm_cond_result r1, r2, r3;
    TK_OK(mm_conditioner_encode(c, ctx, prompt, strlen(prompt), &ref, 1, &r1, NULL, &err), "%s", err.msg);
    const mm_st_entry *want = text_kit_entry(&kit, "fl2va_one", "out.prompt_embeds");
    const mm_st_entry *tags = text_kit_entry(&kit, "fl2va_one", "out.text_token_tags");
    MM_REQUIRE(r1.len == want->shape[0] && !r1.cached, "rows %lld", (long long)r1.len);
    float *f = malloc(sizeof(float) * (size_t)mm_tensor_numel(&r1.rows));
    for (int64_t i = 0; i < mm_tensor_numel(&r1.rows); i++)
        f[i] = mm_bf16_to_f32(((const uint16_t *)r1.rows.data)[i]);
    double rel, mx;
    text_kit_diff(f, want, &rel, &mx);
    MM_EXPECT(rel <= 0.051 && mx <= 0.66, "prompt_embeds rel_l2 %g max_abs %g", rel, mx);
    for (int64_t i = 0; i < r1.len; i++)
        MM_REQUIRE(r1.tags[i] == (uint8_t)text_kit_at(tags, i), "tag row %lld", (long long)i);
    /* The same request again: served by the cache, byte-identical. */
    TK_OK(mm_conditioner_encode(c, ctx, prompt, strlen(prompt), &ref, 1, &r2, NULL, &err), "%s", err.msg);
    MM_EXPECT(r2.cached && r2.len == r1.len && !memcmp(r2.rows.data, r1.rows.data, mm_tensor_nbytes(&r1.rows)) &&
                  !memcmp(r2.tags, r1.tags, (size_t)r1.len),
              "second encode cached and identical");
    /* One pixel changed: another key, a real encode. */
    uint8_t *px = malloc((size_t)(img->shape[0] * img->shape[1] * 3));
    memcpy(px, img->data, (size_t)(img->shape[0] * img->shape[1] * 3));
    px[100] ^= 1;
    ref.rgb = px;
    TK_OK(mm_conditioner_encode(c, ctx, prompt, strlen(prompt), &ref, 1, &r3, NULL, &err), "%s", err.msg);
    MM_EXPECT(!r3.cached, "a changed keyframe pixel misses the cache");
    mm_prompt_cache_stats st;
    mm_prompt_cache_stats_get(cache, &st);
    MM_EXPECT(st.memory_hits == 1 && st.misses == 2, "hits %llu misses %llu", (unsigned long long)st.memory_hits,
              (unsigned long long)st.misses);
    free(px), free(f);
    mm_cond_result_free(&r1), mm_cond_result_free(&r2), mm_cond_result_free(&r3);
    mm_conditioner_free(c);
    mm_prompt_cache_destroy(cache);
}

static void test_conditioner_errors(void)
{
    mm_error err = {{0}};
    mm_conditioner *c;
    TK_OK(open_conditioner(&c, NULL, &err), "%s", err.msg);
    /* A picture whose size the processor cannot take (aspect > 200). */
    uint8_t px[2 * 500 * 3] = {0};
    mm_cond_reference ref = {.kind = MM_PRES_PICTURE, .rgb = px, .width = 500, .height = 2};
    mm_cond_result r;
    int rc = mm_conditioner_encode(c, ctx, "x", 1, &ref, 1, &r, NULL, &err);
    MM_EXPECT(rc < 0 && strstr(err.msg, "reference 1") && strstr(err.msg, "aspect"), "%s", err.msg);
    /* A video whose times disagree with its frames count is refused by the presentation. */
    mm_conditioner_free(c);
    /* Tokenizer vision ids that disagree with the config are refused at load. */
    mm_qwen3vl_config bad = cfg;
    bad.image_token_id++;
    mm_conditioner_options o = {.config = bad, .tokenizer = {fold_encode, kit.manifest}};
    char path[1200];
    snprintf(path, sizeof path, "%s/text_encoder.safetensors", kit.dir);
    o.checkpoint = path;
    const json_t *pc = json_object_get(kit.manifest, "processor_config");
    mm_qwen3vl_processor_config_from_json(&o.image_proc, json_object_get(pc, "image"), &err);
    mm_qwen3vl_processor_config_from_json(&o.video_proc, json_object_get(pc, "video"), &err);
    rc = mm_conditioner_load(&c, &o, ctx, &err);
    MM_EXPECT(rc < 0 && strstr(err.msg, "image/video"), "%s", err.msg);
    /* A tap past the file's layers. */
    o.config = cfg;
    o.tap = 40;
    rc = mm_conditioner_load(&c, &o, ctx, &err);
    MM_EXPECT(rc < 0 && strstr(err.msg, "hidden_states[40]"), "%s", err.msg);
}

int main(void)
{
    if (text_kit_open(&kit) < 0)
        return 1;
    mm_error err = {{0}};
    char path[1200];
    snprintf(path, sizeof path, "%s/text_encoder.safetensors", kit.dir);
    if (mm_qwen3vl_config_from_json(&cfg, json_object_get(kit.manifest, "hf_config"), &err) < 0 ||
        mm_st_open(&ckpt, path, &err) < 0 || mm_ctx_create(&ctx, mm_cpu(), 0, &err) < 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    MM_RUN(test_nvfp4_unit_weights_bit_exact);
    MM_RUN(test_vision_tables);
    MM_RUN(test_conditioner_and_cache);
    MM_RUN(test_conditioner_errors);
    MM_RUN(test_bf16_resident_weights_identical);
    mm_ctx_destroy(ctx);
    mm_st_close(ckpt);
    text_kit_close(&kit);
    return mm_test_exit();
}
