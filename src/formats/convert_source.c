/* The converter's inputs as MiniMax-native tensors (convert_internal.h):
 * key prefixes stripped, diffusers names placed onto the fused layout, delta
 * bundles attached, every row readable in f32. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "formats/convert_internal.h"

/* Prefixes of the published spellings (fewstep.md §2.2), first match only. */
static const char *const key_prefixes[] = {"base_model.model.", "model.diffusion_model.", "diffusion_model.",
                                           "transformer.", "model."};

static const char *strip_prefix(const char *k)
{
    for (size_t i = 0; i < sizeof key_prefixes / sizeof key_prefixes[0]; i++) {
        size_t n = strlen(key_prefixes[i]);
        if (strncmp(k, key_prefixes[i], n) == 0)
            return k + n;
    }
    return k;
}

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
static bool ends(const char *s, const char *t)
{
    size_t a = strlen(s), b = strlen(t);
    return a >= b && strcmp(s + a - b, t) == 0;
}

/* A stored key (prefix stripped) as a native tensor name and the part of it
 * it fills. */
typedef struct mapped {
    char name[160];
    int part;        /* 0..2 for diffusers' to_q / to_k / to_v, else -1 */
    cv_row_map map;
    bool diffusers;  /* a diffusers-only spelling was seen */
    bool native;     /* a native-only spelling was seen */
} mapped;

/* diffusers → native, top level (dit.md §2.3; diffusers' conversion plan). */
static const struct { const char *from, *to; } top_renames[] = {
    {"proj_in.", "video_patch_proj."},
    {"audio_proj_in.", "audio_patch_proj."},
    {"context_embedder.", "condition_proj."},
    {"time_embedder.linear_1.", "time_embedder.proj_in."},
    {"time_embedder.linear_2.", "time_embedder.proj_out."},
    {"norm_out.norm.", "final_layer.norm."},
    {"norm_out.linear.", "final_layer.adaln_proj.linear."},
    {"proj_out.", "final_layer.video_out."},
    {"audio_proj_out.", "final_layer.audio_out."},
    {"transformer_blocks.", "blocks."},
    {"token_refiner.refiner_blocks.", "token_refiner.blocks."},
};
/* Inside a block: (from, to, part, map). */
static const struct { const char *from, *to; int part; cv_row_map map; } block_renames[] = {
    {"attn.to_q.", "attn.qkv_proj.", 0, CV_MAP_IDENTITY},
    {"attn.to_k.", "attn.qkv_proj.", 1, CV_MAP_IDENTITY},
    {"attn.to_v.", "attn.qkv_proj.", 2, CV_MAP_IDENTITY},
    {"attn.norm_q.", "attn.q_norm.", -1, CV_MAP_IDENTITY},
    {"attn.norm_k.", "attn.k_norm.", -1, CV_MAP_IDENTITY},
    {"attn.to_out.0.", "attn.out_proj.", -1, CV_MAP_IDENTITY},
    {"ff.net.0.proj.", "mlp.fc1.", -1, CV_MAP_SWAP_HALVES},
    {"ff.net.2.", "mlp.fc2.", -1, CV_MAP_IDENTITY},
};
static const char *const native_markers[] = {"blocks.", "video_patch_proj.", "audio_patch_proj.", "condition_proj.",
                                             "final_layer.", "time_embedder.proj_"};

static void map_key(const char *key, mm_qkv_order order, mapped *m)
{
    memset(m, 0, sizeof *m);
    m->part = -1;
    char buf[160];
    snprintf(buf, sizeof buf, "%s", key);
    for (size_t i = 0; i < sizeof top_renames / sizeof top_renames[0]; i++)
        if (starts(buf, top_renames[i].from)) {
            char tmp[160];
            snprintf(tmp, sizeof tmp, "%s%s", top_renames[i].to, buf + strlen(top_renames[i].from));
            snprintf(buf, sizeof buf, "%s", tmp);
            m->diffusers = true;
            break;
        }
    if (!m->diffusers)
        for (size_t i = 0; i < sizeof native_markers / sizeof native_markers[0]; i++)
            if (starts(buf, native_markers[i]))
                m->native = true;
    /* the block-inner part after "blocks.N." or "token_refiner.blocks.N." */
    char *inner = NULL;
    if (starts(buf, "blocks.") || starts(buf, "token_refiner.blocks.")) {
        char *p = buf + (starts(buf, "blocks.") ? 7 : 21);
        while (*p >= '0' && *p <= '9')
            p++;
        if (*p == '.')
            inner = p + 1;
    }
    if (inner)
        for (size_t i = 0; i < sizeof block_renames / sizeof block_renames[0]; i++)
            if (starts(inner, block_renames[i].from)) {
                char tail[160];
                snprintf(tail, sizeof tail, "%s%s", block_renames[i].to, inner + strlen(block_renames[i].from));
                snprintf(inner, sizeof buf - (size_t)(inner - buf), "%s", tail);
                m->part = block_renames[i].part;
                m->map = block_renames[i].map;
                m->diffusers = true;
                m->native = false;
                break;
            }
    if (!m->diffusers && order == MM_QKV_INTERLEAVED && ends(buf, ".attn.qkv_proj.weight"))
        m->map = CV_MAP_QKV_INTERLEAVED;
    snprintf(m->name, sizeof m->name, "%s", buf);
}

cv_tensor *cv_find(cv_source *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    return NULL;
}

static cv_tensor *find_or_add(cv_source *s, const char *name, mm_error *err)
{
    cv_tensor *t = cv_find(s, name);
    if (t)
        return t;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        cv_tensor *nt = realloc(s->t, sizeof *nt * (size_t)cap);
        if (!nt) {
            mm_fail(err, "out of memory");
            return NULL;
        }
        s->t = nt;
        s->cap = cap;
    }
    t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

/* ------------------------------------------------------------ opening */

static int open_file(cv_source *s, const char *path, mm_error *err)
{
    if (s->n_files == MM_CONVERT_MAX_INPUTS)
        return mm_fail(err, "more than %d input files", MM_CONVERT_MAX_INPUTS);
    return mm_st_open(&s->files[s->n_files++], path, err) == 0 ? 0 : (s->n_files--, -1);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A folder: its *.safetensors in name order. */
static int open_folder(cv_source *s, const char *dir, mm_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return mm_fail(err, "%s: cannot open the folder", dir);
    char *names[MM_CONVERT_MAX_INPUTS];
    int n = 0, rc = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (!ends(de->d_name, ".safetensors"))
            continue;
        if (n == MM_CONVERT_MAX_INPUTS) {
            rc = mm_fail(err, "%s: more than %d .safetensors files", dir, MM_CONVERT_MAX_INPUTS);
            break;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    if (rc == 0 && n == 0)
        rc = mm_fail(err, "%s: no .safetensors files in the folder", dir);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (rc == 0)
            rc = open_file(s, path, err);
        free(names[i]);
    }
    return rc;
}

/* A *.index.json (diffusers / transformers shards): the files its weight_map names. */
static int open_index(cv_source *s, const char *path, mm_error *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    json_t *map = root ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        json_decref(root);
        return mm_fail(err, "%s: not a shard index (no \"weight_map\" object)", path);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    const char *seen[MM_CONVERT_MAX_INPUTS];
    int n_seen = 0, rc = 0;
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v)
    {
        const char *f = json_string_value(v);
        if (!f || strchr(f, '/')) {
            rc = mm_fail(err, "%s: weight_map entry '%s' is not a file name beside the index", path, key);
            break;
        }
        bool dup = false;
        for (int i = 0; i < n_seen && !dup; i++)
            dup = strcmp(seen[i], f) == 0;
        if (dup)
            continue;
        if (n_seen == MM_CONVERT_MAX_INPUTS) {
            rc = mm_fail(err, "%s: more than %d shards", path, MM_CONVERT_MAX_INPUTS);
            break;
        }
        seen[n_seen++] = f;
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", dir, f) >= (int)sizeof p) {
            rc = mm_fail(err, "%s: path too long", path);
            break;
        }
        if ((rc = open_file(s, p, err)) != 0)
            break;
    }
    json_decref(root);
    return rc;
}

static bool dense(mm_dtype t) { return t == MM_F32 || t == MM_BF16 || t == MM_F16; }

/* Files every tensor of one input under its native name. */
static int file_base(cv_source *s, mm_safetensors *st, char *unknown, size_t unknown_len, int *n_unknown,
                     mm_error *err)
{
    for (size_t i = 0; i < mm_st_count(st); i++) {
        const mm_st_entry *e = mm_st_at(st, i);
        const char *k = strip_prefix(e->name);
        s->tensors_in++;
        if (ends(k, ".comfy_quant") || ends(k, ".weight_scale") || e->dtype == MM_I8 || e->dtype == MM_U8)
            return mm_fail(err, "%s: '%s' is a quantized tensor; mmh3 convert takes a bf16/f16/f32 DiT (this file "
                           "may already be one the engine loads)", mm_st_path(st), e->name);
        if (!dense(e->dtype) || e->ndim < 1 || e->ndim > 2) {
            if (*n_unknown < 8)
                snprintf(unknown + strlen(unknown), unknown_len - strlen(unknown), "%s%s (%s, rank %d)",
                         *n_unknown ? ", " : "", e->name, mm_dtype_name(e->dtype), e->ndim);
            (*n_unknown)++;
            continue;
        }
        mapped m;
        map_key(k, s->qkv_order, &m);
        s->diffusers |= m.diffusers;
        s->native |= m.native;
        cv_tensor *t = find_or_add(s, m.name, err);
        if (!t)
            return -1;
        const int slot = m.part < 0 ? 0 : m.part;
        if (t->parts[slot].e || (t->n_parts && (m.part >= 0) != t->split))
            return mm_fail(err, "%s: '%s' is stored twice (also in %s)", mm_st_path(st), e->name,
                           t->parts[slot].file ? t->parts[slot].file : t->parts[0].file);
        t->parts[slot] = (cv_part){.e = e, .file = mm_st_path(st), .map = m.map};
        t->split = m.part >= 0;
        t->n_parts = t->split ? 3 : 1;
        t->ndim = e->ndim;
    }
    return 0;
}

/* Shapes of the assembled tensors: diffusers' three q/k/v thirds stacked. */
static int finish_shapes(cv_source *s, mm_error *err)
{
    for (int i = 0; i < s->n; i++) {
        cv_tensor *t = &s->t[i];
        int64_t rows = 0, cols = -1;
        for (int p = 0; p < t->n_parts; p++) {
            const mm_st_entry *e = t->parts[p].e;
            if (!e)
                return mm_fail(err, "%s: to_%c is missing (the fused tensor is assembled from to_q, to_k and to_v)",
                               t->name, "qkv"[p]);
            int64_t c = e->ndim == 2 ? e->shape[1] : 1;
            if (cols >= 0 && (c != cols || e->shape[0] != t->parts[0].e->shape[0]))
                return mm_fail(err, "%s: its q/k/v parts have different shapes", t->name);
            cols = c;
            t->parts[p].row0 = rows;
            t->parts[p].rows = e->shape[0];
            rows += e->shape[0];
        }
        t->rows = rows;
        t->cols = cols;
        if (t->parts[0].map == CV_MAP_SWAP_HALVES && rows % 2)
            return mm_fail(err, "%s: %lld rows do not split into [value; gate] halves", t->name, (long long)rows);
    }
    const cv_tensor *qn = cv_find(s, "blocks.0.attn.q_norm.weight");
    s->head_dim = qn ? (int)qn->rows : 0;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].parts[0].map == CV_MAP_QKV_INTERLEAVED &&
            (s->head_dim < 1 || s->t[i].rows % (3 * (int64_t)s->head_dim)))
            return mm_fail(err, "%s: %lld rows do not split into heads of %d (blocks.0.attn.q_norm)", s->t[i].name,
                           (long long)s->t[i].rows, s->head_dim);
    return 0;
}

/* ------------------------------------------------------------ deltas */

typedef enum delta_suffix { SUF_NONE, SUF_A, SUF_B, SUF_ALPHA, SUF_DIFF, SUF_DIFF_B, SUF_SET } delta_suffix;

static const struct { const char *suffix; delta_suffix kind; } delta_suffixes[] = {
    {".lora_A.default.weight", SUF_A}, {".lora_A.weight", SUF_A},      {".lora_down.weight", SUF_A},
    {".lora_B.default.weight", SUF_B}, {".lora_B.weight", SUF_B},      {".lora_up.weight", SUF_B},
    {".alpha", SUF_ALPHA},             {".diff_b", SUF_DIFF_B},        {".diff", SUF_DIFF},
    {".set_weight", SUF_SET},
};

/* key → module (prefix stripped, suffix cut) and its kind. */
static delta_suffix split_delta(const char *key, char *module, size_t n)
{
    const char *k = strip_prefix(key);
    for (size_t i = 0; i < sizeof delta_suffixes / sizeof delta_suffixes[0]; i++)
        if (ends(k, delta_suffixes[i].suffix)) {
            snprintf(module, n, "%.*s", (int)(strlen(k) - strlen(delta_suffixes[i].suffix)), k);
            return delta_suffixes[i].kind;
        }
    snprintf(module, n, "%s", k);
    return SUF_NONE;
}

/* The native tensor and part that `module` + leaf names, or NULL. */
static cv_tensor *delta_target(cv_source *s, const char *module, const char *leaf, int *part, cv_row_map *map)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", module, leaf);
    mapped m;
    /* a native-named delta is in the contiguous layout of the output */
    map_key(key, MM_QKV_CONTIGUOUS, &m);
    *part = m.part;
    *map = m.map;
    return cv_find(s, m.name);
}

static int add_delta(cv_tensor *t, const cv_delta *d, mm_error *err)
{
    if (t->n_deltas == t->cap_deltas) {
        int cap = t->cap_deltas ? 2 * t->cap_deltas : 2;
        cv_delta *nd = realloc(t->deltas, sizeof *nd * (size_t)cap);
        if (!nd)
            return mm_fail(err, "out of memory");
        t->deltas = nd;
        t->cap_deltas = cap;
    }
    t->deltas[t->n_deltas++] = *d;
    return 0;
}

static double scalar(const mm_st_entry *e)
{
    switch (e->dtype) {
    case MM_F32: return *(const float *)e->data;
    case MM_BF16: return mm_bf16_to_f32(*(const uint16_t *)e->data);
    case MM_F16: return mm_f16_to_f32(*(const uint16_t *)e->data);
    case MM_F64: return *(const double *)e->data;
    default: return 0;
    }
}

static void note_unplaced(char *buf, size_t n, int *count, const char *key, const char *why)
{
    if (*count < 8)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s%s", *count ? ", " : "", key, why);
    (*count)++;
}

/* One delta bundle: .set_weight first, then diffs and LoRA pairs. */
static int file_deltas(cv_source *s, mm_safetensors *st, mm_error *err)
{
    const char *path = mm_st_path(st);
    char unplaced[1600] = "";
    int n_unplaced = 0;
    const char *meta_alpha = mm_st_metadata(st, "alpha") ? mm_st_metadata(st, "alpha") : mm_st_metadata(st, "lora_alpha");
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < mm_st_count(st); i++) {
            const mm_st_entry *e = mm_st_at(st, i);
            char module[200];
            delta_suffix k = split_delta(e->name, module, sizeof module);
            if ((pass == 0) != (k == SUF_SET) || k == SUF_ALPHA)
                continue;
            if (k == SUF_B) { /* placed with its A; alone it is an error */
                bool has_a = false;
                for (size_t j = 0; j < mm_st_count(st) && !has_a; j++) {
                    char m2[200];
                    has_a = split_delta(mm_st_at(st, j)->name, m2, sizeof m2) == SUF_A && strcmp(m2, module) == 0;
                }
                if (!has_a)
                    note_unplaced(unplaced, sizeof unplaced, &n_unplaced, e->name, " (a lora_B without its lora_A)");
                continue;
            }
            if (k == SUF_NONE) {
                note_unplaced(unplaced, sizeof unplaced, &n_unplaced, e->name, " (not a delta key)");
                continue;
            }
            int part;
            cv_row_map map;
            cv_tensor *t = delta_target(s, module, k == SUF_DIFF_B ? "bias" : "weight", &part, &map);
            if (!t) {
                bool vsa = strstr(module, "to_gate_compress") != NULL;
                note_unplaced(unplaced, sizeof unplaced, &n_unplaced, e->name,
                              vsa ? " (a VSA gate: VSA attention, which mmh3 does not run; use the dense variant)"
                                  : " (no such tensor in the base)");
                continue;
            }
            /* a q/k/v third (diffusers names) or the whole tensor */
            const int64_t rows = part < 0 ? t->rows : t->rows / 3, row0 = part < 0 ? 0 : part * rows;
            const int64_t cols = t->cols;
            char sb[64];
            if (k == SUF_SET) {
                int64_t ec = e->ndim == 2 ? e->shape[1] : 1;
                if ((part >= 0) != t->split)
                    return mm_fail(err, "%s: '%s' replaces a third of %s, which the base stores fused (or the "
                                   "reverse); give a .set_weight for the tensor as the base stores it", path, e->name,
                                   t->name);
                if (!dense(e->dtype) || e->shape[0] != rows || ec != cols || e->ndim != t->ndim)
                    return mm_fail(err, "%s: '%s' is %s %s; it replaces %s, [%lld, %lld]", path, e->name,
                                   mm_dtype_name(e->dtype), mm_shape_str(e->ndim, e->shape, sb, sizeof sb), t->name,
                                   (long long)rows, (long long)cols);
                cv_part *pt = &t->parts[part < 0 ? 0 : part];
                pt->e = e;
                pt->file = path;
                pt->map = map;
                t->replaced = true;
                s->deltas_applied++;
                continue;
            }
            cv_delta d = {.row0 = row0, .rows = rows, .map = map, .scale = 1.0};
            snprintf(d.key, sizeof d.key, "%s", e->name);
            if (k == SUF_DIFF || k == SUF_DIFF_B) {
                int64_t ec = e->ndim == 2 ? e->shape[1] : 1;
                if (!dense(e->dtype) || e->shape[0] != rows || ec != cols)
                    return mm_fail(err, "%s: '%s' is %s %s; the delta of %s must be [%lld, %lld]", path, e->name,
                                   mm_dtype_name(e->dtype), mm_shape_str(e->ndim, e->shape, sb, sizeof sb), t->name,
                                   (long long)rows, (long long)cols);
                d.kind = CV_DELTA_DIFF;
                d.a = e;
            } else { /* SUF_A: find its B and alpha */
                const mm_st_entry *b = NULL, *alpha = NULL;
                for (size_t j = 0; j < mm_st_count(st); j++) {
                    char m2[200];
                    delta_suffix k2 = split_delta(mm_st_at(st, j)->name, m2, sizeof m2);
                    if (strcmp(m2, module) != 0)
                        continue;
                    if (k2 == SUF_B)
                        b = mm_st_at(st, j);
                    else if (k2 == SUF_ALPHA)
                        alpha = mm_st_at(st, j);
                }
                if (!b)
                    return mm_fail(err, "%s: '%s' has no lora_B partner", path, e->name);
                const int64_t r = e->shape[0];
                if (r < 1 || r > 4096)
                    return mm_fail(err, "%s: '%s' has rank %lld; accepted 1..4096", path, e->name, (long long)r);
                if (e->ndim != 2 || b->ndim != 2 || !dense(e->dtype) || !dense(b->dtype) || e->shape[1] != cols ||
                    b->shape[0] != rows || b->shape[1] != r)
                    return mm_fail(err, "%s: %s: A %s and B %s do not fit %s ([%lld, %lld]: A [r, %lld], B [%lld, r])",
                                   path, module, mm_shape_str(e->ndim, e->shape, sb, sizeof sb),
                                   mm_shape_str(b->ndim, b->shape, sb + 32, sizeof sb - 32), t->name, (long long)rows,
                                   (long long)cols, (long long)cols, (long long)rows);
                double a = alpha ? scalar(alpha) : meta_alpha ? strtod(meta_alpha, NULL) : (double)r;
                d.kind = CV_DELTA_LORA;
                d.a = e;
                d.b = b;
                d.scale = a / (double)r;
            }
            if (add_delta(t, &d, err) != 0)
                return -1;
            s->deltas_applied++;
        }
    if (n_unplaced)
        return mm_fail(err, "%s: %d key%s the engine cannot place: %s%s", path, n_unplaced, n_unplaced == 1 ? "" : "s",
                       unplaced, n_unplaced > 8 ? ", ..." : "");
    return 0;
}

/* ------------------------------------------------------------ public */

int cv_source_open(cv_source *s, const mm_convert_options *o, mm_error *err)
{
    memset(s, 0, sizeof *s);
    s->qkv_order = o->qkv_order;
    for (int i = 0; i < o->n_inputs; i++) {
        struct stat sb;
        const char *p = o->inputs[i];
        if (stat(p, &sb) != 0)
            return mm_fail(err, "%s: no such file or folder", p);
        int rc = S_ISDIR(sb.st_mode) ? open_folder(s, p, err) : ends(p, ".json") ? open_index(s, p, err)
                                                                                 : open_file(s, p, err);
        if (rc != 0)
            return -1;
    }
    if (s->n_files == 0)
        return mm_fail(err, "no input checkpoint");
    char unknown[1200] = "";
    int n_unknown = 0;
    for (int i = 0; i < s->n_files; i++)
        if (file_base(s, s->files[i], unknown, sizeof unknown, &n_unknown, err) != 0)
            return -1;
    if (n_unknown)
        return mm_fail(err, "%d tensor%s that are not weights of a dense DiT: %s%s", n_unknown,
                       n_unknown == 1 ? "" : "s", unknown, n_unknown > 8 ? ", ..." : "");
    if (s->diffusers && s->native)
        return mm_fail(err, "the inputs mix diffusers names (transformer_blocks.N...) and MiniMax-native names "
                       "(blocks.N...); give the shards of one checkpoint");
    if (s->native && cv_find(s, "blocks.0.attn.qkv_proj.weight") && s->qkv_order == MM_QKV_ORDER_UNSET)
        return mm_fail(err, "native names: the fused qkv_proj rows are per-head interleaved in MiniMaxAI's release "
                       "shards and contiguous [Q; K; V] in ComfyUI exports and mmh3's own files, and the two load "
                       "alike but render noise when mixed up; say which with --qkv-order interleaved|contiguous");
    if (finish_shapes(s, err) != 0)
        return -1;
    for (int i = 0; i < o->n_deltas; i++) {
        if (mm_st_open(&s->delta_files[s->n_delta_files], o->deltas[i], err) != 0)
            return -1;
        if (file_deltas(s, s->delta_files[s->n_delta_files++], err) != 0)
            return -1;
    }
    return 0;
}

void cv_source_close(cv_source *s)
{
    for (int i = 0; i < s->n; i++) {
        for (int d = 0; d < s->t[i].n_deltas; d++)
            free(s->t[i].deltas[d].a_f32);
        free(s->t[i].deltas);
    }
    free(s->t);
    for (int i = 0; i < s->n_files; i++)
        mm_st_close(s->files[i]);
    for (int i = 0; i < s->n_delta_files; i++)
        mm_st_close(s->delta_files[i]);
    memset(s, 0, sizeof *s);
}

bool cv_is_plain(const cv_tensor *t, mm_dtype dt)
{
    return t->n_parts == 1 && t->n_deltas == 0 && t->parts[0].map == CV_MAP_IDENTITY && t->parts[0].e->dtype == dt;
}

/* ------------------------------------------------------------ reading */

static int64_t stored_row(cv_row_map map, int64_t i, int64_t rows, int head_dim)
{
    switch (map) {
    case CV_MAP_IDENTITY: return i;
    case CV_MAP_SWAP_HALVES: return i < rows / 2 ? i + rows / 2 : i - rows / 2;
    case CV_MAP_QKV_INTERLEAVED: {
        const int64_t a = rows / 3, d = head_dim, third = i / a, h = (i % a) / d, c = i % d;
        return h * 3 * d + third * d + c;
    }
    }
    return i;
}

static void load_f32(const mm_st_entry *e, int64_t offset, int64_t n, float *out)
{
    switch (e->dtype) {
    case MM_F32: memcpy(out, (const float *)e->data + offset, sizeof(float) * (size_t)n); break;
    case MM_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = mm_bf16_to_f32(((const uint16_t *)e->data)[offset + i]);
        break;
    case MM_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = mm_f16_to_f32(((const uint16_t *)e->data)[offset + i]);
        break;
    default: memset(out, 0, sizeof(float) * (size_t)n); break;
    }
}

static int apply_delta(cv_delta *d, int64_t r, int64_t cols, float *row, float *tmp, mm_error *err)
{
    if (r < d->row0 || r >= d->row0 + d->rows)
        return 0;
    const int64_t i = stored_row(d->map, r - d->row0, d->rows, 0);
    if (d->kind == CV_DELTA_DIFF) {
        load_f32(d->a, i * cols, cols, tmp);
        for (int64_t c = 0; c < cols; c++)
            row[c] += tmp[c];
        return 0;
    }
    const int64_t rank = d->a->shape[0];
    if (!d->a_f32) {
        if (!(d->a_f32 = malloc(sizeof(float) * (size_t)(rank * cols))))
            return mm_fail(err, "out of memory for %s", d->key);
        load_f32(d->a, 0, rank * cols, d->a_f32);
    }
    load_f32(d->b, i * rank, rank, tmp);
    for (int64_t j = 0; j < rank; j++) {
        const float coef = (float)(d->scale * tmp[j]);
        const float *a = d->a_f32 + j * cols;
        for (int64_t c = 0; c < cols; c++)
            row[c] += coef * a[c];
    }
    return 0;
}

int cv_read_rows(cv_source *s, cv_tensor *t, int64_t r0, int64_t n, float *out, mm_error *err)
{
    const int64_t cols = t->cols;
    float *tmp = NULL;
    if (t->n_deltas && !(tmp = malloc(sizeof(float) * (size_t)(cols > 4096 ? cols : 4096))))
        return mm_fail(err, "out of memory");
    for (int64_t r = r0; r < r0 + n; r++) {
        const cv_part *p = &t->parts[0];
        for (int k = 1; k < t->n_parts; k++)
            if (r >= t->parts[k].row0)
                p = &t->parts[k];
        const int64_t i = stored_row(p->map, r - p->row0, p->rows, s->head_dim);
        float *row = out + (r - r0) * cols;
        load_f32(p->e, i * cols, cols, row);
        for (int d = 0; d < t->n_deltas; d++)
            if (apply_delta(&t->deltas[d], r, cols, row, tmp, err) != 0) {
                free(tmp);
                return -1;
            }
    }
    free(tmp);
    return 0;
}
