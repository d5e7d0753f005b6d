/* mmh3-bench-sparse-curve: sparse attention's error against dense attention
 * as a function of the density it reaches, on structured synthetic q/k
 * (issue 26 item 5; tests/unit/sparse_ref.h: local, periodic, sink-heavy).
 * Random weights give attention maps with no structure, so this is where
 * the routing can be seen to work: the error must fall as density rises.
 *
 *   mmh3-bench-sparse-curve [--seq 4096] [--heads 4] [--kinds local,periodic,sink,random]
 *                           [--taus -1000,0,0.5,1,1.5,2,3] [--keeps 0.1,0.25,0.5] [--device cpu|cuda[:N]]
 *
 * For each kind: Sol-Attn at every τ (with the diagonal band, no sinks; the
 * sink kind also with its prefix as sink and dense queries), forced masks
 * and SubBlock top-k at every keep share. One line per point:
 *   CURVE kind=local policy=sol tau=1.00 density=0.150 rel_l2=0.0154 dropped_rel_l2=2.3 missed_mass=0.41
 * rel_l2 is against dense attention in double precision; dropped_rel_l2 the
 * same mask without Sol's centroid term (what the approximation buys);
 * missed_mass the dense softmax mass on the blocks not routed, averaged over
 * rows (how well the routing picks). docs/SPARSE.md records a run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "backend/sparse_attn.h"
#include "core/dtype.h"
#include "tests/unit/sparse_ref.h"

typedef struct curve_point {
    double density, rel_l2, dropped_rel_l2, missed;
} curve_point;

/* One routed point: route with rp, attend, compare with dense. */
static int run_point(mm_ctx *ctx, const sref_problem *p, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v,
                     const mm_sparse_route_params *rp, bool approximate, const double *dense, const double *blk,
                     curve_point *pt, mm_error *err)
{
    const int64_t S = p->S, H = p->H, D = p->D;
    mm_sparse_route r;
    if (mm_sparse_route_alloc(&r, mm_ctx_device(ctx), S, H, H, D, err) != 0)
        return -1;
    mm_tensor out = {0}, tally = {0};
    float *host = malloc(sizeof(float) * (size_t)(S * H * D));
    uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)(r.blocks * H * r.words));
    uint16_t *kc16 = malloc(sizeof(uint16_t) * (size_t)(r.blocks * H * D));
    float *kc = malloc(sizeof(float) * (size_t)(r.blocks * H * D));
    int64_t exact = 0;
    int rc = -1;
    if (!host || !mask || !kc || !kc16 ||
        mm_tensor_alloc(&out, mm_ctx_device(ctx), MM_BF16, 3, (int64_t[]){S, H, D}, err) != 0 ||
        mm_tensor_zeros(&tally, mm_ctx_device(ctx), MM_I64, 1, (int64_t[]){1}, err) != 0)
        goto done;
    mm_sparse_route_blocks(ctx, &r, q, k, v, rp, &tally);
    uint16_t *o16 = malloc(sizeof(uint16_t) * (size_t)(S * H * D));
    pt->dropped_rel_l2 = NAN;
    if (approximate) { /* the same mask without the centroid term */
        const mm_sparse_attn_params drop = {.approximate = false};
        mm_sparse_attention(ctx, &out, q, k, v, &r, &drop);
        mm_tensor hd = mm_tensor_wrap(o16, mm_cpu(), MM_BF16, 3, out.shape);
        mm_copy(ctx, &hd, &out);
        if (mm_ctx_sync(ctx, err) != 0) {
            free(o16);
            goto done;
        }
        for (int64_t e = 0; e < S * H * D; e++)
            host[e] = mm_bf16_to_f32(o16[e]);
        pt->dropped_rel_l2 = sref_compare(host, dense, S * H * D, 1, 1).rel_l2;
    }
    const mm_sparse_attn_params ap = {.approximate = approximate};
    mm_sparse_attention(ctx, &out, q, k, v, &r, &ap);
    mm_tensor ho = mm_tensor_wrap(o16, mm_cpu(), MM_BF16, 3, out.shape);
    mm_tensor hm = mm_tensor_wrap(mask, mm_cpu(), MM_I32, 3, r.mask.shape);
    mm_tensor hk = mm_tensor_wrap(kc16, mm_cpu(), MM_BF16, 3, r.kc.shape);
    mm_tensor ht = mm_tensor_wrap(&exact, mm_cpu(), MM_I64, 1, (int64_t[]){1});
    mm_copy(ctx, &ho, &out);
    mm_copy(ctx, &hm, &r.mask);
    mm_copy(ctx, &hk, &r.kc);
    mm_copy(ctx, &ht, &tally);
    if (mm_ctx_sync(ctx, err) != 0) {
        free(o16);
        goto done;
    }
    for (int64_t e = 0; e < S * H * D; e++)
        host[e] = mm_bf16_to_f32(o16[e]);
    for (int64_t e = 0; e < r.blocks * H * D; e++)
        kc[e] = mm_bf16_to_f32(kc16[e]);
    free(o16);
    const sref_err e = sref_compare(host, dense, S * H * D, 1, 1);
    pt->density = (double)exact / (double)(r.blocks * r.blocks * H);
    pt->rel_l2 = e.rel_l2;
    pt->missed = blk ? sref_missed_mass(p, mask, r.words, blk) : NAN;
    rc = 0;
done:
    mm_tensor_free(&out);
    mm_tensor_free(&tally);
    mm_sparse_route_free(&r);
    free(host);
    free(mask);
    free(kc);
    free(kc16);
    return rc;
}

static int parse_list(const char *s, double *out, int max)
{
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        out[n++] = strtod(p, &end);
        if (end == p)
            return -1;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

static const char *const kind_names[] = {"local", "periodic", "sink", "random"};

int main(int argc, char **argv)
{
    int64_t S = 4096, H = 4;
    const char *kinds = "local,periodic,sink,random", *device = "cpu";
    double taus[16] = {-1000, 0, 0.5, 1, 1.5, 2, 3}, keeps[16] = {0.1, 0.25, 0.5};
    int n_tau = 7, n_keep = 3, mass = 1;
    double strength = 0.5, noise = 0.2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--seq") == 0 && v)
            S = atoll(argv[++i]);
        else if (strcmp(a, "--heads") == 0 && v)
            H = atoll(argv[++i]);
        else if (strcmp(a, "--kinds") == 0 && v)
            kinds = argv[++i];
        else if (strcmp(a, "--device") == 0 && v)
            device = argv[++i];
        else if (strcmp(a, "--strength") == 0 && v)
            strength = atof(argv[++i]);
        else if (strcmp(a, "--noise") == 0 && v)
            noise = atof(argv[++i]);
        else if (strcmp(a, "--no-mass") == 0)
            mass = 0;
        else if (strcmp(a, "--taus") == 0 && v && (n_tau = parse_list(argv[++i], taus, 16)) > 0)
            continue;
        else if (strcmp(a, "--keeps") == 0 && v && (n_keep = parse_list(argv[++i], keeps, 16)) >= 0)
            continue;
        else {
            fprintf(stderr, "usage: mmh3-bench-sparse-curve [--seq N] [--heads H] [--kinds local,periodic,sink,random]\n"
                            "         [--taus LIST] [--keeps LIST] [--device cpu|cuda[:N]] [--strength X] [--noise X] [--no-mass]\n");
            return 2;
        }
    }
    mm_error err = {{0}};
    mm_device dev;
    mm_ctx *ctx = NULL;
    if (mm_device_parse(device, &dev, &err) != 0 || mm_ctx_create(&ctx, dev, 0, &err) != 0) {
        fprintf(stderr, "mmh3-bench-sparse-curve: %s\n", err.msg);
        return 1;
    }
    const int64_t D = 128, n = S * H * D;
    float *q = malloc(sizeof(float) * (size_t)n), *k = malloc(sizeof(float) * (size_t)n);
    float *v = malloc(sizeof(float) * (size_t)n);
    uint16_t *fused = malloc(sizeof(uint16_t) * (size_t)(3 * n));
    double *dense = malloc(sizeof(double) * (size_t)n);
    const int64_t NT = (S + 63) / 64;
    double *blk = mass ? malloc(sizeof(double) * (size_t)(S * H * NT)) : NULL;
    mm_tensor dev_fused = {0};
    if (!q || !k || !v || !fused || !dense ||
        mm_tensor_alloc(&dev_fused, dev, MM_BF16, 2, (int64_t[]){S, 3 * H * D}, &err) != 0) {
        fprintf(stderr, "mmh3-bench-sparse-curve: out of memory: %s\n", err.msg);
        return 1;
    }
    printf("sparse attention error vs dense: S=%lld H=%lld D=128, %s\n", (long long)S, (long long)H,
           mm_sparse_attention_kind(ctx, MM_SPARSE_EXACT));
    for (int kind = 0; kind < 4; kind++) {
        if (!strstr(kinds, kind_names[kind]))
            continue;
        if (kind == 3) { /* kit-like: unstructured random q/k (the DiT's inputs on random weights) */
            uint64_t s = 42;
            for (int64_t e = 0; e < n; e++) {
                q[e] = mm_bf16_to_f32(mm_f32_to_bf16((float)sref_gauss(&s)));
                k[e] = mm_bf16_to_f32(mm_f32_to_bf16((float)sref_gauss(&s)));
                v[e] = mm_bf16_to_f32(mm_f32_to_bf16((float)sref_gauss(&s)));
            }
        } else {
            sref_structured(kind, S, H, D, 512, 256, strength, noise, 1234 + (uint64_t)kind, q, k, v);
        }
        for (int64_t r = 0; r < S; r++)
            for (int64_t e = 0; e < H * D; e++) {
                fused[r * 3 * H * D + e] = mm_f32_to_bf16(q[r * H * D + e]);
                fused[r * 3 * H * D + H * D + e] = mm_f32_to_bf16(k[r * H * D + e]);
                fused[r * 3 * H * D + 2 * H * D + e] = mm_f32_to_bf16(v[r * H * D + e]);
            }
        mm_tensor hf = mm_tensor_wrap(fused, mm_cpu(), MM_BF16, 2, dev_fused.shape);
        mm_copy(ctx, &dev_fused, &hf);
        mm_tensor q2 = mm_tensor_narrow(&dev_fused, 1, 0, H * D), k2 = mm_tensor_narrow(&dev_fused, 1, H * D, H * D);
        mm_tensor v2 = mm_tensor_narrow(&dev_fused, 1, 2 * H * D, H * D);
        const int64_t hd[2] = {H, D};
        mm_tensor tq = mm_tensor_unflatten(&q2, 1, 2, hd), tk = mm_tensor_unflatten(&k2, 1, 2, hd);
        mm_tensor tv = mm_tensor_unflatten(&v2, 1, 2, hd);
        sref_problem p = {S, H, H, D, q, k, v, 0};
        sref_dense(&p, dense);
        if (blk)
            sref_block_masses(&p, blk);
        const mm_row_range sink[] = {{0, 256}};
        for (int pass = 0; pass < (kind == 2 ? 2 : 1); pass++)
            for (int t = 0; t < n_tau; t++) {
                mm_sparse_route_params rp = {.policy = MM_SPARSE_SOL, .tau = (float)taus[t], .keep = 1, .band = 1};
                if (pass == 1) {
                    rp.sink_kv = rp.dense_q = sink;
                    rp.n_sink_kv = rp.n_dense_q = 1;
                }
                curve_point pt;
                if (run_point(ctx, &p, &tq, &tk, &tv, &rp, true, dense, blk, &pt, &err) != 0)
                    goto fail;
                printf("CURVE kind=%s policy=sol%s tau=%.2f density=%.4f rel_l2=%.5f dropped_rel_l2=%.4f "
                       "missed_mass=%.4f\n", kind_names[kind], pass ? "+sink" : "", taus[t], pt.density, pt.rel_l2,
                       pt.dropped_rel_l2, pt.missed);
                fflush(stdout);
            }
        for (int e = 0; e < n_keep; e++)
            for (int pol = 0; pol < 2; pol++) {
                mm_sparse_route_params rp = {.policy = pol ? MM_SPARSE_TOPK : MM_SPARSE_FORCED,
                                             .keep = (float)keeps[e], .band = pol ? -1 : 1, .seed = 5};
                curve_point pt;
                if (run_point(ctx, &p, &tq, &tk, &tv, &rp, pol == 0, dense, blk, &pt, &err) != 0)
                    goto fail;
                printf("CURVE kind=%s policy=%s keep=%.2f density=%.4f rel_l2=%.5f dropped_rel_l2=%.4f "
                       "missed_mass=%.4f\n", kind_names[kind], pol ? "topk" : "forced", keeps[e], pt.density,
                       pt.rel_l2, pt.dropped_rel_l2, pt.missed);
                fflush(stdout);
            }
    }
    mm_tensor_free(&dev_fused);
    mm_ctx_destroy(ctx);
    free(q), free(k), free(v), free(fused), free(dense), free(blk);
    return 0;
fail:
    fprintf(stderr, "mmh3-bench-sparse-curve: %s\n", err.msg);
    return 1;
}
