/* The CPU twins of backend/sparse_attn.h (called after validation, so they
 * trust their arguments) and the block summaries both backends share. */
#ifndef MMH3_BACKEND_CPU_CPU_SPARSE_H
#define MMH3_BACKEND_CPU_CPU_SPARSE_H

#include "backend/op_list.h"
#include "backend/sparse_attn.h"

#define MM_CPU_DECLARE(name, params) int mm_cpu_##name params;
MM_BACKEND_SPARSE_OPS(MM_CPU_DECLARE)
#undef MM_CPU_DECLARE

#endif
