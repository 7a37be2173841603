/*
 * npy.h — the .npy writer's in-memory form (runtime/io/npy.c), for the tests
 * and the fuzzer; kiln_npy_read/_write (include/kiln/tensor.h) are the
 * public ones.
 */
#ifndef KILN_RT_NPY_H
#define KILN_RT_NPY_H

#include "ir/kir.h"

/* The bytes of a .npy file for `t` in a malloc'ed buffer. */
kiln_status krt_npy_write_mem(kiln_ctx *ctx, const kiln_tensor *t, void **out, size_t *len);

#endif
