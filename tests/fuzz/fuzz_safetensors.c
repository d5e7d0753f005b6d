/* libFuzzer target for the safetensors header parser: any byte string is a
 * candidate file. Accepted files must be internally consistent (every entry
 * inside the data, retrievable, unique after prefix stripping); rejected ones
 * must leave a message. Built and run by tests/suites/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mm_safetensors *st = NULL;
    mm_error err = {{0}};
    if (mm_st_open_memory(&st, "fuzz", data, size, &err) != 0) {
        if (err.msg[0] == '\0')
            abort(); /* a failure must say why */
        return 0;
    }
    uint64_t data_start = mm_st_header_size(st);
    for (size_t i = 0; i < mm_st_count(st); i++) {
        const mm_st_entry *e = mm_st_at(st, i);
        if (e->begin > e->end || data_start + e->end > size)
            abort();
        mm_tensor t;
        if (mm_st_get(st, e->name, &t, &err) == 0) {
            size_t n = mm_tensor_nbytes(&t);
            volatile uint8_t sink = 0;
            for (size_t b = 0; b < n; b += 64) /* touch every cache line: out-of-range reads trip ASan */
                sink ^= ((const uint8_t *)t.data)[b];
            if (n)
                sink ^= ((const uint8_t *)t.data)[n - 1];
            (void)sink;
        }
    }
    for (size_t i = 0; i < mm_st_metadata_count(st); i++) {
        const char *v = NULL;
        const char *k = mm_st_metadata_at(st, i, &v);
        if (!k || !v || mm_st_metadata(st, k) == NULL)
            abort();
    }
    mm_st_strip_prefix(st, "a", NULL, &err);
    mm_st_close(st);
    return 0;
}
