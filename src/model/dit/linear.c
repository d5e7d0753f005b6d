/* The two kinds of linear layers of the DiT, y = x·Wᵀ without bias.
 *
 * bf16 (token refiner): one GEMM, f32 accumulation, one rounding.
 * W8A8 ConvRot (main blocks, dit.md §3.3): rotate each 256-group of the
 * activation row and round it to bf16, quantize per row to int8 with an f32
 * scale, integer GEMM, f32 epilogue with the two scales. The int8 scratch is
 * the request's, so the 200 quantized layers of a forward allocate nothing. */
#include "model/dit/model.h"

int mm_dit_linear_bf16(mm_ctx *ctx, mm_tensor *out, const mm_tensor *x, const mm_tensor *w)
{
    mm_tensor wt = mm_tensor_transpose(w, 0, 1);
    return mm_matmul(ctx, out, x, &wt, NULL);
}

int mm_dit_linear_i8(mm_ctx *ctx, mm_dit_workspace *ws, mm_tensor *out, const mm_tensor *x, const mm_dit_qlinear *lin,
                     int group)
{
    const int64_t rows = x->shape[0], k = x->shape[1];
    mm_tensor q = mm_tensor_wrap(ws->q8.data, ws->q8.device, MM_I8, 2, (int64_t[]){rows, k});
    mm_tensor s = mm_tensor_wrap(ws->s8.data, ws->s8.device, MM_F32, 1, (int64_t[]){rows});
    if (rows * k > mm_tensor_numel(&ws->q8) || rows > ws->s8.shape[0])
        return mm_ctx_fail(ctx, "dit: int8 scratch too small for [%lld, %lld]", (long long)rows, (long long)k);
    mm_convrot_quantize(ctx, &q, &s, x, group);
    return mm_gemm_i8_scaled(ctx, out, &q, &s, &lin->weight, &lin->scale, NULL);
}
