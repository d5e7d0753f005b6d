/* Qwen3-VL configuration parsing: the kit's config, the release's shapes,
 * both rope spellings, and clear errors for missing or inconsistent keys. */
#include "model/text/qwen3vl_config.h"
#include "text_kit.h"

static mm_error err;

static int parse(const char *text, mm_qwen3vl_config *cfg)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        return mm_fail(&err, "test JSON: %s", je.text);
    int rc = mm_qwen3vl_config_from_json(cfg, j, &err);
    json_decref(j);
    return rc;
}

/* The 32B release's dimensions, written as its config.json spells them. */
#define RELEASE_TEXT                                                                                                \
    "\"text_config\": {\"hidden_size\": 5120, \"num_attention_heads\": 64, \"num_key_value_heads\": 8,"            \
    " \"head_dim\": 128, \"intermediate_size\": 25600, \"num_hidden_layers\": 64, \"vocab_size\": 151936,"         \
    " \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 262144, \"hidden_act\": \"silu\","                      \
    " \"attention_bias\": false, \"rope_theta\": 5000000,"                                                          \
    " \"rope_scaling\": {\"mrope_interleaved\": true, \"mrope_section\": [24, 20, 20], \"rope_type\": \"default\"}}"
#define RELEASE_VISION                                                                                              \
    "\"vision_config\": {\"deepstack_visual_indexes\": [8, 16, 24], \"depth\": 27, \"hidden_act\":"               \
    " \"gelu_pytorch_tanh\", \"hidden_size\": 1152, \"in_channels\": 3, \"intermediate_size\": 4304,"              \
    " \"num_heads\": 16, \"num_position_embeddings\": 2304, \"out_hidden_size\": 5120, \"patch_size\": 16,"        \
    " \"spatial_merge_size\": 2, \"temporal_patch_size\": 2}"
#define RELEASE_IDS                                                                                                 \
    "\"image_token_id\": 151655, \"video_token_id\": 151656, \"vision_start_token_id\": 151652,"                  \
    " \"vision_end_token_id\": 151653"

static void test_release_config(void)
{
    mm_qwen3vl_config c;
    TK_OK(parse("{" RELEASE_TEXT ", " RELEASE_VISION ", " RELEASE_IDS "}", &c), "%s", err.msg);
    MM_EXPECT(c.text.hidden == 5120 && c.text.n_heads == 64 && c.text.n_kv_heads == 8 && c.text.head_dim == 128,
              "text sizes");
    MM_EXPECT(c.text.intermediate == 25600 && c.text.n_layers == 64 && c.text.vocab == 151936, "text sizes 2");
    MM_EXPECT(c.text.rope_theta == 5e6 && c.text.mrope_interleaved && c.text.mrope_section[0] == 24 &&
                  c.text.mrope_section[1] == 20 && c.text.mrope_section[2] == 20,
              "rope");
    MM_EXPECT(c.vision.depth == 27 && c.vision.hidden == 1152 && c.vision.n_heads == 16 && c.vision.gelu_tanh &&
                  c.vision.n_deepstack == 3 && c.vision.deepstack[2] == 24 && mm_qwen3vl_pos_side(&c.vision) == 48,
              "vision");
    MM_EXPECT(c.image_token_id == 151655 && c.video_token_id == 151656 && c.vision_start_token_id == 151652 &&
                  c.vision_end_token_id == 151653,
              "ids");
}

static void test_kit_config(void)
{
    text_kit kit;
    if (text_kit_open(&kit) < 0)
        return;
    mm_qwen3vl_config c;
    int rc = mm_qwen3vl_config_from_json(&c, json_object_get(kit.manifest, "hf_config"), &err);
    const json_t *t = json_object_get(json_object_get(kit.manifest, "config"), "text");
    const json_t *v = json_object_get(json_object_get(kit.manifest, "config"), "vision");
    MM_EXPECT(rc == 0, "%s", err.msg);
    MM_EXPECT(c.text.hidden == json_integer_value(json_object_get(t, "hidden")) &&
                  c.text.n_heads == json_integer_value(json_object_get(t, "heads")) &&
                  c.text.n_kv_heads == json_integer_value(json_object_get(t, "kv_heads")) &&
                  c.text.intermediate == json_integer_value(json_object_get(t, "ffn")) &&
                  c.text.n_layers == json_integer_value(json_object_get(t, "layers_total")),
              "text config agrees with manifest.config.text");
    MM_EXPECT(c.vision.hidden == json_integer_value(json_object_get(v, "hidden")) &&
                  c.vision.depth == json_integer_value(json_object_get(v, "depth")) &&
                  mm_qwen3vl_pos_side(&c.vision) == json_integer_value(json_object_get(v, "pos_side")),
              "vision config agrees with manifest.config.vision");
    text_kit_close(&kit);
}

static void test_rope_parameters_spelling(void)
{
    /* transformers 5 writes rope_parameters{rope_theta, mrope_section}. */
    mm_qwen3vl_config c;
    const char *text =
        "\"text_config\": {\"hidden_size\": 256, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
        " \"head_dim\": 128, \"intermediate_size\": 512, \"num_hidden_layers\": 6, \"vocab_size\": 4096,"
        " \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 262144,"
        " \"rope_parameters\": {\"rope_theta\": 1000000.0, \"mrope_section\": [24, 20, 20],"
        " \"mrope_interleaved\": true, \"rope_type\": \"default\"}}";
    const char *vision =
        "\"vision_config\": {\"deepstack_visual_indexes\": [0, 1, 2], \"depth\": 4, \"hidden_act\": \"gelu\","
        " \"hidden_size\": 144, \"in_channels\": 3, \"intermediate_size\": 288, \"num_heads\": 2,"
        " \"num_position_embeddings\": 36, \"out_hidden_size\": %d, \"patch_size\": 16,"
        " \"spatial_merge_size\": 2, \"temporal_patch_size\": 2}";
    char v[1024], j[4096];
    snprintf(v, sizeof v, vision, 256);
    snprintf(j, sizeof j, "{%s, %s, %s}", text, v, RELEASE_IDS);
    TK_OK(parse(j, &c), "%s", err.msg);
    MM_EXPECT(c.text.rope_theta == 1e6 && c.text.mrope_interleaved && c.text.mrope_section[1] == 20 &&
                  !c.vision.gelu_tanh,
              "rope_parameters read, erf gelu");
    /* out_hidden 5120 != text hidden 256: refused with both numbers named. */
    snprintf(v, sizeof v, vision, 5120);
    snprintf(j, sizeof j, "{%s, %s, %s}", text, v, RELEASE_IDS);
    MM_EXPECT(parse(j, &c) < 0 && strstr(err.msg, "5120") && strstr(err.msg, "256"), "%s", err.msg);
}

static void test_errors(void)
{
    mm_qwen3vl_config c;
    MM_EXPECT(parse("{" RELEASE_VISION ", " RELEASE_IDS "}", &c) < 0 && strstr(err.msg, "text_config"), "%s", err.msg);
    MM_EXPECT(parse("{" RELEASE_TEXT ", " RELEASE_VISION "}", &c) < 0 && strstr(err.msg, "image_token_id"), "%s",
              err.msg);
    const char *bad_sections =
        "{\"text_config\": {\"hidden_size\": 5120, \"num_attention_heads\": 64, \"num_key_value_heads\": 8,"
        " \"head_dim\": 128, \"intermediate_size\": 25600, \"num_hidden_layers\": 64, \"vocab_size\": 151936,"
        " \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 262144, \"rope_theta\": 5000000,"
        " \"rope_scaling\": {\"mrope_section\": [16, 24, 24], \"mrope_interleaved\": true}}, " RELEASE_VISION
        ", " RELEASE_IDS "}";
    MM_EXPECT(parse(bad_sections, &c) < 0 && strstr(err.msg, "mrope_section"), "%s", err.msg);
    const char *bad_heads =
        "{\"text_config\": {\"hidden_size\": 5120, \"num_attention_heads\": 60, \"num_key_value_heads\": 8,"
        " \"head_dim\": 128, \"intermediate_size\": 25600, \"num_hidden_layers\": 64, \"vocab_size\": 151936,"
        " \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 262144, \"rope_theta\": 5000000,"
        " \"rope_scaling\": {\"mrope_section\": [24, 20, 20], \"mrope_interleaved\": true}}, " RELEASE_VISION
        ", " RELEASE_IDS "}";
    MM_EXPECT(parse(bad_heads, &c) < 0 && strstr(err.msg, "key/value"), "%s", err.msg);
    mm_qwen3vl_processor_config pc;
    json_t *p = json_loads("{\"size\": {\"shortest_edge\": 4096}, \"patch_size\": 16}", 0, NULL);
    MM_EXPECT(mm_qwen3vl_processor_config_from_json(&pc, p, &err) < 0 && strstr(err.msg, "longest_edge"), "%s",
              err.msg);
    json_decref(p);
}

/* The release config with the first FROM replaced by TO. */
static int parse_release_with(const char *from, const char *to, mm_qwen3vl_config *c)
{
    const char *base = "{" RELEASE_TEXT ", " RELEASE_VISION ", " RELEASE_IDS "}";
    const char *at = strstr(base, from);
    if (!at)
        return mm_fail(&err, "test: '%s' is not in the release config", from);
    char j[4096];
    snprintf(j, sizeof j, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    return parse(j, c);
}

/* Numbers a config file can hold but the sizes cannot: a float far outside
 * int64 (converting it was undefined; 1e300 became INT64_MIN positions),
 * values that wrapped int arithmetic in the checks (a square side, the mrope
 * section sum) and array entries that were truncated to int. */
static void test_out_of_range_numbers(void)
{
    static const struct {
        const char *from, *to, *named;
    } cases[] = {
        {"\"max_position_embeddings\": 262144", "\"max_position_embeddings\": 1e300", "max_position_embeddings"},
        {"\"max_position_embeddings\": 262144", "\"max_position_embeddings\": -1e300", "max_position_embeddings"},
        {"\"num_position_embeddings\": 2304", "\"num_position_embeddings\": 2147483647", "num_position_embeddings"},
        {"\"mrope_interleaved\": true, \"mrope_section\": [24, 20, 20]",
         "\"mrope_interleaved\": false, \"mrope_section\": [2147483647, 2147483647, 66]", "mrope_section"},
        {"\"mrope_interleaved\": true, \"mrope_section\": [24, 20, 20]",
         "\"mrope_interleaved\": false, \"mrope_section\": [-10, 40, 34]", "mrope_section"},
        {"[8, 16, 24]", "[8, 16, 4294967320]", "deepstack_visual_indexes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mm_qwen3vl_config c;
        err.msg[0] = '\0';
        int rc = parse_release_with(cases[i].from, cases[i].to, &c);
        MM_EXPECT(rc < 0 && strstr(err.msg, cases[i].named) && !strstr(err.msg, "test:"), "%s: rc %d, '%s'",
                  cases[i].to, rc, err.msg);
    }
}

int main(void)
{
    MM_RUN(test_release_config);
    MM_RUN(test_kit_config);
    MM_RUN(test_rope_parameters_spelling);
    MM_RUN(test_errors);
    MM_RUN(test_out_of_range_numbers);
    return mm_test_exit();
}
