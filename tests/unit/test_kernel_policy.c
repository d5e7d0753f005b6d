/* The kernel policy (backend/kernel_policy.h): its defaults, the three
 * environment knobs through the one parser, the messages a bad value gets
 * (naming the variable, its value and what is accepted), the process
 * instance (built once, its problems said once on stderr) and what an
 * installed policy reaches: the CPU contexts' worker count and, in CUDA
 * builds, the kernels' part (kernels/mmk.h; host memory, no GPU needed). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/kernel_policy.h"
#include "backend/ops.h"
#ifdef MMH3_HAVE_CUDA
#include "kernels/mmk.h"
#endif
#include "test.h"

static void clear_env(void)
{
    unsetenv("MMH3_KERNELS");
    unsetenv("MMH3_DIT_FAST");
    unsetenv("MMH3_THREADS");
}

static bool all_ops(const mm_kernel_policy *p, bool on)
{
    return p->attention_hopper == on && p->dit_fa3 == on && p->dit_qgemm == on && p->dit_fused == on &&
           p->convrot_pipe == on && p->qk_norm_vec == on && p->glue_vec == on && p->conv_gemm == on;
}

static void test_defaults(void)
{
    clear_env();
    mm_kernel_policy p;
    mm_kernel_policy_from_env(&p);
    MM_EXPECT(all_ops(&p, true) && p.dit_fast && p.cpu_threads == 0 && p.n_problems == 0, "defaults");
    char d[256];
    mm_kernel_policy_describe(&p, d, sizeof d);
    MM_EXPECT(strcmp(d, "default kernels; fast mode on; CPU workers: one per core") == 0, "describe: %s", d);
    /* empty is unset */
    setenv("MMH3_KERNELS", "", 1), setenv("MMH3_DIT_FAST", "", 1), setenv("MMH3_THREADS", "", 1);
    mm_kernel_policy_from_env(&p);
    MM_EXPECT(all_ops(&p, true) && p.dit_fast && p.cpu_threads == 0 && p.n_problems == 0, "empty values");
    clear_env();
}

static void test_knobs(void)
{
    mm_kernel_policy p;
    char d[256];
    setenv("MMH3_KERNELS", "portable", 1);
    mm_kernel_policy_from_env(&p);
    MM_EXPECT(all_ops(&p, false) && p.dit_fast && p.n_problems == 0, "MMH3_KERNELS=portable");
    mm_kernel_policy_describe(&p, d, sizeof d);
    MM_EXPECT(strstr(d, "portable kernels (MMH3_KERNELS=portable)") == d, "describe: %s", d);
    setenv("MMH3_KERNELS", "default", 1);
    setenv("MMH3_DIT_FAST", "off", 1);
    setenv("MMH3_THREADS", "7", 1);
    mm_kernel_policy_from_env(&p);
    MM_EXPECT(all_ops(&p, true) && !p.dit_fast && p.cpu_threads == 7 && p.n_problems == 0, "default / off / 7");
    mm_kernel_policy_describe(&p, d, sizeof d);
    MM_EXPECT(strcmp(d, "default kernels; fast mode off (MMH3_DIT_FAST=off); CPU workers 7 (MMH3_THREADS)") == 0,
              "describe: %s", d);
    setenv("MMH3_DIT_FAST", "fast", 1);
    mm_kernel_policy_from_env(&p);
    MM_EXPECT(p.dit_fast, "MMH3_DIT_FAST=fast");
    clear_env();
    /* a test's own switch: the ops left on their default are not named */
    mm_kernel_policy_defaults(&p);
    p.glue_vec = p.conv_gemm = false;
    mm_kernel_policy_describe(&p, d, sizeof d);
    MM_EXPECT(strstr(d, "default kernels except glue, conv (portable);") == d, "describe: %s", d);
}

/* Bad values keep the default and are recorded, one message each, in one
 * format: the variable, its value, what is accepted. */
static void test_bad_values(void)
{
    setenv("MMH3_KERNELS", "fats", 1);
    setenv("MMH3_DIT_FAST", "qk", 1);
    setenv("MMH3_THREADS", "4294967297", 1);
    mm_kernel_policy p;
    mm_kernel_policy_from_env(&p);
    MM_EXPECT(all_ops(&p, true) && p.dit_fast && p.cpu_threads == 0, "a bad value changed the policy");
    MM_REQUIRE(p.n_problems == 3, "%d problems", p.n_problems);
    MM_EXPECT(strcmp(p.problems[0], "MMH3_KERNELS=fats is not one of: default, portable") == 0, "%s", p.problems[0]);
    MM_EXPECT(strcmp(p.problems[1], "MMH3_DIT_FAST=qk is not one of: fast, off") == 0, "%s", p.problems[1]);
    MM_EXPECT(strcmp(p.problems[2], "MMH3_THREADS=4294967297 is not a whole number in 1..1024") == 0, "%s",
              p.problems[2]);
    /* a long value is cut in the message, which stays terminated */
    char long_value[300];
    memset(long_value, 'x', sizeof long_value - 1);
    long_value[sizeof long_value - 1] = 0;
    setenv("MMH3_KERNELS", long_value, 1);
    unsetenv("MMH3_DIT_FAST"), unsetenv("MMH3_THREADS");
    mm_kernel_policy_from_env(&p);
    MM_EXPECT(p.n_problems == 1 && strlen(p.problems[0]) < sizeof p.problems[0] &&
                  strstr(p.problems[0], "is not one of: default, portable"),
              "long value: %s", p.problems[0]);
    clear_env();
}

/* What a command-line flag calls: the same parser and message. */
static void test_parse(void)
{
    mm_kernel_policy p;
    mm_kernel_policy_defaults(&p);
    mm_error e = {{0}};
    MM_EXPECT(mm_kernel_policy_parse(&p, "MMH3_KERNELS", "portable", &e) == 0 && all_ops(&p, false), "%s", e.msg);
    MM_EXPECT(mm_kernel_policy_parse(&p, "MMH3_THREADS", "12", &e) == 0 && p.cpu_threads == 12, "%s", e.msg);
    MM_EXPECT(mm_kernel_policy_parse(&p, "MMH3_THREADS", "0", &e) == -1 &&
                  strcmp(e.msg, "MMH3_THREADS=0 is not a whole number in 1..1024") == 0 && p.cpu_threads == 12,
              "MMH3_THREADS=0: %s", e.msg);
    MM_EXPECT(mm_kernel_policy_parse(&p, "MMH3_ATTN", "sm80", &e) == -1 && strstr(e.msg, "MMH3_ATTN") &&
                  strstr(e.msg, "MMH3_KERNELS, MMH3_DIT_FAST, MMH3_THREADS"),
              "a removed variable: %s", e.msg);
}

/* The process policy is built once, from the environment, and says each
 * problem once on stderr (in a child: this process's is already built). */
static void test_process_policy_says_its_problems_once(void)
{
    int fds[2];
    MM_REQUIRE(pipe(fds) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    MM_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        setenv("MMH3_KERNELS", "fats", 1);
        const mm_kernel_policy *a = mm_kernel_policy_get();
        setenv("MMH3_KERNELS", "portable", 1); /* read once: no effect now */
        const mm_kernel_policy *b = mm_kernel_policy_get();
        _exit(a == b && all_ops(b, true) && b->n_problems == 1 ? 0 : 3);
    }
    close(fds[1]);
    char said[512] = "";
    size_t n = 0;
    for (ssize_t r; n < sizeof said - 1 && (r = read(fds[0], said + n, sizeof said - 1 - n)) > 0;)
        n += (size_t)r;
    said[n] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    MM_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %d", status);
    MM_EXPECT(strcmp(said, "mmh3: MMH3_KERNELS=fats is not one of: default, portable; using the default\n") == 0,
              "stderr: %s", said);
}

/* An installed policy is what contexts and kernels read from then on. */
static void test_install_reaches_contexts_and_kernels(void)
{
    const mm_kernel_policy process = *mm_kernel_policy_get();
    mm_kernel_policy p;
    mm_kernel_policy_defaults(&p);
    p.cpu_threads = 2;
    p.glue_vec = false;
    p.attention_hopper = false;
    mm_kernel_policy_install(&p);
    MM_EXPECT(mm_kernel_policy_get()->cpu_threads == 2 && !mm_kernel_policy_get()->glue_vec, "not installed");
    mm_ctx *c = NULL;
    mm_error e = {{0}};
    MM_REQUIRE(mm_ctx_create(&c, mm_cpu(), 0, &e) == 0, "%s", e.msg);
    MM_EXPECT(mm_ctx_threads(c) == 2, "%d workers, 2 installed", mm_ctx_threads(c));
    mm_ctx_destroy(c);
#ifdef MMH3_HAVE_CUDA
    const mmk_policy *k = mmk_policy_get();
    MM_EXPECT(!k->glue_vec && !k->attention_hopper && k->convrot_pipe && k->qk_norm_vec && k->conv_gemm,
              "the kernels' part: glue %d attention %d convrot %d qk %d conv %d", k->glue_vec, k->attention_hopper,
              k->convrot_pipe, k->qk_norm_vec, k->conv_gemm);
#endif
    mm_kernel_policy_install(&process);
#ifdef MMH3_HAVE_CUDA
    MM_EXPECT(mmk_policy_get()->glue_vec == process.glue_vec, "not put back");
#endif
}

/* Which kernels each card runs: the Hopper ones only on compute 9.0 with
 * the sm_90a image and a policy that allows them; Ampere, Ada and Blackwell
 * the portable ones. */
static void test_kernel_choice_by_compute_capability(void)
{
    mm_kernel_policy def, port;
    mm_kernel_policy_defaults(&def);
    mm_kernel_policy_portable(&port);
    char line[200];
    mm_kernel_choice_describe(9, 0, true, &def, line, sizeof line);
    MM_EXPECT(strstr(line, "Hopper") && strstr(line, "fa3"), "H100/H200: %s", line);
    static const int portable_cc[][2] = {{8, 0}, {8, 6}, {8, 9}, {10, 0}, {12, 0}};
    for (size_t i = 0; i < sizeof portable_cc / sizeof portable_cc[0]; i++) {
        mm_kernel_choice_describe(portable_cc[i][0], portable_cc[i][1], true, &def, line, sizeof line);
        MM_EXPECT(strstr(line, "portable") && !strstr(line, "Hopper"), "compute %d.%d: %s", portable_cc[i][0],
                  portable_cc[i][1], line);
    }
    mm_kernel_choice_describe(9, 0, false, &def, line, sizeof line);
    MM_EXPECT(strstr(line, "portable") && strstr(line, "no sm_90a image"), "Hopper without sm_90a: %s", line);
    mm_kernel_choice_describe(9, 0, true, &port, line, sizeof line);
    MM_EXPECT(strstr(line, "portable") && strstr(line, "policy"), "MMH3_KERNELS=portable on Hopper: %s", line);
}

int main(void)
{
    MM_RUN(test_defaults);
    MM_RUN(test_knobs);
    MM_RUN(test_bad_values);
    MM_RUN(test_parse);
    MM_RUN(test_process_policy_says_its_problems_once);
    MM_RUN(test_install_reaches_contexts_and_kernels);
    MM_RUN(test_kernel_choice_by_compute_capability);
    return mm_test_exit();
}
