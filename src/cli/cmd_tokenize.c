/* mmh3 tokenize — placeholder until its owner lands the real command. */
#include <stdio.h>

#include "cli/commands.h"

int mm_cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mmh3 tokenize: not built yet in this version\n");
    return 1;
}
