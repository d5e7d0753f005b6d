/* Child processes of `mmh3 serve`: started with an optional user switch
 * (PostgreSQL refuses to run as root) and output file, stopped with a
 * signal and a deadline. */
#ifndef MMH3_SERVE_PROC_H
#define MMH3_SERVE_PROC_H

#include <stdbool.h>
#include <sys/types.h>

#include "core/error.h"

typedef struct mm_proc_spec {
    const char *name;        /* for the log: "postgres", "worker", ... */
    char *const *argv;       /* argv[0] is the program path */
    const char *log_path;    /* stdout+stderr go here (appended), or NULL to inherit */
    uid_t uid;               /* run as this user when as_user is set */
    gid_t gid;
    bool as_user;
    int death_signal;        /* sent to the child when serve dies (PR_SET_PDEATHSIG); 0 = SIGTERM */
} mm_proc_spec;

int mm_proc_start(const mm_proc_spec *spec, pid_t *pid, mm_error *err);
/* Runs to completion; fails with the exit status in the message. */
int mm_proc_run(const mm_proc_spec *spec, mm_error *err);
/* Sends sig, waits up to `seconds`, then SIGKILLs. Returns the wait status. */
int mm_proc_stop(pid_t pid, int sig, double seconds);
/* "exited with status 1", "killed by signal 9". */
void mm_proc_describe(int status, char *buf, size_t n);

/* Makes sure user uid/gid can reach `path` (search permission on every
 * ancestor), adding o+x to ancestors that block it; each change is logged. */
int mm_path_make_reachable(const char *path, uid_t uid, gid_t gid, mm_error *err);

#endif
