/* Raw device memory: the one place tensors get their bytes from.
 *
 * CPU memory is 64-byte aligned. CUDA memory comes from the CUDA backend's
 * caching allocator, which also keeps the current and peak bytes in use per
 * device (reported by `mmh3 generate` and the benchmarks).
 */
#ifndef MMH3_BACKEND_DEVICE_H
#define MMH3_BACKEND_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

void *mm_device_malloc(mm_device dev, size_t bytes, mm_error *err);
void mm_device_free(mm_device dev, void *p);
/* Byte copy between any two devices (synchronous with respect to the host). */
int mm_device_memcpy(mm_device dst_dev, void *dst, mm_device src_dev, const void *src, size_t bytes, mm_error *err);
int mm_device_memset0(mm_device dev, void *p, size_t bytes, mm_error *err);

typedef struct mm_memory_stats {
    size_t in_use;    /* bytes handed out now */
    size_t peak;      /* high-water mark of in_use since the last reset */
    size_t reserved;  /* bytes held from the driver, cached blocks included */
} mm_memory_stats;

int mm_device_memory_stats(mm_device dev, mm_memory_stats *out);
void mm_device_reset_peak(mm_device dev);
/* Number of CUDA devices usable by this build (0 without CUDA or GPUs). */
int mm_cuda_device_count(void);

#endif
