/* Sparse attention for the DiT's main blocks (shared/spec/sparse.md):
 * what a preset says — the routing policy and its parameters, the τ
 * schedule over the steps, the forwards and blocks kept dense, the rows
 * whose keys every query attends (sinks) and the rows whose queries attend
 * everything — and how a packed layout turns into row ranges. The op itself
 * is backend/sparse_attn.h; the DiT applies it (model/dit/sparse.c).
 *
 * A spec is a preset name with optional overrides:
 *   sol                          Sana / Sol-H3 defaults (50-step schedule)
 *   sol:tau=1.25,dense_steps=0   the same with two values changed
 *   sol-4step:tau=1/1.25/1.5     τ per sparse forward
 *   forced:density=0.1           a mask of known density (benchmarks)
 * mm_sparse_presets_help() lists the presets and keys. */
#ifndef MMH3_MODEL_SPARSE_SPARSE_H
#define MMH3_MODEL_SPARSE_SPARSE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/sparse_attn.h"
#include "core/error.h"

/* Row kinds a sink or dense-query set is made of: bits (1 << mm_dit_row_role). */
#define MM_SPARSE_ROWS_TEXT (1u << 0)       /* MM_DIT_ROW_TEXT */
#define MM_SPARSE_ROWS_VIDEO (1u << 1)      /* MM_DIT_ROW_VIDEO (the target) */
#define MM_SPARSE_ROWS_AUDIO (1u << 2)      /* MM_DIT_ROW_AUDIO (the target) */
#define MM_SPARSE_ROWS_COND_VIDEO (1u << 3) /* keyframe / reference video rows */
#define MM_SPARSE_ROWS_REF_AUDIO (1u << 4)  /* reference soundtracks and clips */
/* Everything before the target video: text, conditions, audio (Sana's "prefix"). */
#define MM_SPARSE_ROWS_PREFIX (MM_SPARSE_ROWS_TEXT | MM_SPARSE_ROWS_AUDIO | MM_SPARSE_ROWS_COND_VIDEO | \
                               MM_SPARSE_ROWS_REF_AUDIO)

typedef struct mm_sparse_config {
    char name[24];           /* the preset it came from */
    mm_sparse_policy policy;
    float tau_start, tau_end; /* SOL: τ of the first and of the last sparse forward, linear between */
    float tau_steps[16];      /* ... or τ per sparse forward (the last one repeats); n_tau_steps 0: start..end */
    int n_tau_steps;
    mm_sparse_thresh thresh;
    float keep;              /* TOPK: 1 − sparsity; FORCED: density */
    int band;                /* diagonal band (Sol: 1; -1: none) */
    uint64_t seed;           /* FORCED */
    /* Forwards run dense at the start: a count when >= 1, a share of the
     * request's forwards (rounded up) when below 1; 0: none. */
    double dense_steps;
    int dense_layers;        /* main blocks 0 .. dense_layers − 1 dense */
    unsigned sink_rows;      /* MM_SPARSE_ROWS_* whose key blocks every query block attends exactly */
    unsigned dense_q_rows;   /* MM_SPARSE_ROWS_* whose query blocks attend every key block exactly */
    int64_t min_rows;        /* sequences shorter than this run dense */
} mm_sparse_config;

/* Parses a spec (NULL or "" = "sol"). Errors name what was wrong and what is accepted. */
int mm_sparse_config_parse(const char *spec, mm_sparse_config *out, mm_error *err);
/* The presets and override keys, one per line, for --help and errors. */
const char *mm_sparse_presets_help(void);
/* One line: "sol (tau 1.00, diag, band 1, dense: 20% of the steps and 2 blocks, sinks prefix)". */
void mm_sparse_config_describe(const mm_sparse_config *c, char *out, size_t n);

/* Forwards of a `total`-forward request that run dense at the start. */
int mm_sparse_dense_forwards(const mm_sparse_config *c, int total);
/* Whether forward `step` (0-based) of `total` runs sparse at all. */
bool mm_sparse_step_sparse(const mm_sparse_config *c, int step, int total);
/* τ of forward `step`: the k-th sparse forward's entry of tau_steps (the
 * last entry repeats), or tau_start on the first sparse forward, tau_end on
 * the last, linear in between. */
float mm_sparse_step_tau(const mm_sparse_config *c, int step, int total);

/* The routing parameters of one call (ranges as given, scale 0). */
mm_sparse_route_params mm_sparse_route_params_for(const mm_sparse_config *c, int step, int total,
                                                   const mm_row_range *sink, int n_sink, const mm_row_range *dense_q,
                                                   int n_dense_q);

/* Maximal runs of rows whose role (mm_dit_row_role values, one byte per
 * row) is in the set `rows` (MM_SPARSE_ROWS_*): at most `max` ranges into
 * out; returns their count, or -1 (err) when there are more. */
int mm_sparse_role_ranges(const uint8_t *roles, int64_t n, unsigned rows, mm_row_range *out, int max, mm_error *err);

#endif
