#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/dit_kit.h"

static const json_t *field(const json_t *entry, const json_t *config, const char *key, const char *config_key)
{
    const json_t *v = json_object_get(entry, key);
    if (!v && config_key)
        v = json_object_get(config, config_key);
    return v;
}

static int get_int(const json_t *entry, const json_t *config, const char *key, const char *config_key, int *out,
                   mm_error *err)
{
    const json_t *v = field(entry, config, key, config_key);
    if (!json_is_integer(v))
        return mm_fail(err, "\"%s\" missing or not an integer", key);
    *out = (int)json_integer_value(v);
    return 0;
}

void mm_dit_kit_case_free(mm_dit_kit_case *c)
{
    free(c->text_tags);
    c->text_tags = NULL;
}

int mm_dit_kit_case_read(const json_t *manifest, const json_t *entry, mm_dit_kit_case *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    const json_t *config = json_object_get(manifest, "config");
    const json_t *derived = json_object_get(manifest, "derived");
    const char *name = json_string_value(json_object_get(entry, "name"));
    if (!name)
        return mm_fail(err, "a case without a name");
    snprintf(out->name, sizeof out->name, "%s", name);
    const char *task = json_string_value(json_object_get(entry, "task"));
    snprintf(out->task, sizeof out->task, "%s", task ? task : "");

    mm_dit_geometry *g = &out->req.target;
    int text_rows, prompt_rows, seq = 0;
    if (get_int(entry, config, "latent_frames", NULL, &g->latent_frames, err) != 0 ||
        get_int(entry, config, "latent_height", "latent_h", &g->latent_height, err) != 0 ||
        get_int(entry, config, "latent_width", "latent_w", &g->latent_width, err) != 0 ||
        get_int(entry, config, "audio_latents", NULL, &g->audio_latents, err) != 0 ||
        get_int(entry, config, "text_rows", NULL, &text_rows, err) != 0 ||
        get_int(entry, config, "sequence_length", NULL, &seq, err) != 0 ||
        get_int(config, config, "prompt_len", NULL, &prompt_rows, err) != 0)
        return mm_error_prefix(err, "case %s", name);
    out->sequence_length = seq;
    const json_t *patch = json_object_get(derived, "patch_size");
    if (json_array_size(patch) != 3)
        return mm_fail(err, "manifest: derived.patch_size must be [t, h, w]");
    g->patch_t = (int)json_integer_value(json_array_get(patch, 0));
    g->patch_h = (int)json_integer_value(json_array_get(patch, 1));
    g->patch_w = (int)json_integer_value(json_array_get(patch, 2));

    /* Keyframe anchors and reference blocks ((t, h, w[, audio_latents]); t = 1 is an image). */
    const json_t *anchors = json_object_get(entry, "keyframe_anchors");
    size_t i;
    const json_t *v;
    json_array_foreach(anchors, i, v)
    {
        const char *a = json_string_value(v);
        if (i >= sizeof out->anchors / sizeof out->anchors[0] || !a ||
            (strcmp(a, "first") != 0 && strcmp(a, "last") != 0))
            return mm_fail(err, "case %s: keyframe anchor %zu not understood (first | last)", name, i);
        out->anchors[i] = strcmp(a, "first") == 0 ? MM_DIT_ANCHOR_FIRST : MM_DIT_ANCHOR_LAST;
        out->req.n_anchors = (int)i + 1;
    }
    const json_t *refs = json_object_get(entry, "ref_blocks");
    json_array_foreach(refs, i, v)
    {
        size_t n = json_array_size(v);
        if (i >= sizeof out->refs / sizeof out->refs[0] || (n != 1 && n != 3 && n != 4))
            return mm_fail(err, "case %s: reference block %zu must be [t, h, w], [t, h, w, a] or [a]", name, i);
        mm_dit_ref *r = &out->refs[i];
        if (n == 1) {
            r->kind = MM_DIT_REF_AUDIO;
            r->audio_latents = (int)json_integer_value(json_array_get(v, 0));
        } else {
            r->latent_frames = (int)json_integer_value(json_array_get(v, 0));
            r->latent_height = (int)json_integer_value(json_array_get(v, 1));
            r->latent_width = (int)json_integer_value(json_array_get(v, 2));
            r->audio_latents = n == 4 ? (int)json_integer_value(json_array_get(v, 3)) : 0;
            r->kind = r->latent_frames == 1 ? MM_DIT_REF_IMAGE : MM_DIT_REF_VIDEO;
        }
        out->req.n_refs = (int)i + 1;
    }
    out->req.anchors = out->anchors;
    out->req.refs = out->refs;

    /* Audio channels: whatever makes the rows add up to the sequence length. */
    int64_t frame_rows = mm_dit_rows_per_frame(g->latent_height, g->latent_width, g->patch_h, g->patch_w);
    int64_t known = text_rows + (int64_t)g->latent_frames * frame_rows + (int64_t)out->req.n_anchors * frame_rows;
    int64_t ref_audio_latents = 0;
    for (int r = 0; r < out->req.n_refs; r++) {
        const mm_dit_ref *ref = &out->refs[r];
        if (ref->kind != MM_DIT_REF_AUDIO)
            known += ref->latent_frames *
                     mm_dit_rows_per_frame(ref->latent_height, ref->latent_width, g->patch_h, g->patch_w);
        ref_audio_latents += ref->audio_latents;
    }
    int64_t audio_latents = g->audio_latents + ref_audio_latents;
    if (audio_latents <= 0 || (seq - known) <= 0 || (seq - known) % audio_latents)
        return mm_fail(err, "case %s: sequence_length %d does not fit the blocks", name, seq);
    g->audio_channels = (int)((seq - known) / audio_latents);

    /* The text presentation: [label | vision block] per conditioning block, then the prompt. */
    int n_blocks = out->req.n_anchors + out->req.n_refs;
    int vision[40] = {0}, vision_total = 0;
    for (int b = 0; b < n_blocks; b++) {
        int64_t rows;
        if (b < out->req.n_anchors)
            rows = frame_rows;
        else {
            const mm_dit_ref *ref = &out->refs[b - out->req.n_anchors];
            rows = ref->kind == MM_DIT_REF_AUDIO ? -2
                                                 : ref->latent_frames * mm_dit_rows_per_frame(ref->latent_height,
                                                                                              ref->latent_width,
                                                                                              g->patch_h, g->patch_w);
        }
        vision[b] = (int)rows + 2;
        vision_total += vision[b];
    }
    int label_total = text_rows - prompt_rows - vision_total;
    if (label_total < 0 || (n_blocks > 0 && label_total % n_blocks) || (n_blocks == 0 && label_total != 0))
        return mm_fail(err, "case %s: %d text rows do not split into %d label+vision blocks and a %d-row prompt", name,
                       text_rows, n_blocks, prompt_rows);
    const json_t *vp = json_object_get(entry, "vision_pad_rows");
    if (vp && json_integer_value(vp) != vision_total)
        return mm_fail(err, "case %s: vision_pad_rows %lld, the blocks give %d", name,
                       (long long)json_integer_value(vp), vision_total);
    out->vision_rows = vision_total;
    out->text_tags = malloc((size_t)(text_rows > 0 ? text_rows : 1));
    if (!out->text_tags)
        return mm_fail(err, "out of memory");
    int row = 0;
    for (int b = 0; b < n_blocks; b++) {
        for (int k = 0; k < label_total / n_blocks; k++)
            out->text_tags[row++] = MM_DIT_TAG_TEXT;
        for (int k = 0; k < vision[b]; k++)
            out->text_tags[row++] = MM_DIT_TAG_VIDEO;
    }
    while (row < text_rows)
        out->text_tags[row++] = MM_DIT_TAG_TEXT;
    out->req.text_tags = out->text_tags;
    out->req.text_rows = text_rows;

    const json_t *tv = json_object_get(entry, "t_video"), *ta = json_object_get(entry, "t_audio");
    out->t_video = json_is_number(tv) ? json_number_value(tv) : 0.0;
    out->t_audio = json_is_number(ta) ? json_number_value(ta) : 0.0;
    double ct = 0;
    if (mm_conf_json_number(entry, "condition_video_t", &ct, NULL) != 0 &&
        mm_conf_json_number(derived, "keyframe_noise_aug", &ct, err) != 0)
        return mm_error_prefix(err, "case %s", name);
    out->condition_t = ct;
    return 0;
}

static int differ(char *why, size_t n, const char *fmt, ...) MM_PRINTF(3, 4);
static int differ(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return 0;
}

/* Loads "<prefix>.<name>" as int64 if the kit has it; *present says whether it does. */
static int load_i64(const mm_safetensors *st, const char *prefix, const char *name, int64_t **v, int64_t *n,
                    int *present, mm_error *err)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", prefix, name);
    *v = NULL;
    *present = mm_st_find(st, key) != NULL;
    return *present ? mm_conf_read_i64(st, key, v, n, err) : 0;
}

int mm_dit_kit_check_layout(const mm_safetensors *st, const char *prefix, const mm_dit_layout *l, const float *row_t,
                            char *why, size_t why_len, mm_error *err)
{
    int ok = 1, present;
    int64_t *v = NULL, n = 0;
    char key[256];

    /* token tags */
    if (load_i64(st, prefix, "in.token_tags", &v, &n, &present, err) != 0)
        return -1;
    if (!present)
        return mm_fail(err, "%s.in.token_tags missing", prefix);
    if (n != l->rows)
        ok = differ(why, why_len, "sequence length %lld, kit %lld", (long long)l->rows, (long long)n);
    for (int64_t r = 0; ok && r < n; r++)
        if (v[r] != l->tags[r])
            ok = differ(why, why_len, "token_tags[%lld] = %d, kit %lld", (long long)r, l->tags[r], (long long)v[r]);
    free(v);

    /* positions, bit for bit */
    snprintf(key, sizeof key, "%s.in.position_ids", prefix);
    double *pos = NULL;
    if (ok) {
        if (mm_conf_read_f64(st, key, &pos, &n, err) != 0)
            return -1;
        if (n != l->rows * 3)
            ok = differ(why, why_len, "position_ids has %lld values, expected %lld", (long long)n,
                        (long long)l->rows * 3);
        for (int64_t i = 0; ok && i < n; i++)
            if (memcmp(&pos[i], &l->positions[i], sizeof(double)) != 0)
                ok = differ(why, why_len, "position_ids row %lld axis %lld: %.17g, kit %.17g", (long long)(i / 3),
                            (long long)(i % 3), l->positions[i], pos[i]);
        free(pos);
    }

    /* index maps */
    static const char *maps[] = {"in.video_indices", "in.audio_indices", "in.text_indices"};
    const int64_t *mine[] = {l->video_index, l->audio_index, l->text_index};
    const int64_t lens[] = {l->video_rows, l->audio_rows, l->text_rows};
    for (int m = 0; ok && m < 3; m++) {
        if (load_i64(st, prefix, maps[m], &v, &n, &present, err) != 0)
            return -1;
        if (!present)
            continue;
        if (n != lens[m])
            ok = differ(why, why_len, "%s: %lld rows, kit %lld", maps[m], (long long)lens[m], (long long)n);
        for (int64_t r = 0; ok && r < n; r++)
            if (v[r] != mine[m][r])
                ok = differ(why, why_len, "%s[%lld] = %lld, kit %lld", maps[m], (long long)r, (long long)mine[m][r],
                            (long long)v[r]);
        free(v);
    }
    if (!ok || !row_t)
        return ok;

    /* per-row timesteps and their distinct values */
    snprintf(key, sizeof key, "%s.in.row_timesteps", prefix);
    if (mm_st_find(st, key)) {
        float *rt;
        if (mm_conf_read_f32(st, key, &rt, &n, NULL, NULL, err) != 0)
            return -1;
        for (int64_t r = 0; ok && r < n && r < l->rows; r++)
            if (memcmp(&rt[r], &row_t[r], 4) != 0)
                ok = differ(why, why_len, "row_timesteps[%lld] = %.9g, kit %.9g", (long long)r, row_t[r], rt[r]);
        free(rt);
    }
    float unique[16];
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)l->rows);
    if (!ti)
        return mm_fail(err, "out of memory");
    int m = mm_dit_unique_timesteps(row_t, l->rows, unique, 16, ti);
    snprintf(key, sizeof key, "%s.meta.unique_timesteps", prefix);
    if (ok && mm_st_find(st, key)) {
        float *u;
        if (mm_conf_read_f32(st, key, &u, &n, NULL, NULL, err) != 0) {
            free(ti);
            return -1;
        }
        if (n != m || memcmp(u, unique, sizeof(float) * (size_t)m) != 0)
            ok = differ(why, why_len, "%d distinct timesteps, kit %lld (or different values)", m, (long long)n);
        free(u);
    }
    static const char *idx_names[] = {"meta.timestep_index", "meta.adaln_index"};
    for (int k = 0; ok && k < 2; k++) {
        if (load_i64(st, prefix, idx_names[k], &v, &n, &present, err) != 0) {
            free(ti);
            return -1;
        }
        if (!present)
            continue;
        for (int64_t r = 0; ok && r < n && r < l->rows; r++) {
            int64_t want = k == 0 ? ti[r] : (int64_t)ti[r] * 3 + l->tags[r];
            if (v[r] != want)
                ok = differ(why, why_len, "%s[%lld] = %lld, kit %lld", idx_names[k], (long long)r, (long long)want,
                            (long long)v[r]);
        }
        free(v);
    }
    free(ti);
    return ok;
}
