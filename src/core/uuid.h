#ifndef MMH3_CORE_UUID_H
#define MMH3_CORE_UUID_H

#include <stdbool.h>

/* A random RFC 4122 version-4 UUID string (37 bytes with NUL). */
void mm_uuid_v4(char out[37]);
/* 8-4-4-4-12 hex digits (either case). */
bool mm_is_uuid(const char *s);

#endif
