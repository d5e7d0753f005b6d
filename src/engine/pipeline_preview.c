/* Live previews of a job (engine/preview.h): the projection made once per
 * pipeline (the cache file, else a fit on the resident video VAE), then
 * after each forward that is due x0 = x + σ·v on the target video rows
 * (σ = 1 − t: dit.md's data-ward velocity), unpatchified to latents,
 * projected and encoded into a strip handed to the callback. The seconds it
 * takes are the timing table's "live previews" row, kept out of the
 * denoise row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "engine/pipeline_internal.h"
#include "model/dit/patchify.h"
#include "model/vae/vae.h"

#define FIT_SEED 0x70726576ull

static int cache_path(const mm_pipeline *p, char *path, size_t n, mm_error *err)
{
    char key[65];
    if (mm_preview_vae_key(p->files[MM_COMP_VIDEO_VAE].path, key, err) != 0)
        return -1;
    int k = snprintf(path, n, "%s/preview-%s.txt", p->o.cache_dir, key);
    return k < 0 || (size_t)k >= n ? mm_fail(err, "cache folder path too long: %s", p->o.cache_dir) : 0;
}

/* From the cache file where there is one. */
static void projection_from_cache(mm_pipeline *p)
{
    char path[4096];
    mm_error err = {{0}};
    if (!p->o.cache_dir || !p->vvae || cache_path(p, path, sizeof path, &err) != 0)
        return;
    const int C = mm_video_vae_get_config(p->vvae)->latent_channels;
    if (mm_preview_projection_load(path, C, &p->preview, &err) == 1) {
        p->preview_state = 1;
        pl_log(p, "previews: projection from %s", path);
    }
}

static void projection_fit(mm_pipeline *p)
{
    mm_preview_fit_report rep = {0};
    mm_error err = {{0}};
    if (mm_preview_fit(p->vvae, p->vae_ctx, FIT_SEED, &p->preview, &rep, &err) != 0) {
        p->preview_state = -1;
        pl_log(p, "previews: off (%s)", err.msg);
        return;
    }
    p->preview_state = 1;
    pl_log(p, "previews: projection fitted on %lld latent pixels in %.2f s (RMSE %.4f of RGB 0..1; the targets' spread %.4f)",
           (long long)rep.samples, rep.seconds, rep.rmse, rep.target_std);
    char path[4096];
    if (p->o.cache_dir && (cache_path(p, path, sizeof path, &err) != 0 ||
                           mm_preview_projection_save(path, &p->preview, &err) != 0))
        pl_log(p, "previews: the projection is not cached (%s)", err.msg);
}

void pl_preview_begin(pl_job *j)
{
    mm_pipeline *p = j->p;
    j->preview_on = false;
    j->preview_last = -1;
    if (!j->cb || !j->cb->preview || p->preview_state < 0)
        return;
    if (p->preview_state == 0) {
        const double t0 = mm_clock_now();
        projection_from_cache(p);
        if (p->preview_state == 0 && p->vvae)
            projection_fit(p);
        j->preview_fit_seconds = mm_clock_now() - t0;
        mm_timing_add(j->t, MM_TG_LOADING, "preview projection (once per VAE)", j->preview_fit_seconds);
    }
    if (p->preview_state == 0)
        pl_log(p, "previews: none in this job (the video VAE is loaded after denoising; its projection is made then)");
    j->preview_on = p->preview_state > 0;
}

void pl_preview_fit_late(pl_job *j)
{
    mm_pipeline *p = j->p;
    if (j->cb && j->cb->preview && p->preview_state == 0 && p->vvae) {
        const double t0 = mm_clock_now();
        projection_from_cache(p);
        if (p->preview_state == 0)
            projection_fit(p);
        mm_timing_add(j->t, MM_TG_LOADING, "preview projection (once per VAE)", mm_clock_now() - t0);
    }
}

static int make_preview(pl_job *j, int step, float t_video, const float *rows, int64_t n_rows, int64_t cond_rows,
                        const float *v_video, mm_error *err)
{
    const mm_dit_config *cfg = &j->dit_cfg;
    const int vw = cfg->video_row_width, C = cfg->latent_channels;
    const int64_t n = (n_rows - cond_rows) * vw;
    const float sigma = 1.0f - t_video;
    mm_video_shape shape = {C, j->T, j->Hl, j->Wl, cfg->patch[0], cfg->patch[1], cfg->patch[2]};
    float *x0 = malloc(sizeof(float) * (size_t)n), *lat = malloc(sizeof(float) * (size_t)C * j->T * j->Hl * j->Wl);
    mm_preview_image img = {0};
    int rc = -1;
    if (!x0 || !lat) {
        mm_fail(err, "out of memory");
        goto done;
    }
    const float *x = rows + cond_rows * vw, *v = v_video + cond_rows * vw;
    for (int64_t i = 0; i < n; i++)
        x0[i] = x[i] + sigma * v[i];
    mm_unpatchify_video(&shape, x0, lat);
    if (mm_preview_from_latents(&j->p->preview, lat, j->T, j->Hl, j->Wl, &img, err) != 0)
        goto done;
    mm_preview pv = {
        .data = img.data,
        .size = img.size,
        .ext = "jpg",
        .mime = "image/jpeg",
        .step = step + 1,
        .total_steps = j->total_forwards,
        .frames = img.frames,
        .frame_width = img.frame_width,
        .frame_height = img.frame_height,
    };
    j->cb->preview(j->cb->user, &pv);
    rc = 0;
done:
    mm_preview_image_free(&img);
    free(x0);
    free(lat);
    return rc;
}

void pl_preview_forward(pl_job *j, int step, float t_video, const float *rows, int64_t n_rows, int64_t cond_rows,
                        const float *v_video)
{
    const double t0 = mm_clock_now();
    if (!j->preview_on || !mm_preview_due(&j->preview_last, t0, j->cb->preview_interval_ms))
        return;
    mm_error err = {{0}};
    if (make_preview(j, step, t_video, rows, n_rows, cond_rows, v_video, &err) != 0) {
        j->preview_on = false;
        pl_log(j->p, "previews: off for this job (%s)", err.msg);
    }
    j->preview_seconds += mm_clock_now() - t0;
}
