/* Ids: random version-4 UUIDs for stored files, and the syntax check of ids
 * in requests. */
#include "core/uuid.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void mm_uuid_v4(char out[37])
{
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (unsigned char)rand();
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

bool mm_is_uuid(const char *s)
{
    if (!s || strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
        } else if (!isxdigit((unsigned char)s[i])) {
            return false;
        }
    }
    return true;
}
