/* Sparse attention in the DiT's main blocks (shared/spec/sparse.md
 * §2.4–2.6): per request the sinks and dense-query rows from the layout's
 * row roles and one route sized for its rows; per forward whether it is one
 * of the dense ones and its τ; per main block past the dense ones the
 * routing and the sparse attention (backend/sparse_attn.h) in place of the
 * SDPA, with the exact pairs totalled on the device and read once after the
 * forward for the density it achieved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "model/dit/model.h"

int mm_dit_sparse_setup(mm_dit_request *r, const mm_dit_layout *l, const mm_sparse_config *cfg, mm_error *err)
{
    if (!cfg)
        return 0;
    const mm_dit_config *c = &r->dit->cfg;
    mm_dit_sparse *s = calloc(1, sizeof *s);
    if (!s)
        return mm_fail(err, "out of memory");
    r->sparse = s;
    s->cfg = *cfg;
    s->density = 1.0;
    if (r->attention) {
        snprintf(s->kind, sizeof s->kind, "off: an attention hook (sequence-parallel or reference KV cache) owns the "
                 "attention; %s not applied", cfg->name);
        return 0;
    }
    const mm_device dev = mm_ctx_device(r->ctx);
    if (dev.kind == MM_DEVICE_CUDA && c->head_dim != 128)
        return mm_fail(err, "sparse attention on CUDA needs head dim 128 (this DiT has %d)", c->head_dim);
    if ((s->n_sink = mm_sparse_role_ranges(l->roles, l->rows, cfg->sink_rows, s->sink, MM_SPARSE_MAX_RANGES, err)) < 0 ||
        (s->n_dense_q = mm_sparse_role_ranges(l->roles, l->rows, cfg->dense_q_rows, s->dense_q, MM_SPARSE_MAX_RANGES,
                                              err)) < 0 ||
        mm_sparse_route_alloc(&s->route, dev, l->rows, c->heads, c->heads, c->head_dim, err) != 0 ||
        mm_tensor_zeros(&s->tally, dev, MM_I64, 1, (int64_t[]){1}, err) != 0)
        return -1;
    mm_tensor *t[] = {&s->route.mask, &s->route.count, &s->route.kc, &s->route.vc, &s->route.thr, &s->tally};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        r->bytes += mm_tensor_nbytes(t[i]);
    s->kind[0] = '\0'; /* made when asked: fast mode may be set after the request begins */
    return 0;
}

void mm_dit_sparse_teardown(mm_dit_request *r)
{
    if (!r->sparse)
        return;
    mm_sparse_route_free(&r->sparse->route);
    mm_tensor_free(&r->sparse->tally);
    free(r->sparse);
    r->sparse = NULL;
}

void mm_dit_sparse_set_step(mm_dit_request *r, int step, int total)
{
    if (!r->sparse)
        return;
    r->sparse->step = step;
    r->sparse->total = total;
    r->sparse->step_set = true;
}

double mm_dit_request_density(const mm_dit_request *r) { return r->sparse ? r->sparse->density : 1.0; }

const char *mm_dit_sparse_kind(const mm_dit_request *r)
{
    mm_dit_sparse *s = r->sparse;
    if (!s)
        return "off";
    if (r->attention)
        return s->kind; /* the hook's message, made at setup */
    char how[320];
    mm_sparse_config_describe(&s->cfg, how, sizeof how);
    snprintf(s->kind, sizeof s->kind, "%s; %s", how,
             mm_sparse_attention_kind(r->ctx, r->fast ? MM_SPARSE_FAST : MM_SPARSE_EXACT));
    return s->kind;
}

void mm_dit_sparse_forward_begin(mm_dit_request *r)
{
    mm_dit_sparse *s = r->sparse;
    if (!s)
        return;
    s->on = !r->attention && r->rows >= s->cfg.min_rows && mm_sparse_step_sparse(&s->cfg, s->step, s->total);
    s->routed_blocks = 0;
    if (s->on) {
        int64_t zero = 0;
        mm_tensor h = mm_tensor_wrap(&zero, mm_cpu(), MM_I64, 1, (int64_t[]){1});
        mm_copy(r->ctx, &s->tally, &h); /* a host-to-device copy returns when done: zero may go */
    }
}

int mm_dit_sparse_forward_end(mm_dit_request *r, mm_error *err)
{
    mm_dit_sparse *s = r->sparse;
    if (!s)
        return 0;
    s->density = 1.0;
    if (s->on && s->routed_blocks > 0) {
        int64_t exact = 0;
        mm_tensor h = mm_tensor_wrap(&exact, mm_cpu(), MM_I64, 1, (int64_t[]){1});
        mm_copy(r->ctx, &h, &s->tally);
        if (mm_ctx_sync(r->ctx, err) != 0)
            return -1;
        const double NT = (double)s->route.blocks, pairs = NT * NT * (double)s->route.heads;
        const int layers = r->dit->cfg.layers;
        s->density = ((double)exact + (double)(layers - s->routed_blocks) * pairs) / ((double)layers * pairs);
    }
    s->step++; /* the next forward, unless set again */
    s->step_set = false;
    return 0;
}

bool mm_dit_sparse_applies(const mm_dit_request *r)
{
    return r->sparse && r->sparse->on && r->block >= r->sparse->cfg.dense_layers;
}

int mm_dit_sparse_route(mm_dit_request *r, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    mm_dit_sparse *s = r->sparse;
    const mm_sparse_route_params rp = mm_sparse_route_params_for(&s->cfg, s->step, s->total, s->sink, s->n_sink,
                                                                  s->dense_q, s->n_dense_q);
    s->routed_blocks++;
    return mm_sparse_route_blocks(r->ctx, &s->route, q, k, v, &rp, &s->tally);
}

int mm_dit_sparse_attend(mm_dit_request *r, mm_tensor *o, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    const mm_sparse_attn_params ap = {
        .approximate = r->sparse->cfg.policy != MM_SPARSE_TOPK,
        .mode = r->fast ? MM_SPARSE_FAST : MM_SPARSE_EXACT,
    };
    return mm_sparse_attention(r->ctx, o, q, k, v, &r->sparse->route, &ap);
}

int mm_dit_sparse_sdpa(mm_dit_request *r, mm_tensor *o, const mm_tensor *q, const mm_tensor *k, const mm_tensor *v)
{
    mm_dit_sparse_route(r, q, k, v);
    return mm_dit_sparse_attend(r, o, q, k, v);
}
