/* The list of outputs a run keeps for --out (private to src/conformance). */
#ifndef MMH3_CONFORMANCE_OUTPUT_H
#define MMH3_CONFORMANCE_OUTPUT_H

#include "conformance/conformance.h"

struct mm_conf_output {
    char *name;
    mm_tensor t;
    mm_conf_output *next;
};

#endif
