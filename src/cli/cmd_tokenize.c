/* mmh3 tokenize: JSON lines of text on stdin -> one JSON array of token ids
 * per line on stdout, the way the engine tokenizes prompt text (no special
 * tokens added). Anyone can check our agreement with Hugging Face on their own
 * corpus with it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "model/text/tokenizer.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mmh3 tokenize [--tokenizer PATH] [--no-added-tokens]\n"
            "\n"
            "Reads JSON lines on stdin, each a JSON string or an object with a string\n"
            "\"text\" field (other fields are ignored), and prints one JSON array of\n"
            "token ids per line. No special tokens are added; added tokens written in\n"
            "the text (<d>, <|vision_start|>, ...) become their ids unless\n"
            "--no-added-tokens is given.\n"
            "\n"
            "  --tokenizer PATH    a tokenizer.json, or a folder holding tokenizer.json or\n"
            "                      vocab.json + merges.txt (with tokenizer_config.json);\n"
            "                      default: $MMH3_TOKENIZER\n"
            "  --no-added-tokens   treat added/special token text as ordinary text\n"
            "\n"
            "Exit status: 0 when every line was tokenized; 1 at the first line that is\n"
            "not valid JSON, not valid UTF-8, or not a string / {\"text\": string}\n"
            "(the message names the line); 2 on a usage error.\n");
}

static int write_ids(const mm_token_ids *ids)
{
    putchar('[');
    for (size_t i = 0; i < ids->n; i++)
        printf(i ? ",%d" : "%d", (int)ids->v[i]);
    putchar(']');
    putchar('\n');
    return ferror(stdout) ? -1 : 0;
}

static int tokenize_stream(const mm_tokenizer *tok, bool match_added, FILE *in)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    mm_token_ids ids = {0};
    int status = 0;
    for (size_t lineno = 1; (len = getline(&line, &cap, in)) >= 0; lineno++) {
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        if (len > 0 && line[len - 1] == '\r')
            line[--len] = '\0';
        json_error_t je;
        json_t *v = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!v) {
            fprintf(stderr, "mmh3 tokenize: line %zu, column %d: %s\n", lineno, je.column, je.text);
            status = 1;
            break;
        }
        const json_t *text = json_is_object(v) ? json_object_get(v, "text") : v;
        if (!json_is_string(text)) {
            fprintf(stderr,
                    "mmh3 tokenize: line %zu: expected a JSON string or an object with a string \"text\" field\n",
                    lineno);
            json_decref(v);
            status = 1;
            break;
        }
        mm_error err = {{0}};
        ids.n = 0;
        int rc = mm_tokenizer_encode(tok, json_string_value(text), json_string_length(text), match_added, &ids, &err);
        json_decref(v);
        if (rc) {
            fprintf(stderr, "mmh3 tokenize: line %zu: %s\n", lineno, err.msg);
            status = 1;
            break;
        }
        if (write_ids(&ids) || fflush(stdout)) {
            perror("mmh3 tokenize: stdout");
            status = 1;
            break;
        }
    }
    if (status == 0 && ferror(in)) {
        perror("mmh3 tokenize: stdin");
        status = 1;
    }
    free(line);
    mm_token_ids_free(&ids);
    return status;
}

int mm_cmd_tokenize(int argc, char **argv)
{
    const char *path = getenv("MMH3_TOKENIZER");
    bool match_added = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else if (strncmp(argv[i], "--tokenizer=", 12) == 0) {
            path = argv[i] + 12;
        } else if (strcmp(argv[i], "--no-added-tokens") == 0) {
            match_added = false;
        } else {
            fprintf(stderr, "mmh3 tokenize: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!path || !*path) {
        fprintf(stderr, "mmh3 tokenize: no tokenizer given: pass --tokenizer PATH (a tokenizer.json, or a folder with "
                        "tokenizer.json or vocab.json + merges.txt) or set MMH3_TOKENIZER\n");
        return 2;
    }
    mm_error err = {{0}};
    mm_tokenizer *tok;
    if (mm_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "mmh3 tokenize: %s\n", err.msg);
        return 1;
    }
    int status = tokenize_stream(tok, match_added, stdin);
    mm_tokenizer_free(tok);
    return status;
}
