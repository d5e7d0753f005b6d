/* How a sequence-parallel DiT forward splits its work over N ranks: the
 * arithmetic only (no devices, no communication), so it is tested on the
 * host and shared by the CPU world of the tests and the GPU driver.
 *
 * Rows. The packed sequence of S rows is cut into N contiguous ranges, the
 * first S mod N ranks taking one row more: rank r holds rows
 * [row_begin[r], row_begin[r + 1]). Nothing is padded: the all-to-all moves
 * per-peer counts (NCCL send/recv take any count), so no pad rows exist and
 * no pad key has to be masked out of attention.
 *
 * Heads. In attention rank r holds all S rows of heads [r·H/N, (r+1)·H/N).
 * H must be divisible by N (H3: 56 heads, so N ∈ {1, 2, 4, 7, 8, 14, ...}):
 * uneven head groups would make every GPU wait for the largest one anyway.
 *
 * Local layouts. A rank runs the plain DiT request on its own rows: a layout
 * whose rows are its range (tags, positions, roles copied) and whose index
 * maps keep the text/video/audio rows that fall in the range, in stream
 * order, with local row numbers. The `*_source` arrays say which row of the
 * full stream each local stream row is, so inputs are gathered and outputs
 * scattered back by them.
 */
#ifndef MMH3_PARALLEL_PARTITION_H
#define MMH3_PARALLEL_PARTITION_H

#include <stdint.h>

#include "core/error.h"
#include "model/dit/layout.h"

/* The most ranks one sequence-parallel group may have. */
#define MM_SP_MAX_RANKS 64

typedef struct mm_sp_split {
    int ranks;
    int64_t rows;                          /* S */
    int64_t row_begin[MM_SP_MAX_RANKS + 1]; /* rank r: [row_begin[r], row_begin[r+1]) */
    int heads, heads_per_rank;             /* H, H/N */
} mm_sp_split;

/* Fails when N is out of range, does not divide `heads`, or exceeds the rows. */
int mm_sp_split_make(int64_t rows, int heads, int ranks, mm_sp_split *out, mm_error *err);
static inline int64_t mm_sp_rows_of(const mm_sp_split *s, int rank)
{
    return s->row_begin[rank + 1] - s->row_begin[rank];
}
/* The rank holding packed row `row`. */
int mm_sp_rank_of_row(const mm_sp_split *s, int64_t row);

/* One rank's part of a layout (see the header comment). Owns its arrays. */
typedef struct mm_sp_local {
    mm_dit_layout layout;   /* rows = the rank's rows; index maps local */
    int64_t row_begin;      /* first packed row of the rank */
    int64_t *text_source;   /* [layout.text_rows]: row of the full text */
    int64_t *video_source;  /* [layout.video_rows]: row of the full video stream */
    int64_t *audio_source;  /* [layout.audio_rows] */
} mm_sp_local;

int mm_sp_local_make(const mm_dit_layout *full, const mm_sp_split *split, int rank, mm_sp_local *out,
                     mm_error *err);
void mm_sp_local_free(mm_sp_local *l);

/* Gathers the rank's rows of a host array of per-row values:
 * out[i] = full[local->row_begin + i] (for row_t). */
void mm_sp_local_rows_f32(const mm_sp_local *l, const float *full, float *out);

/* The Ulysses exchange of one rank, as byte offsets into its buffers. Every
 * message is one contiguous run; messages between two ranks are posted in
 * the same order on both sides (part 0, 1, 2), which is how NCCL and the host
 * world match them.
 *
 * Before attention ("scatter heads, gather rows"), for each part w of
 * (q, k, v) and each peer p:
 *   send: [3][N][n_me][hd] (packed from the local q/k/v by head group):
 *         element offset ((w·N + p)·n_me)·hd, count n_me·hd
 *   recv: [3][S][hd] (all rows of the rank's heads, in packed-row order):
 *         element offset (w·S + row_begin[p])·hd, count n_p·hd
 * After attention ("scatter rows, gather heads"), for each peer p:
 *   send: [S][hd]: offset row_begin[p]·hd, count n_p·hd
 *   recv: [N][n_me][hd]: offset p·n_me·hd, count n_me·hd
 * with hd = heads_per_rank · head_dim. */
typedef struct mm_sp_msg {
    int peer;
    int64_t offset, count; /* elements */
} mm_sp_msg;

/* Fills sends/recvs (3N messages each); returns the count. */
int mm_sp_plan_heads(const mm_sp_split *s, int rank, int head_dim, mm_sp_msg *sends, mm_sp_msg *recvs);
/* Fills sends/recvs (N messages each); returns the count. */
int mm_sp_plan_rows(const mm_sp_split *s, int rank, int head_dim, mm_sp_msg *sends, mm_sp_msg *recvs);

#endif
