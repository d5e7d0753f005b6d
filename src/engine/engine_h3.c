/* The real MiniMax-H3 engine: the pipeline (pipeline.h) behind the engine
 * interface the worker and `mmh3 generate` drive.
 *
 * Creation resolves every file and chooses the placement (no weights read,
 * so a missing checkpoint is reported at once); load() puts the weights on
 * their devices and they stay resident between jobs, so a later job starts
 * encoding its prompt right away. A failed job leaves the engine usable:
 * the pipeline clears its device contexts' errors and the next job runs.
 */
#include "engine/engines.h"

#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"

typedef struct h3_engine {
    mm_engine base;
    mm_pipeline *pipe;
} h3_engine;

static int h3_load(mm_engine *e, mm_error *err)
{
    h3_engine *h = e->impl;
    if (mm_pipeline_loaded(h->pipe))
        return 0;
    mm_timing t = {0};
    return mm_pipeline_load(h->pipe, NULL, &t, err);
}

static int h3_generate(mm_engine *e, const mm_gen_request *req, const mm_gen_callbacks *cb, mm_gen_result *res,
                       mm_error *err)
{
    h3_engine *h = e->impl;
    return mm_pipeline_run(h->pipe, req, cb, res, err);
}

static void h3_unload(mm_engine *e)
{
    h3_engine *h = e->impl;
    mm_pipeline_unload(h->pipe);
}

static int h3_status_json(mm_engine *e, char *buf, size_t n)
{
    h3_engine *h = e->impl;
    return mm_pipeline_status_json(h->pipe, buf, n);
}

static void h3_destroy(mm_engine *e)
{
    h3_engine *h = e->impl;
    mm_pipeline_destroy(h->pipe);
    free(h);
}

static const mm_engine_ops h3_ops = {
    .kind = "h3",
    .load = h3_load,
    .generate = h3_generate,
    .unload = h3_unload,
    .status_json = h3_status_json,
    .destroy = h3_destroy,
};

int mm_engine_h3_create(const mm_engine_options *opt, mm_engine **out, mm_error *err)
{
    *out = NULL;
    h3_engine *h = calloc(1, sizeof *h);
    if (!h)
        return mm_fail(err, "out of memory");
    if (mm_pipeline_create(&h->pipe, &opt->h3, err) != 0) {
        free(h);
        return -1;
    }
    h->base.ops = &h3_ops;
    h->base.impl = h;
    *out = &h->base;
    return 0;
}
