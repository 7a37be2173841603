/*
 * llvm_cpu.h — the CPU code generator: kernel IR rendered to LLVM IR,
 * optimised at O3 for a CPU, and either JIT-compiled into this process or
 * written as an ELF object for `kiln compile`.
 *
 * Data flow: lowering (codegen/lower*.c) turns a graph into a kcg_program
 * whose kernels are kernel IR (codegen/kernel.h); the runtime hands those
 * kernels to kcg_cpu_jit() and gets back one function per kernel with the
 * CPU kernel ABI of codegen/program.h:
 *
 *   void f(void **bufs, const int64_t *sizes, int64_t lo, int64_t hi, int32_t *err)
 *
 * All kernels of one call share one JIT instance; their compilation is
 * spread over the host's cores. The module owns the machine code: the
 * function pointers are valid until kcg_cpu_module_destroy().
 *
 * Both entry points are thread-safe (each call builds its own LLVM context);
 * LLVM's targets are initialised once, on first use.
 */
#ifndef KCG_LLVM_CPU_H
#define KCG_LLVM_CPU_H

#include <stdio.h>

#include "program.h"

/* Optimisation level; a zeroed struct means O3. */
typedef enum kcg_opt_level {
  KCG_OPT_DEFAULT = 0, /* O1's pass pipeline with the vectorisers, O3's code generation */
  KCG_OPT_O0,
  KCG_OPT_O1,
  KCG_OPT_O2,
  KCG_OPT_O3
} kcg_opt_level;

typedef struct kcg_cpu_options {
  /* The CPU to tune and select instructions for, as LLVM names it
     ("x86-64-v3", "skylake-avx512"); NULL: this host. */
  const char *cpu;
  /* LLVM feature string ("+avx2,+fma"); NULL: this host's features when
     `cpu` is NULL, the named CPU's own features otherwise. */
  const char *features;
  kcg_opt_level opt_level;
  /* kcg_cpu_jit compiles a module's kernels on up to this many threads;
     0: one per available core (at most 16). */
  int threads;
  /* If set, the LLVM IR is printed here (after optimisation, or before it
     if `dump_unoptimized`), one module after another (a JIT call may split
     its kernels over several): for tests and debugging. */
  FILE *dump_ir;
  bool dump_unoptimized;
  /* kcg_cpu_jit reads and writes compiled modules in this folder (kernel_cache.h); NULL: no
     cache. Not used while the IR is printed. */
  const char *cache_dir;
} kcg_cpu_options;

/* JIT-compiled kernels; owns their machine code. */
typedef struct kcg_cpu_module kcg_cpu_module;

/*
 * Compiles `n` kernels into one module and JITs it for this host (or
 * opt->cpu/features, which must run here); opt may be NULL. On success
 * *out owns the code and fns[i] is kernel i's entry point. A kernel the
 * renderer cannot express (an op with no CPU code for its dtype) is
 * KILN_ERR_UNSUPPORTED naming the op, the dtype and the kernel.
 */
kiln_status kcg_cpu_jit(kiln_ctx *ctx, kcg_kernel *const *kernels, uint32_t n,
                        const kcg_cpu_options *opt, kcg_cpu_module **out, kcg_cpu_fn *fns);
void kcg_cpu_module_destroy(kcg_cpu_module *m);

/*
 * Renders the same module and writes it to `path` as a position-independent
 * ELF object, with one global function named `<symbol_prefix><kernel name>`
 * (default visibility) per kernel; libm functions stay external calls. Kernel
 * names must be unique. opt->cpu may name any CPU of the host's architecture.
 */
kiln_status kcg_cpu_emit_object(kiln_ctx *ctx, kcg_kernel *const *kernels, uint32_t n,
                                const kcg_cpu_options *opt, const char *symbol_prefix,
                                const char *path);

/* This host as LLVM sees it, for `kiln devices` (computed once, never freed). */
const char *kcg_cpu_host_name(void);     /* e.g. "sapphirerapids", or "generic" */
const char *kcg_cpu_host_features(void); /* LLVM's "+avx512f,-sse4a,..." */
const char *kcg_cpu_host_triple(void);   /* e.g. "x86_64-pc-linux-gnu" */

#endif
