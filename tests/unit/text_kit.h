/* Helpers for the text-encoder unit tests: the conformance kit copy in
 * tests/data/text_encoder (manifest + cases), read through the project's own
 * safetensors reader and jansson. Header-only; each test program includes it. */
#ifndef MMH3_TESTS_TEXT_KIT_H
#define MMH3_TESTS_TEXT_KIT_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/text/presentation.h"
#include "test.h"

/* MM_REQUIRE evaluates its condition twice: calls with effects go through this. */
#define TK_OK(call, ...)                                                         \
    do {                                                                         \
        int tk_rc_ = (call);                                                     \
        MM_REQUIRE(tk_rc_ == 0, __VA_ARGS__);                                    \
    } while (0)

typedef struct text_kit {
    json_t *manifest;
    mm_safetensors *cases;
    char dir[1024];
} text_kit;

static inline int text_kit_open(text_kit *k)
{
    memset(k, 0, sizeof *k);
    snprintf(k->dir, sizeof k->dir, "%s/text_encoder", mm_test_data_dir());
    char path[1200];
    snprintf(path, sizeof path, "%s/manifest.json", k->dir);
    json_error_t je;
    k->manifest = json_load_file(path, 0, &je);
    if (!k->manifest) {
        printf("FAIL text_kit: %s: %s\n", path, je.text);
        return -1;
    }
    snprintf(path, sizeof path, "%s/cases.safetensors", k->dir);
    mm_error err = {{0}};
    if (mm_st_open(&k->cases, path, &err) < 0) {
        printf("FAIL text_kit: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static inline void text_kit_close(text_kit *k)
{
    json_decref(k->manifest);
    mm_st_close(k->cases);
}

/* Case tensor "<case>.<suffix>" or NULL when absent. */
static inline const mm_st_entry *text_kit_entry(const text_kit *k, const char *c, const char *suffix)
{
    char name[256];
    snprintf(name, sizeof name, "%s.%s", c, suffix);
    return mm_st_find(k->cases, name);
}

static inline int64_t text_kit_numel(const mm_st_entry *e)
{
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++)
        n *= e->shape[i];
    return n;
}

/* Element i of an entry as double (I64, F32, F64, BF16, U8). */
static inline double text_kit_at(const mm_st_entry *e, int64_t i)
{
    switch (e->dtype) {
    case MM_I64: return (double)((const int64_t *)e->data)[i];
    case MM_F32: return ((const float *)e->data)[i];
    case MM_F64: return ((const double *)e->data)[i];
    case MM_BF16: return mm_bf16_to_f32(((const uint16_t *)e->data)[i]);
    case MM_U8: return ((const uint8_t *)e->data)[i];
    default: return NAN;
    }
}

/* The tokenizer the reference used, as far as the kit records it: every text
 * segment of every case with its real ids, plus the special tokens of
 * tokenizer_crosscheck. Encoding a string the kit does not list fails. */
static inline int text_kit_segment_encode(void *user, const char *text, size_t len, int32_t **ids, size_t *n,
                                          mm_error *err)
{
    const json_t *m = user;
    const json_t *special = json_object_get(json_object_get(m, "tokenizer_crosscheck"), "special_ids");
    json_t *v;
    const char *key;
    json_object_foreach((json_t *)special, key, v)
    {
        if (strlen(key) == len && !memcmp(key, text, len)) {
            *ids = malloc(sizeof(int32_t));
            (*ids)[0] = (int32_t)json_integer_value(v);
            *n = 1;
            return 0;
        }
    }
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(m, "cases"), ci, c)
    {
        size_t si;
        json_t *s;
        json_array_foreach(json_object_get(c, "segments"), si, s)
        {
            const char *t = json_string_value(json_object_get(s, "text"));
            if (!t || strlen(t) != len || memcmp(t, text, len))
                continue;
            json_t *r = json_object_get(s, "real_ids");
            *n = json_array_size(r);
            *ids = malloc(sizeof(int32_t) * (*n ? *n : 1));
            for (size_t i = 0; i < *n; i++)
                (*ids)[i] = (int32_t)json_integer_value(json_array_get(r, i));
            return 0;
        }
    }
    return mm_fail(err, "kit tokenizer: segment \"%.*s\" is not in the manifest", (int)len, text);
}

/* Kit id of a real id (README "Token ids"; constants from manifest.derived.tokens). */
static inline int64_t text_kit_fold(const json_t *m, int64_t real)
{
    const json_t *t = json_object_get(json_object_get(m, "derived"), "tokens");
    int64_t shift = json_integer_value(json_object_get(t, "added_block_shift"));
    int64_t first = json_integer_value(json_object_get(t, "first_added_kit_id"));
    return real >= first + shift ? real - shift : real % first;
}

/* rel_l2 and max_abs of candidate c against reference entry r. */
static inline void text_kit_diff(const float *c, const mm_st_entry *r, double *rel_l2, double *max_abs)
{
    double num = 0, den = 0, mx = 0;
    int64_t n = text_kit_numel(r);
    for (int64_t i = 0; i < n; i++) {
        double ref = text_kit_at(r, i), d = (double)c[i] - ref;
        num += d * d;
        den += ref * ref;
        if (fabs(d) > mx)
            mx = fabs(d);
    }
    *rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    *max_abs = mx;
}

#endif
