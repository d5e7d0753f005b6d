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

/* The bytes an allocation of `bytes` takes from the device: the CUDA caching
 * allocator's rounding (512 B below 1 MiB, 2 MiB above), which the CPU
 * applies too while it simulates a device. */
size_t mm_device_alloc_size(size_t bytes);
/* CPU allocations as a device of `limit` bytes (0: off, the default): they
 * are accounted at mm_device_alloc_size and fail with "out of memory on the
 * simulated device" past the limit, so that memory plans are tested on the
 * CPU with the accounting a GPU would have. Process-wide; set it before
 * allocating, from one thread. */
void mm_device_simulate_cpu(size_t limit);

/* Host memory that uploads to dev read from: page-locked on a GPU (full PCIe
 * speed, asynchronous copies), plain aligned memory for the CPU. Not counted
 * as device memory. */
void *mm_host_pinned_alloc(mm_device dev, size_t bytes, mm_error *err);
void mm_host_pinned_free(mm_device dev, void *p);

/* An upload queue: host → device copies on a stream of their own, into
 * `slots` regions of device memory that the compute stream reads. A copy
 * into a slot waits until the compute work that last read it is done
 * (mm_upload_queue_release); the compute stream waits for the slot's copies before
 * the work queued after mm_upload_queue_acquire. So the next slot's copy runs while
 * the current one is computed on, with no host synchronization. On the CPU
 * the copy happens at once and the rest is a no-op. */
typedef struct mm_upload_queue mm_upload_queue;
int mm_upload_queue_create(mm_device dev, int slots, mm_upload_queue **out, mm_error *err);
void mm_upload_queue_destroy(mm_upload_queue *u); /* waits for the queued copies */
int mm_upload_queue_copy(mm_upload_queue *u, int slot, void *dst, const void *src, size_t bytes, mm_error *err);
int mm_upload_queue_acquire(mm_upload_queue *u, int slot, mm_error *err);
int mm_upload_queue_release(mm_upload_queue *u, int slot, mm_error *err);

/* Number of CUDA devices usable by this build (0 without CUDA or GPUs). */
int mm_cuda_device_count(void);

#endif
