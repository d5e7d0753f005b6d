#include "core/lru.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct lru_entry {
    struct lru_entry *prev, *next; /* most recently used first */
    struct lru_entry *chain;       /* the next entry of the same hash bucket */
    uint64_t hash;
    void *value;
    size_t bytes;
    char key[]; /* NUL-terminated copy */
} lru_entry;

struct mm_lru {
    lru_entry *head, *tail;
    lru_entry **buckets;
    size_t n_buckets; /* a power of two */
    size_t count, bytes, budget;
    mm_lru_release_fn release;
    void *user;
};

/* FNV-1a, 64-bit: short keys, no adversary (keys are digests and paths). */
static uint64_t hash_key(const char *key)
{
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}

int mm_lru_create(mm_lru **out, size_t budget, mm_lru_release_fn release, void *user, mm_error *err)
{
    *out = NULL;
    mm_lru *c = calloc(1, sizeof *c);
    if (!c)
        return mm_fail(err, "LRU cache: out of memory");
    c->n_buckets = 16;
    c->buckets = calloc(c->n_buckets, sizeof *c->buckets);
    if (!c->buckets) {
        free(c);
        return mm_fail(err, "LRU cache: out of memory");
    }
    c->budget = budget;
    c->release = release;
    c->user = user;
    *out = c;
    return 0;
}

static lru_entry **slot_of(const mm_lru *c, uint64_t hash, const char *key)
{
    lru_entry **s = &c->buckets[hash & (c->n_buckets - 1)];
    while (*s && ((*s)->hash != hash || strcmp((*s)->key, key) != 0))
        s = &(*s)->chain;
    return s;
}

static void list_unlink(mm_lru *c, lru_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_push_front(mm_lru *c, lru_entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

/* Takes e out of the table and the list, hands its value to the owner. */
static void drop(mm_lru *c, lru_entry *e, mm_lru_reason why)
{
    lru_entry **s = slot_of(c, e->hash, e->key);
    *s = e->chain;
    list_unlink(c, e);
    c->count--;
    c->bytes -= e->bytes;
    if (c->release)
        c->release(c->user, e->key, e->value, e->bytes, why);
    free(e);
}

static void evict_to(mm_lru *c, size_t budget)
{
    while (c->tail && c->bytes > budget)
        drop(c, c->tail, MM_LRU_EVICTED);
}

/* Doubles the table when it holds more entries than buckets; a failed
 * allocation keeps the old table (longer chains, still correct). */
static void maybe_grow(mm_lru *c)
{
    if (c->count <= c->n_buckets)
        return;
    size_t n = c->n_buckets * 2;
    lru_entry **b = calloc(n, sizeof *b);
    if (!b)
        return;
    for (lru_entry *e = c->head; e; e = e->next) {
        lru_entry **s = &b[e->hash & (n - 1)];
        e->chain = *s;
        *s = e;
    }
    free(c->buckets);
    c->buckets = b;
    c->n_buckets = n;
}

void *mm_lru_peek(const mm_lru *c, const char *key)
{
    lru_entry *e = *slot_of(c, hash_key(key), key);
    return e ? e->value : NULL;
}

void *mm_lru_get(mm_lru *c, const char *key)
{
    lru_entry *e = *slot_of(c, hash_key(key), key);
    if (!e)
        return NULL;
    list_unlink(c, e);
    list_push_front(c, e);
    return e->value;
}

int mm_lru_put(mm_lru *c, const char *key, void *value, size_t bytes, mm_error *err)
{
    size_t klen = strlen(key);
    lru_entry *e = malloc(sizeof *e + klen + 1);
    if (!e) {
        if (c->release)
            c->release(c->user, key, value, bytes, MM_LRU_REFUSED);
        return mm_fail(err, "LRU cache: out of memory for an entry");
    }
    uint64_t hash = hash_key(key);
    lru_entry *old = *slot_of(c, hash, key);
    if (old)
        drop(c, old, MM_LRU_REPLACED);
    if (bytes > c->budget) {
        free(e);
        if (c->release)
            c->release(c->user, key, value, bytes, MM_LRU_REFUSED);
        return 0;
    }
    evict_to(c, c->budget - bytes);
    memcpy(e->key, key, klen + 1);
    e->hash = hash;
    e->value = value;
    e->bytes = bytes;
    lru_entry **s = &c->buckets[hash & (c->n_buckets - 1)];
    e->chain = *s;
    *s = e;
    list_push_front(c, e);
    c->count++;
    c->bytes += bytes;
    maybe_grow(c);
    return 1;
}

bool mm_lru_remove(mm_lru *c, const char *key)
{
    lru_entry *e = *slot_of(c, hash_key(key), key);
    if (!e)
        return false;
    drop(c, e, MM_LRU_REMOVED);
    return true;
}

void mm_lru_clear(mm_lru *c)
{
    while (c->head)
        drop(c, c->head, MM_LRU_CLEARED);
}

void mm_lru_set_budget(mm_lru *c, size_t budget)
{
    c->budget = budget;
    evict_to(c, budget);
}

void mm_lru_destroy(mm_lru *c)
{
    if (!c)
        return;
    mm_lru_clear(c);
    free(c->buckets);
    free(c);
}

size_t mm_lru_bytes(const mm_lru *c) { return c->bytes; }
size_t mm_lru_count(const mm_lru *c) { return c->count; }
size_t mm_lru_budget(const mm_lru *c) { return c->budget; }

void mm_lru_each(const mm_lru *c, bool (*fn)(void *user, const char *key, void *value, size_t bytes), void *user)
{
    for (const lru_entry *e = c->head; e; e = e->next)
        if (!fn(user, e->key, e->value, e->bytes))
            return;
}
