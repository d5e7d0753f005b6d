/* Helpers shared by the two VAEs (private to src/model/vae): weight placement
 * on the compute device, scratch tensors that report through the context's
 * sticky error, captures. */
#ifndef MMH3_MODEL_VAE_VAE_COMMON_H
#define MMH3_MODEL_VAE_VAE_COMMON_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/ops.h"
#include "io/safetensors.h"
#include "model/vae/vae.h"

/* Every tensor a model placed, so that freeing is one loop (borrowed views
 * free as no-ops). Addresses must stay valid: point into the model struct or
 * arrays allocated before placing. */
typedef struct vae_store {
    mm_tensor **items;
    size_t n, cap;
    size_t device_bytes;
} vae_store;

/* The tensor `name` on ctx's device in dtype `want` (MM_DTYPE_COUNT: as
 * stored). On the CPU a tensor already in that dtype stays a view into the
 * mapping; anything else becomes an owned copy. Expected shape checked when
 * ndim >= 0. */
int vae_place(vae_store *s, mm_ctx *ctx, const mm_safetensors *st, const char *name, mm_dtype want, int ndim,
              const int64_t *shape, mm_tensor *out, mm_error *err);
/* An owned device copy of host data (f32) registered in the store. */
int vae_upload_f32(vae_store *s, mm_ctx *ctx, const float *host, int ndim, const int64_t *shape, mm_tensor *out,
                   mm_error *err);
void vae_store_free(vae_store *s);
/* Registers a tensor the model made itself (owned; freed with the store). */
int vae_store_add(vae_store *s, mm_tensor *t, mm_error *err);

/* The shape of tensor `name` (mm_st_find_config: rank ndim, every dimension
 * in 1..2^24). `kind` names the expected file in the error. */
int vae_shape_of(const mm_safetensors *st, const char *kind, const char *name, int ndim, int64_t *shape,
                 mm_error *err);

/* Number of consecutive indices i >= 0 for which printf(fmt, i) names a tensor prefix. */
int vae_count_indexed(const mm_safetensors *st, const char *fmt);

/* Scratch on ctx's device; a failure is recorded in the context (so a run of
 * ops can be checked once) and returns -1. Skips the allocation when the
 * context has already failed. */
int vae_new(mm_ctx *ctx, mm_tensor *t, mm_dtype dtype, int ndim, const int64_t *shape);

/* Calls the capture if set. */
void vae_capture(const mm_vae_capture *cap, const char *name, const mm_tensor *t);

/* A per-channel constant [C] on the device, viewed as [1, C, 1...] with
 * `rank` dims and expanded to `shape` for broadcasting over dim `cdim`. */
mm_tensor vae_channel_view(const mm_tensor *vec, int rank, const int64_t *shape, int cdim);

#endif
