/* The text-encoder conformance kit (manifest "kit":
 * "minimax-h3-text-encoder-conformance"): the Qwen3-VL conditioner in the
 * Comfy nvfp4-AWQ layout against the upstream reference.
 *
 * In the kit's bring-up order, every step is checked before the next runs:
 *   1. checkpoint decode — every nvfp4 linear dequantized by the engine and
 *      hashed (f32 and bf16-RNE) against manifest.checkpoint.nvfp4;
 *   2. presentation — each case rebuilt from its prompt and raw media with
 *      the tokenizer: real ids, then the kit's token-id fold, row types, tags
 *      and MRoPE positions, all exact;
 *   3. preprocessing — processor pixels from raw.* within 1e-6;
 *   4/5. the forward through the production conditioner (its own inputs),
 *      with every dbg.* intermediate of the debug cases compared under the
 *      manifest's debug tolerances;
 * then the manifest's `compare` list decides: out.prompt_embeds within
 * tolerance, out.text_token_tags exact. Outputs are kept for --out under the
 * reference names.
 *
 * Tokenizer: the real Qwen tokenizer from $MMH3_TOKENIZER, <kit>/tokenizer or
 * the release's FL2VA/tokenizer beside the checkout (any form
 * mm_tokenizer_load reads); without one the manifest's recorded segment ids
 * stand in, and the run says so. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/ops.h"
#include "conformance/conformance.h"
#include "core/sha256.h"
#include "model/text/conditioner.h"
#include "model/text/image_preprocess.h"
#include "model/text/mrope.h"
#include "model/text/presentation.h"
#include "model/text/qwen3vl_text.h"
#include "model/text/text_tokenizer.h"

typedef struct te_kit {
    mm_conf_run *run;
    const json_t *m;
    mm_safetensors *cases;
    mm_ctx *ctx; /* the run's device */
    mm_ctx *cpu; /* host-side conversions */
    mm_qwen3vl_config cfg;
    mm_qwen3vl_processor_config image_proc, video_proc;
    /* tokenizers: real ids, and the same folded into the kit's vocabulary */
    mm_text_tokenizer real, folded;
    void *tokenizer_owner;
    int64_t fold_shift, fold_first;
    /* per-case debug captures */
    struct capture *caps;
} te_kit;

typedef struct capture {
    char name[96];
    int index;
    int64_t numel;
    float *data;
    struct capture *next;
} capture;

/* ------------------------------------------------------------ tokenizers */

/* The manifest's own record of the reference tokenization. */
static int segment_encode(void *user, const char *text, size_t len, int32_t **ids, size_t *n, mm_error *err)
{
    const json_t *m = user;
    const json_t *special = json_object_get(json_object_get(m, "tokenizer_crosscheck"), "special_ids");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)special, key, v)
    {
        if (strlen(key) == len && !memcmp(key, text, len)) {
            *ids = malloc(sizeof(int32_t));
            if (!*ids)
                return mm_fail(err, "out of memory");
            (*ids)[0] = (int32_t)json_integer_value(v);
            *n = 1;
            return 0;
        }
    }
    size_t ci, si;
    json_t *c, *s;
    json_array_foreach(json_object_get(m, "cases"), ci, c) json_array_foreach(json_object_get(c, "segments"), si, s)
    {
        const char *t = json_string_value(json_object_get(s, "text"));
        if (!t || strlen(t) != len || memcmp(t, text, len))
            continue;
        const json_t *r = json_object_get(s, "real_ids");
        *n = json_array_size(r);
        *ids = malloc(sizeof(int32_t) * (*n ? *n : 1));
        if (!*ids)
            return mm_fail(err, "out of memory");
        for (size_t i = 0; i < *n; i++)
            (*ids)[i] = (int32_t)json_integer_value(json_array_get(r, i));
        return 0;
    }
    return mm_fail(err, "no tokenizer, and the manifest records no segment \"%.*s\"", (int)len, text);
}

static int64_t fold(const te_kit *k, int64_t real)
{
    return real >= k->fold_first + k->fold_shift ? real - k->fold_shift : real % k->fold_first;
}

static int folded_encode(void *user, const char *text, size_t len, int32_t **ids, size_t *n, mm_error *err)
{
    const te_kit *k = user;
    if (k->real.encode(k->real.user, text, len, ids, n, err) < 0)
        return -1;
    for (size_t i = 0; i < *n; i++)
        (*ids)[i] = (int32_t)fold(k, (*ids)[i]);
    return 0;
}

static int setup_tokenizers(te_kit *k, mm_error *err)
{
    const json_t *t = json_object_get(json_object_get(k->m, "derived"), "tokens");
    json_t *shift = json_object_get(t, "added_block_shift"), *first = json_object_get(t, "first_added_kit_id");
    if (!json_is_integer(shift) || !json_is_integer(first) || json_integer_value(first) <= 0)
        return mm_fail(err, "manifest: derived.tokens.added_block_shift / first_added_kit_id missing");
    k->fold_shift = json_integer_value(shift);
    k->fold_first = json_integer_value(first);
    char path[4096], release[4096];
    const char *env = getenv("MMH3_TOKENIZER");
    snprintf(path, sizeof path, "%s/tokenizer", k->run->kit_dir);
    const char *candidates[3] = {env, path, mm_text_tokenizer_find_release(".", release, sizeof release)};
    for (int i = 0; i < 3 && !k->tokenizer_owner; i++) {
        if (candidates[i] && candidates[i] == env && access(env, R_OK) != 0)
            return mm_fail(err, "$MMH3_TOKENIZER=%s: not readable", env);
        if (!candidates[i] || access(candidates[i], R_OK) != 0)
            continue;
        mm_error terr = {{0}};
        if (mm_text_tokenizer_open(candidates[i], &k->real, &k->tokenizer_owner, &terr) < 0) {
            if (candidates[i] == env)
                return mm_fail(err, "$MMH3_TOKENIZER: %s", terr.msg);
            continue;
        }
        fprintf(k->run->log, "note: tokenizer %s\n", candidates[i]);
    }
    if (!k->tokenizer_owner) {
        k->real = (mm_text_tokenizer){segment_encode, (void *)k->m};
        fprintf(k->run->log, "note: no tokenizer found ($MMH3_TOKENIZER, %s, the release's FL2VA/tokenizer "
                             "beside the checkout): the manifest's recorded segment ids stand in for it\n",
                path);
    }
    k->folded = (mm_text_tokenizer){folded_encode, k};
    return 0;
}

/* The tokenizer agrees with every recorded segment (only with a real one). */
static void check_segments(te_kit *k)
{
    if (!k->tokenizer_owner)
        return;
    size_t ci, si;
    json_t *c, *s;
    int checked = 0;
    char why[MM_ERROR_MAX + 256] = "";
    json_array_foreach(json_object_get(k->m, "cases"), ci, c) json_array_foreach(json_object_get(c, "segments"), si, s)
    {
        const char *t = json_string_value(json_object_get(s, "text"));
        if (!t || why[0])
            continue;
        int32_t *ids = NULL;
        size_t n = 0;
        mm_error err = {{0}};
        const json_t *r = json_object_get(s, "real_ids");
        if (k->real.encode(k->real.user, t, strlen(t), &ids, &n, &err) < 0)
            snprintf(why, sizeof why, "\"%s\": %s", t, err.msg);
        else if (n != json_array_size(r))
            snprintf(why, sizeof why, "\"%s\": %zu ids, reference %zu", t, n, json_array_size(r));
        else
            for (size_t i = 0; i < n && !why[0]; i++)
                if (ids[i] != json_integer_value(json_array_get(r, i)))
                    snprintf(why, sizeof why, "\"%s\": id %zu is %d, reference %lld", t, i, ids[i],
                             (long long)json_integer_value(json_array_get(r, i)));
        free(ids);
        checked++;
    }
    mm_conf_verdict(k->run, !why[0], "tokenizer segments", why[0] ? "%s" : NULL, why);
    if (!why[0])
        fprintf(k->run->log, "      (%d segments)\n", checked);
}

/* ---------------------------------------------------- checkpoint decode */

static void check_decode(te_kit *k, const mm_safetensors *st)
{
    const json_t *lin = json_object_get(json_object_get(k->m, "checkpoint"), "nvfp4");
    const char *name;
    json_t *v;
    mm_ctx *cpu = k->cpu;
    mm_error err = {{0}};
    json_object_foreach((json_t *)lin, name, v)
    {
        char what[160];
        snprintf(what, sizeof what, "decode %s", name);
        const char *f32_hash = json_string_value(json_object_get(v, "fp32_sha256"));
        const char *bf16_hash = json_string_value(json_object_get(v, "bf16_rne_sha256"));
        char p[200];
        mm_tensor packed, scales, s2;
        snprintf(p, sizeof p, "%s.weight", name);
        int rc = mm_st_get(st, p, &packed, &err);
        snprintf(p, sizeof p, "%s.weight_scale", name);
        rc = rc < 0 ? rc : mm_st_get(st, p, &scales, &err);
        snprintf(p, sizeof p, "%s.weight_scale_2", name);
        rc = rc < 0 ? rc : mm_st_get(st, p, &s2, &err);
        if (rc < 0 || !f32_hash || !bf16_hash) {
            mm_conf_verdict(k->run, false, what, "%s", rc < 0 ? err.msg : "manifest hashes missing");
            continue;
        }
        const int64_t N = packed.shape[0], K = packed.shape[1] * 2;
        mm_tensor w32, w16;
        if (mm_tensor_alloc(&w32, mm_cpu(), MM_F32, 2, MM_SHAPE(N, K), &err) < 0 ||
            mm_tensor_alloc(&w16, mm_cpu(), MM_BF16, 2, MM_SHAPE(N, K), &err) < 0) {
            mm_conf_verdict(k->run, false, what, "%s", err.msg);
            continue;
        }
        float scale2 = *(const float *)s2.data;
        mm_nvfp4_dequantize(cpu, &w32, &packed, &scales, scale2);
        mm_nvfp4_dequantize(cpu, &w16, &packed, &scales, scale2);
        if (mm_ctx_error(cpu, &err) < 0) {
            mm_conf_verdict(k->run, false, what, "%s", err.msg);
            mm_ctx_clear_error(cpu);
        } else {
            uint8_t d[32];
            char h32[65], h16[65];
            mm_sha256(w32.data, mm_tensor_nbytes(&w32), d);
            mm_sha256_hex(d, h32);
            mm_sha256(w16.data, mm_tensor_nbytes(&w16), d);
            mm_sha256_hex(d, h16);
            bool ok = !strcmp(h32, f32_hash) && !strcmp(h16, bf16_hash);
            mm_conf_verdict(k->run, ok, what, "sha256 f32 %.12s (ref %.12s), bf16 %.12s (ref %.12s)", h32, f32_hash,
                            h16, bf16_hash);
        }
        mm_tensor_free(&w32);
        mm_tensor_free(&w16);
    }
}

/* --------------------------------------------------------- debug taps */

static void captures_free(te_kit *k)
{
    while (k->caps) {
        capture *n = k->caps->next;
        free(k->caps->data);
        free(k->caps);
        k->caps = n;
    }
}

/* Any tensor (host or device, any float dtype, any strides) into dst f32. */
static int to_host_f32(te_kit *k, const mm_tensor *t, float *dst, mm_error *err)
{
    mm_tensor out = mm_tensor_wrap(dst, mm_cpu(), MM_F32, t->ndim, t->shape);
    if (t->device.kind == MM_DEVICE_CPU) {
        mm_copy(k->cpu, &out, t);
        return mm_ctx_error(k->cpu, err);
    }
    /* Device to host keeps the dtype; the conversion happens on the host. */
    mm_tensor tmp;
    if (mm_tensor_alloc(&tmp, mm_cpu(), t->dtype, t->ndim, t->shape, err) < 0)
        return -1;
    mm_copy(k->ctx, &tmp, t);
    int rc = mm_ctx_sync(k->ctx, err);
    if (rc == 0) {
        mm_copy(k->cpu, &out, &tmp);
        rc = mm_ctx_error(k->cpu, err);
    }
    mm_tensor_free(&tmp);
    return rc;
}

static void on_tap(void *user, const char *name, int index, const mm_tensor *t)
{
    te_kit *k = user;
    capture *c = calloc(1, sizeof *c);
    if (!c)
        return;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->index = index;
    c->numel = mm_tensor_numel(t);
    c->data = malloc(sizeof(float) * (size_t)(c->numel ? c->numel : 1));
    mm_error err = {{0}};
    if (!c->data || to_host_f32(k, t, c->data, &err) < 0) {
        fprintf(k->run->log, "note: debug tap %s: %s\n", name, c->data ? err.msg : "out of memory");
        free(c->data);
        free(c);
        return;
    }
    c->next = k->caps;
    k->caps = c;
}

/* Assembles the captures of `name` (indexed ones in index order) into one array of n values. */
static float *assemble(te_kit *k, const char *name, int64_t n)
{
    float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!out)
        return NULL;
    int64_t filled = 0;
    for (int idx = -1; idx < 64 && filled < n; idx++)
        for (capture *c = k->caps; c; c = c->next)
            if (c->index == idx && !strcmp(c->name, name) && filled + c->numel <= n) {
                memcpy(out + filled, c->data, sizeof(float) * (size_t)c->numel);
                filled += c->numel;
            }
    if (filled != n) {
        free(out);
        return NULL;
    }
    return out;
}

static void check_debug(te_kit *k, const char *cname)
{
    const json_t *tols = json_object_get(json_object_get(k->m, "tolerances"), "debug");
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s.dbg.", cname);
    for (size_t i = 0; i < mm_st_count(k->cases); i++) {
        const mm_st_entry *e = mm_st_at(k->cases, i);
        if (strncmp(e->name, prefix, strlen(prefix)))
            continue;
        const char *dname = e->name + strlen(prefix);
        const json_t *t = json_object_get(tols, dname);
        if (!t)
            continue; /* visual_pos_mask: checked through the layout */
        mm_conf_tol tol = {json_number_value(json_object_get(t, "rel_l2")),
                           json_number_value(json_object_get(t, "max_abs"))};
        float *ref = NULL;
        int64_t n = 0;
        mm_error err = {{0}};
        char what[160];
        snprintf(what, sizeof what, "%s dbg.%s", cname, dname);
        if (mm_conf_read_f32(k->cases, e->name, &ref, &n, NULL, NULL, &err) < 0) {
            mm_conf_verdict(k->run, false, what, "%s", err.msg);
            continue;
        }
        float *mine = assemble(k, dname, n);
        if (!mine)
            mm_conf_verdict(k->run, false, what, "the engine produced no %s of %lld values", dname, (long long)n);
        else
            mm_conf_compare(k->run, what, mine, ref, n, tol);
        free(mine);
        free(ref);
    }
}

/* ---------------------------------------------------------------- cases */

typedef struct case_media {
    mm_cond_reference refs[16];
    mm_pres_item items[16];
    double *times[16];
    int n;
} case_media;

static void media_free(case_media *cm)
{
    for (int i = 0; i < cm->n; i++)
        free(cm->times[i]);
}

static int load_media(te_kit *k, const json_t *c, const char *cname, case_media *cm, mm_error *err)
{
    memset(cm, 0, sizeof *cm);
    size_t i;
    json_t *r;
    int n_img = 0, n_vid = 0;
    json_array_foreach(json_object_get(c, "references"), i, r)
    {
        if (cm->n == 16)
            return mm_fail(err, "%s: more than 16 references", cname);
        const char *kind = json_string_value(json_object_get(r, "kind"));
        mm_cond_reference *ref = &cm->refs[cm->n];
        char name[160];
        const mm_st_entry *e;
        if (kind && !strcmp(kind, "image")) {
            snprintf(name, sizeof name, "%s.raw.image%d", cname, n_img++);
            if (!(e = mm_st_find(k->cases, name)) || e->dtype != MM_U8 || e->ndim != 3 || e->shape[2] != 3)
                return mm_fail(err, "%s: U8 (H, W, 3) expected", name);
            *ref = (mm_cond_reference){.kind = MM_PRES_PICTURE, .rgb = e->data, .width = e->shape[1],
                                       .height = e->shape[0]};
        } else if (kind && !strcmp(kind, "video")) {
            snprintf(name, sizeof name, "%s.raw.video%d", cname, n_vid);
            if (!(e = mm_st_find(k->cases, name)) || e->dtype != MM_U8 || e->ndim != 4 || e->shape[3] != 3)
                return mm_fail(err, "%s: U8 (T, H, W, 3) expected", name);
            snprintf(name, sizeof name, "%s.raw.video%d.timestamps", cname, n_vid++);
            int64_t nt = 0;
            if (mm_conf_read_f64(k->cases, name, &cm->times[cm->n], &nt, err) < 0)
                return -1;
            if (nt != e->shape[0])
                return mm_fail(err, "%s: %lld times for %lld frames", name, (long long)nt, (long long)e->shape[0]);
            *ref = (mm_cond_reference){.kind = MM_PRES_VIDEO, .rgb = e->data, .width = e->shape[2],
                                       .height = e->shape[1], .n_frames = e->shape[0], .times = cm->times[cm->n],
                                       .has_audio = json_is_true(json_object_get(r, "has_audio"))};
        } else if (kind && !strcmp(kind, "audio")) {
            *ref = (mm_cond_reference){.kind = MM_PRES_AUDIO};
        } else {
            return mm_fail(err, "%s: reference kind \"%s\" unknown", cname, kind ? kind : "(missing)");
        }
        cm->n++;
    }
    return 0;
}

/* Processor outputs from raw media vs in.pixel_values*, grids exact. Fills items' grids. */
static void check_pixels(te_kit *k, const char *cname, case_media *cm)
{
    const char *which[2] = {"in.pixel_values", "in.pixel_values_videos"};
    const char *grids[2] = {"in.image_grid_thw", "in.video_grid_thw"};
    for (int mod = 0; mod < 2; mod++) {
        char name[160], gname[160], what[160];
        snprintf(name, sizeof name, "%s.%s", cname, which[mod]);
        snprintf(gname, sizeof gname, "%s.%s", cname, grids[mod]);
        snprintf(what, sizeof what, "%s %s", cname, which[mod]);
        float *ref = NULL;
        int64_t *gref = NULL, n = 0, gn = 0;
        mm_error err = {{0}};
        if (!mm_st_find(k->cases, name))
            continue;
        if (mm_conf_read_f32(k->cases, name, &ref, &n, NULL, NULL, &err) < 0 ||
            mm_conf_read_i64(k->cases, gname, &gref, &gn, &err) < 0) {
            mm_conf_verdict(k->run, false, what, "%s", err.msg);
            free(ref);
            continue;
        }
        double mx = 0;
        int64_t off = 0, g = 0;
        char why[MM_ERROR_MAX + 256] = "";
        for (int i = 0; i < cm->n && !why[0]; i++) {
            const mm_cond_reference *r = &cm->refs[i];
            if (r->kind != (mod ? MM_PRES_VIDEO : MM_PRES_PICTURE))
                continue;
            mm_vision_pixels px;
            int rc = mod ? mm_qwen3vl_preprocess_video(&k->video_proc, r->rgb, r->n_frames, r->height, r->width, &px,
                                                       &err)
                         : mm_qwen3vl_preprocess_image(&k->image_proc, r->rgb, r->height, r->width, &px, &err);
            if (rc < 0) {
                snprintf(why, sizeof why, "%s", err.msg);
                break;
            }
            if (3 * g + 2 >= gn || px.grid[0] != gref[3 * g] || px.grid[1] != gref[3 * g + 1] ||
                px.grid[2] != gref[3 * g + 2])
                snprintf(why, sizeof why, "grid %lld: (%lld, %lld, %lld) differs from the reference", (long long)g,
                         (long long)px.grid[0], (long long)px.grid[1], (long long)px.grid[2]);
            else if ((off + px.n_patches) * px.patch_dim > n)
                snprintf(why, sizeof why, "more patches than the reference");
            else
                for (int64_t e = 0; e < px.n_patches * px.patch_dim; e++) {
                    double d = fabs((double)px.data[e] - ref[off * px.patch_dim + e]);
                    if (d > mx)
                        mx = d;
                }
            memcpy(cm->items[i].grid, px.grid, sizeof px.grid);
            off += px.n_patches, g++;
            mm_vision_pixels_free(&px);
        }
        if (!why[0] && (3 * g != gn))
            snprintf(why, sizeof why, "%lld grids, reference %lld", (long long)g, (long long)(gn / 3));
        mm_conf_verdict(k->run, !why[0] && mx <= 1e-6, what, "%s%smax |Δ| %.3g <= 1e-06", why, why[0] ? "; " : "",
                        mx);
        free(ref);
        free(gref);
    }
}

static bool ids_match(const int32_t *mine, const int64_t *ref, int64_t n, int64_t (*conv)(const te_kit *, int64_t),
                      const te_kit *k, char *why, size_t wn, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t v = conv ? conv(k, mine[i]) : mine[i];
        if (v != ref[i]) {
            snprintf(why, wn, "%s row %lld: %lld != reference %lld", what, (long long)i, (long long)v,
                     (long long)ref[i]);
            return false;
        }
    }
    return true;
}

/* Presentation (real and folded ids, types, tags) and positions, exact. */
static void check_layout(te_kit *k, const json_t *c, const char *cname, case_media *cm)
{
    mm_pres_tokens sp_real, sp_kit;
    mm_presentation pr = {0}, pk = {0};
    mm_error err = {{0}};
    char what[160], why[MM_ERROR_MAX + 256] = "";
    snprintf(what, sizeof what, "%s layout", cname);
    const char *prompt = json_string_value(json_object_get(c, "prompt"));
    int64_t *real = NULL, *ids = NULL, *types = NULL, *tags = NULL, *pos = NULL, *mine_pos = NULL;
    int64_t nr = 0, ni = 0, nt = 0, ng = 0, np = 0;
    for (int i = 0; i < cm->n; i++) {
        cm->items[i].kind = cm->refs[i].kind;
        cm->items[i].frame_times = cm->refs[i].times;
        cm->items[i].n_frame_times = (int)cm->refs[i].n_frames;
        cm->items[i].has_audio = cm->refs[i].has_audio;
    }
    char n1[160], n2[160], n3[160], n4[160], n5[160];
    snprintf(n1, sizeof n1, "%s.meta.input_ids_real", cname);
    snprintf(n2, sizeof n2, "%s.in.input_ids", cname);
    snprintf(n3, sizeof n3, "%s.in.mm_token_type_ids", cname);
    snprintf(n4, sizeof n4, "%s.out.text_token_tags", cname);
    snprintf(n5, sizeof n5, "%s.meta.position_ids", cname);
    if (!prompt || mm_pres_tokens_resolve(&k->real, &sp_real, &err) < 0 ||
        mm_pres_tokens_resolve(&k->folded, &sp_kit, &err) < 0 ||
        mm_presentation_build(&k->real, &sp_real, cm->items, cm->n, prompt, strlen(prompt), k->cfg.vision.merge, &pr,
                              &err) < 0 ||
        mm_presentation_build(&k->folded, &sp_kit, cm->items, cm->n, prompt, strlen(prompt), k->cfg.vision.merge,
                              &pk, &err) < 0 ||
        mm_conf_read_i64(k->cases, n1, &real, &nr, &err) < 0 || mm_conf_read_i64(k->cases, n2, &ids, &ni, &err) < 0 ||
        mm_conf_read_i64(k->cases, n3, &types, &nt, &err) < 0 || mm_conf_read_i64(k->cases, n4, &tags, &ng, &err) < 0 ||
        mm_conf_read_i64(k->cases, n5, &pos, &np, &err) < 0) {
        snprintf(why, sizeof why, "%s", prompt ? err.msg : "no prompt in the manifest");
        goto out;
    }
    const int64_t L = pr.len;
    if (nr != L || ni != L || nt != L || ng != L || np != 3 * L) {
        snprintf(why, sizeof why, "%lld rows, reference %lld", (long long)L, (long long)nr);
        goto out;
    }
    if (sp_kit.image_pad != k->cfg.image_token_id || sp_kit.video_pad != k->cfg.video_token_id ||
        sp_kit.vision_start != k->cfg.vision_start_token_id || sp_kit.vision_end != k->cfg.vision_end_token_id) {
        snprintf(why, sizeof why, "folded vision tokens differ from hf_config's ids");
        goto out;
    }
    if (!ids_match(pr.ids, real, L, NULL, k, why, sizeof why, "real id") ||
        !ids_match(pk.ids, ids, L, NULL, k, why, sizeof why, "kit id"))
        goto out;
    for (int64_t i = 0; i < L && !why[0]; i++) {
        if (pk.row_type[i] != types[i])
            snprintf(why, sizeof why, "mm_token_type row %lld: %u != %lld", (long long)i, pk.row_type[i],
                     (long long)types[i]);
        else if (pk.tags[i] != tags[i])
            snprintf(why, sizeof why, "tag row %lld: %u != %lld", (long long)i, pk.tags[i], (long long)tags[i]);
    }
    if (why[0])
        goto out;
    mine_pos = malloc(sizeof(int64_t) * 3 * (size_t)L);
    if (!mine_pos || mm_mrope_positions(pk.row_type, L, (const int64_t(*)[3])pk.image_grids, pk.n_images,
                                        (const int64_t(*)[3])pk.video_grids, pk.n_videos, k->cfg.vision.merge,
                                        mine_pos, &err) < 0) {
        snprintf(why, sizeof why, "positions: %s", mine_pos ? err.msg : "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < 3 * L && !why[0]; i++)
        if (mine_pos[i] != pos[i])
            snprintf(why, sizeof why, "position_ids row %lld axis %lld: %lld != %lld", (long long)(i % L),
                     (long long)(i / L), (long long)mine_pos[i], (long long)pos[i]);
out:
    mm_conf_verdict(k->run, !why[0], what, why[0] ? "%s" : NULL, why);
    mm_presentation_free(&pr);
    mm_presentation_free(&pk);
    free(real), free(ids), free(types), free(tags), free(pos), free(mine_pos);
}

typedef struct case_out {
    char name[96];
    float *embeds;
    int64_t numel;
    uint8_t *tags;
    int64_t len;
} case_out;

static void run_case(te_kit *k, mm_conditioner *cond, const json_t *c, case_out *co)
{
    const char *cname = json_string_value(json_object_get(c, "name"));
    snprintf(co->name, sizeof co->name, "%s", cname ? cname : "?");
    case_media cm;
    mm_error err = {{0}};
    if (!cname || load_media(k, c, cname, &cm, &err) < 0) {
        mm_conf_verdict(k->run, false, co->name, "%s", cname ? err.msg : "case without a name");
        return;
    }
    check_pixels(k, cname, &cm);
    check_layout(k, c, cname, &cm);
    const char *prompt = json_string_value(json_object_get(c, "prompt"));
    bool debug = json_is_true(json_object_get(c, "debug"));
    mm_conditioner_debug dbg = {on_tap, k};
    mm_cond_result res;
    char what[160];
    snprintf(what, sizeof what, "%s forward", cname);
    if (mm_conditioner_encode(cond, k->ctx, prompt ? prompt : "", prompt ? strlen(prompt) : 0, cm.refs, cm.n, &res,
                              debug ? &dbg : NULL, &err) < 0) {
        mm_conf_verdict(k->run, false, what, "%s", err.msg);
        captures_free(k);
        media_free(&cm);
        return;
    }
    fprintf(k->run->log, "      %s: %lld rows in %.3f s\n", cname, (long long)res.len, res.seconds);
    if (debug)
        check_debug(k, cname);
    captures_free(k);
    co->len = res.len;
    co->numel = mm_tensor_numel(&res.rows);
    co->embeds = malloc(sizeof(float) * (size_t)co->numel);
    co->tags = malloc((size_t)res.len);
    int crc = -1;
    if (co->embeds && co->tags) {
        crc = to_host_f32(k, &res.rows, co->embeds, &err);
        memcpy(co->tags, res.tags, (size_t)res.len);
    }
    if (crc < 0) {
        mm_conf_verdict(k->run, false, what, "%s", err.msg[0] ? err.msg : "out of memory");
        free(co->embeds), free(co->tags);
        co->embeds = NULL, co->tags = NULL;
    } else if (k->run->keep_outputs) {
        char name[160];
        uint16_t *b16 = malloc(sizeof(uint16_t) * (size_t)co->numel);
        int64_t *t64 = malloc(sizeof(int64_t) * (size_t)res.len);
        if (b16 && t64) {
            for (int64_t i = 0; i < co->numel; i++)
                b16[i] = mm_f32_to_bf16(co->embeds[i]);
            for (int64_t i = 0; i < res.len; i++)
                t64[i] = res.tags[i];
            snprintf(name, sizeof name, "%s.out.prompt_embeds", cname);
            mm_conf_keep(k->run, name, MM_BF16, 2, res.rows.shape, b16, &err);
            snprintf(name, sizeof name, "%s.out.text_token_tags", cname);
            mm_conf_keep(k->run, name, MM_I64, 1, MM_SHAPE(res.len), t64, &err);
        }
        free(b16), free(t64);
    }
    mm_cond_result_free(&res);
    media_free(&cm);
}

/* prep_resize: the one non-identity resize of the kit (smart_resize + antialiased bicubic). */
static void check_prep_resize(te_kit *k)
{
    const mm_st_entry *raw = mm_st_find(k->cases, "prep_resize.raw.image0");
    if (!raw)
        return;
    float *ref = NULL;
    int64_t n = 0, *g = NULL, gn = 0;
    mm_error err = {{0}};
    mm_vision_pixels px;
    bool ok = mm_conf_read_f32(k->cases, "prep_resize.pixel_values", &ref, &n, NULL, NULL, &err) == 0 &&
              mm_conf_read_i64(k->cases, "prep_resize.image_grid_thw", &g, &gn, &err) == 0 &&
              mm_qwen3vl_preprocess_image(&k->image_proc, raw->data, raw->shape[0], raw->shape[1], &px, &err) == 0;
    double mx = 0;
    if (ok) {
        ok = gn == 3 && px.grid[0] == g[0] && px.grid[1] == g[1] && px.grid[2] == g[2] &&
             px.n_patches * px.patch_dim == n;
        for (int64_t i = 0; ok && i < n; i++)
            mx = fmax(mx, fabs((double)px.data[i] - ref[i]));
        mm_vision_pixels_free(&px);
    }
    mm_conf_verdict(k->run, ok && mx <= 1e-6, "prep_resize pixel_values", "%smax |Δ| %.3g <= 1e-06",
                    ok ? "" : (err.msg[0] ? err.msg : "grid or size differs; "), mx);
    free(ref);
    free(g);
}

static void final_compare(te_kit *k, case_out *outs, int n_cases)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(k->m, "compare"), i, e)
    {
        const char *tensor = json_string_value(json_object_get(e, "tensor"));
        if (!tensor)
            continue;
        const char *dot = strchr(tensor, '.');
        size_t clen = dot ? (size_t)(dot - tensor) : 0;
        case_out *co = NULL;
        for (int c = 0; c < n_cases; c++)
            if (strlen(outs[c].name) == clen && !strncmp(outs[c].name, tensor, clen))
                co = &outs[c];
        if (!co || !co->embeds) {
            mm_conf_verdict(k->run, false, tensor, "not computed");
            continue;
        }
        const char *field = dot + 1;
        float *ref = NULL;
        int64_t n = 0;
        mm_error err = {{0}};
        if (mm_conf_read_f32(k->cases, tensor, &ref, &n, NULL, NULL, &err) < 0) {
            mm_conf_verdict(k->run, false, tensor, "%s", err.msg);
            continue;
        }
        if (!strcmp(field, "out.text_token_tags")) {
            bool ok = n == co->len;
            int64_t bad = -1;
            for (int64_t r = 0; ok && r < n; r++)
                if ((float)co->tags[r] != ref[r])
                    ok = false, bad = r;
            if (n != co->len)
                mm_conf_verdict(k->run, false, tensor, "%lld rows, reference %lld", (long long)co->len, (long long)n);
            else
                mm_conf_verdict(k->run, ok, tensor, ok ? "%lld rows exact" : "row %lld differs",
                                ok ? (long long)n : (long long)bad);
        } else if (!strcmp(field, "out.prompt_embeds")) {
            mm_conf_tol tol = {json_number_value(json_object_get(e, "rel_l2")),
                               json_number_value(json_object_get(e, "max_abs"))};
            if (n != co->numel)
                mm_conf_verdict(k->run, false, tensor, "%lld values, reference %lld", (long long)co->numel,
                                (long long)n);
            else
                mm_conf_compare(k->run, tensor, co->embeds, ref, n, tol);
        } else {
            mm_conf_verdict(k->run, false, tensor, "unknown output \"%s\"", field);
        }
        free(ref);
    }
}

int mm_conf_kit_text_encoder(mm_conf_run *run, mm_error *err)
{
    te_kit k = {.run = run, .m = run->manifest};
    mm_conditioner *cond = NULL;
    case_out *outs = NULL;
    int n_cases = 0, rc = -1;
    char path[4096];
    mm_safetensors *ckpt = NULL;
    if (mm_qwen3vl_config_from_json(&k.cfg, json_object_get(k.m, "hf_config"), err) < 0) {
        mm_error_prefix(err, "manifest hf_config");
        goto out;
    }
    const json_t *pc = json_object_get(k.m, "processor_config");
    if (mm_qwen3vl_processor_config_from_json(&k.image_proc, json_object_get(pc, "image"), err) < 0 ||
        mm_qwen3vl_processor_config_from_json(&k.video_proc, json_object_get(pc, "video"), err) < 0) {
        mm_error_prefix(err, "manifest processor_config");
        goto out;
    }
    snprintf(path, sizeof path, "%s/cases.safetensors", run->kit_dir);
    if (mm_st_open(&k.cases, path, err) < 0 || mm_ctx_create(&k.ctx, run->device, 0, err) < 0 ||
        mm_ctx_create(&k.cpu, mm_cpu(), 0, err) < 0 ||
        setup_tokenizers(&k, err) < 0)
        goto out;
    snprintf(path, sizeof path, "%s/text_encoder.safetensors", run->kit_dir);
    if (mm_st_open(&ckpt, path, err) < 0)
        goto out;
    check_decode(&k, ckpt);
    check_segments(&k);
    int tap = 0;
    const json_t *jt = json_object_get(json_object_get(json_object_get(k.m, "config"), "text"), "tap");
    if (json_is_integer(jt))
        tap = (int)json_integer_value(jt);
    mm_conditioner_options o = {.checkpoint = path,
                                .config = k.cfg,
                                .image_proc = k.image_proc,
                                .video_proc = k.video_proc,
                                .tokenizer = k.folded,
                                .tap = tap,
                                .out_dtype = MM_BF16};
    if (mm_conditioner_load(&cond, &o, k.ctx, err) < 0)
        goto out;
    fprintf(run->log, "note: %s, hidden_states[%d], device %s\n", path, mm_conditioner_tap(cond),
            run->device.kind == MM_DEVICE_CUDA ? "cuda" : "cpu");
    const json_t *cases = json_object_get(k.m, "cases");
    outs = calloc(json_array_size(cases) + 1, sizeof *outs);
    if (!outs) {
        mm_fail(err, "out of memory");
        goto out;
    }
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) run_case(&k, cond, c, &outs[n_cases++]);
    check_prep_resize(&k);
    final_compare(&k, outs, n_cases);
    rc = 0;
out:
    for (int j = 0; j < n_cases; j++)
        free(outs[j].embeds), free(outs[j].tags);
    free(outs);
    mm_conditioner_free(cond);
    mm_st_close(ckpt);
    mm_st_close(k.cases);
    if (k.tokenizer_owner)
        mm_text_tokenizer_close(k.tokenizer_owner);
    if (k.ctx)
        mm_ctx_destroy(k.ctx);
    if (k.cpu)
        mm_ctx_destroy(k.cpu);
    return rc;
}
