/* From what a user types (`--lora NAME[:STRENGTH]`, an API's name) to an
 * adapter file: $MODELS_PATH/loras/ is ComfyUI's folder for them. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "model/lora/lora.h"

int mm_lora_parse_spec(const char *spec, char *name, size_t n, float *strength, mm_error *err)
{
    *strength = 1.0f;
    if (!spec || !*spec)
        return mm_fail(err, "--lora needs a file or a name, optionally followed by :STRENGTH (e.g. turbo.safetensors:0.8)");
    size_t len = strlen(spec);
    const char *colon = strrchr(spec, ':');
    if (colon && colon[1]) {
        char *end;
        errno = 0;
        double v = strtod(colon + 1, &end);
        if (*end == 0 && end != colon + 1 && errno == 0) {
            if (!isfinite(v) || fabs(v) > 100)
                return mm_fail(err, "--lora %s: strength %s is not a number between -100 and 100", spec, colon + 1);
            *strength = (float)v;
            len = (size_t)(colon - spec);
        }
    }
    if (len == 0)
        return mm_fail(err, "--lora %s: no file or name before the strength", spec);
    if (len >= n)
        return mm_fail(err, "--lora: the name is longer than %zu characters", n - 1);
    memcpy(name, spec, len);
    name[len] = 0;
    return 0;
}

const char *mm_lora_dir(const char *models_path, char *buf, size_t n)
{
    char models[1024];
    mm_checkpoint_opts o = {0};
    o.models_path = models_path;
    mm_checkpoint_models_path(&o, models, sizeof models);
    snprintf(buf, n, "%s/loras", models);
    return buf;
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool has_extension(const char *name)
{
    const char *slash = strrchr(name, '/'), *dot = strrchr(name, '.');
    return dot && (!slash || dot > slash);
}

/* No absolute names, no ".." component, nothing empty. */
static bool stays_inside(const char *name)
{
    if (!*name || name[0] == '/')
        return false;
    for (const char *p = name; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += len + (e ? 1 : 0);
    }
    return true;
}

static int found(const char *p, char *path, size_t n, mm_error *err)
{
    if ((size_t)snprintf(path, n, "%s", p) >= n)
        return mm_fail(err, "LoRA adapter path too long: %s", p);
    return 0;
}

int mm_lora_resolve(const char *name, const char *models_path, bool allow_paths, char *path, size_t n,
                    mm_error *err)
{
    /* a path (CLI): anything with a '/' that exists as given */
    if (allow_paths && strchr(name, '/') && is_file(name))
        return found(name, path, n, err);
    char dir[1100];
    mm_lora_dir(models_path, dir, sizeof dir);
    char a[2300], b[2300];
    snprintf(a, sizeof a, "%s/%s", dir, name);
    snprintf(b, sizeof b, "%s/%s.safetensors", dir, name);
    if (stays_inside(name)) {
        if (is_file(a))
            return found(a, path, n, err);
        if (!has_extension(name) && is_file(b))
            return found(b, path, n, err);
    } else if (!allow_paths) {
        return mm_fail(err, "LoRA adapter \"%s\": a name is a file under %s (no '..', no leading '/')", name, dir);
    }
    /* a bare file name in the working directory (CLI) */
    if (allow_paths && is_file(name))
        return found(name, path, n, err);
    return mm_fail(err, "LoRA adapter \"%s\" not found; looked for %s%s%s (put adapters in %s, ComfyUI's folder%s)",
                   name, a, has_extension(name) ? "" : " and " , has_extension(name) ? "" : b, dir,
                   allow_paths ? ", or give a path" : "");
}

typedef struct name_list {
    char **v;
    int n, cap;
} name_list;

static int push_name(name_list *l, const char *name, mm_error *err)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        char **nv = realloc(l->v, sizeof *nv * (size_t)cap);
        if (!nv)
            return mm_fail(err, "out of memory");
        l->v = nv;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(name)))
        return mm_fail(err, "out of memory");
    l->n++;
    return 0;
}

static bool is_adapter_file(const char *name)
{
    size_t n = strlen(name);
    return n > 12 && strcmp(name + n - 12, ".safetensors") == 0 && name[0] != '.';
}

static int scan(const char *root, const char *rel, int depth, name_list *out, mm_error *err)
{
    char dir[2400];
    snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[1200], full[3700];
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat sb;
        if (stat(full, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode) && depth < 4)
            rc = scan(root, sub, depth + 1, out, err);
        else if (S_ISREG(sb.st_mode) && is_adapter_file(e->d_name))
            rc = push_name(out, sub, err);
    }
    closedir(d);
    return rc;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int mm_lora_list(const char *models_path, char ***names, int *n, mm_error *err)
{
    char dir[1100];
    mm_lora_dir(models_path, dir, sizeof dir);
    name_list l = {0};
    if (scan(dir, "", 0, &l, err) != 0) {
        mm_lora_list_free(l.v, l.n);
        return -1;
    }
    if (l.n > 1) /* qsort's base must not be NULL, even for zero elements */
        qsort(l.v, (size_t)l.n, sizeof *l.v, name_cmp);
    *names = l.v;
    *n = l.n;
    return 0;
}

void mm_lora_list_free(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}
