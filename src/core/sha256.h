/* SHA-256 (FIPS 180-4): content keys (the prompt-conditioning cache), file
 * and tensor hash checks (downloads, conformance kits). */
#ifndef MMH3_CORE_SHA256_H
#define MMH3_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct mm_sha256_ctx {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t block[64];
    size_t fill;
} mm_sha256_ctx;

void mm_sha256_init(mm_sha256_ctx *s);
void mm_sha256_update(mm_sha256_ctx *s, const void *data, size_t n);
void mm_sha256_final(mm_sha256_ctx *s, uint8_t out[32]);
/* One-shot digest. */
void mm_sha256(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex, NUL-terminated. */
void mm_sha256_hex(const uint8_t digest[32], char hex[65]);

#endif
