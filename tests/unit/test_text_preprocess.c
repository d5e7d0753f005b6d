/* Qwen3-VL preprocessing: smart_resize rounding and bounds, the antialiased
 * bicubic resize, normalisation and merge-window patch order, 2 fps
 * sampling — against the conformance kit's processor outputs. */
#include "model/text/image_preprocess.h"
#include "text_kit.h"

static text_kit kit;

static mm_qwen3vl_processor_config kit_processor(const char *which)
{
    mm_qwen3vl_processor_config pc;
    mm_error err = {{0}};
    const json_t *j = json_object_get(json_object_get(kit.manifest, "processor_config"), which);
    if (mm_qwen3vl_processor_config_from_json(&pc, j, &err) < 0)
        printf("     processor_config.%s: %s\n", which, err.msg);
    return pc;
}

/* The release processor values (FL2VA/processor JSON files). */
static mm_qwen3vl_processor_config release_image(void)
{
    return (mm_qwen3vl_processor_config){65536, 16777216, 16, 2, 2, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};
}
static mm_qwen3vl_processor_config release_video(void)
{
    return (mm_qwen3vl_processor_config){4096, 25165824, 16, 2, 2, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};
}

static void test_smart_resize_release_sizes(void)
{
    mm_qwen3vl_processor_config pi = release_image(), pv = release_video();
    int64_t h, w;
    mm_error err = {{0}};
    /* The fl2va canvas is already on the grid: identity, grid (1, 48, 84) = 1008 tokens. */
    TK_OK(mm_qwen3vl_smart_resize(768, 1344, 32, pi.min_pixels, pi.max_pixels, &h, &w, &err), "%s", err.msg);
    MM_EXPECT(h == 768 && w == 1344, "768x1344 -> %lldx%lld", (long long)h, (long long)w);
    /* round half to even: 75/32 = 2.34 -> 64, 110/32 = 3.44 -> 96; 48/32 = 1.5 -> 2 (even). */
    mm_qwen3vl_smart_resize(48, 80, 32, 1, 1 << 30, &h, &w, &err);
    MM_EXPECT(h == 64 && w == 64, "48x80 -> %lldx%lld (80/32 = 2.5 rounds to 2)", (long long)h, (long long)w);
    /* Too small: the ceil branch up to min_pixels. */
    mm_qwen3vl_smart_resize(100, 100, 32, pi.min_pixels, pi.max_pixels, &h, &w, &err);
    MM_EXPECT(h == 256 && w == 256, "100x100 -> %lldx%lld", (long long)h, (long long)w);
    /* A 4:1 2048-px reference stays below 16.7 MP: 2048x8192 unchanged. */
    mm_qwen3vl_smart_resize(2048, 8192, 32, pi.min_pixels, pi.max_pixels, &h, &w, &err);
    MM_EXPECT(h == 2048 && w == 8192, "2048x8192 -> %lldx%lld", (long long)h, (long long)w);
    mm_qwen3vl_smart_resize(4096, 8192, 32, pi.min_pixels, pi.max_pixels, &h, &w, &err);
    MM_EXPECT(h * w <= pi.max_pixels && h % 32 == 0 && w % 32 == 0, "4096x8192 -> %lldx%lld", (long long)h,
              (long long)w);
    /* Reference videos on a 768x1344 canvas (spec 3.3): T <= 25 full size, 26 -> 736x1280, 29 -> 704x1216. */
    struct { int t; int64_t h, w; } v[] = {{2, 768, 1344}, {25, 768, 1344}, {26, 736, 1280}, {29, 704, 1216}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        TK_OK(mm_qwen3vl_smart_resize_video(v[i].t, 768, 1344, 2, 32, pv.min_pixels, pv.max_pixels, &h, &w,
                                                 &err),
                   "%s", err.msg);
        MM_EXPECT(h == v[i].h && w == v[i].w, "T=%d: %lldx%lld, expected %lldx%lld", v[i].t, (long long)h,
                  (long long)w, (long long)v[i].h, (long long)v[i].w);
    }
    MM_EXPECT(mm_qwen3vl_smart_resize_video(1, 768, 1344, 2, 32, pv.min_pixels, pv.max_pixels, &h, &w, &err) < 0,
              "one frame must be refused");
    MM_EXPECT(mm_qwen3vl_smart_resize(10, 4000, 32, pi.min_pixels, pi.max_pixels, &h, &w, &err) < 0 &&
                  strstr(err.msg, "aspect"),
              "aspect > 200 refused: %s", err.msg);
}

static void compare_pixels(const char *what, const mm_vision_pixels *px, const mm_st_entry *ref,
                           const mm_st_entry *grid_ref, int64_t grid_row)
{
    MM_REQUIRE(ref && grid_ref, "%s: reference tensors missing", what);
    for (int a = 0; a < 3; a++)
        MM_REQUIRE(px->grid[a] == (int64_t)text_kit_at(grid_ref, grid_row * 3 + a), "%s: grid[%d] %lld vs %g", what,
                   a, (long long)px->grid[a], text_kit_at(grid_ref, grid_row * 3 + a));
    MM_REQUIRE(ref->shape[1] == px->patch_dim, "%s: patch_dim %lld vs %lld", what, (long long)px->patch_dim,
               (long long)ref->shape[1]);
    double mx = 0;
    for (int64_t i = 0; i < px->n_patches * px->patch_dim; i++) {
        double d = fabs(px->data[i] - text_kit_at(ref, i));
        if (d > mx)
            mx = d;
    }
    MM_EXPECT(mx <= 1e-6, "%s: max |pixel - reference| = %g (tolerance 1e-6)", what, mx);
}

/* Every case's raw images/videos -> in.pixel_values / in.pixel_values_videos. */
static void test_kit_pixels(void)
{
    mm_qwen3vl_processor_config pi = kit_processor("image"), pv = kit_processor("video");
    size_t ci;
    json_t *c;
    int checked = 0;
    json_array_foreach(json_object_get(kit.manifest, "cases"), ci, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        int64_t img_row = 0, vid_row = 0, img_off = 0, vid_off = 0;
        for (int i = 0;; i++) {
            char key[64];
            snprintf(key, sizeof key, "raw.image%d", i);
            const mm_st_entry *raw = text_kit_entry(&kit, name, key);
            if (!raw)
                break;
            mm_vision_pixels px;
            mm_error err = {{0}};
            TK_OK(mm_qwen3vl_preprocess_image(&pi, raw->data, raw->shape[0], raw->shape[1], &px, &err),
                       "%s: %s", name, err.msg);
            /* Images are concatenated in presentation order: compare this image's slice. */
            const mm_st_entry *all = text_kit_entry(&kit, name, "in.pixel_values");
            mm_st_entry slice = *all;
            slice.data = (const float *)all->data + img_off * all->shape[1];
            slice.shape[0] = px.n_patches;
            char what[128];
            snprintf(what, sizeof what, "%s image %d", name, i);
            compare_pixels(what, &px, &slice, text_kit_entry(&kit, name, "in.image_grid_thw"), img_row++);
            img_off += px.n_patches;
            mm_vision_pixels_free(&px);
            checked++;
        }
        for (int i = 0;; i++) {
            char key[64];
            snprintf(key, sizeof key, "raw.video%d", i);
            const mm_st_entry *raw = text_kit_entry(&kit, name, key);
            if (!raw)
                break;
            mm_vision_pixels px;
            mm_error err = {{0}};
            TK_OK(mm_qwen3vl_preprocess_video(&pv, raw->data, raw->shape[0], raw->shape[1], raw->shape[2], &px,
                                                   &err),
                       "%s: %s", name, err.msg);
            const mm_st_entry *all = text_kit_entry(&kit, name, "in.pixel_values_videos");
            mm_st_entry slice = *all;
            slice.data = (const float *)all->data + vid_off * all->shape[1];
            slice.shape[0] = px.n_patches;
            char what[128];
            snprintf(what, sizeof what, "%s video %d", name, i);
            compare_pixels(what, &px, &slice, text_kit_entry(&kit, name, "in.video_grid_thw"), vid_row++);
            vid_off += px.n_patches;
            mm_vision_pixels_free(&px);
            checked++;
        }
    }
    MM_EXPECT(checked >= 4, "only %d media checked", checked);
}

/* The one non-identity resize of the kit: smart_resize + antialiased bicubic. */
static void test_kit_prep_resize(void)
{
    mm_qwen3vl_processor_config pi = kit_processor("image");
    const mm_st_entry *raw = mm_st_find(kit.cases, "prep_resize.raw.image0");
    MM_REQUIRE(raw, "prep_resize.raw.image0 missing");
    mm_vision_pixels px;
    mm_error err = {{0}};
    TK_OK(mm_qwen3vl_preprocess_image(&pi, raw->data, raw->shape[0], raw->shape[1], &px, &err), "%s",
               err.msg);
    compare_pixels("prep_resize", &px, mm_st_find(kit.cases, "prep_resize.pixel_values"),
                   mm_st_find(kit.cases, "prep_resize.image_grid_thw"), 0);
    mm_vision_pixels_free(&px);
}

static void test_resize_identity_and_constant(void)
{
    uint8_t src[5 * 7 * 3], dst[3 * 4 * 3];
    for (int i = 0; i < 5 * 7 * 3; i++)
        src[i] = 200;
    mm_error err = {{0}};
    TK_OK(mm_resize_bicubic_u8(src, 5, 7, 3, dst, 3, 4, &err), "%s", err.msg);
    for (int i = 0; i < 3 * 4 * 3; i++)
        MM_REQUIRE(dst[i] == 200, "a constant image stays constant (got %u at %d)", dst[i], i);
    /* Upscaling a step edge overshoots and must clamp to [0, 255]. */
    uint8_t edge[1 * 4 * 1] = {0, 0, 255, 255}, up[1 * 16 * 1];
    TK_OK(mm_resize_bicubic_u8(edge, 1, 4, 1, up, 1, 16, &err), "%s", err.msg);
    MM_EXPECT(up[0] == 0 && up[15] == 255, "edges kept: %u %u", up[0], up[15]);
}

static void test_sampling_2fps(void)
{
    int64_t idx[64];
    double t[64];
    int64_t n;
    mm_error err = {{0}};
    /* 24 fps, 60 frames: 0, 12, 24, 36, 48 at 0, 0.5, ... 2.0 s. */
    TK_OK(mm_qwen3vl_sample_2fps(60, 24.0, idx, t, &n, &err), "%s", err.msg);
    MM_EXPECT(n == 5 && mm_qwen3vl_sample_count(60, 24.0) == 5, "n %lld", (long long)n);
    MM_EXPECT(idx[4] == 48 && t[4] == 2.0, "last %lld at %g", (long long)idx[4], t[4]);
    /* 345 frames (the longest reference clip) -> 29 samples. */
    MM_EXPECT(mm_qwen3vl_sample_count(345, 24.0) == 29, "345 frames: %lld", (long long)mm_qwen3vl_sample_count(345, 24.0));
    /* 12 frames give only frame 0: refused with a message. */
    MM_EXPECT(mm_qwen3vl_sample_2fps(12, 24.0, idx, t, &n, &err) < 0 && strstr(err.msg, "at least 2"), "%s", err.msg);
    /* 25 fps: round(k * 12.5) half to even -> 0, 12, 25, 38, 50. */
    TK_OK(mm_qwen3vl_sample_2fps(51, 25.0, idx, t, &n, &err), "%s", err.msg);
    MM_EXPECT(n == 5 && idx[1] == 12 && idx[2] == 25 && idx[3] == 38 && idx[4] == 50, "%lld %lld %lld %lld",
              (long long)idx[1], (long long)idx[2], (long long)idx[3], (long long)idx[4]);
}

int main(void)
{
    if (text_kit_open(&kit) < 0)
        return 1;
    MM_RUN(test_smart_resize_release_sizes);
    MM_RUN(test_kit_pixels);
    MM_RUN(test_kit_prep_resize);
    MM_RUN(test_resize_identity_and_constant);
    MM_RUN(test_sampling_2fps);
    text_kit_close(&kit);
    return mm_test_exit();
}
