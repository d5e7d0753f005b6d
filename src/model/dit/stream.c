/* Streamed main blocks: each lives in pinned host memory, packed into one
 * arena, and is copied whole into one of two device slots on the upload
 * queue (backend/device.h) just before it runs. While block b computes from
 * one slot, the next streamed block's copy fills the other; events order the
 * copy after the slot's previous reader and the block after its copy, so the
 * host never waits. The block code is unchanged: for the duration of the
 * block d->blocks[b] is the slot's copy (same tensors, same layout, device
 * pointers), so a streamed forward computes exactly what a resident one does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "model/dit/model.h"

#define ARENA_ALIGN 256
#define BLOCK_TENSORS 22 /* 4 norms, 4 linears of 4 tensors, the AdaLN pair */

typedef struct stream_slot {
    void *mem;  /* device memory of slot_bytes */
    int holds;  /* the block its copy is (or is being) made of; -1: none */
} stream_slot;

typedef struct mm_dit_stream mm_dit_stream;
struct mm_dit_stream {
    int layers;
    bool *streamed;         /* [layers] */
    int *order;             /* the streamed blocks, ascending */
    int n;
    void **home;            /* [layers] pinned arena of each streamed block */
    size_t *home_bytes;     /* [layers] */
    size_t slot_bytes;
    stream_slot slot[2];
    mm_upload_queue *up;
    mm_dit_block_weights saved; /* the host copy of the block that runs from a slot */
    int running_slot;           /* its slot */
    int last_slot;              /* the slot the last streamed block ran from */
};

/* The tensors of a block in a fixed order (absent ones included: data NULL). */
static int block_tensors(mm_dit_block_weights *bw, mm_tensor **t)
{
    int n = 0;
    t[n++] = &bw->norm1;
    t[n++] = &bw->norm2;
    t[n++] = &bw->q_norm;
    t[n++] = &bw->k_norm;
    for (int i = 0; i < 4; i++) {
        t[n++] = &bw->lin[i].weight;
        t[n++] = &bw->lin[i].weight_scale;
        t[n++] = &bw->lin[i].bias;
        t[n++] = &bw->lin[i].pre_quant_scale;
    }
    t[n++] = &bw->adaln_w;
    t[n++] = &bw->adaln_b;
    return n;
}

bool mm_dit_block_streamed(const mm_dit *d, int block)
{
    return d->stream && block >= 0 && block < d->stream->layers && d->stream->streamed[block];
}

int mm_dit_stream_init(mm_dit *d, const bool *stream, int n, mm_error *err)
{
    const int layers = d->cfg.layers;
    int count = 0;
    for (int b = 0; b < n && stream; b++)
        count += stream[b];
    if (!count)
        return 0;
    if (n != layers)
        return mm_fail(err, "streaming: the plan names %d blocks, the DiT has %d", n, layers);
    if (stream[0])
        return mm_fail(err, "streaming: block 0 stays resident (the step cache reads its weights outside the block "
                       "loop)");
    mm_dit_stream *s = calloc(1, sizeof *s);
    if (!s)
        return mm_fail(err, "out of memory");
    d->stream = s;
    s->layers = layers;
    s->streamed = calloc((size_t)layers, sizeof *s->streamed);
    s->order = calloc((size_t)layers, sizeof *s->order);
    s->home = calloc((size_t)layers, sizeof *s->home);
    s->home_bytes = calloc((size_t)layers, sizeof *s->home_bytes);
    if (!s->streamed || !s->order || !s->home || !s->home_bytes)
        return mm_fail(err, "out of memory");
    for (int b = 0; b < layers; b++)
        if ((s->streamed[b] = stream[b]))
            s->order[s->n++] = b;
    s->slot[0].holds = s->slot[1].holds = -1;
    s->running_slot = -1;
    s->last_slot = 1;
    return 0;
}

/* Block `block` from the file into its pinned arena; d->blocks[block] views it. */
static int pack_block(mm_dit *d, mm_ctx *cpu, int block, mm_error *err)
{
    mm_dit_stream *s = d->stream;
    mm_dit_block_weights tmp;
    if (mm_dit_load_streamed_block(d, cpu, block, &tmp, err) != 0)
        return -1;
    mm_tensor *src[BLOCK_TENSORS], *dst[BLOCK_TENSORS];
    const int nt = block_tensors(&tmp, src);
    size_t off[BLOCK_TENSORS], total = 0;
    for (int i = 0; i < nt; i++) {
        if (!src[i]->data)
            continue;
        if (!mm_tensor_is_contiguous(src[i])) {
            mm_dit_block_weights_free(&tmp);
            return mm_fail(err, "streaming block %d: one of its tensors is not contiguous in the file", block);
        }
        total = (total + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
        off[i] = total;
        total += mm_tensor_nbytes(src[i]);
    }
    char *arena = mm_host_pinned_alloc(d->device, total, err);
    if (!arena) {
        mm_dit_block_weights_free(&tmp);
        return mm_error_prefix(err, "streaming block %d", block);
    }
    mm_dit_block_weights *home = &d->blocks[block];
    *home = tmp;
    block_tensors(home, dst);
    for (int i = 0; i < nt; i++) {
        if (!src[i]->data)
            continue;
        memcpy(arena + off[i], src[i]->data, mm_tensor_nbytes(src[i]));
        dst[i]->data = arena + off[i];
        dst[i]->device = mm_cpu();
        dst[i]->storage = NULL;
    }
    mm_dit_block_weights_free(&tmp); /* the upcast AdaLN tensors; views free nothing */
    s->home[block] = arena;
    s->home_bytes[block] = total;
    if (total > s->slot_bytes)
        s->slot_bytes = total;
    return 0;
}

/* Queues block `block`'s copy into slot i. */
static int fill_slot(mm_dit_stream *s, int i, int block, mm_error *err)
{
    s->slot[i].holds = -1;
    if (mm_upload_queue_copy(s->up, i, s->slot[i].mem, s->home[block], s->home_bytes[block], err) != 0)
        return -1;
    s->slot[i].holds = block;
    return 0;
}

int mm_dit_stream_load(mm_dit *d, mm_error *err)
{
    mm_dit_stream *s = d->stream;
    if (!s)
        return 0;
    mm_ctx *cpu = NULL;
    if (mm_ctx_create(&cpu, mm_cpu(), 0, err) != 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < s->n && rc == 0; i++)
        rc = pack_block(d, cpu, s->order[i], err);
    mm_ctx_destroy(cpu);
    if (rc != 0 || mm_upload_queue_create(d->device, 2, &s->up, err) != 0)
        return mm_error_prefix(err, "streaming the DiT's blocks");
    for (int i = 0; i < 2; i++) {
        if (!(s->slot[i].mem = mm_device_malloc(d->device, s->slot_bytes, err)))
            return mm_error_prefix(err, "a streaming slot");
        d->device_bytes += mm_device_alloc_size(s->slot_bytes);
    }
    /* The first two streamed blocks' copies start now, behind the load. */
    for (int i = 0; i < 2 && i < s->n; i++)
        if (fill_slot(s, i, s->order[i], err) != 0)
            return mm_error_prefix(err, "streaming the DiT's blocks");
    return 0;
}

void mm_dit_stream_free(mm_dit *d)
{
    mm_dit_stream *s = d->stream;
    if (!s)
        return;
    mm_upload_queue_destroy(s->up); /* waits for its copies */
    for (int i = 0; i < 2; i++)
        mm_device_free(d->device, s->slot[i].mem);
    if (s->home) {
        for (int b = 0; b < s->layers; b++) {
            if (s->home[b]) {
                memset(&d->blocks[b], 0, sizeof d->blocks[b]); /* views of the arena */
                mm_host_pinned_free(d->device, s->home[b]);
            }
        }
    }
    free(s->streamed);
    free(s->order);
    free(s->home);
    free(s->home_bytes);
    free(s);
    d->stream = NULL;
}

/* The slot's copy of block `block`: the host copy's tensors moved onto the slot. */
static void slot_view(const mm_dit *d, const mm_dit_stream *s, int i, int block, mm_dit_block_weights *out)
{
    *out = d->blocks[block];
    mm_tensor *t[BLOCK_TENSORS];
    const int nt = block_tensors(out, t);
    const char *base = s->home[block];
    for (int k = 0; k < nt; k++) {
        if (!t[k]->data)
            continue;
        t[k]->data = (char *)s->slot[i].mem + ((const char *)t[k]->data - base);
        t[k]->device = d->device;
    }
}

int mm_dit_stream_enter(mm_dit *d, int block, mm_ctx *ctx)
{
    mm_dit_stream *s = d->stream;
    if (!mm_dit_block_streamed(d, block))
        return 0;
    mm_error e = {{0}};
    int i = s->slot[0].holds == block ? 0 : s->slot[1].holds == block ? 1 : -1;
    if (i < 0) { /* not prefetched (a step cache ran a subset of the blocks): copy it now */
        i = 1 - s->last_slot;
        if (fill_slot(s, i, block, &e) != 0)
            return mm_ctx_fail(ctx, "streaming block %d: %s", block, e.msg);
    }
    if (mm_upload_queue_acquire(s->up, i, &e) != 0)
        return mm_ctx_fail(ctx, "streaming block %d: %s", block, e.msg);
    s->saved = d->blocks[block];
    slot_view(d, s, i, block, &d->blocks[block]);
    s->running_slot = i;
    return 0;
}

void mm_dit_stream_leave(mm_dit *d, int block, mm_ctx *ctx)
{
    mm_dit_stream *s = d->stream;
    if (!mm_dit_block_streamed(d, block) || s->running_slot < 0)
        return;
    const int i = s->running_slot;
    d->blocks[block] = s->saved;
    s->running_slot = -1;
    s->last_slot = i;
    mm_error e = {{0}};
    if (mm_upload_queue_release(s->up, i, &e) != 0) {
        mm_ctx_fail(ctx, "streaming block %d: %s", block, e.msg);
        return;
    }
    /* The next streamed block, wrapping into the next forward, into the other slot. */
    int k = 0;
    while (k < s->n && s->order[k] != block)
        k++;
    const int next = s->order[(k + 1) % s->n];
    if (s->n > 1 && s->slot[1 - i].holds != next && fill_slot(s, 1 - i, next, &e) != 0)
        mm_ctx_fail(ctx, "streaming block %d: %s", next, e.msg);
}
