/* The CUDA twins of backend/sparse_attn.h (implemented in cuda_sparse.c
 * over kernels/attn_sparse.cu; cuda_sparse_stub.c in builds without CUDA).
 * Same contract as cuda_ops.h: arguments validated by backend/sparse_attn.c,
 * asynchronous on the context's stream, failures through mm_ctx_fail. */
#ifndef MMH3_BACKEND_CUDA_CUDA_SPARSE_H
#define MMH3_BACKEND_CUDA_CUDA_SPARSE_H

#include "backend/op_list.h"
#include "backend/sparse_attn.h"

#define MM_CUDA_DECLARE(name, params) int mm_cuda_##name params;
MM_BACKEND_SPARSE_OPS(MM_CUDA_DECLARE)
#undef MM_CUDA_DECLARE
const char *mm_cuda_sparse_kind(int dev, mm_sparse_mode mode);

#endif
