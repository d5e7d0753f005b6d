#include "worker/sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

int mm_worker_sweep_dir(const char *dir, mm_sweep_stale stale, void *user)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (stale(user, e->d_name) && unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    closedir(d);
    return removed;
}
