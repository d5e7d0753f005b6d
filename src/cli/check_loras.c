/* The "loras" section of `mmh3 check`: every adapter in $MODELS_PATH/loras
 * with what its header says (model/lora/lora.h: family, spelling, ranks,
 * alphas, targets, hints, warnings) and whether it fits the DiT that was
 * found. Headers only. Adapters are optional, so a bad one is reported
 * ("bad") without failing the check: it fails where it is used. */
#include "cli/check_loras.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/lora/lora.h"

typedef struct entry {
    char name[1024], path[2200];
    mm_lora *l;
    char error[MM_ERROR_MAX];
} entry;

static void inspect(entry *e, const mm_dit_config *dit)
{
    mm_error err = {{0}};
    mm_lora_open_opts o = {.header_only = true};
    if (mm_lora_open(&e->l, e->path, &o, &err) != 0 || (dit && mm_lora_fit(e->l, dit, &err) != 0))
        snprintf(e->error, sizeof e->error, "%s", err.msg);
}

static json_t *entry_json(const entry *e)
{
    json_t *o = json_pack("{s:s, s:s, s:b}", "name", e->name, "path", e->path, "ok", e->error[0] == 0);
    if (e->error[0])
        json_object_set_new(o, "error", json_string(e->error));
    if (!e->l)
        return o;
    const mm_lora_summary *s = &e->l->summary;
    json_object_set_new(o, "family", json_string(s->family));
    json_object_set_new(o, "spelling", json_string(s->spelling));
    json_object_set_new(o, "modules", json_integer(s->modules));
    json_object_set_new(o, "rank_min", json_integer(s->rank_min));
    json_object_set_new(o, "rank_max", json_integer(s->rank_max));
    json_object_set_new(o, "alpha_min", json_real(s->alpha_min));
    json_object_set_new(o, "alpha_max", json_real(s->alpha_max));
    json_object_set_new(o, "alpha_from", json_string(s->alpha_note));
    json_object_set_new(o, "targets", json_string(s->targets));
    json_object_set_new(o, "hint", json_string(s->hint));
    json_t *w = json_array();
    for (int i = 0; i < s->n_warnings; i++)
        json_array_append_new(w, json_string(s->warnings[i]));
    json_object_set_new(o, "warnings", w);
    return o;
}

static void entry_print(FILE *f, const entry *e)
{
    if (!e->l) {
        fprintf(f, "  bad   %s\n        %s\n", e->name, e->error);
        return;
    }
    const mm_lora_summary *s = &e->l->summary;
    fprintf(f, "  %s  %s  %s, rank %d", e->error[0] ? "bad " : "ok  ", e->name, s->family, s->rank_min);
    if (s->rank_max != s->rank_min)
        fprintf(f, "..%d", s->rank_max);
    fprintf(f, ", alpha %g", s->alpha_min);
    if (s->alpha_max != s->alpha_min)
        fprintf(f, "..%g", s->alpha_max);
    fprintf(f, " (%s)\n        %s; %d modules: %s\n", s->alpha_note, s->spelling, s->modules, s->targets);
    if (s->hint[0])
        fprintf(f, "        hint: %s\n", s->hint);
    for (int i = 0; i < s->n_warnings; i++)
        fprintf(f, "        warning: %s\n", s->warnings[i]);
    if (e->error[0])
        fprintf(f, "        %s\n", e->error);
}

void mm_check_loras(const char *models_path, const mm_dit_config *dit, json_t *json, FILE *text)
{
    char dir[1100];
    mm_lora_dir(models_path, dir, sizeof dir);
    char **names = NULL;
    int n = 0;
    mm_error err = {{0}};
    int rc = mm_lora_list(models_path, &names, &n, &err);
    json_t *list = json ? json_array() : NULL;
    if (text)
        fprintf(text, "loras (%s)\n", dir);
    if (rc != 0 && text)
        fprintf(text, "  bad   %s\n", err.msg);
    if (rc == 0 && n == 0 && text)
        fprintf(text, "  none  (LoRA adapters go in this folder, ComfyUI's layout; mmh3 generate --lora NAME)\n");
    for (int i = 0; i < n; i++) {
        entry e = {0};
        snprintf(e.name, sizeof e.name, "%s", names[i]);
        snprintf(e.path, sizeof e.path, "%s/%s", dir, names[i]);
        inspect(&e, dit);
        if (list)
            json_array_append_new(list, entry_json(&e));
        if (text)
            entry_print(text, &e);
        mm_lora_free(e.l);
    }
    if (json) {
        json_object_set_new(json, "lora_dir", json_string(dir));
        json_object_set_new(json, "loras", list);
    }
    mm_lora_list_free(names, n);
}
