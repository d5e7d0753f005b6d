/* libFuzzer: the multipart/form-data parser of POST /api/images on arbitrary
 * bodies, and the boundary parser on arbitrary Content-Type values. Checks
 * that every part lies inside the body. */
#include <stdlib.h>
#include <string.h>

#include "fcgi/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mm_mp_part parts[16];
    int n = 0;
    mm_error err = {{0}};
    if (mm_multipart_parse("XyZ", data, size, parts, 16, &n, &err) == 0 || n > 0) {
        for (int i = 0; i < n; i++)
            if (parts[i].data && (parts[i].data < data || parts[i].data + parts[i].len > data + size))
                abort();
    }
    /* The first line as a Content-Type header. */
    char ct[256];
    size_t k = 0;
    while (k < size && k + 1 < sizeof ct && data[k] != '\n' && data[k] != '\0') {
        ct[k] = (char)data[k];
        k++;
    }
    ct[k] = '\0';
    char boundary[80];
    if (mm_multipart_boundary(ct, boundary, sizeof boundary, &err) == 0 && strlen(boundary) > 70)
        abort();
    return 0;
}
