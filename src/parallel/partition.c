#include "parallel/partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mm_sp_split_make(int64_t rows, int heads, int ranks, mm_sp_split *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    if (ranks < 1 || ranks > MM_SP_MAX_RANKS)
        return mm_fail(err, "sequence parallel over %d ranks: 1 to %d are accepted", ranks, MM_SP_MAX_RANKS);
    if (heads < 1 || heads % ranks != 0) {
        char ok[160] = "";
        size_t u = 0;
        for (int n = 1; n <= heads && n <= MM_SP_MAX_RANKS && u < sizeof ok - 8; n++)
            if (heads % n == 0)
                u += (size_t)snprintf(ok + u, sizeof ok - u, "%s%d", u ? ", " : "", n);
        return mm_fail(err, "sequence parallel over %d GPUs: the model's %d attention heads must split evenly; "
                       "accepted GPU counts: %s", ranks, heads, ok);
    }
    if (rows < ranks)
        return mm_fail(err, "sequence parallel over %d ranks: only %lld rows", ranks, (long long)rows);
    out->ranks = ranks;
    out->rows = rows;
    out->heads = heads;
    out->heads_per_rank = heads / ranks;
    const int64_t base = rows / ranks, extra = rows % ranks;
    out->row_begin[0] = 0;
    for (int r = 0; r < ranks; r++)
        out->row_begin[r + 1] = out->row_begin[r] + base + (r < extra ? 1 : 0);
    return 0;
}

int mm_sp_rank_of_row(const mm_sp_split *s, int64_t row)
{
    int lo = 0, hi = s->ranks - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->row_begin[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Keeps the stream rows whose packed row falls in [b, e): local index maps
 * (rows relative to b) and the stream rows they came from. */
static int select_stream(const int64_t *index, int64_t n, int64_t b, int64_t e, int64_t **local, int64_t **source,
                         int64_t *count)
{
    int64_t k = 0;
    for (int64_t j = 0; j < n; j++)
        k += index[j] >= b && index[j] < e;
    *local = malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
    *source = malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
    if (!*local || !*source)
        return -1;
    k = 0;
    for (int64_t j = 0; j < n; j++)
        if (index[j] >= b && index[j] < e) {
            (*local)[k] = index[j] - b;
            (*source)[k] = j;
            k++;
        }
    *count = k;
    return 0;
}

/* Condition rows come first in their stream: count how many of the kept rows are. */
static int64_t count_below(const int64_t *source, int64_t n, int64_t limit)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += source[i] < limit;
    return k;
}

int mm_sp_local_make(const mm_dit_layout *full, const mm_sp_split *split, int rank, mm_sp_local *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    if (rank < 0 || rank >= split->ranks || split->rows != full->rows)
        return mm_fail(err, "sequence parallel: rank %d of %d for a %lld-row layout split as %lld rows", rank,
                       split->ranks, (long long)full->rows, (long long)split->rows);
    const int64_t b = split->row_begin[rank], e = split->row_begin[rank + 1], n = e - b;
    mm_dit_layout *l = &out->layout;
    out->row_begin = b;
    l->rows = n;
    l->positions = malloc(sizeof(double) * 3 * (size_t)n);
    l->tags = malloc((size_t)n);
    l->roles = malloc((size_t)n);
    if (!l->positions || !l->tags || !l->roles ||
        select_stream(full->text_index, full->text_rows, b, e, &l->text_index, &out->text_source, &l->text_rows) ||
        select_stream(full->video_index, full->video_rows, b, e, &l->video_index, &out->video_source,
                      &l->video_rows) ||
        select_stream(full->audio_index, full->audio_rows, b, e, &l->audio_index, &out->audio_source,
                      &l->audio_rows)) {
        mm_sp_local_free(out);
        return mm_fail(err, "sequence parallel: out of memory for rank %d's layout", rank);
    }
    memcpy(l->positions, full->positions + 3 * b, sizeof(double) * 3 * (size_t)n);
    memcpy(l->tags, full->tags + b, (size_t)n);
    memcpy(l->roles, full->roles + b, (size_t)n);
    l->cond_video_rows = count_below(out->video_source, l->video_rows, full->cond_video_rows);
    l->cond_audio_rows = count_below(out->audio_source, l->audio_rows, full->cond_audio_rows);
    return 0;
}

void mm_sp_local_free(mm_sp_local *l)
{
    if (!l)
        return;
    mm_dit_layout_free(&l->layout);
    free(l->text_source);
    free(l->video_source);
    free(l->audio_source);
    memset(l, 0, sizeof *l);
}

void mm_sp_local_rows_f32(const mm_sp_local *l, const float *full, float *out)
{
    memcpy(out, full + l->row_begin, sizeof(float) * (size_t)l->layout.rows);
}

int mm_sp_plan_heads(const mm_sp_split *s, int rank, int head_dim, mm_sp_msg *sends, mm_sp_msg *recvs)
{
    const int N = s->ranks;
    const int64_t hd = (int64_t)s->heads_per_rank * head_dim, n_me = mm_sp_rows_of(s, rank), S = s->rows;
    int k = 0;
    for (int p = 0; p < N; p++)
        for (int w = 0; w < 3; w++, k++) {
            sends[k] = (mm_sp_msg){p, ((int64_t)w * N + p) * n_me * hd, n_me * hd};
            recvs[k] = (mm_sp_msg){p, ((int64_t)w * S + s->row_begin[p]) * hd, mm_sp_rows_of(s, p) * hd};
        }
    return k;
}

int mm_sp_plan_rows(const mm_sp_split *s, int rank, int head_dim, mm_sp_msg *sends, mm_sp_msg *recvs)
{
    const int64_t hd = (int64_t)s->heads_per_rank * head_dim, n_me = mm_sp_rows_of(s, rank);
    for (int p = 0; p < s->ranks; p++) {
        sends[p] = (mm_sp_msg){p, s->row_begin[p] * hd, mm_sp_rows_of(s, p) * hd};
        recvs[p] = (mm_sp_msg){p, (int64_t)p * n_me * hd, n_me * hd};
    }
    return s->ranks;
}
