/* libFuzzer: POST /api/ai/queue's request validation on arbitrary bodies
 * (request/json.c, then mm_request_settle; references are looked up in an
 * empty table). Checks the promises the rest of the server relies on: an
 * accepted request has its numbers on the grids and in range, a refused one
 * names what is wrong. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "request/request.h"

/* Every upload exists, as a 640x360 picture. */
static int resolve(void *user, mm_request_refs *refs, mm_request_error *e)
{
    (void)user, (void)e;
    for (int i = 0; i < refs->n_refs + (refs->has_last ? 1 : 0); i++) {
        refs->refs[i] = (mm_request_ref){.source = refs->refs[i].source, .kind = MM_REF_IMAGE, .width = 640,
                                         .height = 360};
        refs->found[i] = true;
    }
    return 0;
}

static void check_settled(const mm_request *q)
{
    mm_error err = {{0}};
    if (mm_request_verify(q, &err) != 0)
        abort();
    if (q->count < 1 || q->count > MM_NUM_GENERATIONS_MAX || !q->prompt)
        abort();
    for (int k = 0; k < q->count; k++)
        if (q->seeds[k] > (uint64_t)MM_SEED_MAX)
            abort();
    if (q->n_loras < 0 || q->n_loras > MM_LORAS_MAX)
        abort();
    for (int i = 0; i < q->n_loras; i++)
        if (!isfinite(q->loras[i].strength) || fabs(q->loras[i].strength) > MM_LORA_STRENGTH_MAX)
            abort();
    if (q->sampler.kind == MM_SAMPLER_SIGMAS &&
        (q->sampler.n_sigmas < MM_SIGMAS_MIN || q->sampler.n_sigmas > MM_SIGMAS_MAX ||
         q->sampler.sigmas[q->sampler.n_sigmas - 1] != 0))
        abort();
    if (q->cache.kind != MM_STEP_CACHE_OFF && !(q->cache.threshold >= 0))
        abort();
    free(mm_request_loras_json(q));
    free(mm_request_sampler_json(q));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!j)
        return 0;
    mm_request_input in;
    mm_request_error e;
    mm_request q;
    if (mm_request_input_from_json(j, &in, &e) == 0 && mm_request_settle(&in, resolve, NULL, &q, &e) == 0)
        check_settled(&q);
    else if (!e.message[0])
        abort();
    json_decref(j);
    return 0;
}
