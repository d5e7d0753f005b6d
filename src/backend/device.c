#include "backend/device.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

static _Atomic size_t cpu_in_use, cpu_peak;

/* CPU allocations carry their size in a 64-byte header so the peak accounting
 * matches what the CUDA allocator reports. */
#define CPU_HEADER 64

void *mm_device_malloc(mm_device dev, size_t bytes, mm_error *err)
{
    if (dev.kind == MM_DEVICE_CUDA)
        return mm_cuda_malloc(dev.index, bytes, err);
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes + CPU_HEADER) != 0 || !p) {
        mm_fail(err, "out of host memory allocating %zu bytes", bytes);
        return NULL;
    }
    memcpy(p, &bytes, sizeof bytes);
    size_t now = atomic_fetch_add(&cpu_in_use, bytes) + bytes;
    size_t peak = atomic_load(&cpu_peak);
    while (now > peak && !atomic_compare_exchange_weak(&cpu_peak, &peak, now)) {
    }
    return (char *)p + CPU_HEADER;
}

void mm_device_free(mm_device dev, void *p)
{
    if (!p)
        return;
    if (dev.kind == MM_DEVICE_CUDA) {
        mm_cuda_free(dev.index, p);
        return;
    }
    char *base = (char *)p - CPU_HEADER;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    atomic_fetch_sub(&cpu_in_use, bytes);
    free(base);
}

int mm_device_memcpy(mm_device dst_dev, void *dst, mm_device src_dev, const void *src, size_t bytes, mm_error *err)
{
    if (bytes == 0)
        return 0;
    if (dst_dev.kind == MM_DEVICE_CPU && src_dev.kind == MM_DEVICE_CPU) {
        memmove(dst, src, bytes);
        return 0;
    }
    return mm_cuda_memcpy(dst_dev.kind == MM_DEVICE_CUDA ? dst_dev.index : -1, dst,
                          src_dev.kind == MM_DEVICE_CUDA ? src_dev.index : -1, src, bytes, err);
}

int mm_device_memset0(mm_device dev, void *p, size_t bytes, mm_error *err)
{
    if (dev.kind == MM_DEVICE_CUDA)
        return mm_cuda_memset0(dev.index, p, bytes, err);
    memset(p, 0, bytes);
    return 0;
}

int mm_device_memory_stats(mm_device dev, mm_memory_stats *out)
{
    if (dev.kind == MM_DEVICE_CUDA)
        return mm_cuda_memory_stats(dev.index, &out->in_use, &out->peak, &out->reserved);
    out->in_use = atomic_load(&cpu_in_use);
    out->peak = atomic_load(&cpu_peak);
    out->reserved = out->in_use;
    return 0;
}

void mm_device_reset_peak(mm_device dev)
{
    if (dev.kind == MM_DEVICE_CUDA) {
        mm_cuda_reset_peak(dev.index);
        return;
    }
    atomic_store(&cpu_peak, atomic_load(&cpu_in_use));
}

int mm_cuda_device_count(void) { return mm_cuda_count(); }
