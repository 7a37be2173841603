/*
 * Kiln public API: status codes, contexts, dtypes.
 *
 * Every public function returns a kiln_status (or a handle/value that says
 * "none" on failure); the message of the last failure is kept on the
 * kiln_ctx that the call was made in (as sqlite3_errmsg does). A context is
 * not shared between threads; use one per thread.
 */
#ifndef KILN_CORE_H
#define KILN_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KILN_BUILDING) && defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERR_INVALID,     /* a bad argument to an API call */
  KILN_ERR_PARSE,       /* a user's file is malformed (message has the position) */
  KILN_ERR_TYPE,        /* shapes or dtypes do not fit an op */
  KILN_ERR_IO,          /* a file could not be read or written */
  KILN_ERR_UNSUPPORTED, /* a valid request this build or backend cannot serve */
  KILN_ERR_RUNTIME,     /* a run failed (bad input shape, index out of range) */
  KILN_ERR_NOMEM
} kiln_status;

typedef struct kiln_ctx kiln_ctx;

KILN_API kiln_ctx *kiln_ctx_create(void);
KILN_API void kiln_ctx_destroy(kiln_ctx *ctx);
/* The message of the last failed call in this context ("" if none). */
KILN_API const char *kiln_ctx_error(const kiln_ctx *ctx);
/* The status of that failure (KILN_OK if none): callers branch on it, never on the message. */
KILN_API kiln_status kiln_ctx_status(const kiln_ctx *ctx);
KILN_API const char *kiln_status_name(kiln_status s);
/* Kiln's version, "MAJOR.MINOR.PATCH". */
KILN_API const char *kiln_version(void);

/* Element types. The numeric values are part of the ABI: append only. */
typedef enum kiln_dtype {
  KILN_F64 = 0,
  KILN_F32,
  KILN_F16,
  KILN_BF16,
  KILN_I64,
  KILN_I32,
  KILN_I8,
  KILN_U8,
  KILN_BOOL,
  /* Storage types (docs/decisions.md, "Narrow storage types"): one byte per element, values
     converted by `cast` and moved by the data-movement ops; no arithmetic computes in them. */
  KILN_F8E4M3FN,   /* float8: 4 exponent bits, 3 mantissa bits, no infinity */
  KILN_F8E4M3FNUZ, /* float8 e4m3, no infinity, no -0 (NaN is 0x80) */
  KILN_F8E5M2,     /* float8: the top byte of an IEEE half */
  KILN_F8E5M2FNUZ, /* float8 e5m2, no infinity, no -0 (NaN is 0x80) */
  KILN_F8E8M0,     /* float8: a power of two 2^(bits-127), 0xff is NaN */
  KILN_F4E2M1,     /* float4: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives */
  KILN_I4,         /* -8..7 */
  KILN_U4,         /* 0..15 */
  KILN_I2,         /* -2..1 */
  KILN_U2,         /* 0..3 */
  /* More integer widths (computed in their own width; not yet on the GPU targets). */
  KILN_I16,
  KILN_U16,
  KILN_U32,
  KILN_DTYPE_COUNT
} kiln_dtype;

KILN_API const char *kiln_dtype_name(kiln_dtype t);
KILN_API size_t kiln_dtype_size(kiln_dtype t);

#define KILN_MAX_RANK 8

/*
 * A dimension: a constant size (>= 0), or a symbol made by
 * kiln_graph_symbol() (a negative code), so that one graph runs at any
 * batch size.
 */
typedef int64_t kiln_dim;

#ifdef __cplusplus
}
#endif
#endif
