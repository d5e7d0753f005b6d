#include "parallel/nccl_lib.h"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static mm_nccl table;
static int load_rc = -1;
static mm_error load_err;

/* Tries one candidate; on success fills the table. */
static int try_open(const char *path, char *tried, size_t tried_len)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t u = strlen(tried);
        if (u + 4 < tried_len)
            snprintf(tried + u, tried_len - u, "%s%s", u ? ", " : "", path);
        return -1;
    }
    mm_nccl t;
    memset(&t, 0, sizeof t);
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"ncclGetVersion", (void **)&t.get_version},
        {"ncclGetUniqueId", (void **)&t.get_unique_id},
        {"ncclCommInitAll", (void **)&t.comm_init_all},
        {"ncclCommInitRank", (void **)&t.comm_init_rank},
        {"ncclCommDestroy", (void **)&t.comm_destroy},
        {"ncclCommAbort", (void **)&t.comm_abort},
        {"ncclCommGetAsyncError", (void **)&t.comm_get_async_error},
        {"ncclGetErrorString", (void **)&t.get_error_string},
        {"ncclGroupStart", (void **)&t.group_start},
        {"ncclGroupEnd", (void **)&t.group_end},
        {"ncclSend", (void **)&t.send},
        {"ncclRecv", (void **)&t.recv},
        {"ncclAllReduce", (void **)&t.all_reduce},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        /* POSIX sanctions this conversion of dlsym's result. */
        void *f = dlsym(h, syms[i].name);
        if (!f) {
            size_t u = strlen(tried);
            if (u + 4 < tried_len)
                snprintf(tried + u, tried_len - u, "%s%s (no %s: NCCL older than 2.7?)", u ? ", " : "", path,
                         syms[i].name);
            dlclose(h);
            return -1;
        }
        memcpy(syms[i].slot, &f, sizeof f);
    }
    if (t.get_version(&t.version) != MM_NCCL_SUCCESS)
        t.version = 0;
    snprintf(t.path, sizeof t.path, "%s", path);
    /* Resolve the real file for the report. */
    Dl_info info;
    void *sym;
    memcpy(&sym, &t.get_version, sizeof sym);
    if (dladdr(sym, &info) && info.dli_fname)
        snprintf(t.path, sizeof t.path, "%s", info.dli_fname);
    table = t;
    return 0; /* the handle stays open for the life of the process */
}

static int try_glob(const char *pattern, char *tried, size_t tried_len)
{
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0)
        return -1;
    int rc = -1;
    for (size_t i = 0; i < g.gl_pathc && rc != 0; i++)
        rc = try_open(g.gl_pathv[i], tried, tried_len);
    globfree(&g);
    return rc;
}

static void load(void)
{
    /* Before any communicator: NVLink multicast stays off (see the header). */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    char tried[2048] = "";
    const char *env = getenv("MMH3_NCCL_LIB");
    if (env && *env) {
        if (try_open(env, tried, sizeof tried) == 0) {
            load_rc = 0;
            return;
        }
        mm_fail(&load_err, "MMH3_NCCL_LIB=%s could not be loaded: %s", env, dlerror());
        return;
    }
    const char *names[] = {"libnccl.so.2", "libnccl.so"};
    for (size_t i = 0; i < 2; i++)
        if (try_open(names[i], tried, sizeof tried) == 0) {
            load_rc = 0;
            return;
        }
    char buf[1024];
    const char *cuda_home = getenv("CUDA_HOME");
    if (cuda_home && *cuda_home) {
        snprintf(buf, sizeof buf, "%s/lib64/libnccl.so.2", cuda_home);
        if (try_open(buf, tried, sizeof tried) == 0) {
            load_rc = 0;
            return;
        }
    }
    const char *fixed[] = {"/usr/local/cuda/lib64/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
                           "/usr/lib/aarch64-linux-gnu/libnccl.so.2", "/usr/lib64/libnccl.so.2"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (try_open(fixed[i], tried, sizeof tried) == 0) {
            load_rc = 0;
            return;
        }
    /* PyTorch's NCCL wheel (nvidia-nccl-cu1x). */
    const char *prefixes[] = {getenv("MMH3_NCCL_PYTHON_PREFIX"), getenv("VIRTUAL_ENV"), "/opt/torch/.venv", "/usr",
                              "/usr/local"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (!prefixes[i] || !*prefixes[i])
            continue;
        snprintf(buf, sizeof buf, "%s/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2", prefixes[i]);
        if (try_glob(buf, tried, sizeof tried) == 0) {
            load_rc = 0;
            return;
        }
        snprintf(buf, sizeof buf, "%s/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2", prefixes[i]);
        if (try_glob(buf, tried, sizeof tried) == 0) {
            load_rc = 0;
            return;
        }
    }
    mm_fail(&load_err,
            "NCCL is not available (tried %s); install it (libnccl2, or PyTorch's nvidia-nccl wheel) or point "
            "MMH3_NCCL_LIB at libnccl.so.2",
            tried[0] ? tried : "nothing");
}

int mm_nccl_load(const mm_nccl **out, mm_error *err)
{
    pthread_once(&load_once, load);
    if (load_rc != 0) {
        *out = NULL;
        if (err)
            *err = load_err;
        return -1;
    }
    *out = &table;
    return 0;
}

void mm_nccl_describe(char *buf, size_t n)
{
    const mm_nccl *nc;
    mm_error err = {{0}};
    if (mm_nccl_load(&nc, &err) != 0) {
        snprintf(buf, n, "%s", err.msg);
        return;
    }
    /* NCCL_VERSION(): X·1000+Y·100+Z up to 2.8, X·10000+Y·100+Z after. */
    const int v = nc->version;
    if (v < 10000)
        snprintf(buf, n, "NCCL %d.%d.%d (%s)", v / 1000, v / 100 % 10, v % 100, nc->path);
    else
        snprintf(buf, n, "NCCL %d.%d.%d (%s)", v / 10000, v / 100 % 100, v % 100, nc->path);
}

int mm_nccl_check(const mm_nccl *nc, int rc, mm_error *err, const char *what)
{
    if (rc == MM_NCCL_SUCCESS)
        return 0;
    return mm_fail(err, "%s: NCCL error %d (%s)", what, rc, nc->get_error_string ? nc->get_error_string(rc) : "?");
}
