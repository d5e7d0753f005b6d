#include "model/text/mrope.h"

#include <math.h>
#include <stdlib.h>

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
    int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

int mm_mrope_positions(const uint8_t *row_type, int64_t L, const int64_t (*image_grids)[3], int n_images,
                       const int64_t (*video_grids)[3], int n_videos, int merge, int64_t *pos, mm_error *err)
{
    if (merge <= 0)
        return mm_fail(err, "mrope: merge size must be positive");
    int64_t *pt = pos, *ph = pos + L, *pw = pos + 2 * L;
    int64_t c = 0;
    int next_image = 0, next_video = 0;
    int64_t video_block = 0; /* temporal block inside video_grids[next_video] */
    for (int64_t i = 0; i < L;) {
        uint8_t type = row_type[i];
        if (type == MM_ROW_TEXT) {
            pt[i] = ph[i] = pw[i] = c++;
            i++;
            continue;
        }
        if (type != MM_ROW_IMAGE && type != MM_ROW_VIDEO)
            return mm_fail(err, "mrope: row %lld has modality %u (0 text, 1 image, 2 video)", (long long)i, type);
        int64_t run = 0;
        while (i + run < L && row_type[i + run] == type)
            run++;
        int64_t gt, gh, gw;
        if (type == MM_ROW_IMAGE) {
            if (next_image >= n_images)
                return mm_fail(err, "mrope: image run at row %lld but only %d image grids", (long long)i, n_images);
            gt = image_grids[next_image][0], gh = image_grids[next_image][1], gw = image_grids[next_image][2];
            next_image++;
        } else {
            if (next_video >= n_videos)
                return mm_fail(err, "mrope: video run at row %lld but only %d video grids", (long long)i, n_videos);
            gt = 1, gh = video_grids[next_video][1], gw = video_grids[next_video][2];
            if (++video_block >= video_grids[next_video][0])
                next_video++, video_block = 0;
        }
        if (gt <= 0 || gh <= 0 || gw <= 0 || gh % merge || gw % merge)
            return mm_fail(err, "mrope: grid (%lld, %lld, %lld) is not positive and divisible by merge %d",
                           (long long)gt, (long long)gh, (long long)gw, merge);
        int64_t H = gh / merge, W = gw / merge;
        if (run != gt * H * W)
            return mm_fail(err, "mrope: %s run at row %lld has %lld rows, its grid (%lld, %lld, %lld) gives %lld",
                           type == MM_ROW_IMAGE ? "image" : "video", (long long)i, (long long)run, (long long)gt,
                           (long long)gh, (long long)gw, (long long)(gt * H * W));
        int64_t k = i;
        for (int64_t ti = 0; ti < gt; ti++)
            for (int64_t r = 0; r < H; r++)
                for (int64_t q = 0; q < W; q++, k++) {
                    pt[k] = c + ti;
                    ph[k] = c + r;
                    pw[k] = c + q;
                }
        c += max3(gt, H, W);
        i += run;
    }
    if (next_image != n_images || next_video != n_videos || video_block != 0)
        return mm_fail(err, "mrope: %d of %d image grids and %d of %d videos consumed by the rows", next_image,
                       n_images, next_video, n_videos);
    return 0;
}

int mm_mrope_tables(const mm_qwen3vl_text_config *t, const int64_t *pos, int64_t L, float *cos_out, float *sin_out,
                    mm_error *err)
{
    const int half = t->head_dim / 2, hd = t->head_dim;
    float *inv_freq = malloc(sizeof(float) * (size_t)half);
    int8_t *axis = malloc((size_t)half);
    if (!inv_freq || !axis) {
        free(inv_freq);
        free(axis);
        return mm_fail(err, "mrope: out of memory");
    }
    /* As transformers: base ** (arange(0, dim, 2) / dim) in fp32, then 1/x. */
    for (int j = 0; j < half; j++) {
        float e = (float)(2 * j) / (float)hd;
        inv_freq[j] = 1.0f / powf((float)t->rope_theta, e);
        axis[j] = 0;
    }
    if (t->mrope_interleaved) {
        for (int j = 1; j < 3 * t->mrope_section[1] && j < half; j += 3)
            axis[j] = 1;
        for (int j = 2; j < 3 * t->mrope_section[2] && j < half; j += 3)
            axis[j] = 2;
    } else {
        /* Qwen2-VL contiguous sections [T | H | W]. */
        for (int j = 0; j < half; j++)
            axis[j] = j < t->mrope_section[0] ? 0 : j < t->mrope_section[0] + t->mrope_section[1] ? 1 : 2;
    }
    for (int64_t i = 0; i < L; i++) {
        float *c = cos_out + i * hd, *s = sin_out + i * hd;
        for (int j = 0; j < half; j++) {
            float angle = (float)pos[axis[j] * L + i] * inv_freq[j];
            c[j] = c[j + half] = cosf(angle);
            s[j] = s[j + half] = sinf(angle);
        }
    }
    free(inv_freq);
    free(axis);
    return 0;
}
