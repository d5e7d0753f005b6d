/* The H3 presentation and MRoPE: every kit case's token ids (real and
 * folded), modality types, tags and 3-axis positions reproduced exactly from
 * the case's prompt and media; the interleaved cos/sin tables against the
 * reference's. */
#include "model/text/image_preprocess.h"
#include "model/text/mrope.h"
#include "model/text/presentation.h"
#include "model/text/qwen3vl_config.h"
#include "model/text/text_tokenizer.h"
#include "text_kit.h"

static text_kit kit;
static mm_qwen3vl_config cfg;

/* Builds the presentation of a manifest case from its raw media. */
static int build_case(const json_t *c, const mm_text_tokenizer *tokp, mm_presentation *p, mm_error *err)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    mm_text_tokenizer tok = *tokp;
    mm_pres_tokens sp;
    if (mm_pres_tokens_resolve(&tok, &sp, err) < 0)
        return -1;
    mm_qwen3vl_processor_config pi, pv;
    const json_t *pcj = json_object_get(kit.manifest, "processor_config");
    if (mm_qwen3vl_processor_config_from_json(&pi, json_object_get(pcj, "image"), err) < 0 ||
        mm_qwen3vl_processor_config_from_json(&pv, json_object_get(pcj, "video"), err) < 0)
        return -1;
    mm_pres_item items[16];
    double times[16][64];
    int n = 0, n_img = 0, n_vid = 0;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(c, "references"), i, r)
    {
        const char *kind = json_string_value(json_object_get(r, "kind"));
        mm_pres_item *it = &items[n++];
        memset(it, 0, sizeof *it);
        char key[64];
        mm_vision_pixels px;
        if (!strcmp(kind, "image")) {
            snprintf(key, sizeof key, "raw.image%d", n_img++);
            const mm_st_entry *raw = text_kit_entry(&kit, name, key);
            if (!raw || mm_qwen3vl_preprocess_image(&pi, raw->data, raw->shape[0], raw->shape[1], &px, err) < 0)
                return mm_fail(err, "%s: %s: %s", name, key, raw ? err->msg : "missing");
            it->kind = MM_PRES_PICTURE;
        } else if (!strcmp(kind, "video")) {
            snprintf(key, sizeof key, "raw.video%d", n_vid);
            const mm_st_entry *raw = text_kit_entry(&kit, name, key);
            snprintf(key, sizeof key, "raw.video%d.timestamps", n_vid);
            const mm_st_entry *ts = text_kit_entry(&kit, name, key);
            if (!raw || !ts ||
                mm_qwen3vl_preprocess_video(&pv, raw->data, raw->shape[0], raw->shape[1], raw->shape[2], &px, err) < 0)
                return mm_fail(err, "%s: video %d: %s", name, n_vid, raw && ts ? err->msg : "missing");
            it->kind = MM_PRES_VIDEO;
            it->n_frame_times = (int)ts->shape[0];
            for (int k = 0; k < it->n_frame_times; k++)
                times[n_vid][k] = text_kit_at(ts, k);
            it->frame_times = times[n_vid];
            it->has_audio = json_is_true(json_object_get(r, "has_audio"));
            n_vid++;
        } else {
            it->kind = MM_PRES_AUDIO;
            continue;
        }
        memcpy(it->grid, px.grid, sizeof it->grid);
        mm_vision_pixels_free(&px);
    }
    const char *prompt = json_string_value(json_object_get(c, "prompt"));
    return mm_presentation_build(&tok, &sp, items, n, prompt, strlen(prompt), pi.merge, p, err);
}

static void test_kit_presentations(void)
{
    size_t ci;
    json_t *c;
    int cases = 0;
    json_array_foreach(json_object_get(kit.manifest, "cases"), ci, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        mm_presentation p;
        mm_error err = {{0}};
        mm_text_tokenizer segments = {text_kit_segment_encode, kit.manifest};
        TK_OK(build_case(c, &segments, &p, &err), "%s: %s", name, err.msg);
        const mm_st_entry *real = text_kit_entry(&kit, name, "meta.input_ids_real");
        const mm_st_entry *ids = text_kit_entry(&kit, name, "in.input_ids");
        const mm_st_entry *types = text_kit_entry(&kit, name, "in.mm_token_type_ids");
        const mm_st_entry *tags = text_kit_entry(&kit, name, "out.text_token_tags");
        const mm_st_entry *pos = text_kit_entry(&kit, name, "meta.position_ids");
        MM_REQUIRE(real && ids && types && tags && pos, "%s: reference tensors missing", name);
        MM_REQUIRE(p.len == real->shape[0], "%s: %lld rows, reference %lld", name, (long long)p.len,
                   (long long)real->shape[0]);
        int64_t *pp = malloc(sizeof(int64_t) * 3 * (size_t)p.len);
        int rc = mm_mrope_positions(p.row_type, p.len, (const int64_t(*)[3])p.image_grids, p.n_images,
                                    (const int64_t(*)[3])p.video_grids, p.n_videos, 2, pp, &err);
        MM_EXPECT(rc == 0, "%s: positions: %s", name, err.msg);
        int bad = 0;
        for (int64_t i = 0; i < p.len && bad < 3; i++) {
            int64_t want = (int64_t)text_kit_at(real, i);
            if (p.ids[i] != want || text_kit_fold(kit.manifest, p.ids[i]) != (int64_t)text_kit_at(ids, i) ||
                p.row_type[i] != (int)text_kit_at(types, i) || p.tags[i] != (int)text_kit_at(tags, i)) {
                MM_EXPECT(0, "%s row %lld: id %d (ref %lld, kit %g), type %u (ref %g), tag %u (ref %g)", name,
                          (long long)i, p.ids[i], (long long)want, text_kit_at(ids, i), p.row_type[i],
                          text_kit_at(types, i), p.tags[i], text_kit_at(tags, i));
                bad++;
            }
            for (int a = 0; rc == 0 && a < 3; a++)
                if (pp[a * p.len + i] != (int64_t)text_kit_at(pos, a * p.len + i)) {
                    MM_EXPECT(0, "%s row %lld axis %d: position %lld, reference %g", name, (long long)i, a,
                              (long long)pp[a * p.len + i], text_kit_at(pos, a * p.len + i));
                    bad++;
                    break;
                }
        }
        /* The folded vision ids are the ones the kit's config names. */
        for (int64_t i = 0; i < p.len; i++) {
            int64_t k = text_kit_fold(kit.manifest, p.ids[i]);
            if (p.row_type[i] == MM_ROW_IMAGE)
                MM_REQUIRE(k == cfg.image_token_id, "%s: image pad folds to %lld", name, (long long)k);
            if (p.row_type[i] == MM_ROW_VIDEO)
                MM_REQUIRE(k == cfg.video_token_id, "%s: video pad folds to %lld", name, (long long)k);
        }
        free(pp);
        mm_presentation_free(&p);
        cases++;
    }
    MM_EXPECT(cases == 6, "%d cases", cases);
}

/* The whole chain with the project's tokenizer on the release's files:
 * prompt + media -> real Qwen ids of every case, exactly. */
static void test_kit_presentations_real_tokenizer(void)
{
    char buf[4096];
    const char *src = getenv("MMH3_SRC") ? getenv("MMH3_SRC") : ".";
    const char *dir = mm_text_tokenizer_find_release(src, buf, sizeof buf);
    MM_REQUIRE(dir, "release tokenizer not found (../shared/minimax-h3/FL2VA/tokenizer beside the checkout, or "
                    "$MMH3_SHARED)");
    mm_text_tokenizer tok;
    void *owner;
    mm_error err = {{0}};
    TK_OK(mm_text_tokenizer_open(dir, &tok, &owner, &err), "%s", err.msg);
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(kit.manifest, "cases"), ci, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        mm_presentation p;
        if (build_case(c, &tok, &p, &err) < 0) {
            MM_EXPECT(0, "%s: %s", name, err.msg);
            continue;
        }
        const mm_st_entry *real = text_kit_entry(&kit, name, "meta.input_ids_real");
        int bad = p.len != real->shape[0];
        for (int64_t i = 0; !bad && i < p.len; i++)
            bad = p.ids[i] != (int64_t)text_kit_at(real, i);
        MM_EXPECT(!bad, "%s: real ids differ from meta.input_ids_real", name);
        mm_presentation_free(&p);
    }
    mm_text_tokenizer_close(owner);
}

/* rope_cos / rope_sin of the debug cases (bf16 in the reference). */
static void test_kit_rope_tables(void)
{
    const json_t *tol = json_object_get(json_object_get(kit.manifest, "tolerances"), "debug");
    size_t ci;
    json_t *c;
    int n = 0;
    json_array_foreach(json_object_get(kit.manifest, "cases"), ci, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        const mm_st_entry *rc = text_kit_entry(&kit, name, "dbg.rope_cos");
        const mm_st_entry *rs = text_kit_entry(&kit, name, "dbg.rope_sin");
        const mm_st_entry *pos = text_kit_entry(&kit, name, "meta.position_ids");
        if (!rc)
            continue;
        int64_t L = pos->shape[1], hd = cfg.text.head_dim;
        int64_t *pp = malloc(sizeof(int64_t) * 3 * (size_t)L);
        for (int64_t i = 0; i < 3 * L; i++)
            pp[i] = (int64_t)text_kit_at(pos, i);
        float *cs = malloc(sizeof(float) * (size_t)(L * hd)), *sn = malloc(sizeof(float) * (size_t)(L * hd));
        mm_error err = {{0}};
        TK_OK(mm_mrope_tables(&cfg.text, pp, L, cs, sn, &err), "%s", err.msg);
        double rel, mx;
        text_kit_diff(cs, rc, &rel, &mx);
        const json_t *t = json_object_get(tol, "rope_cos");
        MM_EXPECT(rel <= json_number_value(json_object_get(t, "rel_l2")) &&
                      mx <= json_number_value(json_object_get(t, "max_abs")),
                  "%s rope_cos rel_l2 %g max_abs %g", name, rel, mx);
        text_kit_diff(sn, rs, &rel, &mx);
        t = json_object_get(tol, "rope_sin");
        MM_EXPECT(rel <= json_number_value(json_object_get(t, "rel_l2")) &&
                      mx <= json_number_value(json_object_get(t, "max_abs")),
                  "%s rope_sin rel_l2 %g max_abs %g", name, rel, mx);
        /* The contiguous (Qwen2-VL) layout must be visibly different: the kit's control. */
        mm_qwen3vl_text_config wrong = cfg.text;
        wrong.mrope_interleaved = false;
        mm_mrope_tables(&wrong, pp, L, cs, sn, &err);
        text_kit_diff(cs, rc, &rel, &mx);
        MM_EXPECT(mx > 0.1, "%s: contiguous sections indistinguishable (max_abs %g)", name, mx);
        free(pp);
        free(cs);
        free(sn);
        n++;
    }
    MM_EXPECT(n == 2, "%d debug cases", n);
}

static void test_block_labels(void)
{
    char b[64];
    const double t3[] = {0.0, 0.5, 1.0};
    MM_EXPECT(mm_pres_video_block_label(t3, 3, 0, b, sizeof b) > 0 && !strcmp(b, "<0.2 seconds>"), "%s", b);
    MM_EXPECT(mm_pres_video_block_label(t3, 3, 1, b, sizeof b) > 0 && !strcmp(b, "<1.0 seconds>"), "%s", b);
    MM_EXPECT(mm_pres_video_block_label(t3, 3, 2, b, sizeof b) < 0, "block out of range");
    const double t4[] = {1.0, 1.5, 2.0, 2.5};
    mm_pres_video_block_label(t4, 4, 0, b, sizeof b);
    MM_EXPECT(!strcmp(b, "<1.2 seconds>"), "1.25 rounds half to even: %s", b);
    mm_pres_video_block_label(t4, 4, 1, b, sizeof b);
    MM_EXPECT(!strcmp(b, "<2.2 seconds>"), "2.25: %s", b);
}

/* A builder fed a tokenizer that counts calls: segments are tokenized one by one. */
static int count_calls;
static int counting_encode(void *user, const char *text, size_t len, int32_t **ids, size_t *n, mm_error *err)
{
    (void)user;
    (void)err;
    count_calls++;
    *n = len ? 1 : 0;
    *ids = malloc(sizeof(int32_t));
    (*ids)[0] = (int32_t)len;
    (void)text;
    return 0;
}

static void test_layout_rules(void)
{
    mm_text_tokenizer tok = {counting_encode, NULL};
    mm_pres_tokens sp = {10, 11, 12, 13, 99};
    mm_presentation p;
    mm_error err = {{0}};
    /* Empty prompt and no media: one pad row, tagged text. */
    TK_OK(mm_presentation_build(&tok, &sp, NULL, 0, "", 0, 2, &p, &err), "%s", err.msg);
    MM_EXPECT(p.len == 1 && p.ids[0] == 99 && p.tags[0] == 1, "fallback row");
    mm_presentation_free(&p);
    /* audio, picture, audio: labels per modality; audio contributes a label only. */
    mm_pres_item it[3] = {{.kind = MM_PRES_AUDIO}, {.kind = MM_PRES_PICTURE, .grid = {1, 4, 6}},
                          {.kind = MM_PRES_AUDIO}};
    count_calls = 0;
    TK_OK(mm_presentation_build(&tok, &sp, it, 3, "x", 1, 2, &p, &err), "%s", err.msg);
    MM_EXPECT(count_calls == 4, "4 segments tokenized separately, got %d", count_calls);
    /* rows: audio label, picture label, start, 6 pads, end, audio label, prompt */
    MM_EXPECT(p.len == 1 + 1 + 8 + 1 + 1, "len %lld", (long long)p.len);
    MM_EXPECT(p.ids[2] == 10 && p.ids[3] == 12 && p.ids[9] == 11 && p.tags[2] == 0 && p.tags[9] == 0 && p.tags[1] == 1 &&
                  p.row_type[2] == MM_ROW_TEXT && p.row_type[3] == MM_ROW_IMAGE,
              "vision block layout");
    mm_presentation_free(&p);
    /* A picture whose grid is not divisible by the merge size is refused. */
    mm_pres_item bad = {.kind = MM_PRES_PICTURE, .grid = {1, 3, 6}};
    MM_EXPECT(mm_presentation_build(&tok, &sp, &bad, 1, "x", 1, 2, &p, &err) < 0 && strstr(err.msg, "Picture") == NULL &&
                  strstr(err.msg, "picture 1"),
              "%s", err.msg);
    /* A video whose frame-time count disagrees with its grid is refused. */
    const double t[] = {0, 0.5, 1.0};
    mm_pres_item v = {.kind = MM_PRES_VIDEO, .grid = {3, 4, 4}, .frame_times = t, .n_frame_times = 3};
    MM_EXPECT(mm_presentation_build(&tok, &sp, &v, 1, "x", 1, 2, &p, &err) < 0 && strstr(err.msg, "blocks"), "%s",
              err.msg);
}

static void test_positions_errors(void)
{
    uint8_t types[6] = {0, 1, 1, 1, 1, 0};
    int64_t g[1][3] = {{1, 4, 4}}, pos[18];
    mm_error err = {{0}};
    /* 4 image rows but the grid says 4x4 patches -> 4 tokens: fine. */
    MM_EXPECT(mm_mrope_positions(types, 6, g, 1, NULL, 0, 2, pos, &err) == 0, "%s", err.msg);
    MM_EXPECT(pos[5] == 1 + 2 && pos[6 + 5] == 3 && pos[12 + 5] == 3, "text after a 2x2 run starts at c + max(H, W)");
    int64_t g2[1][3] = {{1, 4, 6}};
    MM_EXPECT(mm_mrope_positions(types, 6, g2, 1, NULL, 0, 2, pos, &err) < 0 && strstr(err.msg, "4 rows"), "%s",
              err.msg);
    MM_EXPECT(mm_mrope_positions(types, 6, NULL, 0, NULL, 0, 2, pos, &err) < 0 && strstr(err.msg, "image"), "%s",
              err.msg);
}

int main(void)
{
    if (text_kit_open(&kit) < 0)
        return 1;
    mm_error err = {{0}};
    if (mm_qwen3vl_config_from_json(&cfg, json_object_get(kit.manifest, "hf_config"), &err) < 0) {
        printf("FAIL config: %s\n", err.msg);
        return 1;
    }
    MM_RUN(test_kit_presentations);
    MM_RUN(test_kit_presentations_real_tokenizer);
    MM_RUN(test_kit_rope_tables);
    MM_RUN(test_block_labels);
    MM_RUN(test_layout_rules);
    MM_RUN(test_positions_errors);
    text_kit_close(&kit);
    return mm_test_exit();
}
