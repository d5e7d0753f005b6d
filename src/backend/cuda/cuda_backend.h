/* The C face of the CUDA backend. Everything here is plain C: the CUDA
 * headers stay inside kernels/. In a build without CUDA these functions exist
 * and fail with "built without CUDA". */
#ifndef MMH3_BACKEND_CUDA_BACKEND_H
#define MMH3_BACKEND_CUDA_BACKEND_H

#include <stddef.h>

#include "core/error.h"

int mm_cuda_count(void);
void *mm_cuda_malloc(int dev, size_t bytes, mm_error *err);
void mm_cuda_free(int dev, void *p);
/* dst_dev / src_dev: GPU ordinal, or -1 for host memory. */
int mm_cuda_memcpy(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes, mm_error *err);
int mm_cuda_memset0(int dev, void *p, size_t bytes, mm_error *err);
int mm_cuda_memory_stats(int dev, size_t *in_use, size_t *peak, size_t *reserved);
void mm_cuda_reset_peak(int dev);

#endif
