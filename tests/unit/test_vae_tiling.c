/* Spatial tiling and temporal chunking of the video VAE: the tile plans
 * (spec example and the kit's plans), the blend (later tile weight k/e),
 * stitching with the ORIGINAL neighbours (the kit control
 * stitch_blended_neighbours), overlaps widened round-robin (control
 * minimum_overlap_only), and the chunk plan (frame counts, pad tokens). */
#include "model/vae/video_tiling.h"
#include "test_vae_kit.h"

static void expect_plan(const mm_vae_tile_plan *p, int n, const int64_t *starts, const int64_t *overlaps)
{
    MM_EXPECT(p->n == n, "%d tiles, %d expected", p->n, n);
    for (int i = 0; i < n && i < p->n; i++)
        MM_EXPECT(p->start[i] == starts[i], "start[%d] %lld, %lld expected", i, (long long)p->start[i],
                  (long long)starts[i]);
    for (int i = 0; i + 1 < n && i + 1 < p->n; i++)
        MM_EXPECT(p->overlap[i] == overlaps[i], "overlap[%d] %lld, %lld expected", i, (long long)p->overlap[i],
                  (long long)overlaps[i]);
}

/* vae.md §2.5 worked example: 1344 x 768 -> 28 tiles. */
static void test_plan_released_1344x768(void)
{
    mm_vae_tile_plan p;
    mm_error err;
    MM_REQUIRE(mm_vae_tile_plan_make(768, 256, 64, 16, true, &p, &err) == 0, "%s", err.msg);
    expect_plan(&p, 4, (int64_t[]){0, 160, 336, 512}, (int64_t[]){96, 80, 80});
    MM_EXPECT(mm_vae_tile_plan_extent(&p) == 768, "extent %lld", (long long)mm_vae_tile_plan_extent(&p));
    MM_REQUIRE(mm_vae_tile_plan_make(1344, 256, 64, 16, true, &p, &err) == 0, "%s", err.msg);
    expect_plan(&p, 7, (int64_t[]){0, 176, 352, 528, 704, 896, 1088}, (int64_t[]){80, 80, 80, 80, 64, 64});
    MM_EXPECT(mm_vae_tile_plan_extent(&p) == 1344, "extent %lld", (long long)mm_vae_tile_plan_extent(&p));
    for (int i = 0; i < p.n; i++)
        MM_EXPECT(p.len[i] == 256 && p.start[i] % 16 == 0, "tile %d: %lld at %lld", i, (long long)p.len[i],
                  (long long)p.start[i]);
}

/* Every tile plan the kit records, from the manifest's own tile geometry. */
static void test_plan_kit_cases(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, 0, 0) == 0, "%s", k.err.msg);
    const char *name;
    json_t *cs;
    int checked = 0;
    json_object_foreach(json_object_get(k.m, "cases"), name, cs)
    {
        static const char *const axes[2] = {"tiles_h", "tiles_w"};
        for (int a = 0; a < 2; a++) {
            const json_t *t = json_object_get(cs, axes[a]);
            if (!t)
                continue;
            mm_vae_tile_plan p;
            mm_error err;
            int64_t len = json_integer_value(json_object_get(t, "length_px"));
            MM_EXPECT(mm_vae_tile_plan_make(len, k.vo.tile_size, k.vo.tile_overlap_min, 16, true, &p, &err) == 0,
                      "%s", err.msg);
            const json_t *st = json_object_get(t, "starts_px"), *ov = json_object_get(t, "overlaps_px");
            MM_EXPECT((int)json_array_size(st) == p.n, "%s %s: %d tiles, kit %zu", name, axes[a], p.n,
                      json_array_size(st));
            for (int i = 0; i < p.n && i < (int)json_array_size(st); i++)
                MM_EXPECT(p.start[i] == json_integer_value(json_array_get(st, (size_t)i)), "%s %s start %d", name,
                          axes[a], i);
            for (int i = 0; i + 1 < p.n && i < (int)json_array_size(ov); i++)
                MM_EXPECT(p.overlap[i] == json_integer_value(json_array_get(ov, (size_t)i)), "%s %s overlap %d",
                          name, axes[a], i);
            checked++;
        }
    }
    MM_EXPECT(checked >= 8, "only %d plans checked", checked);
    vk_close(&k);
}

/* The slack goes round-robin in 16-px steps, wrapping: never a short last tile. */
static void test_plan_widened_round_robin(void)
{
    mm_vae_tile_plan p;
    mm_error err;
    /* 80 px in 64-px tiles with >= 16 overlap: 2 tiles, slack 32 -> one overlap of 48 (the round-robin wraps) */
    MM_REQUIRE(mm_vae_tile_plan_make(80, 64, 16, 16, true, &p, &err) == 0, "%s", err.msg);
    expect_plan(&p, 2, (int64_t[]){0, 16}, (int64_t[]){48});
    MM_EXPECT(p.len[1] == 64, "last tile %lld px (the minimum-overlap-only mistake cuts it)", (long long)p.len[1]);
    /* fits in one tile: no overlap; tiling off: one tile */
    MM_REQUIRE(mm_vae_tile_plan_make(48, 64, 16, 16, true, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(p.n == 1 && p.len[0] == 48, "%d tiles", p.n);
    MM_REQUIRE(mm_vae_tile_plan_make(1344, 256, 64, 16, false, &p, &err) == 0, "%s", err.msg);
    MM_EXPECT(p.n == 1 && p.len[0] == 1344, "tiling off: %d tiles", p.n);
    /* bad geometry is an error, not a loop */
    MM_EXPECT(mm_vae_tile_plan_make(1000, 64, 64, 16, true, &p, &err) != 0, "overlap == tile accepted");
    MM_EXPECT(mm_vae_tile_plan_make(0, 64, 16, 16, true, &p, &err) != 0, "empty length accepted");
}

/* Blend: out[k] = a[k](1 − k/e) + b[k](k/e) — the later tile weighs 0 at k = 0. */
static void test_blend_weights(void)
{
    mm_ctx *ctx;
    mm_error err;
    MM_REQUIRE(mm_ctx_create(&ctx, mm_cpu(), 1, &err) == 0, "%s", err.msg);
    float a[2 * 4] = {1, 1, 1, 1, 2, 2, 2, 2}, b[2 * 4] = {5, 5, 5, 5, 9, 9, 9, 9};
    mm_tensor ta = mm_tensor_wrap(a, mm_cpu(), MM_F32, 2, MM_SHAPE(2, 4));
    mm_tensor tb = mm_tensor_wrap(b, mm_cpu(), MM_F32, 2, MM_SHAPE(2, 4));
    MM_REQUIRE(mm_vae_blend(ctx, &tb, &ta, 1, 4) == 0, "blend failed");
    const float want0[4] = {1, 2, 3, 4}, want1[4] = {2, 3.75f, 5.5f, 7.25f};
    for (int k = 0; k < 4; k++) {
        MM_EXPECT(fabsf(b[k] - want0[k]) < 1e-6f, "row 0 [%d] = %g, %g expected", k, b[k], want0[k]);
        MM_EXPECT(fabsf(b[4 + k] - want1[k]) < 1e-6f, "row 1 [%d] = %g, %g expected", k, b[4 + k], want1[k]);
    }
    mm_ctx_destroy(ctx);
}

/* 2 x 3 tiles of distinct values: every output pixel equals the formula with
 * the ORIGINAL neighbours (above, then left), and differs from the result
 * that blends with already-blended neighbours where the two disagree. */
static void test_stitch_uses_original_neighbours(void)
{
    mm_ctx *ctx;
    mm_error err;
    MM_REQUIRE(mm_ctx_create(&ctx, mm_cpu(), 1, &err) == 0, "%s", err.msg);
    mm_vae_tile_plan py, px;
    MM_REQUIRE(mm_vae_tile_plan_make(24, 16, 4, 4, true, &py, &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_vae_tile_plan_make(40, 16, 4, 4, true, &px, &err) == 0, "%s", err.msg);
    MM_REQUIRE(py.n == 2 && px.n == 3, "plan %d x %d", py.n, px.n);
    const int ny = py.n, nx = px.n;
    mm_tensor tiles[6];
    uint32_t seed = 7;
    for (int t = 0; t < ny * nx; t++) {
        int i = t / nx, j = t % nx;
        MM_REQUIRE(mm_tensor_alloc(&tiles[t], mm_cpu(), MM_F32, 4, MM_SHAPE(1, 1, py.len[i], px.len[j]), &err) == 0,
                   "%s", err.msg);
        float *d = tiles[t].data;
        for (int64_t q = 0; q < py.len[i] * px.len[j]; q++) {
            seed = seed * 1664525u + 1013904223u;
            d[q] = (float)(seed >> 8) / (float)(1u << 24) + (float)t;
        }
    }
    const int64_t H = mm_vae_tile_plan_extent(&py), W = mm_vae_tile_plan_extent(&px);
    mm_tensor out;
    MM_REQUIRE(mm_tensor_alloc(&out, mm_cpu(), MM_F32, 4, MM_SHAPE(1, 1, H, W), &err) == 0, "%s", err.msg);
    MM_REQUIRE(mm_vae_stitch(ctx, &out, tiles, &py, &px) == 0, "stitch failed");
#define T(ii, jj, y, x) (((float *)tiles[(ii) * nx + (jj)].data)[(y) * px.len[jj] + (x)])
    int bad = 0, differs = 0;
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++) {
            int i = 0, j = 0;
            while (i + 1 < ny && y >= py.start[i + 1])
                i++;
            while (j + 1 < nx && x >= px.start[j + 1])
                j++;
            int64_t ty = y - py.start[i], tx = x - px.start[j];
            double v = T(i, j, ty, tx), left_blended = 0;
            if (i > 0 && ty < py.overlap[i - 1]) {
                double e = (double)py.overlap[i - 1], w = (double)ty / e;
                v = T(i - 1, j, py.len[i - 1] - (int64_t)e + ty, tx) * (1 - w) + v * w;
            }
            double vert = v;
            if (j > 0 && tx < px.overlap[j - 1]) {
                double e = (double)px.overlap[j - 1], w = (double)tx / e;
                int64_t lx = px.len[j - 1] - (int64_t)e + tx;
                v = T(i, j - 1, ty, lx) * (1 - w) + vert * w;
                /* the mistake: the left neighbour already blended with its own upper neighbour */
                double l = T(i, j - 1, ty, lx);
                if (i > 0 && ty < py.overlap[i - 1]) {
                    double e2 = (double)py.overlap[i - 1], w2 = (double)ty / e2;
                    l = T(i - 1, j - 1, py.len[i - 1] - (int64_t)e2 + ty, lx) * (1 - w2) + l * w2;
                }
                left_blended = l * (1 - w) + vert * w;
                if (fabs(left_blended - v) > 1e-3)
                    differs++;
            }
            float got = ((float *)out.data)[y * W + x];
            if (fabs(got - v) > 1e-5 * (1 + fabs(v)))
                bad++;
        }
#undef T
    MM_EXPECT(bad == 0, "%d pixels differ from the original-neighbour formula", bad);
    MM_EXPECT(differs > 10, "only %d pixels tell the two orders apart (test data too weak)", differs);
    for (int t = 0; t < ny * nx; t++)
        mm_tensor_free(&tiles[t]);
    mm_tensor_free(&out);
    mm_ctx_destroy(ctx);
}

/* 5n + 2 latents -> 17n + 5 frames; one latent -> one frame; other counts as
 * the reference pads and trims them. */
static void test_chunk_frame_counts(void)
{
    vk k;
    MM_REQUIRE(vk_open(&k, MM_VAE_DECODER, 0) == 0, "%s", k.err.msg);
    const mm_video_vae_config *c = mm_video_vae_get_config(k.video);
    MM_EXPECT(c->tokens_chunk_size == 5 && c->frame_pre_padding == 3 && c->token_overlap == 2 &&
                  c->frame_overlap == 5 && c->chunk_frames == 20,
              "chunk geometry %d %d %d %d %d", c->tokens_chunk_size, c->frame_pre_padding, c->token_overlap,
              c->frame_overlap, c->chunk_frames);
    const int64_t pairs[][2] = {{1, 1}, {2, 5}, {7, 22}, {12, 39}, {22, 73}, {27, 90}, {37, 124}, {42, 141}, {8, 26}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int64_t f = mm_video_vae_pixel_frames(c, pairs[i][0]);
        MM_EXPECT(f == pairs[i][1], "%lld latents -> %lld frames, %lld expected", (long long)pairs[i][0],
                  (long long)f, (long long)pairs[i][1]);
    }
    const int64_t back[][2] = {{1, 1}, {5, 2}, {22, 7}, {39, 12}, {124, 37}, {141, 42}};
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++) {
        int64_t l = mm_video_vae_latent_frames(c, back[i][0]);
        MM_EXPECT(l == back[i][1], "%lld frames -> %lld latents, %lld expected", (long long)back[i][0], (long long)l,
                  (long long)back[i][1]);
    }
    vk_close(&k);
}

int main(void)
{
    MM_RUN(test_plan_released_1344x768);
    MM_RUN(test_plan_kit_cases);
    MM_RUN(test_plan_widened_round_robin);
    MM_RUN(test_blend_weights);
    MM_RUN(test_stitch_uses_original_neighbours);
    MM_RUN(test_chunk_frame_counts);
    return mm_test_exit();
}
