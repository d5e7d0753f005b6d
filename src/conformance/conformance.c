#include "conformance/conformance.h"
#include "conformance/output.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MM_CONF_KIT(name, fn) int fn(mm_conf_run *run, mm_error *err);
#include "conformance/kits.h"
#undef MM_CONF_KIT

static const struct {
    const char *name;
    mm_conf_kit_fn run;
} kits[] = {
#define MM_CONF_KIT(name, fn) {name, fn},
#include "conformance/kits.h"
#undef MM_CONF_KIT
};


static void free_outputs(mm_conf_output *o)
{
    while (o) {
        mm_conf_output *next = o->next;
        mm_tensor_free(&o->t);
        free(o->name);
        free(o);
        o = next;
    }
}

static int save_outputs(const mm_conf_run *r, const char *path, mm_error *err)
{
    size_t n = 0;
    for (const mm_conf_output *o = r->outputs; o; o = o->next)
        n++;
    const char **names = calloc(n ? n : 1, sizeof *names);
    mm_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    if (!names || !ts) {
        free(names);
        free(ts);
        return mm_fail(err, "out of memory");
    }
    size_t i = 0;
    for (const mm_conf_output *o = r->outputs; o; o = o->next, i++) {
        names[i] = o->name;
        ts[i] = o->t;
    }
    int rc = mm_st_save(path, n, names, ts, err);
    free(names);
    free(ts);
    return rc;
}

int mm_conformance_run(const char *kit_dir, const mm_conf_options *opts, bool *all_passed, mm_error *err)
{
    *all_passed = false;
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", kit_dir);
    struct stat st;
    if (stat(kit_dir, &st) != 0)
        return mm_fail(err, "%s: %s; accepted: a conformance kit folder (with manifest.json)", kit_dir,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return mm_fail(err, "%s: not a folder; accepted: a conformance kit folder (with manifest.json)", kit_dir);
    if (stat(path, &st) != 0)
        return mm_fail(err, "%s: not a conformance kit: it has no manifest.json; accepted: a kit folder such as "
                            "the dit, text_encoder or vae kit (with manifest.json)",
                       kit_dir);
    json_error_t jerr;
    json_t *manifest = json_load_file(path, 0, &jerr);
    if (!manifest)
        return mm_fail(err, "%s: not valid JSON: %s (line %d)", path, jerr.text, jerr.line);
    const char *kind = json_string_value(json_object_get(manifest, "kit"));
    mm_conf_kit_fn fn = NULL;
    for (size_t i = 0; kind && i < sizeof kits / sizeof kits[0]; i++)
        if (strcmp(kits[i].name, kind) == 0)
            fn = kits[i].run;
    if (!fn) {
        char known[512] = "";
        for (size_t i = 0; i < sizeof kits / sizeof kits[0]; i++) {
            strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
            strncat(known, kits[i].name, sizeof known - strlen(known) - 1);
        }
        mm_fail(err, "%s: kit \"%s\" is not a format this build knows (known: %s)", path, kind ? kind : "(missing)",
                known);
        json_decref(manifest);
        return -1;
    }
    if (opts->n_loras && (fn != mm_conf_kit_dit || !opts->out_path)) {
        mm_fail(err, "%s: --lora applies adapters to a DiT kit and writes what they give (--out FILE); this is a "
                     "\"%s\" kit%s",
                path, kind, opts->out_path ? "" : " (and no --out was given)");
        json_decref(manifest);
        return -1;
    }
    mm_conf_run run = {.kit_dir = kit_dir,
                       .manifest = manifest,
                       .device = opts->device,
                       .log = opts->log ? opts->log : stdout,
                       .keep_outputs = opts->out_path != NULL,
                       .loras = opts->loras,
                       .n_loras = opts->n_loras,
                       .sparse = opts->sparse};
    int rc = fn(&run, err);
    if (rc != 0)
        mm_error_prefix(err, "%s", kind);
    if (rc == 0 && opts->out_path && save_outputs(&run, opts->out_path, err) != 0)
        rc = mm_error_prefix(err, "--out %s", opts->out_path);
    if (rc == 0) {
        fprintf(run.log, "%s: %d passed, %d failed\n", kind, run.passed, run.failed);
        *all_passed = run.failed == 0 && run.passed > 0;
    }
    free_outputs(run.outputs);
    json_decref(manifest);
    return rc;
}

