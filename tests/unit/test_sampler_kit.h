/* Helpers shared by the DiT/sampler unit tests: the conformance kit's
 * tensors as plain arrays. */
#ifndef MMH3_TESTS_TEST_SAMPLER_KIT_H
#define MMH3_TESTS_TEST_SAMPLER_KIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

static inline mm_safetensors *kit_open(const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dit/%s", mm_test_data_dir(), file);
    mm_safetensors *st = NULL;
    mm_error err = {{0}};
    if (mm_st_open(&st, path, &err) != 0) {
        printf("FAIL kit_open: %s\n", err.msg);
        return NULL;
    }
    return st;
}

/* A kit tensor: its entry, or NULL (printing nothing) when absent. */
static inline const mm_st_entry *kit_entry(const mm_safetensors *st, const char *fmt, const char *a, const char *b)
{
    char name[512];
    snprintf(name, sizeof name, fmt, a, b);
    return mm_st_find(st, name);
}

static inline int64_t kit_numel(const mm_st_entry *e)
{
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++)
        n *= e->shape[i];
    return n;
}

/* Any numeric entry as a malloc'ed double array. */
static inline double *kit_doubles(const mm_st_entry *e)
{
    int64_t n = kit_numel(e);
    double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    mm_tensor t = mm_tensor_wrap((void *)e->data, mm_cpu(), e->dtype, 1, (int64_t[]){n});
    for (int64_t i = 0; i < n; i++)
        out[i] = mm_tensor_get(&t, (int64_t[]){i});
    return out;
}

static inline const float *kit_f32(const mm_st_entry *e)
{
    return e && e->dtype == MM_F32 ? (const float *)e->data : NULL;
}

#endif
