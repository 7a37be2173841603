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

/*
 * Every rank's `mine` against rank 0's: KILN_OK on every rank when all are
 * equal, else an error on every rank that names the highest rank whose
 * `what` differs (collective).
 */
kiln_status kt_comm_check_same(kiln_ctx *ctx, kiln_comm *c, uint64_t mine, const char *what);

#endif
