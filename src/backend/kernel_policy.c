/* The kernel policy (kernel_policy.h): defaults, the environment's knobs
 * through one parser, and the process-wide instance. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/kernel_policy.h"

void mm_kernel_policy_defaults(mm_kernel_policy *p)
{
    memset(p, 0, sizeof *p);
    p->dit_fast = true;
    p->attention_hopper = p->dit_fa3 = p->dit_qgemm = p->dit_fused = true;
    p->convrot_pipe = p->qk_norm_vec = p->glue_vec = p->conv_gemm = true;
}

/* The per-op switches, for the portable setting and the description. */
typedef struct op_switch {
    const char *name;
    size_t offset;
} op_switch;

static const op_switch kOps[] = {
    {"attention", offsetof(mm_kernel_policy, attention_hopper)},
    {"DiT attention", offsetof(mm_kernel_policy, dit_fa3)},
    {"DiT int8 linears", offsetof(mm_kernel_policy, dit_qgemm)},
    {"DiT block", offsetof(mm_kernel_policy, dit_fused)},
    {"ConvRot", offsetof(mm_kernel_policy, convrot_pipe)},
    {"q/k norm", offsetof(mm_kernel_policy, qk_norm_vec)},
    {"glue", offsetof(mm_kernel_policy, glue_vec)},
    {"conv", offsetof(mm_kernel_policy, conv_gemm)},
};
enum { N_OPS = sizeof kOps / sizeof kOps[0] };

static bool *op_flag(mm_kernel_policy *p, int i) { return (bool *)((char *)p + kOps[i].offset); }
static bool op_on(const mm_kernel_policy *p, int i) { return *(const bool *)((const char *)p + kOps[i].offset); }

void mm_kernel_policy_portable(mm_kernel_policy *p)
{
    for (int i = 0; i < N_OPS; i++)
        *op_flag(p, i) = false;
}

/* ------------------------------------------------------------------ the one parser */

typedef enum { KNOB_CHOICE, KNOB_COUNT } knob_kind;

typedef struct knob {
    const char *var;
    knob_kind kind;
    const char *const *names; /* KNOB_CHOICE: the values accepted, the first the default */
    int n_names;
    int lo, hi; /* KNOB_COUNT: the range accepted */
    void (*apply)(mm_kernel_policy *p, int value);
} knob;

static void apply_kernels(mm_kernel_policy *p, int v)
{
    if (v == 1)
        mm_kernel_policy_portable(p);
}
static void apply_fast(mm_kernel_policy *p, int v) { p->dit_fast = v == 0; }
static void apply_threads(mm_kernel_policy *p, int v) { p->cpu_threads = v; }

static const char *const kKernelsNames[] = {"default", "portable"};
static const char *const kFastNames[] = {"fast", "off"};
static const knob kKnobs[] = {
    {"MMH3_KERNELS", KNOB_CHOICE, kKernelsNames, 2, 0, 0, apply_kernels},
    {"MMH3_DIT_FAST", KNOB_CHOICE, kFastNames, 2, 0, 0, apply_fast},
    {"MMH3_THREADS", KNOB_COUNT, NULL, 0, 1, 1024, apply_threads},
};

/* The knob's value for `value` (unset or empty: -1, the default stands), or
 * -2 with msg saying what was wrong and what is accepted. */
static int knob_value(const knob *k, const char *value, char *msg, size_t msg_n)
{
    if (!value || !*value)
        return -1;
    if (k->kind == KNOB_COUNT) {
        /* strtol, not atoi: "4294967297" is no count, "99999" none in range */
        char *end;
        errno = 0;
        long v = strtol(value, &end, 10);
        if (!errno && end != value && *end == '\0' && v >= k->lo && v <= k->hi)
            return (int)v;
        snprintf(msg, msg_n, "%s=%.40s is not a whole number in %d..%d", k->var, value, k->lo, k->hi);
        return -2;
    }
    for (int i = 0; i < k->n_names; i++)
        if (strcmp(value, k->names[i]) == 0)
            return i;
    int w = snprintf(msg, msg_n, "%s=%.40s is not one of:", k->var, value);
    for (int i = 0; i < k->n_names && w >= 0 && (size_t)w < msg_n; i++)
        w += snprintf(msg + w, msg_n - (size_t)w, "%s %s", i ? "," : "", k->names[i]);
    return -2;
}

static const knob *find_knob(const char *var)
{
    for (size_t i = 0; i < sizeof kKnobs / sizeof kKnobs[0]; i++)
        if (strcmp(kKnobs[i].var, var) == 0)
            return &kKnobs[i];
    return NULL;
}

int mm_kernel_policy_parse(mm_kernel_policy *p, const char *name, const char *value, mm_error *err)
{
    const knob *k = find_knob(name);
    if (!k)
        return mm_fail(err, "%s is not a kernel policy setting (MMH3_KERNELS, MMH3_DIT_FAST, MMH3_THREADS)", name);
    char msg[160];
    int v = knob_value(k, value, msg, sizeof msg);
    if (v == -2)
        return mm_fail(err, "%s", msg);
    if (v >= 0)
        k->apply(p, v);
    return 0;
}

void mm_kernel_policy_from_env(mm_kernel_policy *p)
{
    mm_kernel_policy_defaults(p);
    for (size_t i = 0; i < sizeof kKnobs / sizeof kKnobs[0]; i++) {
        mm_error err = {{0}};
        if (mm_kernel_policy_parse(p, kKnobs[i].var, getenv(kKnobs[i].var), &err) != 0 &&
            p->n_problems < MM_KERNEL_POLICY_PROBLEMS)
            snprintf(p->problems[p->n_problems++], sizeof p->problems[0], "%.150s", err.msg);
    }
}

/* ------------------------------------------------------------------ the process policy */

static mm_kernel_policy g_policy;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_installed;

static void build_from_env(void)
{
    pthread_mutex_lock(&g_mu);
    if (!g_installed) {
        mm_kernel_policy p;
        mm_kernel_policy_from_env(&p);
        for (int i = 0; i < p.n_problems; i++)
            fprintf(stderr, "mmh3: %s; using the default\n", p.problems[i]);
        g_policy = p;
        g_installed = true;
        mm_cuda_ops_set_policy(&g_policy);
    }
    pthread_mutex_unlock(&g_mu);
}

const mm_kernel_policy *mm_kernel_policy_get(void)
{
    pthread_once(&g_once, build_from_env);
    return &g_policy;
}

void mm_kernel_policy_install(const mm_kernel_policy *p)
{
    pthread_mutex_lock(&g_mu);
    g_policy = *p;
    g_installed = true;
    mm_cuda_ops_set_policy(&g_policy);
    pthread_mutex_unlock(&g_mu);
}

void mm_kernel_policy_describe(const mm_kernel_policy *p, char *out, size_t n)
{
    int on = 0;
    for (int i = 0; i < N_OPS; i++)
        on += op_on(p, i);
    int w;
    if (on == N_OPS)
        w = snprintf(out, n, "default kernels");
    else if (on == 0)
        w = snprintf(out, n, "portable kernels (MMH3_KERNELS=portable)");
    else {
        w = snprintf(out, n, "default kernels except");
        for (int i = 0, k = 0; i < N_OPS && w >= 0 && (size_t)w < n; i++)
            if (!op_on(p, i))
                w += snprintf(out + w, n - (size_t)w, "%s %s", k++ ? "," : "", kOps[i].name);
        if (w >= 0 && (size_t)w < n)
            w += snprintf(out + w, n - (size_t)w, " (portable)");
    }
    if (w >= 0 && (size_t)w < n)
        w += snprintf(out + w, n - (size_t)w, "; fast mode %s", p->dit_fast ? "on" : "off (MMH3_DIT_FAST=off)");
    if (w >= 0 && (size_t)w < n) {
        if (p->cpu_threads > 0)
            snprintf(out + w, n - (size_t)w, "; CPU workers %d (MMH3_THREADS)", p->cpu_threads);
        else
            snprintf(out + w, n - (size_t)w, "; CPU workers: one per core");
    }
}

void mm_kernel_choice_describe(int cc_major, int cc_minor, bool have_sm90a, const mm_kernel_policy *p, char *out,
                               size_t n)
{
    const bool hopper = cc_major == 9 && cc_minor == 0;
    if (hopper && have_sm90a && (p->dit_fa3 || p->dit_qgemm || p->attention_hopper)) {
        snprintf(out, n, "compute %d.%d: Hopper kernels (%s%s%s, after their self-checks) + the portable ones", cc_major,
                 cc_minor, p->dit_fa3 ? "fa3 attention" : "", p->dit_fa3 && p->dit_qgemm ? ", " : "",
                 p->dit_qgemm ? "sm90 int8 GEMM" : "sm90p attention");
        return;
    }
    snprintf(out, n, "compute %d.%d: portable kernels (mma.sync attention, cuBLASLt int8 GEMM + epilogue%s)%s", cc_major,
             cc_minor, p->dit_fused ? ", fused glue" : "",
             hopper && !have_sm90a ? "; this build has no sm_90a image (configure --with-cuda-arch)"
             : hopper ? "; the policy turns the Hopper kernels off" : "");
}
