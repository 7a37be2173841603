/*
 * dist_step.c — the exchange of the data-parallel training step: this rank's gradients in, the
 * global batch's mean gradient out (docs/distributed.md, "What a step does").
 *
 * The gradient program (train/fit.c: params, inputs -> loss, one gradient per parameter) runs
 * on this rank's shard. Each gradient, times the shard's row count, is packed into one buffer;
 * the buffer is summed across the ranks in buckets of kiln_options.comm_bucket bytes with
 * kiln_comm's fixed binomial tree, then divided by the global row count. Last come the loss,
 * the row count and a failure flag, summed as one more small bucket.
 *
 * Overlap. The gradients are packed in the order the backward pass finishes them (the step of
 * the CPU program after which each is final, krt_compiled_result_ready: the last layer's come
 * first, as in DDP), rank 0's order for every rank. The executor calls back after each step
 * (krt_compiled_run_hooked); the gradients that step finished are packed, and every bucket now
 * complete is handed to the communicator's thread (kt_comm_async_post), which sums it while the
 * backward pass goes on. Each element's sum is the same tree over the ranks whatever the
 * bucket it lies in and whenever that bucket went, so the result has the same bits as the sum
 * after the whole run (KILN_COMM_OVERLAP=0, or MPI without thread support, or a program that
 * reports no steps: a device, the interpreter).
 *
 * A rank whose run fails, or that has no rows, still posts every bucket (zeros where it has no
 * gradient) and its failure flag, so that no rank waits for a message that never comes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "ir/options.h"
#include "runtime/driver/compiled.h"
#include "runtime/exec/rt.h"
#include "train/dist.h"

struct kt_dist {
  kiln_ctx *ctx;
  kiln_comm *comm;
  kiln_dtype dt;
  uint32_t np;
  size_t n;          /* elements of all the gradients */
  uint32_t *order;   /* the parameters in their place in buf (rank 0's order) */
  size_t *off;       /* per parameter: where its gradient starts in buf */
  size_t *numel;     /* per parameter */
  uint32_t *ready;   /* per parameter: the step after which its gradient is final, or KRT_AT_END */
  uint32_t *by_ready; /* the parameters sorted by `ready` (this rank's program) */
  uint32_t nsteps;
  bool overlap;
  bool trace;        /* KILN_COMM_TRACE: a line per step on stderr */
  size_t per;        /* elements per bucket */
  size_t nbuckets;   /* of the gradients */
  char *buf;         /* n + 3 elements: the gradients, loss, rows, failures */
  /* during one step */
  void *const *out;  /* where the program writes its results (the hook's begin) */
  double w;          /* this shard's rows */
  bool *packed;      /* per parameter */
  uint32_t next;     /* by_ready[next] is the first not packed by the hook */
  uint32_t prefix;   /* order[0, prefix) are packed */
  size_t posted;     /* buckets handed to the thread */
  uint32_t first_post; /* the step after which bucket 0 went */
};

static size_t esize(const kt_dist *d) { return kiln_dtype_size(d->dt); }

static void buf_set(kt_dist *d, size_t i, double v) {
  if (d->dt == KILN_F64) ((double *)d->buf)[i] = v;
  else ((float *)d->buf)[i] = (float)v;
}
static double buf_get(const kt_dist *d, size_t i) {
  return d->dt == KILN_F64 ? ((const double *)d->buf)[i] : (double)((const float *)d->buf)[i];
}

/* Parameter i's gradient in tensor g, of another type than dt, times the shard's rows. */
static void pack_converted(kt_dist *d, uint32_t i, const kiln_tensor *g) {
  for (size_t e = 0; e < d->numel[i]; e++) buf_set(d, d->off[i] + e, d->w * kiln_tensor_get(g, e));
  d->packed[i] = true;
}

/* Parameter i's gradient at `src` (type dt, numel elements) times the shard's rows, into buf. */
static void pack(kt_dist *d, uint32_t i, const void *src, size_t numel) {
  if (d->dt == KILN_F32) {
    const float *x = src;
    float *y = (float *)d->buf + d->off[i], fw = (float)d->w; /* row counts are exact in f32 */
    for (size_t e = 0; e < numel; e++) y[e] = fw * x[e];
  } else {
    const double *x = src;
    double *y = (double *)d->buf + d->off[i], w = d->w;
    for (size_t e = 0; e < numel; e++) y[e] = w * x[e];
  }
  d->packed[i] = true;
}

/* Hands the thread every bucket that the packed prefix of buf covers (all of them at the end). */
static void post_ready(kt_dist *d, bool all) {
  while (d->prefix < d->np && d->packed[d->order[d->prefix]]) d->prefix++;
  size_t upto = all || d->prefix == d->np ? d->n : d->off[d->order[d->prefix]];
  for (; d->posted < d->nbuckets; d->posted++) {
    size_t lo = d->posted * d->per, m = d->n - lo < d->per ? d->n - lo : d->per;
    if (lo + m > upto) break;
    kt_comm_async_post(d->comm, d->buf + lo * esize(d), m);
  }
}

static void hook_begin(void *arg, void *const *out) { ((kt_dist *)arg)->out = out; }

static void hook_step(void *arg, uint32_t s) {
  kt_dist *d = arg;
  kt_comm_async_progress(d->comm, s);
  bool any = false;
  for (; d->next < d->np && d->ready[d->by_ready[d->next]] <= s; d->next++) {
    uint32_t i = d->by_ready[d->next];
    pack(d, i, d->out[1 + i], d->numel[i]);
    any = true;
  }
  size_t before = d->posted;
  if (any) post_ready(d, false);
  if (before == 0 && d->posted > 0) d->first_post = s;
}

/* ---------------------------------------------------------------- setup */

static int by_ready_cmp(const void *a, const void *b, void *r) {
  const uint32_t *ready = r, x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  if (ready[x] != ready[y]) return ready[x] < ready[y] ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* Insertion sort of the parameter ids idx[0, n) by (ready, id): a few hundred at most. */
static void sort_by_ready(uint32_t *idx, uint32_t n, uint32_t *ready) {
  for (uint32_t i = 1; i < n; i++)
    for (uint32_t j = i; j > 0 && by_ready_cmp(&idx[j - 1], &idx[j], ready) > 0; j--) {
      uint32_t t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
}

void kt_dist_destroy(kt_dist *d) {
  if (!d) return;
  free(d->order), free(d->off), free(d->numel), free(d->ready), free(d->by_ready), free(d->packed);
  free(d->buf);
  free(d);
}

kiln_status kt_dist_create(kiln_ctx *ctx, kiln_comm *comm, kiln_dtype dt,
                           const kiln_params *params, kiln_graph *grad_g,
                           const kiln_compiled *grad_c, const kiln_options *opts, kt_dist **out) {
  *out = NULL;
  kt_dist *d = calloc(1, sizeof *d);
  uint32_t np = (uint32_t)kiln_params_count(params);
  if (!d) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  d->ctx = ctx, d->comm = comm, d->dt = dt, d->np = np;
  d->order = calloc(np + 1, sizeof *d->order);
  d->off = calloc(np + 1, sizeof *d->off);
  d->numel = calloc(np + 1, sizeof *d->numel);
  d->ready = calloc(np + 2, sizeof *d->ready);
  d->by_ready = calloc(np + 1, sizeof *d->by_ready);
  d->packed = calloc(np + 1, sizeof *d->packed);
  if (!d->order || !d->off || !d->numel || !d->ready || !d->by_ready || !d->packed) {
    kt_dist_destroy(d);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), opts, &o);
  d->trace = o.comm_trace == KILN_SWITCH_ON;
  /* Where this rank's program finishes each gradient (result 1 + i); all at the end if it
     reports no steps. */
  uint32_t *rr = calloc(np + 2, sizeof *rr);
  bool steps = rr && grad_c && krt_compiled_result_ready(grad_c, rr, &d->nsteps);
  /* A gradient of another type than the trainer's (none is now: the precision pass keeps them
     f32) is converted after the run. */
  for (uint32_t i = 0; i < np; i++)
    d->ready[i] = steps && kiln_value_dtype(grad_g, kiln_graph_get_result(grad_g, 1 + i)) == dt
                      ? rr[1 + i] : KRT_AT_END;
  free(rr);
  d->overlap = steps && o.comm_overlap != KILN_SWITCH_OFF && kt_comm_can_overlap(comm);
  for (uint32_t i = 0; i < np; i++) d->order[i] = d->by_ready[i] = i;
  sort_by_ready(d->by_ready, np, d->ready);
  memcpy(d->order, d->by_ready, np * sizeof *d->order);
  /* Every rank packs in rank 0's order, so that the buckets hold the same elements. */
  kiln_status s = kiln_comm_broadcast(comm, d->order, np * sizeof *d->order, 0);
  for (uint32_t k = 0; !s && k < np; k++) {
    uint32_t i = d->order[k];
    if (i >= np) {
      s = kir_fail(ctx, KILN_ERR_INVALID, "data-parallel training: rank 0's order of the "
                   "gradients names parameter %u of %u", i, np);
      break;
    }
    d->off[i] = d->n;
    d->numel[i] = kiln_tensor_numel(kiln_params_tensor(params, i));
    d->n += d->numel[i];
  }
  d->per = kt_comm_bucket_bytes(comm) / esize(d); /* the buckets of kiln_comm_allreduce_sum */
  d->nbuckets = (d->n + d->per - 1) / d->per;
  if (!s && !(d->buf = calloc(d->n + 3, esize(d)))) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (s) {
    kt_dist_destroy(d);
    return s;
  }
  if (d->trace && kiln_comm_rank(comm) == 0) {
    fprintf(stderr, "kiln: the gradients as the backward pass finishes them:");
    for (uint32_t k = 0; k < np; k++)
      fprintf(stderr, " %s(%d)", kiln_params_name(params, d->order[k]),
              d->ready[d->order[k]] == KRT_AT_END ? -1 : (int)d->ready[d->order[k]]);
    fprintf(stderr, "\n");
  }
  *out = d;
  return KILN_OK;
}

/* ----------------------------------------------------------------- step */

/*
 * The sum after the whole run (no overlap), in the same buckets as the thread's — the
 * gradients' buckets, then the last three elements alone — so that ranks that overlap and
 * ranks that do not (no rows, no thread support, the interpreter) send the same messages.
 */
static kiln_status sum_after(kt_dist *d) {
  kiln_status s = KILN_OK;
  for (size_t lo = 0; lo < d->n && !s; lo += d->per)
    s = kiln_comm_allreduce_sum(d->comm, d->dt, d->buf + lo * esize(d),
                                d->n - lo < d->per ? d->n - lo : d->per);
  if (!s) s = kiln_comm_allreduce_sum(d->comm, d->dt, d->buf + d->n * esize(d), 3);
  return s;
}

kiln_status kt_dist_step(kt_dist *d, kiln_graph *g, kiln_compiled *c, size_t nin,
                         kiln_tensor *const *in, int64_t nloc, int64_t step, kiln_params *grads,
                         double *loss) {
  uint32_t np = d->np;
  kiln_tensor **out = calloc(np + 2, sizeof *out);
  if (!out) return kir_fail(d->ctx, KILN_ERR_NOMEM, "out of memory");
  d->w = (double)nloc;
  d->out = NULL;
  d->next = d->prefix = 0;
  d->posted = 0;
  d->first_post = UINT32_MAX;
  memset(d->packed, 0, np * sizeof *d->packed);
  kiln_status s = KILN_OK, ran = KILN_OK;
  bool overlap = d->overlap && nloc > 0;
  /* The thread's queue: every gradient bucket and the last one. */
  if (overlap && (s = kt_comm_async_begin(d->comm, d->dt, d->nbuckets + 1,
                                          d->n < d->per ? (d->n > 3 ? d->n : 3) : d->per))) {
    free(out);
    return s;
  }
  if (nloc > 0) {
    krt_run_hook hook = {hook_begin, hook_step, d};
    ran = c ? krt_compiled_run_hooked(c, d->ctx, nin, in, np + 1, out, overlap ? &hook : NULL)
            : kiln_graph_run(g, KILN_BACKEND_EAGER, nin, in, np + 1, out, NULL);
  }
  size_t early = overlap ? kt_comm_async_done(d->comm) : 0;
  /* What the hook did not pack: results copied at the end, or all of them; zeros if no run. */
  for (uint32_t i = 0; i < np; i++) {
    if (d->packed[i]) continue;
    if (!ran && nloc > 0 && kiln_tensor_dtype(out[1 + i]) != d->dt) pack_converted(d, i, out[1 + i]);
    else if (!ran && nloc > 0) pack(d, i, kiln_tensor_cdata(out[1 + i]), d->numel[i]);
    else memset(d->buf + d->off[i] * esize(d), 0, d->numel[i] * esize(d));
  }
  buf_set(d, d->n, !ran && nloc > 0 ? d->w * kiln_tensor_get(out[0], 0) : 0);
  buf_set(d, d->n + 1, ran ? 0 : d->w);
  buf_set(d, d->n + 2, ran ? 1 : 0);
  uint32_t first = UINT32_MAX;
  if (overlap) {
    post_ready(d, true);
    kt_comm_async_post(d->comm, d->buf + d->n * esize(d), 3);
    s = kt_comm_async_wait(d->comm, &first);
  } else {
    s = sum_after(d);
  }
  if (d->trace)
    fprintf(stderr, "kiln: rank %d step %lld: %s; %zu bucket(s) of gradients; the first went "
            "after step %d and began after step %d of %u; %zu done before the run ended\n",
            kiln_comm_rank(d->comm), (long long)step, overlap ? "overlapped" : "after the run",
            d->nbuckets, d->first_post == UINT32_MAX ? -1 : (int)d->first_post,
            first == UINT32_MAX ? -1 : (int)first, d->nsteps, early);
  double total = buf_get(d, d->n + 1), failed = buf_get(d, d->n + 2);
  if (!s && ran) s = ran;
  else if (!s && failed > 0)
    s = kir_fail(d->ctx, KILN_ERR_RUNTIME, "data-parallel step %lld failed on %.0f other "
                 "rank(s) (their messages say why)", (long long)step, failed);
  else if (!s && !(total > 0))
    s = kir_fail(d->ctx, KILN_ERR_INVALID, "data-parallel step: the global batch is empty");
  /* The mean gradient of the global batch, into grads (in parameter order). */
  for (uint32_t i = 0; !s && i < np; i++) {
    kiln_tensor *gt = kiln_params_tensor(grads, i);
    size_t m = kiln_tensor_numel(gt);
    if (d->dt == KILN_F32) {
      const float *x = (const float *)d->buf + d->off[i];
      float *y = kiln_tensor_data(gt);
      for (size_t e = 0; e < m; e++) y[e] = (float)((double)x[e] / total);
    } else {
      const double *x = (const double *)d->buf + d->off[i];
      double *y = kiln_tensor_data(gt);
      for (size_t e = 0; e < m; e++) y[e] = x[e] / total;
    }
  }
  if (!s) *loss = buf_get(d, d->n) / total;
  for (uint32_t i = 0; i <= np; i++) kiln_tensor_destroy(out[i]);
  free(out);
  return s;
}
