/* A group of ranks that exchange data: the communication under the
 * sequence-parallel DiT.
 *
 * Two kinds of world, one interface:
 *   MM_WORLD_NCCL  N GPUs of this process (ncclCommInitAll), or one rank of
 *                  a group of processes (one process per GPU, joined with
 *                  a unique id from rank 0). Messages run on the rank's
 *                  compute stream (the stream of the mm_ctx passed), so they
 *                  are ordered with the ops before and after them and the
 *                  host never waits.
 *   MM_WORLD_HOST  N ranks of this process, each driven by its own thread,
 *                  exchanging through host memory (pointers posted to shared
 *                  slots, a barrier, copies by the receiver, a barrier). Any
 *                  devices: CPU ranks (the tests' simulated world) or GPUs
 *                  without NCCL (slow, but every copy goes through
 *                  mm_transfer_bytes and so survives broken peer copies).
 *
 * Every rank of a world is driven by one host thread (ranks of one world
 * must not be driven from one thread: a rank waits for its peers).
 */
#ifndef MMH3_PARALLEL_COMM_H
#define MMH3_PARALLEL_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/ops.h"
#include "core/error.h"
#include "core/tensor.h"
#include "parallel/partition.h"

typedef enum mm_world_kind { MM_WORLD_HOST = 0, MM_WORLD_NCCL } mm_world_kind;

typedef struct mm_world mm_world;
typedef struct mm_comm mm_comm;

/* N ranks in this process; rank r works on devices[r]. NCCL: distinct CUDA
 * devices. */
int mm_world_create(mm_world **out, mm_world_kind kind, int n, const mm_device *devices, mm_error *err);
/* Multi-process NCCL: rank 0 makes an id (hex text, 256 characters + NUL)
 * and hands it to the others (environment, file, command line); every
 * process then joins with its rank and its GPU. */
int mm_world_nccl_new_id(char id_hex[257], mm_error *err);
int mm_world_join_nccl(mm_world **out, const char *id_hex, int n, int rank, int device, mm_error *err);
void mm_world_destroy(mm_world *w);

int mm_world_size(const mm_world *w);
mm_world_kind mm_world_kind_of(const mm_world *w);
/* Rank r's endpoint (NULL when that rank lives in another process). */
mm_comm *mm_world_comm(mm_world *w, int rank);
/* "nccl (NCCL 2.28.9 …), 4 ranks" / "host, 2 ranks". */
void mm_world_describe(const mm_world *w, char *buf, size_t n);

int mm_comm_rank(const mm_comm *c);
int mm_comm_size(const mm_comm *c);
mm_device mm_comm_device(const mm_comm *c);

/* One rank's part of an exchange: for each message k in sends, `count`
 * elements of elem_bytes at send + offset go to peer sends[k].peer; recvs[k]
 * says where the data from recvs[k].peer lands in recv. Between two ranks
 * the j-th send of one matches the j-th receive of the other, and their
 * counts must be equal. send and recv live on ctx's device. Every rank of
 * the world must call it with matching messages. */
int mm_comm_exchange(mm_comm *c, mm_ctx *ctx, const void *send, const mm_sp_msg *sends, int n_sends, void *recv,
                     const mm_sp_msg *recvs, int n_recvs, size_t elem_bytes, mm_error *err);

/* Host world: waits for every rank. NCCL world: no-op. Fails after an abort. */
int mm_comm_barrier(mm_comm *c, mm_error *err);

/* Gives up on the world: ranks waiting in the host world wake with an error,
 * NCCL communicators are aborted (their pending operations end). The world
 * is unusable afterwards; safe to call from any thread. */
void mm_world_abort(mm_world *w, const char *why);
bool mm_world_aborted(const mm_world *w);

#endif
