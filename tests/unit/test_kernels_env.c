/* The environment variables that pick a kernel variant (kernels/mmk_env.h:
 * MMH3_CONVROT_KERNEL, MMH3_QK_NORM_KERNEL, MMH3_GLUE_KERNEL): a value that
 * names no kernel — a typo, or a variant removed since (warprow) — is said
 * once on stderr with what is accepted, not taken silently. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/mmk_env.h"
#include "test.h"

static const char *const kNames[] = {"row", "pipe", "pipe-nolut"};
static const char *const kVar = "MMH3_TEST_KERNEL_ENV";

static void test_choice_names_and_default(void)
{
    char msg[200] = "";
    unsetenv(kVar);
    MM_EXPECT(mmk_env_choice(kVar, kNames, 3, msg, sizeof msg) == -1, "unset is not the default");
    setenv(kVar, "", 1);
    MM_EXPECT(mmk_env_choice(kVar, kNames, 3, msg, sizeof msg) == -1, "empty is not the default");
    for (int i = 0; i < 3; i++) {
        setenv(kVar, kNames[i], 1);
        MM_EXPECT(mmk_env_choice(kVar, kNames, 3, msg, sizeof msg) == i, "%s is not index %d", kNames[i], i);
    }
    /* prefixes and case are not names */
    setenv(kVar, "pipe-", 1);
    MM_EXPECT(mmk_env_choice(kVar, kNames, 3, NULL, 0) == -2, "'pipe-' accepted");
    setenv(kVar, "Row", 1);
    MM_EXPECT(mmk_env_choice(kVar, kNames, 3, NULL, 0) == -2, "'Row' accepted");
    unsetenv(kVar);
}

static void test_choice_message_says_what_is_accepted(void)
{
    char msg[200] = "";
    setenv(kVar, "warprow", 1);
    MM_EXPECT(mmk_env_choice(kVar, kNames, 3, msg, sizeof msg) == -2, "warprow accepted");
    MM_EXPECT(strcmp(msg, "MMH3_TEST_KERNEL_ENV=warprow is not one of: row, pipe, pipe-nolut") == 0, "message: %s", msg);
    /* a short buffer is cut, still terminated */
    char small[24];
    memset(small, 'x', sizeof small);
    MM_EXPECT(mmk_env_choice(kVar, kNames, 3, small, sizeof small) == -2, "warprow accepted");
    MM_EXPECT(memchr(small, 0, sizeof small) != NULL && strncmp(small, "MMH3_TEST_KERNEL_ENV=wa", 23) == 0,
              "short message: %.24s", small);
    unsetenv(kVar);
}

static void test_kernel_fallback_warns_once(void)
{
    int warned = 0;
    /* stderr into a file for the duration, to read what was said */
    fflush(stdout);
    fflush(stderr);
    FILE *cap = tmpfile();
    int saved = dup(2);
    MM_REQUIRE(cap && saved >= 0 && dup2(fileno(cap), 2) >= 0, "cannot capture stderr");
    unsetenv(kVar);
    MM_EXPECT(mmk_env_kernel(kVar, kNames, 3, 1, 0, &warned) == 1 && !warned, "unset: not the default, or warned");
    setenv(kVar, "pipe-nolut", 1);
    MM_EXPECT(mmk_env_kernel(kVar, kNames, 3, 1, 0, &warned) == 2 && !warned, "pipe-nolut: not 2, or warned");
    setenv(kVar, "warprow", 1);
    MM_EXPECT(mmk_env_kernel(kVar, kNames, 3, 1, 0, &warned) == 0, "warprow: not the fallback");
    MM_EXPECT(warned == 1, "warprow: not announced");
    MM_EXPECT(mmk_env_kernel(kVar, kNames, 3, 1, 0, &warned) == 0 && warned == 1, "second call: not the fallback");
    unsetenv(kVar);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char said[400] = "";
    rewind(cap);
    size_t n = fread(said, 1, sizeof said - 1, cap);
    said[n] = 0;
    fclose(cap);
    MM_EXPECT(strcmp(said, "mmh3: MMH3_TEST_KERNEL_ENV=warprow is not one of: row, pipe, pipe-nolut; using row\n") == 0,
              "stderr (once, with what is accepted and what runs): %s", said);
}

int main(void)
{
    MM_RUN(test_choice_names_and_default);
    MM_RUN(test_choice_message_says_what_is_accepted);
    MM_RUN(test_kernel_fallback_warns_once);
    return mm_test_exit();
}
