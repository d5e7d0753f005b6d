#include "model/text/qwen3vl_config.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static int get_int(const json_t *obj, const char *key, const char *where, int64_t *out, mm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return mm_fail(err, "%s: missing key \"%s\"", where, key);
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    /* Some writers emit integral values as floats (5000000.0); one outside
     * int64 (1e300) has no integer value, and converting it is undefined. */
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return mm_fail(err, "%s: \"%s\" must be an integer (within int64)", where, key);
}

static int get_int32(const json_t *obj, const char *key, const char *where, int *out, mm_error *err)
{
    int64_t v;
    if (get_int(obj, key, where, &v, err) < 0)
        return -1;
    if (v < INT32_MIN || v > INT32_MAX)
        return mm_fail(err, "%s: \"%s\" = %lld is out of range", where, key, (long long)v);
    *out = (int)v;
    return 0;
}

static int get_num(const json_t *obj, const char *key, const char *where, double *out, mm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return mm_fail(err, "%s: missing key \"%s\"", where, key);
    if (!json_is_number(v))
        return mm_fail(err, "%s: \"%s\" must be a number", where, key);
    *out = json_number_value(v);
    return 0;
}

static int get_int_array(const json_t *obj, const char *key, const char *where, int *out, int max, int *n,
                         mm_error *err)
{
    const json_t *a = json_object_get(obj, key);
    if (!a)
        return mm_fail(err, "%s: missing key \"%s\"", where, key);
    if (!json_is_array(a))
        return mm_fail(err, "%s: \"%s\" must be an array of integers", where, key);
    size_t len = json_array_size(a);
    if ((int)len > max)
        return mm_fail(err, "%s: \"%s\" has %zu entries, at most %d are supported", where, key, len, max);
    for (size_t i = 0; i < len; i++) {
        const json_t *e = json_array_get(a, i);
        if (!json_is_integer(e))
            return mm_fail(err, "%s: \"%s\"[%zu] must be an integer", where, key, i);
        json_int_t x = json_integer_value(e);
        if (x < INT32_MIN || x > INT32_MAX)
            return mm_fail(err, "%s: \"%s\"[%zu] = %lld is out of range", where, key, i, (long long)x);
        out[i] = (int)x;
    }
    *n = (int)len;
    return 0;
}

/* rope_theta and the mrope layout moved between transformers versions:
 * 4.x writes text_config.rope_theta + rope_scaling{mrope_section,...}; 5.x may
 * write rope_parameters{rope_theta, mrope_section, ...}. Accept both. */
static int parse_rope(mm_qwen3vl_text_config *t, const json_t *tc, mm_error *err)
{
    const char *where = "text_config";
    const json_t *rp = json_object_get(tc, "rope_parameters");
    const json_t *rs = json_object_get(tc, "rope_scaling");
    const json_t *layout = json_is_object(rp) && json_object_get(rp, "mrope_section") ? rp : rs;
    if (json_object_get(tc, "rope_theta")) {
        if (get_num(tc, "rope_theta", where, &t->rope_theta, err) < 0)
            return -1;
    } else if (json_is_object(rp)) {
        if (get_num(rp, "rope_theta", "text_config.rope_parameters", &t->rope_theta, err) < 0)
            return -1;
    } else {
        return mm_fail(err, "%s: missing key \"rope_theta\" (nor rope_parameters.rope_theta)", where);
    }
    if (!json_is_object(layout))
        return mm_fail(err, "%s: missing \"rope_scaling\" / \"rope_parameters\" with \"mrope_section\"", where);
    int n = 0;
    if (get_int_array(layout, "mrope_section", "text_config.rope_scaling", t->mrope_section, 3, &n, err) < 0)
        return -1;
    if (n != 3)
        return mm_fail(err, "text_config.rope_scaling: mrope_section must have 3 entries (T, H, W), has %d", n);
    const json_t *il = json_object_get(layout, "mrope_interleaved");
    /* Qwen3-VL is interleaved; the flag is absent only in configs written before it existed. */
    t->mrope_interleaved = il ? json_is_true(il) : true;
    const json_t *type = json_object_get(layout, "rope_type");
    if (!type)
        type = json_object_get(layout, "type");
    if (type && json_is_string(type) && strcmp(json_string_value(type), "default") != 0 &&
        strcmp(json_string_value(type), "mrope") != 0)
        return mm_fail(err, "text_config: rope_type \"%s\" is not supported (default/mrope only)",
                       json_string_value(type));
    return 0;
}

static int parse_text(mm_qwen3vl_text_config *t, const json_t *tc, mm_error *err)
{
    const char *w = "text_config";
    int64_t maxpos;
    double eps;
    if (get_int32(tc, "hidden_size", w, &t->hidden, err) < 0 ||
        get_int32(tc, "num_attention_heads", w, &t->n_heads, err) < 0 ||
        get_int32(tc, "num_key_value_heads", w, &t->n_kv_heads, err) < 0 ||
        get_int32(tc, "intermediate_size", w, &t->intermediate, err) < 0 ||
        get_int32(tc, "num_hidden_layers", w, &t->n_layers, err) < 0 ||
        get_int32(tc, "vocab_size", w, &t->vocab, err) < 0 || get_num(tc, "rms_norm_eps", w, &eps, err) < 0 ||
        get_int(tc, "max_position_embeddings", w, &maxpos, err) < 0)
        return -1;
    /* head_dim is explicit in Qwen3 configs; older ones derive it. */
    if (json_object_get(tc, "head_dim")) {
        if (get_int32(tc, "head_dim", w, &t->head_dim, err) < 0)
            return -1;
    } else {
        if (t->n_heads <= 0 || t->hidden % t->n_heads)
            return mm_fail(err, "text_config: no head_dim and hidden_size %d not divisible by %d heads", t->hidden,
                           t->n_heads);
        t->head_dim = t->hidden / t->n_heads;
    }
    const json_t *act = json_object_get(tc, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return mm_fail(err, "text_config: hidden_act must be \"silu\" (SwiGLU)");
    const json_t *bias = json_object_get(tc, "attention_bias");
    if (bias && json_is_true(bias))
        return mm_fail(err, "text_config: attention_bias true is not supported (the H3 conditioner has none)");
    if (maxpos < 1)
        return mm_fail(err, "text_config: max_position_embeddings %lld must be positive", (long long)maxpos);
    t->rms_eps = (float)eps;
    t->max_positions = maxpos;
    return parse_rope(t, tc, err);
}

static int parse_vision(mm_qwen3vl_vision_config *v, const json_t *vc, mm_error *err)
{
    const char *w = "vision_config";
    if (get_int32(vc, "depth", w, &v->depth, err) < 0 || get_int32(vc, "hidden_size", w, &v->hidden, err) < 0 ||
        get_int32(vc, "num_heads", w, &v->n_heads, err) < 0 ||
        get_int32(vc, "intermediate_size", w, &v->intermediate, err) < 0 ||
        get_int32(vc, "patch_size", w, &v->patch, err) < 0 ||
        get_int32(vc, "temporal_patch_size", w, &v->temporal_patch, err) < 0 ||
        get_int32(vc, "spatial_merge_size", w, &v->merge, err) < 0 ||
        get_int32(vc, "in_channels", w, &v->in_channels, err) < 0 ||
        get_int32(vc, "out_hidden_size", w, &v->out_hidden, err) < 0 ||
        get_int32(vc, "num_position_embeddings", w, &v->num_pos_embed, err) < 0 ||
        get_int_array(vc, "deepstack_visual_indexes", w, v->deepstack, MM_QWEN3VL_MAX_DEEPSTACK, &v->n_deepstack,
                      err) < 0)
        return -1;
    const json_t *act = json_object_get(vc, "hidden_act");
    if (!act || !json_is_string(act))
        return mm_fail(err, "vision_config: missing key \"hidden_act\"");
    const char *a = json_string_value(act);
    if (!strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_new") || !strcmp(a, "gelu_fast"))
        v->gelu_tanh = true;
    else if (!strcmp(a, "gelu"))
        v->gelu_tanh = false;
    else
        return mm_fail(err, "vision_config: hidden_act \"%s\" is not supported (gelu_pytorch_tanh or gelu)", a);
    return 0;
}

static int get_token_id(const json_t *root, const char *key, int32_t *out, mm_error *err)
{
    int v = 0;
    if (get_int32(root, key, "config", &v, err) < 0)
        return -1;
    *out = v;
    return 0;
}

int mm_qwen3vl_pos_side(const mm_qwen3vl_vision_config *v)
{
    /* in long long: the side of INT_MAX rounds to 46341, whose square is not an int */
    long long s = llround(sqrt((double)v->num_pos_embed));
    return s * s == v->num_pos_embed ? (int)s : -1;
}

int mm_qwen3vl_config_validate(const mm_qwen3vl_config *cfg, mm_error *err)
{
    const mm_qwen3vl_text_config *t = &cfg->text;
    const mm_qwen3vl_vision_config *v = &cfg->vision;
    if (t->hidden <= 0 || t->n_heads <= 0 || t->n_kv_heads <= 0 || t->head_dim <= 0 || t->intermediate <= 0 ||
        t->n_layers <= 0 || t->vocab <= 0)
        return mm_fail(err, "text_config: sizes must be positive");
    if (t->n_heads % t->n_kv_heads)
        return mm_fail(err, "text_config: %d attention heads are not a multiple of %d key/value heads", t->n_heads,
                       t->n_kv_heads);
    if (t->head_dim % 2)
        return mm_fail(err, "text_config: head_dim %d must be even (rotary halves)", t->head_dim);
    /* in int64: huge sections once wrapped around to the right sum */
    int64_t sec = 0;
    for (int i = 0; i < 3; i++) {
        if (t->mrope_section[i] < 0)
            return mm_fail(err, "text_config: mrope_section [%d, %d, %d] has a negative entry", t->mrope_section[0],
                           t->mrope_section[1], t->mrope_section[2]);
        sec += t->mrope_section[i];
    }
    if (sec != t->head_dim / 2)
        return mm_fail(err, "text_config: mrope_section [%d, %d, %d] sums to %lld, head_dim/2 is %d",
                       t->mrope_section[0], t->mrope_section[1], t->mrope_section[2], (long long)sec,
                       t->head_dim / 2);
    /* Interleaved: H takes every third frequency from 1, W from 2, each for
     * 3*section slots; both runs must fit in the head_dim/2 frequencies. */
    if (t->mrope_interleaved &&
        (3 * (int64_t)t->mrope_section[1] > t->head_dim / 2 || 3 * (int64_t)t->mrope_section[2] > t->head_dim / 2))
        return mm_fail(err, "text_config: interleaved mrope_section [%d, %d, %d] does not fit head_dim/2 = %d",
                       t->mrope_section[0], t->mrope_section[1], t->mrope_section[2], t->head_dim / 2);
    if (!(t->rope_theta > 0) || !(t->rms_eps > 0))
        return mm_fail(err, "text_config: rope_theta and rms_norm_eps must be positive");
    if (v->depth <= 0 || v->hidden <= 0 || v->n_heads <= 0 || v->intermediate <= 0 || v->patch <= 0 ||
        v->temporal_patch <= 0 || v->merge <= 0 || v->in_channels <= 0 || v->out_hidden <= 0)
        return mm_fail(err, "vision_config: sizes must be positive");
    if (v->hidden % v->n_heads)
        return mm_fail(err, "vision_config: hidden_size %d not divisible by %d heads", v->hidden, v->n_heads);
    int vhd = v->hidden / v->n_heads;
    if (vhd % 4)
        return mm_fail(err, "vision_config: head_dim %d must be a multiple of 4 (2-D rotary halves)", vhd);
    if (mm_qwen3vl_pos_side(v) < 2)
        return mm_fail(err, "vision_config: num_position_embeddings %d is not a square of side >= 2",
                       v->num_pos_embed);
    for (int i = 0; i < v->n_deepstack; i++)
        if (v->deepstack[i] < 0 || v->deepstack[i] >= v->depth)
            return mm_fail(err, "vision_config: deepstack index %d outside the %d blocks", v->deepstack[i], v->depth);
    if (v->out_hidden != t->hidden)
        return mm_fail(err, "vision_config: out_hidden_size %d differs from the text hidden_size %d", v->out_hidden,
                       t->hidden);
    return 0;
}

int mm_qwen3vl_config_from_json(mm_qwen3vl_config *cfg, const void *json, mm_error *err)
{
    const json_t *root = json;
    memset(cfg, 0, sizeof *cfg);
    if (!json_is_object(root))
        return mm_fail(err, "config: a JSON object is expected");
    const json_t *tc = json_object_get(root, "text_config");
    const json_t *vc = json_object_get(root, "vision_config");
    if (!json_is_object(tc))
        return mm_fail(err, "config: missing object \"text_config\" (a Qwen3-VL config is expected)");
    if (!json_is_object(vc))
        return mm_fail(err, "config: missing object \"vision_config\" (a Qwen3-VL config is expected)");
    if (parse_text(&cfg->text, tc, err) < 0 || parse_vision(&cfg->vision, vc, err) < 0)
        return -1;
    if (get_token_id(root, "image_token_id", &cfg->image_token_id, err) < 0 ||
        get_token_id(root, "video_token_id", &cfg->video_token_id, err) < 0 ||
        get_token_id(root, "vision_start_token_id", &cfg->vision_start_token_id, err) < 0 ||
        get_token_id(root, "vision_end_token_id", &cfg->vision_end_token_id, err) < 0)
        return -1;
    return mm_qwen3vl_config_validate(cfg, err);
}

static json_t *load_json(const char *path, mm_error *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        mm_fail(err, "%s: line %d: %s", path, je.line, je.text);
    return root;
}

int mm_qwen3vl_config_load(mm_qwen3vl_config *cfg, const char *path, mm_error *err)
{
    json_t *root = load_json(path, err);
    if (!root)
        return -1;
    int rc = mm_qwen3vl_config_from_json(cfg, root, err);
    json_decref(root);
    return rc < 0 ? mm_error_prefix(err, "%s", path) : 0;
}

static int get_float3(const json_t *obj, const char *key, float out[3], mm_error *err)
{
    const json_t *a = json_object_get(obj, key);
    if (json_is_number(a)) {
        out[0] = out[1] = out[2] = (float)json_number_value(a);
        return 0;
    }
    if (!json_is_array(a) || json_array_size(a) != 3)
        return mm_fail(err, "processor: \"%s\" must be a number or 3 numbers", key);
    for (int i = 0; i < 3; i++) {
        const json_t *e = json_array_get(a, (size_t)i);
        if (!json_is_number(e))
            return mm_fail(err, "processor: \"%s\"[%d] must be a number", key, i);
        out[i] = (float)json_number_value(e);
    }
    return 0;
}

int mm_qwen3vl_processor_config_from_json(mm_qwen3vl_processor_config *pc, const void *json, mm_error *err)
{
    const json_t *root = json;
    const char *w = "processor";
    memset(pc, 0, sizeof *pc);
    if (!json_is_object(root))
        return mm_fail(err, "processor: a JSON object is expected");
    /* The Qwen3-VL JSONs carry the pixel bounds as size{shortest_edge,
     * longest_edge}; Qwen2-VL era files use min_pixels / max_pixels. */
    const json_t *size = json_object_get(root, "size");
    if (json_is_object(size) && json_object_get(size, "shortest_edge")) {
        if (get_int(size, "shortest_edge", "processor.size", &pc->min_pixels, err) < 0 ||
            get_int(size, "longest_edge", "processor.size", &pc->max_pixels, err) < 0)
            return -1;
    } else {
        if (get_int(root, "min_pixels", w, &pc->min_pixels, err) < 0 ||
            get_int(root, "max_pixels", w, &pc->max_pixels, err) < 0)
            return -1;
    }
    if (get_int32(root, "patch_size", w, &pc->patch, err) < 0 ||
        get_int32(root, "temporal_patch_size", w, &pc->temporal_patch, err) < 0 ||
        get_int32(root, "merge_size", w, &pc->merge, err) < 0 || get_float3(root, "image_mean", pc->mean, err) < 0 ||
        get_float3(root, "image_std", pc->std, err) < 0)
        return -1;
    if (pc->patch <= 0 || pc->temporal_patch <= 0 || pc->merge <= 0)
        return mm_fail(err, "processor: patch_size, temporal_patch_size and merge_size must be positive");
    if (pc->min_pixels <= 0 || pc->max_pixels < pc->min_pixels)
        return mm_fail(err, "processor: pixel bounds [%lld, %lld] are not a valid range", (long long)pc->min_pixels,
                       (long long)pc->max_pixels);
    for (int c = 0; c < 3; c++)
        if (!(pc->std[c] > 0))
            return mm_fail(err, "processor: image_std must be positive");
    const json_t *rf = json_object_get(root, "rescale_factor");
    if (rf && (!json_is_number(rf) || fabs(json_number_value(rf) - 1.0 / 255.0) > 1e-12))
        return mm_fail(err, "processor: rescale_factor must be 1/255");
    return 0;
}

int mm_qwen3vl_processor_config_load(mm_qwen3vl_processor_config *pc, const char *path, mm_error *err)
{
    json_t *root = load_json(path, err);
    if (!root)
        return -1;
    int rc = mm_qwen3vl_processor_config_from_json(pc, root, err);
    json_decref(root);
    return rc < 0 ? mm_error_prefix(err, "%s", path) : 0;
}
