/*
 * Kiln public API: host tensors, .npy files, and running graphs.
 *
 * A kiln_tensor is a dense, C-ordered host array in its own dtype (f16 and
 * bf16 as their 16-bit patterns, bool as one byte 0/1).
 */
#ifndef KILN_TENSOR_H
#define KILN_TENSOR_H

#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_tensor kiln_tensor;

KILN_API kiln_status kiln_tensor_create(kiln_ctx *ctx, kiln_dtype t, size_t rank,
                                        const int64_t *dims, kiln_tensor **out);
KILN_API void kiln_tensor_destroy(kiln_tensor *t);
KILN_API kiln_dtype kiln_tensor_dtype(const kiln_tensor *t);
KILN_API size_t kiln_tensor_rank(const kiln_tensor *t);
KILN_API int64_t kiln_tensor_dim(const kiln_tensor *t, size_t axis);
KILN_API size_t kiln_tensor_numel(const kiln_tensor *t);
KILN_API size_t kiln_tensor_nbytes(const kiln_tensor *t);
KILN_API void *kiln_tensor_data(kiln_tensor *t);
KILN_API const void *kiln_tensor_cdata(const kiln_tensor *t);
/* Element i converted to / from double (f16/bf16 rounded to nearest even). */
KILN_API double kiln_tensor_get(const kiln_tensor *t, size_t i);
KILN_API void kiln_tensor_set(kiln_tensor *t, size_t i, double v);

/* NumPy .npy files, format versions 1.0, 2.0 and 3.0, C order. */
KILN_API kiln_status kiln_npy_read(kiln_ctx *ctx, const char *path, kiln_tensor **out);
KILN_API kiln_status kiln_npy_read_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                       const char *name, kiln_tensor **out);
KILN_API kiln_status kiln_npy_write(kiln_ctx *ctx, const char *path, const kiln_tensor *t);

/*
 * Backend and device, as in the reference documents (docs/backends.md): the
 * backend says which implementation runs — `compiled` kernels strictly,
 * the float64 `eager` reference interpreter, or `auto` (compiled, with the
 * eager fallback, on the CPU, for an op the compiler lacks) — and the device
 * says where: "cpu", "vulkan[:N]", "cuda[:N]", "hip[:N]" or "auto" (the
 * first of CUDA, ROCm and a Vulkan GPU that opens, else the CPU).
 */
typedef enum kiln_backend {
  KILN_BACKEND_AUTO = 0,
  KILN_BACKEND_COMPILED,
  KILN_BACKEND_EAGER
} kiln_backend;

/* "auto", "compiled" or "eager", matched exactly; else an error listing them. */
KILN_API kiln_status kiln_backend_parse(kiln_ctx *ctx, const char *s, kiln_backend *out);
KILN_API const char *kiln_backend_name(kiln_backend b);

typedef struct kiln_run_info {
  kiln_backend backend; /* the backend that really ran: never AUTO */
  char reason[256];     /* why `auto` chose it, "" when it was asked for */
  char device[32];      /* the device it ran on: "cpu", "vulkan:0", "cuda:1", ... never "auto" */
} kiln_run_info;

typedef struct kiln_run_options {
  kiln_backend backend;
  const char *device; /* NULL: "cpu" */
} kiln_run_options;

/*
 * Runs graph `g` on `inputs` (one per parameter, in order) with the backend
 * and on the device `opt` names (NULL: auto on the CPU). On success the
 * `n_out` results are new tensors in `outputs`, owned by the caller, and
 * `info` (may be NULL) says which backend and device ran. `eager` runs on
 * the CPU only: with a GPU device it is KILN_ERR_INVALID. A device that
 * does not open is an error whatever the backend; on one that opens, `auto`
 * falls back to eager on the CPU only when the compiler refuses an op.
 */
KILN_API kiln_status kiln_graph_run_on(kiln_graph *g, const kiln_run_options *opt, size_t n_in,
                                       kiln_tensor *const *inputs, size_t n_out,
                                       kiln_tensor **outputs, kiln_run_info *info);
/*
 * What this machine offers to run models on (`kiln devices`), as a malloc'ed text (free()):
 * one line per device, "NAME KIND DETAIL" ("cpu cpu Intel Xeon ..., avx2 fma, 2 threads, OpenBLAS
 * 0.3.21 (Haswell)", "vulkan:0 vulkan llvmpipe ..., f64 yes"), and for a GPU kind without a
 * device one line "KIND: why" ("cuda: no CUDA device (libcuda.so.1 not found)").
 */
KILN_API kiln_status kiln_devices_describe(kiln_ctx *ctx, char **text);

/* kiln_graph_run_on with `backend` on the CPU. */
KILN_API kiln_status kiln_graph_run(kiln_graph *g, kiln_backend backend, size_t n_in,
                                    kiln_tensor *const *inputs, size_t n_out,
                                    kiln_tensor **outputs, kiln_run_info *info);

#ifdef __cplusplus
}
#endif
#endif
