#include "engine/lora_catalog.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "model/lora/lora.h"
#include "sampler/schedule.h"

/* The SiLU(temb) grids AdaLN adapters read (h3_silu_temb_grid[_PARTITION]). */
static bool is_support_file(const char *name)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    return strncmp(base, "h3_silu_temb_grid", 17) == 0;
}

static void fnv(uint64_t *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ p[i]) * 1099511628211ull;
}

int mm_lora_catalog_fingerprint(const char *models_path, uint64_t *out, mm_error *err)
{
    char dir[1100], path[2300];
    char **names = NULL;
    int n = 0;
    if (mm_lora_list(models_path, &names, &n, err) != 0)
        return -1;
    mm_lora_dir(models_path, dir, sizeof dir);
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < n; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        long long facts[3] = {0, 0, 0};
        if (stat(path, &st) == 0)
            facts[0] = (long long)st.st_size, facts[1] = (long long)st.st_mtim.tv_sec,
            facts[2] = (long long)st.st_mtim.tv_nsec;
        fnv(&h, names[i], strlen(names[i]) + 1);
        fnv(&h, facts, sizeof facts);
    }
    mm_lora_list_free(names, n);
    *out = h;
    return 0;
}

/* msg with every "<dir>/" removed: users see names, not the server's folders. */
static void relative_message(char *msg, const char *dir)
{
    size_t n = strlen(dir);
    for (char *at = msg; n && (at = strstr(at, dir));) {
        if (at[n] == '/')
            memmove(at, at + n + 1, strlen(at + n + 1) + 1);
        else
            at += n;
    }
}

static const char *lora_meta(void *user, const char *key) { return mm_lora_metadata(user, key); }

/* What the header says about the sampler: its preset name and forwards. */
static void entry_preset(json_t *o, mm_lora *l, const char *dir)
{
    mm_schedule s;
    bool found = false;
    mm_error err = {{0}};
    if (mm_schedule_from_adapter(l->name, lora_meta, l, &s, &found, &err) != 0) {
        relative_message(err.msg, dir);
        json_object_set_new(o, "error", json_string(err.msg));
        return;
    }
    if (!found)
        return;
    json_object_set_new(o, "preset", json_string(s.name));
    json_object_set_new(o, "forwards", json_integer(mm_schedule_forwards(&s)));
    mm_schedule_free(&s);
}

static json_t *entry_json(const char *dir, const char *name)
{
    char path[2300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_t *o = json_pack("{s:s}", "name", name);
    struct stat st;
    if (stat(path, &st) == 0)
        json_object_set_new(o, "bytes", json_integer((json_int_t)st.st_size));
    mm_lora *l = NULL;
    mm_error err = {{0}};
    mm_lora_open_opts opts = {.header_only = true};
    if (mm_lora_open(&l, path, &opts, &err) != 0) {
        relative_message(err.msg, dir);
        json_object_set_new(o, "error", json_string(err.msg));
        return o;
    }
    const mm_lora_summary *s = &l->summary;
    json_object_set_new(o, "family", json_string(s->family));
    json_object_set_new(o, "rank", json_integer(s->rank_max));
    json_object_set_new(o, "alpha", json_real(s->alpha_max));
    json_object_set_new(o, "targets", json_string(s->targets));
    json_t *w = json_array();
    for (int i = 0; i < s->n_warnings; i++)
        json_array_append_new(w, json_string(s->warnings[i]));
    json_object_set_new(o, "warnings", w);
    entry_preset(o, l, dir);
    mm_lora_free(l);
    return o;
}

int mm_lora_catalog_scan(const char *models_path, json_t **out, mm_error *err)
{
    char dir[1100];
    char **names = NULL;
    int n = 0;
    if (mm_lora_list(models_path, &names, &n, err) != 0)
        return -1;
    mm_lora_dir(models_path, dir, sizeof dir);
    json_t *list = json_array();
    for (int i = 0; i < n; i++)
        if (!is_support_file(names[i]))
            json_array_append_new(list, entry_json(dir, names[i]));
    mm_lora_list_free(names, n);
    *out = list;
    return 0;
}

const char *mm_lora_catalog_dir(const char *models_path, char *buf, size_t n)
{
    return mm_lora_dir(models_path, buf, n);
}
