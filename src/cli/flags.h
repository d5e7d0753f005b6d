/* The command-line flags of every mmh3 command, parsed from one table.
 *
 * A command lists its flags as rows {name, alias, kind, target, help, ...};
 * mm_flags_parse walks argv against them and mm_flags_help prints --help
 * from the same rows, so a flag exists, is checked and is documented in one
 * place. The engine flags shared by generate, worker and serve are one such
 * table (engine_flags.h), included into each command's with MM_FLAG_GROUP.
 *
 * What argv may say (getopt_long's conventions, which the commands had):
 *   --flag value   --flag=value   -f value   -fvalue   -vq (short switches
 *   bundled)   an unambiguous prefix of a long name (--outp for --outputs)
 *   --  (the rest is positional). A value is the next word even when it
 *   starts with '-' (--seed -1 is a bad seed, not a missing one).
 *
 * Every refusal is one line on stderr in one format, what was wrong and
 * what is accepted, and the command exits 2:
 *   mmh3 serve: --threads 0: out of range; accepted: an integer 1..1024
 *   mmh3 serve: --threads needs a value; accepted: an integer 1..1024
 *   mmh3 serve: --mock=1: takes no value; accepted: --mock alone
 *   mmh3 serve: unknown option '--bogus'; accepted: the flags of mmh3 serve --help
 *   mmh3 serve: ambiguous option '--r'; accepted: one of --rate-enqueue, --rate-upload
 *   mmh3 serve: unexpected argument 'x'; accepted: flags only
 *   mmh3 generate: --prompt b: given twice; accepted: --prompt once
 */
#ifndef MMH3_CLI_FLAGS_H
#define MMH3_CLI_FLAGS_H

#include <stdbool.h>
#include <stdio.h>

#include "core/error.h"

typedef enum mm_flag_kind {
    MM_FLAG_SECTION, /* not a flag: a heading line in --help (help = the heading) */
    MM_FLAG_GROUP,   /* not a flag: the rows of another table (rows, n_rows), parsed and listed here */
    MM_FLAG_HELP,    /* prints --help; the command then exits 0 */
    MM_FLAG_TRUE,    /* bool *target = true */
    MM_FLAG_FALSE,   /* bool *target = false */
    MM_FLAG_SET_INT, /* int *target = set_int */
    MM_FLAG_SET_STR, /* const char **target = set_str */
    MM_FLAG_STRING,  /* const char **target = the value (a pointer into argv) */
    MM_FLAG_INT,     /* int *target = an integer in min..max (checked before it narrows to int) */
    MM_FLAG_DOUBLE,  /* double *target = a number in min..max (above min, not at it, when above_min) */
    MM_FLAG_CHOICE,  /* const char **target = the value, one of the words of `choices` */
    MM_FLAG_CUSTOM,  /* apply(flag, value, why) checks and stores the value */
} mm_flag_kind;

typedef struct mm_flag mm_flag;

/* A custom flag's check-and-store: 0, or -1 with why->msg saying what is
 * wrong with the value ("not a device"); the message then adds "; accepted:
 * " and the row's `accepted`, unless why already says what is accepted. The
 * value is writable (the Oxen key is blanked in argv so ps does not show it). */
typedef int (*mm_flag_apply_fn)(const mm_flag *f, char *value, mm_error *why);

struct mm_flag {
    const char *name;  /* "--steps"; NULL for SECTION and GROUP rows */
    const char *alias; /* other spellings, space-separated ("-s", "--web-root", "--checkpoints --models"), or NULL */
    mm_flag_kind kind;
    void *target;      /* what the kind stores into (CUSTOM: whatever apply wants) */
    const char *help;  /* the --help text (SECTION: the heading); NULL: a flag not listed */
    const char *arg;   /* the value's name in --help ("N", "PATH"); a CUSTOM row without one is a switch */
    const char *accepted; /* what a value may be, for the messages; NULL: said by the kind (INT: "an integer 1..16") */
    double min, max;      /* INT, DOUBLE */
    bool above_min;       /* DOUBLE: min itself is refused */
    const char *choices;  /* CHOICE: the accepted words, space-separated */
    int set_int;          /* SET_INT */
    const char *set_str;  /* SET_STR */
    mm_flag_apply_fn apply; /* CUSTOM */
    bool once;            /* given twice is refused */
    const char *implicit; /* STRING: the value when the flag stands alone ("--sparse"); a value then comes only
                             as --flag=VALUE or as a next word that is not a flag ("--sparse sol") */
    int id;               /* the owner's tag (the engine flags' MM_EF_*); 0: none */
    const mm_flag *rows;  /* GROUP */
    int n_rows;
};

#define MM_FLAGS_COUNT(rows) ((int)(sizeof(rows) / sizeof((rows)[0])))

typedef struct mm_flags_cmd {
    const char *prog;     /* "mmh3 serve": every message starts with it */
    const char *synopsis; /* --help before the table: usage line and what the command does */
    const char *epilogue; /* --help after the table, or NULL */
    const char *positional_hint; /* added to the unexpected-argument message, e.g. "the prompt goes after -p" */
    const mm_flag *rows;
    int n_rows;
    int help_column; /* where --help's text starts (0: 28) */
    /* Called after each flag has been applied, in argv order (`spelled`: the
     * name it matched, `value`: NULL for a switch); -1 with why set refuses
     * it (a message in the common format, exit 2). NULL: none. */
    int (*seen)(void *user, const mm_flag *f, const char *spelled, const char *value, mm_error *why);
    void *user;
    FILE *out, *err; /* --help and messages; NULL: stdout and stderr */
} mm_flags_cmd;

typedef enum mm_flags_result {
    MM_FLAGS_RUN,  /* every flag applied: go on */
    MM_FLAGS_HELP, /* --help was printed: exit 0 */
    MM_FLAGS_BAD,  /* one line was printed: exit 2 */
} mm_flags_result;

mm_flags_result mm_flags_parse(const mm_flags_cmd *cmd, int argc, char **argv);

/* The exit status of a parse that does not go on (0 after --help, 2 after a refusal). */
static inline int mm_flags_exit_status(mm_flags_result r) { return r == MM_FLAGS_HELP ? 0 : 2; }

void mm_flags_help(const mm_flags_cmd *cmd, FILE *out);

/* The common message line for what a command checks after the parse:
 * "PROG: FLAG VALUE: problem; accepted: accepted" (value NULL: "PROG: FLAG:
 * problem..."; the accepted part left out when problem already has one or
 * accepted is NULL). Returns 2, the exit status, for `return mm_flags_refuse(...)`. */
int mm_flags_refuse(const mm_flags_cmd *cmd, const char *flag, const char *value, const char *problem,
                    const char *accepted);

/* An integer in lo..hi, checked before it narrows to int (so 4294967297 is
 * refused instead of becoming 1). */
bool mm_flag_int(const char *s, long long lo, long long hi, int *out);

#endif
