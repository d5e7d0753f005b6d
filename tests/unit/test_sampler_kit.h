/* Helpers shared by the DiT/sampler unit tests: the conformance kit's
 * tensors as plain arrays, and its forward cases ready to run. */
#ifndef MMH3_TESTS_TEST_SAMPLER_KIT_H
#define MMH3_TESTS_TEST_SAMPLER_KIT_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/dit_kit.h"
#include "io/safetensors.h"
#include "model/dit/layout.h"

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

/* A forward case of the kit (manifest "cases"): its layout, per-row
 * timesteps and the three inputs as host views (the batch dim dropped). */
typedef struct kit_forward_case {
    mm_dit_kit_case c;
    mm_dit_layout l;
    float *row_t;
    mm_tensor video, audio, text;
} kit_forward_case;

/* 0, or -1 with a line saying why; kit_forward_case_free is safe either way. */
static inline int kit_forward_case_load(kit_forward_case *f, const json_t *manifest, const mm_safetensors *cases,
                                        const char *name)
{
    memset(f, 0, sizeof *f);
    size_t i;
    json_t *e;
    mm_error err = {{0}};
    json_array_foreach(json_object_get(manifest, "cases"), i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "name")), name) != 0)
            continue;
        if (mm_dit_kit_case_read(manifest, e, &f->c, &err) != 0 || mm_dit_layout_build(&f->c.req, &f->l, &err) != 0)
            break;
        f->row_t = malloc(sizeof(float) * (size_t)f->l.rows);
        mm_dit_row_timesteps(&f->l, (float)f->c.t_video, (float)f->c.t_audio, (float)f->c.condition_t, f->row_t);
        const char *in[3] = {"in.hidden_states", "in.audio_hidden_states", "in.encoder_hidden_states"};
        mm_tensor *dst[3] = {&f->video, &f->audio, &f->text};
        for (int k = 0; k < 3; k++) {
            char key[256];
            snprintf(key, sizeof key, "%s.%s", name, in[k]);
            const mm_st_entry *en = mm_st_find(cases, key);
            if (!en) {
                printf("     case %s: no %s in the kit\n", name, key);
                return -1;
            }
            *dst[k] = mm_tensor_wrap((void *)en->data, mm_cpu(), en->dtype, 2, (int64_t[]){en->shape[1], en->shape[2]});
        }
        return 0;
    }
    printf("     case %s: %s\n", name, err.msg[0] ? err.msg : "not in the manifest");
    return -1;
}

static inline void kit_forward_case_free(kit_forward_case *f)
{
    free(f->row_t);
    mm_dit_layout_free(&f->l);
    mm_dit_kit_case_free(&f->c);
}

#endif
