/* `mmh3 conformance KIT_DIR`: runs a conformance kit against the engine.
 *
 * A kit is a folder with a manifest.json whose "kit" field names its format;
 * kits.h maps that name to the runner that knows the format (one line per
 * kit). A runner reads the kit's checkpoint with the engine's real loader,
 * recomputes every case, and reports each comparison as one line:
 *
 *   PASS t2va_step0 out.video      rel_l2 0.0146 <= 0.039   max_abs 0.0749 <= 0.23
 *   FAIL ref2va_step4 layout       position_ids row 88 (t): 74 != 73
 *
 * so the test runner can count them. With --out every computed output is also
 * written, under the kit's own tensor names, to one safetensors file.
 */
#ifndef MMH3_CONFORMANCE_CONFORMANCE_H
#define MMH3_CONFORMANCE_CONFORMANCE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "core/tensor.h"
#include "io/safetensors.h"

typedef struct mm_conf_output mm_conf_output;

/* An adapter to apply (`--lora FILE[:STRENGTH]`): the DiT kit then runs
 * every case with it and writes the outputs; its reference comparisons do
 * not apply and become notes. */
#define MM_CONF_MAX_LORAS 8
typedef struct mm_conf_lora {
    const char *path;
    float strength;
} mm_conf_lora;

typedef struct mm_conf_run {
    const char *kit_dir;
    json_t *manifest;      /* borrowed; owned by mm_conformance_run */
    mm_device device;      /* where the engine computes */
    FILE *log;             /* PASS/FAIL lines and notes (stdout) */
    bool keep_outputs;     /* --out given */
    const mm_conf_lora *loras; /* adapters to apply (DiT kits), or NULL */
    int n_loras;
    const char *sparse;    /* --sparse PRESET: the DiT kit's main blocks through sparse attention, or NULL */
    int passed, failed;
    mm_conf_output *outputs; /* kept outputs, in order */
} mm_conf_run;

/* A kit runner: 0 when it ran (whatever the verdicts), -1 when the kit could
 * not be run at all (unreadable, malformed). */
typedef int (*mm_conf_kit_fn)(mm_conf_run *run, mm_error *err);

typedef struct mm_conf_options {
    mm_device device;
    const char *out_path; /* or NULL */
    FILE *log;
    const mm_conf_lora *loras; /* DiT kits: adapters applied to every case (needs out_path) */
    int n_loras;
    const char *sparse; /* a sparse-attention preset for the DiT kit, or NULL (model/sparse/sparse.h) */
} mm_conf_options;

/* Recognizes the kit by its manifest and runs it. *all_passed is set when
 * every check passed (and at least one ran). */
int mm_conformance_run(const char *kit_dir, const mm_conf_options *opts, bool *all_passed, mm_error *err);

/* --------------------------------------------------------- for kit runners */

/* One verdict line: "PASS <what>" or "FAIL <what>: <why>". */
void mm_conf_verdict(mm_conf_run *r, bool ok, const char *what, const char *fmt, ...) MM_PRINTF(4, 5);

typedef struct mm_conf_tol {
    double rel_l2, max_abs;
} mm_conf_tol;

typedef struct mm_conf_diff {
    double rel_l2, max_abs, ref_norm;
} mm_conf_diff;

mm_conf_diff mm_conf_measure(const float *c, const float *ref, int64_t n);
/* Measures and prints the verdict; returns the verdict. */
bool mm_conf_compare(mm_conf_run *r, const char *what, const float *c, const float *ref, int64_t n, mm_conf_tol tol);

/* Keeps a copy of an output under `name` for --out (no-op without --out). */
int mm_conf_keep(mm_conf_run *r, const char *name, mm_dtype dtype, int ndim, const int64_t *shape, const void *data,
                 mm_error *err);

/* Manifest access: numbers (int or real), strings; a missing or mistyped
 * field fails with its path in the message. */
int mm_conf_json_number(const json_t *obj, const char *key, double *out, mm_error *err);
int mm_conf_json_int(const json_t *obj, const char *key, int *out, mm_error *err);
/* Tolerance object {rel_l2, max_abs} at manifest path a.b.c (dots). */
int mm_conf_tolerance(const json_t *root, const char *path, mm_conf_tol *out, mm_error *err);

/* A kit tensor converted to fp32 (any float or integer dtype), malloc'ed;
 * shape and ndim returned when the pointers are non-NULL. */
int mm_conf_read_f32(const mm_safetensors *st, const char *name, float **out, int64_t *numel, int *ndim,
                     int64_t *shape, mm_error *err);
/* Same for int64 (I64/I32/I8/U8 tensors) and float64. */
int mm_conf_read_i64(const mm_safetensors *st, const char *name, int64_t **out, int64_t *numel, mm_error *err);
int mm_conf_read_f64(const mm_safetensors *st, const char *name, double **out, int64_t *numel, mm_error *err);

#endif
