/* libFuzzer: POST /api/ai/queue's request validation on arbitrary bodies.
 * Checks the promises the rest of the server relies on: an accepted request
 * has its numbers on the grids and in range, a refused one names what is
 * wrong. */
#include <stdlib.h>
#include <string.h>

#include "fcgi/enqueue.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!j)
        return 0;
    mm_enqueue q;
    mm_field_error fe;
    if (mm_enqueue_parse(j, &q, &fe) == 0) {
        if (q.frames && (q.frames < MM_FRAMES_MIN || q.frames > MM_FRAMES_MAX || (q.frames - 5) % 17))
            abort();
        if (q.canvas.width % 32 || q.canvas.height % 32 || q.canvas.short_edge % 32)
            abort();
        if (q.steps < MM_STEPS_MIN || q.steps > MM_STEPS_MAX || q.crf < 0 || q.crf > 51)
            abort();
        if (q.n_refs < 0 || q.n_refs > MM_MAX_REFERENCES || !q.prompt)
            abort();
        if (q.has_seed && (q.seed < 0 || q.seed > MM_SEED_MAX))
            abort();
        int w, h;
        mm_canvas_resolve(&q.canvas, &w, &h);
        if (w < MM_DIM_MIN || h < MM_DIM_MIN || w > MM_DIM_MAX || h > MM_DIM_MAX || w % 32 || h % 32)
            abort();
    } else if (!fe.message[0]) {
        abort();
    }
    json_decref(j);
    return 0;
}
