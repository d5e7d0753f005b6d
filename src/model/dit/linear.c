/* Linear layers of the DiT on the formats layer (src/formats/linear.h),
 * which recognises the stored format (dense bf16/f32, int8 ConvRot) and does
 * its arithmetic. One exception to calling mm_linear_forward directly: for
 * ConvRot layers it allocates the int8 codes and row scales per call, and the
 * 200 quantized layers of a forward should allocate nothing, so the same two
 * ops run here on the request's scratch (identical arithmetic: rotate, round
 * to the activation dtype, per-row int8, int32 GEMM, f32 epilogue). */
#include "model/dit/model.h"

int mm_dit_linear(mm_ctx *ctx, mm_dit_workspace *ws, mm_tensor *out, const mm_tensor *x, const mm_linear *lin)
{
    if (lin->format != MM_WEIGHT_CONVROT_I8)
        return mm_linear_forward(ctx, out, x, lin);
    const int64_t rows = x->shape[0], k = x->shape[1];
    if (rows * k > mm_tensor_numel(&ws->q8) || rows > ws->s8.shape[0])
        return mm_ctx_fail(ctx, "dit: int8 scratch too small for [%lld, %lld]", (long long)rows, (long long)k);
    mm_tensor q = mm_tensor_wrap(ws->q8.data, ws->q8.device, MM_I8, 2, (int64_t[]){rows, k});
    mm_tensor s = mm_tensor_wrap(ws->s8.data, ws->s8.device, MM_F32, 1, (int64_t[]){rows});
    mm_convrot_quantize(ctx, &q, &s, x, lin->group);
    return mm_gemm_i8_scaled(ctx, out, &q, &s, &lin->weight, &lin->weight_scale,
                             lin->bias.data ? &lin->bias : NULL);
}

int mm_dit_linear_lora(mm_dit_request *r, mm_tensor *out, const mm_tensor *x, const mm_linear *lin,
                       const mm_dit_lora_list *l)
{
    mm_ctx *ctx = r->ctx;
    if (!l || l->n == 0)
        return mm_dit_linear(ctx, &r->ws, out, x, lin);
    const int64_t rows = x->shape[0], n = lin->out_features;
    if (rows * n > mm_tensor_numel(&r->lora_acc))
        return mm_ctx_fail(ctx, "dit: LoRA accumulator too small for [%lld, %lld]", (long long)rows, (long long)n);
    mm_tensor acc = mm_tensor_wrap(r->lora_acc.data, r->lora_acc.device, MM_F32, 2, MM_SHAPE(rows, n));
    mm_dit_linear(ctx, &r->ws, &acc, x, lin); /* the base result, in f32: not rounded yet */
    mm_dit_lora_accumulate(r, &acc, x, l);
    return mm_copy(ctx, out, &acc);
}
