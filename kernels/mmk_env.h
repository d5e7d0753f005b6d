/* Environment variables that pick one of a few bit-identical kernels
 * (MMH3_CONVROT_KERNEL, MMH3_QK_NORM_KERNEL, MMH3_GLUE_KERNEL; issue 9) and
 * the variant and benchmark knobs of the Hopper kernels.
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

/* The benchmark knobs MMH3_FA3_SLEEP and MMH3_QGEMM_SLEEP: which of a
 * kernel's mbarrier waits sleep in try_wait — bit 0 the producer's, bit 1
 * the consumers' — as mmk_env_choice reads them: the setting 0-3, -1 unset
 * or empty, -2 anything else (msg says what). The outputs are the same bits
 * whatever the setting. */
#define MMK_MBAR_SLEEP_NS 10000000u /* a sleeping try's limit, ns */
static inline int mmk_env_sleep(const char *var, char *msg, size_t msg_n)
{
    static const char *const settings[] = {"0", "1", "2", "3"};
    return mmk_env_choice(var, settings, 4, msg, msg_n);
}
/* A wait's sleep limit under a setting: bit 0 the producer, bit 1 the consumers. */
static inline unsigned mmk_sleep_ns(int setting, int consumer)
{
    return (setting >> (consumer ? 1 : 0)) & 1 ? MMK_MBAR_SLEEP_NS : 0;
}

#endif
