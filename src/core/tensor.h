/* Tensors: a typed, strided view of memory on one device.
 *
 * An mm_tensor is a small value type. Ownership is explicit: a tensor made by
 * mm_tensor_alloc() owns its memory (storage != NULL) and is released with
 * mm_tensor_free(); every view made from it (mm_tensor_view, _slice, _reshape,
 * _narrow ...) borrows (storage == NULL) and must not outlive the owner.
 * Tensors over memory someone else owns (an mmap'ed checkpoint, a caller's
 * buffer) are made with mm_tensor_wrap() and borrow too.
 *
 * Strides are in elements. Packed 4-bit tensors (MM_F4_E2M1) must be
 * contiguous along the last axis.
 */
#ifndef MMH3_CORE_TENSOR_H
#define MMH3_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

#define MM_MAX_DIMS 6

typedef enum mm_device_kind {
    MM_DEVICE_CPU = 0,
    MM_DEVICE_CUDA = 1,
} mm_device_kind;

typedef struct mm_device {
    mm_device_kind kind;
    int index; /* GPU ordinal; 0 for the CPU */
} mm_device;

static inline mm_device mm_cpu(void) { return (mm_device){MM_DEVICE_CPU, 0}; }
static inline mm_device mm_cuda(int index) { return (mm_device){MM_DEVICE_CUDA, index}; }
static inline bool mm_device_eq(mm_device a, mm_device b) { return a.kind == b.kind && a.index == b.index; }
/* "cpu" or "cuda:N". */
const char *mm_device_name(mm_device d, char *buf, size_t n);
/* Parses "cpu", "cuda", "cuda:N". */
int mm_device_parse(const char *s, mm_device *out, mm_error *err);

typedef struct mm_storage mm_storage; /* one allocation, owned by exactly one tensor */

typedef struct mm_tensor {
    void *data; /* element [0,...,0] */
    mm_dtype dtype;
    mm_device device;
    int ndim;
    int64_t shape[MM_MAX_DIMS];
    int64_t stride[MM_MAX_DIMS];
    mm_storage *storage; /* non-NULL only in the owning tensor */
} mm_tensor;

/* Allocation goes through the device's allocator (the CUDA backend caches and
 * accounts peak memory). Memory is not initialized. */
int mm_tensor_alloc(mm_tensor *t, mm_device dev, mm_dtype dtype, int ndim, const int64_t *shape, mm_error *err);
/* Same as mm_tensor_alloc and filled with zero bytes. */
int mm_tensor_zeros(mm_tensor *t, mm_device dev, mm_dtype dtype, int ndim, const int64_t *shape, mm_error *err);
/* Frees owned memory (no-op for a borrowed view) and clears the struct. */
void mm_tensor_free(mm_tensor *t);

/* A borrowed contiguous tensor over existing memory. */
mm_tensor mm_tensor_wrap(void *data, mm_device dev, mm_dtype dtype, int ndim, const int64_t *shape);

int64_t mm_tensor_numel(const mm_tensor *t);
size_t mm_tensor_nbytes(const mm_tensor *t); /* for contiguous tensors */
bool mm_tensor_is_contiguous(const mm_tensor *t);
/* Borrowed view sharing memory (storage cleared). */
mm_tensor mm_tensor_view(const mm_tensor *t);
/* View of [start, start+len) along dim. */
mm_tensor mm_tensor_narrow(const mm_tensor *t, int dim, int64_t start, int64_t len);
/* Contiguous-only reshape; returns -1 if t is not contiguous or numel differs. */
int mm_tensor_reshape(mm_tensor *out, const mm_tensor *t, int ndim, const int64_t *shape, mm_error *err);
/* Swaps two dims of the view (no copy). */
mm_tensor mm_tensor_transpose(const mm_tensor *t, int d0, int d1);
/* Reorders the dims of the view: result dim i is t's dim perm[i] (no copy). */
mm_tensor mm_tensor_permute(const mm_tensor *t, const int *perm);
/* Splits dim into n dims of the given sizes (product = t->shape[dim]); works
 * on any view whose dim is uniformly strided, e.g. [S, 7168] -> [S, 56, 128]
 * on a narrow view of a fused QKV buffer. Returns an invalid view (data NULL)
 * on a size mismatch or when the rank would exceed MM_MAX_DIMS. */
mm_tensor mm_tensor_unflatten(const mm_tensor *t, int dim, int n, const int64_t *sizes);
/* Broadcast view to `shape` (same rank): dims of size 1 get stride 0.
 * Returns an invalid view when a dim is neither equal nor 1. */
mm_tensor mm_tensor_expand(const mm_tensor *t, int ndim, const int64_t *shape);
/* Removes dim by taking index i of it (rank - 1). */
mm_tensor mm_tensor_select(const mm_tensor *t, int dim, int64_t i);
/* A view with an explicit shape and element strides over t's data (for
 * layouts the helpers above cannot express; nothing is checked). */
mm_tensor mm_tensor_as_strided(const mm_tensor *t, int ndim, const int64_t *shape, const int64_t *stride);
/* True when t has a real data pointer (views made from bad arguments do not). */
static inline bool mm_tensor_valid(const mm_tensor *t) { return t && t->data != NULL; }

/* Shape equality, with a message naming `what` on mismatch. */
int mm_tensor_expect_shape(const mm_tensor *t, int ndim, const int64_t *shape, const char *what, mm_error *err);
/* "[a, b, c]" */
const char *mm_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Element access on CPU tensors, any dtype, converted through float/double
 * (slow; for tests, loaders and one-off glue, never for hot loops). */
double mm_tensor_get(const mm_tensor *t, const int64_t *index);
void mm_tensor_set(mm_tensor *t, const int64_t *index, double v);

/* Convenience shape literals: MM_SHAPE(3, 4) → (const int64_t[]){3, 4}. */
#define MM_SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define MM_NDIM(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

#endif
