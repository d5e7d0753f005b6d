/* CUDA runtime on the device: enumeration, the caching allocator and its
 * accounting, copies, events, the kernel presence check, the peer-copy probe. */
#include "cuda_test.h"

static void test_device_info(void)
{
    int n = mm_cuda_count();
    MM_REQUIRE(n >= 1, "no device");
    for (int d = 0; d < n; d++) {
        mm_cuda_device_info info;
        CUDA_TEST_OK(mm_cuda_device_info_get(d, &info, &cuda_test_err));
        printf("  cuda:%d %s sm_%d%d, %d SMs, %.1f GiB (%.1f free), L2 %.0f MiB, smem/block %zu KiB, driver %d, "
               "runtime %d, pci %s\n",
               d, info.name, info.cc_major, info.cc_minor, info.sm_count, info.total_bytes / 1073741824.0,
               info.free_bytes / 1073741824.0, info.l2_bytes / 1048576.0, info.smem_per_block_optin / 1024,
               info.driver_version, info.runtime_version, info.pci_bus_id);
        MM_EXPECT(info.cc_major >= 8, "compute capability %d.%d below 8.0", info.cc_major, info.cc_minor);
        MM_EXPECT(info.total_bytes > 0 && info.free_bytes <= info.total_bytes, "memory sizes %zu / %zu",
                  info.free_bytes, info.total_bytes);
        MM_EXPECT(info.name[0] != '\0', "empty device name");
    }
    mm_cuda_device_info info;
    MM_EXPECT(mm_cuda_device_info_get(n, &info, &cuda_test_err) == -1, "device %d should not exist", n);
    MM_EXPECT(strstr(cuda_test_err.msg, "does not exist") != NULL, "message: %s", cuda_test_err.msg);
}

static void test_allocator_reuse_and_accounting(void)
{
    size_t in0, peak0, res0;
    mm_cuda_memory_stats(0, &in0, &peak0, &res0);
    mm_cuda_reset_peak(0);
    size_t big = (size_t)64 << 20;
    void *a = mm_cuda_malloc(0, big, &cuda_test_err);
    MM_REQUIRE(a != NULL, "malloc: %s", cuda_test_err.msg);
    size_t in1, peak1, res1;
    mm_cuda_memory_stats(0, &in1, &peak1, &res1);
    MM_EXPECT(in1 >= in0 + big, "in_use %zu did not grow by %zu from %zu", in1, big, in0);
    MM_EXPECT(peak1 >= in1, "peak %zu below in_use %zu", peak1, in1);
    mm_cuda_free(0, a);
    size_t in2, peak2, res2;
    mm_cuda_memory_stats(0, &in2, &peak2, &res2);
    MM_EXPECT(in2 == in0, "in_use %zu after free, expected %zu", in2, in0);
    MM_EXPECT(peak2 == peak1, "peak changed on free: %zu -> %zu", peak1, peak2);
    MM_EXPECT(res2 == res1, "reserved changed on free (the block should be cached): %zu -> %zu", res1, res2);
    /* Same size again: served from the cache, same block, no new reservation. */
    void *b = mm_cuda_malloc(0, big - 1000, &cuda_test_err);
    MM_REQUIRE(b != NULL, "malloc: %s", cuda_test_err.msg);
    size_t in3, peak3, res3;
    mm_cuda_memory_stats(0, &in3, &peak3, &res3);
    MM_EXPECT(b == a, "a block of nearly the same size was not reused");
    MM_EXPECT(res3 == res2, "reserved grew from %zu to %zu on a cached size", res2, res3);
    mm_cuda_free(0, b);
    /* A much smaller request must not take the big cached block. */
    void *c = mm_cuda_malloc(0, 4096, &cuda_test_err);
    MM_REQUIRE(c != NULL, "malloc: %s", cuda_test_err.msg);
    MM_EXPECT(c != a, "a 4 KiB request took the cached 64 MiB block");
    mm_cuda_free(0, c);
    mm_cuda_reset_peak(0);
    size_t in4, peak4, res4;
    mm_cuda_memory_stats(0, &in4, &peak4, &res4);
    MM_EXPECT(peak4 == in4, "reset_peak: peak %zu != in_use %zu", peak4, in4);
    CUDA_TEST_OK(mm_cuda_release_cached(0, &cuda_test_err));
    size_t in5, peak5, res5;
    mm_cuda_memory_stats(0, &in5, &peak5, &res5);
    MM_EXPECT(res5 <= res4 - big, "release_cached kept %zu of %zu reserved", res5, res4);
}

static void test_allocator_oom_message(void)
{
    mm_cuda_device_info info;
    CUDA_TEST_OK(mm_cuda_device_info_get(0, &info, &cuda_test_err));
    void *p = mm_cuda_malloc(0, info.total_bytes + ((size_t)8 << 30), &cuda_test_err);
    MM_EXPECT(p == NULL, "allocating more than the device memory succeeded");
    if (p)
        mm_cuda_free(0, p);
    MM_EXPECT(strstr(cuda_test_err.msg, "out of memory on cuda:0") != NULL, "message: %s", cuda_test_err.msg);
    /* The device is still usable afterwards. */
    void *q = mm_cuda_malloc(0, 1 << 20, &cuda_test_err);
    MM_EXPECT(q != NULL, "allocation after OOM failed: %s", cuda_test_err.msg);
    mm_cuda_free(0, q);
}

static void test_copies_roundtrip(void)
{
    size_t n = (3 << 20) + 7;
    unsigned char *h = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(i * 131 + 7);
    void *d1 = cuda_test_upload(h, n);
    void *d2 = cuda_test_upload(NULL, n);
    CUDA_TEST_OK(mm_cuda_memcpy(0, d2, 0, d1, n, &cuda_test_err));
    CUDA_TEST_OK(mm_cuda_memcpy(-1, back, 0, d2, n, &cuda_test_err));
    MM_EXPECT(memcmp(h, back, n) == 0, "device-to-device copy changed the data");
    CUDA_TEST_OK(mm_cuda_memset0(0, d2, n, &cuda_test_err));
    CUDA_TEST_OK(mm_cuda_memcpy(-1, back, 0, d2, n, &cuda_test_err));
    size_t nz = 0;
    for (size_t i = 0; i < n; i++)
        nz += back[i] != 0;
    MM_EXPECT(nz == 0, "%zu bytes not zero after memset0", nz);
    mm_cuda_free(0, d1);
    mm_cuda_free(0, d2);
    free(h);
    free(back);
}

static void test_events_time_work(void)
{
    mm_cuda_event *a = mm_cuda_event_create(0, &cuda_test_err), *b = mm_cuda_event_create(0, &cuda_test_err);
    MM_REQUIRE(a && b, "event create: %s", cuda_test_err.msg);
    size_t n = (size_t)256 << 20;
    void *x = mm_cuda_malloc(0, n, &cuda_test_err), *y = mm_cuda_malloc(0, n, &cuda_test_err);
    MM_REQUIRE(x && y, "malloc: %s", cuda_test_err.msg);
    CUDA_TEST_OK(mm_cuda_memset0(0, x, n, &cuda_test_err));
    CUDA_TEST_OK(mm_cuda_event_record(a, &cuda_test_err));
    for (int i = 0; i < 4; i++)
        CUDA_TEST_OK(mm_cuda_memcpy(0, y, 0, x, n, &cuda_test_err));
    CUDA_TEST_OK(mm_cuda_event_record(b, &cuda_test_err));
    float ms = 0;
    CUDA_TEST_OK(mm_cuda_event_elapsed_ms(a, b, &ms, &cuda_test_err));
    double gbs = 4.0 * 2.0 * n / (ms * 1e6);
    printf("  device copy: %.3f ms for 4 x %zu MiB, %.0f GB/s (read+write)\n", ms, n >> 20, gbs);
    MM_EXPECT(ms > 0 && gbs < 20000, "implausible timing %.4f ms", ms);
    mm_cuda_free(0, x);
    mm_cuda_free(0, y);
    mm_cuda_event_destroy(a);
    mm_cuda_event_destroy(b);
}

static void test_kernel_presence(void)
{
    char summary[256];
    int rc = mm_cuda_check_kernels(0, summary, sizeof summary, &cuda_test_err);
    printf("  %s\n", summary);
    MM_EXPECT(rc == 0, "kernel check: %s", cuda_test_err.msg);
}

static void test_peer_probe(void)
{
    int n = mm_cuda_count();
    for (int s = 0; s < n; s++)
        for (int d = 0; d < n; d++) {
            double gbps = 0;
            int rc = mm_cuda_peer_probe(s, d, (size_t)64 << 20, &gbps, &cuda_test_err);
            MM_EXPECT(rc == 0, "cuda:%d -> cuda:%d: %s", s, d, cuda_test_err.msg);
            printf("  copy cuda:%d -> cuda:%d verified, %.1f GB/s\n", s, d, gbps);
        }
    MM_EXPECT(mm_cuda_peer_probe(0, 0, 6, NULL, &cuda_test_err) == -1, "odd size accepted");
}

/* The upload queue (streamed DiT blocks): copies from pinned memory on the
 * copy stream reach a read queued on the compute stream after acquire, round
 * after round into the same slot, each after the previous round's release. */
static void test_upload_queue(void)
{
    const size_t n = (size_t)48 << 20;
    uint8_t *h[2], *back = malloc(n);
    for (int k = 0; k < 2; k++) {
        h[k] = mm_cuda_host_alloc(n, &cuda_test_err);
        MM_REQUIRE(h[k], "pinned: %s", cuda_test_err.msg);
        for (size_t i = 0; i < n; i++)
            h[k][i] = (uint8_t)(i * (k ? 7u : 13u) + k);
    }
    void *slot = mm_cuda_malloc(0, n, &cuda_test_err);
    mm_cuda_upload *u = mm_cuda_upload_create(0, 2, &cuda_test_err);
    MM_REQUIRE(slot && u && back, "setup: %s", cuda_test_err.msg);
    for (int round = 0; round < 6; round++) {
        const int k = round & 1;
        CUDA_TEST_OK(mm_cuda_upload_copy(u, 0, slot, h[k], n, &cuda_test_err));
        CUDA_TEST_OK(mm_cuda_upload_acquire(u, 0, &cuda_test_err));
        CUDA_TEST_OK(mm_cuda_memcpy(-1, back, 0, slot, n, &cuda_test_err));
        CUDA_TEST_OK(mm_cuda_upload_release(u, 0, &cuda_test_err));
        MM_EXPECT(memcmp(back, h[k], n) == 0, "round %d: the slot does not hold the copy", round);
    }
    MM_EXPECT(mm_cuda_upload_copy(u, 2, slot, h[0], n, &cuda_test_err) == -1, "slot 2 of 2 refused");
    mm_cuda_upload_destroy(u);
    mm_cuda_free(0, slot);
    mm_cuda_host_free(h[0]);
    mm_cuda_host_free(h[1]);
    free(back);
}

int main(void)
{
    cuda_test_require_gpu("test_cuda_runtime");
    CUDA_CASE(test_device_info);
    CUDA_CASE(test_allocator_reuse_and_accounting);
    CUDA_CASE(test_copies_roundtrip);
    CUDA_CASE(test_events_time_work);
    CUDA_CASE(test_upload_queue);
    CUDA_CASE(test_kernel_presence);
    CUDA_CASE(test_peer_probe);
    CUDA_CASE(test_allocator_oom_message); /* last: it empties the allocator's cache */
    return mm_test_exit();
}
