/*
 * dist.h — what the data-parallel training step (train/fit.c) uses of the
 * optimizer state (train/opt_state.c): its update as a graph of its own, run
 * after the ranks' gradients are summed (docs/distributed.md).
 */
#ifndef KT_DIST_H
#define KT_DIST_H

#include "kiln/comm.h"
#include "kiln/fit.h"

/* kiln_opt_state_create on `backend` (EAGER: the interpreter; COMPILED: strict). */
kiln_status kt_opt_state_create(kiln_ctx *ctx, const kiln_optimizer *opt, const kiln_params *params,
                                double clip, kiln_backend backend, kiln_opt_state **out);
/* kiln_opt_state_step with the learning rate as given (0 included). */
kiln_status kt_opt_state_step(kiln_opt_state *st, kiln_params *params, const kiln_params *grads,
                              double lr);

/* FNV-1a over `n` bytes, continuing from h (start with KT_FNV_START). */
#define KT_FNV_START 1469598103934665603ull
static inline uint64_t kt_fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* splitmix64's finaliser: 64 well-mixed bits from x. */
static inline uint64_t kt_mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/*
 * Every rank's `mine` against rank 0's: KILN_OK on every rank when all are
 * equal, else an error on every rank that names the highest rank whose
 * `what` differs (collective).
 */
kiln_status kt_comm_check_same(kiln_ctx *ctx, kiln_comm *c, uint64_t mine, const char *what);

/*
 * Sums on the communicator's own thread, for the data-parallel step that overlaps them with
 * the backward pass (train/dist_step.c). kt_comm_async_begin starts a sum of at most
 * max_buckets buckets of at most max_elems elements of type dt; kt_comm_async_post hands the
 * thread one bucket (summed in place, like kiln_comm_allreduce_sum, in the order posted: every
 * rank must post the same sizes in the same order); kt_comm_async_wait waits for every posted
 * bucket and gives the first failure. Between begin and wait the caller must not use the
 * communicator otherwise. kt_comm_async_progress records where the caller is (a step of its
 * program), and wait gives the value it had when the thread began the first bucket
 * (UINT32_MAX: no bucket) — the evidence that the sum overlapped the computation.
 * kt_comm_can_overlap: whether MPI allows the thread (MPI_THREAD_SERIALIZED or more).
 */
typedef struct kt_comm_bucket {
  void *buf;
  size_t n;
} kt_comm_bucket;
bool kt_comm_can_overlap(const kiln_comm *c);
/* kiln_comm_allreduce_sum's bucket (kiln_options.comm_bucket, 64 bytes at least). */
size_t kt_comm_bucket_bytes(const kiln_comm *c);
kiln_status kt_comm_async_begin(kiln_comm *c, kiln_dtype dt, size_t max_buckets,
                                size_t max_elems);
void kt_comm_async_post(kiln_comm *c, void *buf, size_t n);
void kt_comm_async_progress(kiln_comm *c, uint32_t step);
size_t kt_comm_async_done(kiln_comm *c);
kiln_status kt_comm_async_wait(kiln_comm *c, uint32_t *first_progress);

/*
 * The exchange of the data-parallel step (train/dist_step.c). kt_dist_create is collective
 * (every rank takes rank 0's order of the gradients); grad_g is the gradient program and grad_c
 * its compiled form (NULL when the interpreter runs it). kt_dist_step runs the gradient program (`c`, else `g` on
 * the interpreter) on this rank's nloc rows, with the sum overlapping its backward pass where it
 * can, and writes the global batch's mean gradient into `grads` (one tensor per parameter, in
 * order, of the trainer's dtype) and its mean loss into *loss. Collective.
 */
typedef struct kt_dist kt_dist;
kiln_status kt_dist_create(kiln_ctx *ctx, kiln_comm *comm, kiln_dtype dt,
                           const kiln_params *params, kiln_graph *grad_g,
                           const kiln_compiled *grad_c, const kiln_options *opts, kt_dist **out);
void kt_dist_destroy(kt_dist *d);
kiln_status kt_dist_step(kt_dist *d, kiln_graph *g, kiln_compiled *c, size_t nin,
                         kiln_tensor *const *in, int64_t nloc, int64_t step, kiln_params *grads,
                         double *loss);

#endif
