#include "model/text/prompt_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/lru.h"

/* ------------------------------------------------------------------ keys */

void mm_prompt_key_begin(mm_prompt_key_builder *b)
{
    mm_sha256_init(&b->sha);
    static const char domain[] = "mmh3 prompt conditioning v1";
    mm_sha256_update(&b->sha, domain, sizeof domain);
}

void mm_prompt_key_add(mm_prompt_key_builder *b, mm_prompt_field field, const void *data, size_t n)
{
    uint8_t head[9];
    uint64_t len = n;
    head[0] = (uint8_t)field;
    for (int i = 0; i < 8; i++)
        head[1 + i] = (uint8_t)(len >> (8 * i));
    mm_sha256_update(&b->sha, head, sizeof head);
    if (n)
        mm_sha256_update(&b->sha, data, n);
}

void mm_prompt_key_add_i64(mm_prompt_key_builder *b, mm_prompt_field field, const int64_t *v, size_t count)
{
    /* Little-endian bytes whatever the host. */
    uint8_t buf[8 * 16];
    size_t n = 0;
    uint8_t head[9];
    uint64_t len = 8 * count;
    head[0] = (uint8_t)field;
    for (int i = 0; i < 8; i++)
        head[1 + i] = (uint8_t)(len >> (8 * i));
    mm_sha256_update(&b->sha, head, sizeof head);
    for (size_t i = 0; i < count; i++) {
        for (int j = 0; j < 8; j++)
            buf[n++] = (uint8_t)((uint64_t)v[i] >> (8 * j));
        if (n == sizeof buf) {
            mm_sha256_update(&b->sha, buf, n);
            n = 0;
        }
    }
    mm_sha256_update(&b->sha, buf, n);
}

void mm_prompt_key_end(mm_prompt_key_builder *b, mm_prompt_key *out) { mm_sha256_final(&b->sha, out->digest); }

void mm_prompt_key_hex(const mm_prompt_key *k, char hex[65]) { mm_sha256_hex(k->digest, hex); }

/* ----------------------------------------------------------------- cache */

typedef struct entry {
    mm_prompt_key key;
    mm_dtype dtype;
    int64_t rows, cols;
    uint8_t *tags;
    void *data;
    size_t bytes; /* tags + data */
} entry;

struct mm_prompt_cache {
    pthread_mutex_t lock;
    char *dir;
    size_t disk_budget;
    mm_lru *memory; /* entries keyed by the digest in hex */
    mm_prompt_cache_stats stats; /* memory_bytes/entries read from the LRU */
};

static void entry_free(entry *e)
{
    if (!e)
        return;
    free(e->tags);
    free(e->data);
    free(e);
}

/* The memory level's release callback: every entry leaves through here. */
static void release_entry(void *user, const char *key, void *value, size_t bytes, mm_lru_reason why)
{
    (void)key, (void)bytes;
    mm_prompt_cache *c = user;
    if (why == MM_LRU_EVICTED)
        c->stats.evictions++;
    entry_free(value);
}

static int mkdir_p(const char *path, mm_error *err)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return mm_fail(err, "prompt cache: directory path \"%s\" is empty or too long", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return mm_fail_errno(err, "prompt cache: creating %s", buf);
        buf[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return mm_fail(err, "prompt cache: %s is not a directory", path);
    return 0;
}

int mm_prompt_cache_create(mm_prompt_cache **out, const char *dir, size_t memory_budget, size_t disk_budget,
                           mm_error *err)
{
    *out = NULL;
    mm_prompt_cache *c = calloc(1, sizeof *c);
    if (!c)
        return mm_fail(err, "prompt cache: out of memory");
    if (dir && disk_budget) {
        if (mkdir_p(dir, err) < 0) {
            free(c);
            return -1;
        }
        c->dir = strdup(dir);
        if (!c->dir) {
            free(c);
            return mm_fail(err, "prompt cache: out of memory");
        }
    }
    if (mm_lru_create(&c->memory, memory_budget, release_entry, c, err) < 0) {
        free(c->dir);
        free(c);
        return -1;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->disk_budget = c->dir ? disk_budget : 0;
    *out = c;
    return 0;
}

void mm_prompt_cache_destroy(mm_prompt_cache *c)
{
    if (!c)
        return;
    mm_lru_destroy(c->memory);
    pthread_mutex_destroy(&c->lock);
    free(c->dir);
    free(c);
}

static int copy_out(const entry *e, mm_tensor *embeds, uint8_t **tags, mm_error *err)
{
    if (mm_tensor_alloc(embeds, mm_cpu(), e->dtype, 2, MM_SHAPE(e->rows, e->cols), err) < 0)
        return -1;
    *tags = malloc((size_t)e->rows);
    if (!*tags) {
        mm_tensor_free(embeds);
        return mm_fail(err, "prompt cache: out of memory");
    }
    memcpy(embeds->data, e->data, mm_tensor_nbytes(embeds));
    memcpy(*tags, e->tags, (size_t)e->rows);
    return 0;
}

/* Takes ownership of e (freed when it does not fit), replacing the entry of
 * the same key. */
static void insert_memory(mm_prompt_cache *c, entry *e)
{
    char hex[65];
    mm_prompt_key_hex(&e->key, hex);
    mm_lru_put(c->memory, hex, e, e->bytes, NULL);
}

/* ------------------------------------------------------------------ disk */

static const char MAGIC[8] = {'M', 'M', 'H', '3', 'P', 'C', 1, 0};
#define HEADER_BYTES (8 + 32 + 8 + 8 + 8)

static void path_of(const mm_prompt_cache *c, const mm_prompt_key *k, char *buf, size_t n)
{
    char hex[65];
    mm_prompt_key_hex(k, hex);
    snprintf(buf, n, "%s/%s.mmpc", c->dir, hex);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Reads and verifies a cache file; NULL when absent, damaged or foreign (a
 * damaged file is removed). */
static entry *disk_read(mm_prompt_cache *c, const mm_prompt_key *k)
{
    char path[4200];
    path_of(c, k, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    entry *e = NULL;
    uint8_t *buf = NULL;
    struct stat st;
    if (fstat(fileno(f), &st) < 0 || st.st_size < HEADER_BYTES + 32)
        goto bad;
    size_t size = (size_t)st.st_size;
    buf = malloc(size);
    if (!buf || fread(buf, 1, size, f) != size)
        goto bad;
    uint8_t digest[32];
    mm_sha256(buf, size - 32, digest);
    if (memcmp(buf, MAGIC, 8) || memcmp(buf + 8, k->digest, 32) || memcmp(buf + size - 32, digest, 32))
        goto bad;
    uint64_t dtype = get_u64(buf + 40), rows = get_u64(buf + 48), cols = get_u64(buf + 56);
    if (dtype >= MM_DTYPE_COUNT || rows == 0 || cols == 0 || rows > (1u << 30) || cols > (1u << 20))
        goto bad;
    size_t data_bytes = mm_dtype_nbytes((mm_dtype)dtype, (int64_t)(rows * cols));
    if (HEADER_BYTES + rows + data_bytes + 32 != size)
        goto bad;
    e = calloc(1, sizeof *e);
    if (!e)
        goto out;
    e->key = *k;
    e->dtype = (mm_dtype)dtype;
    e->rows = (int64_t)rows;
    e->cols = (int64_t)cols;
    e->tags = malloc(rows);
    e->data = malloc(data_bytes);
    if (!e->tags || !e->data) {
        entry_free(e);
        e = NULL;
        goto out;
    }
    memcpy(e->tags, buf + HEADER_BYTES, rows);
    memcpy(e->data, buf + HEADER_BYTES + rows, data_bytes);
    e->bytes = rows + data_bytes;
    /* Mark the file recently used for the disk LRU. */
    futimens(fileno(f), NULL);
    goto out;
bad:
    unlink(path);
out:
    free(buf);
    fclose(f);
    return e;
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

typedef struct disk_file {
    char name[80];
    off_t size;
    struct timespec mtime;
} disk_file;

static int older(const void *a, const void *b)
{
    const disk_file *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : x->mtime.tv_nsec > y->mtime.tv_nsec;
}

/* Removes least recently used files until the directory fits the budget. */
static void evict_disk(mm_prompt_cache *c)
{
    DIR *d = opendir(c->dir);
    if (!d)
        return;
    disk_file *files = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len != 64 + 5 || strcmp(de->d_name + 64, ".mmpc"))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, 0) < 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            disk_file *nf = realloc(files, cap * sizeof *files);
            if (!nf)
                break;
            files = nf;
        }
        memcpy(files[n].name, de->d_name, len + 1);
        files[n].size = st.st_size;
        files[n].mtime = st.st_mtim;
        total += (uint64_t)st.st_size;
        n++;
    }
    if (total > c->disk_budget && n) {
        qsort(files, n, sizeof *files, older);
        for (size_t i = 0; i < n && total > c->disk_budget; i++)
            if (unlinkat(dirfd(d), files[i].name, 0) == 0) {
                total -= (uint64_t)files[i].size;
                c->stats.evictions++;
            }
    }
    free(files);
    closedir(d);
}

static int disk_write(mm_prompt_cache *c, const entry *e, mm_error *err)
{
    char path[4200], tmp[4300];
    path_of(c, &e->key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return mm_fail_errno(err, "prompt cache: creating %s", tmp);
    uint8_t head[HEADER_BYTES];
    memcpy(head, MAGIC, 8);
    memcpy(head + 8, e->key.digest, 32);
    put_u64(head + 40, (uint64_t)e->dtype);
    put_u64(head + 48, (uint64_t)e->rows);
    put_u64(head + 56, (uint64_t)e->cols);
    size_t data_bytes = e->bytes - (size_t)e->rows;
    mm_sha256_ctx s;
    mm_sha256_init(&s);
    mm_sha256_update(&s, head, sizeof head);
    mm_sha256_update(&s, e->tags, (size_t)e->rows);
    mm_sha256_update(&s, e->data, data_bytes);
    uint8_t digest[32];
    mm_sha256_final(&s, digest);
    if (write_all(fd, head, sizeof head) < 0 || write_all(fd, e->tags, (size_t)e->rows) < 0 ||
        write_all(fd, e->data, data_bytes) < 0 || write_all(fd, digest, 32) < 0) {
        int saved = errno;
        close(fd);
        unlink(tmp);
        errno = saved;
        return mm_fail_errno(err, "prompt cache: writing %s", tmp);
    }
    if (close(fd) < 0) { /* the descriptor is gone either way: never closed twice */
        int saved = errno;
        unlink(tmp);
        errno = saved;
        return mm_fail_errno(err, "prompt cache: writing %s", tmp);
    }
    if (rename(tmp, path) < 0) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        return mm_fail_errno(err, "prompt cache: renaming %s", tmp);
    }
    evict_disk(c);
    return 0;
}

/* ------------------------------------------------------------------- api */

int mm_prompt_cache_get(mm_prompt_cache *c, const mm_prompt_key *key, mm_tensor *embeds, uint8_t **tags,
                        mm_error *err)
{
    char hex[65];
    mm_prompt_key_hex(key, hex);
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    entry *e = mm_lru_get(c->memory, hex);
    if (e) {
        rc = copy_out(e, embeds, tags, err) < 0 ? -1 : 1;
        if (rc == 1)
            c->stats.memory_hits++;
    } else if (c->dir && (e = disk_read(c, key))) {
        rc = copy_out(e, embeds, tags, err) < 0 ? -1 : 1;
        if (rc == 1)
            c->stats.disk_hits++;
        insert_memory(c, e);
    } else {
        c->stats.misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mm_prompt_cache_put(mm_prompt_cache *c, const mm_prompt_key *key, const mm_tensor *embeds, const uint8_t *tags,
                        mm_error *err)
{
    if (embeds->ndim != 2 || !mm_tensor_is_contiguous(embeds) || embeds->device.kind != MM_DEVICE_CPU ||
        embeds->shape[0] <= 0 || embeds->shape[1] <= 0)
        return mm_fail(err, "prompt cache: a contiguous 2-D CPU tensor is expected");
    entry *e = calloc(1, sizeof *e);
    size_t data_bytes = mm_tensor_nbytes(embeds);
    if (e) {
        e->tags = malloc((size_t)embeds->shape[0]);
        e->data = malloc(data_bytes);
    }
    if (!e || !e->tags || !e->data) {
        entry_free(e);
        return mm_fail(err, "prompt cache: out of memory");
    }
    e->key = *key;
    e->dtype = embeds->dtype;
    e->rows = embeds->shape[0];
    e->cols = embeds->shape[1];
    e->bytes = (size_t)e->rows + data_bytes;
    memcpy(e->tags, tags, (size_t)e->rows);
    memcpy(e->data, embeds->data, data_bytes);
    pthread_mutex_lock(&c->lock);
    c->stats.puts++;
    int rc = c->dir ? disk_write(c, e, err) : 0;
    insert_memory(c, e);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void mm_prompt_cache_stats_get(mm_prompt_cache *c, mm_prompt_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    out->memory_bytes = mm_lru_bytes(c->memory);
    out->memory_entries = mm_lru_count(c->memory);
    pthread_mutex_unlock(&c->lock);
}
