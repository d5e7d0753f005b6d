/* The CPU twins of backend/sparse_attn.h (called after validation, so they
 * trust their arguments) and the block summaries both backends share. */
#ifndef MMH3_BACKEND_CPU_CPU_SPARSE_H
#define MMH3_BACKEND_CPU_CPU_SPARSE_H

#include "backend/sparse_attn.h"

int mm_cpu_sparse_route_blocks(mm_ctx *ctx, mm_sparse_route *route, const mm_tensor *q, const mm_tensor *k,
                        const mm_tensor *v, const mm_sparse_route_params *p, mm_tensor *tally);
int mm_cpu_sparse_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                            const mm_sparse_route *route, const mm_sparse_attn_params *p);

#endif
