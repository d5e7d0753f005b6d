/* Adapter key spellings (fewstep.md §2.2): a tensor name is a prefix, a
 * module and a suffix. The prefix is stripped (any of the producers' own),
 * the suffix says the role (A, B, alpha, a FastVideo dense part, a plain
 * head weight), and the module is matched against the native and the
 * diffusers names of every module an adapter may target. kohya names are the
 * same modules with every '.' flattened to '_' behind "lora_unet_": the
 * templates match them with '.' standing for '_', which is unambiguous for
 * this model's module names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/lora/lora_internal.h"

static const char *const k_prefixes[] = {
    "base_model.model.", "model.diffusion_model.", "diffusion_model.", "transformer.", "model.",
};

static const char *const k_kohya_prefixes[] = {"lora_unet_", "lora_transformer_"};

typedef struct suffix_role {
    const char *suffix;
    lora_role role;
    bool peft_default;
} suffix_role;

/* Longest first where one is a tail of another. */
static const suffix_role k_suffixes[] = {
    {".lora_A.default.weight", LORA_ROLE_A, true}, {".lora_B.default.weight", LORA_ROLE_B, true},
    {".lora_A.weight", LORA_ROLE_A, false},        {".lora_B.weight", LORA_ROLE_B, false},
    {".lora_down.weight", LORA_ROLE_A, false},     {".lora_up.weight", LORA_ROLE_B, false},
    {".alpha", LORA_ROLE_ALPHA, false},            {".diff_b", LORA_ROLE_DIFF_BIAS, false},
    {".diff", LORA_ROLE_DIFF, false},              {".set_weight", LORA_ROLE_SET, false},
};

/* '#' matches a decimal block index. */
typedef struct module_template {
    const char *pattern;
    mm_lora_scope scope;
    mm_lora_which which;
    int slice;
    lora_naming naming;
    bool fc1_swapped;
    int bank; /* 0 no, 1 video head, 2 audio head */
} module_template;

static const module_template k_templates[] = {
    /* native (Comfy / official / ai-toolkit / Larry / FlashGen / DiffSynth) */
    {"blocks.#.attn.qkv_proj", MM_LORA_BLOCK, MM_LORA_QKV, -1, LORA_NAMES_NATIVE, false, 0},
    {"blocks.#.attn.out_proj", MM_LORA_BLOCK, MM_LORA_OUT, -1, LORA_NAMES_NATIVE, false, 0},
    {"blocks.#.mlp.fc1", MM_LORA_BLOCK, MM_LORA_FC1, -1, LORA_NAMES_NATIVE, false, 0},
    {"blocks.#.mlp.fc2", MM_LORA_BLOCK, MM_LORA_FC2, -1, LORA_NAMES_NATIVE, false, 0},
    {"blocks.#.adaln_proj.linear", MM_LORA_BLOCK, MM_LORA_ADALN, -1, LORA_NAMES_NATIVE, false, 0},
    {"token_refiner.blocks.#.attn.qkv_proj", MM_LORA_REFINER, MM_LORA_QKV, -1, LORA_NAMES_NATIVE, false, 0},
    {"token_refiner.blocks.#.attn.out_proj", MM_LORA_REFINER, MM_LORA_OUT, -1, LORA_NAMES_NATIVE, false, 0},
    {"token_refiner.blocks.#.mlp.fc1", MM_LORA_REFINER, MM_LORA_FC1, -1, LORA_NAMES_NATIVE, false, 0},
    {"token_refiner.blocks.#.mlp.fc2", MM_LORA_REFINER, MM_LORA_FC2, -1, LORA_NAMES_NATIVE, false, 0},
    {"condition_proj", MM_LORA_CONDITION, MM_LORA_LINEAR, -1, LORA_NAMES_NATIVE, false, 0},
    {"final_layer.adaln_proj.linear", MM_LORA_FINAL, MM_LORA_ADALN, -1, LORA_NAMES_NATIVE, false, 0},
    {"time_embedder.proj_in", MM_LORA_TIME_EMBEDDER, MM_LORA_TIME_IN, -1, LORA_NAMES_NATIVE, false, 0},
    {"time_embedder.proj_out", MM_LORA_TIME_EMBEDDER, MM_LORA_TIME_OUT, -1, LORA_NAMES_NATIVE, false, 0},
    {"endpoint_time_embedder.proj_in", MM_LORA_ENDPOINT_EMBEDDER, MM_LORA_TIME_IN, -1, LORA_NAMES_NATIVE, false, 0},
    {"endpoint_time_embedder.proj_out", MM_LORA_ENDPOINT_EMBEDDER, MM_LORA_TIME_OUT, -1, LORA_NAMES_NATIVE, false, 0},
    {"final_layer.video_out", MM_LORA_FINAL, MM_LORA_LINEAR, -1, LORA_NAMES_NATIVE, false, 1},
    {"final_layer.audio_out", MM_LORA_FINAL, MM_LORA_LINEAR, -1, LORA_NAMES_NATIVE, false, 2},
    /* diffusers (LightX2V, HyperFlow, PDD, VDN, FastH3) */
    {"transformer_blocks.#.attn.to_q", MM_LORA_BLOCK, MM_LORA_QKV, 0, LORA_NAMES_DIFFUSERS, false, 0},
    {"transformer_blocks.#.attn.to_k", MM_LORA_BLOCK, MM_LORA_QKV, 1, LORA_NAMES_DIFFUSERS, false, 0},
    {"transformer_blocks.#.attn.to_v", MM_LORA_BLOCK, MM_LORA_QKV, 2, LORA_NAMES_DIFFUSERS, false, 0},
    {"transformer_blocks.#.attn.to_out.0", MM_LORA_BLOCK, MM_LORA_OUT, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"transformer_blocks.#.ff.net.0.proj", MM_LORA_BLOCK, MM_LORA_FC1, -1, LORA_NAMES_DIFFUSERS, true, 0},
    {"transformer_blocks.#.ff.net.2", MM_LORA_BLOCK, MM_LORA_FC2, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"transformer_blocks.#.adaln_proj.linear", MM_LORA_BLOCK, MM_LORA_ADALN, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"token_refiner.refiner_blocks.#.attn.to_q", MM_LORA_REFINER, MM_LORA_QKV, 0, LORA_NAMES_DIFFUSERS, false, 0},
    {"token_refiner.refiner_blocks.#.attn.to_k", MM_LORA_REFINER, MM_LORA_QKV, 1, LORA_NAMES_DIFFUSERS, false, 0},
    {"token_refiner.refiner_blocks.#.attn.to_v", MM_LORA_REFINER, MM_LORA_QKV, 2, LORA_NAMES_DIFFUSERS, false, 0},
    {"token_refiner.refiner_blocks.#.attn.to_out.0", MM_LORA_REFINER, MM_LORA_OUT, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"token_refiner.refiner_blocks.#.ff.net.0.proj", MM_LORA_REFINER, MM_LORA_FC1, -1, LORA_NAMES_DIFFUSERS, true, 0},
    {"token_refiner.refiner_blocks.#.ff.net.2", MM_LORA_REFINER, MM_LORA_FC2, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"context_embedder", MM_LORA_CONDITION, MM_LORA_LINEAR, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"norm_out.linear", MM_LORA_FINAL, MM_LORA_ADALN, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"time_embedder.linear_1", MM_LORA_TIME_EMBEDDER, MM_LORA_TIME_IN, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"time_embedder.linear_2", MM_LORA_TIME_EMBEDDER, MM_LORA_TIME_OUT, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"endpoint_time_embedder.linear_1", MM_LORA_ENDPOINT_EMBEDDER, MM_LORA_TIME_IN, -1, LORA_NAMES_DIFFUSERS, false, 0},
    {"endpoint_time_embedder.linear_2", MM_LORA_ENDPOINT_EMBEDDER, MM_LORA_TIME_OUT, -1, LORA_NAMES_DIFFUSERS, false,
     0},
    {"proj_out", MM_LORA_FINAL, MM_LORA_LINEAR, -1, LORA_NAMES_DIFFUSERS, false, 1},
    {"audio_proj_out", MM_LORA_FINAL, MM_LORA_LINEAR, -1, LORA_NAMES_DIFFUSERS, false, 2},
};

mm_lora_part mm_lora_which_part(mm_lora_which w)
{
    switch (w) {
    case MM_LORA_ADALN: return MM_LORA_PART_ADALN;
    case MM_LORA_TIME_IN:
    case MM_LORA_TIME_OUT: return MM_LORA_PART_TIME;
    default: return MM_LORA_PART_LINEAR;
    }
}

void lora_module_name(mm_lora_scope scope, int index, mm_lora_which which, char *buf, size_t n)
{
    static const char *const leaf[] = {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"};
    const char *tail = which == MM_LORA_TIME_IN ? "proj_in" : "proj_out";
    switch (scope) {
    case MM_LORA_BLOCK:
        snprintf(buf, n, "blocks.%d.%s", index, which == MM_LORA_ADALN ? "adaln_proj.linear" : leaf[which & 3]);
        return;
    case MM_LORA_REFINER: snprintf(buf, n, "token_refiner.blocks.%d.%s", index, leaf[which & 3]); return;
    case MM_LORA_CONDITION: snprintf(buf, n, "condition_proj"); return;
    case MM_LORA_FINAL: snprintf(buf, n, "final_layer.adaln_proj.linear"); return;
    case MM_LORA_TIME_EMBEDDER: snprintf(buf, n, "time_embedder.%s", tail); return;
    case MM_LORA_ENDPOINT_EMBEDDER: snprintf(buf, n, "endpoint_time_embedder.%s", tail); return;
    }
    snprintf(buf, n, "?");
}

/* Matches `stem` (length len) against a template; kohya: '.' in the template
 * matches '_' in the stem. Sets *index for '#'. */
static bool match(const char *pat, const char *stem, size_t len, bool kohya, int *index)
{
    size_t i = 0;
    *index = 0;
    for (const char *p = pat; *p; p++) {
        if (*p == '#') {
            size_t d = 0;
            long v = 0;
            while (i < len && stem[i] >= '0' && stem[i] <= '9' && d < 6) {
                v = v * 10 + (stem[i] - '0');
                i++, d++;
            }
            if (d == 0 || (i < len && stem[i] >= '0' && stem[i] <= '9'))
                return false;
            *index = (int)v;
            continue;
        }
        if (i >= len)
            return false;
        char want = (kohya && *p == '.') ? '_' : *p;
        if (stem[i] != want)
            return false;
        i++;
    }
    return i == len;
}

bool lora_key_parse(const char *name, lora_key *out)
{
    memset(out, 0, sizeof *out);
    out->slice = -1;
    out->prefix = "";
    const char *s = name;
    bool kohya = false;
    for (size_t i = 0; i < sizeof k_kohya_prefixes / sizeof *k_kohya_prefixes; i++) {
        size_t n = strlen(k_kohya_prefixes[i]);
        if (strncmp(s, k_kohya_prefixes[i], n) == 0) {
            out->prefix = k_kohya_prefixes[i];
            s += n;
            kohya = true;
            break;
        }
    }
    if (!kohya) /* a prefix may wrap another (base_model.model.transformer.…) */
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < sizeof k_prefixes / sizeof *k_prefixes; i++) {
                size_t n = strlen(k_prefixes[i]);
                if (strncmp(s, k_prefixes[i], n) == 0) {
                    if (pass == 0)
                        out->prefix = k_prefixes[i];
                    s += n;
                    break;
                }
            }
    out->kohya = kohya;

    size_t len = strlen(s);
    size_t stem_len = len;
    for (size_t i = 0; i < sizeof k_suffixes / sizeof *k_suffixes; i++) {
        size_t n = strlen(k_suffixes[i].suffix);
        if (len > n && strcmp(s + len - n, k_suffixes[i].suffix) == 0) {
            out->role = k_suffixes[i].role;
            out->peft_default = k_suffixes[i].peft_default;
            stem_len = len - n;
            break;
        }
    }
    if (out->role == LORA_ROLE_UNKNOWN && !kohya) { /* a plain head tensor (PDD's bank) */
        if (len > 7 && strcmp(s + len - 7, ".weight") == 0)
            stem_len = len - 7, out->role = LORA_ROLE_BANK;
        else if (len > 5 && strcmp(s + len - 5, ".bias") == 0)
            stem_len = len - 5, out->role = LORA_ROLE_BANK, out->bias = true;
    }
    if (out->role == LORA_ROLE_UNKNOWN)
        return false;

    for (size_t i = 0; i < sizeof k_templates / sizeof *k_templates; i++) {
        const module_template *t = &k_templates[i];
        int index;
        if (!match(t->pattern, s, stem_len, kohya, &index))
            continue;
        out->known_module = true;
        out->scope = t->scope;
        out->index = index;
        out->which = t->which;
        out->slice = t->slice;
        out->naming = t->naming;
        out->fc1_swapped = t->fc1_swapped;
        out->bank = t->bank != 0;
        out->bank_audio = t->bank == 2;
        if (out->bank)
            snprintf(out->module, sizeof out->module, "final_layer.%s", out->bank_audio ? "audio_out" : "video_out");
        else
            lora_module_name(t->scope, index, t->which, out->module, sizeof out->module);
        break;
    }
    /* a plain .weight/.bias is only meaningful on an output head */
    if (out->role == LORA_ROLE_BANK && !out->bank)
        out->role = LORA_ROLE_UNKNOWN;
    /* low-rank pairs on an output head are not something the engine applies */
    if (out->bank && out->role != LORA_ROLE_BANK && out->role != LORA_ROLE_DIFF && out->role != LORA_ROLE_DIFF_BIAS &&
        out->role != LORA_ROLE_SET)
        out->known_module = false;
    if (!out->known_module && (out->role == LORA_ROLE_A || out->role == LORA_ROLE_B || out->role == LORA_ROLE_ALPHA))
        return true; /* understood role, unknown module: the caller lists it */
    return out->role != LORA_ROLE_UNKNOWN;
}
