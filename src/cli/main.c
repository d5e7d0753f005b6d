/* mmh3 — local inference for MiniMax-H3. Dispatches to one command. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"check", mm_cmd_check, "resolve checkpoints, read headers, report GPUs and placement (fast)"},
    {"generate", mm_cmd_generate, "render one clip (video + audio) to mp4"},
    {"serve", mm_cmd_serve, "run the web app: PostgreSQL, FastCGI pool, GPU worker, nginx"},
    {"worker", mm_cmd_worker, "the GPU worker process (started by serve; one per GPU host)"},
    {"token", mm_cmd_token, "access tokens of the HTTP API: create, list, revoke"},
    {"db", mm_cmd_db, "psql on the queue's database (the view `queue`: status, stage, times, prompt)"},
    {"tokenize", mm_cmd_tokenize, "JSON lines of text on stdin -> token id arrays on stdout"},
    {"conformance", mm_cmd_conformance, "run a conformance kit against the engine"},
    {"convert", mm_cmd_convert, "a dense DiT (bf16/f32, + FastVideo deltas) -> the int8 ConvRot file mmh3 loads"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: mmh3 <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`mmh3 <command> --help` describes each command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("mmh3 %s\n", PACKAGE_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mmh3: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
