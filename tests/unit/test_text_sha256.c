/* SHA-256 against the FIPS 180-4 / NIST example vectors and streaming splits. */
#include <stdio.h>
#include <string.h>

#include "core/sha256.h"
#include "test.h"

static void hex_of(const void *d, size_t n, char hex[65])
{
    uint8_t out[32];
    mm_sha256(d, n, out);
    mm_sha256_hex(out, hex);
}

static void test_nist_vectors(void)
{
    char hex[65];
    hex_of("", 0, hex);
    MM_EXPECT(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "empty: %s", hex);
    hex_of("abc", 3, hex);
    MM_EXPECT(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "abc: %s", hex);
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(two, strlen(two), hex);
    MM_EXPECT(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "448-bit: %s", hex);
}

static void test_million_a_streamed(void)
{
    /* One million 'a' fed in uneven pieces crosses every block-boundary path. */
    char buf[997];
    memset(buf, 'a', sizeof buf);
    mm_sha256_ctx s;
    mm_sha256_init(&s);
    size_t left = 1000000, step = 1;
    while (left) {
        size_t n = step < left ? step : left;
        if (n > sizeof buf)
            n = sizeof buf;
        mm_sha256_update(&s, buf, n);
        left -= n;
        step = step * 7 % 1000 + 1;
    }
    uint8_t out[32];
    char hex[65];
    mm_sha256_final(&s, out);
    mm_sha256_hex(out, hex);
    MM_EXPECT(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "1M a: %s", hex);
}

int main(void)
{
    MM_RUN(test_nist_vectors);
    MM_RUN(test_million_a_streamed);
    return mm_test_exit();
}
