/* The CUDA backend's runtime: devices, the caching allocator, the compute
 * stream, events, scratch buffers, and the checks `mmh3 check` runs.
 * Implements src/backend/cuda/cuda_backend.h and the runtime part of
 * kernels/mmk.h. Host code only. */
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/common.cuh"

extern "C" {
#include "backend/cuda/cuda_backend.h"
}

namespace {

const int kMaxDevices = 64;

/* Requests round up to 512 bytes below 1 MiB and to 2 MiB above, so that
 * repeated requests of one tensor shape map to one size and reuse exactly. */
size_t round_size(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes < (1u << 20))
        return (bytes + 511) & ~size_t(511);
    const size_t two_mib = size_t(2) << 20;
    return (bytes + two_mib - 1) / two_mib * two_mib;
}

struct Device {
    std::mutex mu;
    bool init = false;
    cudaStream_t stream = nullptr;
    cublasLtHandle_t lt = nullptr;
    /* allocator */
    std::multimap<size_t, void *> cache;            /* free blocks by size */
    std::unordered_map<void *, size_t> live;        /* handed-out blocks */
    size_t in_use = 0, peak = 0, reserved = 0;
    /* scratch slots (owned by the backend, allocated through the cache) */
    void *scratch[MMK_SCRATCH_COUNT] = {};
    size_t scratch_bytes[MMK_SCRATCH_COUNT] = {};
};

Device g_dev[kMaxDevices];
std::once_flag g_count_once;
int g_count = 0;

int count_devices()
{
    std::call_once(g_count_once, [] {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess)
            n = 0;
        cudaGetLastError(); /* a machine with no driver leaves a sticky-free error */
        g_count = n > kMaxDevices ? kMaxDevices : n;
    });
    return g_count;
}

int check_dev(int dev, mm_error *err)
{
    int n = count_devices();
    if (dev < 0 || dev >= n)
        return n == 0 ? mm_fail(err, "no CUDA device is usable (cudaGetDeviceCount found none)")
                      : mm_fail(err, "CUDA device %d does not exist; this host has %d (0..%d)", dev, n, n - 1);
    return 0;
}

/* Brings up a device's stream; called with d.mu held. */
int ensure_init(int dev, Device &d, mm_error *err)
{
    if (d.init)
        return 0;
    MMK_TRY(cudaSetDevice(dev), err, "cudaSetDevice");
    MMK_TRY(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), err, "creating the compute stream");
    d.init = true;
    return 0;
}

std::string mib(size_t b)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.1f MiB", double(b) / (1 << 20));
    return buf;
}

/* Called with d.mu held. */
void release_cache_locked(int dev, Device &d)
{
    cudaSetDevice(dev);
    for (auto &kv : d.cache) {
        cudaFree(kv.second);
        d.reserved -= kv.first;
    }
    d.cache.clear();
}

void *malloc_locked(int dev, Device &d, size_t bytes, mm_error *err)
{
    size_t want = round_size(bytes);
    /* Reuse the smallest cached block that fits without wasting more than an
     * eighth (or 2 MiB) of it. */
    size_t slack = want / 8 > (size_t(2) << 20) ? want / 8 : (size_t(2) << 20);
    if (want < (1u << 20))
        slack = want; /* small blocks: up to twice the size */
    auto it = d.cache.lower_bound(want);
    if (it != d.cache.end() && it->first <= want + slack) {
        void *p = it->second;
        size_t sz = it->first;
        d.cache.erase(it);
        d.live[p] = sz;
        d.in_use += sz;
        if (d.in_use > d.peak)
            d.peak = d.in_use;
        return p;
    }
    cudaSetDevice(dev);
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, want);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        release_cache_locked(dev, d);
        e = cudaMalloc(&p, want);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        mm_fail(err, "out of memory on cuda:%d allocating %s: %s in use by mmh3, %s reserved, %s free of %s (%s)",
                dev, mib(bytes).c_str(), mib(d.in_use).c_str(), mib(d.reserved).c_str(), mib(fr).c_str(),
                mib(tot).c_str(), cudaGetErrorString(e));
        return nullptr;
    }
    d.reserved += want;
    d.live[p] = want;
    d.in_use += want;
    if (d.in_use > d.peak)
        d.peak = d.in_use;
    return p;
}

void free_locked(Device &d, void *p)
{
    auto it = d.live.find(p);
    if (it == d.live.end())
        return; /* not ours: a caller bug, but freeing must never crash */
    d.in_use -= it->second;
    d.cache.emplace(it->second, p);
    d.live.erase(it);
}

} // namespace

/* ====================================================================== C API */

extern "C" int mm_cuda_count(void) { return count_devices(); }

extern "C" int mm_cuda_device_info_get(int dev, mm_cuda_device_info *out, mm_error *err)
{
    if (check_dev(dev, err))
        return -1;
    memset(out, 0, sizeof *out);
    cudaDeviceProp p;
    MMK_TRY(cudaGetDeviceProperties(&p, dev), err, "cudaGetDeviceProperties");
    out->index = dev;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->total_bytes = p.totalGlobalMem;
    out->l2_bytes = size_t(p.l2CacheSize);
    out->smem_per_block_optin = p.sharedMemPerBlockOptin;
    out->mem_bus_bits = p.memoryBusWidth;
    cudaDeviceGetAttribute(&out->clock_khz, cudaDevAttrClockRate, dev);
    cudaDeviceGetAttribute(&out->mem_clock_khz, cudaDevAttrMemoryClockRate, dev);
    cudaDriverGetVersion(&out->driver_version);
    cudaRuntimeGetVersion(&out->runtime_version);
    cudaDeviceGetPCIBusId(out->pci_bus_id, sizeof out->pci_bus_id, dev);
    MMK_TRY(cudaSetDevice(dev), err, "cudaSetDevice");
    size_t fr = 0, tot = 0;
    MMK_TRY(cudaMemGetInfo(&fr, &tot), err, "cudaMemGetInfo");
    out->free_bytes = fr;
    return 0;
}

extern "C" void *mm_cuda_malloc(int dev, size_t bytes, mm_error *err)
{
    if (check_dev(dev, err))
        return nullptr;
    Device &d = g_dev[dev];
    std::lock_guard<std::mutex> lock(d.mu);
    if (ensure_init(dev, d, err))
        return nullptr;
    return malloc_locked(dev, d, bytes, err);
}

extern "C" void mm_cuda_free(int dev, void *p)
{
    if (!p || dev < 0 || dev >= count_devices())
        return;
    Device &d = g_dev[dev];
    std::lock_guard<std::mutex> lock(d.mu);
    free_locked(d, p);
}

extern "C" int mm_cuda_release_cached(int dev, mm_error *err)
{
    if (check_dev(dev, err))
        return -1;
    Device &d = g_dev[dev];
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.init)
        MMK_TRY(cudaStreamSynchronize(d.stream), err, "synchronizing before releasing cached memory");
    release_cache_locked(dev, d);
    return 0;
}

extern "C" int mm_cuda_memory_stats(int dev, size_t *in_use, size_t *peak, size_t *reserved)
{
    *in_use = *peak = *reserved = 0;
    if (dev < 0 || dev >= count_devices())
        return -1;
    Device &d = g_dev[dev];
    std::lock_guard<std::mutex> lock(d.mu);
    *in_use = d.in_use;
    *peak = d.peak;
    *reserved = d.reserved;
    return 0;
}

extern "C" void mm_cuda_reset_peak(int dev)
{
    if (dev < 0 || dev >= count_devices())
        return;
    Device &d = g_dev[dev];
    std::lock_guard<std::mutex> lock(d.mu);
    d.peak = d.in_use;
}

extern "C" void *mm_cuda_stream(int dev)
{
    if (dev < 0 || dev >= count_devices())
        return nullptr;
    Device &d = g_dev[dev];
    std::lock_guard<std::mutex> lock(d.mu);
    if (ensure_init(dev, d, nullptr))
        return nullptr;
    return d.stream;
}

static cudaStream_t stream_of(int dev, mm_error *err)
{
    if (check_dev(dev, err))
        return nullptr;
    cudaStream_t s = (cudaStream_t)mm_cuda_stream(dev);
    if (!s)
        mm_fail(err, "cuda:%d: could not create its compute stream", dev);
    return s;
}

extern "C" int mm_cuda_sync(int dev, mm_error *err)
{
    cudaStream_t s = stream_of(dev, err);
    if (!s)
        return -1;
    MMK_TRY(cudaSetDevice(dev), err, "cudaSetDevice");
    cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess)
        return mm_fail(err, "cuda:%d: a kernel failed: %s (%s)", dev, cudaGetErrorString(e), cudaGetErrorName(e));
    return 0;
}

extern "C" int mm_cuda_make_current(int dev, mm_error *err)
{
    if (check_dev(dev, err))
        return -1;
    MMK_TRY(cudaSetDevice(dev), err, "cudaSetDevice");
    return 0;
}

extern "C" int mm_cuda_memcpy(int dst_dev, void *dst, int src_dev, const void *src, size_t bytes, mm_error *err)
{
    if (bytes == 0)
        return 0;
    int dev = dst_dev >= 0 ? dst_dev : src_dev;
    if (dev < 0)
        return mm_fail(err, "mm_cuda_memcpy: neither side is a CUDA device");
    cudaStream_t s = stream_of(dev, err);
    if (!s)
        return -1;
    /* Work already queued on the other device must finish first. */
    if (dst_dev >= 0 && src_dev >= 0 && dst_dev != src_dev && mm_cuda_sync(src_dev, err))
        return -1;
    MMK_TRY(cudaSetDevice(dev), err, "cudaSetDevice");
    cudaError_t e;
    if (dst_dev >= 0 && src_dev >= 0 && dst_dev != src_dev)
        e = cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, s);
    else
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
    if (e != cudaSuccess)
        return mm_fail(err, "copying %zu bytes (%s → %s): %s", bytes, src_dev < 0 ? "host" : "device",
                       dst_dev < 0 ? "host" : "device", cudaGetErrorString(e));
    e = cudaStreamSynchronize(s);
    if (e != cudaSuccess)
        return mm_fail(err, "copying %zu bytes: %s (%s)", bytes, cudaGetErrorString(e), cudaGetErrorName(e));
    return 0;
}

extern "C" int mm_cuda_memset0(int dev, void *p, size_t bytes, mm_error *err)
{
    cudaStream_t s = stream_of(dev, err);
    if (!s)
        return -1;
    MMK_TRY(cudaSetDevice(dev), err, "cudaSetDevice");
    MMK_TRY(cudaMemsetAsync(p, 0, bytes, s), err, "cudaMemsetAsync");
    return 0;
}

/* ---------------------------------------------------------------- events */

struct mm_cuda_event {
    int dev;
    cudaEvent_t ev;
};

extern "C" mm_cuda_event *mm_cuda_event_create(int dev, mm_error *err)
{
    if (!stream_of(dev, err))
        return nullptr;
    if (cudaSetDevice(dev) != cudaSuccess) {
        mm_fail(err, "cudaSetDevice(%d) failed", dev);
        return nullptr;
    }
    mm_cuda_event *e = new mm_cuda_event{dev, nullptr};
    cudaError_t ce = cudaEventCreate(&e->ev);
    if (ce != cudaSuccess) {
        mmk_cuda_fail(err, ce, "cudaEventCreate");
        delete e;
        return nullptr;
    }
    return e;
}

extern "C" void mm_cuda_event_destroy(mm_cuda_event *e)
{
    if (!e)
        return;
    cudaSetDevice(e->dev);
    cudaEventDestroy(e->ev);
    delete e;
}

extern "C" int mm_cuda_event_record(mm_cuda_event *e, mm_error *err)
{
    cudaStream_t s = stream_of(e->dev, err);
    if (!s)
        return -1;
    MMK_TRY(cudaSetDevice(e->dev), err, "cudaSetDevice");
    MMK_TRY(cudaEventRecord(e->ev, s), err, "cudaEventRecord");
    return 0;
}

extern "C" int mm_cuda_event_elapsed_ms(mm_cuda_event *start, mm_cuda_event *end, float *ms, mm_error *err)
{
    MMK_TRY(cudaEventSynchronize(end->ev), err, "waiting for an event");
    MMK_TRY(cudaEventElapsedTime(ms, start->ev, end->ev), err, "cudaEventElapsedTime");
    return 0;
}


/* ---------------------------------------------------------------- uploads */

extern "C" void *mm_cuda_host_alloc(size_t bytes, mm_error *err)
{
    void *p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        mm_fail(err, "pinning %s of host memory: %s", mib(bytes).c_str(), cudaGetErrorString(e));
        return nullptr;
    }
    return p;
}

extern "C" void mm_cuda_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

#define MM_UPLOAD_MAX_SLOTS 8
struct mm_cuda_upload {
    int dev;
    int slots;
    cudaStream_t copy;
    cudaEvent_t ready[MM_UPLOAD_MAX_SLOTS], released[MM_UPLOAD_MAX_SLOTS];
};

extern "C" void mm_cuda_upload_destroy(mm_cuda_upload *u)
{
    if (!u)
        return;
    cudaSetDevice(u->dev);
    if (u->copy)
        cudaStreamSynchronize(u->copy);
    if (cudaStream_t s = (cudaStream_t)mm_cuda_stream(u->dev))
        cudaStreamSynchronize(s);
    for (int i = 0; i < u->slots; i++) {
        if (u->ready[i])
            cudaEventDestroy(u->ready[i]);
        if (u->released[i])
            cudaEventDestroy(u->released[i]);
    }
    if (u->copy)
        cudaStreamDestroy(u->copy);
    delete u;
}

extern "C" mm_cuda_upload *mm_cuda_upload_create(int dev, int slots, mm_error *err)
{
    if (!stream_of(dev, err))
        return nullptr;
    if (slots < 1 || slots > MM_UPLOAD_MAX_SLOTS) {
        mm_fail(err, "an upload queue has 1..%d slots, not %d", MM_UPLOAD_MAX_SLOTS, slots);
        return nullptr;
    }
    mm_cuda_upload *u = new mm_cuda_upload{};
    u->dev = dev;
    u->slots = slots;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&u->copy, cudaStreamNonBlocking);
    for (int i = 0; i < slots && e == cudaSuccess; i++) {
        e = cudaEventCreateWithFlags(&u->ready[i], cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&u->released[i], cudaEventDisableTiming);
        /* Recorded once so that the first copy into the slot has an event to wait for. */
        if (e == cudaSuccess)
            e = cudaEventRecord(u->released[i], u->copy);
    }
    if (e != cudaSuccess) {
        mmk_cuda_fail(err, e, "creating the upload stream");
        mm_cuda_upload_destroy(u);
        return nullptr;
    }
    return u;
}

static int upload_slot(const mm_cuda_upload *u, int slot, mm_error *err)
{
    if (slot < 0 || slot >= u->slots)
        return mm_fail(err, "upload slot %d of %d", slot, u->slots);
    MMK_TRY(cudaSetDevice(u->dev), err, "cudaSetDevice");
    return 0;
}

extern "C" int mm_cuda_upload_copy(mm_cuda_upload *u, int slot, void *dst, const void *src, size_t bytes,
                                   mm_error *err)
{
    if (upload_slot(u, slot, err))
        return -1;
    MMK_TRY(cudaStreamWaitEvent(u->copy, u->released[slot], 0), err, "ordering a copy after the slot's last use");
    MMK_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, u->copy), err, "queuing a host→device copy");
    MMK_TRY(cudaEventRecord(u->ready[slot], u->copy), err, "recording a copy's end");
    return 0;
}

/* The compute stream of the upload's device, once slot is checked (NULL with
 * err set otherwise): the stream acquire and release order against. */
static cudaStream_t upload_compute_stream(mm_cuda_upload *u, int slot, mm_error *err)
{
    if (upload_slot(u, slot, err))
        return NULL;
    return stream_of(u->dev, err);
}

extern "C" int mm_cuda_upload_acquire(mm_cuda_upload *u, int slot, mm_error *err)
{
    cudaStream_t s = upload_compute_stream(u, slot, err);
    if (!s)
        return -1;
    MMK_TRY(cudaStreamWaitEvent(s, u->ready[slot], 0), err, "ordering compute after a copy");
    return 0;
}

extern "C" int mm_cuda_upload_release(mm_cuda_upload *u, int slot, mm_error *err)
{
    cudaStream_t s = upload_compute_stream(u, slot, err);
    if (!s)
        return -1;
    MMK_TRY(cudaEventRecord(u->released[slot], s), err, "recording a slot's last use");
    return 0;
}

/* ---------------------------------------------------------------- mmk runtime */

/* The kernel policy: written once before any work (mmk_policy_set), read
 * at every launch. */
static mmk_policy g_policy = {1, 1, 1, 1, 1};

extern "C" void mmk_policy_set(const mmk_policy *p) { g_policy = *p; }

extern "C" const mmk_policy *mmk_policy_get(void) { return &g_policy; }

extern "C" int mmk_device_enter(int dev, mm_error *err)
{
    if (check_dev(dev, err))
        return -1;
    MMK_TRY(cudaSetDevice(dev), err, "cudaSetDevice");
    return 0;
}

extern "C" void *mmk_cublaslt(int dev, mm_error *err)
{
    if (check_dev(dev, err))
        return nullptr;
    Device &d = g_dev[dev];
    std::lock_guard<std::mutex> lock(d.mu);
    if (ensure_init(dev, d, err))
        return nullptr;
    if (!d.lt) {
        cudaSetDevice(dev);
        cublasStatus_t st = cublasLtCreate(&d.lt);
        if (st != CUBLAS_STATUS_SUCCESS) {
            mm_fail(err, "cublasLtCreate failed on cuda:%d: %s", dev, cublasLtGetStatusString(st));
            d.lt = nullptr;
        }
    }
    return d.lt;
}

extern "C" void *mmk_scratch(int dev, int slot, size_t bytes, mm_error *err)
{
    if (check_dev(dev, err))
        return nullptr;
    if (slot < 0 || slot >= MMK_SCRATCH_COUNT) {
        mm_fail(err, "scratch slot %d out of range", slot);
        return nullptr;
    }
    Device &d = g_dev[dev];
    std::lock_guard<std::mutex> lock(d.mu);
    if (ensure_init(dev, d, err))
        return nullptr;
    if (d.scratch_bytes[slot] >= bytes && d.scratch[slot])
        return d.scratch[slot];
    /* Growing: the old block may still be read by queued work, but it goes to
     * the cache and only work queued later on the same stream can reuse it. */
    if (d.scratch[slot])
        free_locked(d, d.scratch[slot]);
    d.scratch[slot] = malloc_locked(dev, d, bytes, err);
    d.scratch_bytes[slot] = d.scratch[slot] ? round_size(bytes) : 0;
    return d.scratch[slot];
}

/* ---------------------------------------------------------------- checks */

extern "C" int mm_cuda_check_kernels(int dev, char *summary, size_t summary_len, mm_error *err)
{
    if (check_dev(dev, err))
        return -1;
    cudaDeviceProp p;
    MMK_TRY(cudaGetDeviceProperties(&p, dev), err, "cudaGetDeviceProperties");
    MMK_TRY(cudaSetDevice(dev), err, "cudaSetDevice");
    int cc = p.major * 10 + p.minor;
    const mmk_kernel_entry *(*lists[])(int *) = {mmk_kernels_gemm,        mmk_kernels_norm,      mmk_kernels_convrot,
                                                 mmk_kernels_elementwise, mmk_kernels_attention, mmk_kernels_conv,
                                                 mmk_kernels_fa3,         mmk_kernels_qgemm,     mmk_kernels_sparse};
    int present = 0, optional_absent = 0, total = 0;
    std::string missing;
    for (auto list : lists) {
        int n = 0;
        const mmk_kernel_entry *k = list(&n);
        for (int i = 0; i < n; i++) {
            total++;
            cudaFuncAttributes fa;
            cudaError_t e = cudaFuncGetAttributes(&fa, k[i].fn);
            cudaGetLastError();
            /* A kernel that needs sm_90a but runs from sm_80 code would be an
             * empty body: require its binary to match the device. */
            bool ok = e == cudaSuccess && (k[i].min_cc < 90 || fa.binaryVersion >= 90);
            if (ok)
                present++;
            else if (k[i].min_cc > cc)
                optional_absent++;
            else
                missing += std::string(missing.empty() ? "" : ", ") + k[i].name;
        }
    }
    if (summary)
        snprintf(summary, summary_len, "%d/%d kernels have code for sm_%d%s%s", present, total, cc,
                 optional_absent ? " (the rest need a newer GPU)" : "", missing.empty() ? "" : "; MISSING some");
    if (!missing.empty())
        return mm_fail(err,
                       "cuda:%d (%s, sm_%d): no code for kernels: %s; rebuild with CUDA_ARCH including this "
                       "architecture (e.g. -gencode arch=compute_%d,code=sm_%d)",
                       dev, p.name, cc, missing.c_str(), cc, cc);
    return 0;
}

extern "C" int mm_cuda_peer_probe(int src, int dst, size_t bytes, double *gbps, mm_error *err)
{
    if (check_dev(src, err) || check_dev(dst, err))
        return -1;
    if (bytes == 0 || bytes % 4)
        return mm_fail(err, "peer probe size must be a positive multiple of 4 bytes, got %zu", bytes);
    if (src != dst) {
        int can = 0;
        cudaDeviceCanAccessPeer(&can, dst, src);
        if (can) {
            cudaSetDevice(dst);
            cudaError_t e = cudaDeviceEnablePeerAccess(src, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
                return mmk_cuda_fail(err, e, "cudaDeviceEnablePeerAccess");
            cudaGetLastError();
        }
    }
    size_t n = bytes / 4;
    std::vector<uint32_t> host(n), back(n);
    /* A pattern in which every word differs and no byte repeats in step. */
    for (size_t i = 0; i < n; i++)
        host[i] = uint32_t(i * 2654435761u) ^ 0xA5C3F00Fu;
    void *a = mm_cuda_malloc(src, bytes, err);
    if (!a)
        return -1;
    void *b = mm_cuda_malloc(dst, bytes, err);
    if (!b) {
        mm_cuda_free(src, a);
        return -1;
    }
    int rc = -1;
    mm_cuda_event *t0 = nullptr, *t1 = nullptr;
    float ms = 0;
    if (mm_cuda_memcpy(src, a, -1, host.data(), bytes, err) || mm_cuda_memset0(dst, b, bytes, err) ||
        mm_cuda_sync(dst, err))
        goto out;
    if (!(t0 = mm_cuda_event_create(dst, err)) || !(t1 = mm_cuda_event_create(dst, err)))
        goto out;
    if (mm_cuda_event_record(t0, err) || mm_cuda_memcpy(dst, b, src, a, bytes, err) || mm_cuda_event_record(t1, err) ||
        mm_cuda_event_elapsed_ms(t0, t1, &ms, err))
        goto out;
    if (mm_cuda_memcpy(-1, back.data(), dst, b, bytes, err))
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (back[i] != host[i]) {
            mm_fail(err, "peer copy cuda:%d → cuda:%d corrupted data: word %zu is 0x%08x, expected 0x%08x", src, dst, i,
                    back[i], host[i]);
            goto out;
        }
    }
    if (gbps)
        *gbps = ms > 0 ? double(bytes) / (double(ms) * 1e6) : 0;
    rc = 0;
out:
    mm_cuda_event_destroy(t0);
    mm_cuda_event_destroy(t1);
    mm_cuda_free(src, a);
    mm_cuda_free(dst, b);
    return rc;
}
