#include "parallel/transfer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "backend/gpu.h"
#include "core/dtype.h"

#define MAX_GPUS 64
/* Host staging buffer: large enough for full PCIe speed, small enough to stay out of the way. */
#define STAGE_BYTES ((size_t)64 << 20)

enum { PAIR_UNPROBED = MM_PEER_UNPROBED, PAIR_OK = MM_PEER_INTACT, PAIR_BROKEN = MM_PEER_BROKEN };

static pthread_mutex_t pair_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char pair_state[MAX_GPUS][MAX_GPUS];
static mm_transfer_policy policy; /* under pair_mu */

void mm_transfer_set_policy(const mm_transfer_policy *p)
{
    pthread_mutex_lock(&pair_mu);
    policy = *p;
    pthread_mutex_unlock(&pair_mu);
}

bool mm_transfer_goes_direct(const mm_transfer_policy *p, mm_peer_verdict verdict)
{
    return p->peer_copy && verdict == MM_PEER_INTACT;
}

static mm_transfer_policy current_policy(void)
{
    pthread_mutex_lock(&pair_mu);
    mm_transfer_policy p = policy;
    pthread_mutex_unlock(&pair_mu);
    return p;
}

int mm_transfer_probe(int src, int dst, size_t bytes, mm_peer_result *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    out->src = src;
    out->dst = dst;
    if (src < 0 || dst < 0 || src >= MAX_GPUS || dst >= MAX_GPUS)
        return mm_fail(err, "peer probe: GPUs %d and %d out of range", src, dst);
    mm_error perr = {{0}};
    double gbps = 0;
    if (mm_gpu_peer_probe(src, dst, bytes ? bytes : (size_t)64 << 20, &gbps, &perr) == 0) {
        out->ok = true;
        out->gbps = gbps;
    } else {
        out->ok = false;
        snprintf(out->msg, sizeof out->msg, "%.250s", perr.msg);
        /* A probe that could not even allocate says nothing about the link. */
        if (strstr(perr.msg, "out of memory") || strstr(perr.msg, "does not exist") ||
            strstr(perr.msg, "built without CUDA") || strstr(perr.msg, "no CUDA device"))
            return mm_fail(err, "peer probe cuda:%d → cuda:%d could not run: %s", src, dst, perr.msg);
    }
    pthread_mutex_lock(&pair_mu);
    pair_state[src][dst] = out->ok ? PAIR_OK : PAIR_BROKEN;
    pthread_mutex_unlock(&pair_mu);
    return 0;
}

int mm_transfer_probe_all(int n_gpus, size_t bytes, mm_peer_result *results, int cap, char *summary,
                          size_t summary_len)
{
    int k = 0, failed = 0, ran = 0;
    double lo = 0, hi = 0;
    char first_bad[300] = "";
    for (int s = 0; s < n_gpus; s++)
        for (int d = 0; d < n_gpus; d++) {
            if (s == d)
                continue;
            mm_peer_result r;
            mm_error err = {{0}};
            if (mm_transfer_probe(s, d, bytes, &r, &err) != 0) {
                r.ok = false;
                snprintf(r.msg, sizeof r.msg, "%.250s", err.msg);
            } else {
                ran++;
            }
            if (r.ok) {
                lo = ran == 1 || r.gbps < lo ? r.gbps : lo;
                hi = r.gbps > hi ? r.gbps : hi;
            } else {
                if (!failed)
                    snprintf(first_bad, sizeof first_bad, "cuda:%d → cuda:%d: %.240s", s, d, r.msg);
                failed++;
            }
            if (results && k < cap)
                results[k] = r;
            k++;
        }
    if (summary) {
        const int pairs = n_gpus * (n_gpus - 1);
        if (pairs == 0)
            snprintf(summary, summary_len, "peer copies: nothing to probe (%d GPU)", n_gpus);
        else if (!failed)
            snprintf(summary, summary_len, "peer copies: %d/%d GPU pairs intact, %.1f to %.1f GB/s", pairs, pairs, lo,
                     hi);
        else
            snprintf(summary, summary_len,
                     "peer copies: %d of %d GPU pairs FAILED (first: %s); copies between those GPUs are staged "
                     "through host memory",
                     failed, pairs, first_bad);
    }
    return failed;
}

const char *mm_transfer_route(int src, int dst)
{
    if (!current_policy().peer_copy)
        return "host (the default; --peer-copy opts in)";
    if (src < 0 || dst < 0 || src >= MAX_GPUS || dst >= MAX_GPUS)
        return "host";
    pthread_mutex_lock(&pair_mu);
    int st = pair_state[src][dst];
    pthread_mutex_unlock(&pair_mu);
    return st == PAIR_OK ? "peer" : st == PAIR_BROKEN ? "host (probe failed)" : "unprobed";
}

/* Whether an AUTO copy between two GPUs may go direct: only where opted in,
 * and then after the pair's probe (run on first use). */
static bool peer_allowed(int src, int dst)
{
    mm_transfer_policy p = current_policy();
    if (!p.peer_copy)
        return false;
    if (src >= MAX_GPUS || dst >= MAX_GPUS)
        return false;
    pthread_mutex_lock(&pair_mu);
    int st = pair_state[src][dst];
    pthread_mutex_unlock(&pair_mu);
    if (st == PAIR_UNPROBED) {
        mm_peer_result r;
        mm_error err = {{0}};
        if (mm_transfer_probe(src, dst, (size_t)4 << 20, &r, &err) != 0)
            return false; /* could not probe: stage, and probe again next time */
        st = r.ok ? PAIR_OK : PAIR_BROKEN;
        if (!r.ok)
            fprintf(stderr, "mmh3: peer copies cuda:%d → cuda:%d return wrong data (%s); staging them through host "
                    "memory\n", src, dst, r.msg);
    }
    return mm_transfer_goes_direct(&p, (mm_peer_verdict)st);
}

static int staged(mm_device dst_dev, char *dst, mm_device src_dev, const char *src, size_t bytes, mm_error *err)
{
    size_t chunk = bytes < STAGE_BYTES ? bytes : STAGE_BYTES;
    char *buf = malloc(chunk);
    if (!buf)
        return mm_fail(err, "out of host memory for a %zu-byte staging buffer", chunk);
    int rc = 0;
    for (size_t off = 0; off < bytes && rc == 0; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        rc = mm_device_memcpy(mm_cpu(), buf, src_dev, src + off, n, err);
        if (rc == 0)
            rc = mm_device_memcpy(dst_dev, dst + off, mm_cpu(), buf, n, err);
    }
    free(buf);
    return rc;
}

int mm_transfer_bytes(mm_device dst_dev, void *dst, mm_device src_dev, const void *src, size_t bytes,
                      mm_xfer_mode mode, mm_error *err)
{
    if (bytes == 0)
        return 0;
    const bool gpus = dst_dev.kind == MM_DEVICE_CUDA && src_dev.kind == MM_DEVICE_CUDA;
    /* MM_XFER_HOST stages even within one GPU, so one GPU can test that path. */
    if (gpus && (mode == MM_XFER_HOST || (mode == MM_XFER_AUTO && dst_dev.index != src_dev.index &&
                                           !peer_allowed(src_dev.index, dst_dev.index))))
        return staged(dst_dev, dst, src_dev, src, bytes, err);
    return mm_device_memcpy(dst_dev, dst, src_dev, src, bytes, err);
}

int mm_transfer(mm_tensor *dst, const mm_tensor *src, mm_xfer_mode mode, mm_error *err)
{
    if (dst->dtype != src->dtype || dst->ndim != src->ndim || memcmp(dst->shape, src->shape,
                                                                      sizeof(int64_t) * (size_t)src->ndim) != 0) {
        char a[96], b[96];
        return mm_fail(err, "transfer: %s %s → %s %s; shapes and dtypes must be equal",
                       mm_shape_str(src->ndim, src->shape, a, sizeof a), mm_dtype_name(src->dtype),
                       mm_shape_str(dst->ndim, dst->shape, b, sizeof b), mm_dtype_name(dst->dtype));
    }
    if (!mm_tensor_is_contiguous(dst) || !mm_tensor_is_contiguous(src))
        return mm_fail(err, "transfer: both tensors must be contiguous (copy a strided view on its device first)");
    return mm_transfer_bytes(dst->device, dst->data, src->device, src->data, mm_tensor_nbytes(src), mode, err);
}
