/* What the converter's files share (src/formats/convert*.c): the inputs seen
 * as MiniMax-native tensors, each assembled from one or more stored tensors
 * (diffusers' split q/k/v, its swapped fc1 halves, the release's interleaved
 * QKV) with the deltas that land on it, read row by row in f32. */
#ifndef MMH3_FORMATS_CONVERT_INTERNAL_H
#define MMH3_FORMATS_CONVERT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "formats/convert.h"
#include "io/safetensors.h"

/* How a target row of a part maps to a row of its stored tensor. */
typedef enum cv_row_map {
    CV_MAP_IDENTITY,
    CV_MAP_SWAP_HALVES,     /* diffusers ff.net.0.proj [value; gate] → native fc1 [gate; value] */
    CV_MAP_QKV_INTERLEAVED, /* release shards [q_h; k_h; v_h] per head → [Q; K; V] */
} cv_row_map;

typedef struct cv_part {
    const mm_st_entry *e;
    const char *file;
    int64_t row0, rows; /* the target rows it covers */
    cv_row_map map;
} cv_part;

typedef enum cv_delta_kind { CV_DELTA_DIFF, CV_DELTA_LORA } cv_delta_kind;

typedef struct cv_delta {
    cv_delta_kind kind;
    const mm_st_entry *a; /* DIFF: [rows, cols] or [rows]; LORA: A [r, cols] */
    const mm_st_entry *b; /* LORA: B [rows, r] */
    int64_t row0, rows;
    cv_row_map map;
    double scale;         /* LORA: alpha / rank */
    float *a_f32;         /* LORA: A in f32, made on first use */
    char key[200];        /* for messages */
} cv_delta;

typedef struct cv_tensor {
    char name[160]; /* native name, e.g. "blocks.3.attn.qkv_proj.weight" */
    int ndim;
    int64_t rows, cols; /* cols = 1 for vectors */
    cv_part parts[3];
    int n_parts;
    cv_delta *deltas;
    int n_deltas, cap_deltas;
    bool split;         /* assembled from diffusers' to_q / to_k / to_v (parts 0..2) */
    bool replaced;      /* by a .set_weight */
    bool used;          /* an output reads it */
} cv_tensor;

typedef struct cv_source {
    mm_safetensors *files[MM_CONVERT_MAX_INPUTS];
    int n_files;
    mm_safetensors *delta_files[16];
    int n_delta_files;
    cv_tensor *t;
    int n, cap;
    bool diffusers, native;
    mm_qkv_order qkv_order;
    int head_dim;       /* from blocks.0.attn.q_norm: for the interleaved map */
    int tensors_in, deltas_applied;
} cv_source;

/* Opens every input (files, folders of *.safetensors, *.index.json) and
 * every delta bundle, and files their tensors under native names. */
int cv_source_open(cv_source *s, const mm_convert_options *o, mm_error *err);
void cv_source_close(cv_source *s);
/* The native tensor `name`, or NULL. */
cv_tensor *cv_find(cv_source *s, const char *name);
/* Rows [r0, r0 + n) of t as f32 [n, cols], deltas applied. */
int cv_read_rows(cv_source *s, cv_tensor *t, int64_t r0, int64_t n, float *out, mm_error *err);
/* Whether t is exactly one stored tensor of dtype dt with nothing on top (a byte copy writes it). */
bool cv_is_plain(const cv_tensor *t, mm_dtype dt);

/* convert_adaln.c: the rank-r factorization of the full model's AdaLN input
 * curve (see convert.h). */
typedef struct cv_adaln {
    int rank, points, dim; /* r, grid points (1025), time_dim (2688) */
    double *basis;         /* V [dim, r] (orthonormal columns) */
    double *mean;          /* μ [dim] */
    float *table;          /* (c − μ)·V [points, r] */
    float *grid;           /* c = SiLU(temb) [points, dim] */
    double kept, residual;
} cv_adaln;

int cv_adaln_factor(cv_source *s, int points, int rank, cv_adaln *out, mm_error *err);
void cv_adaln_free(cv_adaln *a);

#endif
