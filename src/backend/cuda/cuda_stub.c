/* Builds without CUDA link these, so callers need no #ifdefs: every entry
 * point of cuda_backend.h reports that this build has no CUDA backend. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include <string.h>

#include "backend/cuda/cuda_backend.h"

static int no_cuda(mm_error *err) { return mm_fail(err, "this mmh3 was built without CUDA (configure --with-cuda)"); }

int mm_cuda_count(void) { return 0; }

int mm_cuda_device_info_get(int dev, mm_cuda_device_info *out, mm_error *err)
{
    (void)dev;
    memset(out, 0, sizeof *out);
    return no_cuda(err);
}

void *mm_cuda_malloc(int dev, size_t bytes, mm_error *err)
{
    (void)dev;
    (void)bytes;
    no_cuda(err);
    return NULL;
}
void mm_cuda_free(int dev, void *p)
{
    (void)dev;
    (void)p;
}
int mm_cuda_memcpy(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes, mm_error *err)
{
    (void)dst_dev;
    (void)dst;
    (void)src_dev;
    (void)src;
    (void)bytes;
    return no_cuda(err);
}
int mm_cuda_memset0(int dev, void *p, size_t bytes, mm_error *err)
{
    (void)dev;
    (void)p;
    (void)bytes;
    return no_cuda(err);
}
int mm_cuda_memory_stats(int dev, size_t *in_use, size_t *peak, size_t *reserved)
{
    (void)dev;
    *in_use = *peak = *reserved = 0;
    return -1;
}
void mm_cuda_reset_peak(int dev) { (void)dev; }
int mm_cuda_release_cached(int dev, mm_error *err)
{
    (void)dev;
    return no_cuda(err);
}

void *mm_cuda_stream(int dev)
{
    (void)dev;
    return NULL;
}

int mm_cuda_make_current(int dev, mm_error *err)
{
    (void)dev;
    return no_cuda(err);
}

int mm_cuda_sync(int dev, mm_error *err)
{
    (void)dev;
    return no_cuda(err);
}

mm_cuda_event *mm_cuda_event_create(int dev, mm_error *err)
{
    (void)dev;
    no_cuda(err);
    return NULL;
}
void mm_cuda_event_destroy(mm_cuda_event *e) { (void)e; }
int mm_cuda_event_record(mm_cuda_event *e, mm_error *err)
{
    (void)e;
    return no_cuda(err);
}
int mm_cuda_event_elapsed_ms(mm_cuda_event *start, mm_cuda_event *end, float *ms, mm_error *err)
{
    (void)start;
    (void)end;
    *ms = 0;
    return no_cuda(err);
}

int mm_cuda_check_kernels(int dev, char *summary, size_t summary_len, mm_error *err)
{
    (void)dev;
    if (summary && summary_len)
        summary[0] = '\0';
    return no_cuda(err);
}
int mm_cuda_peer_probe(int src, int dst, size_t bytes, double *gbps, mm_error *err)
{
    (void)src;
    (void)dst;
    (void)bytes;
    if (gbps)
        *gbps = 0;
    return no_cuda(err);
}
void *mm_cuda_host_alloc(size_t bytes, mm_error *err)
{
    (void)bytes;
    no_cuda(err);
    return NULL;
}
void mm_cuda_host_free(void *p) { (void)p; }
mm_cuda_upload *mm_cuda_upload_create(int dev, int slots, mm_error *err)
{
    (void)dev;
    (void)slots;
    no_cuda(err);
    return NULL;
}
void mm_cuda_upload_destroy(mm_cuda_upload *u) { (void)u; }
int mm_cuda_upload_copy(mm_cuda_upload *u, int slot, void *dst, const void *src, size_t bytes, mm_error *err)
{
    (void)u, (void)slot, (void)dst, (void)src, (void)bytes;
    return no_cuda(err);
}
int mm_cuda_upload_acquire(mm_cuda_upload *u, int slot, mm_error *err)
{
    (void)u, (void)slot;
    return no_cuda(err);
}
int mm_cuda_upload_release(mm_cuda_upload *u, int slot, mm_error *err)
{
    (void)u, (void)slot;
    return no_cuda(err);
}

#else
typedef int mm_cuda_stub_unused; /* ISO C forbids an empty translation unit */

#endif
