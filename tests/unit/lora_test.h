/* Helpers of the LoRA tests: random adapters written by mmh3-gen-tiny for
 * the conformance kit's tiny DiT, and an adapter's effective ΔW in fp64. */
#ifndef MMH3_TESTS_LORA_TEST_H
#define MMH3_TESTS_LORA_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/lora/lora.h"
#include "test.h"

static char lora_test_gen[1024], lora_test_dir[512];

/* Finds the generator and makes a scratch folder; 0 or -1 (printed). */
static inline int lora_test_setup(const char *name)
{
    const char *b = getenv("MMH3_BUILD");
    snprintf(lora_test_gen, sizeof lora_test_gen, "%s/mmh3-gen-tiny", b ? b : ".");
    if (access(lora_test_gen, X_OK) != 0) {
        printf("FAIL setup: %s not built\n", lora_test_gen);
        return -1;
    }
    snprintf(lora_test_dir, sizeof lora_test_dir, "/tmp/mmh3-%s-XXXXXX", name);
    if (!mkdtemp(lora_test_dir)) {
        printf("FAIL setup: mkdtemp\n");
        return -1;
    }
    return 0;
}

static inline void lora_test_cleanup(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lora_test_dir);
    if (system(cmd) != 0)
        printf("     (could not remove %s)\n", lora_test_dir);
}

/* Writes <dir>/<file> with `mmh3-gen-tiny lora` for the kit's DiT (text
 * width 64) and the given extra options; returns the path (static buffer
 * per call site is the caller's: copy it) or NULL. */
static inline const char *lora_test_write(char *path, size_t n, const char *file, const char *fmt, ...)
{
    char opts[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(opts, sizeof opts, fmt, ap);
    va_end(ap);
    snprintf(path, n, "%s/%s", lora_test_dir, file);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "'%s' lora --text-dim 64 %s --out '%s' >/dev/null", lora_test_gen, opts, path);
    if (system(cmd) != 0) {
        printf("     generator failed: %s\n", cmd);
        return NULL;
    }
    return path;
}

/* scale·B·A of every pair on `module` summed into a dense [out, in] fp64
 * matrix (rows at each pair's row0); NULL when no pair targets it. */
static inline double *lora_test_dense_delta(const mm_lora *l, const char *module, int64_t out, int64_t in)
{
    double *d = NULL;
    for (int i = 0; i < l->n_pairs; i++) {
        const mm_lora_pair *p = &l->pairs[i];
        if (strcmp(p->module, module) != 0 || p->in_features != in || p->row0 + p->rows > out)
            continue;
        if (!d && !(d = calloc((size_t)(out * in), sizeof *d)))
            return NULL;
        for (int64_t r = 0; r < p->rows; r++)
            for (int k = 0; k < p->rank; k++) {
                double b = mm_tensor_get(&p->b, (int64_t[MM_MAX_DIMS]){r, k}) * p->scale;
                mm_tensor arow = mm_tensor_select(&p->a, 0, k);
                for (int64_t c = 0; c < in; c++)
                    d[(p->row0 + r) * in + c] += b * mm_tensor_get(&arow, (int64_t[MM_MAX_DIMS]){c});
            }
    }
    return d;
}

static inline double lora_test_rel_l2(const double *a, const double *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

#endif
