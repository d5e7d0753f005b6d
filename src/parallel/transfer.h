/* Moving bytes between devices: the one function every cross-device copy of
 * the multi-GPU code goes through (placement's text-encoder → DiT → VAE
 * hand-offs, the host world's exchange), so that a machine whose peer copies
 * are broken still gives right answers.
 *
 * Some machines (IOMMU / PCIe ACS setups, some virtual machines) complete a
 * GPU→GPU peer copy "successfully" and deliver zeros or stale data, and the
 * original project found that on some hosts (2 × RTX 6000 Ada) a passing
 * probe does not protect later copies. So every GPU→GPU copy is staged
 * through host memory in chunks by default; a direct copy is used only when
 * the user opted in (mm_transfer_policy.peer_copy: `--peer-copy`, or
 * MMH3_PEER_COPY=1, read once by the command line) AND that ordered pair
 * passed the integrity probe (a pattern copied and read back word by word,
 * mm_gpu_peer_probe, as `mmh3 check` runs it), run once per pair on first
 * use and remembered for the life of the process.
 */
#ifndef MMH3_PARALLEL_TRANSFER_H
#define MMH3_PARALLEL_TRANSFER_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "core/tensor.h"

/* How AUTO copies between GPUs go, set once at start-up from the engine's
 * options (the default, all false: through the host). */
typedef struct mm_transfer_policy {
    bool peer_copy; /* opted in: direct where the pair passed the probe */
} mm_transfer_policy;
void mm_transfer_set_policy(const mm_transfer_policy *policy);

/* The route AUTO takes between two GPUs under a policy and a probe verdict
 * (the pure decision, for tests): true = direct. */
typedef enum mm_peer_verdict { MM_PEER_UNPROBED = 0, MM_PEER_INTACT, MM_PEER_BROKEN } mm_peer_verdict;
bool mm_transfer_goes_direct(const mm_transfer_policy *policy, mm_peer_verdict verdict);

typedef enum mm_xfer_mode {
    MM_XFER_AUTO = 0, /* through the host, or direct where opted in and the pair is verified */
    MM_XFER_PEER,     /* direct (peer) copy, unverified */
    MM_XFER_HOST,     /* always through host memory (also between two buffers of one GPU) */
} mm_xfer_mode;

/* Copies `bytes` from src on src_dev to dst on dst_dev (any two devices, the
 * CPU included). Synchronous with respect to the host, and ordered after the
 * work already queued on the compute streams of both devices. */
int mm_transfer_bytes(mm_device dst_dev, void *dst, mm_device src_dev, const void *src, size_t bytes,
                      mm_xfer_mode mode, mm_error *err);

/* Tensor form: equal dtype and shape, both contiguous. */
int mm_transfer(mm_tensor *dst, const mm_tensor *src, mm_xfer_mode mode, mm_error *err);

/* Result of probing one ordered pair of GPUs. */
typedef struct mm_peer_result {
    int src, dst;
    bool ok;        /* the data arrived intact */
    double gbps;    /* measured rate of the direct copy (0 when it failed) */
    char msg[256];  /* what went wrong, when !ok */
} mm_peer_result;

/* Probes the pair now (bytes: a positive multiple of 4; 0 = 64 MiB) and
 * remembers the verdict for MM_XFER_AUTO. Returns 0 when it ran (verdict in
 * *out), -1 when it could not run at all. */
int mm_transfer_probe(int src, int dst, size_t bytes, mm_peer_result *out, mm_error *err);

/* Probes every ordered pair of the first n_gpus GPUs (n·(n−1) results,
 * at most `cap`) and writes a one-line summary ("6/6 pairs intact, 38.2 to
 * 41.0 GB/s" or which pair corrupted data and that copies between them go
 * through the host). Returns the number of pairs that failed. */
int mm_transfer_probe_all(int n_gpus, size_t bytes, mm_peer_result *results, int cap, char *summary,
                          size_t summary_len);

/* How copies from src to dst go under MM_XFER_AUTO right now: "host (the
 * default; --peer-copy opts in)", "peer", "host (probe failed)", "unprobed". */
const char *mm_transfer_route(int src, int dst);

#endif
