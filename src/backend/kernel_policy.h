/* The kernel policy: which kernel each op runs where it has two — its
 * default or its portable fallback — how many CPU workers a context takes,
 * and whether the DiT's fast mode runs its own kernel. One struct, built
 * once per process from the environment (and from flags, through
 * mm_kernel_policy_parse), installed before the first context exists and
 * read from there on: by the CPU contexts (the worker count), the CUDA
 * backend and its kernels (kernels/mmk.h: mmk_policy), the DiT's fused
 * block (backend/fused.h). `mmh3 check` prints it.
 *
 * The environment has three knobs; everything else in the struct is for
 * tests and benchmarks, which set fields and install the result:
 *   MMH3_KERNELS   default | portable  portable: every op its fallback
 *                  kernel — no Hopper-only kernel (mm_attention on the
 *                  portable mma.sync kernel, the DiT's attention through
 *                  mm_attention, its int8 linears on cuBLASLt + the epilogue
 *                  kernel), the DiT block as the composition of ops, and the
 *                  simple variant of every glue kernel. For telling a kernel
 *                  bug from a model bug, and for a GPU the fast kernels have
 *                  not met.
 *   MMH3_DIT_FAST  fast | off          off: requests for fast mode run exact
 *                  mode's kernels.
 *   MMH3_THREADS   1..1024             CPU workers per context (unset: one
 *                  per online core).
 * A value outside what is accepted keeps the default and is recorded as a
 * problem ("MMH3_KERNELS=fats is not one of: default, portable"): said once
 * on stderr when the process policy is built, and a FAIL line of
 * `mmh3 check`. */
#ifndef MMH3_BACKEND_KERNEL_POLICY_H
#define MMH3_BACKEND_KERNEL_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

enum { MM_KERNEL_POLICY_PROBLEMS = 4 };

typedef struct mm_kernel_policy {
    int cpu_threads; /* CPU workers per context; 0: one per online core */
    bool dit_fast;   /* fast-mode requests run the fast attention kernel (false: exact mode's) */
    /* Each op's kernel: true its default, false its portable fallback. */
    bool attention_hopper; /* mm_attention, bf16 head dim 128 on sm_90: the wgmma kernel after its
                              self-check (false: the portable mma.sync kernel) */
    bool dit_fa3;          /* the DiT's attention: fa3 after its self-checks (false: mm_attention) */
    bool dit_qgemm;        /* the DiT's int8 linears: the sm90 GEMM after its self-check (false:
                              cuBLASLt + the epilogue kernel) */
    bool dit_fused;        /* the DiT block on CUDA through its fused kernels (false: the composition) */
    bool convrot_pipe;     /* ConvRot quantization: the pipelined kernel (false: one row per block) */
    bool qk_norm_vec;      /* q/k RMSNorm + RoPE: four lanes per 128-wide head (false: a warp per head) */
    bool glue_vec;         /* RMSNorm, RoPE, gated residual, f16 GLU: the 8-wide kernels where the views
                              fit (false: the generic ones) */
    bool conv_gemm;        /* convolutions with groups = 1: im2col + cuBLASLt GEMM (false: the direct kernel) */
    int n_problems;        /* values that were not accepted (the defaults stand for them) */
    char problems[MM_KERNEL_POLICY_PROBLEMS][160];
} mm_kernel_policy;

/* Every op's default kernel, one CPU worker per core, fast mode on. */
void mm_kernel_policy_defaults(mm_kernel_policy *p);
/* Every op's portable kernel (what MMH3_KERNELS=portable selects). */
void mm_kernel_policy_portable(mm_kernel_policy *p);
/* The defaults with the environment's knobs applied; a bad value becomes a
 * problem of p. Reads the environment (nothing else in mmh3 reads these
 * variables). */
void mm_kernel_policy_from_env(mm_kernel_policy *p);
/* Applies one knob by its variable name ("MMH3_KERNELS", "MMH3_DIT_FAST",
 * "MMH3_THREADS") — what a command-line flag for it calls. -1 with the
 * message the environment would have produced, or for an unknown name. */
int mm_kernel_policy_parse(mm_kernel_policy *p, const char *knob, const char *value, mm_error *err);

/* The process policy: the installed one, or on the first call (thread-safe)
 * the environment's, whose problems are then said on stderr. */
const mm_kernel_policy *mm_kernel_policy_get(void);
/* Makes p the process policy and hands the kernels their part (the CUDA
 * backend reads it at every launch). Before any work starts, or between
 * the cases of a single-threaded test or benchmark. */
void mm_kernel_policy_install(const mm_kernel_policy *p);

/* One line naming what p selects, e.g. "default kernels; fast mode on;
 * CPU workers: one per core", or the portable/overridden ops. */
void mm_kernel_policy_describe(const mm_kernel_policy *p, char *out, size_t n);

/* Which kernel family a GPU of compute capability major.minor runs under p
 * with this build's images (`sm_90a` among the targets: configure
 * --with-cuda-arch): the Hopper kernels (fa3 attention, the sm90 int8 GEMM,
 * sm90p, each after its first-use self-check) need compute 9.0 and the
 * sm_90a image; every other GPU (Ampere 8.0/8.6, Ada 8.9, Blackwell 10.x and
 * 12.x) runs the portable ones (mma.sync attention, cuBLASLt int8 GEMM with
 * the epilogue kernel, the fused glue). One line into out, e.g.
 * "compute 8.9: portable kernels (mma.sync attention, cuBLASLt int8 GEMM)". */
void mm_kernel_choice_describe(int cc_major, int cc_minor, bool have_sm90a, const mm_kernel_policy *p, char *out,
                               size_t n);

#endif
