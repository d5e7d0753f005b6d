/* Keyframes and references → VAE latents, the rows the DiT keeps pinned
 * (dit.md §5.5): pictures and video frames through the video VAE's encoder
 * with the released posterior recipe (a sample from a fresh generator seeded
 * 42, rounded to fp16, normalized), audio clips and soundtracks through the
 * audio VAE's encoder (normalized posterior means, clean rows).
 *
 * Encodes are cached by content: the key of an item (pipeline_inputs.c) is
 * the SHA-256 of its file and of how it was prepared, so a reference used
 * again — in the next job of the worker, or as the same keyframe — is not
 * re-encoded. The cache is an LRU bounded in bytes, in host memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lru.h"
#include "core/sha256.h"
#include "engine/pipeline_internal.h"
#include "model/vae/vae.h"

/* --------------------------------------------------------------- cache */

/* The latents of one item, owned by the cache (core/lru.h), keyed by the
 * item's content hash in hex. */
typedef struct cached_latents {
    float *vlat;
    int64_t vshape[4];
    float *alat;
    int64_t a_latents;
} cached_latents;

struct pl_ref_cache {
    pthread_mutex_t lock;
    mm_lru *lru;
    uint64_t hits, misses;
};

static void latents_free(cached_latents *l)
{
    if (!l)
        return;
    free(l->vlat);
    free(l->alat);
    free(l);
}

static void release_latents(void *user, const char *key, void *value, size_t bytes, mm_lru_reason why)
{
    (void)user, (void)key, (void)bytes, (void)why;
    latents_free(value);
}

int pl_ref_cache_create(pl_ref_cache **out, size_t budget, mm_error *err)
{
    pl_ref_cache *c = calloc(1, sizeof *c);
    if (!c)
        return mm_fail(err, "out of memory");
    if (mm_lru_create(&c->lru, budget, release_latents, NULL, err) != 0) {
        free(c);
        return -1;
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

void pl_ref_cache_destroy(pl_ref_cache *c)
{
    if (!c)
        return;
    mm_lru_destroy(c->lru);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static int64_t vnumel(const int64_t *s) { return s[0] * s[1] * s[2] * s[3]; }

static float *dup_floats(const float *src, int64_t n)
{
    if (!src || n <= 0)
        return NULL;
    float *d = malloc(sizeof(float) * (size_t)n);
    if (d)
        memcpy(d, src, sizeof(float) * (size_t)n);
    return d;
}

/* On a hit, copies the latents into the item. */
static bool cache_get(pl_ref_cache *c, pl_item *it, int channels)
{
    if (!c)
        return false;
    char key[65];
    mm_sha256_hex(it->key, key);
    bool hit = false;
    pthread_mutex_lock(&c->lock);
    const cached_latents *l = mm_lru_get(c->lru, key);
    if (l) {
        it->vlat = l->vlat ? dup_floats(l->vlat, vnumel(l->vshape)) : NULL;
        memcpy(it->vshape, l->vshape, sizeof it->vshape);
        it->alat = l->alat ? dup_floats(l->alat, 2 * (int64_t)channels * l->a_latents) : NULL;
        it->a_latents = l->a_latents;
        hit = (!l->vlat || it->vlat) && (!l->alat || it->alat);
        if (!hit) { /* out of memory for one copy: a miss owns nothing */
            free(it->vlat);
            free(it->alat);
            it->vlat = it->alat = NULL;
        }
    }
    c->hits += hit;
    c->misses += !hit;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

static void cache_put(pl_ref_cache *c, const pl_item *it, int channels)
{
    if (!c)
        return;
    cached_latents *l = calloc(1, sizeof *l);
    if (!l)
        return;
    int64_t na = 2 * (int64_t)channels * it->a_latents;
    l->vlat = it->vlat ? dup_floats(it->vlat, vnumel(it->vshape)) : NULL;
    l->alat = it->alat ? dup_floats(it->alat, na) : NULL;
    memcpy(l->vshape, it->vshape, sizeof l->vshape);
    l->a_latents = it->a_latents;
    size_t bytes = sizeof(float) * (size_t)((it->vlat ? vnumel(it->vshape) : 0) + (it->alat ? na : 0));
    if ((it->vlat && !l->vlat) || (it->alat && !l->alat)) {
        latents_free(l);
        return;
    }
    char key[65];
    mm_sha256_hex(it->key, key);
    pthread_mutex_lock(&c->lock);
    mm_lru_put(c->lru, key, l, bytes, NULL); /* takes l over, stored or not */
    pthread_mutex_unlock(&c->lock);
}

/* -------------------------------------------------------------- encodes */

static bool needs_video_latents(const pl_item *it)
{
    return it->role == PL_KEYFRAME_FIRST || it->role == PL_KEYFRAME_LAST || it->role == PL_REF_IMAGE ||
           it->role == PL_REF_VIDEO;
}

static bool needs_audio_latents(const pl_item *it)
{
    return it->role == PL_REF_AUDIO || (it->role == PL_REF_VIDEO && it->has_audio);
}

static int take_video_latents(pl_item *it, mm_video_latents *lat, mm_error *err)
{
    it->vlat = lat->latents;
    lat->latents = NULL;
    memcpy(it->vshape, lat->shape, sizeof it->vshape);
    mm_video_latents_free(lat);
    return it->vlat ? 0 : mm_fail(err, "the video VAE returned no latents");
}

typedef struct frame_source {
    const pl_item *it;
} frame_source;

static const uint8_t *pull_frame(void *user, int64_t index, mm_error *err)
{
    const pl_item *it = ((frame_source *)user)->it;
    if (index < 0 || index >= it->n_frames) {
        mm_fail(err, "frame %lld requested of %d", (long long)index, it->n_frames);
        return NULL;
    }
    return it->frames + (size_t)index * it->width * it->height * 3;
}

static int encode_item(pl_job *j, pl_item *it, mm_error *err)
{
    mm_pipeline *p = j->p;
    mm_video_encode_options vo;
    mm_video_encode_options_release(&vo);
    if (needs_video_latents(it)) {
        double t0 = mm_timing_now();
        mm_video_latents lat = {0};
        int rc;
        if (it->role == PL_REF_VIDEO) {
            frame_source src = {it};
            rc = mm_video_vae_encode_video(p->vvae, p->vae_ctx, it->n_frames, it->width, it->height,
                                           (int64_t)it->width * 3, pull_frame, &src, &vo, &lat, err);
        } else {
            rc = mm_video_vae_encode_image(p->vvae, p->vae_ctx, it->rgb, it->width, it->height, (int64_t)it->width * 3,
                                           &vo, &lat, err);
        }
        if (rc != 0) {
            mm_video_latents_free(&lat);
            return mm_error_prefix(err, "video VAE encode");
        }
        if (take_video_latents(it, &lat, err) != 0)
            return -1;
        it->video_s = mm_timing_now() - t0; /* the encode ends with its latents on the host: synced */
    }
    if (needs_audio_latents(it)) {
        double t0 = mm_timing_now();
        const float *chans[2] = {it->audio, it->audio + it->audio_samples};
        if (mm_audio_vae_encode(p->avae, p->vae_ctx, chans, 2, it->audio_samples, &it->alat, &it->a_latents, err) != 0)
            return mm_error_prefix(err, "audio VAE encode");
        it->audio_s = mm_timing_now() - t0;
    }
    return 0;
}

/* One line per encoded item under the stage's total, so a slow reference
 * shows which input, at which size, through which encoder, on which device:
 *   reference 2 (video 640x360 -> 1344x768, 22 frames = 2 clips): video VAE 1.91 s, audio VAE 0.04 s
 *   (0.92 s of sound) on cuda:0 */
typedef struct encoder_facts { /* taken before the VAEs may be freed */
    int sample_rate, clip_length;
    char device[16];
} encoder_facts;

static void log_item(const mm_pipeline *p, const encoder_facts *f, const pl_item *it)
{
    char name[32], what[128], how[160];
    const char *dev = f->device;
    int sr = f->sample_rate;
    double audio_seconds = sr > 0 ? (double)it->audio_samples / sr : 0.0;
    pl_item_name(it, name, sizeof name);
    if (it->role == PL_REF_VIDEO) {
        int clip = f->clip_length > 0 ? f->clip_length : 1;
        snprintf(what, sizeof what, "video %dx%d -> %dx%d, %d frames = %d clips", it->src_width, it->src_height,
                 it->width, it->height, it->n_frames, (it->n_frames + clip - 1) / clip);
    } else if (it->role == PL_REF_AUDIO) {
        snprintf(what, sizeof what, "audio %.2f s", audio_seconds);
    } else {
        snprintf(what, sizeof what, "picture %dx%d -> %dx%d", it->src_width, it->src_height, it->width, it->height);
    }
    if (it->cached)
        snprintf(how, sizeof how, "from the cache");
    else if (needs_video_latents(it) && needs_audio_latents(it))
        snprintf(how, sizeof how, "video VAE %.2f s, audio VAE %.2f s (%.2f s of sound) on %s", it->video_s,
                 it->audio_s, audio_seconds, dev);
    else if (needs_video_latents(it))
        snprintf(how, sizeof how, "video VAE %.2f s on %s", it->video_s, dev);
    else
        snprintf(how, sizeof how, "audio VAE %.2f s on %s", it->audio_s, dev);
    pl_log(p, "  %s (%s): %s", name, what, how);
}

int pl_encode_references(pl_job *j, mm_error *err)
{
    mm_pipeline *p = j->p;
    bool any = false;
    for (int i = 0; i < j->n_items; i++)
        any |= needs_video_latents(&j->items[i]) || needs_audio_latents(&j->items[i]);
    if (!any)
        return 0;
    pl_report(j, MM_STAGE_ENCODING_REFERENCES, 0, 0);
    if (pl_ensure_vaes(p, j->t, err) != 0)
        return -1;
    const int channels = mm_audio_vae_get_config(p->avae)->latent_channels;
    encoder_facts facts = {.sample_rate = mm_audio_vae_get_config(p->avae)->sample_rate,
                           .clip_length = mm_video_vae_get_config(p->vvae)->clip_length};
    mm_device_name(mm_ctx_device(p->vae_ctx), facts.device, sizeof facts.device);
    int encoded = 0, cached = 0;
    double t0 = mm_timing_now();
    for (int i = 0; i < j->n_items; i++) {
        pl_item *it = &j->items[i];
        if (!needs_video_latents(it) && !needs_audio_latents(it))
            continue;
        it->a_channels = channels;
        if (cache_get(p->ref_cache, it, channels)) {
            it->cached = true;
            cached++;
            continue;
        }
        if (pl_cancelled(j))
            return MM_CANCELLED;
        if (encode_item(j, it, err) != 0) {
            char name[32];
            return mm_error_prefix(err, "%s (%s)", pl_item_name(it, name, sizeof name), it->path);
        }
        cache_put(p->ref_cache, it, channels);
        encoded++;
    }
    if (mm_ctx_sync(p->vae_ctx, err) != 0)
        return -1;
    pl_release_vaes(p);
    double s = mm_timing_now() - t0;
    mm_timing_add(j->t, MM_TG_INFERENCE, "encode references (VAE)", s);
    pl_log(p, "references: %d encoded, %d from the cache, %.2f s", encoded, cached, s);
    for (int i = 0; i < j->n_items; i++)
        if (needs_video_latents(&j->items[i]) || needs_audio_latents(&j->items[i]))
            log_item(p, &facts, &j->items[i]);
    return 0;
}
