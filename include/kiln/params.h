/*
 * Kiln public API: named parameter sets and safetensors files.
 *
 * A kiln_params is an ordered list of named host tensors — a model's
 * parameters, named by their path in the parameter tree ("0.W",
 * "encoder.2.b"). It reads and writes the safetensors format (an 8-byte
 * little-endian header length, a JSON header of {name: {dtype, shape,
 * data_offsets}}, then the data), checking every size and offset against
 * the file.
 */
#ifndef KILN_PARAMS_H
#define KILN_PARAMS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_params kiln_params;

KILN_API kiln_status kiln_params_create(kiln_ctx *ctx, kiln_params **out);
KILN_API void kiln_params_destroy(kiln_params *p);
/* Adds `t` under `name` (copied); the set takes ownership of `t`, also on failure. */
KILN_API kiln_status kiln_params_add(kiln_params *p, const char *name, kiln_tensor *t);
KILN_API size_t kiln_params_count(const kiln_params *p);
KILN_API const char *kiln_params_name(const kiln_params *p, size_t i);
/* Borrowed: valid until the set is destroyed. NULL if out of range / not found. */
KILN_API kiln_tensor *kiln_params_tensor(const kiln_params *p, size_t i);
KILN_API kiln_tensor *kiln_params_find(const kiln_params *p, const char *name);

KILN_API kiln_status kiln_safetensors_read(kiln_ctx *ctx, const char *path, kiln_params **out);
KILN_API kiln_status kiln_safetensors_read_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                               const char *name, kiln_params **out);
KILN_API kiln_status kiln_safetensors_write(kiln_ctx *ctx, const char *path,
                                            const kiln_params *p);

#ifdef __cplusplus
}
#endif
#endif
