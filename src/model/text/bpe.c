#include "model/text/bpe.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Hand-written hash tables: the vocabulary (151k strings) and the merges
 * (151k id pairs) are looked up for every symbol pair of every piece, so they
 * are flat open-addressing arrays with no per-entry allocation. */

#define EMPTY_KEY UINT64_MAX

typedef struct merge_slot {
    uint64_t key; /* left id << 32 | right id; EMPTY_KEY when free */
    uint32_t rank;
    int32_t id;   /* the merged token */
} merge_slot;

/* Direct-mapped cache of short pieces: most prompt words repeat, and a hit
 * skips the merge loop entirely. */
#define CACHE_SLOTS 8192
#define CACHE_KEY_MAX 23
#define CACHE_IDS_MAX 8

typedef struct cache_slot {
    uint8_t klen; /* 0: empty */
    uint8_t nids;
    char key[CACHE_KEY_MAX];
    int32_t ids[CACHE_IDS_MAX];
} cache_slot;

struct mm_bpe {
    /* token strings, NUL-separated in one arena; str_off[id] == UINT32_MAX when
     * the id has no entry */
    char *arena;
    size_t arena_len, arena_cap;
    uint32_t *str_off, *str_len;
    int32_t id_cap, id_limit;
    size_t count;
    /* string -> id: slots hold id + 1 (0 = free) */
    uint32_t *vslots;
    size_t vmask;
    /* pair -> merge */
    merge_slot *mslots;
    size_t mmask, nmerges;
    size_t merge_lines; /* merges given, duplicates included: the next rank */
    bool ignore_merges;
    int32_t byte_id[256];          /* id of each single-byte token */
    uint16_t byte_char[256];       /* GPT-2 bytes_to_unicode */
    int16_t char_byte[324];        /* its inverse over U+0000..U+0143, -1 elsewhere */
    pthread_mutex_t cache_lock;
    cache_slot *cache;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    /* FNV-1a, then a final mix so the low bits used as the slot index depend
     * on every byte. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static uint64_t hash_pair(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

mm_bpe *mm_bpe_new(void)
{
    mm_bpe *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    /* bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other
     * 68 take U+0100.. in increasing byte order. */
    int k = 0;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
        b->byte_char[c] = (uint16_t)(printable ? c : 256 + k++);
    }
    for (int i = 0; i < 324; i++)
        b->char_byte[i] = -1;
    for (int c = 0; c < 256; c++)
        b->char_byte[b->byte_char[c]] = (int16_t)c;
    pthread_mutex_init(&b->cache_lock, NULL);
    return b;
}

void mm_bpe_free(mm_bpe *b)
{
    if (!b)
        return;
    free(b->arena);
    free(b->str_off);
    free(b->str_len);
    free(b->vslots);
    free(b->mslots);
    free(b->cache);
    pthread_mutex_destroy(&b->cache_lock);
    free(b);
}

static int vocab_grow(mm_bpe *b, mm_error *err)
{
    size_t cap = b->vslots ? (b->vmask + 1) * 2 : 1 << 16;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return mm_fail(err, "out of memory (vocabulary table)");
    for (size_t i = 0; b->vslots && i <= b->vmask; i++) {
        uint32_t v = b->vslots[i];
        if (!v)
            continue;
        int32_t id = (int32_t)v - 1;
        size_t j = hash_bytes(b->arena + b->str_off[id], b->str_len[id]) & (cap - 1);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = v;
    }
    free(b->vslots);
    b->vslots = slots;
    b->vmask = cap - 1;
    return 0;
}

int32_t mm_bpe_token_id(const mm_bpe *b, const char *tok, size_t len)
{
    if (!b->vslots)
        return -1;
    size_t j = hash_bytes(tok, len) & b->vmask;
    for (uint32_t v; (v = b->vslots[j]) != 0; j = (j + 1) & b->vmask) {
        int32_t id = (int32_t)v - 1;
        if (b->str_len[id] == len && memcmp(b->arena + b->str_off[id], tok, len) == 0)
            return id;
    }
    return -1;
}

int mm_bpe_add_token(mm_bpe *b, const char *tok, size_t len, int32_t id, mm_error *err)
{
    if (id < 0 || id >= MM_BPE_MAX_ID)
        return mm_fail(err, "vocabulary id %d for \"%.*s\" out of range (0..%d)", id, (int)(len > 64 ? 64 : len), tok,
                       MM_BPE_MAX_ID - 1);
    if (len == 0)
        return mm_fail(err, "vocabulary entry %d is the empty string", id);
    if (len > UINT32_MAX / 2)
        return mm_fail(err, "vocabulary entry %d is too long", id);
    if (id >= b->id_cap) {
        int32_t cap = b->id_cap ? b->id_cap : 1 << 16;
        while (cap <= id)
            cap *= 2;
        uint32_t *off = realloc(b->str_off, (size_t)cap * sizeof *off);
        if (off)
            b->str_off = off;
        uint32_t *ln = realloc(b->str_len, (size_t)cap * sizeof *ln);
        if (ln)
            b->str_len = ln;
        if (!off || !ln)
            return mm_fail(err, "out of memory (vocabulary)");
        for (int32_t i = b->id_cap; i < cap; i++)
            b->str_off[i] = UINT32_MAX;
        b->id_cap = cap;
    }
    if (b->str_off[id] != UINT32_MAX)
        return mm_fail(err, "vocabulary id %d given twice (\"%.*s\" and \"%.*s\")", id, (int)b->str_len[id],
                       b->arena + b->str_off[id], (int)(len > 64 ? 64 : len), tok);
    if (mm_bpe_token_id(b, tok, len) >= 0)
        return mm_fail(err, "vocabulary token \"%.*s\" given twice", (int)(len > 64 ? 64 : len), tok);
    if (b->arena_len + len + 1 > b->arena_cap) {
        size_t cap = b->arena_cap ? b->arena_cap : 1 << 20;
        while (cap < b->arena_len + len + 1)
            cap *= 2;
        if (cap > UINT32_MAX)
            return mm_fail(err, "vocabulary strings exceed 4 GiB");
        char *a = realloc(b->arena, cap);
        if (!a)
            return mm_fail(err, "out of memory (vocabulary)");
        b->arena = a;
        b->arena_cap = cap;
    }
    memcpy(b->arena + b->arena_len, tok, len);
    b->arena[b->arena_len + len] = '\0';
    b->str_off[id] = (uint32_t)b->arena_len;
    b->str_len[id] = (uint32_t)len;
    b->arena_len += len + 1;
    if ((b->count + 1) * 2 > (b->vslots ? b->vmask + 1 : 0) && vocab_grow(b, err))
        return -1;
    size_t j = hash_bytes(tok, len) & b->vmask;
    while (b->vslots[j])
        j = (j + 1) & b->vmask;
    b->vslots[j] = (uint32_t)id + 1;
    b->count++;
    if (id >= b->id_limit)
        b->id_limit = id + 1;
    return 0;
}

static const merge_slot *merge_find(const mm_bpe *b, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t j = hash_pair(key) & b->mmask;
    for (;; j = (j + 1) & b->mmask) {
        const merge_slot *s = &b->mslots[j];
        if (s->key == key)
            return s;
        if (s->key == EMPTY_KEY)
            return NULL;
    }
}

static int merges_grow(mm_bpe *b, mm_error *err)
{
    size_t cap = b->mslots ? (b->mmask + 1) * 2 : 1 << 16;
    merge_slot *slots = malloc(cap * sizeof *slots);
    if (!slots)
        return mm_fail(err, "out of memory (merge table)");
    for (size_t i = 0; i < cap; i++)
        slots[i].key = EMPTY_KEY;
    for (size_t i = 0; b->mslots && i <= b->mmask; i++) {
        if (b->mslots[i].key == EMPTY_KEY)
            continue;
        size_t j = hash_pair(b->mslots[i].key) & (cap - 1);
        while (slots[j].key != EMPTY_KEY)
            j = (j + 1) & (cap - 1);
        slots[j] = b->mslots[i];
    }
    free(b->mslots);
    b->mslots = slots;
    b->mmask = cap - 1;
    return 0;
}

int mm_bpe_add_merge(mm_bpe *b, const char *left, size_t llen, const char *right, size_t rlen, mm_error *err)
{
    int32_t l = mm_bpe_token_id(b, left, llen), r = mm_bpe_token_id(b, right, rlen);
    if (l < 0 || r < 0)
        return mm_fail(err, "merge %zu (\"%.*s\" \"%.*s\"): \"%.*s\" is not in the vocabulary", b->merge_lines + 1,
                       (int)llen, left, (int)rlen, right, l < 0 ? (int)llen : (int)rlen, l < 0 ? left : right);
    char stackbuf[256];
    char *joined = llen + rlen <= sizeof stackbuf ? stackbuf : malloc(llen + rlen);
    if (!joined)
        return mm_fail(err, "out of memory");
    memcpy(joined, left, llen);
    memcpy(joined + llen, right, rlen);
    int32_t m = mm_bpe_token_id(b, joined, llen + rlen);
    if (joined != stackbuf)
        free(joined);
    if (m < 0)
        return mm_fail(err, "merge %zu (\"%.*s\" \"%.*s\"): the merged token is not in the vocabulary", b->merge_lines + 1,
                       (int)llen, left, (int)rlen, right);
    if ((b->nmerges + 1) * 2 > (b->mslots ? b->mmask + 1 : 0) && merges_grow(b, err))
        return -1;
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    size_t j = hash_pair(key) & b->mmask;
    while (b->mslots[j].key != EMPTY_KEY && b->mslots[j].key != key)
        j = (j + 1) & b->mmask;
    uint32_t rank = (uint32_t)b->merge_lines++;
    if (b->mslots[j].key == key) {
        b->mslots[j].rank = rank; /* a repeated merge takes its last rank, as HF's map does */
        return 0;
    }
    b->mslots[j] = (merge_slot){key, rank, m};
    b->nmerges++;
    return 0;
}

int mm_bpe_finish(mm_bpe *b, bool ignore_merges, mm_error *err)
{
    if (!b->mslots && merges_grow(b, err)) /* a tokenizer without merges is legal */
        return -1;
    b->ignore_merges = ignore_merges;
    for (int c = 0; c < 256; c++) {
        char u[2];
        unsigned cp = b->byte_char[c];
        size_t n;
        if (cp < 0x80) {
            u[0] = (char)cp;
            n = 1;
        } else {
            u[0] = (char)(0xC0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        }
        b->byte_id[c] = mm_bpe_token_id(b, u, n);
        if (b->byte_id[c] < 0)
            return mm_fail(err, "the vocabulary lacks the byte-level token \"%.*s\" for byte 0x%02x "
                                "(only byte-level BPE vocabularies are supported)", (int)n, u, c);
    }
    b->cache = calloc(CACHE_SLOTS, sizeof *b->cache);
    if (!b->cache)
        return mm_fail(err, "out of memory (cache)");
    return 0;
}

size_t mm_bpe_vocab_count(const mm_bpe *b) { return b->count; }
int32_t mm_bpe_id_limit(const mm_bpe *b) { return b->id_limit; }
size_t mm_bpe_merge_count(const mm_bpe *b) { return b->nmerges; }

const char *mm_bpe_token(const mm_bpe *b, int32_t id, size_t *len)
{
    if (id < 0 || id >= b->id_limit || b->str_off[id] == UINT32_MAX)
        return NULL;
    if (len)
        *len = b->str_len[id];
    return b->arena + b->str_off[id];
}

static int buf_put(char **buf, size_t *len, size_t *cap, const char *s, size_t n, mm_error *err)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return mm_fail(err, "out of memory");
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

int mm_bpe_token_bytes(const mm_bpe *b, int32_t id, char **buf, size_t *len, size_t *cap, mm_error *err)
{
    size_t n;
    const char *s = mm_bpe_token(b, id, &n);
    if (!s)
        return mm_fail(err, "unknown token id %d", id);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (k > n - i)
            k = n - i;
        unsigned cp = c;
        if (k == 2)
            cp = (c & 0x1Fu) << 6 | ((unsigned char)s[i + 1] & 0x3Fu);
        char byte;
        if (k <= 2 && cp < 324 && b->char_byte[cp] >= 0) {
            byte = (char)b->char_byte[cp];
            if (buf_put(buf, len, cap, &byte, 1, err))
                return -1;
        } else if (buf_put(buf, len, cap, s + i, k, err)) { /* outside the alphabet: as written */
            return -1;
        }
        i += k;
    }
    return 0;
}

/* ---------------------------------------------------------------- merging */

typedef struct heap_entry {
    uint32_t rank;
    uint32_t pos; /* left symbol of the pair */
} heap_entry;

static bool heap_less(heap_entry a, heap_entry b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(heap_entry *h, size_t *n, heap_entry e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(e, h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_entry heap_pop(heap_entry *h, size_t *n)
{
    heap_entry top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && heap_less(h[c + 1], h[c]))
            c++;
        if (!heap_less(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* BPE over the symbols of one piece: repeatedly merge the adjacent pair with
 * the lowest rank (leftmost on ties) until no adjacent pair has a merge. The
 * symbols form a linked list and candidate pairs sit in a min-heap, so a piece
 * of n bytes costs O(n log n) however long it is (HF does the same); stale heap
 * entries are recognised on pop by re-looking up their pair. */
static int merge_piece(const mm_bpe *b, const unsigned char *s, size_t n, mm_token_ids *out, mm_error *err)
{
    enum { SMALL = 64 };
    int32_t id_s[SMALL], next_s[SMALL], prev_s[SMALL];
    heap_entry heap_s[3 * SMALL];
    int32_t *id = id_s, *next = next_s, *prev = prev_s;
    heap_entry *heap = heap_s;
    void *block = NULL;
    if (n > SMALL) {
        if (n > (SIZE_MAX / 2) / (3 * sizeof(int32_t) + 3 * sizeof(heap_entry)) || n > UINT32_MAX / 4)
            return mm_fail(err, "piece of %zu bytes is too long", n);
        block = malloc(n * (3 * sizeof(int32_t) + 3 * sizeof(heap_entry)));
        if (!block)
            return mm_fail(err, "out of memory (piece of %zu bytes)", n);
        heap = block;
        id = (int32_t *)(heap + 3 * n);
        next = id + n;
        prev = next + n;
    }
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = b->byte_id[s[i]];
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const merge_slot *m = merge_find(b, id[i], id[i + 1]);
        if (m)
            heap_push(heap, &hn, (heap_entry){m->rank, (uint32_t)i});
    }
    while (hn) {
        heap_entry e = heap_pop(heap, &hn);
        int32_t l = (int32_t)e.pos;
        if (id[l] < 0)
            continue; /* absorbed into its left neighbour */
        int32_t r = next[l];
        if (r < 0)
            continue;
        const merge_slot *m = merge_find(b, id[l], id[r]);
        if (!m || m->rank != e.rank)
            continue; /* a neighbour changed since this entry was pushed */
        id[l] = m->id;
        id[r] = -1;
        next[l] = next[r];
        if (next[r] >= 0)
            prev[next[r]] = l;
        if (prev[l] >= 0 && (m = merge_find(b, id[prev[l]], id[l])) != NULL)
            heap_push(heap, &hn, (heap_entry){m->rank, (uint32_t)prev[l]});
        if (next[l] >= 0 && (m = merge_find(b, id[l], id[next[l]])) != NULL)
            heap_push(heap, &hn, (heap_entry){m->rank, (uint32_t)l});
    }
    size_t count = 0;
    for (int32_t i = 0; i >= 0; i = next[i])
        count++;
    int rc = mm_token_ids_reserve(out, count, err);
    if (rc == 0)
        for (int32_t i = 0; i >= 0; i = next[i])
            out->v[out->n++] = id[i];
    free(block);
    return rc;
}

/* ignore_merges: a piece that is itself a vocabulary entry is emitted whole. */
static int32_t whole_piece_id(const mm_bpe *b, const unsigned char *s, size_t n)
{
    char stackbuf[128];
    char *u = 2 * n <= sizeof stackbuf ? stackbuf : malloc(2 * n);
    if (!u)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned cp = b->byte_char[s[i]];
        if (cp < 0x80) {
            u[k++] = (char)cp;
        } else {
            u[k++] = (char)(0xC0 | (cp >> 6));
            u[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    int32_t id = mm_bpe_token_id(b, u, k);
    if (u != stackbuf)
        free(u);
    return id;
}

int mm_bpe_encode_piece(mm_bpe *b, const char *piece, size_t len, mm_token_ids *out, mm_error *err)
{
    const unsigned char *s = (const unsigned char *)piece;
    if (len == 0)
        return 0;
    if (len == 1)
        return mm_token_ids_push(out, b->byte_id[s[0]], err);
    if (b->ignore_merges) {
        int32_t whole = whole_piece_id(b, s, len);
        if (whole >= 0)
            return mm_token_ids_push(out, whole, err);
    }
    cache_slot *slot = NULL;
    if (len <= CACHE_KEY_MAX) {
        slot = &b->cache[hash_bytes(piece, len) & (CACHE_SLOTS - 1)];
        pthread_mutex_lock(&b->cache_lock);
        if (slot->klen == len && memcmp(slot->key, piece, len) == 0) {
            int32_t ids[CACHE_IDS_MAX];
            size_t nids = slot->nids;
            memcpy(ids, slot->ids, nids * sizeof ids[0]);
            pthread_mutex_unlock(&b->cache_lock);
            if (mm_token_ids_reserve(out, nids, err))
                return -1;
            memcpy(out->v + out->n, ids, nids * sizeof ids[0]);
            out->n += nids;
            return 0;
        }
        pthread_mutex_unlock(&b->cache_lock);
    }
    size_t start = out->n;
    if (merge_piece(b, s, len, out, err))
        return -1;
    size_t nids = out->n - start;
    if (slot && nids <= CACHE_IDS_MAX) {
        pthread_mutex_lock(&b->cache_lock);
        slot->klen = (uint8_t)len;
        slot->nids = (uint8_t)nids;
        memcpy(slot->key, piece, len);
        memcpy(slot->ids, out->v + start, nids * sizeof out->v[0]);
        pthread_mutex_unlock(&b->cache_lock);
    }
    return 0;
}
