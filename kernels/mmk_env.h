/* Environment variables that pick one of a few bit-identical kernels
 * (MMH3_CONVROT_KERNEL, MMH3_QK_NORM_KERNEL, MMH3_GLUE_KERNEL; issue 9).
 * Plain C, header only, so the CUDA host code and the CPU unit test
 * (tests/unit/test_kernels_env.c) read values the same way. */
#ifndef MMH3_KERNELS_MMK_ENV_H
#define MMH3_KERNELS_MMK_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The index in names[0..n) of the value of `var`; -1 when it is unset or
 * empty (the caller's default); -2 for any other value, with msg (may be
 * NULL) saying what was wrong and what is accepted:
 *   MMH3_X=foo is not one of: a, b */
static inline int mmk_env_choice(const char *var, const char *const *names, int n, char *msg, size_t msg_n)
{
    const char *e = getenv(var);
    if (!e || !*e)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(e, names[i]) == 0)
            return i;
    if (msg && msg_n) {
        int w = snprintf(msg, msg_n, "%s=%.40s is not one of:", var, e);
        for (int i = 0; i < n && w >= 0 && (size_t)w < msg_n; i++)
            w += snprintf(msg + w, msg_n - (size_t)w, "%s %s", i ? "," : "", names[i]);
    }
    return -2;
}

/* mmk_env_choice for a kernel choice: the index of the value, `dflt` when
 * unset or empty, `fallback` for anything else — announced once per
 * *warned flag on stderr with what is accepted and what runs instead. */
static inline int mmk_env_kernel(const char *var, const char *const *names, int n, int dflt, int fallback, int *warned)
{
    char msg[200];
    int i = mmk_env_choice(var, names, n, msg, sizeof msg);
    if (i == -1)
        return dflt;
    if (i >= 0)
        return i;
    if (!__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "mmh3: %s; using %s\n", msg, names[fallback]);
    return fallback;
}

#endif
