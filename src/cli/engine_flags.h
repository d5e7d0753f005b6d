/* The engine flags: where the model parts go and which files they come from,
 * defined once for `mmh3 generate`, `mmh3 worker` and `mmh3 serve` (which
 * forwards the ones it was given to each worker it starts).
 *
 * One table (engine_flags.c) holds each flag's names, value, help line and
 * the commands that take it; a command appends the table's getopt entries to
 * its own, hands each matching getopt value to mm_engine_flags_apply, and
 * prints the table in its --help. Values start at MM_EF_FIRST, above any
 * command's own getopt values.
 */
#ifndef MMH3_CLI_ENGINE_FLAGS_H
#define MMH3_CLI_ENGINE_FLAGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/error.h"
#include "engine/engines.h"

typedef enum mm_engine_cmd {
    MM_ENGINE_CMD_GENERATE = 1u << 0,
    MM_ENGINE_CMD_WORKER = 1u << 1,
    MM_ENGINE_CMD_SERVE = 1u << 2,
} mm_engine_cmd;

/* getopt values of the engine flags (aliases share their flag's value). */
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
    MM_EF_END
};

/* Room for every engine flag in a getopt table. */
#define MM_ENGINE_FLAGS_MAX 32

/* Appends cmd's engine flags to opts (which holds *n entries and room for
 * MM_ENGINE_FLAGS_MAX more) and terminates it with a zero entry. */
void mm_engine_flags_options(mm_engine_cmd cmd, struct option *opts, int *n);

static inline bool mm_engine_flags_owns(int c) { return c >= MM_EF_FIRST && c < MM_EF_END; }

/* Applies one engine flag to o: c from getopt, spelled the name it matched
 * (its struct option name, so messages say what was typed; NULL: the first
 * spelling), value its argument or NULL. A bad value fails with one
 * sentence: "--flag VALUE: what is wrong; accepted: ...". */
int mm_engine_flags_apply(int c, const char *spelled, const char *value, mm_engine_options *o, mm_error *err);

/* After the flags: what the environment gives for flags not given
 * (MMH3_REF_SHORT_EDGE, MMH3_REF_VIDEO_SHORT_EDGE), checked like the flags. */
int mm_engine_flags_finish(mm_engine_options *o, mm_error *err);

/* The flag's first spelling ("--models-path" for --checkpoints too; what
 * `mmh3 serve` passes on to its workers, which take every spelling). */
const char *mm_engine_flags_name(int c);
bool mm_engine_flags_has_value(int c);

/* An integer flag value in lo..hi, checked before it narrows to int (so
 * 4294967297 is refused instead of becoming 1); every command's numeric flags. */
bool mm_flag_int(const char *s, long long lo, long long hi, int *out);

/* The help lines of cmd's engine flags: each flag indented by `indent`
 * spaces, its help from column `column`. */
void mm_engine_flags_usage(FILE *f, mm_engine_cmd cmd, int indent, int column);

#endif
