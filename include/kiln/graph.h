/*
 * Kiln public API: building, reading and printing graphs.
 *
 * A kiln_graph is an SSA function: typed parameters, instructions, typed
 * results. A top-level graph owns everything in it (one arena, freed by
 * kiln_graph_destroy), including the body graphs of its `scan` ops, which
 * are made with kiln_graph_create_body().
 *
 * Values are 32-bit ids. The builder calls are "sticky": after the first
 * error every later call returns KILN_NO_VALUE and kiln_graph_status()
 * returns the first error, whose message is on the context. So a model can
 * be built with a chain of calls and checked once at the end.
 */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include <stdio.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kir_graph kiln_graph;
typedef uint32_t kiln_value;
#define KILN_NO_VALUE UINT32_MAX

/* Attribute values given to kiln_op(); make them with the kiln_attr_* helpers. */
typedef enum kiln_attr_kind {
  KILN_ATTR_INT,
  KILN_ATTR_FLOAT,
  KILN_ATTR_BOOL,
  KILN_ATTR_INTS,
  KILN_ATTR_DIMS,
  KILN_ATTR_FLOATS,
  KILN_ATTR_DTYPE,
  KILN_ATTR_ENUM,
  KILN_ATTR_GRAPH,
  KILN_ATTR_DIM /* one dimension: a constant or a symbol */
} kiln_attr_kind;

typedef struct kiln_attr {
  const char *name;
  kiln_attr_kind kind;
  int64_t i;             /* INT, BOOL, DTYPE, DIM */
  double f;              /* FLOAT */
  const int64_t *ints;   /* INTS, DIMS */
  const double *floats;  /* FLOATS */
  size_t n;              /* length of ints/floats */
  const char *s;         /* ENUM: the choice's name */
  kiln_graph *graph;     /* GRAPH */
} kiln_attr;

KILN_API kiln_attr kiln_attr_int(const char *name, int64_t v);
KILN_API kiln_attr kiln_attr_float(const char *name, double v);
KILN_API kiln_attr kiln_attr_bool(const char *name, int v);
KILN_API kiln_attr kiln_attr_ints(const char *name, size_t n, const int64_t *v);
KILN_API kiln_attr kiln_attr_dims(const char *name, size_t n, const kiln_dim *v);
KILN_API kiln_attr kiln_attr_floats(const char *name, size_t n, const double *v);
KILN_API kiln_attr kiln_attr_dtype(const char *name, kiln_dtype t);
KILN_API kiln_attr kiln_attr_enum(const char *name, const char *choice);
KILN_API kiln_attr kiln_attr_graph(const char *name, kiln_graph *g);
KILN_API kiln_attr kiln_attr_dim(const char *name, kiln_dim d);

/* Creation and destruction. */
KILN_API kiln_status kiln_graph_create(kiln_ctx *ctx, const char *name, kiln_graph **out);
/* A body graph (for `scan`) owned by the same top-level graph. */
KILN_API kiln_status kiln_graph_create_body(kiln_graph *parent, const char *name, kiln_graph **out);
KILN_API void kiln_graph_destroy(kiln_graph *g);
KILN_API kiln_status kiln_graph_status(const kiln_graph *g);
KILN_API kiln_ctx *kiln_graph_ctx(const kiln_graph *g);

/* A named symbolic dimension, shared by every graph of one top-level graph. */
KILN_API kiln_dim kiln_graph_symbol(kiln_graph *g, const char *name);

/* Parameters, in order; `name` may be NULL. */
KILN_API kiln_value kiln_graph_param(kiln_graph *g, const char *name, kiln_dtype t, size_t rank,
                                     const kiln_dim *dims);
/* Any op of the op table by name (see docs/ir.md). Returns the first result. */
KILN_API kiln_value kiln_op(kiln_graph *g, const char *op, size_t n_in, const kiln_value *in,
                            size_t n_attr, const kiln_attr *attrs);
/* Ops with several results: writes up to `cap` result ids, returns their count or -1. */
KILN_API int kiln_op_multi(kiln_graph *g, const char *op, size_t n_in, const kiln_value *in,
                           size_t n_attr, const kiln_attr *attrs, size_t cap, kiln_value *out);
KILN_API kiln_status kiln_graph_set_results(kiln_graph *g, size_t n, const kiln_value *results);
KILN_API kiln_status kiln_value_set_name(kiln_graph *g, kiln_value v, const char *name);

/* Common ops, typed. */
KILN_API kiln_value kiln_unary(kiln_graph *g, const char *op, kiln_value x);
KILN_API kiln_value kiln_binary(kiln_graph *g, const char *op, kiln_value a, kiln_value b);
KILN_API kiln_value kiln_add(kiln_graph *g, kiln_value a, kiln_value b);
KILN_API kiln_value kiln_mul(kiln_graph *g, kiln_value a, kiln_value b);
KILN_API kiln_value kiln_matmul(kiln_graph *g, kiln_value a, kiln_value b);
KILN_API kiln_value kiln_scalar(kiln_graph *g, kiln_dtype t, double v);
KILN_API kiln_value kiln_reduce(kiln_graph *g, const char *op, kiln_value x, size_t n_axes,
                                const int64_t *axes, int keepdims);
KILN_API kiln_value kiln_reshape(kiln_graph *g, kiln_value x, size_t rank, const kiln_dim *dims);
KILN_API kiln_value kiln_transpose(kiln_graph *g, kiln_value x, size_t rank, const int64_t *perm);
KILN_API kiln_value kiln_cast(kiln_graph *g, kiln_value x, kiln_dtype t);

/* Introspection. */
KILN_API size_t kiln_graph_num_params(const kiln_graph *g);
KILN_API size_t kiln_graph_num_results(const kiln_graph *g);
KILN_API kiln_value kiln_graph_get_param(const kiln_graph *g, size_t i);
KILN_API kiln_value kiln_graph_get_result(const kiln_graph *g, size_t i);
KILN_API const char *kiln_value_name(const kiln_graph *g, kiln_value v);
KILN_API kiln_dtype kiln_value_dtype(const kiln_graph *g, kiln_value v);
KILN_API size_t kiln_value_rank(const kiln_graph *g, kiln_value v);
KILN_API kiln_dim kiln_value_dim(const kiln_graph *g, kiln_value v, size_t axis);
KILN_API const char *kiln_dim_symbol_name(const kiln_graph *g, kiln_dim d);

/* Checks the whole graph; the message names the instruction. */
KILN_API kiln_status kiln_graph_verify(kiln_graph *g);

/* The .kir text form. `filename` is used in messages (file:line:col). */
KILN_API kiln_status kiln_graph_parse(kiln_ctx *ctx, const char *text, size_t len,
                                      const char *filename, kiln_graph **out);
KILN_API kiln_status kiln_graph_parse_file(kiln_ctx *ctx, const char *path, kiln_graph **out);
KILN_API kiln_status kiln_graph_print(const kiln_graph *g, FILE *f);
/* Canonical text in a malloc'ed string; free it with free(). */
KILN_API kiln_status kiln_graph_to_string(const kiln_graph *g, char **out);

#ifdef __cplusplus
}
#endif
#endif
