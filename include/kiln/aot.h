/*
 * Kiln public API: ahead-of-time compilation into a shared object.
 *
 * kiln_compile_shared() lowers a graph, generates its kernels as machine
 * code for a chosen CPU, and links them with Kiln's small runtime
 * (libkiln_rt.a: the executor, the memory plan, the thread pool) into a
 * self-contained `model.so` that needs only libc, libm, pthreads and
 * OpenBLAS — no LLVM — plus a C header declaring its entry points:
 *
 *   int  NAME_create(NAME_model **out);
 *   int  NAME_output_dims(NAME_model *m, const int64_t *const *input_dims, int r, int64_t *dims);
 *   int  NAME_run(NAME_model *m, const void *const *inputs, const int64_t *const *input_dims,
 *                 void *const *outputs);
 *   const char *NAME_error(const NAME_model *m);
 *   void NAME_destroy(NAME_model *m);
 *   const char *NAME_signature(void);  (a line per input, "in x f32[N, 4]", then per output,
 *                                       "out f32[N, 3]": for loaders without the header)
 *
 * Return values are kiln_status codes (0: success). One instance may be
 * used by one thread at a time; separate instances run in parallel.
 */
#ifndef KILN_AOT_H
#define KILN_AOT_H

#include "graph.h"
#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_aot_options {
  const char *output;     /* path of the shared object to write (required) */
  const char *header;     /* path of the C header to write, or NULL */
  const char *name;       /* prefix of the entry points (a C identifier); NULL: "model" */
  const char *target_cpu; /* an LLVM CPU name (e.g. "x86-64-v3"); NULL: this machine's CPU */
  const char *cc;         /* the C compiler that links; NULL: $CC or "cc" */
  int keep_temps;         /* keep the generated C, blob and object files next to `output` */
  /* Parameters to embed as constants (weights), matched to the graph's parameters by name;
     those parameters are no longer inputs of the .so. NULL: none. */
  const struct kiln_params *params;
  /* If set, receives the peak memory of one run (kiln_compiled_peak_bytes' count: arena, inputs,
     results, constants), or 0 when it depends on symbolic dims of the inputs. */
  size_t *peak_bytes;
  /* NULL or "cpu": the CPU. "vulkan", "cuda", "hip": the kernels are compiled now for that
     device (SPIR-V; cubin for sm_90 and PTX for compute_80; code objects for gfx90a, gfx908
     and gfx1030) and embedded; the .so opens device $KILN_DEVICE_INDEX (else 0) of that kind
     at NAME_create, through a driver it dlopens (docs/aot.md). Not with peak_bytes (set to 0). */
  const char *target;
  /* If set, receives what was embedded for a GPU target ("SPIR-V spirv+f64: 12 (34 KiB), ..."). */
  char *embedded;
  size_t embedded_size;
  /* The precision policy, "fp64", "fp32" (NULL), "tf32", "bf16" or "fp16" (docs/precision.md). */
  const char *precision;
  /* This model's options (include/kiln/options.h); NULL: the context's and the environment's. */
  const kiln_options *options;
} kiln_aot_options;

KILN_API kiln_status kiln_compile_shared(kiln_graph *g, const kiln_aot_options *opt);

#ifdef __cplusplus
}
#endif
#endif
