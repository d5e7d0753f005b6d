/* mmh3 worker — placeholder until its owner lands the real command. */
#include <stdio.h>

#include "cli/commands.h"

int mm_cmd_worker(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mmh3 worker: not built yet in this version\n");
    return 1;
}
