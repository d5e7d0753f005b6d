/* Choosing and driving an engine (see engine.h for the interface itself).
 *
 * The worker and `mmh3 generate` create an engine by kind: "mock" (the
 * FFmpeg test pattern, chosen explicitly with --mock) or "h3" (the real
 * MiniMax-H3 engine). When the real engine cannot start (no weights, no GPU,
 * not built), creation or load fails with a message that says why; callers
 * report it instead of falling back to the mock.
 */
#ifndef MMH3_ENGINE_ENGINES_H
#define MMH3_ENGINE_ENGINES_H

#include <stdbool.h>

#include "engine/engine.h"
#include "engine/pipeline.h"

/* The real engine is the resident pipeline, so its options are the
 * pipeline's, unchanged (device placement, checkpoint files, caches, ...);
 * the rest applies to every engine kind. */
typedef struct mm_engine_options {
    mm_pipeline_options h3; /* real engine (engine_h3.c) */
    bool preload;           /* load the weights at start instead of on the first job */
    double mock_seconds;    /* mock engine: wall time of one job (default 5) */
} mm_engine_options;

void mm_engine_options_defaults(mm_engine_options *o);

int mm_engine_mock_create(const mm_engine_options *opt, mm_engine **out, mm_error *err);
/* The real engine; engine_h3.c. */
int mm_engine_h3_create(const mm_engine_options *opt, mm_engine **out, mm_error *err);
/* kind: "mock" or "h3". */
int mm_engine_create(const char *kind, const mm_engine_options *opt, mm_engine **out, mm_error *err);

static inline int mm_engine_load(mm_engine *e, mm_error *err) { return e->ops->load(e, err); }
static inline int mm_engine_generate(mm_engine *e, const mm_gen_request *req, const mm_gen_callbacks *cb,
                                     mm_gen_result *res, mm_error *err)
{
    return e->ops->generate(e, req, cb, res, err);
}
static inline int mm_engine_status_json(mm_engine *e, char *buf, size_t n) { return e->ops->status_json(e, buf, n); }
void mm_engine_destroy(mm_engine *e); /* unloads and frees; NULL is fine */

#endif
