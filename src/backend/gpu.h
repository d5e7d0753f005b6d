/* The GPUs of this host as the layers above the backend see them: what
 * each one is (`mmh3 check`, the placement, the memory checks), whether
 * this build's kernels run on it, the peer-copy probe, and the current
 * device NCCL's set-up works on. GPUs are CUDA ordinals (0 ..
 * mm_cuda_device_count() - 1, backend/device.h). Each call goes to the CUDA
 * backend (backend/cuda/cuda_backend.h); a build without CUDA fails them
 * with "built without CUDA".
 */
#ifndef MMH3_BACKEND_GPU_H
#define MMH3_BACKEND_GPU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/error.h"

typedef struct mm_gpu_info {
    int index;
    char name[256];
    int cc_major, cc_minor;   /* compute capability, 9.0 on Hopper */
    int sm_count;
    size_t total_bytes;       /* device memory */
    size_t free_bytes;        /* free right now, as the driver sees it */
    size_t l2_bytes;
    size_t smem_per_block_optin; /* largest dynamic shared memory a block may ask for */
    int clock_khz, mem_clock_khz, mem_bus_bits;
    int driver_version, runtime_version; /* e.g. 13000 */
    char pci_bus_id[32];
} mm_gpu_info;

int mm_gpu_info_get(int gpu, mm_gpu_info *out, mm_error *err);

/* Verifies that every kernel of this build has machine code (or PTX the
 * driver can compile) for the GPU's architecture; kernels that need a
 * newer architecture than the GPU's are reported as optional, never as
 * missing. Writes a one-line summary into `summary` (may be NULL). Fails,
 * naming the missing kernels, when a required one is absent. */
int mm_gpu_check_kernels(int gpu, char *summary, size_t summary_len, mm_error *err);

/* Copies a pattern of `bytes` from src to dst (GPU to GPU, through peer
 * access where the hardware has it) and back, and verifies every byte.
 * src == dst is allowed (a device-local round trip). Reports the copy rate. */
int mm_gpu_peer_probe(int src, int dst, size_t bytes, double *gbps, mm_error *err);

/* Makes `gpu` the calling thread's current device (for libraries that work
 * on the current device, e.g. NCCL's ncclCommInitRank). */
int mm_gpu_make_current(int gpu, mm_error *err);

#ifdef __cplusplus
}
#endif

#endif
