/* safetensors files: a validated, memory-mapped reader and a streaming writer.
 *
 * Reader. mm_st_open() maps the file read-only and parses the JSON header with
 * jansson. Every entry is validated before anything else may look at it: the
 * dtype is known, the shape has 0..MM_MAX_DIMS non-negative dimensions whose
 * element count does not overflow, data_offsets is [begin, end] with begin <=
 * end inside the data section, end - begin equals shape x dtype bytes, no two
 * tensors overlap, names are unique (also after prefix stripping), and
 * `__metadata__` is an object of strings. A bad file gives one error line that
 * names the file and the tensor; it never crashes (tests/fuzz/fuzz_safetensors.c
 * fuzzes exactly this parser). Only the header pages are touched by open, so
 * opening a 20 GB checkpoint costs milliseconds.
 *
 * Tensors come back as borrowed CPU views (mm_tensor.storage == NULL) into the
 * mapping: they are read-only and must not outlive the mm_safetensors. The
 * reader is immutable after open/strip and may be shared between threads.
 *
 * Writer. Tensors are declared first (name, dtype, shape), then the header is
 * written and the data is streamed in file order, so a generator can write a
 * 21 GB checkpoint with one tensor in memory at a time. The file layout is the
 * reference implementation's: header padded with spaces to 8 bytes, tensors
 * sorted by element alignment (largest first) then name, packed without gaps,
 * so every tensor is aligned and Python's safetensors reads the file. The file
 * is written under "<path>.tmp" and renamed into place by mm_st_writer_close().
 */
#ifndef MMH3_IO_SAFETENSORS_H
#define MMH3_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"

/* The reference implementation refuses headers above 100 MB; so do we. */
#define MM_ST_MAX_HEADER 100000000ull

typedef struct mm_st_entry {
    const char *name;   /* after prefix stripping */
    mm_dtype dtype;
    int ndim;
    int64_t shape[MM_MAX_DIMS];
    uint64_t begin, end; /* byte offsets within the data section */
    const void *data;    /* begin's address in the mapping */
} mm_st_entry;

typedef struct mm_safetensors mm_safetensors;

/* Maps and validates `path`. */
int mm_st_open(mm_safetensors **out, const char *path, mm_error *err);
/* Validates an in-memory file image (borrowed; must outlive the result).
 * `label` names it in error messages. Used by the fuzzer and tests. */
int mm_st_open_memory(mm_safetensors **out, const char *label, const void *data, size_t size, mm_error *err);
void mm_st_close(mm_safetensors *st);

const char *mm_st_path(const mm_safetensors *st);
/* Total file size and header size in bytes (8-byte length + JSON). */
uint64_t mm_st_file_size(const mm_safetensors *st);
uint64_t mm_st_header_size(const mm_safetensors *st);
/* The header's bytes as stored (mm_st_header_size of them), from the mapping. */
const uint8_t *mm_st_header(const mm_safetensors *st);

/* Removes `prefix` from every name that starts with it (e.g.
 * "model.diffusion_model."). Fails if two names collide afterwards. Sets
 * *stripped (may be NULL) to the number of names changed. */
int mm_st_strip_prefix(mm_safetensors *st, const char *prefix, size_t *stripped, mm_error *err);

/* Entries in name order: for (i = 0; i < mm_st_count(st); i++) mm_st_at(st, i). */
size_t mm_st_count(const mm_safetensors *st);
const mm_st_entry *mm_st_at(const mm_safetensors *st, size_t i);
/* NULL when absent. */
const mm_st_entry *mm_st_find(const mm_safetensors *st, const char *name);
/* Dimensions a model reads its configuration from (widths, depths, heads)
 * are at most this: they become ints, divisors and allocation factors. */
#define MM_ST_MAX_CONFIG_DIM (1 << 24)
/* The entry `name` of rank ndim whose every dimension is in
 * 1..MM_ST_MAX_CONFIG_DIM, or NULL with a message naming the file and the
 * tensor (`kind` says what the file should have been, e.g. "DiT checkpoint").
 * A header can pair a huge dimension with a zero one and still pass the
 * file-size check; this is where such a file is refused. */
const mm_st_entry *mm_st_find_config(const mm_safetensors *st, const char *name, int ndim, const char *kind,
                                     mm_error *err);
/* Number of entries whose name starts with `prefix`. */
size_t mm_st_count_prefix(const mm_safetensors *st, const char *prefix);

/* A borrowed, read-only CPU view of a tensor. Fails with "<file>: tensor
 * '<name>' not found" when absent, and for a tensor whose address is not
 * aligned to its element size (never the case for files from standard
 * writers). */
int mm_st_get(const mm_safetensors *st, const char *name, mm_tensor *out, mm_error *err);
/* mm_st_get plus a dtype and shape check (ndim < 0 skips the shape check). */
int mm_st_get_expect(const mm_safetensors *st, const char *name, mm_dtype dtype, int ndim, const int64_t *shape,
                     mm_tensor *out, mm_error *err);
/* Value of a __metadata__ key, or NULL. */
const char *mm_st_metadata(const mm_safetensors *st, const char *key);
size_t mm_st_metadata_count(const mm_safetensors *st);
/* i-th metadata pair (in file order); returns the key, sets *value. */
const char *mm_st_metadata_at(const mm_safetensors *st, size_t i, const char **value);

/* ------------------------------------------------------------------ writer */

typedef struct mm_st_writer mm_st_writer;

int mm_st_writer_open(mm_st_writer **out, const char *path, mm_error *err);
/* Declares a tensor (before the first mm_st_writer_next). Packed dtypes
 * (MM_F4_E2M1) are stored as U8 by every real checkpoint; declare those as U8. */
int mm_st_writer_declare(mm_st_writer *w, const char *name, mm_dtype dtype, int ndim, const int64_t *shape,
                         mm_error *err);
int mm_st_writer_metadata(mm_st_writer *w, const char *key, const char *value, mm_error *err);
/* Moves to the next tensor to write, in file order (writes the header on the
 * first call): *next is set to it, or to NULL when all are written. The
 * previous tensor must have received exactly its byte count. */
int mm_st_writer_next(mm_st_writer *w, const mm_st_entry **next, mm_error *err);
/* Appends bytes of the current tensor (any number of calls). */
int mm_st_writer_append(mm_st_writer *w, const void *data, size_t bytes, mm_error *err);
/* Checks that everything was written, flushes, renames into place. Frees w. */
int mm_st_writer_close(mm_st_writer *w, mm_error *err);
/* Discards the temporary file. Frees w. */
void mm_st_writer_abort(mm_st_writer *w);

/* One-shot save of contiguous CPU tensors (tests, `mmh3 conformance --out`). */
int mm_st_save(const char *path, size_t n, const char *const *names, const mm_tensor *tensors, mm_error *err);

#endif
