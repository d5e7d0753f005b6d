/* core/lru.h and core/clock.h: eviction by bytes in least-recently-used
 * order, the release callback (every value leaves through it exactly once,
 * with its reason), re-inserting a key, entries larger than the budget, a
 * smaller budget, many keys (the table grows); the monotonic clock moves
 * forward and sleeps about as long as asked. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/lru.h"
#include "test.h"

/* What the release callback saw. */
typedef struct released {
    char keys[64][32];
    int values[64];
    size_t bytes[64];
    mm_lru_reason why[64];
    int n;
} released;

static void record(void *user, const char *key, void *value, size_t bytes, mm_lru_reason why)
{
    released *r = user;
    if (r->n < 64) {
        snprintf(r->keys[r->n], sizeof r->keys[r->n], "%s", key);
        r->values[r->n] = (int)(intptr_t)value;
        r->bytes[r->n] = bytes;
        r->why[r->n] = why;
    }
    r->n++;
}

#define V(x) ((void *)(intptr_t)(x))

static void test_eviction_by_bytes_in_lru_order(void)
{
    released r = {0};
    mm_lru *c;
    mm_error err = {{0}};
    MM_REQUIRE(mm_lru_create(&c, 100, record, &r, &err) == 0, "%s", err.msg);
    MM_EXPECT(mm_lru_put(c, "a", V(1), 40, &err) == 1, "a");
    MM_EXPECT(mm_lru_put(c, "b", V(2), 30, &err) == 1, "b");
    MM_EXPECT(mm_lru_put(c, "c", V(3), 30, &err) == 1, "c");
    MM_EXPECT(mm_lru_bytes(c) == 100 && mm_lru_count(c) == 3 && r.n == 0, "full at exactly the budget: %zu bytes, %d released",
              mm_lru_bytes(c), r.n);
    /* a is used again, so b is now the least recently used */
    MM_EXPECT(mm_lru_get(c, "a") == V(1), "get a");
    MM_EXPECT(mm_lru_put(c, "d", V(4), 20, &err) == 1, "d");
    MM_EXPECT(r.n == 1 && strcmp(r.keys[0], "b") == 0 && r.values[0] == 2 && r.bytes[0] == 30 &&
                  r.why[0] == MM_LRU_EVICTED,
              "b evicted first: %d released, first %s", r.n, r.n ? r.keys[0] : "-");
    MM_EXPECT(mm_lru_peek(c, "b") == NULL && mm_lru_bytes(c) == 90, "b gone, 90 bytes: %zu", mm_lru_bytes(c));
    /* 50 more bytes push out c (30) and then a (40): order c, a; d stays */
    MM_EXPECT(mm_lru_put(c, "e", V(5), 50, &err) == 1, "e");
    MM_EXPECT(r.n == 3 && strcmp(r.keys[1], "c") == 0 && strcmp(r.keys[2], "a") == 0, "then c and a: %d, %s %s",
              r.n, r.keys[1], r.keys[2]);
    MM_EXPECT(mm_lru_bytes(c) == 70 && mm_lru_count(c) == 2 && mm_lru_get(c, "d") == V(4), "d and e left");
    mm_lru_destroy(c);
    MM_EXPECT(r.n == 5 && r.why[3] == MM_LRU_CLEARED && r.why[4] == MM_LRU_CLEARED, "destroy releases the rest: %d",
              r.n);
}

static void test_peek_does_not_promote(void)
{
    released r = {0};
    mm_lru *c;
    MM_REQUIRE(mm_lru_create(&c, 2, record, &r, NULL) == 0, "create");
    mm_lru_put(c, "x", V(1), 1, NULL);
    mm_lru_put(c, "y", V(2), 1, NULL);
    MM_EXPECT(mm_lru_peek(c, "x") == V(1), "peek x");
    mm_lru_put(c, "z", V(3), 1, NULL);
    MM_EXPECT(r.n == 1 && strcmp(r.keys[0], "x") == 0, "x was still the oldest: %s", r.n ? r.keys[0] : "-");
    mm_lru_destroy(c);
}

static void test_reinsert_replaces_and_releases_the_old_value(void)
{
    released r = {0};
    mm_lru *c;
    MM_REQUIRE(mm_lru_create(&c, 100, record, &r, NULL) == 0, "create");
    mm_lru_put(c, "k", V(1), 60, NULL);
    mm_lru_put(c, "other", V(2), 30, NULL);
    /* the same key with a bigger value: the old one is released as replaced,
     * not counted twice, and the total is the new size */
    MM_EXPECT(mm_lru_put(c, "k", V(3), 70, NULL) == 1, "re-insert");
    MM_EXPECT(r.n == 1 && r.values[0] == 1 && r.why[0] == MM_LRU_REPLACED, "old value released as replaced: %d %d",
              r.n, r.n ? (int)r.why[0] : -1);
    MM_EXPECT(mm_lru_get(c, "k") == V(3) && mm_lru_count(c) == 2 && mm_lru_bytes(c) == 100, "new value, %zu bytes",
              mm_lru_bytes(c));
    /* and it is now the most recent: a put evicts "other" first */
    mm_lru_put(c, "new", V(4), 10, NULL);
    MM_EXPECT(r.n == 2 && strcmp(r.keys[1], "other") == 0 && r.why[1] == MM_LRU_EVICTED, "other evicted: %s",
              r.n > 1 ? r.keys[1] : "-");
    MM_EXPECT(mm_lru_remove(c, "k") && !mm_lru_remove(c, "k"), "remove once");
    MM_EXPECT(r.n == 3 && r.why[2] == MM_LRU_REMOVED && r.values[2] == 3, "removed value released");
    mm_lru_clear(c);
    MM_EXPECT(r.n == 4 && r.why[3] == MM_LRU_CLEARED && mm_lru_count(c) == 0 && mm_lru_bytes(c) == 0, "cleared");
    mm_lru_destroy(c);
    MM_EXPECT(r.n == 4, "nothing released twice: %d", r.n);
}

static void test_too_large_is_refused_and_released(void)
{
    released r = {0};
    mm_lru *c;
    MM_REQUIRE(mm_lru_create(&c, 10, record, &r, NULL) == 0, "create");
    mm_lru_put(c, "small", V(1), 5, NULL);
    MM_EXPECT(mm_lru_put(c, "huge", V(2), 11, NULL) == 0, "refused");
    MM_EXPECT(r.n == 1 && r.values[0] == 2 && r.why[0] == MM_LRU_REFUSED, "the refused value is released at once");
    MM_EXPECT(mm_lru_get(c, "small") == V(1) && mm_lru_peek(c, "huge") == NULL && mm_lru_bytes(c) == 5,
              "the rest untouched");
    /* a budget of 0 keeps nothing but 0-byte entries */
    mm_lru_set_budget(c, 0);
    MM_EXPECT(r.n == 2 && r.why[1] == MM_LRU_EVICTED && mm_lru_count(c) == 0, "budget 0 evicts all");
    MM_EXPECT(mm_lru_put(c, "none", V(3), 0, NULL) == 1 && mm_lru_count(c) == 1, "a 0-byte entry fits");
    mm_lru_destroy(c);
}

static void test_smaller_budget_evicts_oldest_first(void)
{
    released r = {0};
    mm_lru *c;
    MM_REQUIRE(mm_lru_create(&c, 1000, record, &r, NULL) == 0, "create");
    char key[16];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "k%d", i);
        mm_lru_put(c, key, V(i), 100, NULL);
    }
    mm_lru_set_budget(c, 350);
    MM_EXPECT(mm_lru_count(c) == 3 && mm_lru_bytes(c) == 300 && mm_lru_budget(c) == 350, "3 left: %zu",
              mm_lru_count(c));
    bool order = r.n == 7;
    for (int i = 0; i < 7 && order; i++)
        order = r.values[i] == i && r.why[i] == MM_LRU_EVICTED;
    MM_EXPECT(order, "k0..k6 evicted in order (%d released)", r.n);
    mm_lru_destroy(c);
}

typedef struct walk {
    char order[256];
} walk;

static bool collect(void *user, const char *key, void *value, size_t bytes)
{
    (void)value, (void)bytes;
    walk *w = user;
    size_t n = strlen(w->order);
    snprintf(w->order + n, sizeof w->order - n, "%s ", key);
    return true;
}

static void test_many_keys_and_the_walk_order(void)
{
    released r = {0};
    mm_lru *c;
    MM_REQUIRE(mm_lru_create(&c, SIZE_MAX, record, &r, NULL) == 0, "create");
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "key-%d", i);
        MM_REQUIRE(mm_lru_put(c, key, V(i + 1), 1, NULL) == 1, "put %d", i);
    }
    bool all = mm_lru_count(c) == 5000;
    for (int i = 0; i < 5000 && all; i++) {
        snprintf(key, sizeof key, "key-%d", i);
        all = mm_lru_peek(c, key) == V(i + 1);
    }
    MM_EXPECT(all, "every key found after the table grew");
    MM_EXPECT(mm_lru_peek(c, "key-5000") == NULL && mm_lru_peek(c, "") == NULL, "absent keys");
    mm_lru_clear(c);
    MM_EXPECT(r.n == 5000, "5000 released: %d", r.n);
    mm_lru_put(c, "one", V(1), 1, NULL);
    mm_lru_put(c, "two", V(2), 1, NULL);
    mm_lru_put(c, "three", V(3), 1, NULL);
    mm_lru_get(c, "one");
    walk w = {""};
    mm_lru_each(c, collect, &w);
    MM_EXPECT(strcmp(w.order, "one three two ") == 0, "most recent first: %s", w.order);
    mm_lru_destroy(c);
}

static void test_clock_moves_forward_and_sleeps(void)
{
    double a = mm_clock_now();
    mm_clock_sleep(0.02);
    double b = mm_clock_now();
    /* at least the time asked (nanosleep never returns early without a
     * signal); no upper bound: a loaded machine may take longer */
    MM_EXPECT(b - a >= 0.0199, "slept %.4f s for 0.02", b - a);
    double c = mm_clock_now();
    MM_EXPECT(c >= b, "monotonic: %.9f then %.9f", b, c);
    mm_clock_sleep(-1);
    mm_clock_sleep(0);
    MM_EXPECT(mm_clock_now() - c < 5, "no sleep for <= 0");
}

int main(void)
{
    MM_RUN(test_eviction_by_bytes_in_lru_order);
    MM_RUN(test_peek_does_not_promote);
    MM_RUN(test_reinsert_replaces_and_releases_the_old_value);
    MM_RUN(test_too_large_is_refused_and_released);
    MM_RUN(test_smaller_budget_evicts_oldest_first);
    MM_RUN(test_many_keys_and_the_walk_order);
    MM_RUN(test_clock_moves_forward_and_sleeps);
    return mm_test_exit();
}
