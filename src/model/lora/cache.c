/* The adapters a worker keeps resident between jobs: loaded, uploaded
 * handles keyed by path, weighed by mm_lora_bytes, evicted least recently
 * used first. A job pins what it uses (get) until it is done (release), so a
 * job asking for more than the budget still gets all of its adapters; the
 * budget is restored at the next get. A file replaced on disk (other size,
 * mtime or inode) is reopened. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/lora/lora.h"

typedef struct entry {
    char path[1024];
    struct stat sb;
    mm_lora *lora;
    int pins;
    uint64_t used; /* tick of the last get */
} entry;

struct mm_lora_cache {
    size_t budget;
    entry *e;
    int n, cap;
    uint64_t tick;
};

int mm_lora_cache_create(mm_lora_cache **out, size_t budget_bytes, mm_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return mm_fail(err, "out of memory");
    (*out)->budget = budget_bytes;
    return 0;
}

static void drop(mm_lora_cache *c, int i)
{
    mm_lora_free(c->e[i].lora);
    c->e[i] = c->e[--c->n];
}

void mm_lora_cache_destroy(mm_lora_cache *c)
{
    if (!c)
        return;
    while (c->n)
        drop(c, c->n - 1);
    free(c->e);
    free(c);
}

size_t mm_lora_cache_bytes(const mm_lora_cache *c)
{
    size_t b = 0;
    for (int i = 0; i < c->n; i++)
        b += mm_lora_bytes(c->e[i].lora);
    return b;
}

int mm_lora_cache_count(const mm_lora_cache *c) { return c->n; }

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Frees unpinned entries, oldest first, until the total fits the budget. */
static void trim(mm_lora_cache *c)
{
    while (mm_lora_cache_bytes(c) > c->budget) {
        int victim = -1;
        for (int i = 0; i < c->n; i++)
            if (!c->e[i].pins && (victim < 0 || c->e[i].used < c->e[victim].used))
                victim = i;
        if (victim < 0)
            return;
        drop(c, victim);
    }
}

int mm_lora_cache_get(mm_lora_cache *c, const char *path, mm_ctx *ctx, mm_lora **out, mm_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return mm_fail_errno(err, "LoRA adapter %s", path);
    for (int i = 0; i < c->n; i++) {
        entry *e = &c->e[i];
        if (strcmp(e->path, path) != 0)
            continue;
        if (same_file(&e->sb, &sb) && mm_device_eq(e->lora->device, mm_ctx_device(ctx))) {
            e->pins++;
            e->used = ++c->tick;
            *out = e->lora;
            return 0;
        }
        if (e->pins)
            return mm_fail(err, "LoRA adapter %s changed on disk (or is resident on another device) while a job uses it", path);
        drop(c, i);
        break;
    }
    mm_lora *l;
    if (mm_lora_open(&l, path, NULL, err) != 0)
        return -1;
    if (mm_lora_upload(l, ctx, err) != 0) {
        mm_lora_free(l);
        return -1;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        entry *ne = realloc(c->e, sizeof *ne * (size_t)cap);
        if (!ne) {
            mm_lora_free(l);
            return mm_fail(err, "out of memory");
        }
        c->e = ne;
        c->cap = cap;
    }
    entry *e = &c->e[c->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->path, sizeof e->path, "%s", path);
    e->sb = sb;
    e->lora = l;
    e->pins = 1;
    e->used = ++c->tick;
    trim(c);
    *out = l;
    return 0;
}

void mm_lora_cache_release(mm_lora_cache *c, mm_lora *l)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].lora == l && c->e[i].pins > 0) {
            c->e[i].pins--;
            break;
        }
    trim(c);
}
