/*
 * bind.h — the values of a program's symbols from the dims of its inputs,
 * for the devices (runtime/device/vulkan.c, runtime/device/gpu_exec.c, runtime/device/device.c).
 *
 * Each symbol takes its value from the first input axis that carries it;
 * every other axis is checked against its static size or its symbol's
 * value, with the messages of the CPU executor (runtime/exec/rt_exec.c), so a
 * wrong shape reads the same on every backend.
 */
#ifndef KILN_RT_BIND_H
#define KILN_RT_BIND_H

#include "codegen/program.h"

/*
 * Binds sizes[s] (bound[s] set) for every symbol an input axis carries:
 * input i has dims input_dims[i] (as many as its parameter's rank).
 * `names` (may be NULL, or hold NULLs) are the parameters' names for the
 * messages ("input 0 (%x): axis 1 has size 7, expected 8"). A wrong or
 * negative axis is KILN_ERR_RUNTIME; sizes whose buffers would exceed
 * 2^50 bytes too.
 */
kiln_status krt_bind_symbols(kiln_ctx *ctx, const kcg_program *p, const char *const *names,
                             const int64_t *const *input_dims, int64_t *sizes, bool *bound);

/*
 * The dims of result r under bound symbols; a symbol no input gives is
 * KILN_ERR_UNSUPPORTED ("<who>: result 0 has a size no input gives").
 */
kiln_status krt_bound_result_dims(kiln_ctx *ctx, const kcg_program *p, const char *who,
                                  const int64_t *sizes, const bool *bound, uint32_t r,
                                  int64_t *dims);

#endif
