#include "sampler/initial_noise.h"

#include <stdio.h>
#include <stdlib.h>

#include "sampler/euler.h"
#include "sampler/torch_rng.h"

static int64_t latent_numel(const mm_video_shape *s)
{
    return (int64_t)s->channels * s->frames * s->height * s->width;
}

int mm_draw_initial_rows(uint64_t seed, const mm_noise_plan *p, float *video_rows, float *audio_rows,
                         mm_noise_draw_fn draw, void *user, mm_error *err)
{
    int64_t biggest = latent_numel(&p->target);
    for (int i = 0; i < p->n_conds; i++)
        biggest = latent_numel(&p->conds[i].shape) > biggest ? latent_numel(&p->conds[i].shape) : biggest;
    float *noise = malloc(sizeof(float) * (size_t)biggest), *aug = malloc(sizeof(float) * (size_t)biggest);
    if (!noise || !aug) {
        free(noise);
        free(aug);
        return mm_fail(err, "initial noise: out of memory for %lld values", (long long)biggest);
    }
    mm_torch_gen gen;
    mm_torch_gen_seed(&gen, seed);
    float *rows = video_rows;
    char name[32];
    for (int i = 0; i < p->n_conds; i++) {
        const mm_noise_condition *c = &p->conds[i];
        const int64_t n = latent_numel(&c->shape);
        mm_torch_randn_f32(&gen, noise, n);
        if (draw) {
            snprintf(name, sizeof name, "cond%d", i);
            draw(user, name, noise, n);
        }
        mm_scale_noise(aug, c->latent, noise, n, p->condition_t);
        mm_patchify_video(&c->shape, aug, rows);
        rows += mm_video_rows(&c->shape) * mm_video_row_width(&c->shape);
    }
    const int64_t nv = latent_numel(&p->target);
    mm_torch_randn_f32(&gen, noise, nv);
    if (draw)
        draw(user, "video", noise, nv);
    mm_patchify_video(&p->target, noise, rows);
    mm_torch_randn_f32(&gen, audio_rows, p->audio_rows * p->audio_width);
    if (draw)
        draw(user, "audio", audio_rows, p->audio_rows * p->audio_width);
    free(noise);
    free(aug);
    return 0;
}
