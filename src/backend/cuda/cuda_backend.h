/* The C face of the CUDA backend's runtime: devices, memory, streams, events,
 * and the checks `mmh3 check` runs. Everything here is plain C: the CUDA
 * headers stay inside kernels/. In a build without CUDA these functions exist
 * (src/backend/cuda/cuda_stub.c) and fail with "built without CUDA".
 *
 * Streams. Every device has one compute stream, created on first use; all
 * kernels, GEMMs and copies of this backend run on it, so work on one device
 * is ordered without host synchronization. mm_cuda_stream() hands it out as
 * an opaque pointer (a cudaStream_t) for the kernel ABI in kernels/mmk.h.
 *
 * Memory. mm_cuda_malloc() is a caching allocator: freed blocks go back to a
 * per-device cache and are reused by later requests of about the same size,
 * so a steady-state denoising loop makes no cudaMalloc/cudaFree calls. A block
 * freed on the host may be handed out again at once: that is safe because
 * every user of it is on the same compute stream. Current, peak and reserved
 * bytes are accounted per device.
 */
#ifndef MMH3_BACKEND_CUDA_BACKEND_H
#define MMH3_BACKEND_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* core/error.h has no C++ guards of its own. */
#ifdef __cplusplus
extern "C" {
#endif

#include "backend/gpu.h"
#include "core/error.h"

/* Usable CUDA devices (0 without CUDA, without a driver, or without GPUs). */
int mm_cuda_count(void);

/* backend/gpu.h's description of a GPU, which this backend fills. */
typedef mm_gpu_info mm_cuda_device_info;

int mm_cuda_device_info_get(int dev, mm_cuda_device_info *out, mm_error *err);

/* ---- memory (caching allocator) ---- */
void *mm_cuda_malloc(int dev, size_t bytes, mm_error *err);
void mm_cuda_free(int dev, void *p);
/* dst_dev / src_dev: GPU ordinal, or -1 for host memory. Synchronous with
 * respect to the host, and ordered after the work already queued on the
 * compute streams involved. */
int mm_cuda_memcpy(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes, mm_error *err);
int mm_cuda_memset0(int dev, void *p, size_t bytes, mm_error *err);
int mm_cuda_memory_stats(int dev, size_t *in_use, size_t *peak, size_t *reserved);
void mm_cuda_reset_peak(int dev);
/* Gives every cached (free) block back to the driver. */
int mm_cuda_release_cached(int dev, mm_error *err);

/* ---- streams, synchronization, events ---- */
/* The device's compute stream (a cudaStream_t); NULL when dev is invalid. */
void *mm_cuda_stream(int dev);
/* Waits for everything queued on the device's compute stream; reports any
 * error a kernel raised asynchronously. */
int mm_cuda_sync(int dev, mm_error *err);
/* backend/gpu.h's mm_gpu_make_current. */
int mm_cuda_make_current(int dev, mm_error *err);

typedef struct mm_cuda_event mm_cuda_event;
mm_cuda_event *mm_cuda_event_create(int dev, mm_error *err);
void mm_cuda_event_destroy(mm_cuda_event *e);
/* Records the event on the device's compute stream. */
int mm_cuda_event_record(mm_cuda_event *e, mm_error *err);
/* Milliseconds between two recorded events (waits for the later one). */
int mm_cuda_event_elapsed_ms(mm_cuda_event *start, mm_cuda_event *end, float *ms, mm_error *err);

/* ---- uploads: host→device copies on a stream of their own ---- */
/* Page-locked host memory (cudaHostAlloc), which copies read at full PCIe
 * speed and asynchronously. */
void *mm_cuda_host_alloc(size_t bytes, mm_error *err);
void mm_cuda_host_free(void *p);
/* A copy stream of `dev` with `slots` pairs of events: "ready" (the slot's
 * copies are done) recorded on the copy stream, "free" (the compute work that
 * read the slot is done) recorded on the compute stream. A copy into a slot
 * waits for its "free" event; mm_cuda_upload_acquire makes the compute stream
 * wait for its "ready" event. */
typedef struct mm_cuda_upload mm_cuda_upload;
mm_cuda_upload *mm_cuda_upload_create(int dev, int slots, mm_error *err);
/* Waits for both streams, then frees the stream and the events. */
void mm_cuda_upload_destroy(mm_cuda_upload *u);
/* Queues src (pinned host) → dst (device) on the copy stream, after the
 * slot's last use, and records the slot's "ready" event after it. */
int mm_cuda_upload_copy(mm_cuda_upload *u, int slot, void *dst, const void *src, size_t bytes, mm_error *err);
/* Work queued on the compute stream from now on waits for the slot's copies. */
int mm_cuda_upload_acquire(mm_cuda_upload *u, int slot, mm_error *err);
/* The compute work queued so far is the slot's last use. */
int mm_cuda_upload_release(mm_cuda_upload *u, int slot, mm_error *err);

/* ---- checks for `mmh3 check` ---- */
/* backend/gpu.h's mm_gpu_check_kernels and mm_gpu_peer_probe. */
int mm_cuda_check_kernels(int dev, char *summary, size_t summary_len, mm_error *err);
int mm_cuda_peer_probe(int src, int dst, size_t bytes, double *gbps, mm_error *err);

#ifdef __cplusplus
}
#endif

#endif
