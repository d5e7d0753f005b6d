/* The unit-test harness: each test program runs its cases and prints one
 * line per case, "PASS name" or "FAIL name: why", which tests/run counts.
 *
 *   static void test_rmsnorm(void) { ... MM_EXPECT(x < tol, "err %g", x); }
 *   int main(void) { MM_RUN(test_rmsnorm); return mm_test_exit(); }
 */
#ifndef MMH3_TESTS_TEST_H
#define MMH3_TESTS_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mm_test_failures;
static int mm_test_case_failed;
static const char *mm_test_current;

#define MM_EXPECT(cond, ...) MM_EXPECT_TEXT(!!(cond), #cond, __VA_ARGS__)

/* The reporting half of MM_EXPECT, for an already evaluated condition. */
#define MM_EXPECT_TEXT(ok, text, ...)                                            \
    do {                                                                         \
        if (!(ok)) {                                                             \
            if (!mm_test_case_failed)                                            \
                printf("FAIL %s: ", mm_test_current);                           \
            else                                                                 \
                printf("     %s: ", mm_test_current);                           \
            printf("%s:%d: (%s) ", __FILE__, __LINE__, text);                    \
            printf(__VA_ARGS__);                                                 \
            printf("\n");                                                        \
            fflush(stdout);                                                      \
            mm_test_case_failed = 1;                                             \
        }                                                                        \
    } while (0)

/* Stops the current case (use inside the case function). Evaluates cond once. */
#define MM_REQUIRE(cond, ...)                                                    \
    do {                                                                         \
        int mm_require_ok_ = !!(cond);                                           \
        MM_EXPECT_TEXT(mm_require_ok_, #cond, __VA_ARGS__);                      \
        if (!mm_require_ok_)                                                     \
            return;                                                              \
    } while (0)

#define MM_RUN(fn)                                                               \
    do {                                                                         \
        mm_test_current = #fn;                                                   \
        mm_test_case_failed = 0;                                                 \
        fn();                                                                    \
        if (mm_test_case_failed)                                                 \
            mm_test_failures++;                                                  \
        else                                                                     \
            printf("PASS %s\n", #fn);                                            \
        fflush(stdout);                                                          \
    } while (0)

static inline int mm_test_exit(void) { return mm_test_failures ? 1 : 0; }

/* Where the test data lives (tests/data in the source tree). */
static inline const char *mm_test_data_dir(void)
{
    const char *d = getenv("MMH3_TEST_DATA");
    return d ? d : "tests/data";
}

#endif
