/* Opening an adapter file: every tensor name classified (keys.c), grouped
 * into low-rank pairs per native module (and q/k/v slice), checked, alpha
 * resolved, and B's rows put in the engine's order (lora.h). Anything not
 * understood fails the load with the keys listed: an adapter that silently
 * lost a module would render plausibly and wrongly. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "model/lora/lora_internal.h"

/* One pair being assembled: its A, B and alpha tensors. */
typedef struct slot {
    lora_key key; /* of the first of its tensors */
    const mm_st_entry *a, *b, *alpha;
} slot;

typedef struct builder {
    mm_lora *l;
    mm_safetensors *st;
    slot *slots;
    int n_slots, cap_slots;
    const mm_st_entry *bank_w[2], *bank_b[2];
    /* problems, listed together */
    char unplaceable[640];
    int n_unplaceable;
    char incomplete[480];
    int n_incomplete;
    bool vdn;
    lora_file_traits tr;
    float meta_alpha; /* 0: none */
} builder;

static bool float_dtype(mm_dtype t) { return t == MM_F32 || t == MM_BF16 || t == MM_F16; }

static void list_add(char *buf, size_t n, int *count, const char *name)
{
    size_t used = strlen(buf);
    if (*count < 6 && used + strlen(name) + 3 < n)
        snprintf(buf + used, n - used, "%s%s", *count ? ", " : "", name);
    (*count)++;
}

static bool same_slot(const lora_key *a, const lora_key *b)
{
    return a->scope == b->scope && a->index == b->index && a->which == b->which && a->slice == b->slice;
}

static int add_to_slot(builder *bd, const lora_key *k, const mm_st_entry *e, mm_error *err)
{
    slot *s = NULL;
    for (int i = 0; i < bd->n_slots; i++)
        if (same_slot(&bd->slots[i].key, k)) {
            s = &bd->slots[i];
            break;
        }
    if (!s) {
        if (bd->n_slots == bd->cap_slots) {
            int cap = bd->cap_slots ? bd->cap_slots * 2 : 64;
            slot *ns = realloc(bd->slots, sizeof *ns * (size_t)cap);
            if (!ns)
                return mm_fail(err, "out of memory");
            bd->slots = ns;
            bd->cap_slots = cap;
        }
        s = &bd->slots[bd->n_slots++];
        memset(s, 0, sizeof *s);
        s->key = *k;
    }
    const mm_st_entry **dst = k->role == LORA_ROLE_A ? &s->a : k->role == LORA_ROLE_B ? &s->b : &s->alpha;
    if (*dst)
        return mm_fail(err, "%s: '%s' and '%s' are both the %s of %s; a file holds one", bd->l->path, (*dst)->name,
                       e->name, k->role == LORA_ROLE_A ? "A (down) matrix" : k->role == LORA_ROLE_B ? "B (up) matrix" : "alpha",
                       k->module);
    *dst = e;
    return 0;
}

static int add_dense(builder *bd, const lora_key *k, const mm_st_entry *e, mm_error *err)
{
    mm_lora *l = bd->l;
    mm_lora_dense *nd = realloc(l->dense, sizeof *nd * (size_t)(l->n_dense + 1));
    if (!nd)
        return mm_fail(err, "out of memory");
    l->dense = nd;
    mm_lora_dense *d = &l->dense[l->n_dense++];
    memset(d, 0, sizeof *d);
    d->kind = k->role == LORA_ROLE_DIFF ? MM_LORA_DIFF : k->role == LORA_ROLE_DIFF_BIAS ? MM_LORA_DIFF_BIAS
                                                                                       : MM_LORA_SET_WEIGHT;
    snprintf(d->key, sizeof d->key, "%s", e->name);
    return mm_st_get(bd->st, e->name, &d->t, err);
}

static void note_traits(builder *bd, const lora_key *k)
{
    lora_file_traits *tr = &bd->tr;
    if (k->kohya)
        tr->kohya = true;
    else if (k->naming == LORA_NAMES_DIFFUSERS)
        tr->diffusers = true;
    else
        tr->native = true;
    if (k->peft_default)
        tr->peft_default = true;
    if (k->prefix[0] && !strstr(tr->prefixes, k->prefix) && strlen(tr->prefixes) + strlen(k->prefix) + 3 <
                                                                  sizeof tr->prefixes)
        snprintf(tr->prefixes + strlen(tr->prefixes), sizeof tr->prefixes - strlen(tr->prefixes), "%s%s",
                 tr->prefixes[0] ? " " : "", k->prefix);
}

/* Sorts every tensor of the file into slots, banks, dense parts or the
 * problem lists. */
static int classify(builder *bd, mm_error *err)
{
    for (size_t i = 0; i < mm_st_count(bd->st); i++) {
        const mm_st_entry *e = mm_st_at(bd->st, i);
        lora_key k;
        bool understood = lora_key_parse(e->name, &k);
        if (strstr(e->name, "linear_attention.") || strstr(e->name, "softmax_gate."))
            bd->vdn = true;
        if (understood && (k.role == LORA_ROLE_DIFF || k.role == LORA_ROLE_DIFF_BIAS || k.role == LORA_ROLE_SET)) {
            if (add_dense(bd, &k, e, err) != 0)
                return -1;
            continue;
        }
        if (!understood || !k.known_module) {
            list_add(bd->unplaceable, sizeof bd->unplaceable, &bd->n_unplaceable, e->name);
            continue;
        }
        note_traits(bd, &k);
        if (k.role == LORA_ROLE_BANK) {
            const mm_st_entry **dst = k.bias ? &bd->bank_b[k.bank_audio] : &bd->bank_w[k.bank_audio];
            if (*dst)
                return mm_fail(err, "%s: '%s' and '%s' are both the %s head bank's %s", bd->l->path, (*dst)->name,
                               e->name, k.bank_audio ? "audio" : "video", k.bias ? "bias" : "weight");
            *dst = e;
            continue;
        }
        if (add_to_slot(bd, &k, e, err) != 0)
            return -1;
    }
    for (int i = 0; i < bd->n_slots; i++) {
        const slot *s = &bd->slots[i];
        if (s->a && s->b)
            continue;
        char what[200];
        snprintf(what, sizeof what, "%s (%s)", s->a ? s->a->name : s->b ? s->b->name : s->alpha->name,
                 !s->a && !s->b ? "an alpha without A and B" : s->a ? "no B" : "no A");
        list_add(bd->incomplete, sizeof bd->incomplete, &bd->n_incomplete, what);
    }
    if (bd->vdn)
        return mm_fail(err,
                       "%s: this is a VDN-H3 hybrid-attention file (linear_attention / softmax_gate tensors, "
                       "fewstep.md §6): it replaces the attention, which mmh3 does not implement; it is not a LoRA",
                       bd->l->path);
    if (bd->n_unplaceable)
        return mm_fail(err,
                       "%s: %d key%s the engine cannot place: %s%s (adapters apply to qkv_proj / out_proj / fc1 / "
                       "fc2 of the blocks and the token refiner, condition_proj, the AdaLN projections, the time "
                       "embedders, PDD head banks; native, diffusers and kohya names)",
                       bd->l->path, bd->n_unplaceable, bd->n_unplaceable == 1 ? "" : "s", bd->unplaceable,
                       bd->n_unplaceable > 6 ? ", ..." : "");
    if (bd->n_incomplete)
        return mm_fail(err, "%s: %d incomplete low-rank pair%s: %s%s", bd->l->path, bd->n_incomplete,
                       bd->n_incomplete == 1 ? "" : "s", bd->incomplete, bd->n_incomplete > 6 ? ", ..." : "");
    if (bd->n_slots == 0 && !bd->bank_w[0] && !bd->bank_w[1] && bd->l->n_dense == 0)
        return mm_fail(err, "%s: no adapter tensors (no lora_A/lora_B, lora_down/lora_up, head bank or .diff keys)",
                       bd->l->path);
    return 0;
}

/* ---------------------------------------------------------------- alpha */

static int parse_alpha_text(const char *v, float *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    while (*end && isspace((unsigned char)*end))
        end++;
    if (end == v || *end || errno || !isfinite(d) || d <= 0 || d > 1e6)
        return -1;
    *out = (float)d;
    return 0;
}

static int metadata_alpha(builder *bd, mm_error *err)
{
    static const char *const keys[] = {"alpha", "lora_alpha"};
    for (int i = 0; i < 2; i++) {
        const char *v = mm_st_metadata(bd->st, keys[i]);
        if (!v)
            continue;
        if (parse_alpha_text(v, &bd->meta_alpha) != 0)
            return mm_fail(err, "%s: __metadata__[\"%s\"] = \"%s\" is not a valid alpha (a positive number)",
                           bd->l->path, keys[i], v);
        bd->tr.alpha_metadata = true;
        return 0;
    }
    return 0;
}

/* LightX2V's 4-step v0.1 stores no alpha; its reference script (and
 * vLLM-Omni) apply 8 (fewstep.md §2.4). */
static bool lightx2v_v01(const char *name) { return strstr(name, "fl2v_turbo_4step_v0.1") != NULL; }

static int resolve_alpha(builder *bd, const slot *s, int rank, float *alpha, mm_lora_alpha_source *from,
                         mm_error *err)
{
    if (s->alpha) {
        mm_tensor t;
        if (mm_st_get(bd->st, s->alpha->name, &t, err) != 0)
            return -1;
        double v = mm_tensor_numel(&t) == 1 && float_dtype(t.dtype) ? mm_tensor_get(&t, (int64_t[MM_MAX_DIMS]){0})
                                                                    : NAN;
        if (!float_dtype(t.dtype) || mm_tensor_numel(&t) != 1 || !isfinite(v) || v <= 0)
            return mm_fail(err, "%s: '%s' is not a valid alpha (a single positive float; the file has %s with %lld "
                                "element%s%s)",
                           bd->l->path, s->alpha->name, mm_dtype_name(t.dtype), (long long)mm_tensor_numel(&t),
                           mm_tensor_numel(&t) == 1 ? "" : "s", mm_tensor_numel(&t) == 1 && float_dtype(t.dtype) ? ", not positive and finite" : "");
        *alpha = (float)v;
        *from = MM_LORA_ALPHA_TENSOR;
        bd->tr.alpha_tensors = true;
    } else if (bd->meta_alpha > 0) {
        *alpha = bd->meta_alpha;
        *from = MM_LORA_ALPHA_METADATA;
    } else if (lightx2v_v01(bd->l->name)) {
        *alpha = 8.0f;
        *from = MM_LORA_ALPHA_FILENAME;
    } else {
        *alpha = (float)rank;
        *from = MM_LORA_ALPHA_RANK;
    }
    return 0;
}

/* ------------------------------------------------------------ row order */

static size_t esize(mm_dtype t) { return (size_t)mm_dtype_bits(t) / 8; }

/* An owned host copy of src's rows, row r of the copy = row map(r) of src. */
static int copy_rows(mm_tensor *dst, const mm_tensor *src, int64_t (*map)(int64_t r, int64_t rows), mm_error *err)
{
    int64_t rows = src->shape[0], cols = src->shape[1];
    if (mm_tensor_alloc(dst, mm_cpu(), src->dtype, 2, src->shape, err) != 0)
        return -1;
    size_t row_bytes = (size_t)cols * esize(src->dtype);
    for (int64_t r = 0; r < rows; r++)
        memcpy((char *)dst->data + (size_t)r * row_bytes, (const char *)src->data + (size_t)map(r, rows) * row_bytes,
               row_bytes);
    return 0;
}

/* native fc1 row r ([gate; up]) comes from diffusers row (r + F) mod 2F ([up; gate]) */
static int64_t fc1_map(int64_t r, int64_t rows) { return (r + rows / 2) % rows; }

/* contiguous row c·A + h·128 + d comes from interleaved row h·384 + c·128 + d */
static int64_t qkv_map(int64_t r, int64_t rows)
{
    int64_t third = rows / 3, c = r / third, h = (r % third) / 128, d = r % 128;
    return h * 384 + c * 128 + d;
}

/* Whether B [3A, 3r] is block-diagonal with three [A, r] blocks (a rank-3r
 * fused q/k/v export, fewstep.md §2.3a). */
static bool block_diagonal(const mm_tensor *b)
{
    int64_t rows = b->shape[0], r3 = b->shape[1], A = rows / 3, r = r3 / 3;
    size_t es = esize(b->dtype);
    for (int64_t i = 0; i < rows; i++) {
        int64_t c = i / A;
        const unsigned char *row = (const unsigned char *)b->data + (size_t)(i * r3) * es;
        for (int64_t j = 0; j < r3; j++) {
            if (j >= c * r && j < (c + 1) * r)
                continue;
            for (size_t k = 0; k < es; k++) /* any nonzero byte, -0 aside */
                if (row[(size_t)j * es + k] & (k == es - 1 ? 0x7f : 0xff))
                    return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------- pairs */

static int push_pair(mm_lora *l, const mm_lora_pair *p, mm_error *err)
{
    mm_lora_pair *np = realloc(l->pairs, sizeof *np * (size_t)(l->n_pairs + 1));
    if (!np)
        return mm_fail(err, "out of memory");
    l->pairs = np;
    l->pairs[l->n_pairs++] = *p;
    return 0;
}

/* A block-diagonal rank-3r qkv pair as the three rank-r pairs it is made
 * of: the same product, a third of the branch's work. A per-key alpha was
 * set for rank 3r (alpha_f = 3·alpha, §2.3a); a global one (metadata, the
 * rank rule) is meant for rank r already. */
static int push_fused_split(builder *bd, const mm_lora_pair *fused, mm_error *err)
{
    const int64_t A = fused->rows / 3;
    const int r = fused->rank / 3;
    bd->tr.fused_qkv_split = true;
    for (int c = 0; c < 3; c++) {
        mm_lora_pair p = *fused;
        p.rank = r;
        p.row0 = c * A;
        p.rows = A;
        p.row_kind = MM_LORA_ROWS_FUSED_SPLIT;
        p.alpha = fused->alpha_from == MM_LORA_ALPHA_TENSOR ? fused->alpha / 3.0f
                  : fused->alpha_from == MM_LORA_ALPHA_RANK ? (float)r
                                                             : fused->alpha;
        p.scale = p.alpha / (float)p.rank;
        p.a = mm_tensor_narrow(&fused->a, 0, (int64_t)c * r, r);
        mm_tensor block = mm_tensor_narrow(&fused->b, 0, c * A, A);
        block = mm_tensor_narrow(&block, 1, (int64_t)c * r, r);
        if (mm_tensor_alloc(&p.b, mm_cpu(), block.dtype, 2, block.shape, err) != 0)
            return -1;
        size_t es = esize(block.dtype);
        for (int64_t i = 0; i < A; i++)
            memcpy((char *)p.b.data + (size_t)(i * r) * es, (const char *)block.data + (size_t)(i * block.stride[0]) * es,
                   (size_t)r * es);
        if (push_pair(bd->l, &p, err) != 0) {
            mm_tensor_free(&p.b);
            return -1;
        }
    }
    return 0;
}

static int check_pair_shapes(builder *bd, const slot *s, const mm_tensor *a, const mm_tensor *b, mm_error *err)
{
    char sa[64], sb[64];
    mm_shape_str(a->ndim, a->shape, sa, sizeof sa);
    mm_shape_str(b->ndim, b->shape, sb, sizeof sb);
    if (!float_dtype(a->dtype) || !float_dtype(b->dtype))
        return mm_fail(err, "%s: '%s' is %s and '%s' is %s; adapter matrices are F32, BF16 or F16", bd->l->path,
                       s->a->name, mm_dtype_name(a->dtype), s->b->name, mm_dtype_name(b->dtype));
    if (a->ndim != 2 || b->ndim != 2 || a->shape[0] < 1 || a->shape[1] < 1 || b->shape[0] < 1)
        return mm_fail(err, "%s: '%s' %s and '%s' %s: A must be [rank, in] and B [out, rank]", bd->l->path, s->a->name,
                       sa, s->b->name, sb);
    if (a->shape[0] != b->shape[1])
        return mm_fail(err, "%s: the ranks of '%s' %s and '%s' %s differ (A is [rank, in], B [out, rank])",
                       bd->l->path, s->a->name, sa, s->b->name, sb);
    if (a->shape[0] > 16384)
        return mm_fail(err, "%s: '%s' %s: rank %lld is beyond what any adapter uses (at most 16384)", bd->l->path,
                       s->a->name, sa, (long long)a->shape[0]);
    return 0;
}

static int build_pair(builder *bd, const slot *s, mm_error *err)
{
    mm_lora *l = bd->l;
    mm_tensor a, b;
    if (mm_st_get(bd->st, s->a->name, &a, err) != 0 || mm_st_get(bd->st, s->b->name, &b, err) != 0 ||
        check_pair_shapes(bd, s, &a, &b, err) != 0)
        return -1;
    const lora_key *k = &s->key;
    mm_lora_pair p;
    memset(&p, 0, sizeof p);
    p.scope = k->scope;
    p.index = k->index;
    p.which = k->which;
    snprintf(p.module, sizeof p.module, "%s", k->module);
    snprintf(p.key, sizeof p.key, "%s", s->a->name);
    snprintf(p.b_key, sizeof p.b_key, "%s", s->b->name);
    p.rank = (int)a.shape[0];
    p.in_features = a.shape[1];
    p.rows = b.shape[0];
    if (resolve_alpha(bd, s, p.rank, &p.alpha, &p.alpha_from, err) != 0)
        return -1;
    p.a = a;
    p.b = b;
    if (k->slice >= 0) {
        p.row0 = k->slice * p.rows;
        p.row_kind = MM_LORA_ROWS_QKV_SLICE;
    }
    const bool qkv_whole = k->which == MM_LORA_QKV && k->slice < 0;
    if (!l->header_only && k->fc1_swapped) {
        if (p.rows % 2)
            return mm_fail(err, "%s: '%s' has %lld rows; ff.net.0.proj holds two halves [up; gate]", l->path,
                           s->b->name, (long long)p.rows);
        if (copy_rows(&p.b, &b, fc1_map, err) != 0)
            return -1;
        p.row_kind = MM_LORA_ROWS_FC1_SWAPPED;
    } else if (!l->header_only && qkv_whole && bd->tr.diffsynth) {
        if (p.rows % 384)
            return mm_fail(err, "%s: '%s' has %lld rows, not per-head interleaved q/k/v rows of 128 (DiffSynth)",
                           l->path, s->b->name, (long long)p.rows);
        if (copy_rows(&p.b, &b, qkv_map, err) != 0)
            return -1;
        p.row_kind = MM_LORA_ROWS_DEINTERLEAVED;
    } else if (!l->header_only && qkv_whole && p.rank % 3 == 0 && p.rows % 3 == 0 && block_diagonal(&b)) {
        return push_fused_split(bd, &p, err);
    }
    p.scale = p.alpha / (float)p.rank;
    return push_pair(l, &p, err);
}

/* Canonical order, whatever the spelling: by scope, block, linear, rows. */
static int pair_cmp(const void *x, const void *y)
{
    const mm_lora_pair *a = x, *b = y;
    if (a->scope != b->scope)
        return a->scope < b->scope ? -1 : 1;
    if (a->index != b->index)
        return a->index < b->index ? -1 : 1;
    if (a->which != b->which)
        return a->which < b->which ? -1 : 1;
    if (a->row0 != b->row0)
        return a->row0 < b->row0 ? -1 : 1;
    return 0;
}

static int build_banks(builder *bd, mm_error *err)
{
    mm_lora *l = bd->l;
    for (int audio = 0; audio < 2; audio++) {
        const mm_st_entry *w = bd->bank_w[audio], *b = bd->bank_b[audio];
        if (!w && !b)
            continue;
        if (!w)
            return mm_fail(err, "%s: '%s' is a head bank's bias without its weight", l->path, b->name);
        mm_lora_bank *k = &l->banks[l->n_banks++];
        memset(k, 0, sizeof *k);
        k->audio = audio;
        snprintf(k->key, sizeof k->key, "%s", w->name);
        if (mm_st_get(bd->st, w->name, &k->weight, err) != 0 || (b && mm_st_get(bd->st, b->name, &k->bias, err) != 0))
            return -1;
        char sw[64], sb[64];
        mm_shape_str(k->weight.ndim, k->weight.shape, sw, sizeof sw);
        if (k->weight.ndim != 3 || !float_dtype(k->weight.dtype))
            return mm_fail(err,
                           "%s: '%s' is %s %s; a head bank (PDD) is a float [heads, out, in] tensor, and a plain "
                           "replacement of the output head is not an adapter the engine applies",
                           l->path, w->name, mm_dtype_name(k->weight.dtype), sw);
        if (b) {
            mm_shape_str(k->bias.ndim, k->bias.shape, sb, sizeof sb);
            if (k->bias.ndim != 2 || !float_dtype(k->bias.dtype) || k->bias.shape[0] != k->weight.shape[0] ||
                k->bias.shape[1] != k->weight.shape[1])
                return mm_fail(err, "%s: '%s' %s does not match its weight '%s' %s (bias [heads, out] expected)",
                               l->path, b->name, sb, w->name, sw);
        }
    }
    return 0;
}

static int build(builder *bd, mm_error *err)
{
    mm_lora *l = bd->l;
    if (classify(bd, err) != 0 || metadata_alpha(bd, err) != 0)
        return -1;
    /* DiffSynth-Studio: native names with PEFT's .default, qkv rows per head interleaved (§2.3b) */
    bd->tr.diffsynth = bd->tr.native && bd->tr.peft_default && !bd->tr.diffusers && !bd->tr.kohya;
    for (int i = 0; i < bd->n_slots; i++)
        if (build_pair(bd, &bd->slots[i], err) != 0)
            return -1;
    if (l->n_pairs > 1) /* a file of head banks only has no pairs (and pairs may be NULL) */
        qsort(l->pairs, (size_t)l->n_pairs, sizeof *l->pairs, pair_cmp);
    for (int i = 1; i < l->n_pairs; i++) {
        const mm_lora_pair *p = &l->pairs[i - 1], *q = &l->pairs[i];
        if (p->scope == q->scope && p->index == q->index && p->which == q->which && q->row0 < p->row0 + p->rows)
            return mm_fail(err, "%s: '%s' and '%s' adapt overlapping rows of %s (two spellings of one module?)",
                           l->path, p->key, q->key, q->module);
    }
    if (build_banks(bd, err) != 0)
        return -1;
    for (int i = 0; i < l->n_pairs; i++)
        if (l->pairs[i].b.storage)
            l->host_bytes += mm_tensor_nbytes(&l->pairs[i].b);
    lora_summarize(l, &bd->tr);
    return 0;
}

static int open_common(mm_lora **out, mm_safetensors *st, const char *path, const mm_lora_open_opts *opts,
                       mm_error *err)
{
    *out = NULL;
    mm_lora *l = calloc(1, sizeof *l);
    mm_lora_internal *in = calloc(1, sizeof *in);
    if (!l || !in) {
        free(l);
        free(in);
        mm_st_close(st);
        return mm_fail(err, "out of memory");
    }
    l->in = in;
    in->st = st;
    snprintf(l->path, sizeof l->path, "%s", path);
    const char *slash = strrchr(l->path, '/');
    l->name = slash ? slash + 1 : l->path;
    l->header_only = opts && opts->header_only;
    l->device = mm_cpu();
    builder bd = {.l = l, .st = st};
    int rc = build(&bd, err);
    free(bd.slots);
    if (rc != 0) {
        mm_lora_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

int mm_lora_open(mm_lora **out, const char *path, const mm_lora_open_opts *opts, mm_error *err)
{
    *out = NULL;
    mm_safetensors *st;
    if (mm_st_open(&st, path, err) != 0)
        return mm_error_prefix(err, "LoRA adapter");
    return open_common(out, st, path, opts, err);
}

int mm_lora_open_memory(mm_lora **out, const char *label, const void *data, size_t size,
                        const mm_lora_open_opts *opts, mm_error *err)
{
    *out = NULL;
    mm_safetensors *st;
    if (mm_st_open_memory(&st, label, data, size, err) != 0)
        return mm_error_prefix(err, "LoRA adapter");
    return open_common(out, st, label, opts, err);
}

void mm_lora_free(mm_lora *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n_pairs; i++) {
        mm_lora_pair *p = &l->pairs[i];
        mm_tensor_free(&p->a);
        mm_tensor_free(&p->b);
        mm_tensor_free(&p->dev_a);
        mm_tensor_free(&p->dev_b);
    }
    free(l->pairs);
    free(l->dense);
    if (l->in) {
        mm_st_close(l->in->st);
        free(l->in);
    }
    free(l);
}

/* ---------------------------------------------------------------- upload */

/* A contiguous bf16 copy of a host tensor on ctx's device (a view when it
 * already is one on the CPU). */
static int to_branch(mm_ctx *ctx, mm_tensor *dst, const mm_tensor *src, size_t *bytes, mm_error *err)
{
    mm_device dev = mm_ctx_device(ctx);
    if (dev.kind == MM_DEVICE_CPU && src->dtype == MM_BF16 && mm_tensor_is_contiguous(src)) {
        *dst = mm_tensor_view(src);
        return 0;
    }
    mm_tensor host = {0};
    const mm_tensor *from = src;
    if (dev.kind != MM_DEVICE_CPU && (src->dtype != MM_BF16 || !mm_tensor_is_contiguous(src))) {
        /* cross-device copies keep the dtype: convert on the host first */
        if (mm_tensor_alloc(&host, mm_cpu(), MM_BF16, src->ndim, src->shape, err) != 0)
            return -1;
        for (int64_t i = 0; i < src->shape[0]; i++) {
            mm_tensor s = mm_tensor_select(src, 0, i), d = mm_tensor_select(&host, 0, i);
            uint16_t *o = d.data;
            for (int64_t j = 0; j < s.shape[0]; j++)
                o[j] = mm_f32_to_bf16((float)mm_tensor_get(&s, (int64_t[MM_MAX_DIMS]){j}));
        }
        from = &host;
    }
    int rc = mm_tensor_alloc(dst, dev, MM_BF16, src->ndim, src->shape, err);
    if (rc == 0) {
        mm_copy(ctx, dst, from);
        rc = mm_ctx_sync(ctx, err);
        if (rc == 0)
            *bytes += mm_tensor_nbytes(dst);
        else
            mm_tensor_free(dst);
    }
    mm_tensor_free(&host);
    return rc;
}

int mm_lora_upload(mm_lora *l, mm_ctx *ctx, mm_error *err)
{
    mm_device dev = mm_ctx_device(ctx);
    if (l->uploaded) {
        if (mm_device_eq(dev, l->device))
            return 0;
        char a[32], b[32];
        return mm_fail(err, "%s: the adapter is resident on %s, not on %s", l->path,
                       mm_device_name(l->device, a, sizeof a), mm_device_name(dev, b, sizeof b));
    }
    if (l->header_only)
        return mm_fail(err, "%s: opened header-only (for a listing); reopen it to apply it", l->path);
    size_t bytes = 0;
    for (int i = 0; i < l->n_pairs; i++) {
        mm_lora_pair *p = &l->pairs[i];
        if (mm_lora_which_part(p->which) != MM_LORA_PART_LINEAR)
            continue;
        if (to_branch(ctx, &p->dev_a, &p->a, &bytes, err) != 0 || to_branch(ctx, &p->dev_b, &p->b, &bytes, err) != 0) {
            for (int j = 0; j <= i; j++) {
                mm_tensor_free(&l->pairs[j].dev_a);
                mm_tensor_free(&l->pairs[j].dev_b);
            }
            return mm_error_prefix(err, "%s: uploading %s", l->path, p->key);
        }
    }
    l->device = dev;
    l->device_bytes = bytes;
    l->uploaded = true;
    return 0;
}

size_t mm_lora_bytes(const mm_lora *l) { return l->host_bytes + l->device_bytes; }

/* -------------------------------------------------------------- metadata */

const char *mm_lora_metadata(const mm_lora *l, const char *key) { return mm_st_metadata(l->in->st, key); }
size_t mm_lora_metadata_count(const mm_lora *l) { return mm_st_metadata_count(l->in->st); }
const char *mm_lora_metadata_at(const mm_lora *l, size_t i, const char **value)
{
    return mm_st_metadata_at(l->in->st, i, value);
}

bool mm_lora_has_extras(const mm_lora *l)
{
    if (l->n_banks || l->n_dense)
        return true;
    for (int i = 0; i < l->n_pairs; i++)
        if (mm_lora_which_part(l->pairs[i].which) != MM_LORA_PART_LINEAR)
            return true;
    return false;
}

const char *mm_lora_extras_str(const mm_lora *l, char *buf, size_t n)
{
    int adaln = 0, time = 0;
    for (int i = 0; i < l->n_pairs; i++) {
        mm_lora_part part = mm_lora_which_part(l->pairs[i].which);
        adaln += part == MM_LORA_PART_ADALN;
        time += part == MM_LORA_PART_TIME;
    }
    buf[0] = 0;
    size_t u = 0;
#define ADD(...) (u += (size_t)snprintf(buf + u, u < n ? n - u : 0, __VA_ARGS__), u = u < n ? u : n)
    if (adaln)
        ADD("%s%d AdaLN pair%s", u ? ", " : "", adaln, adaln == 1 ? "" : "s");
    if (time)
        ADD("%s%d time-embedder pair%s", u ? ", " : "", time, time == 1 ? "" : "s");
    if (l->n_banks)
        ADD("%s%d output-head bank%s", u ? ", " : "", l->n_banks, l->n_banks == 1 ? "" : "s");
    if (l->n_dense)
        ADD("%s%d FastVideo full-rank part%s (.diff/.diff_b/.set_weight)", u ? ", " : "", l->n_dense,
            l->n_dense == 1 ? "" : "s");
#undef ADD
    return buf;
}
