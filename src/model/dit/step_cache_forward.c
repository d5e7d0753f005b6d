/* The step cache inside a DiT request (the policy: step_cache.h): its
 * buffers, the sums behind each decision, and the main blocks of one
 * forward, of which some (FBC) or none (TeaCache) run when it skips.
 *
 * Precision. The residual stream is bf16; R = h1 − h_in and D are formed in
 * f32 from bf16 values, which keeps them exact (the difference of two bf16
 * numbers fits f32 unless their exponents are more than 16 apart), so a
 * skipped forward's h1 + D rounds once, like the blocks' own last residual
 * add, and reproduces h_out bit for bit when h1 has not moved. A bf16 D would
 * round twice with an error of h_out's own size (D carries nearly all of
 * h_out: 49 blocks against 1). The TeaCache probe is bf16, as block 0 sees
 * it.
 *
 * Sums. Per row, Σ(a − b) and Σ relu(a − b) come from the op API's row
 * reduction; the host takes Σ|a − b| = 2·Σrelu − Σ (no cancellation: both
 * terms are bounded by Σ|a − b|) in double per modality segment, then
 * the request's all-reduce hook sums the ranks' parts. The scratch is the
 * fc1 buffer, free between blocks. */
#include <stdlib.h>
#include <string.h>

#include "model/dit/model.h"

enum { SUM_NORM = 0, SUM_DIFF = 2 }; /* rows of cache->sums: (Σ, Σrelu) of cur, then of cur − ref */

void mm_dit_step_cache_free(mm_dit_request *r)
{
    mm_dit_step_cache *c = r->step_cache;
    if (!c)
        return;
    mm_tensor *all[] = {&c->in, &c->cur, &c->ref, &c->delta, &c->sums};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        mm_tensor_free(all[i]);
    r->bytes -= c->bytes;
    free(c->host_sums);
    free(c);
    r->step_cache = NULL;
}

static int alloc(mm_dit_step_cache *c, mm_device dev, mm_tensor *t, mm_dtype dt, int64_t rows, int64_t cols,
                 mm_error *err)
{
    if (mm_tensor_alloc(t, dev, dt, 2, (int64_t[]){rows, cols}, err) != 0)
        return -1;
    c->bytes += mm_tensor_nbytes(t);
    return 0;
}

int mm_dit_request_set_step_cache(mm_dit_request *r, const mm_step_cache_config *cfg, int forwards, mm_error *err)
{
    mm_dit_step_cache_free(r);
    if (!cfg || cfg->kind == MM_STEP_CACHE_OFF)
        return 0;
    if (mm_step_cache_check(cfg, false, err) != 0)
        return -1;
    const int64_t S = r->rows, H = r->dit->cfg.hidden;
    const mm_device dev = mm_ctx_device(r->ctx);
    mm_dit_step_cache *c = calloc(1, sizeof *c);
    if (!c)
        return mm_fail(err, "step cache: out of memory");
    const mm_dtype resid = cfg->kind == MM_STEP_CACHE_FBC ? MM_F32 : MM_BF16;
    c->host_sums = malloc(sizeof(float) * (size_t)(4 * S + 1));
    if (!c->host_sums || alloc(c, dev, &c->in, MM_BF16, S, H, err) || alloc(c, dev, &c->cur, resid, S, H, err) ||
        alloc(c, dev, &c->ref, resid, S, H, err) || alloc(c, dev, &c->delta, MM_F32, S, H, err) ||
        alloc(c, dev, &c->sums, MM_F32, 4, S, err)) {
        if (!c->host_sums)
            mm_fail(err, "out of memory");
        r->step_cache = c;
        r->bytes += c->bytes;
        mm_dit_step_cache_free(r);
        return mm_error_prefix(err, "step cache for %lld rows", (long long)S);
    }
    mm_step_cache_state_init(&c->state, cfg, forwards);
    mm_step_cache_report_init(&c->report);
    r->step_cache = c;
    r->bytes += c->bytes;
    return 0;
}

void mm_dit_step_cache_set_step(mm_dit_request *r, int step)
{
    if (r->step_cache)
        r->step_cache->next_step = step;
}

const mm_step_cache_report *mm_dit_request_step_cache_report(const mm_dit_request *r)
{
    return r->step_cache ? &r->step_cache->report : NULL;
}

size_t mm_dit_request_step_cache_bytes(const mm_dit_request *r) { return r->step_cache ? r->step_cache->bytes : 0; }

/* Row `slot` of the sums as an [S] vector. */
static mm_tensor sums_row(mm_dit_step_cache *c, int slot)
{
    const int64_t S = c->sums.shape[1];
    return mm_tensor_wrap((float *)c->sums.data + slot * S, c->sums.device, MM_F32, 1, (int64_t[]){S});
}

/* Per-row Σ(a − b) and Σ relu(a − b) (b NULL: of a) into rows slot, slot + 1. */
static void row_sums(mm_dit_request *r, const mm_tensor *a, const mm_tensor *b, int slot)
{
    mm_ctx *ctx = r->ctx;
    mm_dit_step_cache *c = r->step_cache;
    mm_tensor tmp = mm_tensor_wrap(r->ws.fc1_store.data, r->ws.fc1_store.device, MM_F32, 2,
                                   (int64_t[]){r->rows, r->dit->cfg.hidden});
    mm_tensor sum = sums_row(c, slot), pos = sums_row(c, slot + 1);
    if (b) {
        mm_axpby(ctx, &tmp, 1.0f, a, -1.0f, b);
        mm_reduce_rows(ctx, &sum, &tmp, MM_REDUCE_SUM);
        mm_activation(ctx, &tmp, &tmp, MM_ACT_RELU);
    } else {
        mm_reduce_rows(ctx, &sum, a, MM_REDUCE_SUM);
        mm_activation(ctx, &tmp, a, MM_ACT_RELU);
    }
    mm_reduce_rows(ctx, &pos, &tmp, MM_REDUCE_SUM);
}

/* The forward's sums over all rows: this request's rows per segment, then
 * the other ranks' through the all-reduce hook. */
static int gather_sums(mm_dit_request *r, bool with_diff, mm_step_cache_sums *out, mm_error *err)
{
    mm_dit_step_cache *c = r->step_cache;
    const int64_t S = r->rows;
    mm_tensor host = mm_tensor_wrap(c->host_sums, mm_cpu(), MM_F32, 2, (int64_t[]){4, S});
    mm_copy(r->ctx, &host, &c->sums);
    if (mm_ctx_sync(r->ctx, err) != 0)
        return -1;
    memset(out, 0, sizeof *out);
    const float *s = c->host_sums;
    for (int64_t i = 0; i < S; i++) {
        const int g = r->tags[i] >= 0 && r->tags[i] < MM_STEP_CACHE_SEGMENTS ? r->tags[i] : MM_DIT_TAG_VIDEO;
        out->norm[g] += 2.0 * s[(SUM_NORM + 1) * S + i] - s[SUM_NORM * S + i];
        if (with_diff)
            out->diff[g] += 2.0 * s[(SUM_DIFF + 1) * S + i] - s[SUM_DIFF * S + i];
    }
    if (!r->allreduce)
        return 0;
    double v[2 * MM_STEP_CACHE_SEGMENTS];
    memcpy(v, out->diff, sizeof out->diff);
    memcpy(v + MM_STEP_CACHE_SEGMENTS, out->norm, sizeof out->norm);
    if (r->allreduce(r->allreduce_user, r->ctx, v, 2 * MM_STEP_CACHE_SEGMENTS, err) != 0)
        return mm_error_prefix(err, "step cache: summing over the ranks");
    memcpy(out->diff, v, sizeof out->diff);
    memcpy(out->norm, v + MM_STEP_CACHE_SEGMENTS, sizeof out->norm);
    return 0;
}

/* TeaCache's probe: block 0's modulated input, as block 0 computes it. */
static void probe(mm_dit_request *r, int m, mm_tensor *out)
{
    const mm_dit *d = r->dit;
    const int64_t H = d->cfg.hidden;
    mm_dit_adaln_block(r, 0, m);
    const int64_t trows = (int64_t)m * d->cfg.modalities;
    mm_tensor table = mm_tensor_wrap(r->ws.mod.data, r->ws.mod.device, MM_BF16, 2, (int64_t[]){trows, 6 * H});
    mm_tensor shift = mm_tensor_narrow(&table, 1, 0, H), scale = mm_tensor_narrow(&table, 1, H, H);
    mm_rmsnorm_modulate(r->ctx, out, &r->ws.x, &d->blocks[0].norm1, d->cfg.norm_eps, &scale, &shift,
                        &r->ws.adaln_idx);
}

int mm_dit_cached_blocks(mm_dit_request *r, int m, mm_error *err)
{
    mm_dit_step_cache *c = r->step_cache;
    mm_ctx *ctx = r->ctx;
    mm_tensor *x = &r->ws.x;
    const bool fbc = c->state.cfg.kind == MM_STEP_CACHE_FBC;
    const int step = c->next_step++;

    mm_copy(ctx, &c->in, x); /* h_in */
    if (fbc) {
        mm_dit_run_blocks(r, 0, 1, m);              /* h1 */
        mm_axpby(ctx, &c->cur, 1.0f, x, -1.0f, &c->in); /* R = h1 − h_in */
    } else {
        probe(r, m, &c->cur);
    }
    const bool compare = c->state.have_ref;
    row_sums(r, &c->cur, NULL, SUM_NORM);
    if (compare)
        row_sums(r, &c->cur, &c->ref, SUM_DIFF);
    mm_step_cache_sums sums;
    if (gather_sums(r, compare, &sums, err) != 0)
        return -1;

    const mm_step_decision d = mm_step_cache_decide(&c->state, step, &sums);
    mm_step_cache_report_add(&c->report, step, &d);
    if (d.skip) {
        mm_add(ctx, x, x, &c->delta); /* FBC: h1 + D; TeaCache: h_in + D */
    } else {
        if (fbc)
            mm_copy(ctx, &c->in, x); /* D is measured from h1 */
        mm_dit_run_blocks(r, fbc ? 1 : 0, r->dit->cfg.layers, m);
        mm_axpby(ctx, &c->delta, 1.0f, x, -1.0f, &c->in);
    }
    if (d.keep_as_ref) {
        mm_tensor t = c->cur;
        c->cur = c->ref;
        c->ref = t;
    }
    return mm_ctx_error(ctx, err);
}
