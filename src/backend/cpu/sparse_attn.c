/* Block-sparse attention on the CPU: the reference twins of the CUDA
 * routing and attention kernels (semantics in backend/sparse_attn.h).
 *
 * The block summaries (kc, vc, q̄) and the threshold statistics are fp32
 * sums taken in row (or block) order, the order the routing kernels use
 * too, so kc and vc agree with the GPU's bit for bit; the scores are fp32
 * dot products whose order differs, which moves a decision only where a
 * score ties its threshold (the tests allow 1e-3 there, spec §2.7).
 *
 * The attention works one (head, query block) at a time: one online-softmax
 * update over every unrouted block's centroid (Sol-Attn's approximation),
 * then the routed blocks in increasing order, 64 keys each — the spec's
 * pseudo-code (§2.3) with the groups of 32 blocks merged into one (the same
 * function; only the order of the fp32 sums differs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_sparse.h"
#include "backend/cpu/cpu_util.h"

#define BLK MM_SPARSE_BLOCK

typedef float v8 __attribute__((vector_size(32)));

static inline void axpy(float *o, float p, const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] += p * v[i];
}

static inline const void *row_at(const mm_tensor *t, int64_t row, int64_t head)
{
    return cpu_at(t->data, t->dtype, row * t->stride[0] + head * t->stride[1]);
}

static inline int64_t block_len(int64_t S, int64_t n) { return S - n * BLK < BLK ? S - n * BLK : BLK; }

static float softmax_scale(float scale, int64_t d) { return scale != 0.0f ? scale : 1.0f / sqrtf((float)d); }

/* ------------------------------------------------------------- summaries */

typedef struct pool_job {
    const mm_tensor *k, *v;
    mm_sparse_route *r;
    int64_t S, D;
} pool_job;

/* kc (mean) and vc (sum) of block n, kv head hk: one item per (n, hk). */
static void pool_items(void *user, int64_t begin, int64_t end)
{
    const pool_job *j = user;
    const int64_t D = j->D, Hkv = j->r->heads_kv;
    float *sk = malloc(sizeof(float) * (size_t)D * 3), *sv = sk + D, *row = sv + D;
    if (!sk)
        return;
    for (int64_t it = begin; it < end; it++) {
        const int64_t n = it / Hkv, hk = it % Hkv, len = block_len(j->S, n);
        memset(sk, 0, sizeof(float) * (size_t)D * 2);
        for (int64_t r = 0; r < len; r++) {
            cpu_load_f32(row, row_at(j->k, n * BLK + r, hk), j->k->dtype, D, 1);
            for (int64_t d = 0; d < D; d++)
                sk[d] += row[d];
            cpu_load_f32(row, row_at(j->v, n * BLK + r, hk), j->v->dtype, D, 1);
            for (int64_t d = 0; d < D; d++)
                sv[d] += row[d];
        }
        uint16_t *kc = (uint16_t *)j->r->kc.data + (n * Hkv + hk) * D;
        uint16_t *vc = (uint16_t *)j->r->vc.data + (n * Hkv + hk) * D;
        for (int64_t d = 0; d < D; d++) {
            kc[d] = cpu_f32_bf16(sk[d] / (float)len);
            vc[d] = cpu_f32_bf16(sv[d]);
        }
    }
    free(sk);
}

/* Means of the valid q rows of every block (or sub-block of `span` rows),
 * scaled by `mul`, optionally rounded through bf16: out [units, H, D]. */
static void pool_rows(const mm_tensor *x, int64_t S, int64_t span, float mul, bool bf16, float *out)
{
    const int64_t H = x->shape[1], D = x->shape[2], units = (S + span - 1) / span;
    float *row = malloc(sizeof(float) * (size_t)D);
    if (!row)
        return;
    for (int64_t u = 0; u < units; u++)
        for (int64_t h = 0; h < H; h++) {
            float *o = out + (u * H + h) * D;
            const int64_t len = S - u * span < span ? S - u * span : span;
            memset(o, 0, sizeof(float) * (size_t)D);
            for (int64_t r = 0; r < len; r++) {
                cpu_load_f32(row, row_at(x, u * span + r, h), x->dtype, D, 1);
                for (int64_t d = 0; d < D; d++)
                    o[d] += row[d];
            }
            for (int64_t d = 0; d < D; d++) {
                float m = o[d] / (float)len * mul;
                o[d] = bf16 ? cpu_bf16_f32(cpu_f32_bf16(m)) : m;
            }
        }
    free(row);
}

/* ---------------------------------------------------------------- routing */

/* The sizes of a call, which routing and attention both walk: S queries (and
 * keys), H query and Hkv key/value heads of D channels, NT blocks, W mask
 * words per row; s2 the softmax scale in base 2. */
typedef struct sparse_sizes {
    int64_t S, H, Hkv, D, NT, W;
    float s2;
} sparse_sizes;

static sparse_sizes sizes_of(const mm_tensor *q, const mm_tensor *k, const mm_sparse_route *route, float scale)
{
    sparse_sizes n = {.S = q->shape[0], .H = q->shape[1], .D = q->shape[2], .Hkv = k->shape[1]};
    n.NT = route->blocks;
    n.W = route->words;
    n.s2 = softmax_scale(scale, n.D) * 1.4426950408889634f;
    return n;
}

typedef struct route_job {
    const mm_sparse_route_params *p;
    mm_sparse_route *r;
    sparse_sizes n;
    const float *kcf;   /* [NT, Hkv, D] kc as floats */
    const float *qbar;  /* [NT, H, D] (SOL, FORCED unused) */
    const float *mu, *var; /* [Hkv, D] */
    const float *m2;    /* [Hkv, D, D] (exact threshold) */
    const float *qs, *ks; /* TOPK: [4·NT, H, D] scaled bf16 means, [4·NT, Hkv, D] */
    const uint8_t *sink, *dense; /* [NT] */
    uint32_t level;     /* FORCED */
    int64_t k_keep;     /* TOPK */
} route_job;

static float sol_threshold(const route_job *j, const float *qb, int64_t hk)
{
    const int64_t D = j->n.D;
    const float *mu = j->mu + hk * D, *var = j->var + hk * D;
    float m = 0, v = 0;
    for (int64_t d = 0; d < D; d++)
        m += qb[d] * mu[d];
    if (j->p->thresh == MM_SPARSE_THRESH_EXACT) {
        const float *m2 = j->m2 + hk * D * D;
        float quad = 0;
        for (int64_t a = 0; a < D; a++)
            quad += qb[a] * cpu_dot(m2 + a * D, qb, D);
        v = j->n.s2 * j->n.s2 * fmaxf(quad - m * m, 0.0f);
    } else {
        for (int64_t d = 0; d < D; d++)
            v += qb[d] * qb[d] * var[d];
        v *= j->n.s2 * j->n.s2;
    }
    return j->n.s2 * m + j->p->tau * sqrtf(fmaxf(v, 0.0f) + 1e-6f);
}

/* SubBlock's score of (query block i, key block n): log2 Σ exp2(Qs·Ks)
 * over the sub-block pairs that hold rows. */
static float topk_score(const route_job *j, int64_t i, int64_t h, int64_t hk, int64_t n)
{
    const int64_t D = j->n.D, sub = BLK / MM_SPARSE_SUB, units = (j->n.S + MM_SPARSE_SUB - 1) / MM_SPARSE_SUB;
    float x[BLK / MM_SPARSE_SUB * (BLK / MM_SPARSE_SUB)], mx = -INFINITY;
    int c = 0;
    for (int64_t a = 0; a < sub && i * sub + a < units; a++)
        for (int64_t b = 0; b < sub && n * sub + b < units; b++) {
            x[c] = cpu_dot(j->qs + ((i * sub + a) * j->n.H + h) * D, j->ks + ((n * sub + b) * j->n.Hkv + hk) * D, D);
            mx = fmaxf(mx, x[c++]);
        }
    float s = 0;
    for (int e = 0; e < c; e++)
        s += exp2f(x[e] - mx);
    return mx + log2f(s);
}

typedef struct scored {
    float s;
    int32_t n;
} scored;

static int by_score(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    return x->n < y->n ? -1 : x->n > y->n;
}

static void route_items(void *user, int64_t begin, int64_t end)
{
    const route_job *j = user;
    const int64_t NT = j->n.NT, W = j->n.W, D = j->n.D, H = j->n.H;
    scored *sc = j->p->policy == MM_SPARSE_TOPK ? malloc(sizeof(scored) * (size_t)NT) : NULL;
    for (int64_t it = begin; it < end; it++) {
        const int64_t i = it / H, h = it % H, hk = h / (H / j->n.Hkv);
        uint32_t *mask = (uint32_t *)j->r->mask.data + it * W;
        float *thr = (float *)j->r->thr.data + it;
        memset(mask, 0, sizeof(uint32_t) * (size_t)W);
        const bool all = j->dense[i];
        float t = 0;
        if (!all && j->p->policy == MM_SPARSE_SOL) {
            const float *qb = j->qbar + it * D;
            t = sol_threshold(j, qb, hk);
            for (int64_t n = 0; n < NT; n++)
                if (j->n.s2 * cpu_dot(qb, j->kcf + (n * j->n.Hkv + hk) * D, D) > t)
                    mask[n >> 5] |= 1u << (n & 31);
        } else if (!all && j->p->policy == MM_SPARSE_TOPK && sc) {
            for (int64_t n = 0; n < NT; n++)
                sc[n] = (scored){topk_score(j, i, h, hk, n), (int32_t)n};
            qsort(sc, (size_t)NT, sizeof *sc, by_score);
            for (int64_t e = 0; e < j->k_keep; e++)
                mask[sc[e].n >> 5] |= 1u << (sc[e].n & 31);
            t = sc[j->k_keep - 1].s;
        } else if (!all && j->p->policy == MM_SPARSE_FORCED) {
            for (int64_t n = 0; n < NT; n++)
                if (mm_sparse_forced_hash(j->p->seed, h, i, n) < j->level)
                    mask[n >> 5] |= 1u << (n & 31);
        }
        int32_t count = 0;
        for (int64_t n = 0; n < NT; n++) {
            const int64_t dist = n > i ? n - i : i - n;
            if (all || j->sink[n] || (j->p->band >= 0 && dist <= j->p->band))
                mask[n >> 5] |= 1u << (n & 31);
            count += (mask[n >> 5] >> (n & 31)) & 1u;
        }
        ((int32_t *)j->r->count.data)[it] = count;
        *thr = t;
    }
    free(sc);
}

/* μ, σ² (and M2) of kc over the blocks, per kv head: fp32 sums in block order. */
static void kc_stats(route_job *j, float *kcf, float *mu, float *var, float *m2)
{
    const int64_t NT = j->n.NT, Hkv = j->n.Hkv, D = j->n.D;
    const uint16_t *kc = j->r->kc.data;
    for (int64_t e = 0; e < NT * Hkv * D; e++)
        kcf[e] = cpu_bf16_f32(kc[e]);
    for (int64_t hk = 0; hk < Hkv; hk++)
        for (int64_t d = 0; d < D; d++) {
            float s = 0, s2 = 0;
            for (int64_t n = 0; n < NT; n++) {
                const float x = kcf[(n * Hkv + hk) * D + d];
                s += x;
                s2 += x * x;
            }
            const float m = s / (float)NT;
            mu[hk * D + d] = m;
            var[hk * D + d] = fmaxf(s2 / (float)NT - m * m, 0.0f);
        }
    if (!m2)
        return;
    for (int64_t hk = 0; hk < Hkv; hk++)
        for (int64_t a = 0; a < D; a++)
            for (int64_t b = 0; b < D; b++) {
                float s = 0;
                for (int64_t n = 0; n < NT; n++)
                    s += kcf[(n * Hkv + hk) * D + a] * kcf[(n * Hkv + hk) * D + b];
                m2[(hk * D + a) * D + b] = s / (float)NT;
            }
}

int mm_cpu_sparse_route_blocks(mm_ctx *ctx, mm_sparse_route *route, const mm_tensor *q, const mm_tensor *k,
                        const mm_tensor *v, const mm_sparse_route_params *p, mm_tensor *tally)
{
    route_job j = {.p = p, .r = route, .n = sizes_of(q, k, route, p->scale)};
    pool_job pj = {k, v, route, j.n.S, j.n.D};
    mm_parallel_for(ctx, j.n.NT * j.n.Hkv, 4, pool_items, &pj);

    const bool exact_thr = p->policy == MM_SPARSE_SOL && p->thresh == MM_SPARSE_THRESH_EXACT;
    const size_t nkc = (size_t)(j.n.NT * j.n.Hkv * j.n.D), hd = (size_t)(j.n.Hkv * j.n.D);
    float *kcf = malloc(sizeof(float) * nkc), *mu = malloc(sizeof(float) * hd), *var = malloc(sizeof(float) * hd);
    float *m2 = exact_thr ? malloc(sizeof(float) * hd * (size_t)j.n.D) : NULL;
    float *qbar = NULL, *qs = NULL, *ks = NULL;
    uint8_t *flags = malloc((size_t)j.n.NT * 2);
    if (p->policy == MM_SPARSE_SOL)
        qbar = malloc(sizeof(float) * (size_t)(j.n.NT * j.n.H * j.n.D));
    const int64_t units = (j.n.S + MM_SPARSE_SUB - 1) / MM_SPARSE_SUB;
    if (p->policy == MM_SPARSE_TOPK) {
        qs = malloc(sizeof(float) * (size_t)(units * j.n.H * j.n.D));
        ks = malloc(sizeof(float) * (size_t)(units * j.n.Hkv * j.n.D));
    }
    int rc = -1;
    if (!kcf || !mu || !var || !flags || (exact_thr && !m2) || (p->policy == MM_SPARSE_SOL && !qbar) ||
        (p->policy == MM_SPARSE_TOPK && (!qs || !ks))) {
        mm_ctx_fail(ctx, "mm_sparse_route: out of memory");
        goto done;
    }
    kc_stats(&j, kcf, mu, var, m2);
    if (qbar)
        pool_rows(q, j.n.S, BLK, 1.0f, false, qbar);
    if (qs) {
        pool_rows(q, j.n.S, MM_SPARSE_SUB, j.n.s2, true, qs);
        pool_rows(k, j.n.S, MM_SPARSE_SUB, 1.0f, true, ks);
    }
    mm_sparse_block_flags(p->sink_kv, p->n_sink_kv, j.n.NT, flags);
    mm_sparse_block_flags(p->dense_q, p->n_dense_q, j.n.NT, flags + j.n.NT);
    j.kcf = kcf;
    j.mu = mu;
    j.var = var;
    j.m2 = m2;
    j.qbar = qbar;
    j.qs = qs;
    j.ks = ks;
    j.sink = flags;
    j.dense = flags + j.n.NT;
    j.level = mm_sparse_forced_level(p->keep);
    j.k_keep = mm_sparse_topk_budget(p->keep, j.n.NT);
    mm_parallel_for(ctx, j.n.NT * j.n.H, 1, route_items, &j);
    if (tally && tally->data) {
        int64_t total = 0;
        for (int64_t e = 0; e < j.n.NT * j.n.H; e++)
            total += ((const int32_t *)route->count.data)[e];
        *(int64_t *)tally->data += total;
    }
    rc = 0;
done:
    free(kcf);
    free(mu);
    free(var);
    free(m2);
    free(qbar);
    free(qs);
    free(ks);
    free(flags);
    return rc;
}

/* -------------------------------------------------------------- attention */

typedef struct attn_job {
    mm_tensor *out;
    const mm_tensor *q, *k, *v;
    const mm_sparse_route *r;
    bool approximate;
    sparse_sizes n;
} attn_job;

typedef struct attn_buf {
    float *q, *kb, *vb, *o, *sc; /* q [64, D], key/value block [64, D], o [64, D], scores [64, max(NT, 64)] */
} attn_buf;

/* One online-softmax update of the rows [0, nq) with the scores sc[r][0..nk)
 * (log2 units, −inf = nothing) of values vals[c] weighted wt[c] in the sum. */
static void online_update(float *m, float *l, float *o, const float *sc, int64_t ldsc, int64_t nq, int64_t nk,
                          const float *vals, const float *wt, int64_t D)
{
    for (int64_t r = 0; r < nq; r++) {
        const float *s = sc + r * ldsc;
        float mx = m[r];
        for (int64_t c = 0; c < nk; c++)
            mx = s[c] > mx ? s[c] : mx;
        if (mx == -INFINITY)
            continue; /* nothing yet and nothing here */
        const float corr = exp2f(m[r] - mx); /* 0 on the first contribution */
        float *orow = o + r * D, sum = 0;
        if (corr != 1.0f)
            for (int64_t d = 0; d < D; d++)
                orow[d] *= corr;
        for (int64_t c = 0; c < nk; c++) {
            if (s[c] == -INFINITY)
                continue;
            const float pr = exp2f(s[c] - mx);
            sum += wt ? pr * wt[c] : pr;
            axpy(orow, pr, vals + c * D, D);
        }
        l[r] = l[r] * corr + sum;
        m[r] = mx;
    }
}

static bool exact_bit(const uint32_t *mask, int64_t n) { return (mask[n >> 5] >> (n & 31)) & 1u; }

/* Sol-Attn's approximation: every unrouted block through its centroid, in one update. */
static void approximate_part(const attn_job *j, attn_buf *b, const uint32_t *mask, int64_t hk, int64_t nq, float *m,
                             float *l, float *vcf, float *wt)
{
    const int64_t NT = j->n.NT, D = j->n.D;
    const uint16_t *kc = j->r->kc.data, *vc = j->r->vc.data;
    float *kcr = b->kb;
    for (int64_t n = 0; n < NT; n++) {
        const bool skip = exact_bit(mask, n);
        wt[n] = (float)block_len(j->n.S, n);
        for (int64_t d = 0; d < D; d++)
            vcf[n * D + d] = skip ? 0.0f : cpu_bf16_f32(vc[(n * j->n.Hkv + hk) * D + d]);
        for (int64_t d = 0; d < D; d++)
            kcr[d] = cpu_bf16_f32(kc[(n * j->n.Hkv + hk) * D + d]);
        for (int64_t r = 0; r < nq; r++)
            b->sc[r * NT + n] = skip ? -INFINITY : j->n.s2 * cpu_dot(b->q + r * D, kcr, D);
    }
    online_update(m, l, b->o, b->sc, NT, nq, NT, vcf, wt, D);
}

static void attn_items(void *user, int64_t begin, int64_t end)
{
    const attn_job *j = user;
    const int64_t D = j->n.D, NT = j->n.NT, H = j->n.H;
    const int64_t ldsc = NT > BLK ? NT : BLK;
    attn_buf b;
    b.q = malloc(sizeof(float) * (size_t)(BLK * D * 4));
    b.sc = malloc(sizeof(float) * (size_t)(BLK * ldsc));
    float *vcf = malloc(sizeof(float) * (size_t)(NT * D + NT));
    float m[BLK], l[BLK];
    if (!b.q || !b.sc || !vcf)
        goto out;
    b.kb = b.q + BLK * D;
    b.vb = b.kb + BLK * D;
    b.o = b.vb + BLK * D;
    for (int64_t it = begin; it < end; it++) {
        const int64_t i = it / H, h = it % H, hk = h / (H / j->n.Hkv), nq = block_len(j->n.S, i);
        const uint32_t *mask = (const uint32_t *)j->r->mask.data + it * j->n.W;
        const int32_t count = ((const int32_t *)j->r->count.data)[it];
        for (int64_t r = 0; r < nq; r++) {
            cpu_load_f32(b.q + r * D, row_at(j->q, i * BLK + r, h), j->q->dtype, D, 1);
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        memset(b.o, 0, sizeof(float) * (size_t)(BLK * D));
        if (j->approximate && count < NT)
            approximate_part(j, &b, mask, hk, nq, m, l, vcf, vcf + NT * D);
        for (int64_t n = 0; n < NT; n++) {
            if (!exact_bit(mask, n))
                continue;
            const int64_t nk = block_len(j->n.S, n);
            for (int64_t c = 0; c < nk; c++) {
                cpu_load_f32(b.kb + c * D, row_at(j->k, n * BLK + c, hk), j->k->dtype, D, 1);
                cpu_load_f32(b.vb + c * D, row_at(j->v, n * BLK + c, hk), j->v->dtype, D, 1);
            }
            for (int64_t r = 0; r < nq; r++)
                for (int64_t c = 0; c < nk; c++)
                    b.sc[r * BLK + c] = j->n.s2 * cpu_dot(b.q + r * D, b.kb + c * D, D);
            online_update(m, l, b.o, b.sc, BLK, nq, nk, b.vb, NULL, D);
        }
        for (int64_t r = 0; r < nq; r++) {
            const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            float *orow = b.o + r * D;
            for (int64_t d = 0; d < D; d++)
                orow[d] *= inv;
            const mm_tensor *o = j->out;
            cpu_store_f32(cpu_at(o->data, o->dtype, (i * BLK + r) * o->stride[0] + h * o->stride[1]), o->dtype, 1,
                          orow, D);
        }
    }
out:
    free(b.q);
    free(b.sc);
    free(vcf);
}

int mm_cpu_sparse_attention(mm_ctx *ctx, mm_tensor *out, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                            const mm_sparse_route *route, const mm_sparse_attn_params *p)
{
    attn_job j = {.out = out, .q = q, .k = k, .v = v, .r = route, .approximate = p->approximate,
                  .n = sizes_of(q, k, route, p->scale)};
    mm_parallel_for(ctx, j.n.NT * j.n.H, 1, attn_items, &j);
    return 0;
}
