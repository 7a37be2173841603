/*
 * rt.h — Kiln's CPU runtime: the thread pool and the executor of a lowered
 * program (codegen/program.h) whose kernels are host functions.
 *
 * Data flow: codegen lowers a graph into a kcg_program and a renderer (the
 * LLVM JIT, or the static tables of an ahead-of-time compiled model) turns
 * each of its kernels into a kcg_cpu_fn. A krt_model binds the two. A run
 * binds the symbolic dims from the input shapes, plans the memory of every
 * temporary (one arena, by liveness), and walks the steps: kernels split
 * over the pool, matrix products handed to OpenBLAS when they are large,
 * scans looping their body program.
 *
 * Everything here depends only on libc, pthreads and OpenBLAS, and reads the
 * program's data structures without calling into the IR library, because
 * these files are also built alone into libkiln_rt.a, which ahead-of-time
 * compiled models link instead of LLVM. Errors are written into a kiln_ctx's
 * message buffer directly for the same reason.
 *
 * Threads: a krt_pool may be shared; krt_parallel_for() from two threads at
 * once is safe (the second one waits for the first to finish, then has every
 * thread). A krt_model is immutable after creation, so any number of
 * threads may run it at once: each run takes its own krt_workspace (symbol
 * values, memory plan, arena). One spare workspace is kept per model so that
 * repeated runs at the same sizes reuse their plan and arena.
 */
#ifndef KRT_H
#define KRT_H

#include "codegen/program.h"

/* ---------------------------------------------------------------- the pool */

typedef struct krt_pool krt_pool;
/* One contiguous chunk [lo, hi) of a parallel_for range. */
typedef void (*krt_task_fn)(void *arg, int64_t lo, int64_t hi);

/* kiln_options.num_threads of the environment (KILN_NUM_THREADS) if set, else the CPUs this process
 * may run on. */
int krt_default_threads(void);
/* A pool of `nthreads` threads counting the caller's (<= 0: krt_default_threads()); NULL if out of memory. */
krt_pool *krt_pool_create(int nthreads);
void krt_pool_destroy(krt_pool *p);
/* Threads that work on a parallel_for, the caller's included (1 for a NULL pool). */
int krt_pool_threads(const krt_pool *p);
/*
 * Calls fn(arg, lo, hi) over contiguous chunks that cover [0, n) exactly
 * once, one chunk per thread (fewer when n is small), the caller's thread
 * taking the first; returns when all are done. A NULL pool, n == 1, or a
 * call from inside a chunk of a parallel_for (nested: every thread is
 * already busy) runs fn(arg, 0, n) on the caller's thread; a call from
 * another thread while the pool is busy waits its turn.
 */
void krt_parallel_for(krt_pool *p, int64_t n, krt_task_fn fn, void *arg);
/* How many parallel_fors on p ran on one thread because they were nested in a task. */
uint64_t krt_pool_nested(const krt_pool *p);

/* ------------------------------------------------------------ the executor */

/*
 * m·n·k from which a GEMM step in f32/f64 calls cblas_?gemm or Kiln's own
 * GEMM (rt_gemm_cpu.h) instead of its generated fallback kernel (measured:
 * docs/cpu-runtime.md): 16³ for an OpenBLAS with AVX-512 kernels, 2¹⁶
 * (about 40³) for one with AVX2 kernels (Haswell, Zen), 2²² (about 161³)
 * for one that fell back to SSE-only kernels, 2¹⁸ (64³)
 * when the model's f32 products go to Kiln's GEMM (the model decides once,
 * rt_exec.c). The environment variable KILN_GEMM_THRESHOLD overrides them
 * for models made afterwards (-1: never), and KILN_GEMM=kiln or =blas picks
 * the f32 library.
 */
#define KRT_GEMM_THRESHOLD 4096
#define KRT_GEMM_THRESHOLD_AVX2_BLAS (1 << 16)
#define KRT_GEMM_THRESHOLD_SSE_BLAS (1 << 22)
#define KRT_GEMM_THRESHOLD_KILN (1 << 18)

/*
 * A kernel whose buffers hold fewer bytes than this runs on the caller's
 * thread alone: handing out chunks costs about a microsecond, which small
 * kernels do not repay (docs/cpu-runtime.md).
 */
#define KRT_PARALLEL_MIN_BYTES (32 * 1024)

/*
 * Marks needed[k] (one per kernel of `prog`) for the kernels a step may call on the CPU under
 * the options `opt`; the rest need no function (NULL in krt_model_create's fns): a blocked or
 * Winograd convolution's loop nest, which the runtime never runs, and the fallback of a GEMM step
 * that goes to the library on every machine (static sizes, m·n·k from KRT_GEMM_THRESHOLD_KILN,
 * or from the threshold `opt` sets). A GEMM step without its function takes the library whatever
 * the threshold at run time. The JIT and `kiln compile` compile only the needed kernels.
 */
void krt_kernels_needed(const kcg_program *prog, const kiln_options *opt, bool *needed);

typedef struct krt_model krt_model;
typedef struct krt_workspace krt_workspace;

/*
 * Binds `prog` to one function per kernel (fns[k] for prog->kernels[k]);
 * both must outlive the model. `pool` may be NULL (everything runs on the
 * caller's thread) and is not owned. Checks the program's structure
 * (buffer ids, argument counts, scan bodies): a malformed program is
 * KILN_ERR_INVALID.
 */
kiln_status krt_model_create(kiln_ctx *ctx, const kcg_program *prog, const kcg_cpu_fn *fns,
                             krt_pool *pool, const kiln_options *opt, krt_model **out);
void krt_model_destroy(krt_model *m);
/* Names of the entry parameters for messages ("input 1 (%w)"); copied. NULL: numbers only. */
kiln_status krt_model_set_param_names(krt_model *m, const char *const *names);
/* m·n·k from which GEMM steps call BLAS (< 0: never; 0: always). */
void krt_model_set_gemm_threshold(krt_model *m, int64_t threshold);
/* The arena size of the most recent successful run (0 before the first). */
size_t krt_model_last_peak(const krt_model *m);
/* And its krt_workspace_total (0 before the first). */
size_t krt_model_last_total(const krt_model *m);

/*
 * Binds the symbols from the inputs' dims (in_dims[p] holds the rank of
 * parameter p's type), checks every constant dim and every symbol's
 * consistency, computes the size of every buffer and plans the arena. A
 * wrong shape is KILN_ERR_RUNTIME with a message naming the input and axis.
 */
kiln_status krt_prepare(krt_model *m, kiln_ctx *ctx, const int64_t *const *in_dims,
                        krt_workspace **out);
/* Bytes of the arena the plan needs (inputs and results not counted). */
size_t krt_workspace_peak(const krt_workspace *w);
/*
 * The memory a run holds at its peak: the arena, plus every input (the
 * caller's memory the run reads), every result (the caller's memory it
 * writes) and the constants baked into the program (embedded weights
 * included), in bytes. Code, the workspace's own small tables and the
 * thread pool are not counted.
 */
size_t krt_workspace_total(const krt_workspace *w);

typedef struct krt_memory {
  size_t arena;     /* krt_workspace_peak */
  size_t unshared;  /* the arena if no two temporaries shared bytes (KILN_MEMORY_PLAN=0 gives it) */
  size_t total;     /* krt_workspace_total */
  uint32_t inplace; /* results written over an operand dying at their step, scan bodies included */
} krt_memory;
void krt_workspace_memory(const krt_workspace *w, krt_memory *out);
/*
 * Checks the plan from scratch: no two temporaries alive at a common step
 * share a byte, except a result placed exactly over an operand dying at the
 * step that writes it, where krt_kernel_inplace_ok() allows that; every
 * temporary lies inside the arena. KILN_ERR_INVALID naming the pair if not.
 */
kiln_status krt_workspace_check(const krt_workspace *w, kiln_ctx *ctx);
/*
 * Whether kernel k may write its buffer `out` over its buffer `in` (the same
 * memory): every element of `out` written once from the element of `in` at
 * the same index, which no other statement reads (runtime/exec/rt_inplace.c).
 */
bool krt_kernel_inplace_ok(const kcg_kernel *k, uint32_t in, uint32_t out);
/* The concrete dims of result r (as many as its type's rank) and its size in bytes. */
void krt_result_dims(const krt_workspace *w, uint32_t r, int64_t *dims);
size_t krt_result_bytes(const krt_workspace *w, uint32_t r);
/* The bound value of every symbol (prog->nsyms of them; unused unbound ones are 0). */
const int64_t *krt_workspace_sizes(const krt_workspace *w);
/*
 * Runs the program: in[p] is parameter p's data, out[r] the caller's memory
 * for result r (krt_result_bytes of it; results may be written there before
 * the run ends, so it must not overlap an input). A kernel's failed check is
 * KILN_ERR_RUNTIME with the kernel's message.
 */
kiln_status krt_execute(krt_workspace *w, kiln_ctx *ctx, const void *const *in,
                        void *const *out);
/*
 * For a caller that uses results before the run ends (the data-parallel step sums each
 * bucket of gradients while the backward pass goes on, train/fit.c): ready[r] is the step of
 * the top-level program after which result r's memory holds its final value, or KRT_AT_END
 * when the run copies it there as it ends (a result that is an input, a constant, or another
 * result's buffer). Structural: the same for every run of the model.
 */
#define KRT_AT_END UINT32_MAX
void krt_model_result_ready(const krt_model *m, uint32_t *ready);
uint32_t krt_model_num_steps(const krt_model *m);
/*
 * krt_execute that calls after(arg, s) on the calling thread when top-level step s has ended
 * (every thread of the pool done with it), before step s + 1 starts; not after a failed step.
 */
typedef void (*krt_step_fn)(void *arg, uint32_t step);
kiln_status krt_execute_hooked(krt_workspace *w, kiln_ctx *ctx, const void *const *in,
                               void *const *out, krt_step_fn after, void *arg);
/* Gives the workspace back to its model (kept as the spare, or freed). */
void krt_release(krt_workspace *w);

/* prepare + execute + release, for callers whose result memory is sized already. */
kiln_status krt_run(krt_model *m, kiln_ctx *ctx, const int64_t *const *in_dims,
                    const void *const *in, void *const *out);

/*
 * What this CPU runs: AVX-512 F/VL/DQ with FMA (the conv, window and attention
 * kernels' AVX-512 paths), AVX2 with FMA. __builtin_cpu_init comes first: in a
 * shared object of `kiln compile` nothing orders libgcc's constructor before
 * the first call, and without it every feature reads as absent.
 */
bool krt_cpu_avx512(void);
bool krt_cpu_avx2(void);

#endif
