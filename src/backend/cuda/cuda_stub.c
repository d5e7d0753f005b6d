/* Builds without CUDA link these, so callers need no #ifdefs: every entry
 * point reports that this build has no CUDA backend. */
#include "config.h"

#ifndef MMH3_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"

static int no_cuda(mm_error *err) { return mm_fail(err, "this mmh3 was built without CUDA (configure --with-cuda)"); }

int mm_cuda_count(void) { return 0; }
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
#else
typedef int mm_cuda_stub_unused; /* ISO C forbids an empty translation unit */
#endif
