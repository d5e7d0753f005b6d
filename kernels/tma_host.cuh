/* Host side of the TMA loads of the issue-9 kernels (kernels/attn_fa3.cu,
 * kernels/qgemm_sm90.cu): 2-D tensor maps for 128-byte-swizzled tiles. The
 * encoder is the driver's cuTensorMapEncodeTiled, fetched through the
 * runtime at first use, so the build does not link libcuda. */
#ifndef MMH3_KERNELS_TMA_HOST_CUH
#define MMH3_KERNELS_TMA_HOST_CUH

#include <cuda.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/error.h"
}

typedef CUresult (*mmk_encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                        const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                        CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                        CUtensorMapFloatOOBfill);

static inline mmk_encode_tiled_fn mmk_tma_encoder(mm_error *err)
{
    static mmk_encode_tiled_fn fn;
    if (fn)
        return fn;
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
        cudaGetLastError();
        mm_fail(err, "TMA: the driver has no cuTensorMapEncodeTiled (a CUDA 12+ driver is needed)");
        return nullptr;
    }
    fn = (mmk_encode_tiled_fn)p;
    return fn;
}

/* A 2-D row-major tensor [rows, cols] (row stride row_bytes, a multiple of
 * 16) read in boxes of box_rows × box_cols elements into shared memory with
 * the given swizzle (box_cols · element size = the swizzle's span); reads
 * past the edges fill zeros. u8: 1-byte elements, else bf16. */
static inline int mmk_tma_map_2d_swizzled(CUtensorMap *m, bool u8, const void *base, uint64_t cols, uint64_t rows,
                                          uint64_t row_bytes, int box_cols, int box_rows, CUtensorMapSwizzle swizzle,
                                          mm_error *err)
{
    mmk_encode_tiled_fn enc = mmk_tma_encoder(err);
    if (!enc)
        return -1;
    cuuint64_t dims[2] = {cols, rows};
    cuuint64_t strides[1] = {row_bytes};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    cuuint32_t es[2] = {1, 1};
    CUresult r = enc(m, u8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                     const_cast<void *>(base), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return mm_fail(err, "TMA: cuTensorMapEncodeTiled failed (%d) for a [%llu, %llu] tensor with %llu-byte rows",
                       (int)r, (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)row_bytes);
    return 0;
}

/* The same into 128-byte-swizzled tiles (box_cols · element size = 128 bytes). */
static inline int mmk_tma_map_2d(CUtensorMap *m, bool u8, const void *base, uint64_t cols, uint64_t rows,
                                 uint64_t row_bytes, int box_cols, int box_rows, mm_error *err)
{
    return mmk_tma_map_2d_swizzled(m, u8, base, cols, rows, row_bytes, box_cols, box_rows, CU_TENSOR_MAP_SWIZZLE_128B,
                                   err);
}

/* Whether cuda:dev is an sm_90 GPU that has the sm_90a code of kernel (the TMA/wgmma kernels' gate);
 * cache[64] holds each device's answer (0 not asked yet, 1 yes, 2 no). */
static inline bool mmk_hopper_kernel_usable(int dev, const void *kernel, int *cache)
{
    if (dev < 0 || dev >= 64)
        return false;
    if (!cache[dev]) {
        cudaDeviceProp prop;
        cudaFuncAttributes fa;
        const bool ok = cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major == 9 &&
                        cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.binaryVersion >= 90;
        cudaGetLastError();
        cache[dev] = ok ? 1 : 2;
    }
    return cache[dev] == 1;
}

#endif
