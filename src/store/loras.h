/* The adapter catalogue (sql/007_loras.sql): what a worker found in
 * $MODELS_PATH/loras, for the API, which cannot read the files itself. */
#ifndef MMH3_STORE_LORAS_H
#define MMH3_STORE_LORAS_H

#include <stdbool.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "core/error.h"

/* Replaces the catalogue with entries (a JSON array of objects: name,
 * family, rank, alpha, targets, bytes, preset, forwards, warnings, error;
 * absent members are NULL or empty) in one transaction, and records who
 * published it. */
int mm_store_loras_publish(PGconn *c, const char *worker_id, json_t *entries, mm_error *err);

/* The catalogue as GET /api/loras returns it (docs/API.md): {"published":
 * bool, "published_at", "worker_id", "loras": [...]} (caller frees). */
int mm_store_loras_json(PGconn *c, char **json, mm_error *err);

/* The names of the catalogue, sorted (caller frees each and the array);
 * *published false (and no names) when no worker has published one. */
int mm_store_lora_names(PGconn *c, bool *published, char ***names, int *n, mm_error *err);
void mm_store_lora_names_free(char **names, int n);

#endif
