#include "backend/device.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

static _Atomic size_t cpu_in_use, cpu_peak;
static size_t cpu_limit; /* mm_device_simulate_cpu: 0 = no simulated device */

size_t mm_device_alloc_size(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes < ((size_t)1 << 20))
        return (bytes + 511) & ~(size_t)511;
    const size_t two_mib = (size_t)2 << 20;
    return (bytes + two_mib - 1) / two_mib * two_mib;
}

void mm_device_simulate_cpu(size_t limit) { cpu_limit = limit; }

/* Takes `bytes` from the CPU's account; false when the simulated device is full. */
static bool cpu_take(size_t bytes)
{
    size_t now = atomic_load(&cpu_in_use);
    do {
        if (cpu_limit && now + bytes > cpu_limit)
            return false;
    } while (!atomic_compare_exchange_weak(&cpu_in_use, &now, now + bytes));
    now += bytes;
    size_t peak = atomic_load(&cpu_peak);
    while (now > peak && !atomic_compare_exchange_weak(&cpu_peak, &peak, now)) {
    }
    return true;
}

/* CPU allocations carry their size in a 64-byte header so the peak accounting
 * matches what the CUDA allocator reports. */
#define CPU_HEADER 64

void *mm_device_malloc(mm_device dev, size_t bytes, mm_error *err)
{
    if (dev.kind == MM_DEVICE_CUDA)
        return mm_cuda_malloc(dev.index, bytes, err);
    size_t counted = cpu_limit ? mm_device_alloc_size(bytes) : bytes;
    if (!cpu_take(counted)) {
        mm_fail(err, "out of memory on the simulated device allocating %zu bytes: %zu of %zu in use", bytes,
                atomic_load(&cpu_in_use), cpu_limit);
        return NULL;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes + CPU_HEADER) != 0 || !p) {
        atomic_fetch_sub(&cpu_in_use, counted);
        mm_fail(err, "out of host memory allocating %zu bytes", bytes);
        return NULL;
    }
    memcpy(p, &counted, sizeof counted);
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

void *mm_host_pinned_alloc(mm_device dev, size_t bytes, mm_error *err)
{
    if (dev.kind == MM_DEVICE_CUDA)
        return mm_cuda_host_alloc(bytes, err);
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0 || !p) {
        mm_fail(err, "out of host memory allocating %zu bytes", bytes);
        return NULL;
    }
    return p;
}

void mm_host_pinned_free(mm_device dev, void *p)
{
    if (dev.kind == MM_DEVICE_CUDA)
        mm_cuda_host_free(p);
    else
        free(p);
}

struct mm_upload_queue {
    mm_device dev;
    int slots;
    mm_cuda_upload *cuda; /* NULL on the CPU */
};

int mm_upload_queue_create(mm_device dev, int slots, mm_upload_queue **out, mm_error *err)
{
    *out = NULL;
    mm_upload_queue *u = calloc(1, sizeof *u);
    if (!u)
        return mm_fail(err, "out of memory");
    u->dev = dev;
    u->slots = slots;
    if (dev.kind == MM_DEVICE_CUDA && !(u->cuda = mm_cuda_upload_create(dev.index, slots, err))) {
        free(u);
        return -1;
    }
    *out = u;
    return 0;
}

void mm_upload_queue_destroy(mm_upload_queue *u)
{
    if (!u)
        return;
    mm_cuda_upload_destroy(u->cuda);
    free(u);
}

int mm_upload_queue_copy(mm_upload_queue *u, int slot, void *dst, const void *src, size_t bytes, mm_error *err)
{
    if (slot < 0 || slot >= u->slots)
        return mm_fail(err, "upload slot %d of %d", slot, u->slots);
    if (u->cuda)
        return mm_cuda_upload_copy(u->cuda, slot, dst, src, bytes, err);
    memcpy(dst, src, bytes);
    return 0;
}

int mm_upload_queue_acquire(mm_upload_queue *u, int slot, mm_error *err)
{
    return u->cuda ? mm_cuda_upload_acquire(u->cuda, slot, err) : 0;
}

int mm_upload_queue_release(mm_upload_queue *u, int slot, mm_error *err)
{
    return u->cuda ? mm_cuda_upload_release(u->cuda, slot, err) : 0;
}
