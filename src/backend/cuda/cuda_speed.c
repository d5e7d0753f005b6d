/* mm_tensor face of the DiT's Hopper kernels and the policy that picks them
 * (cuda_speed.h over kernels/mmk_fa3.h and kernels/mmk_qgemm.h). Built only
 * with the CUDA backend (cuda_speed_stub.c otherwise). */
#include "config.h"

#ifdef MMH3_HAVE_CUDA
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_speed.h"
#include "backend/kernel_policy.h"
#include "kernels/mmk_fa3.h"
#include "kernels/mmk_qgemm.h"

static bool head_view(const mm_tensor *t, mm_device dev, int64_t rows)
{
    return t->dtype == MM_BF16 && t->ndim == 3 && mm_device_eq(t->device, dev) && t->shape[0] == rows &&
           t->shape[2] == 128 && t->stride[2] == 1 && (t->shape[1] == 1 || t->stride[1] == 128) &&
           t->stride[0] % 8 == 0 && ((uintptr_t)t->data & 15) == 0;
}

bool mm_fa3_fits(mm_ctx *ctx, const mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    mm_device dev = mm_ctx_device(ctx);
    if (dev.kind != MM_DEVICE_CUDA || !mmk_fa3_usable(dev.index))
        return false;
    /* no keys cannot go to the kernel: its seq_kv = 0 means "as many as the queries" */
    int64_t S = q->shape[0], S_kv = k->shape[0];
    return head_view(q, dev, S) && head_view(k, dev, S_kv) && head_view(v, dev, S_kv) && head_view(out, dev, S) &&
           out->shape[1] == q->shape[1] && v->shape[1] == k->shape[1] && k->shape[1] > 0 &&
           q->shape[1] % k->shape[1] == 0 && S <= INT32_MAX && S_kv >= 1 && S_kv <= INT32_MAX;
}

int mm_attention_fa3(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                     float scale, mm_fa3_mode mode)
{
    if (mm_ctx_failed(ctx))
        return -1;
    if (!mm_fa3_fits(ctx, out, q, k, v))
        return mm_ctx_fail(ctx, "attention (fa3): needs bf16 [S, H, 128] q/k/v/out views (heads 128 apart, rows a "
                           "multiple of 8 elements apart, 16-byte aligned) on an sm_90 GPU with sm_90a code");
    mmk_fa3 a;
    memset(&a, 0, sizeof a);
    a.seq = (int)q->shape[0];
    a.seq_kv = (int)k->shape[0];
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
    a.mode = (int)mode;
    mm_error e = {{0}};
    if (mmk_fa3_run(mm_ctx_device(ctx).index, (mmk_stream)mm_ctx_stream(ctx), &a, &e) != 0)
        return mm_ctx_fail(ctx, "%s", e.msg);
    return 0;
}
static bool aligned(const void *p, uintptr_t n) { return ((uintptr_t)p & (n - 1)) == 0; }

static bool i8_rows(const mm_tensor *t, mm_device dev)
{
    return t->dtype == MM_I8 && t->ndim == 2 && mm_device_eq(t->device, dev) && t->stride[1] == 1 &&
           t->stride[0] % 16 == 0 && t->shape[1] % 16 == 0 && aligned(t->data, 16);
}

static bool f32_vec(const mm_tensor *t, int64_t n)
{
    return t->dtype == MM_F32 && mm_tensor_numel(t) == n && mm_tensor_is_contiguous(t) && aligned(t->data, 8);
}

bool mm_qgemm_fits(mm_ctx *ctx, const mm_tensor *y, const mm_tensor *q_x, const mm_tensor *q_w)
{
    mm_device dev = mm_ctx_device(ctx);
    if (dev.kind != MM_DEVICE_CUDA || !mmk_qgemm_usable(dev.index))
        return false;
    return i8_rows(q_x, dev) && i8_rows(q_w, dev) && q_x->shape[1] == q_w->shape[1] && y->dtype == MM_BF16 &&
           y->ndim == 2 && mm_device_eq(y->device, dev) && y->shape[0] == q_x->shape[0] &&
           y->shape[1] == q_w->shape[0] && y->shape[1] % 8 == 0 && y->stride[1] == 1 && y->stride[0] % 2 == 0 &&
           aligned(y->data, 4) && q_x->shape[0] <= INT32_MAX && q_w->shape[0] <= INT32_MAX;
}

/* The checks and the arguments of one int8 GEMM with its epilogue (both
 * faces below run it); 0, or -1 with the failure recorded under `op`. */
static int qgemm_args(mm_ctx *ctx, const char *op, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x,
                      const mm_tensor *q_w, const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx,
                      mmk_qgemm *a)
{
    const int64_t R = q_x->shape[0], N = q_w->shape[0];
    if (!mm_qgemm_fits(ctx, y, q_x, q_w) || !f32_vec(s_x, R) || !f32_vec(s_w, N))
        return mm_ctx_fail(ctx, "%s: needs I8 q_x [R, K] and q_w [N, K] (16-byte aligned rows, K %% 16 == 0), "
                           "contiguous F32 s_x [R] and s_w [N], bf16 y [R, N] (N %% 8 == 0) on an sm_90 GPU", op);
    if (gate && (gate->dtype != MM_F32 || gate->ndim != 2 || gate->shape[1] != N || gate->stride[1] != 1 ||
                 gate->stride[0] % 2 || !aligned(gate->data, 8) || !idx || idx->dtype != MM_I32 ||
                 mm_tensor_numel(idx) != R || !mm_tensor_is_contiguous(idx)))
        return mm_ctx_fail(ctx, "%s: the gate must be an F32 [T, %lld] table (even row stride, 8-byte aligned) with "
                           "a contiguous I32 idx [%lld]", op, (long long)N, (long long)R);
    memset(a, 0, sizeof *a);
    a->M = (int)R;
    a->N = (int)N;
    a->K = (int)q_x->shape[1];
    a->xq = q_x->data;
    a->ldx = q_x->stride[0];
    a->sx = s_x->data;
    a->wq = q_w->data;
    a->ldw = q_w->stride[0];
    a->sw = s_w->data;
    a->y = y->data;
    a->ldy = y->stride[0];
    if (gate) {
        a->gate = gate->data;
        a->ld_gate = gate->stride[0];
        a->mod_idx = idx->data;
    }
    return 0;
}

static int qgemm_run(mm_ctx *ctx, const char *op, const mmk_qgemm *a)
{
    mm_error e = {{0}};
    if (mmk_qgemm_run(mm_ctx_device(ctx).index, (mmk_stream)mm_ctx_stream(ctx), a, &e) != 0)
        return mm_ctx_fail(ctx, "%s: %s", op, e.msg);
    return 0;
}

int mm_qgemm(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
             const mm_tensor *s_w, const mm_tensor *gate, const mm_tensor *idx)
{
    static const char *op = "int8 GEMM (sm90)";
    mmk_qgemm a;
    if (mm_ctx_failed(ctx) || qgemm_args(ctx, op, y, q_x, s_x, q_w, s_w, gate, idx, &a) != 0)
        return -1;
    return qgemm_run(ctx, op, &a);
}

bool mm_qgemm_lora_ready(mm_ctx *ctx)
{
    mm_device d = mm_ctx_device(ctx);
    return d.kind == MM_DEVICE_CUDA && mmk_qgemm_usable(d.index) && mmk_qgemm_verified(d.index, NULL) &&
           mmk_qgemm_lora_verified(d.index, NULL);
}

static bool bf16_rows16(const mm_tensor *t, mm_device dev)
{
    return t && t->dtype == MM_BF16 && t->ndim == 2 && t->stride[1] == 1 && t->stride[0] % 8 == 0 &&
           aligned(t->data, 16) && mm_device_eq(t->device, dev);
}

int mm_qgemm_lora(mm_ctx *ctx, mm_tensor *y, const mm_tensor *q_x, const mm_tensor *s_x, const mm_tensor *q_w,
                  const mm_tensor *s_w, const mm_tensor *gate32, const mm_tensor *idx, const mm_tensor *u,
                  const mm_tensor *b_all, const mm_tensor *mask)
{
    static const char *op = "mm_qgemm_lora";
    mmk_qgemm a;
    if (mm_ctx_failed(ctx) || qgemm_args(ctx, op, y, q_x, s_x, q_w, s_w, gate32, idx, &a) != 0)
        return -1;
    mm_device dev = mm_ctx_device(ctx);
    const int64_t R = q_x->shape[0], N = q_w->shape[0];
    if (!bf16_rows16(u, dev) || !bf16_rows16(b_all, dev) || u->shape[0] != R || b_all->shape[0] != N ||
        u->shape[1] != b_all->shape[1] || !mask || mask->dtype != MM_I64 || mask->ndim != 1 ||
        mask->shape[0] != (N + 255) / 256 || mask->stride[0] != 1 || !mm_device_eq(mask->device, dev))
        return mm_ctx_fail(ctx, "%s: u bf16 [%lld, Rk], b_all bf16 [%lld, Rk] (16-byte aligned rows) and an I64 mask "
                                "[%lld] on the context's device expected",
                           op, (long long)R, (long long)N, (long long)((N + 255) / 256));
    a.lora_u = u->data;
    a.ld_u = u->stride[0];
    a.lora_b = b_all->data;
    a.ld_b = b_all->stride[0];
    a.lora_r = (int)u->shape[1];
    a.lora_mask = mask->data;
    return qgemm_run(ctx, op, &a);
}

/* ------------------------------------------------------------------ policy */

/* Off CUDA the DiT runs the portable ops. */
static void portable_paths(mm_dit_kernel_paths *out, const char *why)
{
    snprintf(out->attention, sizeof out->attention, "mm_attention (%s)", why);
    snprintf(out->fast, sizeof out->fast, "as exact mode (%s)", why);
    snprintf(out->gemm, sizeof out->gemm, "mm_gemm_i8_scaled (%s)", why);
}

void mm_dit_kernel_paths_get(mm_device device, bool want_fast, mm_dit_kernel_paths *out)
{
    memset(out, 0, sizeof *out);
    if (device.kind != MM_DEVICE_CUDA) {
        portable_paths(out, "the portable ops off CUDA");
        return;
    }
    const int dev = device.index;
    const mm_kernel_policy *policy = mm_kernel_policy_get();
    const bool hopper = mmk_fa3_usable(dev) != 0;
    const char *exact_name = mmk_fa3_mode_name(MMK_FA3_EXACT), *fast_name = mmk_fa3_mode_name(MMK_FA3_FAST);
    double rel = 0;

    /* exact-mode attention */
    if (!hopper)
        snprintf(out->attention, sizeof out->attention, "mm_attention (%s; no sm_90a fa3 kernel for this GPU/build)",
                 mmk_attention_path(dev));
    else if (!policy->dit_fa3)
        snprintf(out->attention, sizeof out->attention, "mm_attention (%s; the kernel policy's portable attention)",
                 mmk_attention_path(dev));
    else if ((out->fa3 = mmk_fa3_verified(dev, MMK_FA3_EXACT, &rel) != 0)) {
        out->fa3_cross = mmk_fa3_cross_verified(dev, MMK_FA3_EXACT) != 0;
        snprintf(out->attention, sizeof out->attention, "%s (self-check vs the portable kernel: rel_l2 %.2g%s)",
                 exact_name, rel, out->fa3_cross ? "" : "; fewer queries than keys failed it: mm_attention there");
    }
    else
        snprintf(out->attention, sizeof out->attention, "mm_attention (%s; %s failed its self-check)",
                 mmk_attention_path(dev), exact_name);

    /* fast mode */
    if (!hopper || !policy->dit_fa3 || !policy->dit_fast)
        snprintf(out->fast, sizeof out->fast, "as exact mode (%s)",
                 !hopper             ? "no fast kernel"
                 : !policy->dit_fast ? "MMH3_DIT_FAST=off"
                                     : "the kernel policy's portable attention");
    else if (!want_fast)
        snprintf(out->fast, sizeof out->fast, "%s once its self-check passes (not run yet)", fast_name);
    else if ((out->fast_fa3 = mmk_fa3_verified(dev, MMK_FA3_FAST, &rel) != 0)) {
        out->fast_fa3_cross = mmk_fa3_cross_verified(dev, MMK_FA3_FAST) != 0;
        snprintf(out->fast, sizeof out->fast, "%s (self-check vs the portable kernel: rel_l2 %.2g%s)", fast_name,
                 rel, out->fast_fa3_cross ? "" : "; fewer queries than keys failed it: exact mode there");
    }
    else
        snprintf(out->fast, sizeof out->fast, "as exact mode (%s failed its self-check)", fast_name);

    /* int8 linears */
    long diff = 0;
    if (!mmk_qgemm_usable(dev))
        snprintf(out->gemm, sizeof out->gemm, "cuBLASLt + epilogue kernel (no sm_90a GEMM for this GPU/build)");
    else if (!policy->dit_qgemm)
        snprintf(out->gemm, sizeof out->gemm, "cuBLASLt + epilogue kernel (the kernel policy's portable int8 linears)");
    else if ((out->qgemm = mmk_qgemm_verified(dev, &diff) != 0))
        snprintf(out->gemm, sizeof out->gemm, "sm90 fused epilogue (self-check: bit for bit the cuBLASLt path)");
    else
        snprintf(out->gemm, sizeof out->gemm, "cuBLASLt + epilogue kernel (sm90 GEMM failed its self-check: %ld "
                 "outputs differ)", diff);
}

const char *mm_cuda_attention_path(int dev) { return mmk_attention_path(dev); }

void mm_dit_kernel_paths_describe(mm_device dev, char *out, size_t n)
{
    char name[32];
    mm_device_name(dev, name, sizeof name);
    mm_dit_kernel_paths p;
    mm_dit_kernel_paths_get(dev, true, &p);
    if (dev.kind != MM_DEVICE_CUDA)
        snprintf(out, n, "%s: DiT attention %s | int8 GEMM %s", name, p.attention, p.gemm);
    else
        snprintf(out, n, "%s mm_attention %s | DiT attention %s | fast mode %s | int8 GEMM %s", name,
                 mmk_attention_path(dev.index), p.attention, p.fast, p.gemm);
}
#else
typedef int mm_cuda_speed_unused; /* ISO C forbids an empty translation unit */
#endif
