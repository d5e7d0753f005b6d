/* mm_tensor face of the Hopper attention (cuda_speed.h over kernels/mmk_fa3.h).
 * Built only with the CUDA backend (cuda_speed_stub.c otherwise). */
#include "config.h"

#ifdef MMH3_HAVE_CUDA
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_speed.h"
#include "kernels/mmk_fa3.h"

static bool head_view(const mm_tensor *t, mm_device dev, int64_t rows)
{
    return t->dtype == MM_BF16 && t->ndim == 3 && mm_device_eq(t->device, dev) && t->shape[0] == rows &&
           t->shape[2] == 128 && t->stride[2] == 1 && (t->shape[1] == 1 || t->stride[1] == 128) &&
           t->stride[0] % 8 == 0 && ((uintptr_t)t->data & 15) == 0;
}

bool mm_cuda_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    mm_device dev = mm_ctx_device(ctx);
    if (dev.kind != MM_DEVICE_CUDA || !mmk_fa3_usable(dev.index))
        return false;
    int64_t S = q->shape[0];
    return head_view(q, dev, S) && head_view(k, dev, S) && head_view(v, dev, S) && head_view(out, dev, S) &&
           out->shape[1] == q->shape[1] && v->shape[1] == k->shape[1] && k->shape[1] > 0 &&
           q->shape[1] % k->shape[1] == 0 && S <= INT32_MAX;
}

int mm_cuda_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                          float scale, bool fp8)
{
    if (mm_ctx_failed(ctx))
        return -1;
    if (!mm_cuda_fa3_fits(ctx, out, q, k, v))
        return mm_ctx_fail(ctx, "attention (fa3): needs bf16 [S, H, 128] q/k/v/out views (heads 128 apart, rows a "
                           "multiple of 8 elements apart, 16-byte aligned) on an sm_90 GPU with sm_90a code");
    mmk_fa3 a;
    memset(&a, 0, sizeof a);
    a.seq = (int)q->shape[0];
    a.heads = (int)q->shape[1];
    a.heads_kv = (int)k->shape[1];
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.ldq = q->stride[0];
    a.ldk = k->stride[0];
    a.ldv = v->stride[0];
    a.o = out->data;
    a.ldo = out->stride[0];
    a.scale = scale > 0.f ? scale : 1.f / sqrtf(128.f);
    a.fp8 = fp8;
    const char *pp = getenv("MMH3_FA3_PINGPONG");
    a.pingpong = pp ? atoi(pp) != 0 : -1;
    mm_error e = {{0}};
    if (mmk_fa3_run(mm_ctx_device(ctx).index, (mmk_stream)mm_ctx_stream(ctx), &a, &e) != 0)
        return mm_ctx_fail(ctx, "%s", e.msg);
    return 0;
}
#else
typedef int mm_cuda_speed_unused; /* ISO C forbids an empty translation unit */
#endif
