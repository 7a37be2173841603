/*
 * Kiln public API: compiling a graph to native code in this process (JIT).
 *
 * kiln_compile() legalizes a graph (compound ops without a kernel of their
 * own become primitives), lowers it to loop-nest kernels, and compiles them
 * with LLVM for this machine's CPU. The result, a kiln_compiled, runs at any
 * value of the graph's symbolic dims: each run binds them from the input
 * shapes, checks every input axis, plans the memory of the intermediates
 * (one arena, reused by liveness) and runs the kernels on a thread pool;
 * large matrix products go to OpenBLAS.
 *
 * An op or dtype without a compiled kernel is KILN_ERR_UNSUPPORTED, with a
 * message naming both: "backend 'compiled': no compiled kernel for op 'OP'
 * (DTYPE)". Nothing falls back to the interpreter here (kiln_graph_run()
 * with the `auto` backend does that, and says so).
 *
 * Threads: a kiln_compiled is read-only once made, so any number of threads
 * may run it at the same time, each passing its own kiln_ctx. Every run
 * takes its own workspace (symbol values, memory plan, arena), so runs never
 * share intermediate memory; one workspace is kept between runs and reused
 * when the sizes repeat. The model's thread pool serves one run at a time:
 * a run that finds it busy runs its kernels on its own thread, correctly but
 * without the pool's help. For full speed on several threads at once,
 * compile one instance per thread. kiln_compiled_destroy() must not overlap
 * a run. The graph may be destroyed once it is compiled.
 */
#ifndef KILN_COMPILE_H
#define KILN_COMPILE_H

#include "options.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_compiled kiln_compiled;

typedef enum kiln_opt_level {
  KILN_O_DEFAULT = 0, /* O1's pass pipeline with the vectorisers, O3's code generation
                         (docs/compile.md); KILN_O3 runs O3's whole pipeline */
  KILN_O0,
  KILN_O1,
  KILN_O2,
  KILN_O3
} kiln_opt_level;

/* Options of kiln_compile(); a zeroed struct (or NULL) means the defaults. */
typedef struct kiln_compile_options {
  const char *cpu;          /* LLVM CPU name ("x86-64-v3"), which must run here; NULL: this CPU */
  const char *features;     /* LLVM features ("+avx2,+fma"); NULL: those of `cpu` or this CPU */
  kiln_opt_level opt_level;
  int num_threads;          /* threads of the model's pool; 0: the options' num_threads or the CPUs */
  FILE *dump_ir;            /* if set, the optimised LLVM IR of the kernels is written here */
  /*
   * Where the model runs: NULL or "cpu" (the above), or a device, "vulkan[:N]", "cuda[:N]" or
   * "hip[:N]" (`kiln devices`), or "auto" (the first of CUDA, ROCm and a Vulkan GPU that opens,
   * else the CPU), opened here and kept by the kiln_compiled: the graph is lowered
   * as kiln_graph_run's backend of that kind lowers it and compiled for that device once (cpu,
   * features, opt_level, num_threads and dump_ir do not apply); every run copies its inputs to
   * the device and its results back (docs/gpu.md). No such device is KILN_ERR_UNSUPPORTED with
   * its message ("no CUDA device (...)"), an op it cannot run KILN_ERR_UNSUPPORTED naming it.
   */
  const char *device;
  /* The precision policy, "fp64", "fp32" (NULL), "tf32", "bf16" or "fp16" (docs/precision.md). */
  const char *precision;
  /* This model's options (include/kiln/options.h); NULL: the context's and the environment's. */
  const kiln_options *options;
} kiln_compile_options;

/* Compiles top-level graph `g`; errors go to g's context. */
KILN_API kiln_status kiln_compile(kiln_graph *g, const kiln_compile_options *opt,
                                  kiln_compiled **out);
KILN_API void kiln_compiled_destroy(kiln_compiled *c);

KILN_API size_t kiln_compiled_num_inputs(const kiln_compiled *c);
KILN_API size_t kiln_compiled_num_outputs(const kiln_compiled *c);
/* The device it runs on, as kiln_run_info names it ("cpu", "vulkan:0", "cuda:1"; never "auto"). */
KILN_API void kiln_compiled_device(const kiln_compiled *c, char *buf, size_t size);
/* Threads that run the kernels, the caller's included. */
KILN_API int kiln_compiled_num_threads(const kiln_compiled *c);
/*
 * The peak memory of the most recent successful run, in bytes; 0 before one:
 * the arena of its intermediates (kiln_compiled_arena_bytes) plus its inputs,
 * its results and the program's constants. Not counted: code, the run's
 * small bookkeeping tables, thread stacks. See docs/passes.md (memory plan).
 */
KILN_API size_t kiln_compiled_peak_bytes(const kiln_compiled *c);
/* The arena alone: intermediates placed by liveness, in place where safe; 0 before a run. */
KILN_API size_t kiln_compiled_arena_bytes(const kiln_compiled *c);

/*
 * In the calls below `ctx` receives the error message; NULL means the
 * context of the graph `c` was compiled from (which must still exist, and
 * is then not to be used by two threads at once).
 */

/*
 * Runs `c` on host tensors (one per graph parameter, in order, of the
 * parameter's dtype and rank; their sizes bind the symbolic dims). On
 * success the n_out results are new tensors owned by the caller, and info
 * (may be NULL) says the compiled backend ran.
 */
KILN_API kiln_status kiln_compiled_run(kiln_compiled *c, kiln_ctx *ctx, size_t n_in,
                                       kiln_tensor *const *inputs, size_t n_out,
                                       kiln_tensor **outputs, kiln_run_info *info);

/*
 * Result r's dtype, rank and dims (room for KILN_MAX_RANK) for inputs whose
 * dims are in_dims[p] (as many as parameter p's rank): for callers that
 * bring their own memory to kiln_compiled_run_raw().
 */
KILN_API kiln_status kiln_compiled_output_shape(kiln_compiled *c, kiln_ctx *ctx,
                                                const int64_t *const *in_dims, size_t r,
                                                kiln_dtype *dtype, size_t *rank, int64_t *dims);

/*
 * Runs `c` on the caller's memory: in[p] holds parameter p's elements in its
 * dtype, row-major, with dims in_dims[p]; out[r] has room for result r (see
 * kiln_compiled_output_shape) and must not overlap any input.
 */
KILN_API kiln_status kiln_compiled_run_raw(kiln_compiled *c, kiln_ctx *ctx,
                                           const void *const *in, const int64_t *const *in_dims,
                                           void *const *out);

#ifdef __cplusplus
}
#endif
#endif
