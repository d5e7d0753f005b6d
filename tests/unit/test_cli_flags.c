/* cli/flags.h, the one flag parser of the mmh3 commands: every spelling a
 * value can take (--flag value, --flag=value, -f value, -fvalue, bundled
 * switches, unique prefixes, --), aliases, every refusal's message (one
 * format: what was wrong; accepted: what is), --help from the table, and the
 * engine flags' rows per command (cli/engine_flags.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/engine_flags.h"
#include "cli/flags.h"
#include "test.h"

typedef struct opts {
    const char *name, *mode, *path, *preset;
    int count, verbosity;
    double ratio, positive;
    bool fast, quiet_off;
    const char *list[4];
    int n_list;
} opts;

static int append(const mm_flag *f, char *v, mm_error *why)
{
    opts *o = f->target;
    if (o->n_list == 2)
        return mm_fail(why, "too many");
    o->list[o->n_list++] = v;
    return 0;
}

static int even(const mm_flag *f, char *v, mm_error *why)
{
    (void)f;
    if (atoi(v) % 2)
        return mm_fail(why, "odd; accepted: an even number (2, 4, ...)");
    return 0;
}

/* Parses argv (NULL-terminated words after the command name) against the
 * test table; stderr and stdout captured. */
typedef struct run {
    opts o;
    mm_flags_result r;
    char err[2048], out[8192];
} run;

static int refuse_second_fast(void *user, const mm_flag *f, const char *spelled, const char *value, mm_error *why)
{
    (void)value;
    int *seen = user;
    if (strcmp(f->name, "--fast") == 0 && (*seen)++)
        return mm_fail(why, "seen before (%s)", spelled);
    return 0;
}

static void parse(run *t, const char *const *words)
{
    memset(t, 0, sizeof *t);
    opts *o = &t->o;
    o->verbosity = 1;
    const mm_flag rows[] = {
        {.kind = MM_FLAG_SECTION, .help = "things"},
        {"--name", "-n", MM_FLAG_STRING, &o->name, "a name", .arg = "NAME", .once = true},
        {"--count", "-c --number", MM_FLAG_INT, &o->count, "how many", .arg = "N", .min = 1, .max = 16},
        {"--ratio", NULL, MM_FLAG_DOUBLE, &o->ratio, "a ratio", .arg = "R", .min = 0, .max = 1},
        {"--positive", NULL, MM_FLAG_DOUBLE, &o->positive, "above zero", .arg = "S", .min = 0, .above_min = true,
         .max = 10, .accepted = "seconds > 0 and <= 10"},
        {"--mode", NULL, MM_FLAG_CHOICE, &o->mode, "the mode", .arg = "M", .choices = "fast slow"},
        {.kind = MM_FLAG_SECTION, .help = "switches"},
        {"--fast", "-f", MM_FLAG_TRUE, &o->fast, .help = "go fast"},
        {"--verbose", "-v", MM_FLAG_SET_INT, &o->verbosity, .help = "more", .set_int = 2},
        {"--quiet", "-q", MM_FLAG_SET_INT, &o->verbosity, .help = "less", .set_int = 0},
        {"--no-quiet", NULL, MM_FLAG_FALSE, &o->quiet_off, .help = "hidden switch"},
        {"--mock", NULL, MM_FLAG_SET_STR, &o->path, .help = "set a constant", .set_str = "mocked"},
        {"--item", "-i", MM_FLAG_CUSTOM, o, "repeatable, at most 2", .arg = "X", .accepted = "at most two items",
         .apply = append},
        {"--even", NULL, MM_FLAG_CUSTOM, NULL, "an even number", .arg = "N", .apply = even},
        {"--secret", NULL, MM_FLAG_STRING, &o->path, NULL, .arg = "S"},
        {"--preset", NULL, MM_FLAG_STRING, &o->preset, "a preset, optional", .arg = "P", .implicit = "standard"},
        {"--help", "-h", MM_FLAG_HELP, NULL, .help = "this text"},
    };
    static int fast_seen;
    fast_seen = 0;
    FILE *err = fmemopen(t->err, sizeof t->err - 1, "w"), *out = fmemopen(t->out, sizeof t->out - 1, "w");
    const mm_flags_cmd cmd = {
        .prog = "mmh3 test",
        .synopsis = "usage: mmh3 test [options]\n\n",
        .positional_hint = "the name goes after -n",
        .rows = rows,
        .n_rows = MM_FLAGS_COUNT(rows),
        .help_column = 20,
        .seen = refuse_second_fast,
        .user = &fast_seen,
        .out = out,
        .err = err,
    };
    char *argv[32];
    int argc = 0;
    static char storage[32][128];
    argv[argc++] = "test";
    for (int i = 0; words[i] && argc < 31; i++) {
        snprintf(storage[argc], sizeof storage[argc], "%s", words[i]);
        argv[argc] = storage[argc];
        argc++;
    }
    argv[argc] = NULL;
    t->r = mm_flags_parse(&cmd, argc, argv);
    fclose(err);
    fclose(out);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect_error(const char *const *words, const char *want)
{
    run t;
    parse(&t, words);
    MM_EXPECT(t.r == MM_FLAGS_BAD && strcmp(t.err, want) == 0, "%s...: result %d, message\n  %s  expected\n  %s",
              words[0], (int)t.r, t.err, want);
}

static void test_values_in_every_spelling(void)
{
    run t;
    parse(&t, ARGS("--name", "a", "--count=3", "--ratio", "0.5", "--mode=slow"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.name, "a") == 0 && t.o.count == 3 && t.o.ratio == 0.5 &&
                  strcmp(t.o.mode, "slow") == 0,
              "long forms: %d %s", (int)t.r, t.err);
    parse(&t, ARGS("-nbob", "-c", "7"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.name, "bob") == 0 && t.o.count == 7, "short forms: %s", t.err);
    parse(&t, ARGS("-fv"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && t.o.fast && t.o.verbosity == 2, "bundled switches: %s", t.err);
    parse(&t, ARGS("-qc5"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && t.o.verbosity == 0 && t.o.count == 5, "switch then value in a bundle: %s", t.err);
    /* a value is the next word even when it starts with '-', and may be empty */
    parse(&t, ARGS("--name", "-x", "--item", ""));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.name, "-x") == 0 && t.o.n_list == 1 && t.o.list[0][0] == '\0',
              "dash value and empty value: %s", t.err);
    parse(&t, ARGS("--name="));
    MM_EXPECT(t.r == MM_FLAGS_RUN && t.o.name && !*t.o.name, "--name= is an empty value: %s", t.err);
    parse(&t, ARGS("--item", "a", "-ib"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && t.o.n_list == 2 && strcmp(t.o.list[1], "b") == 0, "repeatable, in order");
    parse(&t, ARGS("--mock", "--no-quiet"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.path, "mocked") == 0 && !t.o.quiet_off, "constants");
    parse(&t, ARGS("--secret", "s"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.path, "s") == 0, "a flag not listed in --help still works");
    /* an optional value: alone, the implicit one; a next word that is not a flag, or =VALUE */
    parse(&t, ARGS("--preset"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.preset, "standard") == 0, "--preset alone: %s", t.err);
    parse(&t, ARGS("--preset", "--fast"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.preset, "standard") == 0 && t.o.fast, "--preset then a flag: %s",
              t.err);
    parse(&t, ARGS("--preset", "sol"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.preset, "sol") == 0, "--preset sol: %s", t.err);
    parse(&t, ARGS("--preset=x:y=1"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.preset, "x:y=1") == 0, "--preset=VALUE: %s", t.err);
    parse(&t, ARGS("--positive", "10", "--ratio", "1e-1"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && t.o.positive == 10 && t.o.ratio == 0.1, "bounds are inclusive: %s", t.err);
}

static void test_aliases_and_prefixes(void)
{
    run t;
    parse(&t, ARGS("--number", "9"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && t.o.count == 9, "long alias: %s", t.err);
    parse(&t, ARGS("--number=4", "-c", "2"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && t.o.count == 2, "the last one wins: %d", t.o.count);
    parse(&t, ARGS("--na", "x", "--cou=2", "--pos", "3"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && strcmp(t.o.name, "x") == 0 && t.o.count == 2 && t.o.positive == 3,
              "unique prefixes: %s", t.err);
    parse(&t, ARGS("--num", "5"));
    MM_EXPECT(t.r == MM_FLAGS_RUN && t.o.count == 5, "a prefix of an alias: %s", t.err);
    /* "--no-" is a prefix of --no-quiet only: unique */
    parse(&t, ARGS("--no-"));
    MM_EXPECT(t.r == MM_FLAGS_RUN, "prefix of one flag: %s", t.err);
    /* "--" ends the flags: the rest is positional */
    parse(&t, ARGS("--", "--fast"));
    MM_EXPECT(t.r == MM_FLAGS_BAD && !t.o.fast && strstr(t.err, "unexpected argument '--fast'"), "after --: %s",
              t.err);
}

static void test_every_refusal_says_what_is_accepted(void)
{
    expect_error(ARGS("--bogus"), "mmh3 test: unknown option '--bogus'; accepted: the flags of mmh3 test --help\n");
    expect_error(ARGS("--bogus=1"), "mmh3 test: unknown option '--bogus'; accepted: the flags of mmh3 test --help\n");
    expect_error(ARGS("-x"), "mmh3 test: unknown option '-x'; accepted: the flags of mmh3 test --help\n");
    expect_error(ARGS("-fx"), "mmh3 test: unknown option '-x'; accepted: the flags of mmh3 test --help\n");
    expect_error(ARGS("--m", "x"), "mmh3 test: ambiguous option '--m'; accepted: one of --mode, --mock\n");
    expect_error(ARGS("--count"), "mmh3 test: --count needs a value; accepted: an integer 1..16\n");
    expect_error(ARGS("-c"), "mmh3 test: -c needs a value; accepted: an integer 1..16\n");
    expect_error(ARGS("--name"), "mmh3 test: --name needs a value; accepted: --name NAME\n");
    expect_error(ARGS("--fast=yes"), "mmh3 test: --fast=yes: takes no value; accepted: --fast alone\n");
    expect_error(ARGS("--count", "abc"), "mmh3 test: --count abc: not an integer; accepted: an integer 1..16\n");
    expect_error(ARGS("--count", "17"), "mmh3 test: --count 17: out of range; accepted: an integer 1..16\n");
    /* checked before it narrows to int: 2^32 + 1 is not 1 */
    expect_error(ARGS("--count=4294967297"),
                 "mmh3 test: --count 4294967297: out of range; accepted: an integer 1..16\n");
    expect_error(ARGS("--count", ""), "mmh3 test: --count '': not an integer; accepted: an integer 1..16\n");
    expect_error(ARGS("--ratio", "1.5"), "mmh3 test: --ratio 1.5: out of range; accepted: a number 0..1\n");
    expect_error(ARGS("--ratio", "nan"), "mmh3 test: --ratio nan: not a number; accepted: a number 0..1\n");
    expect_error(ARGS("--ratio", "0.5x"), "mmh3 test: --ratio 0.5x: not a number; accepted: a number 0..1\n");
    expect_error(ARGS("--positive", "0"),
                 "mmh3 test: --positive 0: out of range; accepted: seconds > 0 and <= 10\n");
    expect_error(ARGS("--mode", "medium"), "mmh3 test: --mode medium: unknown value; accepted: fast, slow\n");
    expect_error(ARGS("-i", "a", "-i", "b", "--item=c"),
                 "mmh3 test: --item c: too many; accepted: at most two items\n");
    /* a check that already says what it accepts is not told twice */
    expect_error(ARGS("--even", "3"), "mmh3 test: --even 3: odd; accepted: an even number (2, 4, ...)\n");
    expect_error(ARGS("-n", "a", "--name", "b"), "mmh3 test: --name b: given twice; accepted: --name once\n");
    expect_error(ARGS("stray"),
                 "mmh3 test: unexpected argument 'stray'; accepted: flags only (the name goes after -n)\n");
    /* the command's own check after each flag, in the same format */
    expect_error(ARGS("--fast", "-f"), "mmh3 test: -f: seen before (-f)\n");
    /* a long value is cut in the message */
    char longv[120];
    memset(longv, 'y', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    run t;
    parse(&t, ARGS("--count", longv));
    MM_EXPECT(t.r == MM_FLAGS_BAD && strstr(t.err, "yyy...: not an integer") && strlen(t.err) < 140, "cut: %s", t.err);
}

static void test_refusals_stop_at_the_first_and_flags_beat_strays(void)
{
    run t;
    /* getopt's order: flags after a stray word still count, and their refusal comes first */
    parse(&t, ARGS("stray", "--count", "0"));
    MM_EXPECT(t.r == MM_FLAGS_BAD && strstr(t.err, "--count 0: out of range") && !strstr(t.err, "stray"), "%s", t.err);
    parse(&t, ARGS("--count", "0", "--bogus"));
    MM_EXPECT(t.r == MM_FLAGS_BAD && strchr(t.err, '\n') == t.err + strlen(t.err) - 1 && strstr(t.err, "--count 0"),
              "one line, the first problem: %s", t.err);
}

static void test_help_comes_from_the_table(void)
{
    run t;
    parse(&t, ARGS("--count", "2", "-h", "--bogus"));
    MM_EXPECT(t.r == MM_FLAGS_HELP && !t.err[0], "help: %d %s", (int)t.r, t.err);
    const char *h = t.out;
    MM_EXPECT(strncmp(h, "usage: mmh3 test [options]\n\nthings\n", 35) == 0, "synopsis, then the first section:\n%s", h);
    MM_EXPECT(strstr(h, "\n  -n, --name NAME   a name\n"), "short alias and column 20:\n%s", h);
    MM_EXPECT(strstr(h, "\n  -c, --count N     how many (also --number)\n"), "long aliases listed:\n%s", h);
    MM_EXPECT(strstr(h, "\n      --ratio R     a ratio\n"), "long-only rows indented past \"-x, \":\n%s", h);
    MM_EXPECT(strstr(h, "\nswitches\n  -f, --fast        go fast\n"), "second section:\n%s", h);
    MM_EXPECT(strstr(h, "--mode M") && strstr(h, "--item X") && !strstr(h, "--secret"), "rows; hidden ones left out");
    MM_EXPECT(strstr(h, "--preset [P]"), "an optional value is shown in brackets:\n%s", h);
    MM_EXPECT(strstr(h, "  -h, --help        this text\n"), "help row:\n%s", h);
    /* long help wraps under the text column */
    mm_flag rows[] = {
        {"--long-one", NULL, MM_FLAG_TRUE, &t.o.fast,
         .help = "word word word word word word word word word word word word word word word word word word word "
                 "word word word word word word word word word word word word word word word word"},
        {"--help", "-h", MM_FLAG_HELP, NULL, .help = "this text"},
    };
    char buf[2048] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    const mm_flags_cmd cmd = {.prog = "x", .rows = rows, .n_rows = MM_FLAGS_COUNT(rows), .help_column = 16};
    mm_flags_help(&cmd, f);
    fclose(f);
    bool wrapped = strstr(buf, "\n                word") != NULL;
    int widest = 0;
    for (char *p = buf; *p;) {
        int n = (int)strcspn(p, "\n");
        widest = n > widest ? n : widest;
        p += n + (p[n] == '\n');
    }
    MM_EXPECT(wrapped && widest <= 110, "wrapped at 110 under column 16 (widest %d):\n%s", widest, buf);
    MM_EXPECT(strstr(buf, "\n  --help        this text (also -h)\n"), "no short flags: -h listed as an alias:\n%s", buf);
}

/* The engine rows of each command, and their checks. */
static bool has_row(const mm_flag *rows, int n, const char *name, const char *alias)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0)
            return alias ? rows[i].alias && strcmp(rows[i].alias, alias) == 0 : true;
    return false;
}

static void test_engine_flags_per_command(void)
{
    mm_engine_options eo;
    mm_engine_options_defaults(&eo);
    mm_flag gen[MM_ENGINE_FLAGS_MAX], wrk[MM_ENGINE_FLAGS_MAX], srv[MM_ENGINE_FLAGS_MAX];
    int ng = mm_engine_flags_rows(MM_ENGINE_CMD_GENERATE, &eo, gen);
    int nw = mm_engine_flags_rows(MM_ENGINE_CMD_WORKER, &eo, wrk);
    int ns = mm_engine_flags_rows(MM_ENGINE_CMD_SERVE, &eo, srv);
    MM_EXPECT(has_row(gen, ng, "--dtype", NULL) && !has_row(gen, ng, "--preload", NULL), "generate: --dtype, no --preload");
    MM_EXPECT(has_row(wrk, nw, "--preload", NULL) && !has_row(wrk, nw, "--dtype", NULL), "worker: --preload");
    MM_EXPECT(has_row(gen, ng, "--threads", "--cpu-threads") && has_row(wrk, nw, "--threads", "--cpu-threads"),
              "generate and worker: --threads, also --cpu-threads");
    MM_EXPECT(has_row(srv, ns, "--cpu-threads", NULL) && !has_row(srv, ns, "--threads", NULL),
              "serve: --cpu-threads only (its --threads is the FastCGI pool's)");
    MM_EXPECT(has_row(srv, ns, "--models-path", "--checkpoints --models"), "--models-path with both aliases");
    for (int i = 0; i < ns; i++)
        MM_EXPECT(mm_engine_flags_owns(srv[i].id) && mm_engine_flags_worker_name(srv[i].id),
                  "%s carries its MM_EF_ id, which the worker takes", srv[i].name);
    /* what serve passes on is the worker's spelling */
    const char *t = mm_engine_flags_worker_name(MM_EF_THREADS), *m = mm_engine_flags_worker_name(MM_EF_MODELS);
    MM_EXPECT(t && strcmp(t, "--threads") == 0 && m && strcmp(m, "--models-path") == 0, "%s %s", t, m);

    /* Through the parser, as generate uses them. */
    char err[1024] = "";
    FILE *f = fmemopen(err, sizeof err - 1, "w");
    const mm_flag rows[] = {{.kind = MM_FLAG_GROUP, .rows = gen, .n_rows = ng}};
    const mm_flags_cmd cmd = {.prog = "mmh3 generate", .rows = rows, .n_rows = 1, .err = f};
    char a1[] = "x", a2[] = "--cpu-threads=3", a3[] = "--checkpoints", a4[] = "/m", a5[] = "--device", a6[] = "cuda:1",
         a7[] = "--ref-kv-cache", a8[] = "--dit-ref2va-path", a9[] = "r.safetensors";
    char *argv[] = {a1, a2, a3, a4, a5, a6, a7, a8, a9, NULL};
    mm_flags_result r = mm_flags_parse(&cmd, 9, argv);
    MM_EXPECT(r == MM_FLAGS_RUN && eo.h3.threads == 3 && strcmp(eo.h3.checkpoints.models_path, "/m") == 0 &&
                  strcmp(eo.h3.device, "cuda:1") == 0 && eo.h3.ref_kv_cache &&
                  strcmp(eo.h3.checkpoints.override[MM_COMP_DIT_REF2VA], "r.safetensors") == 0,
              "applied: %s", err);
    const char *bad[][3] = {
        {"--device", "gpu7", "mmh3 generate: --device gpu7: not a device; accepted: auto, cpu, cuda, cuda:N\n"},
        {"--gpus", "0", "mmh3 generate: --gpus 0: out of range; accepted: 1..64 GPUs dividing the DiT's head count "
                        "(H3: 1, 2, 4, 7, 8)\n"},
        {"--ref-short-edge", "100", "mmh3 generate: --ref-short-edge 100: out of range; accepted: a multiple of 32 in "
                                    "64..4096\n"},
        {"--dtype", "fp32", "mmh3 generate: --dtype fp32: not available for the int8 ConvRot checkpoints; accepted: "
                            "bf16 (the released DiT computes in bf16 with int8 weights)\n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rewind(f);
        memset(err, 0, sizeof err);
        char b1[64], b2[64];
        snprintf(b1, sizeof b1, "%s", bad[i][0]);
        snprintf(b2, sizeof b2, "%s", bad[i][1]);
        char *av[] = {a1, b1, b2, NULL};
        r = mm_flags_parse(&cmd, 3, av);
        fflush(f);
        MM_EXPECT(r == MM_FLAGS_BAD && strcmp(err, bad[i][2]) == 0, "%s %s:\n  %s", bad[i][0], bad[i][1], err);
    }
    fclose(f);
    /* the environment stands in for the edge flags, checked alike */
    mm_engine_options_defaults(&eo);
    setenv("MMH3_REF_SHORT_EDGE", "100", 1);
    mm_error e = {{0}};
    MM_EXPECT(mm_engine_flags_finish(&eo, &e) < 0 && strstr(e.msg, "MMH3_REF_SHORT_EDGE=100 (environment)"), "%s",
              e.msg);
    setenv("MMH3_REF_SHORT_EDGE", "96", 1);
    MM_EXPECT(mm_engine_flags_finish(&eo, &e) == 0 && eo.h3.ref_image_short_edge == 96, "env edge applied");
    unsetenv("MMH3_REF_SHORT_EDGE");
}

int main(void)
{
    MM_RUN(test_values_in_every_spelling);
    MM_RUN(test_aliases_and_prefixes);
    MM_RUN(test_every_refusal_says_what_is_accepted);
    MM_RUN(test_refusals_stop_at_the_first_and_flags_beat_strays);
    MM_RUN(test_help_comes_from_the_table);
    MM_RUN(test_engine_flags_per_command);
    return mm_test_exit();
}
