/*
 * rt_pool.c — the CPU thread pool that compiled kernels run on.
 *
 * A kernel's outermost parallel loop is split into one contiguous chunk per
 * thread: chunk i of n iterations over T threads is [i·n/T, (i+1)·n/T), so
 * neighbouring iterations (neighbouring memory) stay on one core and the
 * split needs no queue. The caller's thread takes chunk 0 and then waits for
 * the others, so a pool of T threads starts T - 1 workers.
 *
 * A parallel_for is one "generation": the caller publishes the job and
 * bumps an atomic generation counter; every worker runs its chunk, if the
 * range has one for it, and counts `pending` down. The caller waits for all
 * of them, so no worker still reads a job when the next one is written.
 *
 * Waking a sleeping thread costs several microseconds, more than many
 * kernels take, so both sides first spin for up to SPIN_NS (a model runs its
 * kernels back to back) and only then sleep on a condition variable. The sleepers announce themselves before
 * their last look at the counter, and the other side looks for sleepers
 * after its update, so with sequentially consistent atomics no wake-up is
 * lost.
 *
 * A pool serves one parallel_for at a time. A parallel_for nested in a task
 * of one (a thread already running a chunk: every thread of the pool is
 * busy with the outer loop) runs its range on its own thread, as OpenMP
 * runs a nested region without nesting; the pool counts these
 * (krt_pool_nested). Another thread calling while the pool is busy (two
 * models running on one pool) waits for `busy` and then gets every thread,
 * rather than running its whole range alone beside the other job.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ir/options.h"
#include "rt.h"

#define SPIN_NS 50000 /* how long a thread polls before it sleeps */

struct krt_pool {
  int nthreads; /* counting the caller's */
  int nworkers; /* started */
  pthread_t *workers;
  pthread_mutex_t busy; /* held by the caller of a parallel_for for its whole duration */
  _Atomic uint64_t nested; /* parallel_fors run inline because they were nested in a task */
  /* The current job, written before `generation` moves. */
  krt_task_fn fn;
  void *arg;
  int64_t n;
  int nchunks;
  _Atomic uint64_t generation;
  _Atomic int pending;      /* workers that have not finished the current job */
  _Atomic int sleepers;     /* workers asleep (or about to be) on `wake` */
  _Atomic bool caller_asleep;
  _Atomic bool stop;
  pthread_mutex_t mu; /* for the condition variables only */
  pthread_cond_t wake, done;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Polls `done(p, arg)` for up to SPIN_NS; true as soon as it holds. */
static bool spin_until(bool (*done)(krt_pool *, uint64_t), krt_pool *p, uint64_t arg) {
  int64_t start = now_ns();
  for (int i = 1;; i++) {
    if (done(p, arg)) return true;
    cpu_relax();
    if (i % 64 == 0 && now_ns() - start > SPIN_NS) return false;
  }
}

typedef struct {
  krt_pool *pool;
  int id; /* chunk id - 1 */
} worker_start;

/* Set while this thread runs a chunk of some parallel_for (any pool). */
static _Thread_local bool in_task;

int krt_default_threads(void) {
  kiln_options o;
  kir_options_env(&o);
  if (o.num_threads > 0) return o.num_threads;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static void chunk_range(int64_t n, int nchunks, int i, int64_t *lo, int64_t *hi) {
  /* i·n/T without overflow: n < 2^63 and T <= 1024 would overflow a plain product. */
  int64_t q = n / nchunks, r = n % nchunks;
  *lo = q * i + (i < r ? i : r);
  *hi = *lo + q + (i < r);
}

/* Waits for a generation after `seen` (or stop): spins, then sleeps. */
static bool moved(krt_pool *p, uint64_t seen) {
  return atomic_load(&p->generation) != seen || atomic_load(&p->stop);
}

static uint64_t next_generation(krt_pool *p, uint64_t seen) {
  if (spin_until(moved, p, seen)) return atomic_load(&p->generation);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->sleepers, 1);
  uint64_t g;
  while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
    pthread_cond_wait(&p->wake, &p->mu);
  atomic_fetch_sub(&p->sleepers, 1);
  pthread_mutex_unlock(&p->mu);
  return g;
}

static void *worker_main(void *arg) {
  worker_start *ws = arg;
  krt_pool *p = ws->pool;
  int chunk = ws->id + 1;
  free(ws);
  uint64_t seen = 0;
  for (;;) {
    seen = next_generation(p, seen);
    if (atomic_load(&p->stop)) break;
    if (chunk < p->nchunks) {
      int64_t lo, hi;
      chunk_range(p->n, p->nchunks, chunk, &lo, &hi);
      in_task = true;
      p->fn(p->arg, lo, hi);
      in_task = false;
    }
    if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_asleep)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

krt_pool *krt_pool_create(int nthreads) {
  if (nthreads <= 0) nthreads = krt_default_threads();
  krt_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->workers = calloc((size_t)nthreads, sizeof *p->workers);
  if (!p->workers) {
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->busy, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  /* A worker that cannot be started leaves a smaller pool, not a failure. */
  for (int i = 0; i < nthreads - 1; i++) {
    worker_start *ws = malloc(sizeof *ws);
    if (!ws) break;
    *ws = (worker_start){p, i};
    if (pthread_create(&p->workers[i], NULL, worker_main, ws) != 0) {
      free(ws);
      break;
    }
    p->nworkers++;
  }
  p->nthreads = p->nworkers + 1;
  return p;
}

void krt_pool_destroy(krt_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nworkers; i++) pthread_join(p->workers[i], NULL);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->busy);
  free(p->workers);
  free(p);
}

int krt_pool_threads(const krt_pool *p) { return p ? p->nthreads : 1; }

/* Waits until every worker with a chunk has finished it: spins, then sleeps. */
static bool finished(krt_pool *p, uint64_t unused) {
  (void)unused;
  return atomic_load(&p->pending) == 0;
}

static void wait_done(krt_pool *p) {
  if (spin_until(finished, p, 0)) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->caller_asleep, true);
  while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
  atomic_store(&p->caller_asleep, false);
  pthread_mutex_unlock(&p->mu);
}

uint64_t krt_pool_nested(const krt_pool *p) {
  return p ? atomic_load(&((krt_pool *)p)->nested) : 0;
}

void krt_parallel_for(krt_pool *p, int64_t n, krt_task_fn fn, void *arg) {
  if (n <= 0) return;
  if (p && p->nthreads > 1 && n > 1 && in_task) atomic_fetch_add(&p->nested, 1);
  if (!p || p->nthreads == 1 || n == 1 || in_task) {
    fn(arg, 0, n);
    return;
  }
  pthread_mutex_lock(&p->busy); /* another thread's job first, if there is one */
  int nchunks = n < p->nthreads ? (int)n : p->nthreads;
  p->fn = fn;
  p->arg = arg;
  p->n = n;
  p->nchunks = nchunks;
  atomic_store(&p->pending, p->nworkers);
  atomic_fetch_add(&p->generation, 1); /* publishes the job */
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
  }
  int64_t lo, hi;
  chunk_range(n, nchunks, 0, &lo, &hi);
  in_task = true;
  fn(arg, lo, hi);
  in_task = false;
  wait_done(p);
  pthread_mutex_unlock(&p->busy);
}

bool krt_cpu_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool krt_cpu_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
