/* `mmh3 tokenize`, run as a program: agreement on the corpora through the
 * command line, both input line forms, options, and the error exits. */
#include <jansson.h>
#include <libgen.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "test_text_tokenizer_data.h"

static char mmh3[4096];
static char tmp[256];

typedef struct {
    int status; /* exit status, or -1 */
    char *out, *err;
    size_t out_len;
} result;

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap + 1);
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

/* Runs `ENV mmh3 tokenize ARGS` with INPUT on stdin (a file when INPUT_FILE). */
static result run(const char *env, const char *args, const char *input, size_t input_len, const char *input_file)
{
    result r = {-1, NULL, NULL, 0};
    char in[512], out[512], err[512], cmd[16384];
    snprintf(in, sizeof in, "%s/in", tmp);
    snprintf(out, sizeof out, "%s/out", tmp);
    snprintf(err, sizeof err, "%s/err", tmp);
    if (!input_file) {
        FILE *f = fopen(in, "wb");
        if (!f || fwrite(input, 1, input_len, f) != input_len || fclose(f))
            return r;
        input_file = in;
    }
    snprintf(cmd, sizeof cmd, "%s '%s' tokenize %s < '%s' > '%s' 2> '%s'", env ? env : "", mmh3, args, input_file,
             out, err);
    int st = system(cmd);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = slurp(out, &r.out_len);
    r.err = slurp(err, NULL);
    return r;
}

static void result_free(result *r)
{
    free(r->out);
    free(r->err);
}

static char tokenizer_arg[4200];

static void check_corpus_via_cli(const char *file)
{
    char path[4096];
    tt_data_path(path, sizeof path, file);
    result r = run("", tokenizer_arg, NULL, 0, path);
    MM_REQUIRE(r.status == 0, "%s: exit %d: %s", file, r.status, r.err ? r.err : "");
    FILE *f = fopen(path, "rb");
    MM_REQUIRE(f && r.out, "cannot read %s or the output", path);
    char *line = NULL, *cursor = r.out;
    size_t cap = 0, n = 0, bad = 0;
    while (getline(&line, &cap, f) >= 0) {
        n++;
        json_t *o = json_loads(line, JSON_ALLOW_NUL, NULL);
        char *nl = strchr(cursor, '\n');
        if (!nl) {
            MM_EXPECT(0, "%s: output ends at line %zu", file, n);
            json_decref(o);
            bad++;
            break;
        }
        json_t *got = json_loadb(cursor, (size_t)(nl - cursor), 0, NULL);
        cursor = nl + 1;
        if (!json_equal(got, json_object_get(o, "ids")) && bad++ < 3)
            MM_EXPECT(0, "%s:%zu: ids differ", file, n);
        json_decref(got);
        json_decref(o);
    }
    free(line);
    fclose(f);
    MM_EXPECT(*cursor == '\0', "%s: extra output", file);
    MM_EXPECT(n > 0 && bad == 0, "%s: %zu of %zu lines differ", file, bad, n);
    result_free(&r);
}

static void test_corpus(void) { check_corpus_via_cli("corpus.jsonl"); }
static void test_hard_cases(void) { check_corpus_via_cli("hard_cases.jsonl"); }

static void test_line_forms_and_options(void)
{
    const char in[] = "\"Hello world\"\n{\"text\": \"<d>\", \"ids\": [1]}\r\n\"\"\n";
    result r = run("", tokenizer_arg, in, sizeof in - 1, NULL);
    MM_EXPECT(r.status == 0 && r.out && strcmp(r.out, "[9707,1879]\n[151669]\n[]\n") == 0, "got status %d: %s",
              r.status, r.out ? r.out : "");
    result_free(&r);
    r = run("", "--no-added-tokens", "\"<d>\"\n", 6, NULL); /* path from the environment below is not set */
    MM_EXPECT(r.status == 2 && r.err && strstr(r.err, "--tokenizer") && strstr(r.err, "MMH3_TOKENIZER"),
              "no tokenizer: status %d, %s", r.status, r.err ? r.err : "");
    result_free(&r);
    char env[4300];
    snprintf(env, sizeof env, "MMH3_TOKENIZER='%s'", tt_release_dir());
    r = run(env, "--no-added-tokens", "\"<d>\"\n", 6, NULL);
    MM_EXPECT(r.status == 0 && r.out && strcmp(r.out, "[90707,29]\n") == 0, "MMH3_TOKENIZER + --no-added-tokens: %d %s",
              r.status, r.out ? r.out : "");
    result_free(&r);
    r = run("", "--help", "", 0, NULL);
    MM_EXPECT(r.status == 0 && r.out && strstr(r.out, "usage: mmh3 tokenize"), "--help");
    result_free(&r);
    r = run("", "--bogus", "", 0, NULL);
    MM_EXPECT(r.status == 2 && r.err && strstr(r.err, "--bogus"), "unknown option: %d", r.status);
    result_free(&r);
    r = run("", "--tokenizer /nonexistent/tok", "\"a\"\n", 4, NULL);
    MM_EXPECT(r.status == 1 && r.err && strstr(r.err, "/nonexistent/tok"), "bad path: %d %s", r.status,
              r.err ? r.err : "");
    result_free(&r);
}

static void test_bad_input(void)
{
    static const struct {
        const char *input;
        size_t len;
        const char *line; /* "line N" expected in the message */
        const char *why;  /* and this */
        size_t lines_out; /* lines printed before stopping */
    } cases[] = {
        {"\"ok\"\n{\"text\": 5}\n", 17, "line 2", "\"text\"", 1},
        {"\"ok\"\n\"ok\"\nnot json\n", 18, "line 3", "invalid", 2},
        {"\"a\"\n\"\xff\"\n", 8, "line 2", "0xff", 1},                     /* invalid UTF-8 bytes */
        {"\"\xed\xa0\x80\"\n", 6, "line 1", "", 0},                         /* encoded surrogate */
        {"\"\\ud800\"\n", 9, "line 1", "Unicode", 0},                       /* lone surrogate escape */
        {"42\n", 3, "line 1", "string", 0},
        {"{\"txt\": \"a\"}\n", 13, "line 1", "\"text\"", 0},
        {"\"a\"\n\n\"b\"\n", 9, "line 2", "", 1},                           /* empty line */
        {"[\"a\"]\n", 6, "line 1", "string", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        result r = run("", tokenizer_arg, cases[i].input, cases[i].len, NULL);
        size_t lines = 0;
        for (const char *p = r.out; p && *p; p++)
            lines += *p == '\n';
        MM_EXPECT(r.status == 1 && r.err && strstr(r.err, cases[i].line) && strstr(r.err, cases[i].why) &&
                      lines == cases[i].lines_out,
                  "case %zu: status %d, %zu lines out, stderr: %s", i, r.status, lines, r.err ? r.err : "");
        result_free(&r);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *build = getenv("MMH3_BUILD");
    if (build && *build) {
        snprintf(mmh3, sizeof mmh3, "%s/mmh3", build);
    } else { /* build/tests/unit/test_x -> build/mmh3 */
        char self[4096];
        snprintf(self, sizeof self, "%s", argv[0]);
        snprintf(mmh3, sizeof mmh3, "%s/../../mmh3", dirname(self));
    }
    snprintf(tmp, sizeof tmp, "/tmp/mmh3-tokcli-XXXXXX");
    const char *rel = tt_release_dir();
    if (!mkdtemp(tmp) || access(mmh3, X_OK) != 0 || !rel) {
        printf("FAIL setup: temp folder, %s or the release tokenizer (../shared/minimax-h3/FL2VA/tokenizer) "
               "missing\n", mmh3);
        return 1;
    }
    snprintf(tokenizer_arg, sizeof tokenizer_arg, "--tokenizer '%s'", rel);
    unsetenv("MMH3_TOKENIZER");
    MM_RUN(test_corpus);
    MM_RUN(test_hard_cases);
    MM_RUN(test_line_forms_and_options);
    MM_RUN(test_bad_input);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        printf("       could not remove %s\n", tmp);
    return mm_test_exit();
}
