#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct mm_safetensors {
    char *path;
    const uint8_t *base; /* whole file */
    uint64_t size;
    uint64_t header_len; /* JSON bytes */
    void *mapping;       /* non-NULL when we mapped it */
    size_t map_len;
    mm_st_entry *entries; /* sorted by name */
    size_t n;
    char **names; /* owned strings, parallel to nothing (freed as a set) */
    size_t n_names;
    char **meta_kv; /* key, value, key, value, ... */
    size_t n_meta;
};

/* ------------------------------------------------------------ validation */

static int cmp_entry_name(const void *a, const void *b)
{
    return strcmp(((const mm_st_entry *)a)->name, ((const mm_st_entry *)b)->name);
}

static int cmp_entry_begin(const void *a, const void *b)
{
    const mm_st_entry *x = *(const mm_st_entry *const *)a, *y = *(const mm_st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Tensor names can be anything; keep error lines readable and bounded. */
static const char *printable(const char *s, char *buf, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 5 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f)
            buf[j++] = (char)c;
        else
            j += (size_t)snprintf(buf + j, n - j, "\\x%02x", c);
    }
    buf[j] = '\0';
    return buf;
}

static int parse_entry(mm_safetensors *st, const char *key, json_t *val, uint64_t data_size, mm_st_entry *e,
                       mm_error *err)
{
    char nb[160];
    const char *nm = printable(key, nb, sizeof nb);
    if (!json_is_object(val))
        return mm_fail(err, "%s: tensor '%s': entry is not a JSON object", st->path, nm);
    json_t *jd = json_object_get(val, "dtype");
    json_t *js = json_object_get(val, "shape");
    json_t *jo = json_object_get(val, "data_offsets");
    if (!json_is_string(jd))
        return mm_fail(err, "%s: tensor '%s': \"dtype\" missing or not a string", st->path, nm);
    if (mm_dtype_from_name(json_string_value(jd), &e->dtype) != 0 || e->dtype == MM_F4_E2M1) {
        char db[64];
        return mm_fail(err,
                       "%s: tensor '%s': unknown dtype \"%s\" (accepted: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL "
                       "F8_E4M3 F8_E5M2)",
                       st->path, nm, printable(json_string_value(jd), db, sizeof db));
    }
    if (!json_is_array(js))
        return mm_fail(err, "%s: tensor '%s': \"shape\" missing or not an array", st->path, nm);
    size_t nd = json_array_size(js);
    if (nd > MM_MAX_DIMS)
        return mm_fail(err, "%s: tensor '%s': %zu dimensions, at most %d supported", st->path, nm, nd, MM_MAX_DIMS);
    e->ndim = (int)nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return mm_fail(err, "%s: tensor '%s': shape[%zu] is not a non-negative integer", st->path, nm, i);
        uint64_t v = (uint64_t)json_integer_value(d);
        e->shape[i] = (int64_t)v;
        if (v && numel > UINT64_MAX / 16 / v)
            overflow = 1;
        else
            numel *= v;
    }
    if (overflow || numel > (uint64_t)INT64_MAX / 8)
        return mm_fail(err, "%s: tensor '%s': element count overflows", st->path, nm);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return mm_fail(err, "%s: tensor '%s': \"data_offsets\" must be an array of two integers", st->path, nm);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), en = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || en < b)
        return mm_fail(err, "%s: tensor '%s': data_offsets [%lld, %lld] not 0 <= begin <= end", st->path, nm,
                       (long long)b, (long long)en);
    if ((uint64_t)en > data_size)
        return mm_fail(err,
                       "%s: tensor '%s': data_offsets end %lld beyond the data section (%" PRIu64
                       " bytes; file truncated?)",
                       st->path, nm, (long long)en, data_size);
    e->begin = (uint64_t)b;
    e->end = (uint64_t)en;
    uint64_t want = mm_dtype_nbytes(e->dtype, (int64_t)numel);
    if (e->end - e->begin != want) {
        char sb[128];
        return mm_fail(err, "%s: tensor '%s': %s %s needs %" PRIu64 " bytes, data_offsets span %" PRIu64, st->path,
                       nm, mm_dtype_name(e->dtype), mm_shape_str(e->ndim, e->shape, sb, sizeof sb), want,
                       e->end - e->begin);
    }
    e->data = st->base + 8 + st->header_len + e->begin;
    return 0;
}

static int parse_metadata(mm_safetensors *st, json_t *meta, mm_error *err)
{
    if (!json_is_object(meta))
        return mm_fail(err, "%s: \"__metadata__\" must be an object of strings", st->path);
    size_t n = json_object_size(meta);
    st->meta_kv = calloc(2 * n + 1, sizeof *st->meta_kv);
    if (!st->meta_kv)
        return mm_fail(err, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v)
    {
        if (!json_is_string(v)) {
            char kb[96];
            return mm_fail(err, "%s: __metadata__ value of '%s' is not a string", st->path,
                           printable(k, kb, sizeof kb));
        }
        st->meta_kv[2 * st->n_meta] = xstrdup(k);
        st->meta_kv[2 * st->n_meta + 1] = xstrdup(json_string_value(v));
        if (!st->meta_kv[2 * st->n_meta] || !st->meta_kv[2 * st->n_meta + 1])
            return mm_fail(err, "out of memory");
        st->n_meta++;
    }
    return 0;
}

static int check_overlaps(mm_safetensors *st, mm_error *err)
{
    if (st->n < 2)
        return 0;
    const mm_st_entry **by = malloc(st->n * sizeof *by);
    if (!by)
        return mm_fail(err, "out of memory");
    size_t m = 0;
    for (size_t i = 0; i < st->n; i++)
        if (st->entries[i].end > st->entries[i].begin)
            by[m++] = &st->entries[i];
    qsort(by, m, sizeof *by, cmp_entry_begin);
    int rc = 0;
    for (size_t i = 1; i < m; i++) {
        if (by[i]->begin < by[i - 1]->end) {
            char a[160], b[160];
            rc = mm_fail(err, "%s: tensor '%s' [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64 ", %" PRIu64
                              ")",
                         st->path, printable(by[i]->name, a, sizeof a), by[i]->begin, by[i]->end,
                         printable(by[i - 1]->name, b, sizeof b), by[i - 1]->begin, by[i - 1]->end);
            break;
        }
    }
    free(by);
    return rc;
}

static int check_duplicates(mm_safetensors *st, const char *what, mm_error *err)
{
    for (size_t i = 1; i < st->n; i++)
        if (strcmp(st->entries[i].name, st->entries[i - 1].name) == 0) {
            char a[160];
            return mm_fail(err, "%s: tensor name '%s' appears twice%s", st->path,
                           printable(st->entries[i].name, a, sizeof a), what);
        }
    return 0;
}

static int parse_header(mm_safetensors *st, mm_error *err)
{
    if (st->size < 8)
        return mm_fail(err, "%s: %" PRIu64 " bytes is too short for a safetensors file (needs an 8-byte header length)",
                       st->path, st->size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | st->base[i];
    if (hl > MM_ST_MAX_HEADER)
        return mm_fail(err, "%s: header length %" PRIu64 " is absurd (limit %llu); not a safetensors file?", st->path,
                       hl, MM_ST_MAX_HEADER);
    if (hl > st->size - 8)
        return mm_fail(err, "%s: header length %" PRIu64 " exceeds the file (%" PRIu64 " bytes; truncated?)", st->path,
                       hl, st->size);
    st->header_len = hl;
    uint64_t data_size = st->size - 8 - hl;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)st->base + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return mm_fail(err, "%s: header is not valid JSON: %s (at byte %d)", st->path, jerr.text, jerr.position);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = mm_fail(err, "%s: header is JSON but not an object", st->path);
        goto out;
    }
    size_t n = json_object_size(root);
    st->entries = calloc(n ? n : 1, sizeof *st->entries);
    st->names = calloc(n ? n : 1, sizeof *st->names);
    if (!st->entries || !st->names) {
        rc = mm_fail(err, "out of memory");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if ((rc = parse_metadata(st, val, err)) != 0)
                goto out;
            continue;
        }
        mm_st_entry *e = &st->entries[st->n];
        if ((rc = parse_entry(st, key, val, data_size, e, err)) != 0)
            goto out;
        st->names[st->n_names] = xstrdup(key);
        if (!st->names[st->n_names]) {
            rc = mm_fail(err, "out of memory");
            goto out;
        }
        e->name = st->names[st->n_names++];
        st->n++;
    }
    qsort(st->entries, st->n, sizeof *st->entries, cmp_entry_name);
    if ((rc = check_duplicates(st, "", err)) != 0)
        goto out;
    rc = check_overlaps(st, err);
out:
    json_decref(root);
    return rc;
}

static mm_safetensors *st_new(const char *label)
{
    mm_safetensors *st = calloc(1, sizeof *st);
    if (st && !(st->path = xstrdup(label))) {
        free(st);
        st = NULL;
    }
    return st;
}

int mm_st_open_memory(mm_safetensors **out, const char *label, const void *data, size_t size, mm_error *err)
{
    *out = NULL;
    mm_safetensors *st = st_new(label);
    if (!st)
        return mm_fail(err, "out of memory");
    st->base = data;
    st->size = size;
    if (parse_header(st, err) != 0) {
        mm_st_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

int mm_st_open(mm_safetensors **out, const char *path, mm_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mm_fail_errno(err, "%s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int rc = mm_fail_errno(err, "%s", path);
        close(fd);
        return rc;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mm_fail(err, "%s: not a regular file", path);
    }
    mm_safetensors *st = st_new(path);
    if (!st) {
        close(fd);
        return mm_fail(err, "out of memory");
    }
    st->size = (uint64_t)sb.st_size;
    if (st->size > 0) {
        void *m = mmap(NULL, (size_t)st->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            mm_fail_errno(err, "%s: mmap", path);
            close(fd);
            mm_st_close(st);
            return -1;
        }
        st->mapping = m;
        st->map_len = (size_t)st->size;
        st->base = m;
    } else {
        st->base = (const uint8_t *)"";
    }
    close(fd);
    if (parse_header(st, err) != 0) {
        mm_st_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

void mm_st_close(mm_safetensors *st)
{
    if (!st)
        return;
    if (st->mapping)
        munmap(st->mapping, st->map_len);
    for (size_t i = 0; i < st->n_names; i++)
        free(st->names[i]);
    free(st->names);
    for (size_t i = 0; i < 2 * st->n_meta; i++)
        free(st->meta_kv[i]);
    free(st->meta_kv);
    free(st->entries);
    free(st->path);
    free(st);
}

const char *mm_st_path(const mm_safetensors *st) { return st->path; }
uint64_t mm_st_file_size(const mm_safetensors *st) { return st->size; }
uint64_t mm_st_header_size(const mm_safetensors *st) { return 8 + st->header_len; }
const uint8_t *mm_st_header(const mm_safetensors *st) { return st->base; }
size_t mm_st_count(const mm_safetensors *st) { return st->n; }
const mm_st_entry *mm_st_at(const mm_safetensors *st, size_t i) { return i < st->n ? &st->entries[i] : NULL; }

const mm_st_entry *mm_st_find(const mm_safetensors *st, const char *name)
{
    mm_st_entry key = {.name = name};
    return bsearch(&key, st->entries, st->n, sizeof *st->entries, cmp_entry_name);
}

size_t mm_st_count_prefix(const mm_safetensors *st, const char *prefix)
{
    size_t n = 0, pl = strlen(prefix);
    for (size_t i = 0; i < st->n; i++)
        n += strncmp(st->entries[i].name, prefix, pl) == 0;
    return n;
}

int mm_st_strip_prefix(mm_safetensors *st, const char *prefix, size_t *stripped, mm_error *err)
{
    size_t pl = strlen(prefix), k = 0;
    if (stripped)
        *stripped = 0;
    if (pl == 0)
        return 0;
    for (size_t i = 0; i < st->n; i++)
        if (strncmp(st->entries[i].name, prefix, pl) == 0) {
            st->entries[i].name += pl;
            k++;
        }
    if (k == 0)
        return 0;
    qsort(st->entries, st->n, sizeof *st->entries, cmp_entry_name);
    if (stripped)
        *stripped = k;
    char what[200];
    snprintf(what, sizeof what, " after stripping the prefix '%s'", prefix);
    return check_duplicates(st, what, err);
}

int mm_st_get(const mm_safetensors *st, const char *name, mm_tensor *out, mm_error *err)
{
    const mm_st_entry *e = mm_st_find(st, name);
    if (!e)
        return mm_fail(err, "%s: tensor '%s' not found", st->path, name);
    size_t align = (size_t)(mm_dtype_bits(e->dtype) / 8);
    if (align > 1 && ((uintptr_t)e->data % align) != 0)
        return mm_fail(err,
                       "%s: tensor '%s' is not aligned to its %zu-byte elements in the file (rewrite the file with "
                       "a standard safetensors writer)",
                       st->path, name, align);
    *out = mm_tensor_wrap((void *)e->data, mm_cpu(), e->dtype, e->ndim, e->shape);
    return 0;
}

int mm_st_get_expect(const mm_safetensors *st, const char *name, mm_dtype dtype, int ndim, const int64_t *shape,
                     mm_tensor *out, mm_error *err)
{
    if (mm_st_get(st, name, out, err) != 0)
        return -1;
    if (out->dtype != dtype)
        return mm_fail(err, "%s: tensor '%s': dtype %s expected, file has %s", st->path, name, mm_dtype_name(dtype),
                       mm_dtype_name(out->dtype));
    if (ndim >= 0 && mm_tensor_expect_shape(out, ndim, shape, name, err) != 0)
        return mm_error_prefix(err, "%s", st->path);
    return 0;
}

const char *mm_st_metadata(const mm_safetensors *st, const char *key)
{
    for (size_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_kv[2 * i], key) == 0)
            return st->meta_kv[2 * i + 1];
    return NULL;
}

size_t mm_st_metadata_count(const mm_safetensors *st) { return st->n_meta; }

const char *mm_st_metadata_at(const mm_safetensors *st, size_t i, const char **value)
{
    if (i >= st->n_meta)
        return NULL;
    if (value)
        *value = st->meta_kv[2 * i + 1];
    return st->meta_kv[2 * i];
}

/* ------------------------------------------------------------------ writer */

struct mm_st_writer {
    char *path, *tmp;
    FILE *f;
    mm_st_entry *entries; /* declaration order, then sorted into file order */
    size_t n, cap;
    char **meta_kv;
    size_t n_meta;
    int started;
    size_t cur;         /* index of the tensor being written (n before the first) */
    uint64_t cur_bytes; /* bytes appended to it */
};

int mm_st_writer_open(mm_st_writer **out, const char *path, mm_error *err)
{
    *out = NULL;
    mm_st_writer *w = calloc(1, sizeof *w);
    if (!w)
        return mm_fail(err, "out of memory");
    size_t pl = strlen(path);
    w->path = xstrdup(path);
    w->tmp = malloc(pl + 5);
    if (!w->path || !w->tmp) {
        mm_st_writer_abort(w);
        return mm_fail(err, "out of memory");
    }
    memcpy(w->tmp, path, pl);
    memcpy(w->tmp + pl, ".tmp", 5);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        int rc = mm_fail_errno(err, "%s", w->tmp);
        mm_st_writer_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

int mm_st_writer_declare(mm_st_writer *w, const char *name, mm_dtype dtype, int ndim, const int64_t *shape,
                         mm_error *err)
{
    if (w->started)
        return mm_fail(err, "%s: tensor '%s' declared after writing began", w->path, name);
    if (ndim < 0 || ndim > MM_MAX_DIMS || (unsigned)dtype >= MM_DTYPE_COUNT || dtype == MM_F4_E2M1)
        return mm_fail(err, "%s: tensor '%s': invalid dtype or rank", w->path, name);
    if (strcmp(name, "__metadata__") == 0)
        return mm_fail(err, "%s: '__metadata__' is reserved", w->path);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->entries[i].name, name) == 0)
            return mm_fail(err, "%s: tensor '%s' declared twice", w->path, name);
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 64;
        mm_st_entry *ne = realloc(w->entries, nc * sizeof *ne);
        if (!ne)
            return mm_fail(err, "out of memory");
        w->entries = ne;
        w->cap = nc;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) /* checked before the name is copied: that copy is freed only once counted */
            return mm_fail(err, "%s: tensor '%s': negative dimension", w->path, name);
    mm_st_entry *e = &w->entries[w->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = xstrdup(name)))
        return mm_fail(err, "out of memory");
    e->dtype = dtype;
    e->ndim = ndim;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = shape[i];
        numel *= shape[i];
    }
    e->end = mm_dtype_nbytes(dtype, numel); /* size for now; offsets at start */
    w->n++;
    return 0;
}

int mm_st_writer_metadata(mm_st_writer *w, const char *key, const char *value, mm_error *err)
{
    if (w->started)
        return mm_fail(err, "%s: metadata after writing began", w->path);
    char **kv = realloc(w->meta_kv, (2 * w->n_meta + 2) * sizeof *kv);
    if (!kv)
        return mm_fail(err, "out of memory");
    w->meta_kv = kv;
    kv[2 * w->n_meta] = xstrdup(key);
    kv[2 * w->n_meta + 1] = xstrdup(value);
    w->n_meta++;
    if (!kv[2 * w->n_meta - 2] || !kv[2 * w->n_meta - 1])
        return mm_fail(err, "out of memory");
    return 0;
}

static int cmp_file_order(const void *a, const void *b)
{
    const mm_st_entry *x = a, *y = b;
    int ax = mm_dtype_bits(x->dtype), ay = mm_dtype_bits(y->dtype);
    if (ax != ay)
        return ay - ax;
    return strcmp(x->name, y->name);
}

static int write_header(mm_st_writer *w, mm_error *err)
{
    qsort(w->entries, w->n, sizeof *w->entries, cmp_file_order);
    json_t *root = json_object();
    if (!root)
        return mm_fail(err, "out of memory");
    uint64_t off = 0;
    int rc = 0;
    if (w->n_meta) {
        json_t *m = json_object();
        for (size_t i = 0; i < w->n_meta; i++)
            json_object_set_new(m, w->meta_kv[2 * i], json_string(w->meta_kv[2 * i + 1]));
        json_object_set_new(root, "__metadata__", m);
    }
    for (size_t i = 0; i < w->n; i++) {
        mm_st_entry *e = &w->entries[i];
        uint64_t bytes = e->end;
        e->begin = off;
        e->end = off + bytes;
        off = e->end;
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim; d++)
            json_array_append_new(shape, json_integer(e->shape[d]));
        json_t *ent = json_pack("{s:s, s:o, s:[I, I]}", "dtype", mm_dtype_name(e->dtype), "shape", shape,
                                "data_offsets", (json_int_t)e->begin, (json_int_t)e->end);
        if (!ent || json_object_set_new(root, e->name, ent) != 0) {
            json_decref(root);
            return mm_fail(err, "%s: cannot build the header for '%s'", w->path, e->name);
        }
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text)
        return mm_fail(err, "out of memory");
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    if (fwrite(lenb, 1, 8, w->f) != 8 || fwrite(text, 1, len, w->f) != len)
        rc = mm_fail_errno(err, "%s: write", w->tmp);
    for (size_t i = len; rc == 0 && i < padded; i++)
        if (fputc(' ', w->f) == EOF)
            rc = mm_fail_errno(err, "%s: write", w->tmp);
    free(text);
    return rc;
}

static int finish_current(mm_st_writer *w, mm_error *err)
{
    if (w->cur >= w->n)
        return 0;
    const mm_st_entry *e = &w->entries[w->cur];
    if (w->cur_bytes != e->end - e->begin)
        return mm_fail(err, "%s: tensor '%s' received %" PRIu64 " of its %" PRIu64 " bytes", w->path, e->name,
                       w->cur_bytes, e->end - e->begin);
    return 0;
}

int mm_st_writer_next(mm_st_writer *w, const mm_st_entry **next, mm_error *err)
{
    *next = NULL;
    if (!w->started) {
        if (write_header(w, err) != 0)
            return -1;
        w->started = 1;
        w->cur = 0;
    } else {
        if (w->cur >= w->n)
            return 0;
        if (finish_current(w, err) != 0)
            return -1;
        w->cur++;
    }
    w->cur_bytes = 0;
    *next = w->cur < w->n ? &w->entries[w->cur] : NULL;
    return 0;
}

int mm_st_writer_append(mm_st_writer *w, const void *data, size_t bytes, mm_error *err)
{
    if (!w->started || w->cur >= w->n)
        return mm_fail(err, "%s: append without a current tensor (call mm_st_writer_next first)", w->path);
    const mm_st_entry *e = &w->entries[w->cur];
    if (w->cur_bytes + bytes > e->end - e->begin)
        return mm_fail(err, "%s: tensor '%s': %" PRIu64 " bytes appended, it holds %" PRIu64, w->path, e->name,
                       w->cur_bytes + bytes, e->end - e->begin);
    if (bytes && fwrite(data, 1, bytes, w->f) != bytes)
        return mm_fail_errno(err, "%s: write", w->tmp);
    w->cur_bytes += bytes;
    return 0;
}

static void writer_free(mm_st_writer *w)
{
    for (size_t i = 0; i < w->n; i++)
        free((char *)w->entries[i].name);
    free(w->entries);
    for (size_t i = 0; i < 2 * w->n_meta; i++)
        free(w->meta_kv[i]);
    free(w->meta_kv);
    free(w->path);
    free(w->tmp);
    free(w);
}

int mm_st_writer_close(mm_st_writer *w, mm_error *err)
{
    int rc = 0;
    if (!w->started) {
        const mm_st_entry *e;
        rc = mm_st_writer_next(w, &e, err);
    }
    if (rc == 0 && finish_current(w, err) != 0)
        rc = -1;
    if (rc == 0 && w->cur < w->n && w->cur + 1 < w->n)
        rc = mm_fail(err, "%s: tensor '%s' and %zu more never written", w->path, w->entries[w->cur + 1].name,
                     w->n - w->cur - 2);
    if (fflush(w->f) != 0 && rc == 0)
        rc = mm_fail_errno(err, "%s: write", w->tmp);
    if (fclose(w->f) != 0 && rc == 0)
        rc = mm_fail_errno(err, "%s: close", w->tmp);
    w->f = NULL;
    if (rc == 0 && rename(w->tmp, w->path) != 0)
        rc = mm_fail_errno(err, "rename %s -> %s", w->tmp, w->path);
    if (rc != 0)
        unlink(w->tmp);
    writer_free(w);
    return rc;
}

void mm_st_writer_abort(mm_st_writer *w)
{
    if (!w)
        return;
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp);
    }
    writer_free(w);
}

int mm_st_save(const char *path, size_t n, const char *const *names, const mm_tensor *tensors, mm_error *err)
{
    mm_st_writer *w;
    if (mm_st_writer_open(&w, path, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const mm_tensor *t = &tensors[i];
        if (t->device.kind != MM_DEVICE_CPU || !mm_tensor_is_contiguous(t)) {
            mm_st_writer_abort(w);
            return mm_fail(err, "%s: tensor '%s' must be a contiguous CPU tensor to be saved", path, names[i]);
        }
        if (mm_st_writer_declare(w, names[i], t->dtype, t->ndim, t->shape, err) != 0) {
            mm_st_writer_abort(w);
            return -1;
        }
    }
    const mm_st_entry *e;
    for (;;) {
        if (mm_st_writer_next(w, &e, err) != 0) {
            mm_st_writer_abort(w);
            return -1;
        }
        if (!e)
            break;
        size_t i = 0;
        while (i < n && strcmp(names[i], e->name) != 0)
            i++;
        if (mm_st_writer_append(w, tensors[i].data, (size_t)(e->end - e->begin), err) != 0) {
            mm_st_writer_abort(w);
            return -1;
        }
    }
    return mm_st_writer_close(w, err);
}

const mm_st_entry *mm_st_find_config(const mm_safetensors *st, const char *name, int ndim, const char *kind,
                                     mm_error *err)
{
    const mm_st_entry *e = mm_st_find(st, name);
    if (!e) {
        mm_fail(err, "%s: tensor '%s' not found (not a MiniMax-H3 %s?)", mm_st_path(st), name, kind);
        return NULL;
    }
    if (e->ndim != ndim) {
        mm_fail(err, "%s: '%s' has %d dims, %d expected", mm_st_path(st), name, e->ndim, ndim);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (e->shape[i] < 1 || e->shape[i] > MM_ST_MAX_CONFIG_DIM) {
            char sb[96];
            mm_fail(err, "%s: '%s' has shape %s; each dimension must be 1..%d", mm_st_path(st), name,
                    mm_shape_str(e->ndim, e->shape, sb, sizeof sb), MM_ST_MAX_CONFIG_DIM);
            return NULL;
        }
    return e;
}
