/* backend/fused.h: each call goes to the backend of the context's device.
 * Only the CUDA backend (backend/cuda/cuda_fused.h, cuda_speed.h) has these
 * kernels; elsewhere the calls record that in the context. */
#include "backend/fused.h"

#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_fused.h"
#include "backend/cuda/cuda_speed.h"

static bool on_cuda(const mm_ctx *ctx) { return mm_ctx_device(ctx).kind == MM_DEVICE_CUDA; }

static int cuda_only(mm_ctx *ctx, const char *op)
{
    char dev[32];
    return mm_ctx_fail(ctx, "%s: a CUDA context only (this one is on %s); the portable ops compute the same", op,
                       mm_device_name(mm_ctx_device(ctx), dev, sizeof dev));
}

int mm_fused_rmsnorm_modulate_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *x,
                                      const mm_tensor *weight, float eps, const mm_tensor *scale,
                                      const mm_tensor *shift, const mm_tensor *idx)
{
    if (!on_cuda(ctx))
        return cuda_only(ctx, "mm_fused_rmsnorm_modulate_convrot");
    return mm_cuda_rmsnorm_modulate_convrot(ctx, q, s, h, x, weight, eps, scale, shift, idx);
}

int mm_fused_swiglu_convrot(mm_ctx *ctx, mm_tensor *q, mm_tensor *s, mm_tensor *h, const mm_tensor *gate_up)
{
    if (!on_cuda(ctx))
        return cuda_only(ctx, "mm_fused_swiglu_convrot");
    return mm_cuda_swiglu_convrot(ctx, q, s, h, gate_up);
}

int mm_fused_gemm_i8_scaled_gated(mm_ctx *ctx, mm_tensor *x, const mm_tensor *q_x, const mm_tensor *s_x,
                                  const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate,
                                  const mm_tensor *idx)
{
    if (!on_cuda(ctx))
        return cuda_only(ctx, "mm_fused_gemm_i8_scaled_gated");
    return mm_cuda_gemm_i8_scaled_gated(ctx, x, q_x, s_x, q_w, s_w, gate, idx);
}

int mm_fused_gemm_i8_scaled_add(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x,
                                const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate,
                                const mm_tensor *idx, const mm_tensor *add)
{
    if (!on_cuda(ctx))
        return cuda_only(ctx, "mm_fused_gemm_i8_scaled_add");
    return mm_cuda_gemm_i8_scaled_add(ctx, y, q_x, s_x, q_w, s_w, gate, idx, add);
}

int mm_fused_qk_rmsnorm_rope(mm_ctx *ctx, mm_tensor *q, mm_tensor *k, const mm_tensor *wq, const mm_tensor *wk,
                             float eps, const mm_tensor *cos, const mm_tensor *sin, int rot)
{
    if (!on_cuda(ctx))
        return cuda_only(ctx, "mm_fused_qk_rmsnorm_rope");
    return mm_cuda_qk_rmsnorm_rope(ctx, q, k, wq, wk, eps, cos, sin, rot);
}

bool mm_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    return on_cuda(ctx) && mm_cuda_fa3_fits(ctx, out, q, k, v);
}

int mm_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                     float scale, mm_fa3_mode mode)
{
    if (!on_cuda(ctx))
        return cuda_only(ctx, "mm_attention_fa3");
    return mm_cuda_attention_fa3(ctx, out, q, k, v, scale, mode);
}

bool mm_qgemm_fits(mm_ctx *ctx, const mm_tensor *y, const mm_tensor *q_x, const mm_tensor *q_w)
{
    return on_cuda(ctx) && mm_cuda_qgemm_fits(ctx, y, q_x, q_w);
}

int mm_qgemm(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
             const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx)
{
    if (!on_cuda(ctx))
        return cuda_only(ctx, "mm_qgemm");
    return mm_cuda_qgemm(ctx, y, q_x, s_x, q_w, s_w, gate, idx);
}

bool mm_qgemm_lora_ready(mm_ctx *ctx) { return on_cuda(ctx) && mm_cuda_qgemm_lora_ready(ctx); }

int mm_qgemm_lora(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                  const mm_tensor *s_w, const mm_tensor *gate32, const mm_tensor *idx, const mm_tensor *u,
                  const mm_tensor *b_all, const mm_tensor *mask)
{
    if (!on_cuda(ctx))
        return cuda_only(ctx, "mm_qgemm_lora");
    return mm_cuda_qgemm_lora(ctx, y, q_x, s_x, q_w, s_w, gate32, idx, u, b_all, mask);
}

void mm_dit_kernel_paths_get(mm_device dev, bool want_fast, mm_dit_kernel_paths *out)
{
    if (dev.kind == MM_DEVICE_CUDA) {
        mm_cuda_speed_paths_get(dev.index, want_fast, out);
        return;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->attention, sizeof out->attention, "mm_attention (the portable ops off CUDA)");
    snprintf(out->fast, sizeof out->fast, "as exact mode (no fast kernel off CUDA)");
    snprintf(out->gemm, sizeof out->gemm, "mm_gemm_i8_scaled (the portable ops off CUDA)");
}

void mm_dit_kernel_paths_describe(mm_device dev, char *out, size_t n)
{
    if (dev.kind == MM_DEVICE_CUDA) {
        mm_cuda_speed_describe(dev.index, out, n);
        return;
    }
    char name[32];
    snprintf(out, n, "%s: the portable ops (the DiT's fast kernels are CUDA's)",
             mm_device_name(dev, name, sizeof name));
}
