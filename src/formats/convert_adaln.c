/* The pruned AdaLN from a full model (convert.h, dit.md §2.2, §4.5): the
 * AdaLN input curve c(t) = SiLU(time_mlp(sinusoid(t))) on the table's grid,
 * its mean and its top principal directions.
 *
 * All in double from the stored (f32 in the release) time MLP. The
 * principal directions come from the small Gram matrix G = C·Cᵀ of the
 * centred grid points (points × points) by subspace iteration with
 * Rayleigh–Ritz steps (a cyclic Jacobi solve of the small projected
 * problem): the curve is smooth in t, so G's spectrum falls off fast and a
 * few dozen iterations settle the leading pairs to rounding. No LAPACK: this
 * one small symmetric eigenproblem is all the converter needs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/convert_internal.h"

static double silu(double x) { return x / (1.0 + exp(-x)); }

/* c(t) for every grid point: [points, dim]. */
static int curve(cv_source *s, int points, double **out, int *dim_out, mm_error *err)
{
    cv_tensor *w1 = cv_find(s, "time_embedder.proj_in.weight"), *b1 = cv_find(s, "time_embedder.proj_in.bias");
    cv_tensor *w2 = cv_find(s, "time_embedder.proj_out.weight"), *b2 = cv_find(s, "time_embedder.proj_out.bias");
    if (!w1 || !w2 || !b1 || !b2)
        return mm_fail(err, "the time MLP (time_embedder.proj_in / proj_out weight and bias) is incomplete");
    const int64_t freq = w1->cols, hidden = w1->rows, dim = w2->rows;
    if (freq % 2 || w2->cols != hidden || b1->rows != hidden || b2->rows != dim || b1->cols != 1 || b2->cols != 1)
        return mm_fail(err, "time MLP shapes do not chain: proj_in [%lld, %lld], proj_out [%lld, %lld]",
                       (long long)hidden, (long long)freq, (long long)w2->rows, (long long)w2->cols);
    w1->used = w2->used = b1->used = b2->used = true;
    float *fw1 = malloc(sizeof(float) * (size_t)(hidden * freq)), *fw2 = malloc(sizeof(float) * (size_t)(dim * hidden));
    float *fb1 = malloc(sizeof(float) * (size_t)hidden), *fb2 = malloc(sizeof(float) * (size_t)dim);
    double *c = malloc(sizeof(double) * (size_t)(points * dim)), *emb = malloc(sizeof(double) * (size_t)freq);
    double *h = malloc(sizeof(double) * (size_t)hidden);
    int rc = -1;
    if (!fw1 || !fw2 || !fb1 || !fb2 || !c || !emb || !h) {
        mm_fail(err, "out of memory for the time MLP");
        goto done;
    }
    if (cv_read_rows(s, w1, 0, hidden, fw1, err) || cv_read_rows(s, w2, 0, dim, fw2, err) ||
        cv_read_rows(s, b1, 0, hidden, fb1, err) || cv_read_rows(s, b2, 0, dim, fb2, err))
        goto done;
    const int64_t half = freq / 2;
    for (int k = 0; k < points; k++) {
        /* t unscaled in [0, 1]; frequencies exp(−ln(10000)·i/half); cos first */
        const double t = (double)k / (points - 1);
        for (int64_t i = 0; i < half; i++) {
            double f = exp(-log(10000.0) * (double)i / (double)half);
            emb[i] = cos(t * f);
            emb[half + i] = sin(t * f);
        }
        for (int64_t j = 0; j < hidden; j++) {
            double acc = fb1[j];
            const float *w = fw1 + j * freq;
            for (int64_t i = 0; i < freq; i++)
                acc += w[i] * emb[i];
            h[j] = silu(acc);
        }
        for (int64_t j = 0; j < dim; j++) {
            double acc = fb2[j];
            const float *w = fw2 + j * hidden;
            for (int64_t i = 0; i < hidden; i++)
                acc += w[i] * h[i];
            c[(int64_t)k * dim + j] = silu(acc);
        }
    }
    *out = c;
    c = NULL;
    *dim_out = (int)dim;
    rc = 0;
done:
    free(fw1);
    free(fw2);
    free(fb1);
    free(fb2);
    free(c);
    free(emb);
    free(h);
    return rc;
}

/* Eigen-decomposition of a small symmetric matrix a [n, n] (destroyed):
 * values in w, vectors in the columns of v; cyclic Jacobi. */
static void jacobi(double *a, int n, double *w, double *v)
{
    for (int i = 0; i < n * n; i++)
        v[i] = i % (n + 1) == 0 ? 1.0 : 0.0;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, diag = 0;
        for (int p = 0; p < n; p++)
            for (int q = 0; q < n; q++) {
                double sq = a[p * n + q] * a[p * n + q];
                if (p == q)
                    diag += sq;
                else
                    off += sq;
            }
        if (off <= 1e-30 * diag || off == 0)
            break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (apq == 0)
                    continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < n; k++) {
                    double vkp = v[k * n + p], vkq = v[k * n + q];
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < n; i++)
        w[i] = a[i * n + i];
}

/* Orthonormalizes the m columns of x [n, m] (modified Gram–Schmidt, twice). */
static void orthonormalize(double *x, int64_t n, int m)
{
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < m; j++) {
            for (int i = 0; i < j; i++) {
                double d = 0;
                for (int64_t k = 0; k < n; k++)
                    d += x[k * m + i] * x[k * m + j];
                for (int64_t k = 0; k < n; k++)
                    x[k * m + j] -= d * x[k * m + i];
            }
            double nn = 0;
            for (int64_t k = 0; k < n; k++)
                nn += x[k * m + j] * x[k * m + j];
            nn = sqrt(nn);
            for (int64_t k = 0; k < n; k++)
                x[k * m + j] = nn > 0 ? x[k * m + j] / nn : 0;
        }
}

/* The leading `rank` eigenpairs of g [n, n] (symmetric positive semi-definite):
 * vectors u [n, rank], values lam [rank], descending. */
static int top_eigen(const double *g, int n, int rank, double *u, double *lam, mm_error *err)
{
    const int m = rank + 8 < n ? rank + 8 : n;
    double *x = malloc(sizeof(double) * (size_t)n * m), *y = malloc(sizeof(double) * (size_t)n * m);
    double *z = malloc(sizeof(double) * (size_t)n * m), *w2 = malloc(sizeof(double) * (size_t)n * m);
    double *small = malloc(sizeof(double) * (size_t)m * m), *vec = malloc(sizeof(double) * (size_t)m * m);
    double *w = malloc(sizeof(double) * (size_t)m), *prev = calloc((size_t)m, sizeof(double));
    int *order = malloc(sizeof(int) * (size_t)m);
    if (!x || !y || !z || !w2 || !small || !vec || !w || !prev || !order) {
        free(x), free(y), free(z), free(w2), free(small), free(vec), free(w), free(prev), free(order);
        return mm_fail(err, "out of memory for the AdaLN factorization");
    }
    uint64_t seed = 0x9E3779B97F4A7C15ull; /* a fixed start: the same file gives the same factors */
    for (int64_t i = 0; i < (int64_t)n * m; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (double)(seed >> 11) / 9007199254740992.0 - 0.5;
    }
    orthonormalize(x, n, m);
    /* y = g·x; then Rayleigh–Ritz on span(y): z = g·y, small = yᵀ·z, x = y·eigvecs (and g·x = z·eigvecs
     * starts the next iteration without another product by g) */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double acc = 0;
            for (int k = 0; k < n; k++)
                acc += g[(int64_t)i * n + k] * x[(int64_t)k * m + j];
            y[(int64_t)i * m + j] = acc;
        }
    for (int it = 0; it < 500; it++) {
        orthonormalize(y, n, m);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
                double acc = 0;
                for (int k = 0; k < n; k++)
                    acc += g[(int64_t)i * n + k] * y[(int64_t)k * m + j];
                z[(int64_t)i * m + j] = acc;
            }
        for (int a = 0; a < m; a++)
            for (int b = 0; b < m; b++) {
                double acc = 0;
                for (int i = 0; i < n; i++)
                    acc += y[(int64_t)i * m + a] * z[(int64_t)i * m + b];
                small[a * m + b] = acc;
            }
        for (int a = 0; a < m; a++) /* exactly symmetric for Jacobi */
            for (int b = a + 1; b < m; b++)
                small[a * m + b] = small[b * m + a] = 0.5 * (small[a * m + b] + small[b * m + a]);
        jacobi(small, m, w, vec);
        for (int j = 0; j < m; j++)
            order[j] = j;
        for (int a = 0; a < m; a++) /* descending */
            for (int b = a + 1; b < m; b++)
                if (w[order[b]] > w[order[a]]) {
                    int t = order[a];
                    order[a] = order[b];
                    order[b] = t;
                }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
                double ax = 0, az = 0;
                for (int k = 0; k < m; k++) {
                    ax += y[(int64_t)i * m + k] * vec[k * m + order[j]];
                    az += z[(int64_t)i * m + k] * vec[k * m + order[j]];
                }
                x[(int64_t)i * m + j] = ax;
                w2[(int64_t)i * m + j] = az;
            }
        memcpy(y, w2, sizeof(double) * (size_t)n * m); /* g·x */
        double change = 0;
        for (int j = 0; j < rank; j++) {
            double v = w[order[j]];
            change = fmax(change, fabs(v - prev[j]) / fmax(fabs(v), 1e-300));
            prev[j] = v;
        }
        if (it > 2 && change < 1e-14)
            break;
    }
    for (int j = 0; j < rank; j++) {
        lam[j] = prev[j] > 0 ? prev[j] : 0;
        for (int i = 0; i < n; i++)
            u[(int64_t)i * rank + j] = x[(int64_t)i * m + j];
    }
    free(x), free(y), free(z), free(w2), free(small), free(vec), free(w), free(prev), free(order);
    return 0;
}

int cv_adaln_factor(cv_source *s, int points, int rank, cv_adaln *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    double *c = NULL;
    int dim = 0;
    if (curve(s, points, &c, &dim, err) != 0)
        return -1;
    if (rank < 1 || rank > dim || rank > points)
        return free(c), mm_fail(err, "AdaLN rank %d: accepted 1..%d", rank, dim < points ? dim : points);
    out->rank = rank;
    out->points = points;
    out->dim = dim;
    out->mean = calloc((size_t)dim, sizeof(double));
    out->basis = calloc((size_t)dim * rank, sizeof(double));
    out->table = malloc(sizeof(float) * (size_t)points * rank);
    out->grid = malloc(sizeof(float) * (size_t)points * dim);
    double *g = malloc(sizeof(double) * (size_t)points * points), *u = malloc(sizeof(double) * (size_t)points * rank);
    double *lam = malloc(sizeof(double) * (size_t)rank);
    int rc = -1;
    if (!out->mean || !out->basis || !out->table || !out->grid || !g || !u || !lam) {
        mm_fail(err, "out of memory for the AdaLN factorization");
        goto done;
    }
    for (int64_t i = 0; i < (int64_t)points * dim; i++)
        out->grid[i] = (float)c[i];
    for (int k = 0; k < points; k++)
        for (int j = 0; j < dim; j++)
            out->mean[j] += c[(int64_t)k * dim + j] / points;
    for (int k = 0; k < points; k++)
        for (int j = 0; j < dim; j++)
            c[(int64_t)k * dim + j] -= out->mean[j];
    double trace = 0;
    for (int a = 0; a < points; a++)
        for (int b = a; b < points; b++) {
            const double *ra = c + (int64_t)a * dim, *rb = c + (int64_t)b * dim;
            double acc = 0;
            for (int j = 0; j < dim; j++)
                acc += ra[j] * rb[j];
            g[(int64_t)a * points + b] = g[(int64_t)b * points + a] = acc;
            if (a == b)
                trace += acc;
        }
    if (top_eigen(g, points, rank, u, lam, err) != 0)
        goto done;
    double kept = 0;
    for (int i = 0; i < rank; i++) {
        /* V_i = Cᵀ u_i / sqrt(λ_i): a unit vector in the curve's space (0 where the curve has less rank) */
        const double sl = sqrt(lam[i]);
        if (lam[i] <= 1e-28 * (lam[0] > 0 ? lam[0] : 1))
            continue;
        kept += lam[i];
        double big = 0;
        for (int j = 0; j < dim; j++) {
            double acc = 0;
            for (int k = 0; k < points; k++)
                acc += c[(int64_t)k * dim + j] * u[(int64_t)k * rank + i];
            out->basis[(int64_t)j * rank + i] = acc / sl;
            if (fabs(acc) > fabs(big))
                big = acc;
        }
        /* sign: the largest component positive */
        const double sign = big < 0 ? -1.0 : 1.0;
        for (int j = 0; j < dim; j++)
            out->basis[(int64_t)j * rank + i] *= sign;
        for (int k = 0; k < points; k++)
            out->table[(int64_t)k * rank + i] = (float)(sign * sl * u[(int64_t)k * rank + i]);
    }
    for (int i = 0; i < rank; i++)
        if (!(lam[i] > 1e-28 * (lam[0] > 0 ? lam[0] : 1)))
            for (int k = 0; k < points; k++)
                out->table[(int64_t)k * rank + i] = 0.0f;
    out->kept = trace > 0 ? kept / trace : 1.0;
    /* worst grid point: |c − μ − V·table| against the largest |c − μ| */
    double worst = 0, scale = 0;
    for (int k = 0; k < points; k++) {
        double r2 = 0, n2 = 0;
        for (int j = 0; j < dim; j++) {
            double approx = 0;
            for (int i = 0; i < rank; i++)
                approx += out->basis[(int64_t)j * rank + i] * out->table[(int64_t)k * rank + i];
            double d = c[(int64_t)k * dim + j] - approx;
            r2 += d * d;
            n2 += c[(int64_t)k * dim + j] * c[(int64_t)k * dim + j];
        }
        worst = fmax(worst, sqrt(r2));
        scale = fmax(scale, sqrt(n2));
    }
    out->residual = scale > 0 ? worst / scale : 0;
    rc = 0;
done:
    free(c);
    free(g);
    free(u);
    free(lam);
    if (rc != 0)
        cv_adaln_free(out);
    return rc;
}

void cv_adaln_free(cv_adaln *a)
{
    free(a->basis);
    free(a->mean);
    free(a->table);
    free(a->grid);
    memset(a, 0, sizeof *a);
}
