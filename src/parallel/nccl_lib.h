/* NCCL, loaded at run time with dlopen so that a build without NCCL and a
 * host without it still work (one GPU never needs it; the host world of
 * comm.h covers the rest). Only the part of NCCL's C ABI this engine uses is
 * declared here (types and enum values as in nccl.h since 2.7; the ABI is
 * stable across 2.x).
 *
 * Where the library is looked for, in order: $MMH3_NCCL_LIB (a file), the
 * dynamic loader's own search (libnccl.so.2, libnccl.so), $CUDA_HOME/lib64,
 * /usr/local/cuda/lib64, the distribution's library folders, and the NCCL
 * wheel of a PyTorch installation (…/site-packages/nvidia/nccl/lib/, e.g.
 * /opt/torch/.venv/lib/python3.12/...; $MMH3_NCCL_PYTHON_PREFIX adds a prefix
 * to search).
 *
 * NVLink multicast (NVLS) is forced off (NCCL_NVLS_ENABLE=0) before any
 * communicator exists: a program that uses it can take the GPUs of a shared
 * host out of service. The all-to-all never needs it.
 */
#ifndef MMH3_PARALLEL_NCCL_LIB_H
#define MMH3_PARALLEL_NCCL_LIB_H

#include <stddef.h>

#include "core/error.h"

typedef struct mm_nccl_comm_s *mm_nccl_comm_t; /* ncclComm_t */
typedef struct {
    char internal[128];
} mm_nccl_unique_id; /* ncclUniqueId */

enum { MM_NCCL_SUCCESS = 0, MM_NCCL_IN_PROGRESS = 7 };
enum { MM_NCCL_INT8 = 0, MM_NCCL_UINT8 = 1, MM_NCCL_FLOAT32 = 7, MM_NCCL_BFLOAT16 = 9 };
enum { MM_NCCL_SUM = 0 };

typedef struct mm_nccl {
    char path[512];
    int version; /* e.g. 22807 for 2.28.7 */
    int (*get_version)(int *version);
    int (*get_unique_id)(mm_nccl_unique_id *id);
    int (*comm_init_all)(mm_nccl_comm_t *comms, int ndev, const int *devlist);
    int (*comm_init_rank)(mm_nccl_comm_t *comm, int nranks, mm_nccl_unique_id id, int rank);
    int (*comm_destroy)(mm_nccl_comm_t comm);
    int (*comm_abort)(mm_nccl_comm_t comm);
    int (*comm_get_async_error)(mm_nccl_comm_t comm, int *async_error);
    const char *(*get_error_string)(int result);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*send)(const void *buf, size_t count, int dtype, int peer, mm_nccl_comm_t comm, void *stream);
    int (*recv)(void *buf, size_t count, int dtype, int peer, mm_nccl_comm_t comm, void *stream);
    int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, mm_nccl_comm_t comm,
                      void *stream);
} mm_nccl;

/* Loads NCCL once per process (thread-safe) and returns the shared table;
 * fails with every place it looked. Also sets NCCL_NVLS_ENABLE=0. */
int mm_nccl_load(const mm_nccl **out, mm_error *err);

/* "NCCL 2.28.7 (/path/libnccl.so.2)" or why it is not available. */
void mm_nccl_describe(char *buf, size_t n);

/* Records "<what>: <NCCL's message>" in err and returns -1 unless rc is success. */
int mm_nccl_check(const mm_nccl *nc, int rc, mm_error *err, const char *what);

#endif
