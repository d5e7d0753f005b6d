#include "engine/memory_plan.h"

#include <stdio.h>
#include <sys/stat.h>

#include "backend/gpu.h"
#include "model/dit/dit.h"
#include "model/vae/vae.h"
#include "parallel/sp_dit.h"
#include "request/rules.h"

#define GIB (1ull << 30)

static uint64_t file_size(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Packed rows of the target (the released VAE's rule, as the pipeline's
 * target geometry when the VAE is not loaded: 17n+5 frames → 5n+2 latents,
 * 16 px per latent, 2x2 patches; two audio rows per latent, stereo). */
static int64_t clip_rows(const mm_plan_clip *c, int text_rows)
{
    const int64_t T = (c->frames - 5) / 17 * 5 + 2;
    const int64_t video = T * (c->height / 32) * (c->width / 32);
    const int64_t audio = 2 * mm_audio_vae_latents_for_frames(c->frames);
    return text_rows + video + audio;
}

int mm_plan_sizes(const char *dit, const char *text_encoder, const char *video_vae, const char *audio_vae,
                  const mm_plan_clip *clip, mm_memplan_sizes *out, mm_error *err)
{
    mm_plan_clip c = clip ? *clip : (mm_plan_clip){0};
    if (!c.width)
        c.width = MM_DEFAULT_WIDTH;
    if (!c.height)
        c.height = MM_DEFAULT_HEIGHT;
    if (!c.frames)
        c.frames = MM_FRAMES_DEFAULT;
    if (!c.text_rows)
        c.text_rows = 512;
    *out = (mm_memplan_sizes){0};
    mm_dit_config cfg;
    if (mm_dit_file_sizes(dit, &out->dit_fixed, out->dit_block, MM_MEMPLAN_MAX_BLOCKS, &cfg, err) != 0)
        return -1;
    out->dit_blocks = cfg.layers;
    const int64_t rows = clip_rows(&c, c.text_rows);
    const uint64_t sampler = 4 * (uint64_t)rows * (uint64_t)cfg.video_row_width * sizeof(float);
    /* Sequence parallel: rank 0's share, which also holds the sampler's rows
     * (the caller's tensors live there). */
    if (c.sp_ranks < 2)
        out->dit_work = mm_dit_request_bytes_for(&cfg, rows, c.text_rows, true);
    else if (mm_sp_rank_work_bytes(&cfg, rows, c.text_rows, c.sp_ranks, &out->dit_work, err) != 0)
        return -1;
    out->dit_work += sampler;
    out->te_bytes = file_size(text_encoder);
    out->te_work = GIB + (uint64_t)c.text_rows * (256u << 10);
    out->vae_bytes = file_size(video_vae) + file_size(audio_vae);
    const double area = (double)c.width * c.height / (1344.0 * 768.0);
    out->vae_work = (uint64_t)(4.3 * (double)GIB * (area > 0.1 ? area : 0.1));
    return 0;
}

int mm_plan_for_host(int gpus, int sp_ranks, uint64_t budget, const mm_memplan_sizes *s, mm_memplan *out,
                     mm_error *err)
{
    mm_memplan_in in = {.n_gpus = gpus, .budget = budget, .sp_ranks = sp_ranks, .s = *s};
    for (int g = 0; g < gpus && g < MM_MEMPLAN_MAX_GPUS; g++) {
        mm_gpu_info info;
        if (mm_gpu_info_get(g, &info, err) != 0)
            return mm_error_prefix(err, "memory plan");
        in.gpu_total[g] = info.total_bytes;
        in.gpu_free[g] = info.free_bytes;
    }
    return mm_memplan_choose(&in, out, NULL, err);
}
