/* Attention forward, flash-style: o = softmax(q·kᵀ·scale)·v without the score
 * matrix, bf16 in/out, fp32 scores, statistics and accumulators.
 *
 * Portable path (sm_80+, mma.sync), FlashAttention-2 in structure: a block of
 * 4 warps owns 64 query rows of one head (16 rows per warp, Q fragments held
 * in registers); it walks the keys in tiles of 64, double-buffering K and V
 * in shared memory with cp.async, and keeps a running max and sum per row
 * (online softmax, base-2 exponentials with scale·log2 e folded in). P goes
 * from the score accumulators straight into the A fragments of the P·V MMA.
 * Shared-memory rows are padded by 16 bytes so ldmatrix reads are free of
 * bank conflicts for every head size. Head sizes are padded to a multiple of
 * 16 in shared memory (72 → 80) with zeros, which leave q·k and p·v unchanged.
 *
 * CPU twin: src/backend/cpu/ (exact softmax in fp32/double).
 */
#include <float.h>

#include "kernels/common.cuh"
#include "kernels/mma.cuh"

namespace {

struct AttnParams {
    const bf16 *q, *k, *v;
    bf16 *o;
    int64_t ldq, ldk, ldv, ldo;
    int64_t hsq, hsk, hsv, hso;
    int seq_q, seq_k, heads_q, heads_kv, D;
    float scale_log2;
    int causal;
    const int32_t *cu_q, *cu_k;
};

const int kWarps = 4, kBM = 64, kBN = 64;

template <int DP> struct Tile {
    static const int kStride = DP + 8; /* elements per padded smem row */
    static const int kChunks = DP / 8; /* 16-byte chunks per row */
    static const int kSmemElems = kBM * kStride + 4 * kBN * kStride;
};

/* Copies rows [0, rows) of a row-major [*, D] matrix into a padded smem tile
 * of kRows rows; missing rows and the columns past D are zero-filled. */
template <int DP, int kRows>
__device__ __forceinline__ void load_tile(bf16 *s, const bf16 *g, int64_t ld, int rows, int D)
{
    const int CH = Tile<DP>::kChunks;
    for (int i = threadIdx.x; i < kRows * CH; i += kWarps * 32) {
        int r = i / CH, c = i % CH;
        bool ok = r < rows && c * 8 < D;
        const bf16 *src = ok ? g + (int64_t)r * ld + c * 8 : g;
        mmk_cp_async16(s + r * Tile<DP>::kStride + c * 8, src, ok ? 16 : 0);
    }
}

template <int DP>
__global__ void __launch_bounds__(kWarps * 32) k_attn_fwd_sm80(AttnParams p)
{
    const int S = Tile<DP>::kStride;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sK = sQ + kBM * S;      /* two buffers */
    bf16 *sV = sK + 2 * kBN * S;  /* two buffers */

    int mb = blockIdx.x, h = blockIdx.y, z = blockIdx.z;
    int q0 = 0, k0 = 0, Lq = p.seq_q, Lk = p.seq_k;
    if (p.cu_q) {
        q0 = p.cu_q[z];
        Lq = p.cu_q[z + 1] - q0;
        k0 = p.cu_k[z];
        Lk = p.cu_k[z + 1] - k0;
    }
    if (mb * kBM >= Lq)
        return;
    int hk = h / (p.heads_q / p.heads_kv);
    const bf16 *Q = p.q + (int64_t)(q0 + mb * kBM) * p.ldq + (int64_t)h * p.hsq;
    const bf16 *K = p.k + (int64_t)k0 * p.ldk + (int64_t)hk * p.hsk;
    const bf16 *V = p.v + (int64_t)k0 * p.ldv + (int64_t)hk * p.hsv;
    int rows_q = Lq - mb * kBM < kBM ? Lq - mb * kBM : kBM;

    /* Keys this block needs: all, or up to the diagonal of its last row. */
    int n_kb = (Lk + kBN - 1) / kBN;
    int diag = Lk - Lq; /* query i sees keys j <= i + diag */
    if (p.causal) {
        int last_key = mb * kBM + rows_q - 1 + diag;
        int need = last_key < 0 ? 0 : last_key / kBN + 1;
        n_kb = need < n_kb ? need : n_kb;
    }

    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3;

    load_tile<DP, kBM>(sQ, Q, p.ldq, rows_q, p.D);
    if (n_kb > 0) {
        load_tile<DP, kBN>(sK, K, p.ldk, Lk < kBN ? Lk : kBN, p.D);
        load_tile<DP, kBN>(sV, V, p.ldv, Lk < kBN ? Lk : kBN, p.D);
    }
    mmk_cp_async_commit();

    float o[DP / 8][4];
#pragma unroll
    for (int i = 0; i < DP / 8; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    uint32_t qf[DP / 16][4];
    int row_i[2] = {mb * kBM + warp * 16 + g, mb * kBM + warp * 16 + g + 8};

    for (int kb = 0; kb < n_kb; kb++) {
        int buf = kb & 1;
        if (kb + 1 < n_kb) {
            int r0 = (kb + 1) * kBN, rows = Lk - r0 < kBN ? Lk - r0 : kBN;
            load_tile<DP, kBN>(sK + (buf ^ 1) * kBN * S, K + (int64_t)r0 * p.ldk, p.ldk, rows, p.D);
            load_tile<DP, kBN>(sV + (buf ^ 1) * kBN * S, V + (int64_t)r0 * p.ldv, p.ldv, rows, p.D);
            mmk_cp_async_commit();
            mmk_cp_async_wait<1>();
        } else {
            mmk_cp_async_wait<0>();
        }
        __syncthreads();
        if (kb == 0) {
#pragma unroll
            for (int ks = 0; ks < DP / 16; ks++)
                mmk_ldmatrix_x4(qf[ks], sQ + (warp * 16 + (lane & 15)) * S + ks * 16 + (lane >> 4) * 8);
        }
        const bf16 *cK = sK + buf * kBN * S, *cV = sV + buf * kBN * S;

        /* S = Q·Kᵀ for this warp's 16 rows × 64 keys. */
        float sc[kBN / 8][4];
#pragma unroll
        for (int i = 0; i < kBN / 8; i++)
            sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < DP / 16; ks++) {
#pragma unroll
            for (int np = 0; np < kBN / 16; np++) {
                uint32_t b[4];
                mmk_ldmatrix_x4(b, cK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * S + ks * 16 + ((lane >> 3) & 1) * 8);
                mmk_mma_bf16(sc[2 * np], qf[ks], b);
                mmk_mma_bf16(sc[2 * np + 1], qf[ks], b + 2);
            }
        }

        /* Mask keys past the end and, when causal, past the diagonal. */
        int key0 = kb * kBN;
        bool edge = key0 + kBN > Lk || (p.causal && key0 + kBN - 1 > mb * kBM + diag);
        if (edge) {
#pragma unroll
            for (int nt = 0; nt < kBN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = key0 + nt * 8 + 2 * t + (e & 1);
                    int i = row_i[e >> 1];
                    if (j >= Lk || (p.causal && j > i + diag))
                        sc[nt][e] = -INFINITY;
                }
        }

        /* Online softmax over the two rows this thread holds. */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < kBN / 8; nt++)
                mx = fmaxf(mx, fmaxf(sc[nt][2 * r], sc[nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float m_new = fmaxf(row_max[r], mx * p.scale_log2);
            float m_use = m_new == -INFINITY ? 0.f : m_new;
            float corr = exp2f(row_max[r] - m_use);
            row_max[r] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < kBN / 8; nt++) {
                float p0 = exp2f(sc[nt][2 * r] * p.scale_log2 - m_use);
                float p1 = exp2f(sc[nt][2 * r + 1] * p.scale_log2 - m_use);
                sc[nt][2 * r] = p0;
                sc[nt][2 * r + 1] = p1;
                sum += p0 + p1;
            }
            row_sum[r] = row_sum[r] * corr + sum;
#pragma unroll
            for (int dt = 0; dt < DP / 8; dt++) {
                o[dt][2 * r] *= corr;
                o[dt][2 * r + 1] *= corr;
            }
        }

        /* O += P·V */
#pragma unroll
        for (int kk = 0; kk < kBN / 16; kk++) {
            uint32_t a[4];
            a[0] = mmk_pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
            a[1] = mmk_pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
            a[2] = mmk_pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
            a[3] = mmk_pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
            for (int dp = 0; dp < DP / 16; dp++) {
                uint32_t b[4];
                mmk_ldmatrix_x4_trans(b, cV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + dp * 16 +
                                             (lane >> 4) * 8);
                mmk_mma_bf16(o[2 * dp], a, b);
                mmk_mma_bf16(o[2 * dp + 1], a, b + 2);
            }
        }
        __syncthreads(); /* this buffer is refilled next iteration */
    }

    /* Normalize and write this thread's rows. */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float s = row_sum[r];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        float inv = s > 0.f ? 1.f / s : 0.f;
        int i = row_i[r];
        if (i >= Lq)
            continue;
        bf16 *orow = p.o + (int64_t)(q0 + i) * p.ldo + (int64_t)h * p.hso;
#pragma unroll
        for (int dt = 0; dt < DP / 8; dt++) {
            int c = dt * 8 + 2 * t;
            if (c < p.D)
                *reinterpret_cast<__nv_bfloat162 *>(orow + c) =
                    __floats2bfloat162_rn(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
        }
    }
}

template <int DP> int launch_sm80(const AttnParams &p, int max_q, int n_seqs, cudaStream_t s, mm_error *err)
{
    size_t smem = (size_t)Tile<DP>::kSmemElems * sizeof(bf16);
    MMK_TRY(cudaFuncSetAttribute(k_attn_fwd_sm80<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err,
            "raising the shared-memory limit of the attention kernel");
    dim3 grid((max_q + kBM - 1) / kBM, p.heads_q, n_seqs);
    k_attn_fwd_sm80<DP><<<grid, kWarps * 32, smem, s>>>(p);
    return mmk_launched(err, "k_attn_fwd_sm80");
}

bool al4(const void *p) { return ((uintptr_t)p & 15) == 0; }

} // namespace

extern "C" const char *mmk_attention_path(int dev)
{
    (void)dev;
    return "sm80-mma";
}

extern "C" int mmk_attention_run(int dev, mmk_stream s, const mmk_attention *a, mm_error *err)
{
    if (mmk_device_enter(dev, err))
        return -1;
    if (a->head_dim <= 0 || a->head_dim > 128 || a->head_dim % 8)
        return mm_fail(err, "attention: head_dim %d not supported (multiples of 8 up to 128)", a->head_dim);
    if (a->heads_q <= 0 || a->heads_kv <= 0 || a->heads_q % a->heads_kv)
        return mm_fail(err, "attention: %d query heads cannot share %d kv heads evenly", a->heads_q, a->heads_kv);
    int64_t hsq = a->hsq ? a->hsq : a->head_dim, hsk = a->hsk ? a->hsk : a->head_dim,
            hsv = a->hsv ? a->hsv : a->head_dim, hso = a->hso ? a->hso : a->head_dim;
    if (!al4(a->q) || !al4(a->k) || !al4(a->v) || a->ldq % 8 || a->ldk % 8 || a->ldv % 8 || hsq % 8 || hsk % 8 ||
        hsv % 8 || a->ldo % 2 || hso % 2 || ((uintptr_t)a->o & 3))
        return mm_fail(err, "attention: q, k, v must be 16-byte aligned with row and head strides multiple of 8 "
                            "elements (o: 4-byte aligned, even strides)");
    if ((a->cu_seqlens_q == nullptr) != (a->cu_seqlens_k == nullptr))
        return mm_fail(err, "attention: give both cu_seqlens_q and cu_seqlens_k or neither");
    int n_seqs = a->cu_seqlens_q ? a->n_seqs : 1;
    int max_q = a->cu_seqlens_q ? a->max_seq_q : a->seq_q;
    if (n_seqs <= 0 || max_q <= 0)
        return 0;
    AttnParams p;
    p.q = (const bf16 *)a->q;
    p.k = (const bf16 *)a->k;
    p.v = (const bf16 *)a->v;
    p.o = (bf16 *)a->o;
    p.ldq = a->ldq;
    p.ldk = a->ldk;
    p.ldv = a->ldv;
    p.ldo = a->ldo;
    p.hsq = hsq;
    p.hsk = hsk;
    p.hsv = hsv;
    p.hso = hso;
    p.seq_q = a->seq_q;
    p.seq_k = a->seq_k;
    p.heads_q = a->heads_q;
    p.heads_kv = a->heads_kv;
    p.D = a->head_dim;
    p.scale_log2 = a->scale * 1.4426950408889634f;
    p.causal = a->causal;
    p.cu_q = a->cu_seqlens_q;
    p.cu_k = a->cu_seqlens_k;
    if (a->head_dim <= 64)
        return launch_sm80<64>(p, max_q, n_seqs, s, err);
    if (a->head_dim <= 80)
        return launch_sm80<80>(p, max_q, n_seqs, s, err);
    return launch_sm80<128>(p, max_q, n_seqs, s, err);
}

static const mmk_kernel_entry g_kernels[] = {
    {"attn_fwd_sm80_d64", (const void *)k_attn_fwd_sm80<64>, 80},
    {"attn_fwd_sm80_d80", (const void *)k_attn_fwd_sm80<80>, 80},
    {"attn_fwd_sm80_d128", (const void *)k_attn_fwd_sm80<128>, 80},
};

extern "C" const mmk_kernel_entry *mmk_kernels_attention(int *n)
{
    *n = (int)(sizeof g_kernels / sizeof g_kernels[0]);
    return g_kernels;
}
