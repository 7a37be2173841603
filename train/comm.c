/*
 * comm.c — communicators (include/kiln/comm.h): the exchanges of data-parallel
 * training, over MPI point-to-point messages.
 *
 * Kiln does its own collectives rather than call MPI_Allreduce, for two
 * reasons. The order of a sum: MPI leaves it to the implementation (Open
 * MPI's tuned module picks an algorithm by message size and rank count, and
 * some of them sum in an order that depends on the segment), while here a
 * sum is always the same binomial tree over rank order — rank 0 adds rank 1's
 * partial sum, then rank 2's (which holds 2 + 3), and so on — so a run gives
 * the same bits on every rank and in every run, whatever the timing. And the
 * wait: every message is non-blocking and polled against a deadline
 * (kiln_options.comm_timeout), so a rank whose peer died fails with a message
 * instead of hanging in a blocking call.
 *
 * A sum goes in buckets (kiln_options.comm_bucket bytes): each bucket is
 * reduced to rank 0 up the tree and broadcast back down it. The tree costs
 * 2 log2(R) bucket transfers per bucket, against the 2 (R-1)/R of a ring;
 * docs/distributed.md has the numbers.
 *
 * Without MPI (KILN_HAVE_MPI undefined) the create functions fail and say so.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "ir/kir.h"
#include "ir/options.h"
#include "kiln/comm.h"
#include "train/dist.h"

#ifdef KILN_HAVE_MPI
#include <pthread.h>
#include <stdatomic.h>

#include <mpi.h>

struct kiln_comm {
  kiln_ctx *ctx;
  MPI_Comm comm;
  int rank, size;
  bool world;       /* made by kiln_comm_create_world (counts in world_refs) */
  double timeout;   /* seconds */
  size_t bucket;    /* bytes */
  bool broken;      /* a message timed out: this communicator is not used again */
  int thread_level; /* what MPI provides (MPI_Query_thread) */
  /* Sums on the communicator's thread (kt_comm_async_*): buckets posted by the caller, summed
     in the order posted; `mu` guards the queue. */
  bool thread_on, quit;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  kt_comm_bucket *q;
  size_t qcap, nposted, ndone;
  kiln_dtype qdt;
  kiln_status qerr;
  char *tmp;
  size_t tmpcap;
  kiln_ctx *caller_ctx, *thread_ctx; /* the thread's messages, copied at kt_comm_async_wait */
  _Atomic uint32_t progress;  /* kt_comm_async_progress's last value */
  uint32_t first_progress;    /* `progress` when the thread began the first bucket of a sum */
};

/* Message tags: one per kind of exchange, so that a late message of one kind never matches
   another's receive. */
enum { TAG_REDUCE = 0x4b31, TAG_BCAST, TAG_AGREE, TAG_AGREE_BCAST, TAG_CHECK, TAG_CHECK_BCAST };

/* MPI initialised by Kiln: finalized when the last world communicator goes. */
static pthread_mutex_t world_lock = PTHREAD_MUTEX_INITIALIZER;
static int world_refs;
static bool world_inited_here;

int kiln_comm_mpi_available(void) { return 1; }

static void settings(kiln_comm *c) {
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(c->ctx), NULL, &o);
  c->timeout = o.comm_timeout > 0 ? o.comm_timeout : 300.0;
  c->bucket = o.comm_bucket > 0 ? (size_t)o.comm_bucket : (size_t)4 << 20;
  if (c->bucket < 64) c->bucket = 64;
  if (c->bucket > (size_t)1 << 30) c->bucket = (size_t)1 << 30;
}

static kiln_status finish_create(kiln_ctx *ctx, kiln_comm *c, MPI_Comm from, kiln_comm **out) {
  c->ctx = ctx;
  if (MPI_Comm_dup(from, &c->comm) != MPI_SUCCESS) {
    free(c);
    return kir_fail(ctx, KILN_ERR_RUNTIME, "communicator: MPI_Comm_dup failed");
  }
  /* Errors come back as codes (and become messages here), not as MPI's default abort. */
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->comm, &c->rank);
  MPI_Comm_size(c->comm, &c->size);
  MPI_Query_thread(&c->thread_level);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  settings(c);
  *out = c;
  return KILN_OK;
}

kiln_status kiln_comm_create_world(kiln_ctx *ctx, kiln_comm **out) {
  *out = NULL;
  kiln_comm *c = calloc(1, sizeof *c);
  if (!c) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  pthread_mutex_lock(&world_lock);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  kiln_status s = KILN_OK;
  if (finalized) {
    s = kir_fail(ctx, KILN_ERR_INVALID, "communicator: MPI was finalized already");
  } else if (!inited) {
    /* The thread pool never calls MPI; the caller's thread does, and the communicator's own
       thread during a step (kt_comm_async_*), never both at once: SERIALIZED. */
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      s = kir_fail(ctx, KILN_ERR_RUNTIME, "communicator: MPI_Init_thread failed");
    else
      world_inited_here = true;
  }
  if (!s) {
    c->world = true;
    world_refs++;
  }
  pthread_mutex_unlock(&world_lock);
  if (s) {
    free(c);
    return s;
  }
  s = finish_create(ctx, c, MPI_COMM_WORLD, out);
  if (s) {
    pthread_mutex_lock(&world_lock);
    world_refs--;
    pthread_mutex_unlock(&world_lock);
  }
  return s;
}

kiln_status kiln_comm_create_mpi(kiln_ctx *ctx, const void *mpi_comm, kiln_comm **out) {
  *out = NULL;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!mpi_comm || !inited)
    return kir_fail(ctx, KILN_ERR_INVALID, "communicator: %s", !mpi_comm
                    ? "no MPI communicator given" : "MPI is not initialised (call MPI_Init first)");
  kiln_comm *c = calloc(1, sizeof *c);
  if (!c) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  return finish_create(ctx, c, *(const MPI_Comm *)mpi_comm, out);
}

static void stop_thread(kiln_comm *c);

void kiln_comm_destroy(kiln_comm *c) {
  if (!c) return;
  stop_thread(c);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->q);
  free(c->tmp);
  kiln_ctx_destroy(c->thread_ctx);
  int finalized = 0;
  MPI_Finalized(&finalized);
  /* A communicator with a message in flight that timed out cannot be freed cleanly. */
  if (!finalized && !c->broken) MPI_Comm_free(&c->comm);
  if (c->world) {
    /* After a timeout MPI_Finalize could wait for the peer that is gone: the process ends
       without it, and the launcher ends the job (or the caller calls kiln_comm_abort). */
    pthread_mutex_lock(&world_lock);
    if (--world_refs == 0 && world_inited_here && !finalized && !c->broken) {
      MPI_Finalize();
      world_inited_here = false;
    }
    pthread_mutex_unlock(&world_lock);
  }
  free(c);
}

int kiln_comm_rank(const kiln_comm *c) { return c ? c->rank : 0; }
int kiln_comm_size(const kiln_comm *c) { return c ? c->size : 1; }

void kiln_comm_abort(kiln_comm *c, int code) {
  if (c) MPI_Abort(c->comm, code);
}

/* ------------------------------------------------------------ messages */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/*
 * Waits for `req` until the deadline. MPI moves a large message in fragments only while its
 * ranks are inside MPI calls, so a rank that naps between polls slows the transfer (7.5 MB took
 * 40 ms between two ranks with 50 us naps); a rank that spins takes the CPU from a peer that
 * still computes, where ranks share cores. So messages are at most CHUNK bytes, a wait spins
 * (yielding the CPU between polls) for its first SPIN seconds — all a chunk of a flowing
 * transfer needs — and a longer wait, for a peer still computing its step, polls in naps.
 */
enum { CHUNK = 256 << 10 };
#define SPIN 2e-3

static kiln_status wait_for(kiln_comm *c, MPI_Request *req, int peer, const char *what) {
  double t0 = now();
  for (;;) {
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      c->broken = true;
      return kir_fail(c->ctx, KILN_ERR_RUNTIME, "rank %d: the %s with rank %d failed in MPI "
                      "(did that rank die?)", c->rank, what, peer);
    }
    if (done) return KILN_OK;
    double t = now() - t0;
    if (t > c->timeout) {
      c->broken = true;
      return kir_fail(c->ctx, KILN_ERR_RUNTIME, "rank %d: no %s with rank %d within %g s "
                      "(KILN_COMM_TIMEOUT): that rank died, hung or left the exchange",
                      c->rank, what, peer, c->timeout);
    }
    if (t < SPIN) sched_yield();
    else nanosleep(&(struct timespec){0, 100000}, NULL);
  }
}

static kiln_status broken(kiln_comm *c) {
  return kir_fail(c->ctx, KILN_ERR_RUNTIME, "rank %d: an earlier exchange of this communicator "
                  "failed", c->rank);
}

/* `bytes` to `peer`, in messages of CHUNK bytes at most (MPI keeps their order). */
static kiln_status send_to(kiln_comm *c, const void *buf, size_t bytes, int peer, int tag) {
  size_t off = 0;
  do {
    if (c->broken) return broken(c);
    size_t m = bytes - off < CHUNK ? bytes - off : CHUNK;
    MPI_Request req;
    if (MPI_Isend((const char *)buf + off, (int)m, MPI_BYTE, peer, tag, c->comm, &req) !=
        MPI_SUCCESS) {
      c->broken = true;
      return kir_fail(c->ctx, KILN_ERR_RUNTIME, "rank %d: MPI_Isend to rank %d failed", c->rank,
                      peer);
    }
    kiln_status s = wait_for(c, &req, peer, "send");
    if (s) return s;
    off += m;
  } while (off < bytes);
  return KILN_OK;
}

static kiln_status recv_from(kiln_comm *c, void *buf, size_t bytes, int peer, int tag) {
  size_t off = 0;
  do {
    if (c->broken) return broken(c);
    size_t m = bytes - off < CHUNK ? bytes - off : CHUNK;
    MPI_Request req;
    if (MPI_Irecv((char *)buf + off, (int)m, MPI_BYTE, peer, tag, c->comm, &req) != MPI_SUCCESS) {
      c->broken = true;
      return kir_fail(c->ctx, KILN_ERR_RUNTIME, "rank %d: MPI_Irecv from rank %d failed", c->rank,
                      peer);
    }
    kiln_status s = wait_for(c, &req, peer, "message");
    if (s) return s;
    off += m;
  } while (off < bytes);
  return KILN_OK;
}

/* ------------------------------------------------------ tree collectives */

/*
 * The binomial tree rooted at rank 0: at level k (mask 1 << k) a rank whose
 * low k+1 bits are zero receives from rank + mask; one whose bit k is its
 * lowest set bit sends to rank - mask and is done.
 */
static void add_into(kiln_dtype dt, void *acc, const void *x, size_t n) {
  if (dt == KILN_F64) {
    double *a = acc;
    const double *b = x;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
  } else {
    float *a = acc;
    const float *b = x;
    for (size_t i = 0; i < n; i++) a[i] += b[i];
  }
}

static kiln_status reduce_bucket(kiln_comm *c, kiln_dtype dt, char *buf, size_t n, char *tmp) {
  size_t bytes = n * kiln_dtype_size(dt);
  for (int mask = 1; mask < c->size; mask <<= 1) {
    if (c->rank & mask) return send_to(c, buf, bytes, c->rank - mask, TAG_REDUCE);
    if (c->rank + mask < c->size) {
      kiln_status s = recv_from(c, tmp, bytes, c->rank + mask, TAG_REDUCE);
      if (s) return s;
      add_into(dt, buf, tmp, n); /* lower ranks' sum + higher ranks': a fixed order */
    }
  }
  return KILN_OK;
}

/* Rank 0's buffer down the same tree (the root is moved to rank 0 by the caller). */
static kiln_status bcast_bucket(kiln_comm *c, char *buf, size_t bytes, int tag) {
  int top = 1;
  while (top < c->size) top <<= 1;
  int mask = top;
  if (c->rank) { /* receive from the parent: clear the lowest set bit */
    int low = c->rank & -c->rank;
    kiln_status s = recv_from(c, buf, bytes, c->rank - low, tag);
    if (s) return s;
    mask = low;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (c->rank + mask < c->size) {
      kiln_status s = send_to(c, buf, bytes, c->rank + mask, tag);
      if (s) return s;
    }
  return KILN_OK;
}

kiln_status kiln_comm_allreduce_sum(kiln_comm *c, kiln_dtype dt, void *buf, size_t n) {
  if (dt != KILN_F32 && dt != KILN_F64)
    return kir_fail(c->ctx, KILN_ERR_INVALID, "allreduce: %s, not f32 or f64", kiln_dtype_name(dt));
  if (c->size == 1 || !n) return KILN_OK;
  size_t es = kiln_dtype_size(dt), per = c->bucket / es;
  if (!per) per = 1;
  char *tmp = malloc((n < per ? n : per) * es);
  if (!tmp) return kir_fail(c->ctx, KILN_ERR_NOMEM, "out of memory");
  kiln_status s = KILN_OK;
  for (size_t lo = 0; lo < n && !s; lo += per) {
    size_t m = n - lo < per ? n - lo : per;
    char *b = (char *)buf + lo * es;
    s = reduce_bucket(c, dt, b, m, tmp);
    if (!s) s = bcast_bucket(c, b, m * es, TAG_BCAST);
  }
  free(tmp);
  return s;
}

/* ----------------------------------------------- sums on the communicator's thread */

/*
 * The data-parallel step posts each bucket of gradients as soon as the backward pass has
 * written it, and this thread sums the buckets one after another, in the order posted, with
 * the same tree as kiln_comm_allreduce_sum: the result does not depend on when a bucket was
 * posted. While a sum is under way only this thread calls MPI (the caller computes), so MPI
 * need only be SERIALIZED; it also writes its messages into a context of its own, since the
 * caller's may be written by a failing kernel at the same time.
 */
static void *thread_main(void *arg) {
  kiln_comm *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->quit && c->ndone == c->nposted) pthread_cond_wait(&c->cv, &c->mu);
    if (c->quit) break;
    kt_comm_bucket b = c->q[c->ndone];
    bool first = c->ndone == 0, skip = c->qerr != KILN_OK;
    pthread_mutex_unlock(&c->mu);
    if (first) c->first_progress = atomic_load(&c->progress);
    kiln_status s = KILN_OK;
    if (!skip) s = reduce_bucket(c, c->qdt, b.buf, b.n, c->tmp);
    if (!skip && !s) s = bcast_bucket(c, b.buf, b.n * kiln_dtype_size(c->qdt), TAG_BCAST);
    pthread_mutex_lock(&c->mu);
    if (s && !c->qerr) c->qerr = s;
    c->ndone++;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void stop_thread(kiln_comm *c) {
  if (!c->thread_on) return;
  pthread_mutex_lock(&c->mu);
  c->quit = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
  c->thread_on = false;
}

size_t kt_comm_bucket_bytes(const kiln_comm *c) { return c->bucket; }

bool kt_comm_can_overlap(const kiln_comm *c) {
  return c->size > 1 && c->thread_level >= MPI_THREAD_SERIALIZED;
}

kiln_status kt_comm_async_begin(kiln_comm *c, kiln_dtype dt, size_t max_buckets,
                                size_t max_elems) {
  if (!kt_comm_can_overlap(c))
    return kir_fail(c->ctx, KILN_ERR_UNSUPPORTED, "communicator: MPI gives no thread support "
                    "(MPI_THREAD_SERIALIZED) for sums on a thread of their own");
  if (c->broken) return broken(c);
  size_t tb = (max_elems ? max_elems : 1) * kiln_dtype_size(dt);
  if (max_buckets > c->qcap) {
    kt_comm_bucket *q = realloc(c->q, max_buckets * sizeof *q);
    if (!q) return kir_fail(c->ctx, KILN_ERR_NOMEM, "out of memory");
    c->q = q, c->qcap = max_buckets;
  }
  if (tb > c->tmpcap) {
    char *t = realloc(c->tmp, tb);
    if (!t) return kir_fail(c->ctx, KILN_ERR_NOMEM, "out of memory");
    c->tmp = t, c->tmpcap = tb;
  }
  if (!c->thread_ctx && !(c->thread_ctx = kiln_ctx_create()))
    return kir_fail(c->ctx, KILN_ERR_NOMEM, "out of memory");
  pthread_mutex_lock(&c->mu);
  c->nposted = c->ndone = 0;
  c->qdt = dt;
  c->qerr = KILN_OK;
  c->first_progress = UINT32_MAX;
  atomic_store(&c->progress, 0);
  c->caller_ctx = c->ctx;
  c->ctx = c->thread_ctx; /* until kt_comm_async_wait: only the thread writes messages */
  pthread_mutex_unlock(&c->mu);
  if (!c->thread_on) {
    c->quit = false;
    if (pthread_create(&c->thread, NULL, thread_main, c)) {
      c->ctx = c->caller_ctx;
      return kir_fail(c->ctx, KILN_ERR_RUNTIME, "communicator: could not start its thread");
    }
    c->thread_on = true;
  }
  return KILN_OK;
}

void kt_comm_async_post(kiln_comm *c, void *buf, size_t n) {
  pthread_mutex_lock(&c->mu);
  if (c->nposted < c->qcap) c->q[c->nposted++] = (kt_comm_bucket){buf, n};
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

void kt_comm_async_progress(kiln_comm *c, uint32_t step) { atomic_store(&c->progress, step); }

size_t kt_comm_async_done(kiln_comm *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->ndone;
  pthread_mutex_unlock(&c->mu);
  return n;
}

kiln_status kt_comm_async_wait(kiln_comm *c, uint32_t *first_progress) {
  pthread_mutex_lock(&c->mu);
  while (c->ndone < c->nposted) pthread_cond_wait(&c->cv, &c->mu);
  kiln_status s = c->qerr;
  c->ctx = c->caller_ctx;
  pthread_mutex_unlock(&c->mu);
  if (first_progress) *first_progress = c->first_progress;
  if (s) return kir_fail(c->ctx, s, "%s", kiln_ctx_error(c->thread_ctx));
  return KILN_OK;
}

kiln_status kiln_comm_broadcast(kiln_comm *c, void *buf, size_t bytes, int root) {
  if (root < 0 || root >= c->size)
    return kir_fail(c->ctx, KILN_ERR_INVALID, "broadcast: root %d of %d ranks", root, c->size);
  if (c->size == 1 || !bytes) return KILN_OK;
  kiln_status s = KILN_OK;
  if (root != 0) { /* the tree's root is rank 0 */
    if (c->rank == root) s = send_to(c, buf, bytes, 0, TAG_BCAST);
    else if (c->rank == 0) s = recv_from(c, buf, bytes, root, TAG_BCAST);
  }
  for (size_t lo = 0; lo < bytes && !s; lo += c->bucket)
    s = bcast_bucket(c, (char *)buf + lo, bytes - lo < c->bucket ? bytes - lo : c->bucket,
                     TAG_BCAST);
  return s;
}

/* The largest of the ranks' values, up the tree and back down, on tags of its own. */
static kiln_status agree_max(kiln_comm *c, int value, int *worst, int tag_up, int tag_down) {
  *worst = value;
  if (c->size == 1) return KILN_OK;
  int mine = value, theirs = 0;
  kiln_status s = KILN_OK;
  for (int mask = 1; mask < c->size && !s; mask <<= 1) {
    if (c->rank & mask) {
      s = send_to(c, &mine, sizeof mine, c->rank - mask, tag_up);
      break;
    }
    if (c->rank + mask < c->size &&
        !(s = recv_from(c, &theirs, sizeof theirs, c->rank + mask, tag_up)))
      mine = theirs > mine ? theirs : mine;
  }
  if (!s) s = bcast_bucket(c, (char *)&mine, sizeof mine, tag_down);
  if (!s) *worst = mine;
  return s;
}

kiln_status kiln_comm_agree(kiln_comm *c, int status, int *worst) {
  return agree_max(c, status, worst, TAG_AGREE, TAG_AGREE_BCAST);
}

kiln_status kt_comm_check_same(kiln_ctx *ctx, kiln_comm *c, uint64_t mine, const char *what) {
  if (c->size == 1) return KILN_OK;
  uint64_t root = mine;
  kiln_status s = bcast_bucket(c, (char *)&root, sizeof root, TAG_CHECK);
  int worst = 0;
  if (!s) s = agree_max(c, root == mine ? 0 : c->rank + 1, &worst, TAG_CHECK, TAG_CHECK_BCAST);
  if (s) return s;
  if (!worst) return KILN_OK;
  if (worst - 1 == c->rank)
    return kir_fail(ctx, KILN_ERR_INVALID, "data-parallel training: this rank (%d) has another "
                    "%s than rank 0", c->rank, what);
  return kir_fail(ctx, KILN_ERR_INVALID, "data-parallel training: rank %d has another %s than "
                  "rank 0", worst - 1, what);
}

#else /* no MPI in this build */

struct kiln_comm {
  int unused;
};

static kiln_status no_mpi(kiln_ctx *ctx) {
  return kir_fail(ctx, KILN_ERR_UNSUPPORTED,
                  "this build of Kiln has no MPI (it was configured without an MPI library: "
                  "install libopenmpi-dev, or run tools/setup.sh, and configure again), so it "
                  "cannot train over several processes");
}

int kiln_comm_mpi_available(void) { return 0; }
kiln_status kiln_comm_create_world(kiln_ctx *ctx, kiln_comm **out) {
  *out = NULL;
  return no_mpi(ctx);
}
kiln_status kiln_comm_create_mpi(kiln_ctx *ctx, const void *mpi_comm, kiln_comm **out) {
  (void)mpi_comm;
  *out = NULL;
  return no_mpi(ctx);
}
void kiln_comm_destroy(kiln_comm *c) { free(c); }
int kiln_comm_rank(const kiln_comm *c) { (void)c; return 0; }
int kiln_comm_size(const kiln_comm *c) { (void)c; return 1; }
kiln_status kiln_comm_allreduce_sum(kiln_comm *c, kiln_dtype dt, void *buf, size_t n) {
  (void)c, (void)dt, (void)buf, (void)n;
  return KILN_OK;
}
kiln_status kiln_comm_broadcast(kiln_comm *c, void *buf, size_t bytes, int root) {
  (void)c, (void)buf, (void)bytes, (void)root;
  return KILN_OK;
}
kiln_status kiln_comm_agree(kiln_comm *c, int status, int *worst) {
  (void)c;
  *worst = status;
  return KILN_OK;
}
void kiln_comm_abort(kiln_comm *c, int code) { (void)c, (void)code; }
kiln_status kt_comm_check_same(kiln_ctx *ctx, kiln_comm *c, uint64_t mine, const char *what) {
  (void)ctx, (void)c, (void)mine, (void)what;
  return KILN_OK;
}
bool kt_comm_can_overlap(const kiln_comm *c) { (void)c; return false; }
size_t kt_comm_bucket_bytes(const kiln_comm *c) { (void)c; return (size_t)4 << 20; }
kiln_status kt_comm_async_begin(kiln_comm *c, kiln_dtype dt, size_t max_buckets,
                                size_t max_elems) {
  (void)c, (void)dt, (void)max_buckets, (void)max_elems;
  return KILN_ERR_UNSUPPORTED;
}
void kt_comm_async_post(kiln_comm *c, void *buf, size_t n) { (void)c, (void)buf, (void)n; }
void kt_comm_async_progress(kiln_comm *c, uint32_t step) { (void)c, (void)step; }
size_t kt_comm_async_done(kiln_comm *c) { (void)c; return 0; }
kiln_status kt_comm_async_wait(kiln_comm *c, uint32_t *first_progress) {
  (void)c;
  if (first_progress) *first_progress = UINT32_MAX;
  return KILN_OK;
}

#endif

