/* The CUDA twins of backend/sparse_attn.h (implemented in cuda_sparse.c
 * over kernels/attn_sparse.cu; cuda_sparse_stub.c in builds without CUDA).
 * Same contract as cuda_ops.h: arguments validated by backend/sparse_attn.c,
 * asynchronous on the context's stream, failures through mm_ctx_fail. */
#ifndef MMH3_BACKEND_CUDA_CUDA_SPARSE_H
#define MMH3_BACKEND_CUDA_CUDA_SPARSE_H

#include "backend/sparse_attn.h"

int mm_cuda_sparse_route_blocks(mm_ctx *ctx, mm_sparse_route *route, const mm_tensor *q, const mm_tensor *k,
                         const mm_tensor *v, const mm_sparse_route_params *p, mm_tensor *tally);
int mm_cuda_sparse_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                             const mm_sparse_route *route, const mm_sparse_attn_params *p);
const char *mm_cuda_sparse_kind(int dev, mm_sparse_mode mode);

#endif
