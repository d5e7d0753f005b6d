/* The sampler against the DiT kit's sampler runs: sigma grids and model times
 * bit for bit, torch's seeded noise bit for bit in the reference's drawing
 * order, the noise-augmented keyframe rows and the latent (un)packing. */
#include <math.h>
#include <string.h>

#include "model/dit/patchify.h"
#include "sampler/euler.h"
#include "sampler/sigmas.h"
#include "sampler/torch_rng.h"
#include "test.h"
#include "test_sampler_kit.h"

static mm_safetensors *kit;

static int count_bit_diffs(const float *a, const float *b, int64_t n, int64_t *first)
{
    int diffs = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) {
            if (*first < 0)
                *first = i;
            diffs++;
        }
    return diffs;
}

/* Calls fn(run, steps) for every "<run>.steps<N>.sigmas_video" in the kit. */
static void for_each_run(void (*fn)(const char *run, int steps))
{
    int seen = 0;
    for (size_t i = 0; i < mm_st_count(kit); i++) {
        const char *name = mm_st_at(kit, i)->name;
        const char *tail = strstr(name, ".sigmas_video");
        const char *st = strstr(name, ".steps");
        if (!tail || !st || tail[13] != '\0')
            continue;
        char run[256];
        snprintf(run, sizeof run, "%.*s", (int)(st - name), name);
        fn(run, atoi(st + 6));
        seen++;
    }
    MM_EXPECT(seen > 0, "no sampler runs in the kit");
}

static void check_grid(const char *run, int steps)
{
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s.steps%d", run, steps);
    static const struct { const char *stream; float shift; } streams[] = {{"video", 12.0f}, {"audio", 3.0f}};
    for (int s = 0; s < 2; s++) {
        const float *sig = kit_f32(kit_entry(kit, "%s.sigmas_%s", prefix, streams[s].stream));
        const mm_st_entry *te = kit_entry(kit, "%s.timesteps_%s", prefix, streams[s].stream);
        const mm_st_entry *se = kit_entry(kit, "%s.sigmas_%s", prefix, streams[s].stream);
        MM_REQUIRE(sig && te, "%s: %s grid missing", prefix, streams[s].stream);
        mm_sigma_schedule g;
        mm_error err = {{0}};
        MM_REQUIRE(mm_sigma_schedule_build(steps, streams[s].shift, &g, &err) == 0, "%s", err.msg);
        MM_EXPECT(g.points == se->shape[0], "%s %s: %d points, kit %lld", prefix, streams[s].stream, g.points,
                  (long long)se->shape[0]);
        int64_t first;
        if (g.points == se->shape[0]) {
            int d = count_bit_diffs(g.sigmas, sig, g.points, &first);
            MM_EXPECT(d == 0, "%s %s sigmas: %d differ, first [%lld] %.9g vs %.9g", prefix, streams[s].stream, d,
                      (long long)first, first >= 0 ? g.sigmas[first] : 0.0, first >= 0 ? sig[first] : 0.0);
            d = count_bit_diffs(g.timesteps, kit_f32(te), g.points - 1, &first);
            MM_EXPECT(d == 0, "%s %s timesteps: %d differ", prefix, streams[s].stream, d);
        }
        mm_sigma_schedule_free(&g);
    }
}

static void test_sigma_grids_match_reference(void) { for_each_run(check_grid); }

static void check_noise(const char *run, int steps)
{
    (void)steps;
    const mm_st_entry *seed_e = kit_entry(kit, "%s.seed%s", run, "");
    MM_REQUIRE(seed_e && seed_e->dtype == MM_I64, "%s.seed missing", run);
    int64_t seed;
    memcpy(&seed, seed_e->data, 8);
    mm_torch_gen g;
    mm_torch_gen_seed(&g, (uint64_t)seed);
    /* Reference order: each condition in packed order, then video, then audio. */
    const char *draws[64];
    char names[64][64];
    int n = 0;
    for (int c = 0; c < 60; c++) {
        snprintf(names[n], sizeof names[n], "cond%d", c);
        if (!kit_entry(kit, "%s.noise.%s", run, names[n]))
            break;
        draws[n] = names[n];
        n++;
    }
    draws[n++] = "video";
    draws[n++] = "audio";
    for (int i = 0; i < n; i++) {
        const mm_st_entry *e = kit_entry(kit, "%s.noise.%s", run, draws[i]);
        MM_REQUIRE(e && e->dtype == MM_F32, "%s.noise.%s missing", run, draws[i]);
        int64_t numel = kit_numel(e);
        float *mine = malloc(sizeof(float) * (size_t)numel);
        mm_torch_randn_f32(&g, mine, numel);
        int64_t first;
        int d = count_bit_diffs(mine, kit_f32(e), numel, &first);
        MM_EXPECT(d == 0, "%s noise.%s: %d of %lld differ, first [%lld] %.9g vs %.9g", run, draws[i], d,
                  (long long)numel, (long long)first, first >= 0 ? mine[first] : 0.0,
                  first >= 0 ? kit_f32(e)[first] : 0.0);
        free(mine);
    }
}

static void test_seeded_noise_matches_torch(void) { for_each_run(check_noise); }

/* keyframe rows = patchify(0.999·z + (1 − 0.999)·n), bit for bit. */
static void check_cond_rows(const char *run, int steps)
{
    (void)steps;
    const mm_st_entry *rows = kit_entry(kit, "%s.cond_rows%s", run, "");
    if (!rows)
        return;
    int64_t filled = 0;
    for (int c = 0; c < 60; c++) {
        char key[32], nkey[32];
        snprintf(key, sizeof key, "keyframe%d", c);
        snprintf(nkey, sizeof nkey, "noise.cond%d", c);
        const mm_st_entry *z = kit_entry(kit, "%s.%s.latents", run, key);
        const mm_st_entry *nz = kit_entry(kit, "%s.%s", run, nkey);
        if (!z)
            break;
        MM_REQUIRE(nz && z->ndim == 5 && kit_numel(z) == kit_numel(nz), "%s: keyframe %d noise", run, c);
        mm_video_shape vs = {(int)z->shape[1], (int)z->shape[2], (int)z->shape[3], (int)z->shape[4], 1, 2, 2};
        int64_t numel = kit_numel(z);
        float *aug = malloc(sizeof(float) * (size_t)numel), *r = malloc(sizeof(float) * (size_t)numel);
        mm_scale_noise(aug, kit_f32(z), kit_f32(nz), numel, 0.999f);
        mm_patchify_video(&vs, aug, r);
        int64_t first;
        int d = count_bit_diffs(r, kit_f32(rows) + filled, numel, &first);
        MM_EXPECT(d == 0, "%s keyframe %d rows: %d differ, first %lld", run, c, d, (long long)first);
        filled += numel;
        free(aug);
        free(r);
    }
    MM_EXPECT(filled == kit_numel(rows), "%s: cond rows %lld filled of %lld", run, (long long)filled,
              (long long)kit_numel(rows));
}

static void test_keyframe_rows_match_reference(void) { for_each_run(check_cond_rows); }

static void check_final_packing(const char *run, int steps)
{
    char p[300];
    snprintf(p, sizeof p, "%s.steps%d.final", run, steps);
    const mm_st_entry *vr = kit_entry(kit, "%s.%s", p, "video_rows");
    const mm_st_entry *vl = kit_entry(kit, "%s.%s", p, "video_latents");
    const mm_st_entry *ar = kit_entry(kit, "%s.%s", p, "audio_rows");
    const mm_st_entry *al = kit_entry(kit, "%s.%s", p, "audio_latents");
    MM_REQUIRE(vr && vl && ar && al && vl->ndim == 5 && al->ndim == 3, "%s: final latents missing", p);
    mm_video_shape vs = {(int)vl->shape[1], (int)vl->shape[2], (int)vl->shape[3], (int)vl->shape[4], 1, 2, 2};
    MM_REQUIRE(mm_video_rows(&vs) * mm_video_row_width(&vs) == kit_numel(vr), "%s: video row count", p);
    int64_t nv = kit_numel(vl), na = kit_numel(al), first;
    float *lat = malloc(sizeof(float) * (size_t)nv), *rows = malloc(sizeof(float) * (size_t)nv);
    mm_unpatchify_video(&vs, kit_f32(vr), lat);
    MM_EXPECT(count_bit_diffs(lat, kit_f32(vl), nv, &first) == 0, "%s: unpatchify differs at %lld", p,
              (long long)first);
    mm_patchify_video(&vs, kit_f32(vl), rows);
    MM_EXPECT(count_bit_diffs(rows, kit_f32(vr), nv, &first) == 0, "%s: patchify differs", p);
    float *alat = malloc(sizeof(float) * (size_t)na), *arows = malloc(sizeof(float) * (size_t)na);
    int ch = (int)al->shape[0], feat = (int)al->shape[1], len = (int)al->shape[2];
    mm_unpack_audio(ch, feat, len, kit_f32(ar), alat);
    MM_EXPECT(count_bit_diffs(alat, kit_f32(al), na, &first) == 0, "%s: audio unpack differs", p);
    mm_pack_audio(ch, feat, len, kit_f32(al), arows);
    MM_EXPECT(count_bit_diffs(arows, kit_f32(ar), na, &first) == 0, "%s: audio pack differs", p);
    free(lat);
    free(rows);
    free(alat);
    free(arows);
}

static void test_final_latent_packing_is_exact(void) { for_each_run(check_final_packing); }

/* Properties the kit does not pin: the tail recompute of randn and the
 * scalar path for tiny tensors. */
static void test_randn_tail_block_is_recomputed(void)
{
    mm_torch_gen a, b;
    mm_torch_gen_seed(&a, 7);
    mm_torch_gen_seed(&b, 7);
    float x[40], y[32];
    mm_torch_randn_f32(&a, x, 40);
    mm_torch_randn_f32(&b, y, 32);
    /* 40 = two blocks of 16, then torch recomputes the last 16 slots (24..39)
     * from 16 fresh uniforms: the slots before that overlap keep the values of
     * the first two blocks, which a 32-value draw has too. */
    MM_EXPECT(memcmp(x, y, 24 * sizeof(float)) == 0, "slots before the overlapping tail must be unchanged");
    /* The tail is one block of its own, from the 41st..56th uniforms: what a
     * 16-value draw gives after 40 uniforms, bit for bit; so it overwrote the
     * second block's slots 24..31. */
    mm_torch_gen t;
    mm_torch_gen_seed(&t, 7);
    for (int i = 0; i < 40; i++)
        mm_torch_gen_u32(&t);
    float tail[16];
    mm_torch_randn_f32(&t, tail, 16);
    MM_EXPECT(memcmp(x + 24, tail, sizeof tail) == 0, "the last 16 are not one block of the 16 uniforms after the "
                                                      "first 40 (x[24] %g, that block's first %g)",
              x[24], tail[0]);
    MM_EXPECT(memcmp(x + 24, y + 24, 8 * sizeof(float)) != 0, "the tail block left slots 24..31 as the second block "
                                                              "had them");
    /* The generator advanced by 40 + 16 draws. */
    mm_torch_gen c;
    mm_torch_gen_seed(&c, 7);
    for (int i = 0; i < 56; i++)
        mm_torch_gen_u32(&c);
    MM_EXPECT(mm_torch_gen_u32(&c) == mm_torch_gen_u32(&a), "tail draws 16 fresh uniforms");
    double s = 0, s2 = 0;
    float big[4096];
    mm_torch_randn_f32(&a, big, 4096);
    for (int i = 0; i < 4096; i++) {
        s += big[i];
        s2 += (double)big[i] * big[i];
    }
    MM_EXPECT(fabs(s / 4096) < 0.1 && fabs(s2 / 4096 - 1) < 0.1, "mean %g var %g", s / 4096, s2 / 4096);
}

static void test_mt19937_reference_stream(void)
{
    /* The 10000th output of MT19937 seeded with 5489 is 4123659995 (C++11 [rand.predef]). */
    mm_torch_gen g;
    mm_torch_gen_seed(&g, 5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++)
        v = mm_torch_gen_u32(&g);
    MM_EXPECT(v == 4123659995u, "got %u", v);
}

static void test_linspace_lanes(void)
{
    float a[50], b[50];
    mm_torch_linspace_f32(1.0f, 0.0f, 50, 1, a);
    mm_torch_linspace_f32(1.0f, 0.0f, 50, 16, b);
    MM_EXPECT(a[0] == 1.0f && a[49] == 0.0f && b[0] == 1.0f && b[49] == 0.0f, "endpoints");
    for (int i = 32; i < 50; i++)
        MM_EXPECT(a[i] == b[i], "scalar tail %d", i);
    for (int i = 0; i < 50; i++)
        MM_EXPECT(fabsf(a[i] - b[i]) <= 1e-7f && fabsf(a[i] - (1.0f - i / 49.0f)) < 1e-6f, "value %d", i);
}

static void test_euler_step_formula(void)
{
    float x[2] = {1.0f, -2.0f}, v[2] = {0.5f, 4.0f};
    mm_euler_step(x, v, 2, 0.25f, 0.75f, 0.5f);
    /* x0 = x + 0.75 v; r = 2/3; x' = r x + (1-r) x0 = x + 0.25 v */
    MM_EXPECT(fabsf(x[0] - 1.125f) < 1e-6f && fabsf(x[1] - -1.0f) < 1e-6f, "got %g %g", x[0], x[1]);
    float y[1] = {3.0f}, w[1] = {-1.0f};
    mm_euler_step(y, w, 1, 0.5f, 0.5f, 0.0f);
    MM_EXPECT(y[0] == 2.5f, "last step lands on x0, got %g", y[0]);
}

int main(void)
{
    kit = kit_open("sampler.safetensors");
    if (!kit)
        return 1;
    MM_RUN(test_mt19937_reference_stream);
    MM_RUN(test_sigma_grids_match_reference);
    MM_RUN(test_seeded_noise_matches_torch);
    MM_RUN(test_keyframe_rows_match_reference);
    MM_RUN(test_final_latent_packing_is_exact);
    MM_RUN(test_randn_tail_block_is_recomputed);
    MM_RUN(test_linspace_lanes);
    MM_RUN(test_euler_step_formula);
    mm_st_close(kit);
    return mm_test_exit();
}
