/* Shared by the VAE unit tests: the conformance kit copy in tests/data/vae
 * (manifest, cases, both checkpoints) loaded through the engine's loaders
 * with the kit's options, captures of intermediates, and comparisons. */
#ifndef MMH3_TESTS_VAE_KIT_H
#define MMH3_TESTS_VAE_KIT_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "conformance/conformance.h"
#include "conformance/kit_vae.h"
#include "io/safetensors.h"
#include "model/vae/vae.h"
#include "test.h"

typedef struct vk_capture {
    char name[64];
    int64_t numel;
    int ndim;
    int64_t shape[MM_MAX_DIMS];
    float *data;
    struct vk_capture *next;
} vk_capture;

typedef struct vk {
    json_t *m;
    mm_safetensors *cases;
    mm_ctx *ctx;
    mm_video_vae *video;
    mm_audio_vae *audio;
    mm_video_vae_options vo;
    mm_audio_vae_options ao;
    vk_capture *caps;
    mm_error err;
} vk;

static inline float *vk_host(mm_ctx *ctx, const mm_tensor *t)
{
    int64_t n = mm_tensor_numel(t);
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    mm_tensor tmp;
    mm_error e;
    if (!h || mm_tensor_alloc(&tmp, mm_ctx_device(ctx), MM_F32, t->ndim, t->shape, &e) != 0) {
        free(h);
        return NULL;
    }
    mm_copy(ctx, &tmp, t);
    mm_tensor hv = mm_tensor_wrap(h, mm_cpu(), MM_F32, t->ndim, t->shape);
    mm_copy(ctx, &hv, &tmp);
    mm_ctx_sync(ctx, NULL);
    mm_tensor_free(&tmp);
    return h;
}

static inline void vk_capture_fn(void *user, const char *name, const mm_tensor *t)
{
    vk *k = user;
    for (vk_capture *c = k->caps; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return;
    vk_capture *c = calloc(1, sizeof *c);
    if (!c)
        return;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->numel = mm_tensor_numel(t);
    c->ndim = t->ndim;
    memcpy(c->shape, t->shape, sizeof c->shape);
    c->data = vk_host(k->ctx, t);
    c->next = k->caps;
    k->caps = c;
}

static inline void vk_captures_clear(vk *k)
{
    while (k->caps) {
        vk_capture *n = k->caps->next;
        free(k->caps->data);
        free(k->caps);
        k->caps = n;
    }
}

static inline const vk_capture *vk_captured(const vk *k, const char *name)
{
    for (const vk_capture *c = k->caps; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

/* Opens the kit and loads the parts asked for (0 = that model not loaded). */
static inline int vk_open(vk *k, int video_parts, int audio_parts)
{
    memset(k, 0, sizeof *k);
    char path[4096];
    json_error_t je;
    snprintf(path, sizeof path, "%s/vae/manifest.json", mm_test_data_dir());
    if (!(k->m = json_load_file(path, 0, &je)))
        return mm_fail(&k->err, "%s: %s", path, je.text);
    snprintf(path, sizeof path, "%s/vae/cases.safetensors", mm_test_data_dir());
    if (mm_st_open(&k->cases, path, &k->err) != 0 || mm_ctx_create(&k->ctx, mm_cpu(), 0, &k->err) != 0 ||
        mm_conf_vae_video_options(k->m, k->cases, &k->vo, &k->err) != 0 ||
        mm_conf_vae_audio_options(k->m, k->cases, &k->ao, &k->err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/vae/video_vae.safetensors", mm_test_data_dir());
    if (video_parts && mm_video_vae_load(&k->video, path, &k->vo, video_parts, k->ctx, &k->err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/vae/audio_vae.safetensors", mm_test_data_dir());
    if (audio_parts && mm_audio_vae_load(&k->audio, path, &k->ao, audio_parts, k->ctx, &k->err) != 0)
        return -1;
    mm_vae_capture cap = {vk_capture_fn, k};
    if (k->video)
        mm_video_vae_set_capture(k->video, &cap);
    if (k->audio)
        mm_audio_vae_set_capture(k->audio, &cap);
    return 0;
}

static inline void vk_close(vk *k)
{
    vk_captures_clear(k);
    mm_video_vae_free(k->video);
    mm_audio_vae_free(k->audio);
    mm_ctx_destroy(k->ctx);
    mm_st_close(k->cases);
    json_decref(k->m);
}

/* A kit tensor as f32 (malloc'ed), NULL if absent. */
static inline float *vk_read(vk *k, const char *name, int64_t *n)
{
    float *v = NULL;
    if (mm_conf_read_f32(k->cases, name, &v, n, NULL, NULL, &k->err) != 0)
        return NULL;
    return v;
}

static inline mm_conf_diff vk_diff(const float *a, const float *ref, int64_t n) { return mm_conf_measure(a, ref, n); }

/* The manifest's tolerance for "<case>.<name>" under tolerances.debug, or a
 * target tolerance group/quantity. */
static inline mm_conf_tol vk_tol(vk *k, const char *group, const char *key)
{
    const json_t *t = json_object_get(json_object_get(json_object_get(k->m, "tolerances"), group), key);
    mm_conf_tol tol = {0, 0};
    tol.rel_l2 = json_number_value(json_object_get(t, "rel_l2"));
    tol.max_abs = json_number_value(json_object_get(t, "max_abs"));
    return tol;
}

/* Capture `name` vs kit tensor `ref` within tol; prints the measure on failure. */
#define VK_EXPECT_NEAR(k, name, ref, tol)                                                                        \
    do {                                                                                                         \
        const vk_capture *c_ = vk_captured((k), (name));                                                         \
        int64_t n_ = 0;                                                                                          \
        float *r_ = vk_read((k), (ref), &n_);                                                                    \
        MM_EXPECT(c_ && r_ && c_->numel == n_, "%s: captured %s, kit %s", (name), c_ ? "yes" : "no",           \
                  r_ ? "yes" : "no");                                                                            \
        if (c_ && r_ && c_->numel == n_) {                                                                       \
            mm_conf_diff d_ = vk_diff(c_->data, r_, n_);                                                         \
            MM_EXPECT(d_.rel_l2 <= (tol).rel_l2 && d_.max_abs <= (tol).max_abs,                                  \
                      "%s: rel_l2 %.3g (tol %.3g), max_abs %.3g (tol %.3g)", (name), d_.rel_l2, (tol).rel_l2,     \
                      d_.max_abs, (tol).max_abs);                                                                \
        }                                                                                                        \
        free(r_);                                                                                                \
    } while (0)

#endif
