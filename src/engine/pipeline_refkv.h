/* The reference KV cache (see pipeline_refkv.c): keep the pinned rows' K/V of
 * every main block from the first forward, run later forwards on the other
 * rows only.
 *
 *   pl_refkv_create(&kv, ctx, cfg, &layout, err);
 *   mm_dit_refine_text(dit, ctx, &text, &refined, err);
 *   opts = pl_refkv_capture_opts(kv, &refined);  full request   (forward 1)
 *   opts = pl_refkv_cached_opts(kv, &refined);   reduced request on
 *                                                pl_refkv_reduced(kv) (forwards 2..)
 *   pl_refkv_attach(kv, req) after each request begins (its SDPA: fa3 where
 *                                the GPU has it; mm_attention until then),
 *   pl_refkv_begin_forward(kv) before every forward.
 */
#ifndef MMH3_ENGINE_PIPELINE_REFKV_H
#define MMH3_ENGINE_PIPELINE_REFKV_H

#include <stddef.h>

#include "model/dit/dit.h"

typedef struct pl_refkv pl_refkv;

/* Device bytes the cache and its concat buffers take for a layout. */
size_t pl_refkv_bytes(const mm_dit_config *c, const mm_dit_layout *l);
int pl_refkv_create(pl_refkv **out, mm_ctx *ctx, const mm_dit_config *c, const mm_dit_layout *l, mm_error *err);
void pl_refkv_free(pl_refkv *kv);
/* The layout without the pinned rows (positions, tags, timesteps unchanged). */
const mm_dit_layout *pl_refkv_reduced(const pl_refkv *kv);
int64_t pl_refkv_rows(const pl_refkv *kv);
mm_dit_request_opts pl_refkv_capture_opts(pl_refkv *kv, const mm_tensor *refined_text);
mm_dit_request_opts pl_refkv_cached_opts(pl_refkv *kv, const mm_tensor *refined_text);
void pl_refkv_begin_forward(pl_refkv *kv);
/* The request whose attention (mm_dit_sdpa) the hooks run; NULL: mm_attention. */
void pl_refkv_attach(pl_refkv *kv, mm_dit_request *req);

#endif
