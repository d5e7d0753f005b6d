/* The memory plan for the cards people have (24, 32, 48, 80 and 141 GB; one
 * and two GPUs) on the release's sizes, worked out here from its shapes the
 * way the loaders allocate them; every plan's phases are summed again here
 * from the blocks it streams and the parts it loads per use, and must stay
 * under the budget; refused budgets name the smallest one that works, and
 * that one does. */
#include <math.h>
#include <string.h>

#include "backend/device.h"
#include "backend/memplan.h"
#include "model/dit/dit.h"
#include "parallel/sp_dit.h"
#include "test.h"

#define GIB 1073741824.0
static const uint64_t G = 1ull << 30;

static uint64_t t_bytes(int64_t rows, int64_t cols, int elem) { return mm_device_alloc_size((size_t)(rows * cols * elem)); }

/* The release DiT (dit.md §1): H 5376, 56 x 128 heads, F 14336, 50 int8
 * ConvRot blocks with f32 row scales and an f32 AdaLN projection
 * [3·6·H, 8], two bf16 refiner blocks, f32 patch projections and heads. */
static mm_dit_config release_config(void)
{
    mm_dit_config c = {.hidden = 5376, .heads = 56, .head_dim = 128, .ffn = 14336, .layers = 50,
                       .refiner_layers = 2, .text_dim = 5120, .video_row_width = 96, .audio_row_width = 32,
                       .time_dim = 8, .rope_dim = 96, .modalities = 3};
    return c;
}

static void release_sizes(mm_memplan_sizes *s, int64_t rows, int64_t text_rows)
{
    const mm_dit_config c = release_config();
    const int64_t H = c.hidden, A = (int64_t)c.heads * c.head_dim, F = c.ffn;
    const int64_t lin[4][2] = {{3 * A, H}, {H, A}, {2 * F, H}, {H, F}};
    memset(s, 0, sizeof *s);
    uint64_t block = 2 * t_bytes(H, 1, 2) + 2 * t_bytes(c.head_dim, 1, 2) + t_bytes(18 * H, c.time_dim, 4) +
                     t_bytes(18 * H, 1, 4);
    uint64_t refiner = 2 * t_bytes(H, 1, 2) + 2 * t_bytes(c.head_dim, 1, 2);
    for (int i = 0; i < 4; i++) {
        block += t_bytes(lin[i][0], lin[i][1], 1) + t_bytes(lin[i][0], 1, 4);
        refiner += t_bytes(lin[i][0], lin[i][1], 2);
    }
    s->dit_blocks = c.layers;
    for (int b = 0; b < c.layers; b++)
        s->dit_block[b] = block;
    s->dit_fixed = 2 * refiner + t_bytes(H, c.text_dim, 2) + t_bytes(H, 1, 2) + t_bytes(H, 96, 4) +
                   t_bytes(H, 32, 4) + t_bytes(96, H, 4) + t_bytes(32, H, 4) + 3 * t_bytes(H, 1, 4) +
                   3 * t_bytes(H, 1, 2) + t_bytes(6 * H, c.time_dim, 4) + t_bytes(6 * H, 1, 4);
    s->dit_work = mm_dit_request_bytes_for(&c, rows, text_rows, true);
    /* The released text encoder and VAE files (docs/PERFORMANCE.md): 15.7 GB
     * nvfp4, 5.2 GB f16 + 0.6 GB f32; the decode's 4.3 GiB above the weights. */
    s->te_bytes = 15700000000ull;
    s->te_work = G;
    s->vae_bytes = 5800000000ull;
    s->vae_work = (uint64_t)(4.3 * GIB);
}

/* The phases' peaks summed again from what the plan says, the plan's own
 * figures checked against them, all under the budget. */
static void check_plan(const mm_memplan_in *in, const mm_memplan *p, const char *what)
{
    const mm_memplan_sizes *s = &in->s;
    uint64_t dit = s->dit_fixed, slot = 0;
    int streamed = 0;
    MM_EXPECT(!p->stream[0], "%s: block 0 streamed", what);
    for (int b = 0; b < s->dit_blocks; b++) {
        if (p->stream[b]) {
            streamed++;
            slot = s->dit_block[b] > slot ? s->dit_block[b] : slot;
        } else {
            dit += s->dit_block[b];
        }
    }
    MM_EXPECT(streamed == p->streamed && (streamed == 0 || streamed >= 3), "%s: %d streamed (plan says %d)", what,
              streamed, p->streamed);
    if (streamed)
        slot += MM_MEMPLAN_SLOT_ROUNDING;
    MM_EXPECT(slot == p->slot_bytes, "%s: slot %llu vs %llu", what, (unsigned long long)slot,
              (unsigned long long)p->slot_bytes);
    dit += 2 * slot;
    const uint64_t te = s->te_bytes + s->te_work, vae = s->vae_bytes + s->vae_work;
    uint64_t denoise, cond, dec;
    if (p->n_gpus == 1) {
        uint64_t beside = (p->te_per_use ? 0 : s->te_bytes) + (p->vae_per_use ? 0 : s->vae_bytes);
        uint64_t kept = p->dit_freed ? 0 : dit;
        denoise = dit + beside + s->dit_work;
        cond = kept + beside + (p->te_per_use ? te : s->te_work);
        dec = kept + beside + (p->vae_per_use ? vae : s->vae_work);
        MM_EXPECT(denoise <= p->budget[0] && cond <= p->budget[0] && dec <= p->budget[0],
                  "%s: phases %.2f / %.2f / %.2f GiB over the budget %.2f", what, denoise / GIB, cond / GIB,
                  dec / GIB, p->budget[0] / GIB);
    } else {
        denoise = dit + s->dit_work;
        uint64_t beside = p->te_per_use ? 0 : s->te_bytes + s->vae_bytes;
        cond = beside + (p->te_per_use ? te : s->te_work);
        dec = beside + (p->vae_per_use ? vae : s->vae_work);
        MM_EXPECT(denoise <= p->budget[0] && cond <= p->budget[1] && dec <= p->budget[1],
                  "%s: phases %.2f | %.2f / %.2f GiB over the budgets %.2f | %.2f", what, denoise / GIB,
                  cond / GIB, dec / GIB, p->budget[0] / GIB, p->budget[1] / GIB);
    }
    MM_EXPECT(denoise == p->peak_denoise && cond == p->peak_condition && dec == p->peak_vae,
              "%s: the plan's peaks %.3f/%.3f/%.3f vs %.3f/%.3f/%.3f GiB", what, p->peak_denoise / GIB,
              p->peak_condition / GIB, p->peak_vae / GIB, denoise / GIB, cond / GIB, dec / GIB);
}

static mm_memplan plan_for(int gpus, double card_gb, double budget_gib, mm_memplan_sizes *s, int *rc, mm_error *err)
{
    mm_memplan_in in = {.n_gpus = gpus, .budget = (uint64_t)(budget_gib * GIB), .s = *s};
    for (int g = 0; g < gpus; g++) {
        in.gpu_total[g] = (uint64_t)(card_gb * 1e9);
        in.gpu_free[g] = in.gpu_total[g] - (uint64_t)(0.6 * GIB); /* the CUDA context's share */
    }
    mm_memplan p;
    *rc = mm_memplan_choose(&in, &p, NULL, err);
    if (*rc == 0) {
        char what[96];
        snprintf(what, sizeof what, "%d x %.0f GB, budget %.1f GiB", gpus, card_gb, budget_gib);
        check_plan(&in, &p, what);
        printf("     %s: %s\n", what, p.summary);
    }
    return p;
}

/* A 5 s clip at 1344x768 (S = 38,010 rows, 300 of them text). */
static void test_cards(void)
{
    mm_memplan_sizes s;
    release_sizes(&s, 38010, 300);
    mm_error err = {{0}};
    int rc;
    mm_memplan p = plan_for(1, 141, 0, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p.mode == MM_PLAN_RESIDENT, "H200: %s %s", mm_memplan_mode_name(p.mode), err.msg);
    p = plan_for(1, 80, 0, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p.mode == MM_PLAN_RESIDENT, "80 GB: %s %s", mm_memplan_mode_name(p.mode), err.msg);
    p = plan_for(1, 48, 0, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p.mode == MM_PLAN_PER_USE && !p.streamed, "48 GB: %s %s", mm_memplan_mode_name(p.mode),
              err.msg);
    p = plan_for(1, 32, 0, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p.streamed >= 3 && !p.dit_freed, "32 GB: %s %s", mm_memplan_mode_name(p.mode), err.msg);
    mm_memplan p24 = plan_for(1, 24, 0, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p24.streamed > p.streamed, "24 GB streams more than 32 GB: %d vs %d (%s)", p24.streamed,
              p.streamed, err.msg);
    /* The budgets on an H200: each plan fits its budget, smaller ones stream more. */
    mm_memplan p22 = plan_for(1, 141, 22, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p22.streamed >= 3, "22 GiB: %s", err.msg);
    mm_memplan p30 = plan_for(1, 141, 30, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p30.streamed >= 3 && p30.streamed < p22.streamed, "30 GiB: %d streamed vs %d at 22",
              p30.streamed, p22.streamed);
    mm_memplan p46 = plan_for(1, 141, 46, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p46.mode == MM_PLAN_PER_USE, "46 GiB: %s", mm_memplan_mode_name(p46.mode));
    /* Two GPUs: the DiT alone on the first; the text encoder and VAEs share the second. */
    p = plan_for(2, 48, 0, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p.mode == MM_PLAN_RESIDENT && p.n_gpus == 2, "2 x 48 GB: %s", mm_memplan_mode_name(p.mode));
    p = plan_for(2, 24, 0, &s, &rc, &err);
    MM_EXPECT(rc == 0 && p.streamed >= 3 && p.te_per_use, "2 x 24 GB: %s, %d streamed", mm_memplan_mode_name(p.mode),
              p.streamed);
    MM_EXPECT(p.streamed < p24.streamed, "2 x 24 GB stream fewer blocks than one 24 GB card: %d vs %d", p.streamed,
              p24.streamed);
}

/* The clips at 1344x768 (clip5/10/15: 124/243/362 frames, S =
 * 38,010 / 73,586 / 109,262 rows, 300 of them text) on every card and the
 * issue's budgets. The activations grow with S (about 0.18 MiB a row, the
 * FFN's fc1/glu the largest part) and streaming pays for them: the issue's
 * targets (clip5 at 22 GiB, clip10 and clip15 at 46 GiB) plan without
 * chunking any activation over rows. Only clip15 below 22.1 GiB (a 24 GB
 * card) is refused: its 19.4 GiB of activations plus the DiT's smallest
 * footprint; that is where row chunking would start to pay. */
static void test_clips(void)
{
    static const int64_t rows[3] = {38010, 73586, 109262};
    static const double cards[5] = {24, 32, 48, 80, 141};
    mm_error err = {{0}};
    int rc;
    for (int c = 0; c < 3; c++) {
        mm_memplan_sizes s;
        release_sizes(&s, rows[c], 300);
        printf("     clip%d (S = %lld): DiT activations %.2f GiB\n", 5 * (c + 1), (long long)rows[c],
               s.dit_work / GIB);
        for (int k = 0; k < 5; k++) {
            const bool fits = !(c == 2 && cards[k] == 24);
            mm_memplan p = plan_for(1, cards[k], 0, &s, &rc, &err);
            MM_EXPECT((rc == 0) == fits && (!fits || p.peak[0] <= p.budget[0]), "clip%d on %.0f GB: %s",
                      5 * (c + 1), cards[k], rc ? err.msg : p.summary);
        }
        const double budgets[3] = {22, 30, 46};
        for (int b = 0; b < 3; b++) {
            const bool fits = !(c == 2 && budgets[b] == 22);
            mm_memplan p = plan_for(1, 141, budgets[b], &s, &rc, &err);
            MM_EXPECT((rc == 0) == fits && (!fits || p.peak_denoise <= (uint64_t)(budgets[b] * GIB)),
                      "clip%d at %.0f GiB: %s", 5 * (c + 1), budgets[b], rc ? err.msg : p.summary);
        }
    }
    mm_memplan_sizes s15;
    release_sizes(&s15, rows[2], 300);
    mm_memplan_in in = {.n_gpus = 1, .gpu_total = {141 * G}, .budget = 22 * G, .s = s15};
    mm_memplan p;
    uint64_t min = 0;
    MM_EXPECT(mm_memplan_choose(&in, &p, &min, &err) == -1 && strstr(err.msg, "DiT's denoising") && min > 22 * G &&
              min <= 23 * G, "clip15 at 22 GiB names the denoise phase and a budget just above: %s", err.msg);
    /* The activations alone of a 15 s clip are more than a 5 s clip's whole
     * denoise phase at 22 GiB leaves them: the planner pays for them with
     * streamed blocks, so a 15 s clip streams more at the same budget. */
    mm_memplan_sizes s5;
    release_sizes(&s5, rows[0], 300);
    mm_memplan p5 = plan_for(1, 141, 30, &s5, &rc, &err);
    mm_memplan p15 = plan_for(1, 141, 30, &s15, &rc, &err);
    MM_EXPECT(p15.streamed > p5.streamed, "clip15 streams more than clip5 at 30 GiB: %d vs %d", p15.streamed,
              p5.streamed);
}

/* Sequence parallel over 1, 2, 4 and 8 GPUs (clip15 on 141 GB cards at
 * 46 GiB, and at 22 GiB, which one GPU refuses): each rank's activations are
 * its S/N rows plus the Ulysses buffers, summed again here from the shapes;
 * more GPUs need less per GPU and stream fewer blocks; GPUs 1..N-1 hold the
 * DiT and their rows only; 7 GPUs split 56 heads, 3 do not. */
static void test_sequence_parallel(void)
{
    const mm_dit_config c = release_config();
    const int64_t S = 109262, L = 300;
    const int ranks[4] = {1, 2, 4, 8};
    uint64_t prev_work = 0;
    int prev_streamed = 1 << 30;
    mm_error err = {{0}};
    for (int i = 0; i < 4; i++) {
        const int N = ranks[i];
        mm_memplan_sizes s;
        release_sizes(&s, S, L);
        uint64_t work = 0;
        MM_REQUIRE(mm_sp_rank_work_bytes(&c, S, L, N, &work, &err) == 0, "%d GPUs: %s", N, err.msg);
        const int64_t mine = (S + N - 1) / N, hd = (int64_t)(c.heads / N) * c.head_dim;
        uint64_t want = mm_dit_request_bytes_for(&c, mine, (L * mine + S - 1) / S, true);
        if (N > 1)
            want += t_bytes(3 * N * mine, hd, 2) + t_bytes(3 * S, hd, 2) + t_bytes(S, hd, 2);
        MM_EXPECT(work == want, "%d GPUs: %.3f vs %.3f GiB", N, work / GIB, want / GIB);
        MM_EXPECT(N == 1 ? work == s.dit_work : work < prev_work, "%d GPUs: %.2f GiB per rank, %.2f with fewer", N,
                  work / GIB, prev_work / GIB);
        s.dit_work = work;
        for (int b = 0; b < 2; b++) {
            const double budget = b ? 22 : 46;
            mm_memplan_in in = {.n_gpus = N, .budget = (uint64_t)(budget * GIB), .sp_ranks = N, .s = s};
            for (int g = 0; g < N; g++)
                in.gpu_total[g] = 141 * G;
            mm_memplan p;
            int rc = mm_memplan_choose(&in, &p, NULL, &err);
            MM_EXPECT(rc == (N == 1 && b ? -1 : 0), "%d GPUs at %.0f GiB: %s", N, budget, err.msg);
            if (rc != 0)
                continue;
            check_plan(&in, &p, "sequence parallel");
            printf("     %d GPUs, %.0f GiB: %s\n", N, budget, p.summary);
            MM_EXPECT(p.sp_ranks == (N > 1 ? N : 0) && (N == 1 || strstr(p.summary, "sequence parallel")),
                      "%d GPUs: sp_ranks %d", N, p.sp_ranks);
            if (N > 1)
                MM_EXPECT(p.peak_rank <= p.peak_denoise && p.peak_rank <= in.budget, "%d GPUs: rank peak %.2f GiB", N,
                          p.peak_rank / GIB);
            if (b) {
                MM_EXPECT(p.streamed <= prev_streamed, "%d GPUs at 22 GiB stream %d, fewer GPUs %d", N, p.streamed,
                          prev_streamed);
                prev_streamed = p.streamed;
            }
        }
        prev_work = work;
    }
    uint64_t w;
    MM_EXPECT(mm_sp_rank_work_bytes(&c, S, L, 7, &w, &err) == 0, "7 GPUs: %s", err.msg);
    MM_EXPECT(mm_sp_rank_work_bytes(&c, S, L, 3, &w, &err) == -1 && strstr(err.msg, "accepted GPU counts"), "3: %s",
              err.msg);
    mm_memplan_in in = {.n_gpus = 2, .gpu_total = {141 * G, 141 * G}, .sp_ranks = 4};
    release_sizes(&in.s, S, L);
    mm_memplan p;
    MM_EXPECT(mm_memplan_choose(&in, &p, NULL, &err) == -1 && strstr(err.msg, "4 GPUs"), "4 ranks on 2 GPUs: %s",
              err.msg);
}

static void test_refusals(void)
{
    mm_memplan_sizes s;
    release_sizes(&s, 38010, 300);
    mm_memplan_in in = {.n_gpus = 1, .gpu_total = {141 * G}, .budget = 10 * G, .s = s};
    mm_memplan p;
    mm_error err = {{0}};
    uint64_t min = 0;
    MM_REQUIRE(mm_memplan_choose(&in, &p, &min, &err) == -1, "10 GiB cannot hold the text encoder");
    MM_EXPECT(strstr(err.msg, "text encoder") && strstr(err.msg, "--vram-budget") && min > 10 * G, "%s", err.msg);
    in.budget = min;
    MM_EXPECT(mm_memplan_choose(&in, &p, NULL, &err) == 0, "the smallest budget named (%.1f GiB) works: %s",
              min / GIB, err.msg);
    in.budget = min - G / 10;
    MM_EXPECT(mm_memplan_choose(&in, &p, NULL, &err) == -1, "a tenth of a GiB less does not");
    in.budget = 200 * G;
    MM_EXPECT(mm_memplan_choose(&in, &p, NULL, &err) == -1 && strstr(err.msg, "more than GPU 0 has free"), "%s",
              err.msg);
    uint64_t b;
    MM_EXPECT(mm_memplan_parse_budget("22", &b, &err) == 0 && b == 22 * G, "22");
    MM_EXPECT(mm_memplan_parse_budget("30.5", &b, &err) == 0 && b == 61 * G / 2, "30.5");
    MM_EXPECT(mm_memplan_parse_budget("-3", &b, &err) == -1 && strstr(err.msg, "GiB"), "-3: %s", err.msg);
    MM_EXPECT(mm_memplan_parse_budget("22GB", &b, &err) == -1, "22GB");
}

/* Random sizes and budgets: every plan fits (check_plan), a slower mode is
 * chosen only when the faster ones do not fit, and every refusal's smallest
 * budget works while a tenth of a GiB less does not. */
static void test_random(void)
{
    uint64_t state = 0x9e3779b97f4a7c15ull;
#define RND(lo, hi) ((state = state * 6364136223846793005ull + 1442695040888963407ull), \
                     (lo) + (double)(state >> 11) / 9007199254740992.0 * ((hi) - (lo)))
    int plans = 0, refused = 0;
    for (int it = 0; it < 3000; it++) {
        mm_memplan_in in = {.n_gpus = RND(0, 1) < 0.7 ? 1 : 2};
        mm_memplan_sizes *s = &in.s;
        s->dit_blocks = 1 + (int)RND(0, 60);
        double blk = RND(0.05, 1.0);
        for (int b = 0; b < s->dit_blocks; b++)
            s->dit_block[b] = (uint64_t)(RND(0.9, 1.1) * blk * GIB);
        s->dit_fixed = (uint64_t)(RND(0, 3) * GIB);
        s->dit_work = (uint64_t)(RND(0.5, 12) * GIB);
        s->te_bytes = (uint64_t)(RND(1, 20) * GIB);
        s->te_work = (uint64_t)(RND(0.1, 2) * GIB);
        s->vae_bytes = (uint64_t)(RND(0.5, 7) * GIB);
        s->vae_work = (uint64_t)(RND(0.5, 6) * GIB);
        in.budget = (uint64_t)(RND(4, 80) * GIB);
        mm_memplan p;
        mm_error err = {{0}};
        uint64_t min = 0;
        if (mm_memplan_choose(&in, &p, &min, &err) == 0) {
            plans++;
            check_plan(&in, &p, "random");
            uint64_t dit = s->dit_fixed; /* the DiT fully resident */
            for (int b = 0; b < s->dit_blocks; b++)
                dit += s->dit_block[b];
            if (in.n_gpus == 1 && p.mode >= MM_PLAN_STREAMED) {
                uint64_t per_use = dit + fmax(fmax(s->dit_work, s->te_bytes + s->te_work), s->vae_bytes + s->vae_work);
                MM_EXPECT(per_use > in.budget, "streams although per-use fits");
            }
        } else {
            refused++;
            MM_REQUIRE(min > 0, "a refusal names a budget: %s", err.msg);
            in.budget = min;
            MM_EXPECT(mm_memplan_choose(&in, &p, NULL, &err) == 0, "the budget named works: %s", err.msg);
            in.budget = min - (min > G ? G / 10 : G / 100);
            MM_EXPECT(mm_memplan_choose(&in, &p, NULL, &err) == -1, "one printed step less does not");
        }
        if (mm_test_case_failed)
            break;
    }
    MM_EXPECT(plans > 300 && refused > 300, "both outcomes exercised: %d plans, %d refused", plans, refused);
#undef RND
}

int main(void)
{
    MM_RUN(test_cards);
    MM_RUN(test_clips);
    MM_RUN(test_sequence_parallel);
    MM_RUN(test_refusals);
    MM_RUN(test_random);
    return mm_test_exit();
}
