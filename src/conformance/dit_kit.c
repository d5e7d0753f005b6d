/* Runner for the DiT conformance kit (see tests/data/dit/README.md).
 *
 * For every forward case: rebuild the packed layout from the case's metadata
 * and check it against the stored inputs exactly; run the forward on the
 * kit's inputs; compare the velocities (and, for debug cases, the
 * intermediates and the ConvRot pairs) with the manifest's tolerances. For
 * every sampler run: the layout, the sigma grids and the seeded noise bit for
 * bit, the noise-augmented keyframe rows, then the whole Euler loop against
 * the final latents. Nothing is taken from constants: the model's shape comes
 * from the checkpoint, everything else from the manifest.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "conformance/dit_kit.h"
#include "model/dit/dit.h"
#include "model/dit/patchify.h"
#include "sampler/flow_sampler.h"
#include "sampler/initial_noise.h"
#include "sampler/sigmas.h"

typedef struct dit_kit {
    mm_conf_run *run;
    mm_ctx *ctx;
    mm_dit *dit;
    const mm_dit_config *cfg;
    mm_safetensors *cases, *sampler;
    double video_shift, audio_shift;
    /* --lora: the adapters every request applies; the kit's references then
     * do not describe the outputs (compare_kit notes instead of judging) */
    mm_lora *loras[MM_CONF_MAX_LORAS];
    mm_lora_use uses[MM_CONF_MAX_LORAS];
    int n_loras;
    mm_sparse_config sparse_cfg; /* --sparse: the main blocks' attention through it */
    const mm_sparse_config *sparse;
    int sparse_noted;
} dit_kit;

static int begin_request(dit_kit *k, const mm_dit_layout *l, const mm_tensor *text, const mm_dit_debug *dbg,
                         mm_dit_request **req, mm_error *err)
{
    mm_dit_request_opts o = {.loras = k->uses, .n_loras = k->n_loras, .sparse = k->sparse};
    return mm_dit_request_begin_ex(k->dit, k->ctx, l, text, &o, dbg, req, err);
}

/* The adapters of --lora, opened, checked against the kit's DiT and uploaded;
 * a malformed one fails the run with the file and the module named. */
static int open_loras(dit_kit *k, mm_error *err)
{
    for (int i = 0; i < k->run->n_loras && i < MM_CONF_MAX_LORAS; i++) {
        const mm_conf_lora *c = &k->run->loras[i];
        mm_lora *l;
        if (mm_lora_open(&l, c->path, NULL, err) != 0)
            return -1;
        k->loras[k->n_loras] = l;
        k->uses[k->n_loras++] = (mm_lora_use){l, c->strength};
        if (mm_lora_fit(l, k->cfg, err) != 0 || mm_lora_upload(l, k->ctx, err) != 0)
            return -1;
        fprintf(k->run->log, "     LoRA %s (strength %g): %s, rank %d..%d, %s\n", l->path, c->strength,
                l->summary.family, l->summary.rank_min, l->summary.rank_max, l->summary.targets);
    }
    if (k->n_loras)
        fprintf(k->run->log, "     adapters applied: the outputs are written (--out), not judged against the kit's "
                             "references, which have none\n");
    return 0;
}

/* ------------------------------------------------------------- transfers */

/* A contiguous device tensor as host f32 (any float dtype). */
static float *to_host_f32(dit_kit *k, const mm_tensor *t, mm_error *err)
{
    const int64_t n = mm_tensor_numel(t);
    mm_tensor host, f32;
    if (mm_tensor_alloc(&host, mm_cpu(), t->dtype, t->ndim, t->shape, err) != 0)
        return NULL;
    if (t->device.kind == MM_DEVICE_CPU) {
        memcpy(host.data, t->data, mm_tensor_nbytes(&host)); /* host tensors are contiguous here */
    } else {
        mm_copy(k->ctx, &host, t);
        if (mm_ctx_sync(k->ctx, err) != 0) {
            mm_tensor_free(&host);
            return NULL;
        }
    }
    float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!out) {
        mm_tensor_free(&host);
        mm_fail(err, "out of memory");
        return NULL;
    }
    f32 = mm_tensor_wrap(out, mm_cpu(), MM_F32, 1, (int64_t[]){n});
    mm_tensor flat = mm_tensor_wrap(host.data, mm_cpu(), host.dtype, 1, (int64_t[]){n});
    for (int64_t i = 0; i < n; i++)
        mm_tensor_set(&f32, (int64_t[]){i}, mm_tensor_get(&flat, (int64_t[]){i}));
    mm_tensor_free(&host);
    return out;
}

/* A kit tensor (any dtype) on the compute device, reshaped to ndim/shape. */
static int kit_to_device(dit_kit *k, const mm_safetensors *st, const char *name, int ndim, const int64_t *shape,
                         mm_tensor *out, mm_error *err)
{
    mm_tensor src;
    if (mm_st_get(st, name, &src, err) != 0)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    if (n != mm_tensor_numel(&src))
        return mm_fail(err, "%s: %lld elements, %lld expected", name, (long long)mm_tensor_numel(&src), (long long)n);
    mm_tensor view = mm_tensor_wrap(src.data, mm_cpu(), src.dtype, ndim, shape);
    if (mm_tensor_alloc(out, mm_ctx_device(k->ctx), src.dtype, ndim, shape, err) != 0)
        return -1;
    mm_copy(k->ctx, out, &view);
    return mm_ctx_sync(k->ctx, err);
}

static int tolerance(dit_kit *k, const char *path, mm_conf_tol *tol, mm_error *err)
{
    return mm_conf_tolerance(json_object_get(k->run->manifest, "tolerances"), path, tol, err);
}

/* Compares host values with the kit tensor `ref_name` (any float dtype). */
static int compare_kit(dit_kit *k, const mm_safetensors *st, const char *what, const float *mine, int64_t n,
                       const char *ref_name, const char *tol_path, mm_error *err)
{
    float *ref;
    int64_t rn;
    mm_conf_tol tol;
    if (tolerance(k, tol_path, &tol, err) != 0 || mm_conf_read_f32(st, ref_name, &ref, &rn, NULL, NULL, err) != 0)
        return -1;
    if (rn != n) {
        mm_conf_verdict(k->run, false, what, "%lld values, the kit has %lld", (long long)n, (long long)rn);
    } else if (k->n_loras) {
        mm_conf_diff d = mm_conf_measure(mine, ref, n);
        fprintf(k->run->log, "note %s: with the adapters, rel_l2 %.4g from the kit's adapter-free reference\n", what,
                d.rel_l2);
    } else {
        mm_conf_compare(k->run, what, mine, ref, n, tol);
    }
    free(ref);
    return 0;
}

/* ---------------------------------------------------------- debug capture */

typedef struct capture_state {
    dit_kit *k;
    const char *prefix; /* "<case>.dbg" */
    int failed;
    mm_error err;
} capture_state;

static void capture(void *user, const char *name, const mm_tensor *t)
{
    capture_state *cs = user;
    dit_kit *k = cs->k;
    char ref_name[256], what[256], tol_path[128];
    snprintf(ref_name, sizeof ref_name, "%s.%s", cs->prefix, name);
    if (cs->failed || !mm_st_find(k->cases, ref_name))
        return;
    snprintf(what, sizeof what, "%s", ref_name);
    snprintf(tol_path, sizeof tol_path, "debug.%s", name);
    float *mine = to_host_f32(k, t, &cs->err);
    if (!mine) {
        cs->failed = 1;
        return;
    }
    int64_t n = mm_tensor_numel(t);
    if (strcmp(name, "rope_cos") == 0 || strcmp(name, "rope_sin") == 0) {
        /* The kit keeps a few rows (dbg.rope_rows). */
        char rows_name[256];
        snprintf(rows_name, sizeof rows_name, "%s.rope_rows", cs->prefix);
        int64_t *rows, nr;
        if (mm_conf_read_i64(k->cases, rows_name, &rows, &nr, &cs->err) != 0) {
            cs->failed = 1;
            free(mine);
            return;
        }
        const int64_t dim = t->shape[1];
        float *sel = malloc(sizeof(float) * (size_t)(nr * dim + 1));
        for (int64_t r = 0; sel && r < nr; r++)
            memcpy(sel + r * dim, mine + rows[r] * dim, sizeof(float) * (size_t)dim);
        free(mine);
        free(rows);
        mine = sel;
        n = nr * dim;
        if (!mine) {
            cs->failed = mm_fail(&cs->err, "out of memory") != 0;
            return;
        }
    }
    if (compare_kit(k, k->cases, what, mine, n, ref_name, tol_path, &cs->err) != 0)
        cs->failed = 1;
    /* --out keeps it under the kit's name and shape, as f32. */
    const mm_st_entry *ref = mm_st_find(k->cases, ref_name);
    int64_t ref_n = 1;
    for (int i = 0; ref && i < ref->ndim; i++)
        ref_n *= ref->shape[i];
    if (!cs->failed && ref && ref_n == n && mm_conf_keep(k->run, ref_name, MM_F32, ref->ndim, ref->shape, mine, &cs->err) != 0)
        cs->failed = 1;
    free(mine);
}

/* ------------------------------------------------------------ ConvRot pairs */

static int parse_pair(const mm_dit_config *cfg, const char *pair, int *which, int *block)
{
    static const char *const names[4] = {"qkv", "out", "fc1", "fc2"};
    for (int w = 0; w < 4; w++) {
        size_t len = strlen(names[w]);
        if (strncmp(pair, names[w], len) != 0)
            continue;
        const char *rest = pair + len;
        if (*rest == '_')
            rest++;
        *which = w;
        if (strcmp(rest, "last") == 0)
            *block = cfg->layers - 1;
        else if (strcmp(rest, "first") == 0)
            *block = 0;
        else if (*rest >= '0' && *rest <= '9')
            *block = atoi(rest);
        else
            return -1;
        return 0;
    }
    return -1;
}

/* One captured W8A8 linear: the rotation, the activation codes and scales
 * and the output from the kit's input x; and the integer GEMM + epilogue
 * from the kit's own codes, which must give its y bit for bit. */
static int check_pair(dit_kit *k, const char *case_name, const char *pair, const json_t *measured, mm_error *err)
{
    int which, block, group;
    char what[256], name[256];
    if (parse_pair(k->cfg, pair, &which, &block) != 0) {
        snprintf(what, sizeof what, "%s.dbg.%s", case_name, pair);
        mm_conf_verdict(k->run, false, what, "layer name not understood (qkv|out|fc1|fc2 + block number or last)");
        return 0;
    }
    mm_tensor w, s;
    if (mm_dit_convrot_layer(k->dit, block, which, &w, &s, &group, err) != 0)
        return -1;
    snprintf(name, sizeof name, "%s.dbg.%s.x", case_name, pair);
    const mm_st_entry *xe = mm_st_find(k->cases, name);
    if (!xe || xe->ndim != 2)
        return mm_fail(err, "%s missing or not 2-D", name);
    const int64_t R = xe->shape[0], K = xe->shape[1], N = w.shape[0];
    mm_tensor x = {0}, xr = {0}, q = {0}, sx = {0}, y = {0}, kq = {0}, ks = {0}, ky = {0};
    float *h_xr = NULL, *h_q = NULL, *h_s = NULL, *h_y = NULL, *h_ky = NULL, *ref = NULL;
    int rc = -1;
    mm_device dev = mm_ctx_device(k->ctx);
    if (kit_to_device(k, k->cases, name, 2, (int64_t[]){R, K}, &x, err) != 0 ||
        mm_tensor_alloc(&xr, dev, MM_BF16, 2, (int64_t[]){R, K}, err) != 0 ||
        mm_tensor_alloc(&q, dev, MM_I8, 2, (int64_t[]){R, K}, err) != 0 ||
        mm_tensor_alloc(&sx, dev, MM_F32, 1, (int64_t[]){R}, err) != 0 ||
        mm_tensor_alloc(&y, dev, MM_BF16, 2, (int64_t[]){R, N}, err) != 0 ||
        mm_tensor_alloc(&ky, dev, MM_BF16, 2, (int64_t[]){R, N}, err) != 0)
        goto done;
    snprintf(name, sizeof name, "%s.dbg.%s.q_x", case_name, pair);
    if (kit_to_device(k, k->cases, name, 2, (int64_t[]){R, K}, &kq, err) != 0)
        goto done;
    snprintf(name, sizeof name, "%s.dbg.%s.s_x", case_name, pair);
    if (kit_to_device(k, k->cases, name, 1, (int64_t[]){R}, &ks, err) != 0)
        goto done;
    mm_hadamard_rotate(k->ctx, &xr, &x, group);
    mm_convrot_quantize(k->ctx, &q, &sx, &x, group);
    mm_gemm_i8_scaled(k->ctx, &y, &q, &sx, &w, &s, NULL);
    mm_gemm_i8_scaled(k->ctx, &ky, &kq, &ks, &w, &s, NULL);
    if (mm_ctx_sync(k->ctx, err) != 0 || !(h_xr = to_host_f32(k, &xr, err)) || !(h_q = to_host_f32(k, &q, err)) ||
        !(h_s = to_host_f32(k, &sx, err)) || !(h_y = to_host_f32(k, &y, err)) || !(h_ky = to_host_f32(k, &ky, err)))
        goto done;

    /* x_rot: the rotation rounded to bf16 like the reference's bf16 GEMM. */
    int64_t n;
    snprintf(name, sizeof name, "%s.dbg.%s.x_rot", case_name, pair);
    if (mm_conf_read_f32(k->cases, name, &ref, &n, NULL, NULL, err) != 0)
        goto done;
    int64_t diff = 0;
    for (int64_t i = 0; i < n; i++)
        diff += h_xr[i] != ref[i];
    snprintf(what, sizeof what, "%s.dbg.%s.x_rot", case_name, pair);
    mm_conf_verdict(k->run, diff * 1000 <= n, what, "%lld of %lld values differ from the reference (<= 0.1%%)",
                    (long long)diff, (long long)n);
    free(ref);
    ref = NULL;

    /* q_x: off-by-one codes at rounding boundaries only. */
    snprintf(name, sizeof name, "%s.dbg.%s.q_x", case_name, pair);
    if (mm_conf_read_f32(k->cases, name, &ref, &n, NULL, NULL, err) != 0)
        goto done;
    int64_t changed = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)h_q[i] - ref[i]);
        changed += d != 0;
        worst = d > worst ? d : worst;
    }
    snprintf(what, sizeof what, "%s.dbg.%s.q_x", case_name, pair);
    mm_conf_verdict(k->run, changed * 100 <= n && worst <= 1, what,
                    "%lld of %lld codes differ (<= 1%%), by at most %.0f (<= 1)", (long long)changed, (long long)n,
                    worst);
    free(ref);
    ref = NULL;

    snprintf(name, sizeof name, "%s.dbg.%s.s_x", case_name, pair);
    if (mm_conf_read_f32(k->cases, name, &ref, &n, NULL, NULL, err) != 0)
        goto done;
    snprintf(what, sizeof what, "%s.dbg.%s.s_x", case_name, pair);
    mm_conf_compare(k->run, what, h_s, ref, n, (mm_conf_tol){1e-3, 1e-3 * fabs(ref[0]) + 1e-6});
    free(ref);
    ref = NULL;

    /* y from the kit's own codes: exact. */
    snprintf(name, sizeof name, "%s.dbg.%s.y", case_name, pair);
    if (mm_conf_read_f32(k->cases, name, &ref, &n, NULL, NULL, err) != 0)
        goto done;
    diff = 0;
    for (int64_t i = 0; i < n; i++)
        diff += memcmp(&h_ky[i], &ref[i], sizeof(float)) != 0;
    snprintf(what, sizeof what, "%s.dbg.%s.y (int8 GEMM + epilogue on the kit's codes)", case_name, pair);
    mm_conf_verdict(k->run, diff == 0, what, "%lld of %lld values differ (bit for bit)", (long long)diff,
                    (long long)n);

    /* y from our own quantization: within 3x the measured fp32-rotation variant. */
    const json_t *variant = json_object_get(json_object_get(measured, pair), "fp32_rotation_variant");
    double vrel, vabs;
    snprintf(what, sizeof what, "%s.dbg.%s.y", case_name, pair);
    if (mm_conf_json_number(variant, "y_rel_l2", &vrel, NULL) != 0 ||
        mm_conf_json_number(variant, "y_max_abs", &vabs, NULL) != 0)
        mm_conf_verdict(k->run, false, what, "manifest convrot_pairs.%s.%s.fp32_rotation_variant missing", case_name,
                        pair);
    else
        mm_conf_compare(k->run, what, h_y, ref, n, (mm_conf_tol){3 * vrel, 3 * vabs});
    rc = 0;
done:
    free(ref);
    free(h_xr);
    free(h_q);
    free(h_s);
    free(h_y);
    free(h_ky);
    mm_tensor *all[] = {&x, &xr, &q, &sx, &y, &kq, &ks, &ky};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    return rc;
}

/* ------------------------------------------------------------ layout check */

/* Builds the case's layout and checks it; *ok = 0 (with a FAIL line) when it
 * differs from the kit. */
static int build_layout(dit_kit *k, const mm_safetensors *st, const mm_dit_kit_case *c, mm_dit_layout *l,
                        float **row_t, int with_timesteps, int *ok, mm_error *err)
{
    char what[256], why[512] = "";
    *row_t = NULL;
    *ok = 0;
    snprintf(what, sizeof what, "%s layout (tags, positions, index maps%s)", c->name,
             with_timesteps ? ", row timesteps" : "");
    if (mm_dit_layout_build(&c->req, l, err) != 0) {
        mm_conf_verdict(k->run, false, what, "%s", err->msg);
        return 0;
    }
    *row_t = malloc(sizeof(float) * (size_t)l->rows);
    if (!*row_t)
        return mm_fail(err, "out of memory");
    mm_dit_row_timesteps(l, (float)c->t_video, (float)c->t_audio, (float)c->condition_t, *row_t);
    int r = mm_dit_kit_check_layout(st, c->name, l, with_timesteps ? *row_t : NULL, why, sizeof why, err);
    if (r < 0)
        return -1;
    *ok = r;
    mm_conf_verdict(k->run, r == 1, what, "%s", r == 1 ? "exact" : why);
    return 0;
}

/* --------------------------------------------------------- forward cases */

static int keep_rows(dit_kit *k, const char *name, const float *v, int64_t rows, int64_t cols, int batch,
                     mm_error *err)
{
    if (batch)
        return mm_conf_keep(k->run, name, MM_F32, 3, (int64_t[]){1, rows, cols}, v, err);
    return mm_conf_keep(k->run, name, MM_F32, 2, (int64_t[]){rows, cols}, v, err);
}

static int run_case(dit_kit *k, const json_t *entry, mm_error *err)
{
    mm_dit_kit_case c;
    if (mm_dit_kit_case_read(k->run->manifest, entry, &c, err) != 0)
        return -1;
    mm_dit_layout l = {0};
    float *row_t = NULL, *hv = NULL, *ha = NULL;
    mm_tensor video = {0}, audio = {0}, text = {0}, vv = {0}, va = {0};
    mm_dit_request *req = NULL;
    int ok, rc = -1;
    if (build_layout(k, k->cases, &c, &l, &row_t, 1, &ok, err) != 0)
        goto done;
    if (!ok) {
        rc = 0; /* the forward would run on a layout we did not build */
        goto done;
    }
    const int vw = k->cfg->video_row_width, aw = k->cfg->audio_row_width;
    char name[256];
    snprintf(name, sizeof name, "%s.in.hidden_states", c.name);
    if (kit_to_device(k, k->cases, name, 2, (int64_t[]){l.video_rows, vw}, &video, err) != 0)
        goto done;
    snprintf(name, sizeof name, "%s.in.audio_hidden_states", c.name);
    if (kit_to_device(k, k->cases, name, 2, (int64_t[]){l.audio_rows, aw}, &audio, err) != 0)
        goto done;
    snprintf(name, sizeof name, "%s.in.encoder_hidden_states", c.name);
    if (kit_to_device(k, k->cases, name, 2, (int64_t[]){l.text_rows, k->cfg->text_dim}, &text, err) != 0)
        goto done;
    mm_device dev = mm_ctx_device(k->ctx);
    if (mm_tensor_alloc(&vv, dev, MM_F32, 2, (int64_t[]){l.video_rows, vw}, err) != 0 ||
        mm_tensor_alloc(&va, dev, MM_F32, 2, (int64_t[]){l.audio_rows, aw}, err) != 0)
        goto done;

    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s.dbg", c.name);
    capture_state cs = {.k = k, .prefix = prefix};
    mm_dit_debug dbg = {capture, &cs};
    const json_t *debug = json_object_get(entry, "debug");
    if (begin_request(k, &l, &text, json_is_true(debug) ? &dbg : NULL, &req, err) != 0 ||
        mm_dit_forward(req, row_t, &video, &audio, &vv, &va, err) != 0)
        goto done;
    if (k->sparse && k->sparse_noted++ == 0)
        fprintf(k->run->log, "note sparse attention: %s; density of %s: %.3f\n", mm_dit_sparse_kind(req), c.name,
                mm_dit_request_density(req));
    if (cs.failed) {
        *err = cs.err;
        goto done;
    }
    if (!(hv = to_host_f32(k, &vv, err)) || !(ha = to_host_f32(k, &va, err)))
        goto done;
    char what[256];
    snprintf(name, sizeof name, "%s.out.video", c.name);
    snprintf(what, sizeof what, "%s out.video", c.name);
    if (compare_kit(k, k->cases, what, hv, l.video_rows * vw, name, "forward.video", err) != 0 ||
        keep_rows(k, name, hv, l.video_rows, vw, 1, err) != 0)
        goto done;
    snprintf(name, sizeof name, "%s.out.audio", c.name);
    snprintf(what, sizeof what, "%s out.audio", c.name);
    if (compare_kit(k, k->cases, what, ha, l.audio_rows * aw, name, "forward.audio", err) != 0 ||
        keep_rows(k, name, ha, l.audio_rows, aw, 1, err) != 0)
        goto done;

    /* ConvRot pairs of this case (manifest convrot_pairs.<case>). */
    const json_t *pairs = json_object_get(json_object_get(k->run->manifest, "convrot_pairs"), c.name);
    const char *pair;
    const json_t *pv;
    json_object_foreach((json_t *)pairs, pair, pv)
    {
        (void)pv;
        if (check_pair(k, c.name, pair, pairs, err) != 0)
            goto done;
    }
    rc = 0;
done:
    mm_dit_request_end(req);
    mm_tensor *all[] = {&video, &audio, &text, &vv, &va};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    free(hv);
    free(ha);
    free(row_t);
    mm_dit_layout_free(&l);
    mm_dit_kit_case_free(&c);
    if (rc != 0)
        mm_error_prefix(err, "%s", c.name);
    return rc;
}

/* ---------------------------------------------------------- sampler runs */

typedef struct sampler_state {
    dit_kit *k;
    mm_dit_request *req;
    const mm_dit_layout *l;
    double condition_t;
    mm_tensor video, audio, vv, va; /* device rows and velocities */
    const float *after_video, *after_audio; /* kit [forwards][target rows][width], or NULL */
    const char *label;
} sampler_state;

static int velocity(void *user, int step, float t_video, float t_audio, const mm_flow_stream *video,
                    const mm_flow_stream *audio, float *v_video, float *v_audio, mm_error *err)
{
    (void)step;
    sampler_state *s = user;
    dit_kit *k = s->k;
    float *row_t = malloc(sizeof(float) * (size_t)s->l->rows);
    if (!row_t)
        return mm_fail(err, "out of memory");
    mm_dit_row_timesteps(s->l, t_video, t_audio, (float)s->condition_t, row_t);
    mm_tensor hv = mm_tensor_wrap(video->rows, mm_cpu(), MM_F32, 2, s->video.shape);
    mm_tensor ha = mm_tensor_wrap(audio->rows, mm_cpu(), MM_F32, 2, s->audio.shape);
    mm_copy(k->ctx, &s->video, &hv);
    mm_copy(k->ctx, &s->audio, &ha);
    int rc = mm_ctx_sync(k->ctx, err);
    if (rc == 0)
        rc = mm_dit_forward(s->req, row_t, &s->video, &s->audio, &s->vv, &s->va, err);
    free(row_t);
    if (rc != 0)
        return -1;
    mm_tensor ov = mm_tensor_wrap(v_video, mm_cpu(), MM_F32, 2, s->vv.shape);
    mm_tensor oa = mm_tensor_wrap(v_audio, mm_cpu(), MM_F32, 2, s->va.shape);
    mm_copy(k->ctx, &ov, &s->vv);
    mm_copy(k->ctx, &oa, &s->va);
    return mm_ctx_sync(k->ctx, err);
}

static void after_step(void *user, int step, const mm_flow_stream *video, const mm_flow_stream *audio)
{
    sampler_state *s = user;
    if (!s->after_video || !s->after_audio)
        return;
    const int64_t nv = (video->n_rows - video->cond_rows) * video->width;
    const int64_t na = (audio->n_rows - audio->cond_rows) * audio->width;
    mm_conf_diff dv = mm_conf_measure(video->rows + video->cond_rows * video->width, s->after_video + step * nv, nv);
    mm_conf_diff da = mm_conf_measure(audio->rows + audio->cond_rows * audio->width, s->after_audio + step * na, na);
    fprintf(s->k->run->log, "     %s after step %d: video rel_l2 %.3g max_abs %.3g, audio rel_l2 %.3g max_abs %.3g\n",
            s->label, step + 1, dv.rel_l2, dv.max_abs, da.rel_l2, da.max_abs);
}

static int bit_equal(dit_kit *k, const mm_safetensors *st, const char *what, const float *mine, int64_t n,
                     const char *ref_name, mm_error *err)
{
    float *ref;
    int64_t rn;
    if (mm_conf_read_f32(st, ref_name, &ref, &rn, NULL, NULL, err) != 0)
        return -1;
    int64_t diff = rn == n ? 0 : -1, first = -1;
    for (int64_t i = 0; diff >= 0 && i < n; i++)
        if (memcmp(&mine[i], &ref[i], sizeof(float)) != 0) {
            diff++;
            first = first < 0 ? i : first;
        }
    if (diff < 0)
        mm_conf_verdict(k->run, false, what, "%lld values, the kit has %lld", (long long)n, (long long)rn);
    else if (diff == 0)
        mm_conf_verdict(k->run, true, what, "%lld values bit for bit", (long long)n);
    else
        mm_conf_verdict(k->run, false, what, "%lld of %lld values differ, first [%lld] %.9g vs %.9g", (long long)diff,
                        (long long)n, (long long)first, mine[first], ref[first]);
    free(ref);
    return 0;
}

/* Each raw draw compared with the kit's "<run>.noise.<name>", bit for bit. */
typedef struct draw_check {
    dit_kit *k;
    const mm_dit_kit_case *c;
    uint64_t seed;
    int failed;
    mm_error err;
} draw_check;

static void check_draw(void *user, const char *name, const float *v, int64_t n)
{
    draw_check *d = user;
    char key[256], what[256];
    snprintf(key, sizeof key, "%s.noise.%s", d->c->name, name);
    snprintf(what, sizeof what, "%s noise.%s (seed %llu)", d->c->name, name, (unsigned long long)d->seed);
    if (!d->failed && bit_equal(d->k, d->k->sampler, what, v, n, key, &d->err) != 0)
        d->failed = 1;
}

/* The run's initial rows through the engine's own noise path
 * (mm_draw_initial_rows), every draw and the keyframe rows checked. */
static int draw_initial_rows(dit_kit *k, const mm_dit_kit_case *c, const mm_dit_layout *l, uint64_t seed,
                             float *video_rows, float *audio_rows, mm_error *err)
{
    const mm_dit_geometry *g = &c->req.target;
    const int C = k->cfg->latent_channels, vw = k->cfg->video_row_width, aw = k->cfg->audio_row_width;
    if (c->req.n_refs > 0)
        return mm_fail(err, "%s: sampler runs with reference blocks are not in this kit format", c->name);
    mm_noise_condition conds[8];
    float *latents[8] = {0};
    int rc = -1;
    char name[256], what[256];
    for (int i = 0; i < c->req.n_anchors; i++) {
        /* fl2va keyframes: one latent frame on the target canvas. */
        conds[i].shape = (mm_video_shape){C, 1, g->latent_height, g->latent_width, g->patch_t, g->patch_h, g->patch_w};
        const int64_t numel = (int64_t)C * g->latent_height * g->latent_width;
        int64_t zn;
        snprintf(name, sizeof name, "%s.keyframe%d.latents", c->name, i);
        if (mm_conf_read_f32(k->sampler, name, &latents[i], &zn, NULL, NULL, err) != 0 || zn != numel) {
            if (latents[i])
                mm_fail(err, "%s: a [1, %d, 1, %d, %d] clean keyframe latent is needed", name, C, g->latent_height,
                        g->latent_width);
            goto done;
        }
        conds[i].latent = latents[i];
    }
    mm_noise_plan plan = {
        .conds = conds,
        .n_conds = c->req.n_anchors,
        .condition_t = (float)c->condition_t,
        .target = {C, g->latent_frames, g->latent_height, g->latent_width, g->patch_t, g->patch_h, g->patch_w},
        .audio_rows = l->audio_rows - l->cond_audio_rows,
        .audio_width = aw,
    };
    draw_check dc = {.k = k, .c = c, .seed = seed};
    if (mm_draw_initial_rows(seed, &plan, video_rows, audio_rows + l->cond_audio_rows * aw, check_draw, &dc, err) !=
        0)
        goto done;
    if (dc.failed) {
        *err = dc.err;
        goto done;
    }
    if (c->req.n_anchors > 0) {
        snprintf(name, sizeof name, "%s.cond_rows", c->name);
        snprintf(what, sizeof what, "%s cond_rows (0.999-noised keyframes, patchified)", c->name);
        if (bit_equal(k, k->sampler, what, video_rows, l->cond_video_rows * vw, name, err) != 0)
            goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < 8; i++)
        free(latents[i]);
    return rc;
}

static int check_grid(dit_kit *k, const char *prefix, const char *stream, const mm_sigma_schedule *g, mm_error *err)
{
    char name[256], what[256];
    snprintf(name, sizeof name, "%s.sigmas_%s", prefix, stream);
    snprintf(what, sizeof what, "%s sigmas_%s", prefix, stream);
    if (bit_equal(k, k->sampler, what, g->sigmas, g->points, name, err) != 0)
        return -1;
    snprintf(name, sizeof name, "%s.timesteps_%s", prefix, stream);
    snprintf(what, sizeof what, "%s timesteps_%s", prefix, stream);
    return bit_equal(k, k->sampler, what, g->timesteps, g->points - 1, name, err);
}

static int run_sampler(dit_kit *k, const json_t *entry, mm_error *err)
{
    mm_dit_kit_case c;
    if (mm_dit_kit_case_read(k->run->manifest, entry, &c, err) != 0)
        return -1;
    int steps = 0, ok, rc = -1;
    char prefix[192], name[256], what[256];
    mm_dit_layout l = {0};
    mm_sigma_schedule sv = {0}, sa = {0};
    float *row_t = NULL, *video_rows = NULL, *audio_rows = NULL, *after_v = NULL, *after_a = NULL;
    sampler_state s = {.k = k};
    mm_tensor text = {0};
    if (mm_conf_json_int(entry, "steps", &steps, err) != 0)
        goto done;
    snprintf(prefix, sizeof prefix, "%s.steps%d", c.name, steps);
    if (build_layout(k, k->sampler, &c, &l, &row_t, 0, &ok, err) != 0)
        goto done;
    if (!ok) {
        rc = 0;
        goto done;
    }
    if (mm_sigma_schedule_build(steps, (float)k->video_shift, &sv, err) != 0 ||
        mm_sigma_schedule_build(steps, (float)k->audio_shift, &sa, err) != 0 ||
        check_grid(k, prefix, "video", &sv, err) != 0 || check_grid(k, prefix, "audio", &sa, err) != 0)
        goto done;

    const int vw = k->cfg->video_row_width, aw = k->cfg->audio_row_width;
    int64_t *seed, nseed;
    snprintf(name, sizeof name, "%s.seed", c.name);
    if (mm_conf_read_i64(k->sampler, name, &seed, &nseed, err) != 0)
        goto done;
    uint64_t seed_v = (uint64_t)seed[0];
    free(seed);
    video_rows = calloc((size_t)(l.video_rows * vw), sizeof(float));
    audio_rows = calloc((size_t)(l.audio_rows * aw), sizeof(float));
    if (!video_rows || !audio_rows) {
        mm_fail(err, "out of memory");
        goto done;
    }
    if (draw_initial_rows(k, &c, &l, seed_v, video_rows, audio_rows, err) != 0)
        goto done;

    snprintf(name, sizeof name, "%s.in.encoder_hidden_states", c.name);
    if (kit_to_device(k, k->sampler, name, 2, (int64_t[]){l.text_rows, k->cfg->text_dim}, &text, err) != 0)
        goto done;
    mm_device dev = mm_ctx_device(k->ctx);
    s.l = &l;
    s.condition_t = c.condition_t;
    s.label = prefix;
    if (mm_tensor_alloc(&s.video, dev, MM_F32, 2, (int64_t[]){l.video_rows, vw}, err) != 0 ||
        mm_tensor_alloc(&s.audio, dev, MM_F32, 2, (int64_t[]){l.audio_rows, aw}, err) != 0 ||
        mm_tensor_alloc(&s.vv, dev, MM_F32, 2, (int64_t[]){l.video_rows, vw}, err) != 0 ||
        mm_tensor_alloc(&s.va, dev, MM_F32, 2, (int64_t[]){l.audio_rows, aw}, err) != 0 ||
        begin_request(k, &l, &text, NULL, &s.req, err) != 0)
        goto done;
    int64_t n;
    snprintf(name, sizeof name, "%s.video_rows_after_step", prefix);
    if (mm_st_find(k->sampler, name) && mm_conf_read_f32(k->sampler, name, &after_v, &n, NULL, NULL, err) != 0)
        goto done;
    snprintf(name, sizeof name, "%s.audio_rows_after_step", prefix);
    if (mm_st_find(k->sampler, name) && mm_conf_read_f32(k->sampler, name, &after_a, &n, NULL, NULL, err) != 0)
        goto done;
    s.after_video = after_v;
    s.after_audio = after_a;

    mm_flow_stream vstream = {video_rows, l.video_rows, l.cond_video_rows, vw, &sv};
    mm_flow_stream astream = {audio_rows, l.audio_rows, l.cond_audio_rows, aw, &sa};
    mm_flow_callbacks cb = {.after_step = after_step, .user = &s};
    if (mm_flow_sample(&vstream, &astream, velocity, &s, &cb, err) != 0)
        goto done;

    const int64_t tv = l.video_rows - l.cond_video_rows, ta = l.audio_rows - l.cond_audio_rows;
    const float *fv = video_rows + l.cond_video_rows * vw, *fa = audio_rows + l.cond_audio_rows * aw;
    char tol[64];
    snprintf(name, sizeof name, "%s.final.video_rows", prefix);
    snprintf(what, sizeof what, "%s final.video_rows", prefix);
    snprintf(tol, sizeof tol, "sampler_final.steps%d.video", steps);
    if (compare_kit(k, k->sampler, what, fv, tv * vw, name, tol, err) != 0 || keep_rows(k, name, fv, tv, vw, 0, err))
        goto done;
    snprintf(name, sizeof name, "%s.final.audio_rows", prefix);
    snprintf(what, sizeof what, "%s final.audio_rows", prefix);
    snprintf(tol, sizeof tol, "sampler_final.steps%d.audio", steps);
    if (compare_kit(k, k->sampler, what, fa, ta * aw, name, tol, err) != 0 || keep_rows(k, name, fa, ta, aw, 0, err))
        goto done;
    rc = 0;
done:
    mm_dit_request_end(s.req);
    mm_tensor *all[] = {&text, &s.video, &s.audio, &s.vv, &s.va};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    free(after_v);
    free(after_a);
    free(video_rows);
    free(audio_rows);
    free(row_t);
    mm_sigma_schedule_free(&sv);
    mm_sigma_schedule_free(&sa);
    mm_dit_layout_free(&l);
    mm_dit_kit_case_free(&c);
    if (rc != 0)
        mm_error_prefix(err, "%s", prefix);
    return rc;
}

/* ------------------------------------------------------------------ kit */

static int check_config(dit_kit *k)
{
    const json_t *cfg = json_object_get(k->run->manifest, "config");
    static const struct {
        const char *key;
        size_t off;
    } fields[] = {
        {"hidden", offsetof(mm_dit_config, hidden)},     {"heads", offsetof(mm_dit_config, heads)},
        {"ffn", offsetof(mm_dit_config, ffn)},           {"layers", offsetof(mm_dit_config, layers)},
        {"refiner_layers", offsetof(mm_dit_config, refiner_layers)},
        {"text_dim", offsetof(mm_dit_config, text_dim)},
    };
    char why[512] = "";
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const json_t *v = json_object_get(cfg, fields[i].key);
        int mine = *(const int *)((const char *)k->cfg + fields[i].off);
        if (v && json_integer_value(v) != mine)
            snprintf(why + strlen(why), sizeof why - strlen(why), "%s %d (manifest %lld) ", fields[i].key, mine,
                     (long long)json_integer_value(v));
    }
    mm_conf_verdict(k->run, why[0] == '\0', "configuration read from dit.safetensors matches the manifest",
                    "%s%s", why[0] ? why : "", why[0] ? "" : "");
    fprintf(k->run->log,
            "     hidden %d, %d heads x %d, ffn %d, %d blocks + %d refiner blocks, text %d, rows %d/%d, "
            "table %dx%d, rope %d of %d channels, ConvRot group %d\n",
            k->cfg->hidden, k->cfg->heads, k->cfg->head_dim, k->cfg->ffn, k->cfg->layers, k->cfg->refiner_layers,
            k->cfg->text_dim, k->cfg->video_row_width, k->cfg->audio_row_width, k->cfg->table_size,
            k->cfg->time_dim, k->cfg->rope_dim, k->cfg->head_dim, k->cfg->convrot_group);
    return 0;
}

static int open_kit_file(dit_kit *k, const char *file, mm_safetensors **st, mm_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", k->run->kit_dir, file);
    return mm_st_open(st, path, err);
}

int mm_conf_kit_dit(mm_conf_run *run, mm_error *err)
{
    dit_kit k = {.run = run};
    const json_t *m = run->manifest, *derived = json_object_get(m, "derived");
    mm_dit_config_overrides ov = {0};
    const json_t *patch = json_object_get(derived, "patch_size");
    for (int i = 0; i < 3 && json_array_size(patch) == 3; i++)
        ov.patch[i] = (int)json_integer_value(json_array_get(patch, (size_t)i));
    double eps;
    if (mm_conf_json_number(derived, "norm_eps", &eps, NULL) == 0)
        ov.norm_eps = (float)eps;
    if (mm_conf_json_number(derived, "qk_norm_eps", &eps, NULL) == 0)
        ov.qk_norm_eps = (float)eps;
    if (mm_conf_json_number(derived, "final_norm_eps", &eps, NULL) == 0)
        ov.final_norm_eps = (float)eps;
    if (mm_conf_json_number(derived, "video_shift", &k.video_shift, err) != 0 ||
        mm_conf_json_number(derived, "audio_shift", &k.audio_shift, err) != 0)
        return -1;
    if (run->sparse) {
        if (mm_sparse_config_parse(run->sparse, &k.sparse_cfg, err) != 0)
            return -1;
        k.sparse = &k.sparse_cfg;
    }

    int rc = -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/dit.safetensors", run->kit_dir);
    if (mm_ctx_create(&k.ctx, run->device, 0, err) != 0 || mm_dit_load(&k.dit, path, k.ctx, &ov, err) != 0 ||
        open_kit_file(&k, "cases.safetensors", &k.cases, err) != 0 ||
        open_kit_file(&k, "sampler.safetensors", &k.sampler, err) != 0)
        goto done;
    k.cfg = mm_dit_get_config(k.dit);
    check_config(&k);
    if (open_loras(&k, err) != 0)
        goto done;
    size_t i;
    const json_t *entry;
    json_array_foreach(json_object_get(m, "cases"), i, entry)
    {
        if (run_case(&k, entry, err) != 0)
            goto done;
    }
    json_array_foreach(json_object_get(m, "sampler"), i, entry)
    {
        if (run_sampler(&k, entry, err) != 0)
            goto done;
    }
    rc = 0;
done:
    if (k.cases)
        mm_st_close(k.cases);
    if (k.sampler)
        mm_st_close(k.sampler);
    mm_dit_free(k.dit);
    for (int i = 0; i < k.n_loras; i++)
        mm_lora_free(k.loras[i]);
    mm_ctx_destroy(k.ctx);
    return rc;
}
