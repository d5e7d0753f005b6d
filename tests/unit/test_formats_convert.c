/* mmh3 convert against the DiT conformance kit. The kit ships its int8
 * ConvRot file, not the float masters it was quantized from, so the dense
 * inputs here are that file dequantized in double (W = (q·s)·H256): the
 * recipe, applied to them, must give back the kit's codes bit for bit and
 * its row scales to the ulp (the f32 absmax the kit divided by 127 is lost
 * in its scale, so a scale can come back one ulp away; nothing closer is
 * recoverable from a quantized file), and the converted file's forwards must sit
 * within the kit's tolerance of the reference (and next to the engine's
 * forward on the kit file itself). The same weights spelled the diffusers
 * way, with the release's interleaved QKV, or as a base plus a FastVideo v2
 * delta bundle convert to the same bytes as their folded dense equivalent.
 * A full model (time MLP + full-width AdaLN) is factorized to rank 8 and the
 * engine's block-0 modulation on the result is compared with the full
 * model's, computed here in double. Broken inputs are refused by name. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/ops.h"
#include "conformance/dit_kit.h"
#include "core/dtype.h"
#include "formats/convert.h"
#include "model/dit/dit.h"
#include "test.h"
#include "test_sampler_kit.h"

static mm_safetensors *kit, *cases;
static json_t *manifest;
static mm_ctx *ctx;
static char tmpdir[512];

/* ------------------------------------------------------------ files built here */

#define TF_MAX 600
typedef struct tfile {
    int n;
    char *names[TF_MAX];
    mm_tensor t[TF_MAX];
    char meta_alpha[16];
} tfile;

static void *tf_add(tfile *f, const char *name, mm_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    size_t bytes = (size_t)(numel * mm_dtype_bits(dt) / 8);
    void *buf = calloc(bytes ? bytes : 1, 1);
    if (data)
        memcpy(buf, data, bytes);
    f->names[f->n] = strdup(name);
    f->t[f->n] = mm_tensor_wrap(buf, mm_cpu(), dt, ndim, shape);
    return f->t[f->n++].data;
}

static int tf_save(tfile *f, const char *path)
{
    mm_error err = {{0}};
    int rc = mm_st_save(path, (size_t)f->n, (const char *const *)f->names, f->t, &err);
    if (rc != 0)
        printf("     saving %s: %s\n", path, err.msg);
    return rc;
}

static void tf_free(tfile *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->names[i]);
        free(f->t[i].data);
    }
    memset(f, 0, sizeof *f);
}

static int tf_find(const tfile *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->names[i], name) == 0)
            return i;
    return -1;
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmpdir, name); }

static bool ends(const char *s, const char *t)
{
    size_t a = strlen(s), b = strlen(t);
    return a >= b && strcmp(s + a - b, t) == 0;
}

/* x ← x·H256 per group of 256, in double (H symmetric, its own inverse). */
static void hadamard_double(double *x, int64_t n)
{
    static const int H4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};
    double tmp[256];
    for (int64_t g = 0; g < n; g += 256)
        for (int s = 1; s < 256; s *= 4) {
            for (int i = 0; i < 256; i++) {
                int d = (i / s) % 4, b = i - d * s;
                tmp[i] = 0.5 * (H4[d][0] * x[g + b] + H4[d][1] * x[g + b + s] + H4[d][2] * x[g + b + 2 * s] +
                                H4[d][3] * x[g + b + 3 * s]);
            }
            memcpy(x + g, tmp, sizeof tmp);
        }
}

/* The kit's ConvRot linear `prefix` dequantized: f32 [N, K]. */
static float *dequantized(const char *prefix, int64_t *n_out, int64_t *k_out)
{
    char name[320];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const mm_st_entry *w = mm_st_find(kit, name);
    snprintf(name, sizeof name, "%s.weight_scale", prefix);
    const mm_st_entry *s = mm_st_find(kit, name);
    const int64_t n = w->shape[0], k = w->shape[1];
    float *out = malloc(sizeof(float) * (size_t)(n * k));
    double *row = malloc(sizeof(double) * (size_t)k);
    for (int64_t r = 0; r < n; r++) {
        const double sc = ((const float *)s->data)[r];
        for (int64_t c = 0; c < k; c++)
            row[c] = ((const int8_t *)w->data)[r * k + c] * sc;
        hadamard_double(row, k);
        for (int64_t c = 0; c < k; c++)
            out[r * k + c] = (float)row[c];
    }
    free(row);
    *n_out = n;
    *k_out = k;
    return out;
}

typedef enum naming { NATIVE, NATIVE_INTERLEAVED, DIFFUSERS } naming;

/* native → diffusers (diffusers' own conversion plan, spelled out here). */
static void diffusers_name(const char *native, char *out, size_t n)
{
    static const struct { const char *a, *b; } top[] = {
        {"video_patch_proj.", "proj_in."},           {"audio_patch_proj.", "audio_proj_in."},
        {"condition_proj.", "context_embedder."},    {"final_layer.norm.", "norm_out.norm."},
        {"final_layer.adaln_proj.linear.", "norm_out.linear."}, {"final_layer.video_out.", "proj_out."},
        {"final_layer.audio_out.", "audio_proj_out."}, {"token_refiner.blocks.", "token_refiner.refiner_blocks."},
        {"blocks.", "transformer_blocks."},          {"time_embedder.proj_in.", "time_embedder.linear_1."},
        {"time_embedder.proj_out.", "time_embedder.linear_2."},
    };
    static const struct { const char *a, *b; } inner[] = {
        {".attn.q_norm.", ".attn.norm_q."}, {".attn.k_norm.", ".attn.norm_k."}, {".attn.out_proj.", ".attn.to_out.0."},
        {".mlp.fc1.", ".ff.net.0.proj."},   {".mlp.fc2.", ".ff.net.2."},
    };
    char buf[256];
    snprintf(buf, sizeof buf, "%s", native);
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strncmp(buf, top[i].a, strlen(top[i].a)) == 0) {
            char t[256];
            snprintf(t, sizeof t, "%s%s", top[i].b, buf + strlen(top[i].a));
            snprintf(buf, sizeof buf, "%s", t);
            break;
        }
    for (size_t i = 0; i < sizeof inner / sizeof inner[0]; i++) {
        char *p = strstr(buf, inner[i].a);
        if (p) {
            char t[256];
            snprintf(t, sizeof t, "%.*s%s%s", (int)(p - buf), buf, inner[i].b, p + strlen(inner[i].a));
            snprintf(buf, sizeof buf, "%s", t);
        }
    }
    snprintf(out, n, "%s", buf);
}

/* One dense tensor into f under the naming: fused QKV split / interleaved, fc1 halves swapped. */
static void add_dense(tfile *f, naming nm, const char *native, mm_dtype dt, int ndim, const int64_t *shape,
                      const void *data, int64_t heads)
{
    const size_t esz = (size_t)mm_dtype_bits(dt) / 8;
    const int64_t rows = shape[0], cols = ndim == 2 ? shape[1] : 1;
    const size_t row_bytes = esz * (size_t)cols;
    if (ends(native, ".attn.qkv_proj.weight") && nm != NATIVE) {
        const int64_t A = rows / 3, D = A / heads;
        if (nm == NATIVE_INTERLEAVED) { /* file row h·3D + t·D + d holds native row t·A + h·D + d */
            char *dst = tf_add(f, native, dt, ndim, shape, NULL);
            for (int64_t t = 0; t < 3; t++)
                for (int64_t h = 0; h < heads; h++)
                    for (int64_t d = 0; d < D; d++)
                        memcpy(dst + (size_t)(h * 3 * D + t * D + d) * row_bytes,
                               (const char *)data + (size_t)(t * A + h * D + d) * row_bytes, row_bytes);
            return;
        }
        char dn[256], part[320];
        diffusers_name(native, dn, sizeof dn);
        *strstr(dn, ".attn.qkv_proj.weight") = '\0';
        for (int t = 0; t < 3; t++) {
            snprintf(part, sizeof part, "%s.attn.to_%c.weight", dn, "qkv"[t]);
            tf_add(f, part, dt, 2, (int64_t[]){A, cols}, (const char *)data + (size_t)(t * A) * row_bytes);
        }
        return;
    }
    char name[256];
    if (nm == DIFFUSERS)
        diffusers_name(native, name, sizeof name);
    else
        snprintf(name, sizeof name, "%s", native);
    char *dst = tf_add(f, name, dt, ndim, shape, data);
    if (nm == DIFFUSERS && ends(native, ".mlp.fc1.weight")) { /* [gate; value] → [value; gate] */
        const size_t half = row_bytes * (size_t)(rows / 2);
        char *tmp = malloc(half);
        memcpy(tmp, dst, half);
        memmove(dst, dst + half, half);
        memcpy(dst + half, tmp, half);
        free(tmp);
    }
}

static int64_t kit_heads(void)
{
    const mm_st_entry *qkv = mm_st_find(kit, "blocks.0.attn.qkv_proj.weight");
    const mm_st_entry *qn = mm_st_find(kit, "blocks.0.attn.q_norm.weight");
    return qkv->shape[0] / 3 / qn->shape[0];
}

/* The kit's DiT as a dense checkpoint in the given naming (prefix on every key). */
static void dense_kit(tfile *f, naming nm, const char *prefix)
{
    const int64_t heads = kit_heads();
    for (size_t i = 0; i < mm_st_count(kit); i++) {
        const mm_st_entry *e = mm_st_at(kit, i);
        if (ends(e->name, ".comfy_quant") || ends(e->name, ".weight_scale"))
            continue;
        if (nm == DIFFUSERS && strcmp(e->name, "rope.inv_freq") == 0)
            continue; /* diffusers drops it and recomputes it */
        char name[256];
        snprintf(name, sizeof name, "%s%s", prefix, e->name);
        if (e->dtype == MM_I8) {
            char p[256];
            snprintf(p, sizeof p, "%.*s", (int)(strlen(e->name) - 7), e->name);
            int64_t n, k;
            float *w = dequantized(p, &n, &k);
            add_dense(f, nm, name, MM_F32, 2, (int64_t[]){n, k}, w, heads);
            free(w);
        } else {
            add_dense(f, nm, name, e->dtype, e->ndim, e->shape, e->data, heads);
        }
    }
}

static int convert(const char *in, const char *out, mm_qkv_order order, const char *delta, mm_convert_report *rep,
                   mm_error *err)
{
    mm_convert_options o = {.n_inputs = 1, .out_path = out, .qkv_order = order, .threads = 2};
    o.inputs[0] = in;
    if (delta)
        o.deltas[o.n_deltas++] = delta;
    return mm_convert_dit(&o, rep, err);
}

/* ------------------------------------------------------------ comparisons */

/* Every tensor of a and b: same name set, bytes equal, except ConvRot scales (≤ max_ulps apart). */
static void expect_same_file(const char *what, const char *pa, const char *pb, int max_ulps, int *scale_diffs)
{
    mm_safetensors *a, *b;
    mm_error err = {{0}};
    MM_REQUIRE(mm_st_open(&a, pa, &err) == 0 && mm_st_open(&b, pb, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_st_count(a) == mm_st_count(b), "%s: %zu vs %zu tensors", what, mm_st_count(a), mm_st_count(b));
    int diffs = 0;
    for (size_t i = 0; i < mm_st_count(a); i++) {
        const mm_st_entry *ea = mm_st_at(a, i), *eb = mm_st_find(b, ea->name);
        MM_EXPECT(eb != NULL, "%s: %s missing", what, ea->name);
        if (!eb)
            continue;
        char sa[64], sb[64];
        MM_EXPECT(ea->dtype == eb->dtype && ea->ndim == eb->ndim &&
                      !strcmp(mm_shape_str(ea->ndim, ea->shape, sa, sizeof sa), mm_shape_str(eb->ndim, eb->shape, sb, sizeof sb)),
                  "%s: %s is %s %s vs %s %s", what, ea->name, mm_dtype_name(ea->dtype), sa, mm_dtype_name(eb->dtype), sb);
        if (ea->end - ea->begin != eb->end - eb->begin)
            continue;
        if (ends(ea->name, ".weight_scale")) {
            const int32_t *x = ea->data, *y = eb->data;
            for (int64_t k = 0; k < (int64_t)(ea->end - ea->begin) / 4; k++) {
                int32_t d = x[k] - y[k];
                if (d)
                    diffs++;
                MM_EXPECT(abs(d) <= max_ulps, "%s: %s[%lld] %.9g vs %.9g (%d ulps)", what, ea->name, (long long)k,
                          (double)((const float *)x)[k], (double)((const float *)y)[k], d);
            }
            continue;
        }
        int64_t first = -1, nd = 0;
        for (int64_t k = 0; k < (int64_t)(ea->end - ea->begin); k++)
            if (((const uint8_t *)ea->data)[k] != ((const uint8_t *)eb->data)[k]) {
                if (first < 0)
                    first = k;
                nd++;
            }
        MM_EXPECT(nd == 0, "%s: %s differs in %lld bytes (first at %lld)", what, ea->name, (long long)nd,
                  (long long)first);
    }
    if (scale_diffs)
        *scale_diffs = diffs;
    mm_st_close(a);
    mm_st_close(b);
}

static const char *const CASES[] = {"t2va_step0", "t2va_step3", "fl2va_first_step2", "fl2va_firstlast_step5",
                                    "ref2va_step4"};

/* Forward of a kit case on a checkpoint: malloc'ed [video | audio] velocities. */
static float *forward(const char *ckpt, const char *case_name, int64_t *nv, int64_t *na, const mm_dit_debug *dbg)
{
    kit_forward_case f;
    mm_dit *dit = NULL;
    mm_error err = {{0}};
    if (kit_forward_case_load(&f, manifest, cases, case_name) != 0)
        return NULL;
    if (mm_dit_load(&dit, ckpt, ctx, NULL, &err) != 0) {
        printf("     loading %s: %s\n", ckpt, err.msg);
        kit_forward_case_free(&f);
        return NULL;
    }
    const mm_dit_config *c = mm_dit_get_config(dit);
    *nv = f.l.video_rows * c->video_row_width;
    *na = f.l.audio_rows * c->audio_row_width;
    float *out = calloc((size_t)(*nv + *na), sizeof(float));
    mm_tensor vv = mm_tensor_wrap(out, mm_cpu(), MM_F32, 2, (int64_t[]){f.l.video_rows, c->video_row_width});
    mm_tensor va = mm_tensor_wrap(out + *nv, mm_cpu(), MM_F32, 2, (int64_t[]){f.l.audio_rows, c->audio_row_width});
    mm_dit_request *req = NULL;
    if (mm_dit_request_begin(dit, ctx, &f.l, &f.text, dbg, &req, &err) != 0 ||
        mm_dit_forward(req, f.row_t, &f.video, &f.audio, &vv, &va, &err) != 0) {
        printf("     forward %s: %s\n", case_name, err.msg);
        free(out);
        out = NULL;
    }
    mm_dit_request_end(req);
    mm_dit_free(dit);
    kit_forward_case_free(&f);
    return out;
}

static double rel_l2(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double tolerance(const char *stream)
{
    json_t *t = json_object_get(json_object_get(json_object_get(manifest, "tolerances"), "forward"), stream);
    return json_number_value(json_object_get(t, "rel_l2"));
}

/* ------------------------------------------------------------ tests */

static char converted_native[1024];

static void test_round_trip_gives_the_kit_file(void)
{
    tfile f = {0};
    char in[1024];
    path_of(in, sizeof in, "dense_native.safetensors");
    path_of(converted_native, sizeof converted_native, "converted_native.safetensors");
    dense_kit(&f, NATIVE, "model.diffusion_model.");
    MM_REQUIRE(tf_save(&f, in) == 0, "dense input");
    tf_free(&f);
    mm_convert_report rep;
    mm_error err = {{0}};
    MM_REQUIRE(convert(in, converted_native, MM_QKV_CONTIGUOUS, NULL, &rep, &err) == 0, "%s", err.msg);
    MM_EXPECT(rep.quantized == 8 && !rep.full_adaln && rep.adaln_rank == 8 && !strcmp(rep.naming, "native"),
              "report: %d quantized, full %d, rank %d, %s", rep.quantized, rep.full_adaln, rep.adaln_rank, rep.naming);
    char kit_path[1024];
    snprintf(kit_path, sizeof kit_path, "%s/dit/dit.safetensors", mm_test_data_dir());
    int scale_diffs = 0;
    expect_same_file("converted vs kit", converted_native, kit_path, 1, &scale_diffs);
    printf("     codes and every other tensor bit for bit; %d of the row scales 1 ulp off\n", scale_diffs);
}

/* The command line runs the same conversion (when the suite says where the build is). */
static void test_command_line(void)
{
    MM_REQUIRE(converted_native[0], "needs test_round_trip_gives_the_kit_file");
    const char *build = getenv("MMH3_BUILD");
    if (!build) {
        printf("     (MMH3_BUILD not set: the mmh3 program is not checked)\n");
        return;
    }
    char in[1024], out[1024], cmd[4096];
    path_of(in, sizeof in, "dense_native.safetensors");
    path_of(out, sizeof out, "cli_converted.safetensors");
    snprintf(cmd, sizeof cmd, "'%s/mmh3' convert '%s' -o '%s' --qkv-order contiguous -q", build, in, out);
    MM_REQUIRE(system(cmd) == 0, "%s failed", cmd);
    expect_same_file("mmh3 convert vs the library", out, converted_native, 0, NULL);
    snprintf(cmd, sizeof cmd, "'%s/mmh3' convert '%s' -o '%s' -q 2>/dev/null", build, in, out);
    int rc = system(cmd);
    MM_EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "without --qkv-order: exit %d, 1 expected", WEXITSTATUS(rc));
    snprintf(cmd, sizeof cmd, "'%s/mmh3' convert '%s' --qkv-order sideways -o x 2>/dev/null", build, in);
    rc = system(cmd);
    MM_EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "a bad flag: exit %d, 2 expected", WEXITSTATUS(rc));
    unlink(out);
}

static void test_converted_forwards_match_the_reference(void)
{
    MM_REQUIRE(converted_native[0], "needs test_round_trip_gives_the_kit_file");
    char kit_path[1024];
    snprintf(kit_path, sizeof kit_path, "%s/dit/dit.safetensors", mm_test_data_dir());
    const double tv = tolerance("video"), ta = tolerance("audio");
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        int64_t nv, na, nv2, na2;
        float *mine = forward(converted_native, CASES[i], &nv, &na, NULL);
        float *base = forward(kit_path, CASES[i], &nv2, &na2, NULL);
        MM_REQUIRE(mine && base && nv == nv2, "%s: forwards", CASES[i]);
        char key[256];
        snprintf(key, sizeof key, "%s.out.video", CASES[i]);
        const float *rv = (const float *)mm_st_find(cases, key)->data;
        snprintf(key, sizeof key, "%s.out.audio", CASES[i]);
        const float *ra = (const float *)mm_st_find(cases, key)->data;
        double v = rel_l2(mine, rv, nv), a = rel_l2(mine + nv, ra, na);
        double dv = rel_l2(mine, base, nv), da = rel_l2(mine + nv, base + nv, na);
        MM_EXPECT(v <= tv && a <= ta, "%s: rel_l2 video %.4g (tol %g), audio %.4g (tol %g)", CASES[i], v, tv, a, ta);
        /* int8 activations and bf16 roundings make the forward chaotic: a row scale 1 ulp off either changes
         * nothing or flips codes downstream (~0.6 % rel_l2 on this tiny model) */
        MM_EXPECT(dv <= tv && da <= ta, "%s: against the kit file's forward: video %.3g audio %.3g", CASES[i], dv,
                  da);
        printf("     %-22s vs reference: video %.4f audio %.4f; vs the kit file's forward: %.2g / %.2g\n", CASES[i],
               v, a, dv, da);
        free(mine);
        free(base);
    }
}

static void test_diffusers_and_interleaved_inputs_give_the_same_file(void)
{
    MM_REQUIRE(converted_native[0], "needs test_round_trip_gives_the_kit_file");
    const struct { naming nm; mm_qkv_order order; const char *file, *prefix; } variants[] = {
        {DIFFUSERS, MM_QKV_ORDER_UNSET, "dense_diffusers.safetensors", ""},
        {NATIVE_INTERLEAVED, MM_QKV_INTERLEAVED, "dense_interleaved.safetensors", "diffusion_model."},
    };
    for (size_t v = 0; v < 2; v++) {
        tfile f = {0};
        char in[1024], out[1024];
        path_of(in, sizeof in, variants[v].file);
        path_of(out, sizeof out, "converted_variant.safetensors");
        dense_kit(&f, variants[v].nm, variants[v].prefix);
        MM_REQUIRE(tf_save(&f, in) == 0, "input");
        tf_free(&f);
        mm_convert_report rep;
        mm_error err = {{0}};
        MM_REQUIRE(convert(in, out, variants[v].order, NULL, &rep, &err) == 0, "%s: %s", variants[v].file, err.msg);
        /* diffusers has no rope.inv_freq: the recomputed one must be the stored one */
        expect_same_file(variants[v].file, out, converted_native, 0, NULL);
        unlink(in);
        unlink(out);
    }
}

/* base + bundle converts like the folded dense weights. */
static void test_delta_bundle_folds_like_dense_weights(void)
{
    MM_REQUIRE(converted_native[0], "needs test_round_trip_gives_the_kit_file");
    tfile base = {0}, folded = {0}, bundle = {0};
    dense_kit(&base, NATIVE, "");
    dense_kit(&folded, NATIVE, "");
    uint64_t seed = 12345;
#define RND() ((seed = seed * 6364136223846793005ull + 1442695040888963407ull), (float)((seed >> 40) / 16777216.0 - 0.5))
    /* .diff on a native fused layer (bf16 delta) */
    int i = tf_find(&folded, "blocks.0.mlp.fc2.weight");
    const int64_t n = folded.t[i].shape[0], k = folded.t[i].shape[1];
    uint16_t *diff = malloc(sizeof(uint16_t) * (size_t)(n * k));
    for (int64_t j = 0; j < n * k; j++) {
        diff[j] = mm_f32_to_bf16(0.01f * RND());
        ((float *)folded.t[i].data)[j] += mm_bf16_to_f32(diff[j]);
    }
    tf_add(&bundle, "base_model.model.blocks.0.mlp.fc2.diff", MM_BF16, 2, (int64_t[]){n, k}, diff);
    free(diff);
    /* a diffusers-named .diff on the K third of a fused QKV */
    i = tf_find(&folded, "blocks.1.attn.qkv_proj.weight");
    const int64_t A = folded.t[i].shape[0] / 3, H = folded.t[i].shape[1];
    float *dk = malloc(sizeof(float) * (size_t)(A * H));
    for (int64_t j = 0; j < A * H; j++) {
        dk[j] = 0.02f * RND();
        ((float *)folded.t[i].data)[A * H + j] += dk[j];
    }
    tf_add(&bundle, "transformer_blocks.1.attn.to_k.diff", MM_F32, 2, (int64_t[]){A, H}, dk);
    free(dk);
    /* a LoRA pair (diffusers ff.net.0.proj: B rows in [value; gate] order) with its alpha */
    i = tf_find(&folded, "blocks.1.mlp.fc1.weight");
    const int64_t n1 = folded.t[i].shape[0], k1 = folded.t[i].shape[1], r = 4, half = n1 / 2;
    float *la = malloc(sizeof(float) * (size_t)(r * k1)), *lb = malloc(sizeof(float) * (size_t)(n1 * r));
    for (int64_t j = 0; j < r * k1; j++)
        la[j] = 0.1f * RND();
    for (int64_t j = 0; j < n1 * r; j++)
        lb[j] = 0.1f * RND();
    const float alpha = 2.0f;
    for (int64_t row = 0; row < n1; row++) {
        const int64_t brow = row < half ? row + half : row - half; /* native gate row ← diffusers' second half */
        float *w = (float *)folded.t[i].data + row * k1;
        for (int64_t j = 0; j < r; j++) {
            const float coef = (float)((double)alpha / (double)r * lb[brow * r + j]);
            for (int64_t c = 0; c < k1; c++)
                w[c] += coef * la[j * k1 + c];
        }
    }
    tf_add(&bundle, "transformer_blocks.1.ff.net.0.proj.lora_A.weight", MM_F32, 2, (int64_t[]){r, k1}, la);
    tf_add(&bundle, "transformer_blocks.1.ff.net.0.proj.lora_B.weight", MM_F32, 2, (int64_t[]){n1, r}, lb);
    tf_add(&bundle, "transformer_blocks.1.ff.net.0.proj.alpha", MM_F32, 0, (int64_t[]){1}, &alpha);
    free(la);
    free(lb);
    /* .diff_b on a head bias, .set_weight on a norm */
    i = tf_find(&folded, "final_layer.video_out.bias");
    float db[96];
    for (int j = 0; j < 96; j++) {
        db[j] = 0.05f * RND();
        ((float *)folded.t[i].data)[j] += db[j];
    }
    tf_add(&bundle, "proj_out.diff_b", MM_F32, 1, (int64_t[]){96}, db);
    i = tf_find(&folded, "token_refiner.blocks.0.norm1.weight");
    const int64_t nh = folded.t[i].shape[0];
    uint16_t *nw = malloc(sizeof(uint16_t) * (size_t)nh);
    for (int64_t j = 0; j < nh; j++)
        nw[j] = mm_f32_to_bf16(1.0f + RND());
    memcpy(folded.t[i].data, nw, sizeof(uint16_t) * (size_t)nh);
    tf_add(&bundle, "token_refiner.refiner_blocks.0.norm1.set_weight", MM_BF16, 1, (int64_t[]){nh}, nw);
    free(nw);
#undef RND
    char pb[1024], pf[1024], pd[1024], ob[1024], of[1024];
    path_of(pb, sizeof pb, "delta_base.safetensors");
    path_of(pf, sizeof pf, "delta_folded.safetensors");
    path_of(pd, sizeof pd, "delta_bundle.safetensors");
    path_of(ob, sizeof ob, "delta_base_converted.safetensors");
    path_of(of, sizeof of, "delta_folded_converted.safetensors");
    MM_REQUIRE(tf_save(&base, pb) == 0 && tf_save(&folded, pf) == 0 && tf_save(&bundle, pd) == 0, "inputs");
    tf_free(&base);
    tf_free(&folded);
    tf_free(&bundle);
    mm_convert_report rep;
    mm_error err = {{0}};
    MM_REQUIRE(convert(pb, ob, MM_QKV_CONTIGUOUS, pd, &rep, &err) == 0, "base + bundle: %s", err.msg);
    MM_EXPECT(rep.deltas_applied == 5, "%d deltas applied, 5 given", rep.deltas_applied);
    MM_REQUIRE(convert(pf, of, MM_QKV_CONTIGUOUS, NULL, NULL, &err) == 0, "folded: %s", err.msg);
    expect_same_file("base + bundle vs folded", ob, of, 0, NULL);
    const char *all[] = {pb, pf, pd, ob, of};
    for (int j = 0; j < 5; j++)
        unlink(all[j]);
}

/* ---- a full model: time MLP + full-width AdaLN */

#define T_FREQ 256
#define T_HIDDEN 64
#define T_DIM 32

typedef struct full_model {
    float w1[T_HIDDEN * T_FREQ], b1[T_HIDDEN], w2[T_DIM * T_HIDDEN], b2[T_DIM];
} full_model;

static double silu(double x) { return x / (1 + exp(-x)); }

static void silu_temb(const full_model *m, double t, double *c)
{
    double emb[T_FREQ], h[T_HIDDEN];
    for (int i = 0; i < T_FREQ / 2; i++) {
        double f = exp(-log(10000.0) * i / (T_FREQ / 2));
        emb[i] = cos(t * f);
        emb[T_FREQ / 2 + i] = sin(t * f);
    }
    for (int j = 0; j < T_HIDDEN; j++) {
        double a = m->b1[j];
        for (int i = 0; i < T_FREQ; i++)
            a += (double)m->w1[j * T_FREQ + i] * emb[i];
        h[j] = silu(a);
    }
    for (int j = 0; j < T_DIM; j++) {
        double a = m->b2[j];
        for (int i = 0; i < T_HIDDEN; i++)
            a += (double)m->w2[j * T_HIDDEN + i] * h[i];
        c[j] = silu(a);
    }
}

typedef struct capture {
    float *block0;
    int64_t n;
} capture;

static void on_capture(void *user, const char *name, const mm_tensor *t)
{
    capture *c = user;
    if (strcmp(name, "block0_adaln") != 0)
        return;
    c->n = mm_tensor_numel(t);
    c->block0 = malloc(sizeof(float) * (size_t)c->n);
    memcpy(c->block0, t->data, sizeof(float) * (size_t)c->n);
}

static void test_full_model_adaln_is_factorized(void)
{
    static full_model m;
    uint64_t seed = 777;
#define RND() ((seed = seed * 6364136223846793005ull + 1442695040888963407ull), (float)((seed >> 40) / 16777216.0 - 0.5))
    for (int i = 0; i < T_HIDDEN * T_FREQ; i++)
        m.w1[i] = 2.0f * RND() * sqrtf(3.0f / T_FREQ) * 2;
    for (int i = 0; i < T_HIDDEN; i++)
        m.b1[i] = RND();
    for (int i = 0; i < T_DIM * T_HIDDEN; i++)
        m.w2[i] = 2.0f * RND() * sqrtf(3.0f / T_HIDDEN) * 2;
    for (int i = 0; i < T_DIM; i++)
        m.b2[i] = RND();
    tfile f = {0};
    dense_kit(&f, NATIVE, "");
    /* the pruned AdaLN out, the full one in */
    tfile g = {0};
    const int64_t H = mm_st_find(kit, "video_patch_proj.weight")->shape[0];
    uint16_t *w0 = NULL, *bias0 = NULL; /* block 0's, for the check */
    for (int i = 0; i < f.n; i++) {
        const char *nm = f.names[i];
        if (!strcmp(nm, "adaln_t_table") || strstr(nm, "adaln_proj.linear."))
            continue;
        tf_add(&g, nm, f.t[i].dtype, f.t[i].ndim, f.t[i].shape, f.t[i].data);
    }
    tf_free(&f);
    tf_add(&g, "time_embedder.proj_in.weight", MM_F32, 2, (int64_t[]){T_HIDDEN, T_FREQ}, m.w1);
    tf_add(&g, "time_embedder.proj_in.bias", MM_F32, 1, (int64_t[]){T_HIDDEN}, m.b1);
    tf_add(&g, "time_embedder.proj_out.weight", MM_F32, 2, (int64_t[]){T_DIM, T_HIDDEN}, m.w2);
    tf_add(&g, "time_embedder.proj_out.bias", MM_F32, 1, (int64_t[]){T_DIM}, m.b2);
    const char *adaln[3] = {"blocks.0.adaln_proj.linear", "blocks.1.adaln_proj.linear", "final_layer.adaln_proj.linear"};
    for (int a = 0; a < 3; a++) {
        const int64_t rows = a < 2 ? 18 * H : 2 * H;
        char name[256];
        snprintf(name, sizeof name, "%s.weight", adaln[a]);
        uint16_t *w = tf_add(&g, name, MM_BF16, 2, (int64_t[]){rows, T_DIM}, NULL);
        for (int64_t j = 0; j < rows * T_DIM; j++)
            w[j] = mm_f32_to_bf16(0.3f * RND());
        snprintf(name, sizeof name, "%s.bias", adaln[a]);
        uint16_t *b = tf_add(&g, name, MM_BF16, 1, (int64_t[]){rows}, NULL);
        for (int64_t j = 0; j < rows; j++)
            b[j] = mm_f32_to_bf16(0.2f * RND());
        if (a == 0) {
            w0 = w;
            bias0 = b;
        }
    }
#undef RND
    char in[1024], out[1024], grid[1024];
    path_of(in, sizeof in, "full_dense.safetensors");
    path_of(out, sizeof out, "full_converted.safetensors");
    path_of(grid, sizeof grid, "full_grid.safetensors");
    MM_REQUIRE(tf_save(&g, in) == 0, "full input");
    mm_convert_options o = {.n_inputs = 1, .out_path = out, .grid_path = grid, .qkv_order = MM_QKV_CONTIGUOUS};
    o.inputs[0] = in;
    mm_convert_report rep;
    mm_error err = {{0}};
    MM_REQUIRE(mm_convert_dit(&o, &rep, &err) == 0, "%s", err.msg);
    MM_EXPECT(rep.full_adaln && rep.adaln_rank == 8 && rep.adaln_kept > 0.99999 && rep.adaln_residual < 1e-3,
              "rank %d keeps %.8f, residual %.3g", rep.adaln_rank, rep.adaln_kept, rep.adaln_residual);
    printf("     rank 8 keeps %.10f of the time curve; worst grid point %.2g\n", rep.adaln_kept, rep.adaln_residual);

    /* the grid file: SiLU(temb(k/1024)) */
    mm_safetensors *gs;
    MM_REQUIRE(mm_st_open(&gs, grid, &err) == 0, "%s", err.msg);
    const mm_st_entry *ge = mm_st_find(gs, "silu_t_emb_grid");
    MM_REQUIRE(ge && ge->dtype == MM_F32 && ge->shape[0] == 1025 && ge->shape[1] == T_DIM, "grid tensor");
    double worst = 0, c[T_DIM];
    for (int k = 0; k <= 1024; k += 37) {
        silu_temb(&m, k / 1024.0, c);
        for (int j = 0; j < T_DIM; j++)
            worst = fmax(worst, fabs(((const float *)ge->data)[k * T_DIM + j] - c[j]));
    }
    MM_EXPECT(worst < 1e-6, "grid off by %g", worst);
    mm_st_close(gs);

    /* the engine's block-0 modulation on the converted file vs the full model's, for a kit case's timesteps */
    capture cap = {0};
    mm_dit_debug dbg = {.capture = on_capture, .user = &cap};
    int64_t nv, na;
    float *v = forward(out, "fl2va_first_step2", &nv, &na, &dbg);
    MM_REQUIRE(v && cap.block0, "forward on the converted full model");
    bool finite = true;
    for (int64_t j = 0; j < nv + na; j++)
        finite &= isfinite(v[j]) != 0;
    MM_EXPECT(finite, "non-finite velocities");
    kit_forward_case fc;
    MM_REQUIRE(kit_forward_case_load(&fc, manifest, cases, "fl2va_first_step2") == 0, "case");
    float u[8];
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)fc.l.rows);
    int mcount = mm_dit_unique_timesteps(fc.row_t, fc.l.rows, u, 8, ti);
    const int64_t rows = 18 * H;
    MM_REQUIRE(cap.n == mcount * rows, "captured %lld values for %d timesteps", (long long)cap.n, mcount);
    double num = 0, den = 0;
    for (int mi = 0; mi < mcount; mi++) {
        silu_temb(&m, u[mi], c);
        for (int64_t r = 0; r < rows; r++) {
            double want = mm_bf16_to_f32(bias0[r]);
            for (int j = 0; j < T_DIM; j++)
                want += (double)mm_bf16_to_f32(w0[r * T_DIM + j]) * c[j];
            double d = cap.block0[mi * rows + r] - want;
            num += d * d;
            den += want * want;
        }
    }
    double rel = sqrt(num / den);
    MM_EXPECT(rel < 2e-3, "block 0 modulation vs the full model: rel_l2 %.3g", rel);
    printf("     block-0 modulation of the converted file vs the full model (double): rel_l2 %.2g over %d "
           "timesteps\n", rel, mcount);
    free(ti);
    free(v);
    free(cap.block0);
    kit_forward_case_free(&fc);
    tf_free(&g);
    unlink(in);
    unlink(out);
    unlink(grid);
}

/* ---- refusals */

typedef void (*edit_fn)(tfile *f);

/* a name starting with '_' is left out of the file */
static void drop_fc2(tfile *f) { f->names[tf_find(f, "blocks.1.mlp.fc2.weight")][0] = '_'; }
static void add_gate(tfile *f)
{
    tf_add(f, "blocks.0.attn.to_gate_compress.weight", MM_BF16, 2, (int64_t[]){4, 4}, NULL);
}
static void add_int8(tfile *f) { tf_add(f, "blocks.0.attn.qkv_proj.comfy_quant", MM_U8, 1, (int64_t[]){4}, "abcd"); }
static void bad_norm(tfile *f)
{
    int i = tf_find(f, "blocks.0.norm2.weight");
    f->t[i].shape[0] = 8;
}
static void mixed(tfile *f) { tf_add(f, "transformer_blocks.7.norm1.weight", MM_BF16, 1, (int64_t[]){4}, NULL); }

static void test_broken_inputs_are_refused_by_name(void)
{
    static const struct { const char *what; edit_fn edit; mm_qkv_order order; const char *says; } cases_[] = {
        {"no qkv order", NULL, MM_QKV_ORDER_UNSET, "--qkv-order interleaved|contiguous"},
        {"missing tensor", drop_fc2, MM_QKV_CONTIGUOUS, "no blocks.1.mlp.fc2.weight"},
        {"VSA gate", add_gate, MM_QKV_CONTIGUOUS, "to_gate_compress"},
        {"already quantized", add_int8, MM_QKV_CONTIGUOUS, "quantized tensor"},
        {"wrong shape", bad_norm, MM_QKV_CONTIGUOUS, "blocks.0.norm2.weight is [8, 1]"},
        {"mixed naming", mixed, MM_QKV_CONTIGUOUS, "mix diffusers names"},
    };
    for (size_t i = 0; i < sizeof cases_ / sizeof cases_[0]; i++) {
        tfile f = {0};
        dense_kit(&f, NATIVE, "");
        if (cases_[i].edit)
            cases_[i].edit(&f);
        char in[1024], out[1024];
        path_of(in, sizeof in, "broken.safetensors");
        path_of(out, sizeof out, "broken_out.safetensors");
        tfile g = {0};
        for (int k = 0; k < f.n; k++)
            if (f.names[k][0] != '_')
                tf_add(&g, f.names[k], f.t[k].dtype, f.t[k].ndim, f.t[k].shape, f.t[k].data);
        MM_REQUIRE(tf_save(&g, in) == 0, "%s: input", cases_[i].what);
        tf_free(&f);
        tf_free(&g);
        mm_error err = {{0}};
        int rc = convert(in, out, cases_[i].order, NULL, NULL, &err);
        MM_EXPECT(rc != 0 && strstr(err.msg, cases_[i].says), "%s: refused saying '%s'; got rc %d '%s'",
                  cases_[i].what, cases_[i].says, rc, err.msg);
        MM_EXPECT(access(out, F_OK) != 0, "%s: an output was left behind", cases_[i].what);
        unlink(in);
    }
    /* a delta that does not fit, and one the base has no tensor for */
    tfile base = {0}, bundle = {0};
    dense_kit(&base, NATIVE, "");
    char pb[1024], pd[1024], out[1024];
    path_of(pb, sizeof pb, "refuse_base.safetensors");
    path_of(pd, sizeof pd, "refuse_bundle.safetensors");
    path_of(out, sizeof out, "refuse_out.safetensors");
    MM_REQUIRE(tf_save(&base, pb) == 0, "base");
    tf_free(&base);
    const struct { const char *key; int64_t shape[2]; const char *says; } deltas[] = {
        {"blocks.0.mlp.fc2.diff", {3, 3}, "the delta of blocks.0.mlp.fc2.weight must be"},
        {"transformer_blocks.0.attn.to_gate_compress.set_weight", {4, 4}, "VSA gate"},
        {"blocks.0.mlp.fc9.diff", {4, 4}, "no such tensor in the base"},
    };
    for (size_t i = 0; i < sizeof deltas / sizeof deltas[0]; i++) {
        tf_add(&bundle, deltas[i].key, MM_F32, 2, deltas[i].shape, NULL);
        MM_REQUIRE(tf_save(&bundle, pd) == 0, "bundle");
        tf_free(&bundle);
        mm_error err = {{0}};
        int rc = convert(pb, out, MM_QKV_CONTIGUOUS, pd, NULL, &err);
        MM_EXPECT(rc != 0 && strstr(err.msg, deltas[i].says) && strstr(err.msg, "refuse_bundle"),
                  "delta %s refused saying '%s': got '%s'", deltas[i].key, deltas[i].says, err.msg);
    }
    unlink(pb);
    unlink(pd);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/mmh3-convert-test-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmpdir);
    if (system(cmd) != 0)
        return 1;
    kit = kit_open("dit.safetensors");
    cases = kit_open("cases.safetensors");
    char mpath[1024];
    snprintf(mpath, sizeof mpath, "%s/dit/manifest.json", mm_test_data_dir());
    json_error_t je;
    manifest = json_load_file(mpath, 0, &je);
    mm_error err = {{0}};
    if (!kit || !cases || !manifest || mm_ctx_create(&ctx, mm_cpu(), 2, &err) != 0) {
        printf("FAIL setup: kit or context: %s\n", err.msg);
        return 1;
    }
    MM_RUN(test_round_trip_gives_the_kit_file);
    MM_RUN(test_command_line);
    MM_RUN(test_converted_forwards_match_the_reference);
    MM_RUN(test_diffusers_and_interleaved_inputs_give_the_same_file);
    MM_RUN(test_delta_bundle_folds_like_dense_weights);
    MM_RUN(test_full_model_adaln_is_factorized);
    MM_RUN(test_broken_inputs_are_refused_by_name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("     could not remove %s\n", tmpdir);
    mm_ctx_destroy(ctx);
    json_decref(manifest);
    mm_st_close(kit);
    mm_st_close(cases);
    return mm_test_exit();
}
