#include "model/text/resident.h"

#include <stdlib.h>
#include <string.h>

int mm_resident_place(mm_resident *r, mm_ctx *ctx, mm_tensor *t, mm_error *err)
{
    if (r->device.kind == MM_DEVICE_CPU)
        return 0;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 512;
        mm_tensor *o = realloc(r->owned, sizeof *o * (size_t)cap);
        if (!o)
            return mm_fail(err, "out of memory");
        r->owned = o;
        r->cap = cap;
    }
    mm_tensor *d = &r->owned[r->n];
    if (mm_tensor_alloc(d, r->device, t->dtype, t->ndim, t->shape, err) < 0)
        return -1;
    r->n++;
    if (mm_copy(ctx, d, t) < 0)
        return mm_ctx_error(ctx, err);
    *t = mm_tensor_view(d);
    return 0;
}

void mm_resident_free(mm_resident *r)
{
    for (int i = 0; i < r->n; i++)
        mm_tensor_free(&r->owned[i]);
    free(r->owned);
    memset(r, 0, sizeof *r);
}
