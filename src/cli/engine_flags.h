/* The engine flags: where the model parts go and which files they come from,
 * defined once for `mmh3 generate`, `mmh3 worker` and `mmh3 serve` (which
 * forwards the ones it was given to each worker it starts).
 *
 * They are rows of the common flag table (cli/flags.h): a command asks for
 * its rows, targeted at its mm_engine_options, and puts them into its own
 * table as one MM_FLAG_GROUP row; parsing and --help come from there. Each
 * row's id is its MM_EF_* value, so a command can tell them apart (serve
 * keeps --gpus for itself and passes the others on).
 */
#ifndef MMH3_CLI_ENGINE_FLAGS_H
#define MMH3_CLI_ENGINE_FLAGS_H

#include <stdbool.h>

#include "cli/flags.h"
#include "core/error.h"
#include "engine/engines.h"

typedef enum mm_engine_cmd {
    MM_ENGINE_CMD_GENERATE = 1u << 0,
    MM_ENGINE_CMD_WORKER = 1u << 1,
    MM_ENGINE_CMD_SERVE = 1u << 2,
} mm_engine_cmd;

/* The rows' ids (mm_flag.id). */
enum {
    MM_EF_FIRST = 0x1000,
    MM_EF_DEVICE = MM_EF_FIRST,
    MM_EF_TE_DEVICE,
    MM_EF_OFFLOAD,
    MM_EF_DTYPE,
    MM_EF_THREADS,
    MM_EF_GPUS,
    MM_EF_REF_KV,
    MM_EF_NO_REF_KV,
    MM_EF_REF_EDGE,
    MM_EF_REF_VIDEO_EDGE,
    MM_EF_MODELS,
    MM_EF_DIT_FL2VA,
    MM_EF_DIT_REF2VA,
    MM_EF_TEXT_ENCODER,
    MM_EF_VIDEO_VAE,
    MM_EF_AUDIO_VAE,
    MM_EF_CONFIG,
    MM_EF_DOWNLOAD,
    MM_EF_PRELOAD,
    MM_EF_PEER_COPY,
    MM_EF_VAE_INT8,
    MM_EF_VRAM_BUDGET,
    MM_EF_END
};

/* Room for every engine row. */
#define MM_ENGINE_FLAGS_MAX 32

/* Writes cmd's engine flags into rows (room for MM_ENGINE_FLAGS_MAX), each
 * storing into o, and returns how many. A bad value is refused with what is
 * accepted ("--device gpu7: not a device; accepted: auto, cpu, cuda, cuda:N"). */
int mm_engine_flags_rows(mm_engine_cmd cmd, mm_engine_options *o, mm_flag *rows);

static inline bool mm_engine_flags_owns(int id) { return id >= MM_EF_FIRST && id < MM_EF_END; }

/* How `mmh3 worker` spells the engine flag `id` ("--threads" for serve's
 * --cpu-threads): what serve passes on to its workers. */
const char *mm_engine_flags_worker_name(int id);

/* After the flags: what the environment gives for flags not given
 * (MMH3_REF_SHORT_EDGE, MMH3_REF_VIDEO_SHORT_EDGE), checked like the flags,
 * and the engine's cache folder (MMH3_CACHE_DIR, XDG_CACHE_HOME, HOME). */
int mm_engine_flags_finish(mm_engine_options *o, mm_error *err);

#endif
