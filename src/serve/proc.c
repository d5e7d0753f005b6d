#include "serve/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

int mm_proc_start(const mm_proc_spec *spec, pid_t *pid, mm_error *err)
{
    int fd = -1;
    if (spec->log_path) {
        fd = open(spec->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            return mm_fail_errno(err, "%s: opening its log %s", spec->name, spec->log_path);
        if (spec->as_user && fchown(fd, spec->uid, spec->gid) < 0) {
            /* Not fatal: the child writes through the inherited descriptor. */
        }
    }
    pid_t p = fork();
    if (p < 0) {
        if (fd >= 0)
            close(fd);
        return mm_fail_errno(err, "%s: fork", spec->name);
    }
    if (p == 0) {
        /* Own process group, so a Ctrl-C in the terminal reaches only serve,
         * which then stops the children in order. */
        setpgid(0, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        if (spec->as_user) {
            struct passwd *pw = getpwuid(spec->uid);
            if (setgid(spec->gid) < 0 || (pw ? initgroups(pw->pw_name, spec->gid) : setgroups(0, NULL)) < 0 ||
                setuid(spec->uid) < 0) {
                fprintf(stderr, "%s: cannot switch to uid %d: %s\n", spec->name, (int)spec->uid, strerror(errno));
                _exit(126);
            }
            if (pw) {
                setenv("HOME", pw->pw_dir, 1);
                setenv("USER", pw->pw_name, 1);
                setenv("LOGNAME", pw->pw_name, 1);
            }
        }
        /* If serve dies (even by SIGKILL) its children follow, so no
         * orphaned postgres or nginx holds the outputs folder. Set after the
         * user switch, which clears it. */
        prctl(PR_SET_PDEATHSIG, spec->death_signal ? spec->death_signal : SIGTERM);
        if (getppid() == 1)
            _exit(1); /* serve is already gone */
        execv(spec->argv[0], spec->argv);
        fprintf(stderr, "%s: cannot run %s: %s\n", spec->name, spec->argv[0], strerror(errno));
        _exit(127);
    }
    if (fd >= 0)
        close(fd);
    *pid = p;
    return 0;
}

void mm_proc_describe(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "ended (wait status %d)", status);
}

int mm_proc_run(const mm_proc_spec *spec, mm_error *err)
{
    pid_t p;
    if (mm_proc_start(spec, &p, err) < 0)
        return -1;
    int status;
    while (waitpid(p, &status, 0) < 0)
        if (errno != EINTR)
            return mm_fail_errno(err, "%s: waitpid", spec->name);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    char how[128];
    mm_proc_describe(status, how, sizeof how);
    return mm_fail(err, "%s %s%s%s", spec->name, how, spec->log_path ? "; see " : "",
                   spec->log_path ? spec->log_path : "");
}

int mm_proc_stop(pid_t pid, int sig, double seconds)
{
    int status = 0;
    if (pid <= 0)
        return 0;
    kill(pid, sig);
    struct timespec step = {0, 20 * 1000 * 1000};
    for (double waited = 0; waited < seconds; waited += 0.02) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return status;
        nanosleep(&step, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return status;
}

static bool can_search(const struct stat *st, uid_t uid, gid_t gid)
{
    if (uid == 0)
        return true;
    if (st->st_uid == uid)
        return st->st_mode & S_IXUSR;
    if (st->st_gid == gid)
        return st->st_mode & S_IXGRP;
    return st->st_mode & S_IXOTH;
}

int mm_path_make_reachable(const char *path, uid_t uid, gid_t gid, mm_error *err)
{
    char buf[PATH_MAX];
    if (!realpath(path, buf))
        return mm_fail_errno(err, "resolving %s", path);
    size_t len = strlen(buf);
    /* Every ancestor, "/" first, excluding the path itself. */
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char save = buf[i];
        if (i == len)
            break;
        buf[i] = '\0';
        const char *dir = buf[0] ? buf : "/";
        struct stat st;
        if (stat(i == 0 ? "/" : dir, &st) == 0 && !can_search(&st, uid, gid)) {
            if (chmod(dir, (st.st_mode & 07777) | S_IXOTH) < 0) {
                buf[i] = save;
                return mm_fail_errno(err, "%s must be reachable by uid %d; adding o+x", dir, (int)uid);
            }
            mm_log("made %s traversable (o+x) so the service user (uid %d) can reach %s", dir, (int)uid, path);
        }
        buf[i] = save;
    }
    return 0;
}
