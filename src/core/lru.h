/* A least-recently-used cache bounded in bytes.
 *
 * Keys are strings (copied); values are opaque pointers the cache owns from
 * mm_lru_put on, each with a size in bytes as its owner counts it (the
 * buffers it keeps alive, not the pointer). When a put would take the total
 * past the budget, the least recently used entries go first. Every value
 * leaves through the release callback, with the reason, so its owner frees it
 * (or drops a reference: a value still in use elsewhere can be refcounted by
 * its owner and outlive its entry).
 *
 * Lookups are by hash table, order by a doubly linked list: O(1) get, put
 * and eviction. Not locked: the owner serializes calls (the caches built on
 * it keep a mutex around their own state anyway).
 *
 *   mm_lru *c;
 *   mm_lru_create(&c, 1 << 30, free_latents, NULL, &err);
 *   mm_lru_put(c, hex_key, latents, latents_bytes, &err);   // c owns latents now
 *   const latents_t *l = mm_lru_get(c, hex_key);           // borrowed, promoted
 */
#ifndef MMH3_CORE_LRU_H
#define MMH3_CORE_LRU_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

typedef struct mm_lru mm_lru;

typedef enum mm_lru_reason {
    MM_LRU_EVICTED,  /* pushed out by a put or a smaller budget */
    MM_LRU_REPLACED, /* a put under the same key */
    MM_LRU_REMOVED,  /* mm_lru_remove */
    MM_LRU_REFUSED,  /* larger than the whole budget (or no memory for the entry): never stored */
    MM_LRU_CLEARED,  /* mm_lru_clear / mm_lru_destroy */
} mm_lru_reason;

/* Called once for every value that leaves the cache; `key` is valid for the
 * call only. It must not call back into the same cache. */
typedef void (*mm_lru_release_fn)(void *user, const char *key, void *value, size_t bytes, mm_lru_reason why);

/* release may be NULL (values the cache does not own, e.g. borrowed
 * constants). */
int mm_lru_create(mm_lru **out, size_t budget, mm_lru_release_fn release, void *user, mm_error *err);
/* Releases every value (MM_LRU_CLEARED) and frees the cache; NULL is fine. */
void mm_lru_destroy(mm_lru *c);

/* The value under key, now the most recently used; NULL when absent. The
 * pointer is borrowed: valid until the next put, remove, clear, set_budget or
 * destroy on this cache. */
void *mm_lru_get(mm_lru *c, const char *key);
/* The same without changing the order. */
void *mm_lru_peek(const mm_lru *c, const char *key);

/* Stores value under key and takes it over in every case. The entry of the
 * same key, if any, is released first (MM_LRU_REPLACED). Returns 1 stored
 * (least recently used entries evicted until the total fits), 0 refused
 * because bytes alone exceed the budget (value released at once as
 * MM_LRU_REFUSED), -1 out of memory for the entry (value released as
 * MM_LRU_REFUSED, err set, nothing else changed). */
int mm_lru_put(mm_lru *c, const char *key, void *value, size_t bytes, mm_error *err);

/* Releases the entry under key (MM_LRU_REMOVED); false when absent. */
bool mm_lru_remove(mm_lru *c, const char *key);
/* Releases every entry (MM_LRU_CLEARED); the budget stays. */
void mm_lru_clear(mm_lru *c);
/* A new budget; entries are evicted, least recently used first, until the
 * total fits it. */
void mm_lru_set_budget(mm_lru *c, size_t budget);

size_t mm_lru_bytes(const mm_lru *c);  /* total size of the stored entries */
size_t mm_lru_count(const mm_lru *c);  /* number of stored entries */
size_t mm_lru_budget(const mm_lru *c);

/* Walks the entries from the most to the least recently used; stop by
 * returning false. fn must not change the cache. */
void mm_lru_each(const mm_lru *c, bool (*fn)(void *user, const char *key, void *value, size_t bytes), void *user);

#endif
