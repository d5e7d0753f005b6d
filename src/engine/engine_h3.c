/* The real MiniMax-H3 engine — placeholder until the engine owner (issue 7)
 * replaces this file. It fails with a message the worker shows in
 * /api/status, the log and the UI. */
#include "engine/engines.h"

int mm_engine_h3_create(const mm_engine_options *opt, mm_engine **out, mm_error *err)
{
    (void)opt;
    *out = NULL;
    return mm_fail(err, "the MiniMax-H3 engine is not part of this build yet; start the worker with --mock "
                        "for the test-pattern engine");
}
