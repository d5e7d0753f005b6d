/* Verdict lines, comparisons, kept outputs, manifest and kit-tensor access
 * for the kit runners. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/conformance.h"
#include "conformance/output.h"

void mm_conf_verdict(mm_conf_run *r, bool ok, const char *what, const char *fmt, ...)
{
    fprintf(r->log, "%s %s", ok ? "PASS" : "FAIL", what);
    if (fmt && *fmt) {
        fputs(ok ? "  " : ": ", r->log);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(r->log, fmt, ap);
        va_end(ap);
    }
    fputc('\n', r->log);
    fflush(r->log);
    if (ok)
        r->passed++;
    else
        r->failed++;
}

mm_conf_diff mm_conf_measure(const float *c, const float *ref, int64_t n)
{
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)c[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        double a = fabs(d);
        if (a > mx || isnan(d))
            mx = isnan(d) ? INFINITY : a;
    }
    mm_conf_diff out = {.max_abs = mx, .ref_norm = sqrt(den)};
    out.rel_l2 = den > 0 ? sqrt(num) / sqrt(den) : (num > 0 ? INFINITY : 0.0);
    if (isnan(num))
        out.rel_l2 = INFINITY;
    return out;
}

bool mm_conf_compare(mm_conf_run *r, const char *what, const float *c, const float *ref, int64_t n, mm_conf_tol tol)
{
    mm_conf_diff d = mm_conf_measure(c, ref, n);
    bool ok = d.rel_l2 <= tol.rel_l2 && d.max_abs <= tol.max_abs;
    mm_conf_verdict(r, ok, what, "rel_l2 %.3g %s %.3g   max_abs %.3g %s %.3g", d.rel_l2,
                    d.rel_l2 <= tol.rel_l2 ? "<=" : ">", tol.rel_l2, d.max_abs, d.max_abs <= tol.max_abs ? "<=" : ">",
                    tol.max_abs);
    return ok;
}

int mm_conf_keep(mm_conf_run *r, const char *name, mm_dtype dtype, int ndim, const int64_t *shape, const void *data,
                 mm_error *err)
{
    if (!r->keep_outputs)
        return 0;
    mm_conf_output *o = calloc(1, sizeof *o);
    if (!o || !(o->name = strdup(name))) {
        free(o);
        return mm_fail(err, "out of memory keeping %s", name);
    }
    if (mm_tensor_alloc(&o->t, mm_cpu(), dtype, ndim, shape, err) != 0) {
        free(o->name);
        free(o);
        return -1;
    }
    memcpy(o->t.data, data, mm_tensor_nbytes(&o->t));
    mm_conf_output **tail = &r->outputs;
    while (*tail)
        tail = &(*tail)->next;
    *tail = o;
    return 0;
}

/* ------------------------------------------------------------------ manifest */

int mm_conf_json_number(const json_t *obj, const char *key, double *out, mm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_number(v))
        return mm_fail(err, "manifest: \"%s\" missing or not a number", key);
    *out = json_number_value(v);
    return 0;
}

int mm_conf_json_int(const json_t *obj, const char *key, int *out, mm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        return mm_fail(err, "manifest: \"%s\" missing or not an integer", key);
    *out = (int)json_integer_value(v);
    return 0;
}

int mm_conf_tolerance(const json_t *root, const char *path, mm_conf_tol *out, mm_error *err)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const json_t *node = root;
    for (char *save = NULL, *part = strtok_r(buf, ".", &save); part; part = strtok_r(NULL, ".", &save))
        node = json_object_get(node, part);
    if (!json_is_object(node) || mm_conf_json_number(node, "rel_l2", &out->rel_l2, err) != 0 ||
        mm_conf_json_number(node, "max_abs", &out->max_abs, err) != 0)
        return mm_fail(err, "manifest: tolerance %s missing (an object with rel_l2 and max_abs)", path);
    return 0;
}

/* ------------------------------------------------------------------ tensors */

static int read_entry(const mm_safetensors *st, const char *name, const mm_st_entry **e, int64_t *numel,
                      mm_error *err)
{
    *e = mm_st_find(st, name);
    if (!*e)
        return mm_fail(err, "%s: tensor '%s' not found", mm_st_path(st), name);
    int64_t n = 1;
    for (int i = 0; i < (*e)->ndim; i++)
        n *= (*e)->shape[i];
    *numel = n;
    return 0;
}

int mm_conf_read_f32(const mm_safetensors *st, const char *name, float **out, int64_t *numel, int *ndim,
                     int64_t *shape, mm_error *err)
{
    const mm_st_entry *e;
    int64_t n;
    if (read_entry(st, name, &e, &n, err) != 0)
        return -1;
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!v)
        return mm_fail(err, "%s: out of memory", name);
    mm_tensor t = mm_tensor_wrap((void *)e->data, mm_cpu(), e->dtype, 1, (int64_t[]){n});
    if (e->dtype == MM_F32)
        memcpy(v, e->data, sizeof(float) * (size_t)n);
    else
        for (int64_t i = 0; i < n; i++)
            v[i] = (float)mm_tensor_get(&t, (int64_t[]){i});
    *out = v;
    if (numel)
        *numel = n;
    if (ndim)
        *ndim = e->ndim;
    if (shape)
        memcpy(shape, e->shape, sizeof(int64_t) * (size_t)e->ndim);
    return 0;
}

int mm_conf_read_i64(const mm_safetensors *st, const char *name, int64_t **out, int64_t *numel, mm_error *err)
{
    const mm_st_entry *e;
    int64_t n;
    if (read_entry(st, name, &e, &n, err) != 0)
        return -1;
    if (mm_dtype_is_float(e->dtype))
        return mm_fail(err, "%s: integer tensor expected, file has %s", name, mm_dtype_name(e->dtype));
    int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!v)
        return mm_fail(err, "%s: out of memory", name);
    mm_tensor t = mm_tensor_wrap((void *)e->data, mm_cpu(), e->dtype, 1, (int64_t[]){n});
    if (e->dtype == MM_I64)
        memcpy(v, e->data, sizeof(int64_t) * (size_t)n);
    else
        for (int64_t i = 0; i < n; i++)
            v[i] = (int64_t)mm_tensor_get(&t, (int64_t[]){i});
    *out = v;
    *numel = n;
    return 0;
}

int mm_conf_read_f64(const mm_safetensors *st, const char *name, double **out, int64_t *numel, mm_error *err)
{
    const mm_st_entry *e;
    int64_t n;
    if (read_entry(st, name, &e, &n, err) != 0)
        return -1;
    if (e->dtype != MM_F64)
        return mm_fail(err, "%s: F64 expected, file has %s", name, mm_dtype_name(e->dtype));
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!v)
        return mm_fail(err, "%s: out of memory", name);
    memcpy(v, e->data, sizeof(double) * (size_t)n);
    *out = v;
    *numel = n;
    return 0;
}
