/* Row gather / scatter / scatter-add on the CPU. A "row" is everything
 * after the first dim; rows are copied (converting float dtypes) through
 * their own last-dim runs, so any strides work. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_util.h"

enum { GATHER, SCATTER, SCATTER_ADD };

typedef struct idx_job {
    mm_tensor *out;
    const mm_tensor *src, *idx;
    int kind;
} idx_job;

/* Copies (or adds) sub-tensor s into d; both have the same shape. */
static void move_row(const mm_tensor *d, const mm_tensor *s, bool add, float *b0, float *b1)
{
    int64_t rows = cpu_rows(d), cols = cpu_cols(d);
    int64_t ds = cpu_last_stride(d), ss = cpu_last_stride(s);
    for (int64_t r = 0; r < rows; r++) {
        char *dp = cpu_row_ptr(d, r);
        const char *sp = cpu_row_ptr(s, r);
        if (!add && d->dtype == s->dtype) {
            size_t es = cpu_elsize(d->dtype);
            if (ds == 1 && ss == 1)
                memcpy(dp, sp, (size_t)cols * es);
            else
                for (int64_t c = 0; c < cols; c++)
                    memcpy(dp + c * ds * (int64_t)es, sp + c * ss * (int64_t)es, es);
            continue;
        }
        cpu_load_f32(b0, sp, s->dtype, cols, ss);
        if (add) {
            cpu_load_f32(b1, dp, d->dtype, cols, ds);
            for (int64_t c = 0; c < cols; c++)
                b0[c] += b1[c];
        }
        cpu_store_f32(dp, d->dtype, ds, b0, cols);
    }
}

static void idx_rows(void *user, int64_t begin, int64_t end)
{
    const idx_job *j = user;
    int64_t cols = cpu_cols(j->out);
    float *buf = malloc((size_t)(cols ? cols : 1) * 8);
    if (!buf)
        return;
    const int32_t *ix = j->idx->data;
    for (int64_t r = begin; r < end; r++) {
        int64_t t = ix[r * j->idx->stride[0]];
        mm_tensor d, s;
        if (j->kind == GATHER) {
            d = mm_tensor_select(j->out, 0, r);
            s = mm_tensor_select(j->src, 0, t);
        } else {
            d = mm_tensor_select(j->out, 0, t);
            s = mm_tensor_select(j->src, 0, r);
        }
        move_row(&d, &s, j->kind == SCATTER_ADD, buf, buf + cols);
    }
    free(buf);
}

static int run(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx, int kind)
{
    idx_job j = {out, src, idx, kind};
    mm_parallel_for(ctx, idx->shape[0], 8, idx_rows, &j);
    return 0;
}

int mm_cpu_gather_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    return run(ctx, out, src, idx, GATHER);
}

int mm_cpu_scatter_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    return run(ctx, out, src, idx, SCATTER);
}

int mm_cpu_scatter_add_rows(mm_ctx *ctx, mm_tensor *out, const mm_tensor *src, const mm_tensor *idx)
{
    return run(ctx, out, src, idx, SCATTER_ADD);
}
