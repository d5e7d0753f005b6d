/* The settings table: named JSON values set through PUT /api/settings (the
 * Oxen API key, the prompt rewrite's switches). */
#ifndef MMH3_STORE_SETTINGS_H
#define MMH3_STORE_SETTINGS_H

#include <jansson.h>
#include <libpq-fe.h>

#include "core/error.h"

/* The values of the settings named in keys (those that are set) as one JSON
 * object (caller decrefs). */
int mm_store_settings_get(PGconn *c, const char *const *keys, int n, json_t **values, mm_error *err);
/* One setting as text (a JSON string's contents, else the JSON text); *text
 * is NULL when it is not set (caller frees, and wipes secrets). */
int mm_store_setting_text(PGconn *c, const char *key, char **text, mm_error *err);
/* Applies an object's members in one transaction: null removes the setting,
 * any other value sets it. */
int mm_store_settings_put(PGconn *c, json_t *changes, mm_error *err);

#endif
