/* The unit-test harness: each test program runs its cases and prints one
 * line per case, "PASS name", "FAIL name: why" or "SKIP name: why", which
 * tests/run counts.
 *
 *   static void test_rmsnorm(void) { ... MM_EXPECT(x < tol, "err %g", x); }
 *   int main(void) { MM_RUN(test_rmsnorm); return mm_test_exit(); }
 *
 * A case whose check cannot run here (no GPU) leaves with MM_SKIP(why): it is
 * reported as skipped, never as passed. What the project provides (the
 * release assets, ffprobe, programs of the build) is never a reason to skip:
 * its absence is a failure.
 */
#ifndef MMH3_TESTS_TEST_H
#define MMH3_TESTS_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mm_test_failures;
static int mm_test_case_failed;
static int mm_test_case_skipped __attribute__((unused)); /* unused by programs without MM_RUN */
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

/* Leaves the current case as skipped: one line "SKIP name: why" (use inside
 * the case function, before any check; a case that already failed stays
 * failed). */
#define MM_SKIP(...)                                                             \
    do {                                                                         \
        if (!mm_test_case_failed) {                                              \
            printf("SKIP %s: ", mm_test_current);                               \
            printf(__VA_ARGS__);                                                 \
            printf("\n");                                                        \
            fflush(stdout);                                                      \
            mm_test_case_skipped = 1;                                            \
        }                                                                        \
        return;                                                                  \
    } while (0)

/* The device runs (tests/device/) set MMH3_REQUIRE_GPU=1: there a
 * missing GPU is a failure, not a skip. */
static inline int mm_test_gpu_required(void)
{
    const char *req = getenv("MMH3_REQUIRE_GPU");
    return req && *req && strcmp(req, "0") != 0;
}

/* For a case that needs a GPU: SKIP without one, FAIL when MMH3_REQUIRE_GPU is set. */
#define MM_NEED_GPU(gpus)                                                        \
    do {                                                                         \
        if ((gpus) <= 0) {                                                       \
            MM_REQUIRE(!mm_test_gpu_required(), "MMH3_REQUIRE_GPU is set but no CUDA device is usable"); \
            MM_SKIP("no CUDA device (the device run sets MMH3_REQUIRE_GPU=1)");  \
        }                                                                        \
    } while (0)

#define MM_RUN(fn)                                                               \
    do {                                                                         \
        mm_test_current = #fn;                                                   \
        mm_test_case_failed = 0;                                                 \
        mm_test_case_skipped = 0;                                                \
        fn();                                                                    \
        if (mm_test_case_failed)                                                 \
            mm_test_failures++;                                                  \
        else if (!mm_test_case_skipped)                                          \
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
