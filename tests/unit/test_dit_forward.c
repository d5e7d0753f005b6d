/* The DiT forward on the kit's tiny checkpoint, beyond what the conformance
 * run checks: repeatable (workspace reuse leaves no state behind, a second
 * request on the same model gives the same bits), the configuration comes
 * from the file, broken checkpoints are refused with the tensor named, and
 * two of the kit's "controls" — plausible loader mistakes applied to the
 * file — land far outside the forward tolerance, so the tolerance can tell. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/ops.h"
#include "conformance/dit_kit.h"
#include "model/dit/config.h"
#include "model/dit/dit.h"
#include "test.h"
#include "test_sampler_kit.h"

static json_t *manifest;
static mm_safetensors *cases;
static mm_ctx *ctx;
static char kit_ckpt[1024];
static const char *CASE = "fl2va_first_step2";
static double video_tol; /* manifest tolerances.forward.video.rel_l2 */

/* Host velocities [video | audio] for the case (calloc'ed, owned by the
 * caller) and the two tensors that view them; *nv = the video part's size. */
static float *alloc_velocities(mm_dit *dit, const kit_forward_case *f, mm_tensor *vv, mm_tensor *va, int64_t *nv)
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    *nv = f->l.video_rows * c->video_row_width;
    float *out = calloc((size_t)(*nv + f->l.audio_rows * c->audio_row_width), sizeof(float));
    *vv = mm_tensor_wrap(out, mm_cpu(), MM_F32, 2, (int64_t[]){f->l.video_rows, c->video_row_width});
    *va = mm_tensor_wrap(out + *nv, mm_cpu(), MM_F32, 2, (int64_t[]){f->l.audio_rows, c->audio_row_width});
    return out;
}

/* Runs the forward; returns malloc'ed velocities [video | audio]. */
static float *run(mm_dit *dit, const kit_forward_case *f, int times, mm_error *err)
{
    mm_tensor vv, va;
    int64_t nv;
    float *out = alloc_velocities(dit, f, &vv, &va, &nv);
    mm_dit_request *req = NULL;
    if (mm_dit_request_begin(dit, ctx, &f->l, &f->text, NULL, &req, err) != 0) {
        free(out);
        return NULL;
    }
    for (int i = 0; i < times; i++)
        if (mm_dit_forward(req, f->row_t, &f->video, &f->audio, &vv, &va, err) != 0) {
            free(out);
            out = NULL;
            break;
        }
    mm_dit_request_end(req);
    return out;
}

static double rel_l2_vs_kit(const float *v, int64_t n, const char *name)
{
    const mm_st_entry *e = mm_st_find(cases, name);
    const float *r = e ? (const float *)e->data : NULL;
    if (!r || kit_numel(e) != n)
        return INFINITY;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)v[i] - r[i]) * ((double)v[i] - r[i]);
        den += (double)r[i] * r[i];
    }
    return sqrt(num / den);
}

/* rel_l2 of the video velocities against the kit's output for CASE. */
static double video_rel_l2_vs_kit(const float *v, int64_t nv)
{
    char key[256];
    snprintf(key, sizeof key, "%s.out.video", CASE);
    return rel_l2_vs_kit(v, nv, key);
}

static void test_config_from_checkpoint(void)
{
    mm_dit *dit;
    mm_error err = {{0}};
    MM_REQUIRE(mm_dit_load(&dit, kit_ckpt, ctx, NULL, &err) == 0, "%s", err.msg);
    const mm_dit_config *c = mm_dit_get_config(dit);
    const json_t *cfg = json_object_get(manifest, "config");
    MM_EXPECT(c->hidden == json_integer_value(json_object_get(cfg, "hidden")), "hidden %d", c->hidden);
    MM_EXPECT(c->heads == json_integer_value(json_object_get(cfg, "heads")), "heads %d", c->heads);
    MM_EXPECT(c->ffn == json_integer_value(json_object_get(cfg, "ffn")), "ffn %d", c->ffn);
    MM_EXPECT(c->layers == json_integer_value(json_object_get(cfg, "layers")), "layers %d", c->layers);
    MM_EXPECT(c->refiner_layers == json_integer_value(json_object_get(cfg, "refiner_layers")), "refiner");
    MM_EXPECT(c->text_dim == json_integer_value(json_object_get(cfg, "text_dim")), "text_dim %d", c->text_dim);
    MM_EXPECT(c->head_dim == 128 && c->rope_dim == 96 && c->latent_channels == 24 && c->convrot_group == 256 &&
                  c->table_size == 1025 && c->time_dim == 8,
              "derived fields");
    mm_dit_free(dit);
}

static void test_forward_is_repeatable(void)
{
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, CASE) == 0, "case");
    mm_dit *dit;
    mm_error err = {{0}};
    MM_REQUIRE(mm_dit_load(&dit, kit_ckpt, ctx, NULL, &err) == 0, "%s", err.msg);
    const mm_dit_config *c = mm_dit_get_config(dit);
    const int64_t nv = f.l.video_rows * c->video_row_width, na = f.l.audio_rows * c->audio_row_width;
    float *once = run(dit, &f, 1, &err);
    float *twice = once ? run(dit, &f, 2, &err) : NULL;
    MM_REQUIRE(once && twice, "%s", err.msg);
    MM_EXPECT(memcmp(once, twice, sizeof(float) * (size_t)(nv + na)) == 0,
              "a reused request and a new one must give the same bits");
    double rv = video_rel_l2_vs_kit(once, nv);
    MM_EXPECT(rv <= video_tol, "video rel_l2 %g > %g", rv, video_tol);
    free(once);
    free(twice);
    mm_dit_free(dit);
    kit_forward_case_free(&f);
}

/* Rows on a device other than the request's are refused up front, by name,
 * and the context stays usable: the same request then runs normally. */
static void test_rows_on_another_device_are_refused(void)
{
    kit_forward_case f;
    MM_REQUIRE(kit_forward_case_load(&f, manifest, cases, CASE) == 0, "case");
    mm_dit *dit;
    mm_error err = {{0}};
    MM_REQUIRE(mm_dit_load(&dit, kit_ckpt, ctx, NULL, &err) == 0, "%s", err.msg);
    mm_tensor vv, va;
    int64_t nv;
    float *out = alloc_velocities(dit, &f, &vv, &va, &nv);
    /* never dereferenced: the check comes before any access */
    mm_tensor elsewhere = f.audio;
    elsewhere.device = mm_cuda(3);
    mm_dit_request *req = NULL;
    MM_REQUIRE(mm_dit_request_begin(dit, ctx, &f.l, &f.text, NULL, &req, &err) == 0, "%s", err.msg);
    int rc = mm_dit_forward(req, f.row_t, &f.video, &elsewhere, &vv, &va, &err);
    MM_EXPECT(rc != 0 && strstr(err.msg, "audio rows") && strstr(err.msg, "cuda:3") && strstr(err.msg, "cpu"),
              "refusal: rc %d, '%s'", rc, err.msg);
    err = (mm_error){{0}};
    MM_EXPECT(mm_dit_forward(req, f.row_t, &f.video, &f.audio, &vv, &va, &err) == 0, "then: %s", err.msg);
    double rv = video_rel_l2_vs_kit(out, nv);
    MM_EXPECT(rv <= video_tol, "video rel_l2 after the refusal %g > %g", rv, video_tol);
    mm_dit_request_end(req);
    free(out);
    mm_dit_free(dit);
    kit_forward_case_free(&f);
}

/* Writes a copy of the kit checkpoint with `edit` applied to named tensors. */
typedef void (*edit_fn)(const char *name, const mm_st_entry *e, void *copy, int64_t hidden, int64_t heads);

static int write_variant(const char *path, const char *skip, edit_fn edit)
{
    mm_safetensors *st;
    mm_error err = {{0}};
    if (mm_st_open(&st, kit_ckpt, &err) != 0)
        return -1;
    size_t n = mm_st_count(st), k = 0;
    const char **names = calloc(n, sizeof *names);
    mm_tensor *ts = calloc(n, sizeof *ts);
    void **bufs = calloc(n, sizeof *bufs);
    const mm_st_entry *vp = mm_st_find(st, "video_patch_proj.weight");
    const mm_st_entry *qn = mm_st_find(st, "blocks.0.attn.q_norm.weight");
    const mm_st_entry *qkv = mm_st_find(st, "blocks.0.attn.qkv_proj.weight");
    const int64_t hidden = vp->shape[0], heads = qkv->shape[0] / 3 / qn->shape[0];
    for (size_t i = 0; i < n; i++) {
        const mm_st_entry *e = mm_st_at(st, i);
        if (skip && strcmp(e->name, skip) == 0)
            continue;
        size_t bytes = (size_t)(e->end - e->begin);
        bufs[k] = malloc(bytes ? bytes : 1);
        memcpy(bufs[k], e->data, bytes);
        if (edit)
            edit(e->name, e, bufs[k], hidden, heads);
        names[k] = e->name;
        ts[k] = mm_tensor_wrap(bufs[k], mm_cpu(), e->dtype, e->ndim, e->shape);
        k++;
    }
    int rc = mm_st_save(path, k, names, ts, &err);
    if (rc != 0)
        printf("     %s\n", err.msg);
    for (size_t i = 0; i < k; i++)
        free(bufs[i]);
    free(bufs);
    free(names);
    free(ts);
    mm_st_close(st);
    return rc;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* fc1 read as [up; gate] instead of [gate; up]: swap the halves of every row set. */
static void swap_fc1(const char *name, const mm_st_entry *e, void *copy, int64_t hidden, int64_t heads)
{
    (void)hidden;
    (void)heads;
    if (strncmp(name, "blocks.", 7) != 0 || !strstr(name, ".mlp.fc1.weight"))
        return;
    const int64_t rows = e->shape[0], half = rows / 2;
    const size_t row_bytes = (size_t)(e->end - e->begin) / (size_t)rows;
    char *tmp = malloc(row_bytes * (size_t)half), *p = copy;
    memcpy(tmp, p, row_bytes * (size_t)half);
    memmove(p, p + row_bytes * (size_t)half, row_bytes * (size_t)half);
    memcpy(p + row_bytes * (size_t)half, tmp, row_bytes * (size_t)half);
    free(tmp);
}

/* The fused QKV read as per-head [q_h; k_h; v_h] blocks: row h·D + d of
 * the third t comes from file row h·3D + t·D + d. */
static void interleave_qkv(const char *name, const mm_st_entry *e, void *copy, int64_t hidden, int64_t heads)
{
    (void)hidden;
    if (strncmp(name, "blocks.", 7) != 0 || !strstr(name, ".attn.qkv_proj.weight"))
        return;
    const int64_t rows = e->shape[0], A = rows / 3, D = A / heads;
    const size_t row_bytes = (size_t)(e->end - e->begin) / (size_t)rows;
    for (int64_t t = 0; t < 3; t++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t d = 0; d < D; d++)
                memcpy((char *)copy + (size_t)(t * A + h * D + d) * row_bytes,
                       (const char *)e->data + (size_t)(h * 3 * D + t * D + d) * row_bytes, row_bytes);
}

static void both_with_scales(edit_fn fn, const char *name, const mm_st_entry *e, void *copy, int64_t h, int64_t nh)
{
    /* The per-row scales move with their rows. */
    char weight[256];
    snprintf(weight, sizeof weight, "%s", name);
    if (ends_with(weight, ".weight_scale")) {
        weight[strlen(weight) - 6] = '\0';
        fn(weight, e, copy, h, nh);
    } else {
        fn(name, e, copy, h, nh);
    }
}
static void swap_fc1_all(const char *n, const mm_st_entry *e, void *c, int64_t h, int64_t nh)
{
    both_with_scales(swap_fc1, n, e, c, h, nh);
}
static void interleave_all(const char *n, const mm_st_entry *e, void *c, int64_t h, int64_t nh)
{
    both_with_scales(interleave_qkv, n, e, c, h, nh);
}

static void check_control(const char *what, edit_fn edit)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/mmh3-dit-control-%d.safetensors", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    MM_REQUIRE(write_variant(path, NULL, edit) == 0, "writing %s", path);
    kit_forward_case f;
    mm_dit *dit = NULL;
    mm_error err = {{0}};
    int loaded = kit_forward_case_load(&f, manifest, cases, CASE) == 0 && mm_dit_load(&dit, path, ctx, NULL, &err) == 0;
    unlink(path);
    MM_REQUIRE(loaded, "%s", err.msg);
    const mm_dit_config *c = mm_dit_get_config(dit);
    float *v = run(dit, &f, 1, &err);
    MM_REQUIRE(v, "%s", err.msg);
    double rv = video_rel_l2_vs_kit(v, f.l.video_rows * c->video_row_width);
    MM_EXPECT(rv > 3 * video_tol, "%s: video rel_l2 %.3g should be far outside the %g tolerance", what, rv,
              video_tol);
    printf("     control %s: video rel_l2 %.3g (%.1fx the tolerance)\n", what, rv, rv / video_tol);
    free(v);
    mm_dit_free(dit);
    kit_forward_case_free(&f);
}

static void test_control_fc1_halves_swapped(void) { check_control("fc1 [up; gate]", swap_fc1_all); }
static void test_control_qkv_per_head_interleaved(void) { check_control("qkv per-head interleaved", interleave_all); }

static void test_broken_checkpoints_are_refused(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/mmh3-dit-broken-%d.safetensors", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    /* Each dropped tensor and what the error must name. */
    static const char *drop[][2] = {{"blocks.1.mlp.fc2.comfy_quant", "blocks.1.mlp.fc2"},
                                    {"final_layer.audio_out.bias", "final_layer.audio_out.bias"},
                                    {"blocks.0.adaln_proj.linear.weight", "blocks.0.adaln_proj.linear.weight"},
                                    {"blocks.1.norm2.weight", "blocks.1.norm2.weight"}};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) {
        MM_REQUIRE(write_variant(path, drop[i][0], NULL) == 0, "writing");
        mm_dit *dit = NULL;
        mm_error err = {{0}};
        int rc = mm_dit_load(&dit, path, ctx, NULL, &err);
        MM_EXPECT(rc != 0 && strstr(err.msg, drop[i][1]), "without %s: rc %d, message '%s'", drop[i][0], rc,
                  err.msg);
        mm_dit_free(dit);
    }
    unlink(path);
}

/* The smallest file mm_dit_config_read reads its sizes from: BF16 tensors
 * with the given shapes (a 0 dimension holds no bytes). */
static mm_safetensors *config_file(const char *const names[8], const int64_t shapes[8][2], int ndims[8],
                                   unsigned char *buf, size_t cap, mm_error *err)
{
    char header[2048];
    size_t hl = 0;
    uint64_t off = 0;
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "{");
    for (int i = 0; i < 8; i++) {
        uint64_t bytes = 2;
        for (int d = 0; d < ndims[i]; d++)
            bytes *= (uint64_t)shapes[i][d];
        char shape[64];
        if (ndims[i] == 2)
            snprintf(shape, sizeof shape, "%lld,%lld", (long long)shapes[i][0], (long long)shapes[i][1]);
        else
            snprintf(shape, sizeof shape, "%lld", (long long)shapes[i][0]);
        hl += (size_t)snprintf(header + hl, sizeof header - hl,
                               "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%s],\"data_offsets\":[%llu,%llu]}",
                               i ? "," : "", names[i], shape, (unsigned long long)off,
                               (unsigned long long)(off + bytes));
        off += bytes;
    }
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "}");
    if (8 + hl + off > cap)
        return NULL;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, 0, (size_t)off);
    mm_safetensors *st = NULL;
    return mm_st_open_memory(&st, "config-test", buf, 8 + hl + (size_t)off, err) == 0 ? st : NULL;
}

static void test_config_refuses_empty_and_huge_dimensions(void)
{
    static const char *const names[8] = {"video_patch_proj.weight", "audio_patch_proj.weight",
                                         "condition_proj.weight",   "adaln_t_table",
                                         "rope.inv_freq",           "blocks.0.attn.q_norm.weight",
                                         "blocks.0.attn.qkv_proj.weight", "blocks.0.mlp.fc1.weight"};
    int ndims[8] = {2, 2, 2, 2, 1, 1, 2, 2};
    /* A consistent toy: hidden 8, head dim 4 (2 heads), ffn 8. */
    const int64_t good[8][2] = {{8, 4}, {8, 4}, {8, 4}, {4, 4}, {1, 0}, {4, 0}, {24, 8}, {16, 8}};
    static unsigned char buf[8192];
    struct {
        int tensor;
        int64_t dim0;
    } bad[] = {{5, 0}, {0, 0}, {6, 0}, {0, (int64_t)1 << 33}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int64_t shapes[8][2];
        memcpy(shapes, good, sizeof shapes);
        shapes[bad[k].tensor][0] = bad[k].dim0;
        if (bad[k].dim0 > 4096)
            shapes[bad[k].tensor][1] = 0; /* no bytes, so the file stays small */
        mm_error err = {{0}};
        mm_safetensors *st = config_file(names, shapes, ndims, buf, sizeof buf, &err);
        MM_REQUIRE(st, "case %zu: the test file does not open: %s", k, err.msg);
        mm_dit_config c;
        int rc = mm_dit_config_read(st, NULL, &c, &err);
        MM_EXPECT(rc != 0 && strstr(err.msg, names[bad[k].tensor]) && strstr(err.msg, "each dimension"),
                  "%s with dimension %lld: rc %d, message '%s'", names[bad[k].tensor], (long long)bad[k].dim0, rc,
                  err.msg);
        mm_st_close(st);
    }
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    json_error_t jerr;
    manifest = json_load_file(path, 0, &jerr);
    snprintf(kit_ckpt, sizeof kit_ckpt, "%s/dit/dit.safetensors", mm_test_data_dir());
    cases = kit_open("cases.safetensors");
    mm_error err = {{0}};
    if (!manifest || !cases || mm_ctx_create(&ctx, mm_cpu(), 0, &err) != 0) {
        printf("FAIL setup: %s\n", manifest ? err.msg : jerr.text);
        return 1;
    }
    mm_conf_tol tol;
    if (mm_conf_tolerance(json_object_get(manifest, "tolerances"), "forward.video", &tol, &err) != 0) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    video_tol = tol.rel_l2;
    MM_RUN(test_config_from_checkpoint);
    MM_RUN(test_rows_on_another_device_are_refused);
    MM_RUN(test_forward_is_repeatable);
    MM_RUN(test_broken_checkpoints_are_refused);
    MM_RUN(test_config_refuses_empty_and_huge_dimensions);
    MM_RUN(test_control_fc1_halves_swapped);
    MM_RUN(test_control_qkv_per_head_interleaved);
    mm_ctx_destroy(ctx);
    mm_st_close(cases);
    json_decref(manifest);
    return mm_test_exit();
}
