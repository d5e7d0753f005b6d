/* What the files of src/model/lora/ share (not a public header). */
#ifndef MMH3_MODEL_LORA_LORA_INTERNAL_H
#define MMH3_MODEL_LORA_LORA_INTERNAL_H

#include "io/safetensors.h"
#include "model/lora/lora.h"

/* keys.c: what one tensor name of an adapter file means. */
typedef enum lora_role {
    LORA_ROLE_UNKNOWN = 0,
    LORA_ROLE_A,         /* lora_A / lora_down */
    LORA_ROLE_B,         /* lora_B / lora_up */
    LORA_ROLE_ALPHA,     /* .alpha */
    LORA_ROLE_DIFF,      /* FastVideo v2 .diff */
    LORA_ROLE_DIFF_BIAS, /* .diff_b */
    LORA_ROLE_SET,       /* .set_weight */
    LORA_ROLE_BANK,      /* a plain .weight / .bias of an output head (PDD's bank) */
} lora_role;

typedef enum lora_naming {
    LORA_NAMES_NATIVE = 0, /* blocks.N.attn.qkv_proj ... */
    LORA_NAMES_DIFFUSERS,  /* transformer_blocks.N.attn.to_q ... */
} lora_naming;

typedef struct lora_key {
    lora_role role;
    bool known_module;     /* the module part matched a template */
    mm_lora_scope scope;
    int index;
    mm_lora_which which;
    int slice;             /* diffusers to_q/to_k/to_v: 0, 1, 2; else -1 */
    bool fc1_swapped;      /* diffusers ff.net.0.proj */
    bool bank;             /* an output head (final_layer.video_out / audio_out, proj_out / audio_proj_out) */
    bool bank_audio;
    bool bias;             /* LORA_ROLE_BANK: the .bias tensor */
    lora_naming naming;
    bool kohya;            /* lora_unet_… */
    bool peft_default;     /* .lora_A.default.weight */
    const char *prefix;    /* the prefix stripped ("" if none) */
    char module[64];       /* native module name */
} lora_key;

/* Classifies a tensor name; returns false when nothing of it is understood
 * (role LORA_ROLE_UNKNOWN). */
bool lora_key_parse(const char *name, lora_key *out);
/* The native module name of a scope/index/which. */
void lora_module_name(mm_lora_scope scope, int index, mm_lora_which which, char *buf, size_t n);

/* summary.c: family, spelling, targets, warnings and hints of a loaded handle. */
typedef struct lora_file_traits {
    bool native, diffusers, kohya, peft_default, diffsynth;
    bool alpha_tensors, alpha_metadata;
    bool fused_qkv_split, fused_qkv_kept; /* rank-3r qkv pairs split back / kept as one */
    char prefixes[96];
} lora_file_traits;
void lora_summarize(mm_lora *l, const lora_file_traits *tr);
/* Adds one warning line (dropped past MM_LORA_MAX_WARNINGS). */
void lora_warn(mm_lora *l, const char *fmt, ...) MM_PRINTF(2, 3);

struct mm_lora_internal {
    mm_safetensors *st; /* kept open: host tensors are views into it */
};

#endif
