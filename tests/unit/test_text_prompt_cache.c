/* The prompt-conditioning cache: keys, memory LRU, the on-disk level
 * (persistence across instances, damaged files, the byte budget). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "model/text/prompt_cache.h"
#include "test.h"

static char dir[256];

static mm_prompt_key key_of(const char *prompt)
{
    mm_prompt_key_builder b;
    mm_prompt_key k;
    mm_prompt_key_begin(&b);
    mm_prompt_key_add(&b, MM_PK_CHECKPOINT, "ckpt", 4);
    mm_prompt_key_add(&b, MM_PK_PROMPT, prompt, strlen(prompt));
    mm_prompt_key_end(&b, &k);
    return k;
}

/* rows × 8 bf16 values derived from seed, and matching tags. */
static void make_rows(mm_tensor *t, uint8_t *tags, int64_t rows, int seed)
{
    mm_tensor_alloc(t, mm_cpu(), MM_BF16, 2, MM_SHAPE(rows, 8), NULL);
    uint16_t *d = t->data;
    for (int64_t i = 0; i < rows * 8; i++)
        d[i] = mm_f32_to_bf16((float)(seed * 1000 + i) * 0.25f);
    for (int64_t i = 0; i < rows; i++)
        tags[i] = (uint8_t)((i + seed) & 1);
}

static int count_files(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strstr(de->d_name, ".mmpc") != NULL;
    if (d)
        closedir(d);
    return n;
}

static void test_keys(void)
{
    mm_prompt_key a = key_of("a cat"), b = key_of("a cat"), c = key_of("a cat ");
    MM_EXPECT(!memcmp(a.digest, b.digest, 32), "equal inputs, equal keys");
    MM_EXPECT(memcmp(a.digest, c.digest, 32), "a trailing space changes the key");
    /* Field boundaries are part of the key: ("ab", "c") != ("a", "bc"). */
    mm_prompt_key_builder x, y;
    mm_prompt_key kx, ky;
    mm_prompt_key_begin(&x);
    mm_prompt_key_add(&x, MM_PK_PROMPT, "ab", 2);
    mm_prompt_key_add(&x, MM_PK_PROMPT, "c", 1);
    mm_prompt_key_end(&x, &kx);
    mm_prompt_key_begin(&y);
    mm_prompt_key_add(&y, MM_PK_PROMPT, "a", 1);
    mm_prompt_key_add(&y, MM_PK_PROMPT, "bc", 2);
    mm_prompt_key_end(&y, &ky);
    MM_EXPECT(memcmp(kx.digest, ky.digest, 32), "field boundaries matter");
    int64_t g1[3] = {1, 48, 84}, g2[3] = {1, 84, 48};
    mm_prompt_key_begin(&x);
    mm_prompt_key_add_i64(&x, MM_PK_SHAPE, g1, 3);
    mm_prompt_key_end(&x, &kx);
    mm_prompt_key_begin(&y);
    mm_prompt_key_add_i64(&y, MM_PK_SHAPE, g2, 3);
    mm_prompt_key_end(&y, &ky);
    MM_EXPECT(memcmp(kx.digest, ky.digest, 32), "transposed shapes differ");
}

static void test_memory_lru(void)
{
    mm_prompt_cache *c;
    mm_error err = {{0}};
    /* Room for two entries of 4 rows (4 tags + 64 bytes = 68 bytes each). */
    int rc = mm_prompt_cache_create(&c, NULL, 150, 0, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    mm_tensor t[3];
    uint8_t tags[3][4];
    for (int i = 0; i < 3; i++)
        make_rows(&t[i], tags[i], 4, i + 1);
    mm_prompt_key k[3] = {key_of("one"), key_of("two"), key_of("three")};
    mm_prompt_cache_put(c, &k[0], &t[0], tags[0], &err);
    mm_prompt_cache_put(c, &k[1], &t[1], tags[1], &err);
    mm_tensor out;
    uint8_t *ot;
    /* Touch "one" so that "two" is the least recently used when "three" arrives. */
    rc = mm_prompt_cache_get(c, &k[0], &out, &ot, &err);
    MM_EXPECT(rc == 1 && !memcmp(out.data, t[0].data, 64) && !memcmp(ot, tags[0], 4), "hit returns the rows");
    if (rc == 1) {
        mm_tensor_free(&out);
        free(ot);
    }
    mm_prompt_cache_put(c, &k[2], &t[2], tags[2], &err);
    rc = mm_prompt_cache_get(c, &k[1], &out, &ot, &err);
    MM_EXPECT(rc == 0, "the least recently used entry was evicted (rc %d)", rc);
    rc = mm_prompt_cache_get(c, &k[0], &out, &ot, &err);
    MM_EXPECT(rc == 1 && out.shape[0] == 4 && out.shape[1] == 8 && out.dtype == MM_BF16, "one kept");
    if (rc == 1) {
        mm_tensor_free(&out);
        free(ot);
    }
    mm_prompt_cache_stats st;
    mm_prompt_cache_stats_get(c, &st);
    MM_EXPECT(st.memory_hits == 2 && st.misses == 1 && st.evictions == 1 && st.memory_entries == 2, "stats %llu %llu %llu",
              (unsigned long long)st.memory_hits, (unsigned long long)st.misses, (unsigned long long)st.evictions);
    for (int i = 0; i < 3; i++)
        mm_tensor_free(&t[i]);
    mm_prompt_cache_destroy(c);
}

static void test_disk_persistence_and_damage(void)
{
    mm_prompt_cache *c;
    mm_error err = {{0}};
    int rc = mm_prompt_cache_create(&c, dir, 1 << 20, 1 << 20, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    mm_tensor t;
    uint8_t tags[5];
    make_rows(&t, tags, 5, 7);
    mm_prompt_key k = key_of("persist me");
    rc = mm_prompt_cache_put(c, &k, &t, tags, &err);
    MM_EXPECT(rc == 0, "%s", err.msg);
    mm_prompt_cache_destroy(c);
    /* A new instance (a restarted worker) finds it on disk. */
    rc = mm_prompt_cache_create(&c, dir, 1 << 20, 1 << 20, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    mm_tensor out;
    uint8_t *ot;
    rc = mm_prompt_cache_get(c, &k, &out, &ot, &err);
    MM_EXPECT(rc == 1 && !memcmp(out.data, t.data, mm_tensor_nbytes(&t)) && !memcmp(ot, tags, 5), "disk hit");
    if (rc == 1) {
        mm_tensor_free(&out);
        free(ot);
    }
    mm_prompt_cache_stats st;
    mm_prompt_cache_stats_get(c, &st);
    MM_EXPECT(st.disk_hits == 1, "counted as a disk hit");
    mm_prompt_cache_destroy(c);
    /* Flip one byte of the stored rows: the file is refused and removed. */
    char hex[65], path[512];
    mm_prompt_key_hex(&k, hex);
    snprintf(path, sizeof path, "%s/%s.mmpc", dir, hex);
    FILE *f = fopen(path, "r+b");
    MM_REQUIRE(f != NULL, "cache file %s exists", path);
    fseek(f, 70, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 70, SEEK_SET);
    fputc(ch ^ 0x40, f);
    fclose(f);
    rc = mm_prompt_cache_create(&c, dir, 1 << 20, 1 << 20, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    rc = mm_prompt_cache_get(c, &k, &out, &ot, &err);
    MM_EXPECT(rc == 0, "a damaged file is a miss (rc %d)", rc);
    MM_EXPECT(access(path, F_OK) != 0, "and is removed");
    mm_prompt_cache_destroy(c);
    mm_tensor_free(&t);
}

static void test_disk_budget(void)
{
    mm_prompt_cache *c;
    mm_error err = {{0}};
    /* Each file: 64 header + 4 tags + 64 data + 32 digest = 164 bytes; budget for 3. */
    int rc = mm_prompt_cache_create(&c, dir, 0, 3 * 164 + 10, &err);
    MM_REQUIRE(rc == 0, "%s", err.msg);
    mm_tensor t;
    uint8_t tags[4];
    make_rows(&t, tags, 4, 3);
    int before = count_files();
    for (int i = 0; i < 5; i++) {
        char p[32];
        snprintf(p, sizeof p, "budget %d", i);
        mm_prompt_key k = key_of(p);
        rc = mm_prompt_cache_put(c, &k, &t, tags, &err);
        MM_EXPECT(rc == 0, "%s", err.msg);
        usleep(2000); /* distinct mtimes */
    }
    MM_EXPECT(count_files() <= 3, "disk level bounded: %d files (had %d)", count_files(), before);
    mm_prompt_key newest = key_of("budget 4"), oldest = key_of("budget 0");
    mm_tensor out;
    uint8_t *ot;
    rc = mm_prompt_cache_get(c, &newest, &out, &ot, &err);
    MM_EXPECT(rc == 1, "newest kept");
    if (rc == 1) {
        mm_tensor_free(&out);
        free(ot);
    }
    rc = mm_prompt_cache_get(c, &oldest, &out, &ot, &err);
    MM_EXPECT(rc == 0, "oldest evicted");
    mm_tensor_free(&t);
    mm_prompt_cache_destroy(c);
}

static void cleanup(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[600];
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/mmh3-prompt-cache-%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid());
    MM_RUN(test_keys);
    MM_RUN(test_memory_lru);
    cleanup();
    MM_RUN(test_disk_persistence_and_damage);
    cleanup();
    MM_RUN(test_disk_budget);
    cleanup();
    return mm_test_exit();
}
