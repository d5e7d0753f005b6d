/* The sequence-parallel arithmetic on the host: how rows and heads split,
 * what each rank's local layout holds, and — simulated with tagged values,
 * no devices — that the two all-to-all message plans deliver every element
 * of q/k/v to the rank that owns its head and every attention output back
 * to the rank that owns its row. */
#include <stdlib.h>
#include <string.h>

#include "model/dit/layout.h"
#include "parallel/partition.h"
#include "test.h"

static void test_rows_split_unevenly_without_padding(void)
{
    mm_sp_split s;
    mm_error err = {{0}};
    /* 38,010 rows (1344×768×124, L = 300) over 8: 2 ranks take one row more. */
    MM_REQUIRE(mm_sp_split_make(38010, 56, 8, &s, &err) == 0, "%s", err.msg);
    MM_EXPECT(s.heads_per_rank == 7, "heads per rank %d", s.heads_per_rank);
    int64_t total = 0;
    for (int r = 0; r < 8; r++) {
        int64_t n = mm_sp_rows_of(&s, r);
        MM_EXPECT(n == (r < 2 ? 4752 : 4751), "rank %d holds %lld rows", r, (long long)n);
        total += n;
    }
    MM_EXPECT(total == 38010 && s.row_begin[8] == 38010, "rows covered: %lld", (long long)total);
    for (int64_t row = 0; row < 38010; row += 997) {
        int r = mm_sp_rank_of_row(&s, row);
        MM_EXPECT(s.row_begin[r] <= row && row < s.row_begin[r + 1], "row %lld → rank %d", (long long)row, r);
    }
    MM_EXPECT(mm_sp_rank_of_row(&s, 38009) == 7 && mm_sp_rank_of_row(&s, 0) == 0, "ends");
    /* Divisible case: equal shares. */
    MM_REQUIRE(mm_sp_split_make(64, 4, 4, &s, &err) == 0, "%s", err.msg);
    for (int r = 0; r < 4; r++)
        MM_EXPECT(mm_sp_rows_of(&s, r) == 16, "rank %d", r);
}

static void test_head_counts_that_do_not_divide_are_refused(void)
{
    mm_sp_split s;
    mm_error err = {{0}};
    MM_EXPECT(mm_sp_split_make(38010, 56, 3, &s, &err) != 0, "56 heads over 3");
    MM_EXPECT(strstr(err.msg, "56 attention heads") && strstr(err.msg, "1, 2, 4, 7, 8, 14, 28, 56"),
              "message: %s", err.msg);
    MM_EXPECT(mm_sp_split_make(38010, 56, 6, &s, &err) != 0, "56 heads over 6");
    MM_EXPECT(mm_sp_split_make(3, 4, 4, &s, &err) != 0 && strstr(err.msg, "only 3 rows"), "more ranks than rows");
    MM_EXPECT(mm_sp_split_make(100, 4, 0, &s, &err) != 0, "zero ranks");
    for (int n = 1; n <= 8; n *= 2)
        MM_EXPECT(mm_sp_split_make(38010, 56, n, &s, &err) == 0, "N=%d: %s", n, err.msg);
}

/* A small fl2va-like layout: [text | keyframe | audio | video]. */
static int small_layout(mm_dit_layout *l, mm_error *err)
{
    static int8_t tags[13];
    for (int i = 0; i < 13; i++)
        tags[i] = i == 4 || i == 5 ? 0 : 1;
    mm_dit_anchor first = MM_DIT_ANCHOR_FIRST;
    mm_dit_layout_request req = {
        .text_tags = tags,
        .text_rows = 13,
        .target = {.latent_frames = 2, .latent_height = 4, .latent_width = 6, .audio_latents = 5, .patch_t = 1,
                   .patch_h = 2, .patch_w = 2, .audio_channels = 2},
        .anchors = &first,
        .n_anchors = 1,
    };
    return mm_dit_layout_build(&req, l, err);
}

static void test_local_layouts_cover_every_row_once(void)
{
    mm_dit_layout full;
    mm_error err = {{0}};
    MM_REQUIRE(small_layout(&full, &err) == 0, "%s", err.msg);
    MM_REQUIRE(full.cond_video_rows > 0 && full.audio_rows > 0, "layout has condition and audio rows");
    for (int n = 1; n <= 5; n++) {
        mm_sp_split s;
        MM_REQUIRE(mm_sp_split_make(full.rows, 20, n, &s, &err) == 0 || n == 3, "%s", err.msg);
        if (n == 3)
            continue; /* 20 heads do not split in 3 */
        int *seen_row = calloc((size_t)full.rows, sizeof(int));
        int *seen_v = calloc((size_t)full.video_rows, sizeof(int));
        int *seen_a = calloc((size_t)full.audio_rows, sizeof(int));
        int *seen_t = calloc((size_t)full.text_rows, sizeof(int));
        int64_t cond_v = 0, cond_a = 0;
        for (int r = 0; r < n; r++) {
            mm_sp_local lo;
            MM_REQUIRE(mm_sp_local_make(&full, &s, r, &lo, &err) == 0, "%s", err.msg);
            const mm_dit_layout *l = &lo.layout;
            MM_EXPECT(l->rows == mm_sp_rows_of(&s, r) && lo.row_begin == s.row_begin[r], "rank %d rows", r);
            for (int64_t i = 0; i < l->rows; i++) {
                const int64_t g = lo.row_begin + i;
                seen_row[g]++;
                MM_EXPECT(l->tags[i] == full.tags[g] && l->roles[i] == full.roles[g] &&
                              memcmp(&l->positions[3 * i], &full.positions[3 * g], 3 * sizeof(double)) == 0,
                          "rank %d row %lld copies row %lld", r, (long long)i, (long long)g);
            }
            /* Local index maps point at local rows holding the same stream row. */
            const struct {
                int64_t n, *idx, *src, *full_idx;
                int *seen;
            } st[3] = {{l->text_rows, l->text_index, lo.text_source, full.text_index, seen_t},
                       {l->video_rows, l->video_index, lo.video_source, full.video_index, seen_v},
                       {l->audio_rows, l->audio_index, lo.audio_source, full.audio_index, seen_a}};
            for (int k = 0; k < 3; k++)
                for (int64_t i = 0; i < st[k].n; i++) {
                    MM_EXPECT(st[k].idx[i] >= 0 && st[k].idx[i] < l->rows &&
                                  st[k].full_idx[st[k].src[i]] == lo.row_begin + st[k].idx[i],
                              "stream %d rank %d entry %lld", k, r, (long long)i);
                    MM_EXPECT(i == 0 || st[k].src[i] > st[k].src[i - 1], "stream order kept");
                    st[k].seen[st[k].src[i]]++;
                }
            cond_v += l->cond_video_rows;
            cond_a += l->cond_audio_rows;
            for (int64_t i = 0; i < l->cond_video_rows; i++)
                MM_EXPECT(lo.video_source[i] < full.cond_video_rows, "condition rows first");
            mm_sp_local_free(&lo);
        }
        for (int64_t g = 0; g < full.rows; g++)
            MM_EXPECT(seen_row[g] == 1, "N=%d: row %lld held %d times", n, (long long)g, seen_row[g]);
        for (int64_t j = 0; j < full.video_rows; j++)
            MM_EXPECT(seen_v[j] == 1, "N=%d: video row %lld", n, (long long)j);
        for (int64_t j = 0; j < full.audio_rows; j++)
            MM_EXPECT(seen_a[j] == 1, "N=%d: audio row %lld", n, (long long)j);
        for (int64_t j = 0; j < full.text_rows; j++)
            MM_EXPECT(seen_t[j] == 1, "N=%d: text row %lld", n, (long long)j);
        MM_EXPECT(cond_v == full.cond_video_rows && cond_a == full.cond_audio_rows, "condition counts");
        free(seen_row);
        free(seen_v);
        free(seen_a);
        free(seen_t);
    }
    float row_t[64];
    for (int i = 0; i < 64; i++)
        row_t[i] = (float)i;
    mm_sp_split s;
    mm_sp_local lo;
    MM_REQUIRE(mm_sp_split_make(full.rows, 4, 4, &s, &err) == 0 && mm_sp_local_make(&full, &s, 2, &lo, &err) == 0,
               "%s", err.msg);
    float got[64];
    mm_sp_local_rows_f32(&lo, row_t, got);
    MM_EXPECT(got[0] == (float)s.row_begin[2] && got[lo.layout.rows - 1] == (float)(s.row_begin[3] - 1),
              "row_t gathered");
    mm_sp_local_free(&lo);
    mm_dit_layout_free(&full);
}

/* Tagged value of part w (0 q, 1 k, 2 v), row, head, channel. */
static int64_t tag(int w, int64_t row, int64_t head, int64_t d) { return ((w * 100000 + row) * 1000 + head) * 1000 + d; }

/* Delivers every rank's messages: the j-th send of p to r lands where the
 * j-th receive of r from p says. */
static int deliver(int N, int64_t **send, mm_sp_msg **sends, const int *ns, int64_t **recv, mm_sp_msg **recvs,
                   const int *nr)
{
    for (int r = 0; r < N; r++) {
        int taken[MM_SP_MAX_RANKS] = {0};
        for (int k = 0; k < nr[r]; k++) {
            const int p = recvs[r][k].peer;
            int j = 0, idx = -1;
            for (int m = 0; m < ns[p]; m++)
                if (sends[p][m].peer == r && j++ == taken[p]) {
                    idx = m;
                    break;
                }
            taken[p]++;
            if (idx < 0 || sends[p][idx].count != recvs[r][k].count)
                return -1;
            memcpy(recv[r] + recvs[r][k].offset, send[p] + sends[p][idx].offset,
                   sizeof(int64_t) * (size_t)recvs[r][k].count);
        }
    }
    return 0;
}

static void simulate(int64_t S, int H, int D, int N)
{
    mm_sp_split s;
    mm_error err = {{0}};
    MM_REQUIRE(mm_sp_split_make(S, H, N, &s, &err) == 0, "%s", err.msg);
    const int hl = s.heads_per_rank;
    const int64_t hd = (int64_t)hl * D;
    int64_t *send[MM_SP_MAX_RANKS], *recv[MM_SP_MAX_RANKS];
    mm_sp_msg *sends[MM_SP_MAX_RANKS], *recvs[MM_SP_MAX_RANKS];
    int ns[MM_SP_MAX_RANKS], nr[MM_SP_MAX_RANKS];
    for (int r = 0; r < N; r++) {
        const int64_t n = mm_sp_rows_of(&s, r);
        send[r] = malloc(sizeof(int64_t) * (size_t)(3 * N * n * hd));
        recv[r] = malloc(sizeof(int64_t) * (size_t)(3 * S * hd));
        sends[r] = malloc(sizeof(mm_sp_msg) * 3 * (size_t)N);
        recvs[r] = malloc(sizeof(mm_sp_msg) * 3 * (size_t)N);
        /* Pack as ulysses.c does: send[w][p][i][h·D + d] = part w, row i, head p·hl + h. */
        for (int w = 0; w < 3; w++)
            for (int p = 0; p < N; p++)
                for (int64_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < hd; j++)
                        send[r][((w * N + p) * n + i) * hd + j] = tag(w, s.row_begin[r] + i, p * hl + j / D, j % D);
        ns[r] = mm_sp_plan_heads(&s, r, D, sends[r], recvs[r]);
        nr[r] = ns[r];
        MM_EXPECT(ns[r] == 3 * N, "3N messages");
        memset(recv[r], 0xff, sizeof(int64_t) * (size_t)(3 * S * hd));
    }
    MM_REQUIRE(deliver(N, send, sends, ns, recv, recvs, nr) == 0, "heads plan: unmatched message");
    int bad = 0;
    for (int r = 0; r < N; r++)
        for (int w = 0; w < 3; w++)
            for (int64_t row = 0; row < S; row++)
                for (int64_t j = 0; j < hd; j++)
                    bad += recv[r][(w * S + row) * hd + j] != tag(w, row, r * hl + j / D, j % D);
    MM_EXPECT(bad == 0, "S=%lld H=%d N=%d: %d elements of q/k/v misplaced", (long long)S, H, N, bad);

    /* Inverse: rank r's attention output [S][hd] for its heads goes back by rows. */
    for (int r = 0; r < N; r++) {
        for (int64_t row = 0; row < S; row++)
            for (int64_t j = 0; j < hd; j++)
                recv[r][row * hd + j] = tag(0, row, r * hl + j / D, j % D); /* reuse as the o buffer */
        ns[r] = nr[r] = mm_sp_plan_rows(&s, r, D, sends[r], recvs[r]);
    }
    /* o lives in recv[], the returning rows land in send[] (as in ulysses.c, buffer a). */
    MM_REQUIRE(deliver(N, recv, sends, ns, send, recvs, nr) == 0, "rows plan: unmatched message");
    bad = 0;
    for (int r = 0; r < N; r++) {
        const int64_t n = mm_sp_rows_of(&s, r);
        /* Unpack: out[i][p·hl + h][d] = back[p][i][h·D + d]. */
        for (int p = 0; p < N; p++)
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < hd; j++)
                    bad += send[r][(p * n + i) * hd + j] != tag(0, s.row_begin[r] + i, p * hl + j / D, j % D);
    }
    MM_EXPECT(bad == 0, "S=%lld H=%d N=%d: %d attention outputs misplaced", (long long)S, H, N, bad);
    for (int r = 0; r < N; r++) {
        free(send[r]);
        free(recv[r]);
        free(sends[r]);
        free(recvs[r]);
    }
}

static void test_all_to_all_plans_route_every_element(void)
{
    simulate(37, 8, 3, 1);
    simulate(37, 8, 3, 2);  /* 37 rows: uneven */
    simulate(37, 8, 3, 4);
    simulate(37, 8, 3, 8);
    simulate(40, 8, 2, 8);  /* even */
    simulate(11, 56, 1, 8); /* H3's head count, one row more than the ranks on 3 of them */
    simulate(9, 56, 2, 7);
}

int main(void)
{
    MM_RUN(test_rows_split_unevenly_without_padding);
    MM_RUN(test_head_counts_that_do_not_divide_are_refused);
    MM_RUN(test_local_layouts_cover_every_row_once);
    MM_RUN(test_all_to_all_plans_route_every_element);
    return mm_test_exit();
}
