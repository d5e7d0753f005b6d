/* backend/gpu.h over the CUDA backend (its stub in builds without CUDA). */
#include "backend/gpu.h"

#include "backend/cuda/cuda_backend.h"

int mm_gpu_info_get(int gpu, mm_gpu_info *out, mm_error *err) { return mm_cuda_device_info_get(gpu, out, err); }

int mm_gpu_check_kernels(int gpu, char *summary, size_t summary_len, mm_error *err)
{
    return mm_cuda_check_kernels(gpu, summary, summary_len, err);
}

int mm_gpu_peer_probe(int src, int dst, size_t bytes, double *gbps, mm_error *err)
{
    return mm_cuda_peer_probe(src, dst, bytes, gbps, err);
}

int mm_gpu_make_current(int gpu, mm_error *err) { return mm_cuda_make_current(gpu, err); }
