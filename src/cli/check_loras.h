/* `mmh3 check`'s listing of the adapters in $MODELS_PATH/loras. */
#ifndef MMH3_CLI_CHECK_LORAS_H
#define MMH3_CLI_CHECK_LORAS_H

#include <jansson.h>
#include <stdio.h>

#include "model/dit/config.h"

/* Lists every adapter with its summary, each checked against `dit` (NULL:
 * no DiT found, headers only). json: sets "lora_dir" and "loras" (an array
 * of objects) on it; text: the report lines to it. Either may be NULL. */
void mm_check_loras(const char *models_path, const mm_dit_config *dit, json_t *json, FILE *text);

#endif
