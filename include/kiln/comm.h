/*
 * Kiln public API: communicators — data-parallel training over several processes.
 *
 * A kiln_comm is a group of processes (ranks) that train one model together:
 * each runs the compiled step on its shard of the global batch, the gradients
 * are summed across the ranks in a fixed order (so the result never depends
 * on timing) and every rank applies the same optimizer update. Give one to
 * kiln_train_spec.comm (include/kiln/fit.h); docs/distributed.md.
 *
 * The transport is MPI, found when Kiln is built (KILN_HAVE_MPI). The header
 * needs no mpi.h: an MPI communicator is passed by address. In a build
 * without MPI every create function fails with KILN_ERR_UNSUPPORTED and a
 * message that says so.
 *
 * Every exchange waits at most a timeout (kiln_options.comm_timeout,
 * KILN_COMM_TIMEOUT, 300 s by default) for a peer: a rank that died or hung
 * gives the others an error, never a hang. After such an error the
 * communicator refuses every exchange; end the job (kiln_comm_abort), since
 * MPI cannot finalize while a peer is gone.
 */
#ifndef KILN_COMM_H
#define KILN_COMM_H

#include <stddef.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_comm kiln_comm;

/* 1 when this build of Kiln has MPI, else 0. */
KILN_API int kiln_comm_mpi_available(void);

/*
 * Every process of the MPI job (MPI_COMM_WORLD). Initialises MPI when the
 * program has not (and then finalizes it when the last such communicator is
 * destroyed). Errors are written to ctx, which must outlive the communicator.
 */
KILN_API kiln_status kiln_comm_create_world(kiln_ctx *ctx, kiln_comm **out);
/*
 * The processes of an MPI communicator of the caller's: `mpi_comm` is the
 * address of an MPI_Comm (MPI initialised by the caller). Kiln duplicates it,
 * so its messages never meet the caller's; collective over that communicator.
 */
KILN_API kiln_status kiln_comm_create_mpi(kiln_ctx *ctx, const void *mpi_comm, kiln_comm **out);
KILN_API void kiln_comm_destroy(kiln_comm *c);
KILN_API int kiln_comm_rank(const kiln_comm *c);
KILN_API int kiln_comm_size(const kiln_comm *c);

/*
 * Sums n elements of a KILN_F32 or KILN_F64 array across the ranks, in place:
 * every rank ends with the same bits, summed in an order fixed by the ranks'
 * number alone (a binomial tree over rank order), in buckets of
 * kiln_options.comm_bucket bytes. Collective.
 */
KILN_API kiln_status kiln_comm_allreduce_sum(kiln_comm *c, kiln_dtype dt, void *buf, size_t n);
/* Rank `root`'s `bytes` bytes of buf copied to every rank. Collective. */
KILN_API kiln_status kiln_comm_broadcast(kiln_comm *c, void *buf, size_t bytes, int root);
/*
 * Every rank's status, agreed: *worst becomes the largest of the ranks'
 * `status` values (KILN_OK when all are). Collective; fails (and leaves
 * *worst as status) when a rank does not answer within the timeout.
 */
KILN_API kiln_status kiln_comm_agree(kiln_comm *c, int status, int *worst);
/* Ends every process of the job with exit code `code` (MPI_Abort): for a program that found a
 * rank unresponsive and must not wait for it. Does nothing without MPI. */
KILN_API void kiln_comm_abort(kiln_comm *c, int code);

#ifdef __cplusplus
}
#endif
#endif
