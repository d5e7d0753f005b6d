/* Builds without CUDA: the Hopper attention never fits, and a call records
 * that this build has no CUDA backend. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_speed.h"

bool mm_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    (void)ctx, (void)out, (void)q, (void)k, (void)v;
    return false;
}

int mm_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                     float scale, mm_fa3_mode mode)
{
    (void)out, (void)q, (void)k, (void)v, (void)scale, (void)mode;
    return mm_ctx_fail(ctx, "this mmh3 was built without CUDA (configure --with-cuda)");
}

bool mm_qgemm_fits(mm_ctx *ctx, const mm_tensor *y, const mm_tensor *q_x, const mm_tensor *q_w)
{
    (void)ctx, (void)y, (void)q_x, (void)q_w;
    return false;
}

int mm_qgemm(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
             const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx)
{
    (void)y, (void)q_x, (void)s_x, (void)q_w, (void)s_w, (void)gate, (void)idx;
    return mm_ctx_fail(ctx, "this mmh3 was built without CUDA (configure --with-cuda)");
}

void mm_dit_kernel_paths_get(mm_device dev, bool want_fast, mm_dit_kernel_paths *out)
{
    (void)dev, (void)want_fast;
    memset(out, 0, sizeof *out);
    snprintf(out->attention, sizeof out->attention, "mm_attention (no CUDA in this build)");
    snprintf(out->fast, sizeof out->fast, "as exact mode (no CUDA in this build)");
    snprintf(out->gemm, sizeof out->gemm, "mm_gemm_i8_scaled (no CUDA in this build)");
}

const char *mm_cuda_attention_path(int dev)
{
    (void)dev;
    return "none (no CUDA in this build)";
}

void mm_dit_kernel_paths_describe(mm_device dev, char *out, size_t n)
{
    char name[32];
    snprintf(out, n, "%s: the portable ops; this mmh3 was built without CUDA", mm_device_name(dev, name, sizeof name));
}
#else
typedef int mm_cuda_speed_stub_unused; /* ISO C forbids an empty translation unit */
#endif
