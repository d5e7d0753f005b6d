#include "model/text/normalize.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int mm_utf8_validate(const char *s, size_t n, mm_error *err)
{
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* ASCII runs dominate prompts */
            i++;
            continue;
        }
        utf8proc_int32_t cp;
        size_t left = n - i;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, left > 8 ? 8 : (utf8proc_ssize_t)left, &cp);
        if (k < 0)
            return mm_fail(err, "invalid UTF-8 at byte %zu (0x%02x): text must be well-formed UTF-8", i, p[i]);
        i += (size_t)k;
    }
    return 0;
}

size_t mm_utf8_decode(const char *s, size_t n, int32_t *cp)
{
    utf8proc_int32_t c = 0;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, n > 8 ? 8 : (utf8proc_ssize_t)n, &c);
    if (k <= 0) { /* callers pass validated text; stay total anyway */
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return (size_t)k;
}

/* NFC quick check: a string of code points below U+0300 is always NFC (no
 * combining marks, no composition starters with a decomposition there that NFC
 * would change), so only text reaching U+0300 goes through utf8proc. */
static bool surely_nfc(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] >= 0xCC) /* lead byte of U+0300 and above */
            return false;
    return true;
}

int mm_utf8_nfc(const char *s, size_t n, const char **out, size_t *out_len, bool *owned, mm_error *err)
{
    if (surely_nfc((const unsigned char *)s, n)) {
        *out = s;
        *out_len = n;
        *owned = false;
        return 0;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (k < 0)
        return mm_fail(err, "NFC normalization: %s", utf8proc_errmsg(k));
    if ((size_t)k == n && memcmp(dst, s, n) == 0) {
        free(dst);
        *out = s;
        *out_len = n;
        *owned = false;
        return 0;
    }
    *out = (const char *)dst;
    *out_len = (size_t)k;
    *owned = true;
    return 0;
}

bool mm_unicode_is_space(int32_t cp)
{
    /* The White_Space property (PropList.txt); stable since Unicode 6.3. */
    if (cp <= 0x20)
        return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

bool mm_unicode_is_word(int32_t cp)
{
    if (cp == 0x200C || cp == 0x200D)
        return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}
