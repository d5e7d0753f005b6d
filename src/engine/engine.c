/* Stage names and the engine factory. */
#include "engine/engines.h"

#include <string.h>

static const char *const stage_names[MM_STAGE_COUNT] = {
    [MM_STAGE_QUEUED] = "queued",
    [MM_STAGE_LOADING] = "loading",
    [MM_STAGE_ENCODING_PROMPT] = "encoding_prompt",
    [MM_STAGE_ENCODING_REFERENCES] = "encoding_references",
    [MM_STAGE_DENOISING] = "denoising",
    [MM_STAGE_DECODING_VIDEO] = "decoding_video",
    [MM_STAGE_DECODING_AUDIO] = "decoding_audio",
    [MM_STAGE_WRITING] = "writing",
};

const char *mm_stage_name(mm_stage s)
{
    return (unsigned)s < MM_STAGE_COUNT ? stage_names[s] : "unknown";
}

void mm_engine_options_defaults(mm_engine_options *o)
{
    memset(o, 0, sizeof *o);
    mm_pipeline_options_defaults(&o->h3);
    o->mock_seconds = 5.0;
}

int mm_engine_create(const char *kind, const mm_engine_options *opt, mm_engine **out, mm_error *err)
{
    *out = NULL;
    if (kind && strcmp(kind, "mock") == 0)
        return mm_engine_mock_create(opt, out, err);
    if (kind && strcmp(kind, "h3") == 0)
        return mm_engine_h3_create(opt, out, err);
    return mm_fail(err, "engine kind '%s' is unknown; accepted: h3, mock", kind ? kind : "(null)");
}

void mm_engine_destroy(mm_engine *e)
{
    if (!e)
        return;
    if (e->ops->unload)
        e->ops->unload(e);
    e->ops->destroy(e);
}
