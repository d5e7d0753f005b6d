/* mmh3 conformance — placeholder until its owner lands the real command. */
#include <stdio.h>

#include "cli/commands.h"

int mm_cmd_conformance(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mmh3 conformance: not built yet in this version\n");
    return 1;
}
