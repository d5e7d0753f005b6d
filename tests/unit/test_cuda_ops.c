/* Every op of backend/ops.h on the GPU against its CPU twin, through the op
 * API itself: the same random inputs (uploaded with mm_copy), the same call
 * on a CPU and a CUDA context, the outputs compared. GPU outputs are
 * poisoned first (NaN for floats), so an element a kernel forgets fails.
 *
 * Tolerances, per case:
 *   EXACT  bit-identical values (ops whose f32 arithmetic is the same
 *          sequence of roundings on both sides: conversions, elementwise
 *          arithmetic, modulation, RoPE, the Hadamard rotation and ConvRot
 *          quantization, the int8 GEMM epilogue, nvfp4, gathers, padding);
 *   ULP(n) every element within n units of the output dtype's precision
 *          (2^-7 bf16, 2^-10 f16, 2^-23 f32) relative to the CPU value, with
 *          an absolute floor of that much times `scale` (reductions sum in a
 *          different order; transcendental functions differ by an ulp);
 *   REL(t) ‖gpu − cpu‖ / ‖cpu‖ < t (attention: P is rounded to bf16 before
 *          P·V on the GPU, as FlashAttention does; the CPU keeps f32).
 */
#include "backend/fused.h"
#include "backend/kernel_policy.h"
#include "backend/ops.h"
#include "cuda_test.h"

static mm_ctx *cpu, *gpu;
static cuda_test_rng rng = {0xC0FFEE1234567ull};

/* ------------------------------------------------------------------ tensors */

static mm_tensor T_alloc(mm_device d, mm_dtype t, int nd, const int64_t *shape)
{
    mm_tensor x;
    mm_error e = {{0}};
    if (mm_tensor_alloc(&x, d, t, nd, shape, &e)) {
        printf("FAIL alloc: %s\n", e.msg);
        exit(1);
    }
    return x;
}

/* Random CPU tensor: uniform in [-scale, scale) (integers: codes in range). */
static mm_tensor R(mm_dtype t, int nd, const int64_t *shape, double scale)
{
    mm_tensor x = T_alloc(mm_cpu(), t, nd, shape);
    int64_t n = mm_tensor_numel(&x), idx[MM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = r % shape[d];
            r /= shape[d];
        }
        double u = cuda_test_uniform(&rng);
        double v = t == MM_I8 ? floor(u * 127.5) : t == MM_I32 ? floor(u * scale) : u * scale;
        mm_tensor_set(&x, idx, v);
    }
    return x;
}

/* A GPU copy of a contiguous CPU tensor. */
static mm_tensor G(const mm_tensor *c)
{
    mm_tensor g = T_alloc(mm_cuda(0), c->dtype, c->ndim, c->shape);
    if (mm_copy(gpu, &g, c)) {
        mm_error e = {{0}};
        mm_ctx_error(gpu, &e);
        printf("FAIL upload: %s\n", e.msg);
        exit(1);
    }
    return g;
}

/* A pair of outputs: CPU zeros and a poisoned GPU tensor. */
typedef struct pair {
    mm_tensor c, g;
} pair;

static pair OUT(mm_dtype t, int nd, const int64_t *shape)
{
    pair p;
    mm_error e = {{0}};
    if (mm_tensor_zeros(&p.c, mm_cpu(), t, nd, shape, &e)) {
        printf("FAIL alloc: %s\n", e.msg);
        exit(1);
    }
    p.g = T_alloc(mm_cuda(0), t, nd, shape);
    mm_fill(gpu, &p.g, mm_dtype_is_float(t) ? NAN : -77);
    return p;
}

/* The GPU tensor (contiguous) back on the CPU. */
static mm_tensor D(const mm_tensor *g)
{
    mm_tensor c = T_alloc(mm_cpu(), g->dtype, g->ndim, g->shape);
    mm_copy(gpu, &c, g);
    return c;
}

static void pfree(pair *p)
{
    mm_tensor_free(&p->c);
    mm_tensor_free(&p->g);
}

/* Both contexts healthy after a case's ops; a failure is reported and both
 * are cleared, so one case's failure cannot leak into the next. */
static int ctx_ok(const char *what)
{
    mm_error e = {{0}};
    int ok = 1;
    if (mm_ctx_sync(cpu, &e)) {
        MM_EXPECT(0, "%s on the CPU: %s", what, e.msg);
        ok = 0;
    }
    if (mm_ctx_sync(gpu, &e)) {
        MM_EXPECT(0, "%s on the GPU: %s", what, e.msg);
        ok = 0;
    }
    mm_ctx_clear_error(cpu);
    mm_ctx_clear_error(gpu);
    return ok;
}

/* ------------------------------------------------------------------ comparisons */

enum { EXACT = 0, ULP = 1, REL = 2 };

/* The spacing of the dtype's values at 1.0: one ulp is at most eps·|v|. */
static double eps_of(mm_dtype t) { return t == MM_BF16 ? 0x1p-7 : t == MM_F16 ? 0x1p-10 : 0x1p-23; }

static double *vals(const mm_tensor *t)
{
    int64_t n = mm_tensor_numel(t), idx[MM_MAX_DIMS] = {0};
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = r % t->shape[d];
            r /= t->shape[d];
        }
        v[i] = mm_tensor_get(t, idx);
    }
    return v;
}

/* Compares the GPU result (any layout, downloaded whole by the caller) with
 * the CPU result. mode EXACT / ULP (tol = units, scale = absolute floor
 * multiplier) / REL (tol = rel_l2). */
static void cmp(const char *what, const mm_tensor *cpu_t, const mm_tensor *gpu_host, int mode, double tol,
                double scale)
{
    double *a = vals(cpu_t), *b = vals(gpu_host);
    int64_t n = mm_tensor_numel(cpu_t), bad = 0, first = -1;
    double num = 0, den = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        bool both_nan = isnan(a[i]) && isnan(b[i]);
        num += isnan(d) ? 0 : d * d;
        den += a[i] * a[i];
        bool ok;
        if (both_nan)
            ok = true;
        else if (isnan(b[i]) || isnan(a[i]))
            ok = false;
        else if (mode == EXACT)
            ok = a[i] == b[i] && signbit(a[i]) == signbit(b[i]);
        else if (mode == ULP) {
            double e = eps_of(gpu_host->dtype) * tol;
            ok = d <= e * (fabs(a[i]) + scale);
            if (d / (e * (fabs(a[i]) + scale)) > worst)
                worst = d / (e * (fabs(a[i]) + scale));
        } else
            ok = true;
        if (!ok) {
            bad++;
            if (first < 0)
                first = i;
        }
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (mode == REL) {
        MM_EXPECT(rel < tol && bad == 0, "%s: rel_l2 %.3g (limit %.1g), %lld NaN mismatches", what, rel, tol,
                  (long long)bad);
    } else {
        MM_EXPECT(bad == 0, "%s: %lld of %lld elements differ (first [%lld]: cpu %.9g gpu %.9g)%s", what,
                  (long long)bad, (long long)n, (long long)first, first >= 0 ? a[first] : 0, first >= 0 ? b[first] : 0,
                  mode == EXACT ? " (exact expected)" : "");
    }
    free(a);
    free(b);
}

/* Download g and compare with c. */
static void cmpg(const char *what, const mm_tensor *c, const mm_tensor *g, int mode, double tol, double scale)
{
    mm_tensor h = D(g);
    cmp(what, c, &h, mode, tol, scale);
    mm_tensor_free(&h);
}

#define SH(...) MM_NDIM(__VA_ARGS__), MM_SHAPE(__VA_ARGS__)

/* ------------------------------------------------------------------ cases */

static void test_copy_convert_fill(void)
{
    mm_tensor x = R(MM_F32, SH(37, 53), 300.0), gx = G(&x);
    const mm_dtype outs[] = {MM_BF16, MM_F16, MM_I8, MM_I32, MM_U8};
    for (int i = 0; i < 5; i++) {
        pair o = OUT(outs[i], SH(37, 53));
        mm_copy(cpu, &o.c, &x);
        mm_copy(gpu, &o.g, &gx);
        if (ctx_ok("copy"))
            cmpg(mm_dtype_name(outs[i]), &o.c, &o.g, EXACT, 0, 0);
        pfree(&o);
    }
    /* strided source: a transposed view */
    mm_tensor xt = mm_tensor_transpose(&x, 0, 1), gxt = mm_tensor_transpose(&gx, 0, 1);
    pair o = OUT(MM_BF16, SH(53, 37));
    mm_copy(cpu, &o.c, &xt);
    mm_copy(gpu, &o.g, &gxt);
    if (ctx_ok("transposed copy"))
        cmpg("transposed f32->bf16", &o.c, &o.g, EXACT, 0, 0);
    pfree(&o);
    /* integers to float, and fill */
    mm_tensor xi = R(MM_I32, SH(11, 13), 1e6), gxi = G(&xi);
    pair of = OUT(MM_F32, SH(11, 13));
    mm_copy(cpu, &of.c, &xi);
    mm_copy(gpu, &of.g, &gxi);
    mm_fill(cpu, &of.c, 0); /* overwritten below on both: fill a narrow part */
    mm_fill(gpu, &of.g, 0);
    mm_tensor nc = mm_tensor_narrow(&of.c, 1, 3, 5), ng = mm_tensor_narrow(&of.g, 1, 3, 5);
    mm_fill(cpu, &nc, 3.14159);
    mm_fill(gpu, &ng, 3.14159);
    if (ctx_ok("fill"))
        cmpg("fill narrow", &of.c, &of.g, EXACT, 0, 0);
    pair oi = OUT(MM_I8, SH(4, 4));
    mm_fill(cpu, &oi.c, 300.7);
    mm_fill(gpu, &oi.g, 300.7);
    if (ctx_ok("fill i8"))
        cmpg("fill i8 saturates", &oi.c, &oi.g, EXACT, 0, 0);
    mm_tensor_free(&x), mm_tensor_free(&gx), mm_tensor_free(&xi), mm_tensor_free(&gxi);
    pfree(&of), pfree(&oi);
}

/* ------------------------------------------------------------------ strided same-dtype copies
 * Same-dtype copies of permuted / narrowed views: rows contiguous on both
 * sides take the raw-vector kernel (16/8/4-byte vectors), the rest the
 * element-wise walk. Each case copies a view of one buffer into a view of
 * another; both buffers start with the same bytes on the CPU and the GPU,
 * and afterwards the whole destination buffers must be byte-identical (the
 * view's elements copied, nothing outside it touched). `raw`: the buffers
 * hold random bytes — NaNs with payloads, infinities, denormals — which only
 * a raw copy keeps (the element-wise walk goes through f32), so those cases
 * also fail if the shape leaves the raw path. */

typedef struct buf2 {
    mm_tensor c, g; /* 1-D, the same bytes */
} buf2;

static buf2 BUF(mm_dtype t, int64_t n, bool raw)
{
    buf2 b;
    if (raw) {
        b.c = T_alloc(mm_cpu(), t, 1, MM_SHAPE(n));
        unsigned char *p = b.c.data;
        for (size_t i = 0; i < mm_tensor_nbytes(&b.c); i++)
            p[i] = (unsigned char)(cuda_test_next(&rng) >> 56);
    } else {
        b.c = R(t, 1, MM_SHAPE(n), 3.0);
    }
    b.g = G(&b.c);
    return b;
}

/* The view `v` of b.c, made the same way over b.g. */
static mm_tensor ON_GPU(const buf2 *b, const mm_tensor *v)
{
    mm_tensor g = *v;
    g.data = (char *)b->g.data + ((char *)v->data - (char *)b->c.data);
    g.device = b->g.device;
    g.storage = NULL;
    return g;
}

static void copy_views(const char *what, buf2 *src, const mm_tensor *sv, buf2 *dst, mm_tensor *dv)
{
    mm_tensor gs = ON_GPU(src, sv), gd = ON_GPU(dst, dv);
    mm_copy(cpu, dv, sv);
    mm_copy(gpu, &gd, &gs);
    if (!ctx_ok(what))
        return;
    mm_tensor h = D(&dst->g);
    size_t nb = mm_tensor_nbytes(&dst->c);
    const unsigned char *a = dst->c.data, *b = h.data;
    size_t first = nb, bad = 0;
    for (size_t i = 0; i < nb; i++)
        if (a[i] != b[i]) {
            bad++;
            if (first == nb)
                first = i;
        }
    MM_EXPECT(bad == 0, "%s: %zu of %zu bytes differ (first at byte %zu: cpu %02x gpu %02x)", what, bad, nb, first,
              first < nb ? a[first] : 0, first < nb ? b[first] : 0);
    mm_tensor_free(&h);
}

static void bfree(buf2 *b)
{
    mm_tensor_free(&b->c);
    mm_tensor_free(&b->g);
}

/* [n, H, D] → [N, n, H/N, D], as src/parallel/ulysses.c's by_group. */
static mm_tensor by_group(const mm_tensor *t, int64_t N, int64_t hl)
{
    mm_tensor g = mm_tensor_unflatten(t, 1, 2, MM_SHAPE(N, hl));
    return mm_tensor_permute(&g, (const int[]){1, 0, 2, 3});
}

/* The Ulysses pack and unpack at n rows, H heads of D in N groups: q, k, v
 * are column blocks of the fused [n, 3·H·D] qkv rows (as the DiT hands them
 * over); the exchange buffer is [3][N][n][H/N·D]; the unpack writes the
 * groups back into an [n, H·D] output with a wider row stride. */
static void ulysses_case(mm_dtype t, int64_t n, int64_t H, int64_t D, int64_t N)
{
    char what[96];
    int64_t hl = H / N, A = H * D;
    buf2 qkv = BUF(t, n * 3 * A, true), ex = BUF(t, 3 * N * n * hl * D, true);
    mm_tensor qkv2 = mm_tensor_unflatten(&qkv.c, 0, 2, MM_SHAPE(n, 3 * A));
    mm_tensor ex4 = mm_tensor_unflatten(&ex.c, 0, 4, MM_SHAPE(3, N, n, hl * D));
    for (int w = 0; w < 3; w++) {
        mm_tensor x = mm_tensor_narrow(&qkv2, 1, w * A, A);
        x = mm_tensor_unflatten(&x, 1, 2, MM_SHAPE(H, D));
        mm_tensor src = by_group(&x, N, hl);
        mm_tensor dst = mm_tensor_select(&ex4, 0, w);
        dst = mm_tensor_unflatten(&dst, 2, 2, MM_SHAPE(hl, D));
        snprintf(what, sizeof what, "ulysses pack %s n=%lld H=%lld D=%lld N=%lld (%c)", mm_dtype_name(t),
                 (long long)n, (long long)H, (long long)D, (long long)N, "qkv"[w]);
        copy_views(what, &qkv, &src, &ex, &dst);
    }
    /* unpack: [N, n, hl, D] (group 1's block of the buffer) into out[:, :A] */
    buf2 out = BUF(t, n * (A + 8), true);
    mm_tensor o2 = mm_tensor_unflatten(&out.c, 0, 2, MM_SHAPE(n, A + 8));
    o2 = mm_tensor_narrow(&o2, 1, 0, A);
    mm_tensor o3 = mm_tensor_unflatten(&o2, 1, 2, MM_SHAPE(H, D));
    mm_tensor dst = by_group(&o3, N, hl);
    mm_tensor back = mm_tensor_select(&ex4, 0, 1);
    back = mm_tensor_unflatten(&back, 2, 2, MM_SHAPE(hl, D));
    snprintf(what, sizeof what, "ulysses unpack %s n=%lld H=%lld D=%lld N=%lld", mm_dtype_name(t), (long long)n,
             (long long)H, (long long)D, (long long)N);
    copy_views(what, &ex, &back, &out, &dst);
    bfree(&qkv), bfree(&ex), bfree(&out);
}

/* src [a, b, c] narrowed to columns [c0, c0 + len) and permuted to [b, a,
 * len], into a contiguous destination. */
static void narrow_case(mm_dtype t, int64_t a, int64_t b, int64_t c, int64_t c0, int64_t len, bool raw)
{
    char what[96];
    buf2 s = BUF(t, a * b * c, raw), d = BUF(t, a * b * len, raw);
    mm_tensor x = mm_tensor_unflatten(&s.c, 0, 3, MM_SHAPE(a, b, c));
    x = mm_tensor_narrow(&x, 2, c0, len);
    x = mm_tensor_transpose(&x, 0, 1);
    mm_tensor y = mm_tensor_unflatten(&d.c, 0, 3, MM_SHAPE(b, a, len));
    snprintf(what, sizeof what, "narrow+transpose %s [%lld,%lld,%lld][..,%lld:+%lld]%s", mm_dtype_name(t),
             (long long)a, (long long)b, (long long)c, (long long)c0, (long long)len, raw ? " raw" : "");
    copy_views(what, &s, &x, &d, &y);
    bfree(&s), bfree(&d);
}

static void test_strided_copies(void)
{
    /* the Ulysses pattern: 96-byte rows (8 lanes a row); rows of 136
     * vectors (a warp a row, one unrolled pass and a remainder); 4 groups;
     * f32 */
    ulysses_case(MM_BF16, 37, 6, 16, 2);
    ulysses_case(MM_BF16, 19, 16, 136, 2);
    ulysses_case(MM_BF16, 5, 8, 128, 4);
    ulysses_case(MM_F32, 23, 6, 40, 3);
    /* narrowed rows at 16-, 8- and 4-byte alignment (f32 offsets 4, 2, 1),
     * rows of 2 vectors in odd outer sizes */
    narrow_case(MM_F32, 5, 7, 40, 4, 24, true);
    narrow_case(MM_F32, 5, 7, 40, 2, 24, true);
    narrow_case(MM_F32, 5, 7, 40, 1, 24, true);
    narrow_case(MM_BF16, 3, 9, 48, 8, 16, true);
    narrow_case(MM_BF16, 7, 3, 30, 2, 10, true); /* 20-byte rows: 4-byte vectors */
    narrow_case(MM_I32, 9, 11, 8, 0, 8, true);
    narrow_case(MM_U8, 13, 3, 64, 16, 48, true);
    narrow_case(MM_U8, 13, 3, 64, 4, 20, true);
    /* not for the raw kernel (the element walk): bf16 rows at a 2-byte
     * offset, rows under 16 bytes, u8 rows at odd offsets */
    narrow_case(MM_BF16, 5, 7, 40, 1, 24, false);
    narrow_case(MM_BF16, 5, 7, 40, 2, 6, false);
    narrow_case(MM_U8, 13, 3, 64, 3, 20, false);
    /* 4-D permutation that keeps the last dim, odd sizes: [3,5,7,16] →
     * [7,3,5,16]; and one that moves it (element walk) */
    {
        buf2 s = BUF(MM_BF16, 3 * 5 * 7 * 16, true), d = BUF(MM_BF16, 3 * 5 * 7 * 16, true);
        mm_tensor x = mm_tensor_unflatten(&s.c, 0, 4, MM_SHAPE(3, 5, 7, 16));
        mm_tensor xp = mm_tensor_permute(&x, (const int[]){2, 0, 1, 3});
        mm_tensor y = mm_tensor_unflatten(&d.c, 0, 4, MM_SHAPE(7, 3, 5, 16));
        copy_views("permute [3,5,7,16] -> [7,3,5,16] bf16 raw", &s, &xp, &d, &y);
        bfree(&s), bfree(&d);
        /* three outer dims that do not merge, one 16-byte vector a row */
        s = BUF(MM_BF16, 3 * 5 * 7 * 16, true), d = BUF(MM_BF16, 5 * 3 * 7 * 8, true);
        x = mm_tensor_unflatten(&s.c, 0, 4, MM_SHAPE(3, 5, 7, 16));
        x = mm_tensor_narrow(&x, 3, 8, 8);
        xp = mm_tensor_permute(&x, (const int[]){1, 0, 2, 3});
        y = mm_tensor_unflatten(&d.c, 0, 4, MM_SHAPE(5, 3, 7, 8));
        copy_views("narrow+permute [3,5,7,16][..,8:+8] -> [5,3,7,8] bf16 raw", &s, &xp, &d, &y);
        bfree(&s), bfree(&d);
        s = BUF(MM_F32, 3 * 5 * 7 * 16, false), d = BUF(MM_F32, 3 * 5 * 7 * 16, false);
        x = mm_tensor_unflatten(&s.c, 0, 4, MM_SHAPE(3, 5, 7, 16));
        xp = mm_tensor_permute(&x, (const int[]){0, 3, 2, 1});
        y = mm_tensor_unflatten(&d.c, 0, 4, MM_SHAPE(3, 16, 7, 5));
        copy_views("permute [3,5,7,16] -> [3,16,7,5] f32 (last dim moves)", &s, &xp, &d, &y);
        bfree(&s), bfree(&d);
    }
    /* a narrowed destination (rows of 32 f32 at stride 64) and a broadcast
     * source row (stride 0) */
    {
        buf2 s = BUF(MM_F32, 7 * 32, true), d = BUF(MM_F32, 7 * 64, true);
        mm_tensor x = mm_tensor_unflatten(&s.c, 0, 2, MM_SHAPE(7, 32));
        mm_tensor y = mm_tensor_unflatten(&d.c, 0, 2, MM_SHAPE(7, 64));
        y = mm_tensor_narrow(&y, 1, 8, 32);
        copy_views("into narrowed rows f32 raw", &s, &x, &d, &y);
        mm_tensor row = mm_tensor_narrow(&x, 0, 3, 1);
        row = mm_tensor_expand(&row, 2, MM_SHAPE(7, 32));
        copy_views("broadcast row f32 raw", &s, &row, &d, &y);
        bfree(&s), bfree(&d);
    }
}

static void test_elementwise(void)
{
    mm_tensor a = R(MM_F32, SH(33, 70), 4), b = R(MM_BF16, SH(1, 70), 2);
    mm_tensor ga = G(&a), gb = G(&b);
    mm_tensor be = mm_tensor_expand(&b, SH(33, 70)), gbe = mm_tensor_expand(&gb, SH(33, 70));
    for (int op = 0; op < 5; op++) {
        pair o = OUT(MM_BF16, SH(33, 70));
        switch (op) {
        case 0: mm_add(cpu, &o.c, &a, &be), mm_add(gpu, &o.g, &ga, &gbe); break;
        case 1: mm_mul(cpu, &o.c, &a, &be), mm_mul(gpu, &o.g, &ga, &gbe); break;
        case 2: mm_axpby(cpu, &o.c, 0.7f, &a, -1.3f, &be), mm_axpby(gpu, &o.g, 0.7f, &ga, -1.3f, &gbe); break;
        case 3: mm_axpby(cpu, &o.c, 0.7f, &a, 0.25f, NULL), mm_axpby(gpu, &o.g, 0.7f, &ga, 0.25f, NULL); break;
        case 4: mm_clamp(cpu, &o.c, &a, -1.5f, 2.f), mm_clamp(gpu, &o.g, &ga, -1.5f, 2.f); break;
        }
        char what[32];
        snprintf(what, sizeof what, "binary op %d", op);
        if (ctx_ok(what))
            cmpg(what, &o.c, &o.g, EXACT, 0, 0);
        pfree(&o);
    }
    /* all-bf16 operands with a broadcast row: the 8-wide kernel */
    mm_tensor a16 = R(MM_BF16, SH(33, 72), 4), ga16 = G(&a16), b16 = R(MM_BF16, SH(1, 72), 2), gb16 = G(&b16);
    for (int op = 0; op < 2; op++) {
        pair o = OUT(MM_BF16, SH(33, 72));
        mm_tensor bx = mm_tensor_expand(&b16, SH(33, 72)), gbx = mm_tensor_expand(&gb16, SH(33, 72));
        if (op == 0)
            mm_add(cpu, &o.c, &a16, &bx), mm_add(gpu, &o.g, &ga16, &gbx);
        else
            mm_axpby(cpu, &o.c, 0.3f, &a16, 2.f, &bx), mm_axpby(gpu, &o.g, 0.3f, &ga16, 2.f, &gbx);
        if (ctx_ok("bf16 binary"))
            cmpg("bf16 binary op (vector path)", &o.c, &o.g, EXACT, 0, 0);
        pfree(&o);
    }
    mm_tensor_free(&a16), mm_tensor_free(&ga16), mm_tensor_free(&b16), mm_tensor_free(&gb16);
    for (int act = MM_ACT_IDENTITY; act <= MM_ACT_EXP; act++) {
        pair o = OUT(MM_F32, SH(33, 70)), ob = OUT(MM_BF16, SH(33, 70));
        mm_activation(cpu, &o.c, &a, (mm_act)act), mm_activation(gpu, &o.g, &ga, (mm_act)act);
        mm_activation(cpu, &ob.c, &a, (mm_act)act), mm_activation(gpu, &ob.g, &ga, (mm_act)act);
        char what[32];
        snprintf(what, sizeof what, "activation %d", act);
        /* GELU rounds 1 + erf(.) or 1 + tanh(.) at magnitude 1 before the product with x/2, so
         * CPU and GPU libm differ by ulps of 1, not of the (small, negative-x) output. */
        bool gelu = act == MM_ACT_GELU_TANH || act == MM_ACT_GELU_ERF;
        if (ctx_ok(what)) {
            cmpg(what, &o.c, &o.g, ULP, 8, gelu ? 1.0 : 1e-3);
            cmpg(what, &ob.c, &ob.g, ULP, 1, 1e-3);
        }
        pfree(&o), pfree(&ob);
    }
    /* GLU on the two halves of one [R, 2F] tensor */
    mm_tensor h = R(MM_BF16, SH(21, 2 * 96), 3), gh = G(&h);
    mm_tensor g1 = mm_tensor_narrow(&h, 1, 0, 96), u1 = mm_tensor_narrow(&h, 1, 96, 96);
    mm_tensor g2 = mm_tensor_narrow(&gh, 1, 0, 96), u2 = mm_tensor_narrow(&gh, 1, 96, 96);
    const mm_act acts[] = {MM_ACT_SILU, MM_ACT_GELU_TANH};
    for (int i = 0; i < 2; i++) {
        pair o = OUT(MM_BF16, SH(21, 96));
        mm_glu(cpu, &o.c, &g1, &u1, acts[i]), mm_glu(gpu, &o.g, &g2, &u2, acts[i]);
        if (ctx_ok("glu"))
            cmpg("glu", &o.c, &o.g, ULP, 1, 1e-3);
        pfree(&o);
    }
    /* snake, both forms */
    mm_tensor x = R(MM_F32, SH(2, 6, 50), 3), al = R(MM_F32, SH(6), 1), be2 = R(MM_BF16, SH(6), 1);
    mm_tensor gx = G(&x), gal = G(&al), gbe2 = G(&be2);
    for (int i = 0; i < 2; i++) {
        pair o = OUT(MM_F32, SH(2, 6, 50));
        mm_snake(cpu, &o.c, &x, &al, i ? &be2 : NULL), mm_snake(gpu, &o.g, &gx, &gal, i ? &gbe2 : NULL);
        if (ctx_ok("snake"))
            cmpg("snake", &o.c, &o.g, ULP, 16, 1);
        pfree(&o);
    }
    mm_tensor_free(&a), mm_tensor_free(&b), mm_tensor_free(&ga), mm_tensor_free(&gb), mm_tensor_free(&h);
    mm_tensor_free(&gh), mm_tensor_free(&x), mm_tensor_free(&al), mm_tensor_free(&be2), mm_tensor_free(&gx);
    mm_tensor_free(&gal), mm_tensor_free(&gbe2);
}

static void test_norms(void)
{
    int64_t Rr = 33, C = 1000;
    mm_tensor x = R(MM_BF16, SH(Rr, C), 3), w = R(MM_BF16, SH(C), 1), b = R(MM_F32, SH(C), 1);
    mm_tensor gx = G(&x), gw = G(&w), gbb = G(&b);
    pair o = OUT(MM_BF16, SH(Rr, C)), l = OUT(MM_F32, SH(Rr, C)), sm = OUT(MM_F32, SH(Rr, C));
    mm_rmsnorm(cpu, &o.c, &x, &w, 1e-5f), mm_rmsnorm(gpu, &o.g, &gx, &gw, 1e-5f);
    mm_layernorm(cpu, &l.c, &x, &w, &b, 1e-6f), mm_layernorm(gpu, &l.g, &gx, &gw, &gbb, 1e-6f);
    mm_softmax(cpu, &sm.c, &x), mm_softmax(gpu, &sm.g, &gx);
    if (ctx_ok("norms")) {
        cmpg("rmsnorm bf16", &o.c, &o.g, ULP, 1, 0);
        cmpg("layernorm f32", &l.c, &l.g, ULP, 64, 1);
        cmpg("softmax f32", &sm.c, &sm.g, ULP, 64, 0);
    }
    /* per-head RMSNorm in place on a [S, H, D] view of a fused qkv buffer */
    int64_t S = 19, H = 4, Dh = 128;
    mm_tensor qkv = R(MM_BF16, SH(S, 3 * H * Dh), 4), gqkv = G(&qkv), wq = R(MM_BF16, SH(Dh), 1), gwq = G(&wq);
    mm_tensor kc = mm_tensor_narrow(&qkv, 1, H * Dh, H * Dh), kg = mm_tensor_narrow(&gqkv, 1, H * Dh, H * Dh);
    mm_tensor kc3 = mm_tensor_unflatten(&kc, 1, 2, MM_SHAPE(H, Dh)), kg3 = mm_tensor_unflatten(&kg, 1, 2, MM_SHAPE(H, Dh));
    mm_rmsnorm(cpu, &kc3, &kc3, &wq, 1e-5f), mm_rmsnorm(gpu, &kg3, &kg3, &gwq, 1e-5f);
    if (ctx_ok("per-head rmsnorm"))
        cmpg("per-head rmsnorm in place (q and v untouched)", &qkv, &gqkv, ULP, 1, 0);
    /* reductions */
    mm_tensor xr = R(MM_F32, SH(9, 1000), 5), gxr = G(&xr);
    for (int op = MM_REDUCE_SUM; op <= MM_REDUCE_ABSMAX; op++) {
        pair r = OUT(MM_F32, SH(9));
        mm_reduce_rows(cpu, &r.c, &xr, (mm_reduce)op), mm_reduce_rows(gpu, &r.g, &gxr, (mm_reduce)op);
        if (ctx_ok("reduce"))
            cmpg("reduce_rows", &r.c, &r.g, ULP, 64, 100);
        pfree(&r);
    }
    mm_tensor_free(&x), mm_tensor_free(&w), mm_tensor_free(&b), mm_tensor_free(&gx), mm_tensor_free(&gw);
    mm_tensor_free(&gbb), pfree(&o), pfree(&l), pfree(&sm), mm_tensor_free(&qkv), mm_tensor_free(&gqkv);
    mm_tensor_free(&wq), mm_tensor_free(&gwq), mm_tensor_free(&xr), mm_tensor_free(&gxr);
}

static void test_groupnorm(void)
{
    mm_tensor x = R(MM_F32, SH(2, 64, 3, 5, 7), 3), w = R(MM_F32, SH(64), 1), b = R(MM_BF16, SH(64), 1);
    mm_tensor gx = G(&x), gw = G(&w), gb = G(&b);
    pair o = OUT(MM_F32, SH(2, 64, 3, 5, 7)), o2 = OUT(MM_BF16, SH(2, 64, 3, 5, 7));
    mm_groupnorm(cpu, &o.c, &x, &w, &b, 32, 1e-6f, true), mm_groupnorm(gpu, &o.g, &gx, &gw, &gb, 32, 1e-6f, true);
    mm_groupnorm(cpu, &o2.c, &x, &w, NULL, 16, 1e-6f, false), mm_groupnorm(gpu, &o2.g, &gx, &gw, NULL, 16, 1e-6f, false);
    if (ctx_ok("groupnorm")) {
        cmpg("groupnorm per frame", &o.c, &o.g, ULP, 64, 1);
        cmpg("groupnorm", &o2.c, &o2.g, ULP, 1, 0.01);
    }
    mm_tensor_free(&x), mm_tensor_free(&w), mm_tensor_free(&b), mm_tensor_free(&gx), mm_tensor_free(&gw);
    mm_tensor_free(&gb), pfree(&o), pfree(&o2);
}

static void modulation_case(int64_t Rr, int64_t C, int64_t Tn)
{
    mm_tensor x = R(MM_BF16, SH(Rr, C), 3), y = R(MM_BF16, SH(Rr, C), 2), tab = R(MM_BF16, SH(Tn, 6 * C), 0.5);
    mm_tensor w = R(MM_BF16, SH(C), 1), idx = R(MM_I32, SH(Rr), 1);
    int32_t *ip = idx.data;
    for (int i = 0; i < Rr; i++)
        ip[i] = (int32_t)(cuda_test_next(&rng) % Tn);
    mm_tensor gx = G(&x), gy = G(&y), gt = G(&tab), gw = G(&w), gi = G(&idx);
    mm_tensor sh = mm_tensor_narrow(&tab, 1, 0, C), sc = mm_tensor_narrow(&tab, 1, C, C), gt2 = mm_tensor_narrow(&tab, 1, 2 * C, C);
    mm_tensor gsh = mm_tensor_narrow(&gt, 1, 0, C), gsc = mm_tensor_narrow(&gt, 1, C, C), ggt = mm_tensor_narrow(&gt, 1, 2 * C, C);
    pair m = OUT(MM_BF16, SH(Rr, C)), rm = OUT(MM_BF16, SH(Rr, C));
    mm_modulate(cpu, &m.c, &x, &sc, &sh, &idx), mm_modulate(gpu, &m.g, &gx, &gsc, &gsh, &gi);
    mm_rmsnorm_modulate(cpu, &rm.c, &x, &w, 1e-5f, &sc, &sh, &idx);
    mm_rmsnorm_modulate(gpu, &rm.g, &gx, &gw, 1e-5f, &gsc, &gsh, &gi);
    mm_gated_residual(cpu, &x, &y, &gt2, &idx), mm_gated_residual(gpu, &gx, &gy, &ggt, &gi);
    if (ctx_ok("modulation")) {
        cmpg("modulate", &m.c, &m.g, EXACT, 0, 0);
        cmpg("rmsnorm_modulate", &rm.c, &rm.g, ULP, 1, 0.01);
        cmpg("gated_residual", &x, &gx, EXACT, 0, 0);
    }
    mm_tensor_free(&x), mm_tensor_free(&y), mm_tensor_free(&tab), mm_tensor_free(&w), mm_tensor_free(&idx);
    mm_tensor_free(&gx), mm_tensor_free(&gy), mm_tensor_free(&gt), mm_tensor_free(&gw), mm_tensor_free(&gi);
    pfree(&m), pfree(&rm);
}

/* Short rows (a warp per row) and the DiT's hidden size (8-wide bf16 path). */
static void test_modulation(void)
{
    modulation_case(40, 512, 5);
    modulation_case(21, 5376, 3);
}

static void test_rope(void)
{
    int64_t S = 23, H = 3, Dh = 128, rot = 96;
    mm_tensor qkv = R(MM_BF16, SH(S, 3 * H * Dh), 3), gqkv = G(&qkv);
    mm_tensor cs = R(MM_BF16, SH(S, rot), 1), sn = R(MM_F32, SH(S, rot), 1), gcs = G(&cs), gsn = G(&sn);
    mm_tensor qc = mm_tensor_narrow(&qkv, 1, 0, H * Dh), qg = mm_tensor_narrow(&gqkv, 1, 0, H * Dh);
    mm_tensor qc3 = mm_tensor_unflatten(&qc, 1, 2, MM_SHAPE(H, Dh)), qg3 = mm_tensor_unflatten(&qg, 1, 2, MM_SHAPE(H, Dh));
    mm_rope(cpu, &qc3, &qc3, &cs, &sn, (int)rot), mm_rope(gpu, &qg3, &qg3, &gcs, &gsn, (int)rot);
    if (ctx_ok("rope"))
        cmpg("rope in place on a qkv view", &qkv, &gqkv, EXACT, 0, 0);
    mm_tensor_free(&qkv), mm_tensor_free(&gqkv), mm_tensor_free(&cs), mm_tensor_free(&sn), mm_tensor_free(&gcs);
    mm_tensor_free(&gsn);
}

/* The video VAE decoder's glue at its shapes and dtypes (fewer, odd rows so
 * that warps and lane groups end mid-block), on the 8-wide glue kernels or
 * on the generic ones (the kernel policy's glue_vec): f32 residual rows of 2048
 * (row stride ≠ width) normalized into f16, a 264-wide row (a warp whose
 * lanes run past the end), per-head q/k views of 64 channels 192 apart in
 * f16 qkv rows, RoPE over 48 of them with f16 tables, the gated residual f32
 * += gate·f16 (a [1, D] f16 gate; a [T, D] f32 table with idx; a strided y),
 * and SiLU-GLU on the two halves of one f16 [R, 2F] buffer. Unaligned views
 * and widths that are not multiples of 8 take the generic kernels either way.
 * The vec run also compares RoPE, the gated residual and GLU with the generic
 * kernels bit for bit. */
static mm_kernel_policy glue_saved; /* the process's policy, put back by glue_restore */
static bool glue_switched;
static void set_glue(bool vec)
{
    if (!glue_switched)
        glue_saved = *mm_kernel_policy_get(), glue_switched = true;
    mm_kernel_policy p = glue_saved;
    p.glue_vec = vec;
    mm_kernel_policy_install(&p);
}
static void glue_restore(void)
{
    if (glue_switched)
        mm_kernel_policy_install(&glue_saved), glue_switched = false;
}

static void vae_glue_case(bool vec)
{
    set_glue(vec);
    const char *tag = vec ? "vec" : "generic";
    char what[128];
    /* norm1 / norm2: f32 rows -> f16; offset 4 floats keeps 16-byte starts, offset 1 does not */
    const int64_t Rr = 37, widths[2] = {2048, 264}, offs[2] = {4, 1};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            int64_t C = widths[i];
            mm_tensor xb = R(MM_F32, SH(Rr, C + 8), 3), gxb = G(&xb), w = R(MM_F32, SH(C), 1), gw = G(&w);
            mm_tensor x = mm_tensor_narrow(&xb, 1, offs[k], C), gx = mm_tensor_narrow(&gxb, 1, offs[k], C);
            pair o = OUT(MM_F16, SH(Rr, C));
            mm_rmsnorm(cpu, &o.c, &x, &w, 1e-6f), mm_rmsnorm(gpu, &o.g, &gx, &gw, 1e-6f);
            snprintf(what, sizeof what, "%s: rmsnorm f32 [%lld, %lld] (row stride %lld, offset %lld) -> f16", tag,
                     (long long)Rr, (long long)C, (long long)(C + 8), (long long)offs[k]);
            if (ctx_ok(what))
                cmpg(what, &o.c, &o.g, ULP, 1, 0.01);
            mm_tensor_free(&xb), mm_tensor_free(&gxb), mm_tensor_free(&w), mm_tensor_free(&gw), pfree(&o);
        }
    /* per-head q/k RMSNorm (no weight) in place, then RoPE over 48 of 64 channels */
    const int64_t S = 29, H = 5, hd = 64, rot = 48;
    mm_tensor qkv = R(MM_F16, SH(S, 3 * H * hd), 4), gqkv = G(&qkv);
    mm_tensor cs = R(MM_F16, SH(S, rot), 1), sn = R(MM_F16, SH(S, rot), 1), gcs = G(&cs), gsn = G(&sn);
    mm_tensor c3 = mm_tensor_unflatten(&qkv, 1, 2, MM_SHAPE(H, 3 * hd)), g3 = mm_tensor_unflatten(&gqkv, 1, 2, MM_SHAPE(H, 3 * hd));
    mm_tensor cq = mm_tensor_narrow(&c3, 2, 0, hd), ck = mm_tensor_narrow(&c3, 2, hd, hd);
    mm_tensor gq = mm_tensor_narrow(&g3, 2, 0, hd), gk = mm_tensor_narrow(&g3, 2, hd, hd);
    mm_rmsnorm(cpu, &cq, &cq, NULL, 1e-5f), mm_rmsnorm(cpu, &ck, &ck, NULL, 1e-5f);
    mm_rmsnorm(gpu, &gq, &gq, NULL, 1e-5f), mm_rmsnorm(gpu, &gk, &gk, NULL, 1e-5f);
    snprintf(what, sizeof what, "%s: per-head q/k rmsnorm f16 [%lld, %lld, 64] views of qkv (v untouched)", tag,
             (long long)S, (long long)H);
    if (ctx_ok(what))
        cmpg(what, &qkv, &gqkv, ULP, 1, 0.01);
    mm_copy(gpu, &gqkv, &qkv); /* the same normalized input on both sides */
    mm_tensor normed = D(&gqkv);
    mm_rope(cpu, &cq, &cq, &cs, &sn, (int)rot), mm_rope(cpu, &ck, &ck, &cs, &sn, (int)rot);
    mm_rope(gpu, &gq, &gq, &gcs, &gsn, (int)rot), mm_rope(gpu, &gk, &gk, &gcs, &gsn, (int)rot);
    snprintf(what, sizeof what, "%s: rope 48 of 64 on f16 q/k views, f16 tables", tag);
    if (ctx_ok(what))
        cmpg(what, &qkv, &gqkv, EXACT, 0, 0);
    mm_tensor rope_vec = D(&gqkv);
    if (vec) { /* the generic kernel on the same input */
        mm_copy(gpu, &gqkv, &normed);
        set_glue(false);
        mm_rope(gpu, &gq, &gq, &gcs, &gsn, (int)rot), mm_rope(gpu, &gk, &gk, &gcs, &gsn, (int)rot);
        set_glue(true);
        mm_tensor once = D(&gqkv);
        if (ctx_ok("rope generic"))
            cmp("vec rope == generic rope", &once, &rope_vec, EXACT, 0, 0);
        mm_tensor_free(&once);
    }
    mm_tensor_free(&rope_vec), mm_tensor_free(&normed);
    /* gated residuals: f32 x += f16 [1, D] gate · f16 y; f32 table + idx with a strided y */
    const int64_t Dm = 2048, T = 3;
    for (int k = 0; k < 2; k++) {
        mm_tensor x = R(MM_F32, SH(Rr, Dm), 3), yb = R(MM_F16, SH(Rr, Dm + 16), 2), gx = G(&x), gyb = G(&yb);
        mm_tensor y = mm_tensor_narrow(&yb, 1, k ? 8 : 0, Dm), gy = mm_tensor_narrow(&gyb, 1, k ? 8 : 0, Dm);
        mm_tensor tab = R(k ? MM_F32 : MM_F16, SH(k ? T : 1, Dm), 0.5), gtab = G(&tab), idx = R(MM_I32, SH(Rr), 1);
        int32_t *ip = idx.data;
        for (int r = 0; r < Rr; r++)
            ip[r] = (int32_t)(cuda_test_next(&rng) % T);
        mm_tensor gi = G(&idx), x0 = D(&gx);
        mm_gated_residual(cpu, &x, &y, &tab, k ? &idx : NULL), mm_gated_residual(gpu, &gx, &gy, &gtab, k ? &gi : NULL);
        snprintf(what, sizeof what, "%s: gated residual f32 += %s gate · f16 y%s", tag, k ? "f32 [3, D] + idx" : "f16 [1, D]",
                 k ? " (row stride D + 16)" : "");
        if (ctx_ok(what))
            cmpg(what, &x, &gx, EXACT, 0, 0);
        if (vec) {
            mm_tensor hx = D(&gx);
            mm_copy(gpu, &gx, &x0);
            set_glue(false);
            mm_gated_residual(gpu, &gx, &gy, &gtab, k ? &gi : NULL);
            set_glue(true);
            mm_tensor hg = D(&gx);
            if (ctx_ok("gated generic"))
                cmp("vec gated residual == generic", &hg, &hx, EXACT, 0, 0);
            mm_tensor_free(&hx), mm_tensor_free(&hg);
        }
        mm_tensor_free(&x), mm_tensor_free(&yb), mm_tensor_free(&gx), mm_tensor_free(&gyb), mm_tensor_free(&tab);
        mm_tensor_free(&gtab), mm_tensor_free(&idx), mm_tensor_free(&gi), mm_tensor_free(&x0);
    }
    /* SiLU-GLU on the halves of one f16 [R, 2F] buffer; F = 97 is not a multiple of 8 */
    const int64_t Fs[2] = {520, 97};
    for (int k = 0; k < 2; k++) {
        int64_t F = Fs[k];
        mm_tensor u = R(MM_F16, SH(Rr, 2 * F), 6), gu = G(&u);
        mm_tensor cg = mm_tensor_narrow(&u, 1, 0, F), cv = mm_tensor_narrow(&u, 1, F, F);
        mm_tensor gg = mm_tensor_narrow(&gu, 1, 0, F), gv = mm_tensor_narrow(&gu, 1, F, F);
        pair o = OUT(MM_F16, SH(Rr, F));
        mm_glu(cpu, &o.c, &cg, &cv, MM_ACT_SILU), mm_glu(gpu, &o.g, &gg, &gv, MM_ACT_SILU);
        snprintf(what, sizeof what, "%s: silu-glu f16 halves of [%lld, %lld]", tag, (long long)Rr, (long long)(2 * F));
        if (ctx_ok(what))
            cmpg(what, &o.c, &o.g, ULP, 1, 1e-3);
        if (vec) {
            mm_tensor hv = D(&o.g);
            set_glue(false);
            mm_glu(gpu, &o.g, &gg, &gv, MM_ACT_SILU);
            set_glue(true);
            mm_tensor hg = D(&o.g);
            if (ctx_ok("glu generic"))
                cmp("vec silu-glu == generic", &hg, &hv, EXACT, 0, 0);
            mm_tensor_free(&hv), mm_tensor_free(&hg);
        }
        mm_tensor_free(&u), mm_tensor_free(&gu), pfree(&o);
    }
    mm_tensor_free(&qkv), mm_tensor_free(&gqkv), mm_tensor_free(&cs), mm_tensor_free(&sn), mm_tensor_free(&gcs);
    mm_tensor_free(&gsn);
    glue_restore();
}

static void test_vae_glue_generic(void) { vae_glue_case(false); }
static void test_vae_glue_vec(void) { vae_glue_case(true); }

static void test_elementwise(void);
static void test_norms(void);
static void test_modulation(void);
static void test_rope(void);

/* The older cases (bf16 DiT shapes, f32 tables, weights) run with the
 * default glue kernels (the 8-wide paths); here once more with the generic
 * ones, the policy's fallback. */
static void test_row_ops_glue_generic(void)
{
    set_glue(false);
    test_elementwise();
    test_norms();
    test_modulation();
    test_rope();
    glue_restore();
}

static void attn_case_t(mm_dtype t, int64_t S, int64_t HQ, int64_t HKV, int64_t Dh, bool causal, const int32_t *segs,
                        int nseg, double tol)
{
    int64_t W = (HQ + 2 * HKV) * Dh;
    mm_tensor qkv = R(t, SH(S, W), 2), gqkv = G(&qkv);
    mm_tensor qv[2], kv[2], vv[2];
    const mm_tensor *src[2] = {&qkv, &gqkv};
    for (int i = 0; i < 2; i++) {
        mm_tensor a = mm_tensor_narrow(src[i], 1, 0, HQ * Dh), b = mm_tensor_narrow(src[i], 1, HQ * Dh, HKV * Dh);
        mm_tensor c = mm_tensor_narrow(src[i], 1, (HQ + HKV) * Dh, HKV * Dh);
        qv[i] = mm_tensor_unflatten(&a, 1, 2, MM_SHAPE(HQ, Dh));
        kv[i] = mm_tensor_unflatten(&b, 1, 2, MM_SHAPE(HKV, Dh));
        vv[i] = mm_tensor_unflatten(&c, 1, 2, MM_SHAPE(HKV, Dh));
    }
    pair o = OUT(t, SH(S, HQ, Dh));
    mm_attn_params p = {0, causal, segs, nseg};
    mm_attention(cpu, &o.c, &qv[0], &kv[0], &vv[0], &p), mm_attention(gpu, &o.g, &qv[1], &kv[1], &vv[1], &p);
    char what[112];
    snprintf(what, sizeof what, "attention %s S=%lld H=%lld/%lld D=%lld causal=%d segs=%d", mm_dtype_name(t),
             (long long)S, (long long)HQ, (long long)HKV, (long long)Dh, causal, nseg);
    if (ctx_ok(what))
        cmpg(what, &o.c, &o.g, REL, tol, 0);
    mm_tensor_free(&qkv), mm_tensor_free(&gqkv), pfree(&o);
}

static void attn_case(int64_t S, int64_t HQ, int64_t HKV, int64_t Dh, bool causal, const int32_t *segs, int nseg)
{
    attn_case_t(MM_BF16, S, HQ, HKV, Dh, causal, segs, nseg, 8e-3);
}

static void test_attention(void)
{
    attn_case(200, 4, 4, 128, false, NULL, 0);
    attn_case(150, 8, 2, 128, true, NULL, 0);
    static const int32_t segs[] = {0, 70, 71, 200};
    attn_case(200, 2, 2, 128, false, segs, 3);
    attn_case(200, 3, 3, 72, false, segs, 3);
    attn_case(97, 2, 2, 64, true, NULL, 0);
    /* causal + packed sequences + GQA together, on every kernel family (the
     * default bf16 head-128 path, f16 tensor cores, the plain f32 kernel) */
    attn_case(200, 4, 2, 128, true, segs, 3);
    attn_case_t(MM_F16, 200, 4, 2, 64, true, segs, 3, 2e-3);
    attn_case_t(MM_F32, 200, 4, 2, 40, true, segs, 3, 1e-5);
}

/* The VAEs' attentions: f16 (tensor cores) with segments, head dim 256 causal, f32 (plain kernel). */
static void attn_dtype_case(mm_dtype t, int64_t S, int64_t H, int64_t Dh, bool causal, const int32_t *segs, int nseg,
                            double tol)
{
    mm_tensor q = R(t, SH(S, H, Dh), 2), k = R(t, SH(S, H, Dh), 2), v = R(t, SH(S, H, Dh), 1);
    mm_tensor gq = G(&q), gk = G(&k), gv = G(&v);
    pair o = OUT(t, SH(S, H, Dh));
    mm_attn_params p = {0, causal, segs, nseg};
    mm_attention(cpu, &o.c, &q, &k, &v, &p), mm_attention(gpu, &o.g, &gq, &gk, &gv, &p);
    char what[96];
    snprintf(what, sizeof what, "attention %s S=%lld H=%lld D=%lld causal=%d segs=%d", mm_dtype_name(t), (long long)S,
             (long long)H, (long long)Dh, causal, nseg);
    if (ctx_ok(what))
        cmpg(what, &o.c, &o.g, REL, tol, 0);
    mm_tensor_free(&q), mm_tensor_free(&k), mm_tensor_free(&v), mm_tensor_free(&gq), mm_tensor_free(&gk);
    mm_tensor_free(&gv), pfree(&o);
}

static void test_attention_vae_shapes(void)
{
    static const int32_t segs[] = {0, 90, 180, 260};
    attn_dtype_case(MM_F16, 260, 2, 64, false, segs, 3, 2e-3);
    attn_dtype_case(MM_BF16, 150, 2, 256, true, NULL, 0, 8e-3);
    attn_dtype_case(MM_F32, 120, 2, 256, true, NULL, 0, 1e-5);
    attn_dtype_case(MM_F32, 100, 3, 40, false, NULL, 0, 1e-5);
}

static void test_gemm(void)
{
    int64_t M = 77, K = 96, N = 136;
    mm_tensor a = R(MM_BF16, SH(M, K), 1), w = R(MM_BF16, SH(N, K), 0.2), bias = R(MM_BF16, SH(N), 1);
    mm_tensor ga = G(&a), gw = G(&w), gbias = G(&bias);
    mm_tensor wt = mm_tensor_transpose(&w, 0, 1), gwt = mm_tensor_transpose(&gw, 0, 1);
    pair o = OUT(MM_BF16, SH(M, N)), of = OUT(MM_F32, SH(M, N)), oh = OUT(MM_F16, SH(M, N));
    mm_matmul(cpu, &o.c, &a, &wt, &bias), mm_matmul(gpu, &o.g, &ga, &gwt, &gbias);
    mm_matmul(cpu, &of.c, &a, &wt, &bias), mm_matmul(gpu, &of.g, &ga, &gwt, &gbias);
    mm_matmul(cpu, &oh.c, &a, &wt, NULL), mm_matmul(gpu, &oh.g, &ga, &gwt, NULL); /* bf16 -> f16: scratch path */
    if (ctx_ok("gemm bf16")) {
        cmpg("linear bf16 + bias -> bf16", &o.c, &o.g, ULP, 1, 0.05);
        cmpg("linear bf16 + bias -> f32", &of.c, &of.g, ULP, 64, 1);
        cmpg("linear bf16 -> f16", &oh.c, &oh.g, ULP, 1, 0.05);
    }
    /* f32, row-major b, alpha/beta with an f32 bias of another layout */
    mm_tensor a32 = R(MM_F32, SH(M, K), 1), b32 = R(MM_F32, SH(K, N), 1), bb = R(MM_F32, SH(N), 1);
    mm_tensor ga32 = G(&a32), gb32 = G(&b32), gbb = G(&bb);
    pair y = OUT(MM_F32, SH(M, N));
    mm_tensor y0 = R(MM_F32, SH(M, N), 1);
    mm_copy(cpu, &y.c, &y0), mm_copy(gpu, &y.g, &y0);
    mm_gemm(cpu, &y.c, &a32, &b32, &bb, 0.5f, 1.0f), mm_gemm(gpu, &y.g, &ga32, &gb32, &gbb, 0.5f, 1.0f);
    if (ctx_ok("gemm f32"))
        cmpg("gemm f32 alpha/beta/bias", &y.c, &y.g, ULP, 64, 4);
    /* batched, shared weight, transposed a */
    int64_t B = 3;
    mm_tensor ab = R(MM_BF16, SH(B, K, M), 1), gab = G(&ab);
    mm_tensor abt = mm_tensor_transpose(&ab, 1, 2), gabt = mm_tensor_transpose(&gab, 1, 2);
    pair yb = OUT(MM_F32, SH(B, M, N));
    mm_matmul(cpu, &yb.c, &abt, &wt, NULL), mm_matmul(gpu, &yb.g, &gabt, &gwt, NULL);
    if (ctx_ok("gemm batched"))
        cmpg("batched, transposed a", &yb.c, &yb.g, ULP, 64, 1);
    mm_tensor_free(&a), mm_tensor_free(&w), mm_tensor_free(&bias), mm_tensor_free(&ga), mm_tensor_free(&gw);
    mm_tensor_free(&gbias), pfree(&o), pfree(&of), pfree(&oh), mm_tensor_free(&a32), mm_tensor_free(&b32);
    mm_tensor_free(&bb), mm_tensor_free(&ga32), mm_tensor_free(&gb32), mm_tensor_free(&gbb), pfree(&y);
    mm_tensor_free(&y0), mm_tensor_free(&ab), mm_tensor_free(&gab), pfree(&yb);
}

static void test_convrot_and_i8(void)
{
    /* fast path: group 256, bf16, the DiT's K */
    int64_t Rr = 33, K = 5376;
    mm_tensor x = R(MM_BF16, SH(Rr, K), 3);
    for (int64_t c = 0; c < K; c++) /* a zero row */
        ((uint16_t *)x.data)[7 * K + c] = 0;
    for (int64_t c = 0; c < K; c += 97) /* outliers */
        ((uint16_t *)x.data)[c] = mm_f32_to_bf16(150.f);
    mm_tensor gx = G(&x);
    pair q = OUT(MM_I8, SH(Rr, K)), s = OUT(MM_F32, SH(Rr));
    mm_convrot_quantize(cpu, &q.c, &s.c, &x, 256), mm_convrot_quantize(gpu, &q.g, &s.g, &gx, 256);
    if (ctx_ok("convrot bf16")) {
        cmpg("convrot codes (bf16, group 256)", &q.c, &q.g, EXACT, 0, 0);
        cmpg("convrot scales", &s.c, &s.g, EXACT, 0, 0);
    }
    /* generic path: f32, group 64; and the plain rotation */
    mm_tensor x2 = R(MM_F32, SH(9, 320), 2), gx2 = G(&x2);
    pair q2 = OUT(MM_I8, SH(9, 320)), s2 = OUT(MM_F32, SH(9, 1)), r2 = OUT(MM_BF16, SH(9, 320));
    mm_convrot_quantize(cpu, &q2.c, &s2.c, &x2, 64), mm_convrot_quantize(gpu, &q2.g, &s2.g, &gx2, 64);
    mm_hadamard_rotate(cpu, &r2.c, &x2, 16), mm_hadamard_rotate(gpu, &r2.g, &gx2, 16);
    if (ctx_ok("convrot f32")) {
        cmpg("convrot codes (f32, group 64)", &q2.c, &q2.g, EXACT, 0, 0);
        cmpg("convrot scales (f32)", &s2.c, &s2.g, EXACT, 0, 0);
        cmpg("hadamard rotate group 16", &r2.c, &r2.g, EXACT, 0, 0);
    }
    /* W8A8 GEMM with the scaled epilogue, on the codes just made */
    int64_t N = 72;
    mm_tensor wq = R(MM_I8, SH(N, K), 1), sw = R(MM_F32, SH(N, 1), 0.01), bias = R(MM_BF16, SH(N), 1);
    mm_tensor gwq = G(&wq), gsw = G(&sw), gbias = G(&bias);
    pair y = OUT(MM_BF16, SH(Rr, N)), yf = OUT(MM_F32, SH(Rr, N));
    mm_gemm_i8_scaled(cpu, &y.c, &q.c, &s.c, &wq, &sw, &bias);
    mm_gemm_i8_scaled(gpu, &y.g, &q.g, &s.g, &gwq, &gsw, &gbias);
    mm_gemm_i8_scaled(cpu, &yf.c, &q.c, &s.c, &wq, &sw, NULL);
    mm_gemm_i8_scaled(gpu, &yf.g, &q.g, &s.g, &gwq, &gsw, NULL);
    if (ctx_ok("gemm_i8_scaled")) {
        cmpg("int8 GEMM + epilogue -> bf16 (+bias)", &y.c, &y.g, EXACT, 0, 0);
        cmpg("int8 GEMM + epilogue -> f32", &yf.c, &yf.g, EXACT, 0, 0);
    }
    mm_tensor_free(&x), mm_tensor_free(&gx), pfree(&q), pfree(&s), mm_tensor_free(&x2), mm_tensor_free(&gx2);
    pfree(&q2), pfree(&s2), pfree(&r2), mm_tensor_free(&wq), mm_tensor_free(&sw), mm_tensor_free(&bias);
    mm_tensor_free(&gwq), mm_tensor_free(&gsw), mm_tensor_free(&gbias), pfree(&y), pfree(&yf);
}

/* One nvfp4 decode, CPU against GPU, bit for bit (EXACT alone would let
 * -0 and +0 pass). misalign > 0 puts the GPU output that many elements past
 * an aligned address, which takes the general one-byte-per-thread kernel
 * instead of the 128-bit one. */
static void nvfp4_case(int64_t N, int64_t K, mm_dtype t, int64_t misalign)
{
    mm_tensor packed = T_alloc(mm_cpu(), MM_U8, SH(N, K / 2)), sc = T_alloc(mm_cpu(), MM_F8_E4M3, SH(N, K / 16));
    for (int64_t i = 0; i < N * K / 2; i++)
        ((uint8_t *)packed.data)[i] = (uint8_t)cuda_test_next(&rng);
    for (int64_t i = 0; i < N * K / 16; i++) { /* every e4m3 code but the NaNs: zero, subnormals, negatives */
        uint8_t b = (uint8_t)cuda_test_next(&rng);
        ((uint8_t *)sc.data)[i] = (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b;
    }
    mm_tensor gp = G(&packed), gs = G(&sc);
    mm_tensor c = T_alloc(mm_cpu(), t, SH(N, K)), buf = T_alloc(mm_cuda(0), t, SH(N * K + misalign));
    mm_fill(gpu, &buf, NAN);
    mm_tensor g = mm_tensor_wrap((char *)buf.data + mm_dtype_nbytes(t, misalign), mm_cuda(0), t, SH(N, K));
    mm_nvfp4_dequantize(cpu, &c, &packed, &sc, 0.0123f), mm_nvfp4_dequantize(gpu, &g, &gp, &gs, 0.0123f);
    char what[96];
    snprintf(what, sizeof what, "nvfp4 [%lld, %lld] -> %s%s", (long long)N, (long long)K, mm_dtype_name(t),
             misalign ? " (unaligned output)" : "");
    if (ctx_ok(what)) {
        mm_tensor h = D(&g);
        cmp(what, &c, &h, EXACT, 0, 0);
        MM_EXPECT(memcmp(h.data, c.data, mm_dtype_nbytes(t, N * K)) == 0, "%s: not bit-identical", what);
        mm_tensor_free(&h);
    }
    mm_tensor_free(&packed), mm_tensor_free(&sc), mm_tensor_free(&gp), mm_tensor_free(&gs);
    mm_tensor_free(&c), mm_tensor_free(&buf);
}

static void test_nvfp4_and_embedding(void)
{
    /* K = 320: five 4-block scale tiles per row (not a multiple of 256); three 128-row tiles */
    nvfp4_case(256, 128, MM_BF16, 0);
    nvfp4_case(256, 128, MM_F32, 0);
    nvfp4_case(384, 320, MM_BF16, 0);
    nvfp4_case(384, 320, MM_F16, 0);
    nvfp4_case(384, 320, MM_F32, 0);
    nvfp4_case(384, 320, MM_BF16, 1);
    nvfp4_case(128, 64, MM_F32, 3);
    int64_t V = 500, Dm = 96, n = 31;
    mm_tensor tab = R(MM_I8, SH(V, Dm), 1), ts = R(MM_F32, SH(V, 1), 0.01), ids = R(MM_I32, SH(n), 1);
    for (int i = 0; i < n; i++)
        ((int32_t *)ids.data)[i] = (int32_t)(cuda_test_next(&rng) % V);
    mm_tensor gt = G(&tab), gts = G(&ts), gid = G(&ids);
    pair e = OUT(MM_BF16, SH(n, Dm));
    mm_embedding_i8(cpu, &e.c, &ids, &tab, &ts), mm_embedding_i8(gpu, &e.g, &gid, &gt, &gts);
    if (ctx_ok("embedding"))
        cmpg("int8 embedding", &e.c, &e.g, EXACT, 0, 0);
    /* gather / scatter / scatter-add */
    mm_tensor src = R(MM_F32, SH(n, 3, 4), 1), gsrc = G(&src);
    int64_t Vr = 64;
    mm_tensor perm = R(MM_I32, SH(n), 1);
    for (int i = 0; i < n; i++)
        ((int32_t *)perm.data)[i] = (int32_t)((i * 37 + 5) % Vr); /* distinct */
    mm_tensor gperm = G(&perm);
    mm_tensor big = R(MM_BF16, SH(Vr, 3, 4), 1), gbig = G(&big);
    pair ga = OUT(MM_F32, SH(n, 3, 4));
    mm_gather_rows(cpu, &ga.c, &big, &perm), mm_gather_rows(gpu, &ga.g, &gbig, &gperm);
    mm_scatter_add_rows(cpu, &big, &src, &perm), mm_scatter_add_rows(gpu, &gbig, &gsrc, &gperm);
    if (ctx_ok("gather/scatter")) {
        cmpg("gather_rows", &ga.c, &ga.g, EXACT, 0, 0);
        cmpg("scatter_add_rows", &big, &gbig, EXACT, 0, 0);
    }
    mm_scatter_rows(cpu, &big, &src, &perm), mm_scatter_rows(gpu, &gbig, &gsrc, &gperm);
    if (ctx_ok("scatter"))
        cmpg("scatter_rows", &big, &gbig, EXACT, 0, 0);
    mm_tensor_free(&tab), mm_tensor_free(&ts), mm_tensor_free(&ids), mm_tensor_free(&gt), mm_tensor_free(&gts);
    mm_tensor_free(&gid), pfree(&e), mm_tensor_free(&src), mm_tensor_free(&gsrc), mm_tensor_free(&perm);
    mm_tensor_free(&gperm), mm_tensor_free(&big), mm_tensor_free(&gbig), pfree(&ga);
}

static void test_conv(void)
{
    /* conv1d: groups 2, dilation 2, stride 2, asymmetric padding */
    mm_tensor x = R(MM_F32, SH(2, 6, 50), 1), w = R(MM_F32, SH(4, 3, 5), 1), b = R(MM_BF16, SH(4), 1);
    mm_tensor gx = G(&x), gw = G(&w), gb = G(&b);
    mm_conv_params p = {{2}, {2}, {{3, 1}}, 2, {0}};
    int64_t lo = (50 + 4 - 2 * 4 - 1) / 2 + 1;
    pair o = OUT(MM_F32, SH(2, 4, lo));
    mm_conv1d(cpu, &o.c, &x, &w, &b, &p), mm_conv1d(gpu, &o.g, &gx, &gw, &gb, &p);
    if (ctx_ok("conv1d"))
        cmpg("conv1d groups/dilation/stride/pad", &o.c, &o.g, ULP, 64, 4);
    /* transposed conv1d: stride 2, pad 1/1, output_pad 1, groups 2 */
    mm_tensor wt = R(MM_F32, SH(6, 2, 4), 1), gwt = G(&wt);
    mm_conv_params pt = {{2}, {1}, {{1, 1}}, 2, {1}};
    int64_t lt = (50 - 1) * 2 - 2 + 3 + 1 + 1;
    pair ot = OUT(MM_BF16, SH(2, 4, lt));
    mm_conv_transpose1d(cpu, &ot.c, &x, &wt, &b, &pt), mm_conv_transpose1d(gpu, &ot.g, &gx, &gwt, &gb, &pt);
    if (ctx_ok("conv_transpose1d"))
        cmpg("conv_transpose1d", &ot.c, &ot.g, ULP, 1, 0.05);
    /* conv3d: causal-style time padding, stride (1, 2, 2), bf16 in */
    mm_tensor x3 = R(MM_BF16, SH(1, 5, 4, 9, 11), 1), w3 = R(MM_BF16, SH(7, 5, 3, 3, 3), 0.3);
    mm_tensor gx3 = G(&x3), gw3 = G(&w3);
    mm_conv_params p3 = {{1, 2, 2}, {1, 1, 1}, {{2, 0}, {1, 1}, {1, 1}}, 1, {0}};
    pair o3 = OUT(MM_F32, SH(1, 7, 4, 5, 6));
    mm_conv3d(cpu, &o3.c, &x3, &w3, NULL, &p3), mm_conv3d(gpu, &o3.g, &gx3, &gw3, NULL, &p3);
    if (ctx_ok("conv3d"))
        cmpg("conv3d", &o3.c, &o3.g, ULP, 64, 4);
    /* groups 1: the im2col + GEMM path (bf16 with K = 8·27, and f32 conv1d) */
    mm_tensor x4 = R(MM_BF16, SH(2, 8, 3, 12, 10), 1), w4 = R(MM_BF16, SH(16, 8, 3, 3, 3), 0.3), b4 = R(MM_F32, SH(16), 1);
    mm_tensor gx4 = G(&x4), gw4 = G(&w4), gb4 = G(&b4);
    mm_conv_params p4 = {{1, 2, 1}, {1, 1, 2}, {{1, 1}, {1, 0}, {2, 2}}, 1, {0}};
    pair o4 = OUT(MM_BF16, SH(2, 16, 3, 6, 10));
    mm_conv3d(cpu, &o4.c, &x4, &w4, &b4, &p4), mm_conv3d(gpu, &o4.g, &gx4, &gw4, &gb4, &p4);
    mm_tensor w5 = R(MM_F32, SH(5, 6, 3), 1), gw5 = G(&w5), b5 = R(MM_BF16, SH(5), 1), gb5 = G(&b5);
    mm_conv_params p5 = {{1}, {3}, {{2, 4}}, 1, {0}};
    pair o5 = OUT(MM_F32, SH(2, 5, 50));
    mm_conv1d(cpu, &o5.c, &x, &w5, &b5, &p5), mm_conv1d(gpu, &o5.g, &gx, &gw5, &gb5, &p5);
    if (ctx_ok("conv via GEMM")) {
        cmpg("conv3d via im2col + GEMM", &o4.c, &o4.g, ULP, 1, 0.05);
        cmpg("conv1d via im2col + GEMM (f32)", &o5.c, &o5.g, ULP, 64, 4);
    }
    mm_tensor_free(&x4), mm_tensor_free(&w4), mm_tensor_free(&b4), mm_tensor_free(&gx4), mm_tensor_free(&gw4);
    mm_tensor_free(&gb4), pfree(&o4), mm_tensor_free(&w5), mm_tensor_free(&gw5), pfree(&o5);
    mm_tensor_free(&b5), mm_tensor_free(&gb5);
    mm_tensor_free(&x), mm_tensor_free(&w), mm_tensor_free(&b), mm_tensor_free(&gx), mm_tensor_free(&gw);
    mm_tensor_free(&gb), pfree(&o), mm_tensor_free(&wt), mm_tensor_free(&gwt), pfree(&ot), mm_tensor_free(&x3);
    mm_tensor_free(&w3), mm_tensor_free(&gx3), mm_tensor_free(&gw3), pfree(&o3);
}

static void test_pad_interpolate(void)
{
    mm_tensor x = R(MM_BF16, SH(2, 3, 5, 6), 2), gx = G(&x);
    const int pads[4][2] = {{0, 0}, {1, 0}, {2, 1}, {1, 3}};
    for (int mode = MM_PAD_CONSTANT; mode <= MM_PAD_REPLICATE; mode++) {
        pair o = OUT(MM_BF16, SH(2, 4, 8, 10));
        mm_pad(cpu, &o.c, &x, pads, (mm_pad_mode)mode, 0.75f), mm_pad(gpu, &o.g, &gx, pads, (mm_pad_mode)mode, 0.75f);
        if (ctx_ok("pad"))
            cmpg("pad", &o.c, &o.g, EXACT, 0, 0);
        pfree(&o);
    }
    mm_tensor xi = R(MM_F32, SH(2, 3, 5, 6), 2), gxi = G(&xi);
    for (int c = 0; c < 3; c++) {
        mm_interp mode = c == 0 ? MM_INTERP_NEAREST : MM_INTERP_LINEAR;
        bool align = c == 2;
        pair o = OUT(MM_F32, SH(2, 3, 11, 7));
        mm_interpolate(cpu, &o.c, &xi, 2, mode, align), mm_interpolate(gpu, &o.g, &gxi, 2, mode, align);
        if (ctx_ok("interpolate"))
            cmpg("interpolate", &o.c, &o.g, EXACT, 0, 0);
        pfree(&o);
    }
    mm_tensor_free(&x), mm_tensor_free(&gx), mm_tensor_free(&xi), mm_tensor_free(&gxi);
}

/* The fused DiT paths of backend/fused.h against the CPU composition they stand for. */
static void codes_close(const char *what, const mm_tensor *qc, const mm_tensor *qg_dev, double max_frac)
{
    mm_tensor qg = D(qg_dev);
    const int8_t *a = qc->data, *b = qg.data;
    int64_t n = mm_tensor_numel(qc), off = 0, far = 0;
    for (int64_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        off += d != 0;
        far += d > 1;
    }
    MM_EXPECT(far == 0 && off <= max_frac * n, "%s: %lld codes differ (%lld by more than one) of %lld", what,
              (long long)off, (long long)far, (long long)n);
    mm_tensor_free(&qg);
}

static void fused_case(int64_t Rr, int64_t K, int64_t Tn)
{
    mm_tensor x = R(MM_BF16, SH(Rr, K), 3), w = R(MM_BF16, SH(K), 1), tab = R(MM_BF16, SH(Tn, 6 * K), 0.5);
    mm_tensor idx = R(MM_I32, SH(Rr), 1);
    for (int i = 0; i < Rr; i++)
        ((int32_t *)idx.data)[i] = (int32_t)(cuda_test_next(&rng) % Tn);
    mm_tensor gx = G(&x), gw = G(&w), gt = G(&tab), gi = G(&idx);
    mm_tensor sh = mm_tensor_narrow(&tab, 1, 0, K), sc = mm_tensor_narrow(&tab, 1, K, K);
    mm_tensor gsh = mm_tensor_narrow(&gt, 1, 0, K), gsc = mm_tensor_narrow(&gt, 1, K, K);
    /* RMSNorm + modulation + ConvRot */
    pair h = OUT(MM_BF16, SH(Rr, K)), q = OUT(MM_I8, SH(Rr, K)), sq = OUT(MM_F32, SH(Rr));
    mm_rmsnorm_modulate(cpu, &h.c, &x, &w, 1e-5f, &sc, &sh, &idx);
    mm_convrot_quantize(cpu, &q.c, &sq.c, &h.c, 256);
    mm_fused_rmsnorm_modulate_convrot(gpu, &q.g, &sq.g, &h.g, &gx, &gw, 1e-5f, &gsc, &gsh, &gi);
    if (ctx_ok("rmsnorm_modulate_convrot")) {
        codes_close("rmsnorm+mod+convrot codes", &q.c, &q.g, 2e-3);
        cmpg("rmsnorm+mod+convrot scales", &sq.c, &sq.g, ULP, 256, 0);
        cmpg("rmsnorm+mod+convrot h (the LoRA branch's input)", &h.c, &h.g, ULP, 1, 0);
    }
    /* SwiGLU + ConvRot: no reduction before the rounding, so exact */
    mm_tensor gu = R(MM_BF16, SH(Rr, 2 * K), 3), ggu = G(&gu);
    mm_tensor g1 = mm_tensor_narrow(&gu, 1, 0, K), u1 = mm_tensor_narrow(&gu, 1, K, K);
    pair h2 = OUT(MM_BF16, SH(Rr, K)), q2 = OUT(MM_I8, SH(Rr, K)), s2 = OUT(MM_F32, SH(Rr));
    mm_glu(cpu, &h2.c, &g1, &u1, MM_ACT_SILU);
    mm_convrot_quantize(cpu, &q2.c, &s2.c, &h2.c, 256);
    mm_fused_swiglu_convrot(gpu, &q2.g, &s2.g, &h2.g, &ggu);
    if (ctx_ok("swiglu_convrot")) {
        codes_close("swiglu+convrot codes", &q2.c, &q2.g, 1e-3);
        cmpg("swiglu+convrot scales", &s2.c, &s2.g, ULP, 2, 0);
        cmpg("swiglu+convrot h (the LoRA branch's input)", &h2.c, &h2.g, ULP, 1, 0);
    }
    /* int8 GEMM with the gated residual: exact */
    int64_t N = 136;
    mm_tensor wq = R(MM_I8, SH(N, K), 1), sw = R(MM_F32, SH(N), 0.01), res = R(MM_BF16, SH(Rr, N), 2);
    mm_tensor gtab = R(MM_BF16, SH(Tn, N), 1);
    mm_tensor gwq = G(&wq), gsw = G(&sw), gres = G(&res), ggtab = G(&gtab);
    pair y = OUT(MM_BF16, SH(Rr, N));
    mm_gemm_i8_scaled(cpu, &y.c, &q2.c, &s2.c, &wq, &sw, NULL);
    mm_gated_residual(cpu, &res, &y.c, &gtab, &idx);
    mm_tensor cq2 = G(&q2.c), cs2 = G(&s2.c); /* the same codes on both sides */
    mm_fused_gemm_i8_scaled_gated(gpu, &gres, &cq2, &cs2, &gwq, &gsw, &ggtab, &gi);
    if (ctx_ok("gemm_i8_scaled_gated"))
        cmpg("int8 GEMM + gated residual", &res, &gres, EXACT, 0, 0);
    /* q/k RMSNorm + RoPE in one pass on views of a fused qkv buffer */
    int64_t S = 19, H = 4, Dh = 128, rot = 96;
    mm_tensor qkv = R(MM_BF16, SH(S, 3 * H * Dh), 3), gqkv = G(&qkv);
    mm_tensor wqn = R(MM_BF16, SH(Dh), 1), wkn = R(MM_F32, SH(Dh), 1), cs = R(MM_BF16, SH(S, rot), 1);
    mm_tensor sn = R(MM_BF16, SH(S, rot), 1);
    mm_tensor gwqn = G(&wqn), gwkn = G(&wkn), gcs = G(&cs), gsn = G(&sn);
    mm_tensor v[2][2];
    mm_tensor *bufs[2] = {&qkv, &gqkv};
    for (int i = 0; i < 2; i++) {
        mm_tensor a = mm_tensor_narrow(bufs[i], 1, 0, H * Dh), b = mm_tensor_narrow(bufs[i], 1, H * Dh, H * Dh);
        v[i][0] = mm_tensor_unflatten(&a, 1, 2, MM_SHAPE(H, Dh));
        v[i][1] = mm_tensor_unflatten(&b, 1, 2, MM_SHAPE(H, Dh));
    }
    mm_rmsnorm(cpu, &v[0][0], &v[0][0], &wqn, 1e-5f), mm_rmsnorm(cpu, &v[0][1], &v[0][1], &wkn, 1e-5f);
    mm_rope(cpu, &v[0][0], &v[0][0], &cs, &sn, (int)rot), mm_rope(cpu, &v[0][1], &v[0][1], &cs, &sn, (int)rot);
    mm_fused_qk_rmsnorm_rope(gpu, &v[1][0], &v[1][1], &gwqn, &gwkn, 1e-5f, &gcs, &gsn, (int)rot);
    if (ctx_ok("qk_rmsnorm_rope"))
        cmpg("q/k RMSNorm + RoPE fused (v untouched)", &qkv, &gqkv, ULP, 2, 0.05);
    mm_tensor_free(&x), mm_tensor_free(&w), mm_tensor_free(&tab), mm_tensor_free(&idx), mm_tensor_free(&gx);
    mm_tensor_free(&gw), mm_tensor_free(&gt), mm_tensor_free(&gi), pfree(&h), pfree(&q), pfree(&sq);
    mm_tensor_free(&gu), mm_tensor_free(&ggu), pfree(&h2), pfree(&q2), pfree(&s2), mm_tensor_free(&wq);
    mm_tensor_free(&sw), mm_tensor_free(&res), mm_tensor_free(&gtab), mm_tensor_free(&gwq), mm_tensor_free(&gsw);
    mm_tensor_free(&gres), mm_tensor_free(&ggtab), pfree(&y), mm_tensor_free(&qkv), mm_tensor_free(&gqkv);
    mm_tensor_free(&cq2), mm_tensor_free(&cs2);
    mm_tensor_free(&wqn), mm_tensor_free(&wkn), mm_tensor_free(&cs), mm_tensor_free(&sn), mm_tensor_free(&gwqn);
    mm_tensor_free(&gwkn), mm_tensor_free(&gcs), mm_tensor_free(&gsn);
}

/* K = 512 (a whole warp of threads per row) and the DiT's K = 5376 (21
 * groups of 256: the last warp only half active). */
static void test_fused_dit_paths(void)
{
    fused_case(21, 512, 3);
    fused_case(9, 5376, 2);
}

static void test_unsupported_fails_loudly(void)
{
    mm_tensor q = R(MM_F16, SH(8, 2, 64), 1), gq = G(&q);
    pair o = OUT(MM_F32, SH(8, 2, 64));
    mm_attention(gpu, &o.g, &gq, &gq, &gq, NULL);
    mm_error e = {{0}};
    MM_EXPECT(mm_ctx_sync(gpu, &e) == -1 && strstr(e.msg, "dtype of q"), "f16 -> f32 attention on CUDA: %s", e.msg);
    mm_ctx_clear_error(gpu);
    mm_tensor_free(&q), mm_tensor_free(&gq), pfree(&o);
}

int main(void)
{
    cuda_test_require_gpu("test_cuda_ops");
    mm_error e = {{0}};
    if (mm_ctx_create(&cpu, mm_cpu(), 0, &e) || mm_ctx_create(&gpu, mm_cuda(0), 0, &e)) {
        printf("FAIL contexts: %s\n", e.msg);
        return 1;
    }
    CUDA_CASE(test_copy_convert_fill);
    CUDA_CASE(test_strided_copies);
    CUDA_CASE(test_elementwise);
    CUDA_CASE(test_norms);
    CUDA_CASE(test_groupnorm);
    CUDA_CASE(test_modulation);
    CUDA_CASE(test_rope);
    CUDA_CASE(test_vae_glue_generic);
    CUDA_CASE(test_vae_glue_vec);
    CUDA_CASE(test_row_ops_glue_generic);
    CUDA_CASE(test_attention);
    CUDA_CASE(test_attention_vae_shapes);
    CUDA_CASE(test_gemm);
    CUDA_CASE(test_convrot_and_i8);
    CUDA_CASE(test_nvfp4_and_embedding);
    CUDA_CASE(test_conv);
    CUDA_CASE(test_pad_interpolate);
    CUDA_CASE(test_fused_dit_paths);
    CUDA_CASE(test_unsupported_fails_loudly);
    mm_ctx_destroy(cpu);
    mm_ctx_destroy(gpu);
    return mm_test_exit();
}
