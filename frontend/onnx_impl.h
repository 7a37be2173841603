/*
 * onnx_impl.h — what the ONNX importer's files share.
 *
 *   onnx.c       the entry points: decoding (protobuf-c), tensors, the value
 *                table, graph inputs and initializers, the node loop and
 *                constant folding
 *   onnx_ops*.c  the op tables: one function per ONNX op type, each emitting
 *                Kiln IR through the public builder API (see onnx_ops.h)
 *   onnx_attrs.c a node's attributes: typed reads, and the check that every
 *                one was read
 *   onnx_wire.c  a bounded walk of the wire format before protobuf-c decodes
 *                it, that says at which byte and in which field it broke
 *
 * A value the importer knows at import time (an initializer, a Constant, a
 * Shape, or a node folded because all its inputs were known) is an ox_const
 * and becomes an IR constant only when a node that runs at run time uses
 * it. Shapes of inputs with symbolic dims are known too: their symbolic
 * entries carry a flag, and the ops that only move shape entries around
 * (Gather, Concat, Slice, Squeeze, Unsqueeze, Reshape, ...) keep them, so
 * `Reshape(x, Concat(Gather(Shape(x), 0), [-1]))` imports at any batch size.
 */
#ifndef KILN_ONNX_IMPL_H
#define KILN_ONNX_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/onnx.h"
#include "onnx.pb-c.h"

/* A tensor known at import time. */
typedef struct ox_const {
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
  size_t n;
  double *d;      /* n values (owned, unless `borrowed`) */
  bool borrowed;  /* d is the list of the IR constant made of it (graph arena): not freed */
  int64_t *i;     /* n exact values for integer and bool dtypes, else NULL */
  uint8_t *sym;   /* NULL, or n flags: i[k] is a symbolic dim (a kiln_dim) where set */
} ox_const;

/* An ONNX value name and what it is in the graph being built. */
typedef struct ox_value {
  const char *name;
  kiln_value v;  /* KILN_NO_VALUE until a run-time node uses a known value */
  ox_const *c;   /* the known value, or NULL */
} ox_value;

#define OX_MAX_IO 64

typedef struct ox ox;
typedef struct ox_op ox_op;

/* One node being imported. Op functions write out[] (IR values) or cout[] (known values). */
typedef struct ox_node {
  ox *im;
  const Onnx__NodeProto *p;
  const ox_op *op; /* its entry in the op table */
  kiln_graph *g;  /* the graph to build in (a scratch graph while folding) */
  int64_t opset;
  size_t nin, nout;
  ox_value *in[OX_MAX_IO];    /* NULL where an optional input is absent */
  kiln_value inv[OX_MAX_IO];  /* inputs already in g, or KILN_NO_VALUE */
  kiln_value out[OX_MAX_IO];
  ox_const *cout[OX_MAX_IO];
  uint64_t read; /* bit k: the converter read attribute k (ox_attr); the rest are refused */
} ox_node;

typedef bool (*ox_op_fn)(ox_node *n);

struct ox_op {
  const char *name;
  ox_op_fn fn;
  /* 0: never folded; 1: folded when all inputs are known; 2: also with symbolic entries;
     3: also with symbolic entries where ox_fold_sym_exact says the result is exact */
  int fold;
  const char *ir; /* for functions that serve several op types: the IR op, else NULL */
};

/* For fold 3: whether node n's result over its symbolic entries (as sentinels) is exact
   (onnx_ops_elementwise.c: Cast, Equal, Where). */
bool ox_fold_sym_exact(const ox_node *n);

/* The op tables (onnx_ops.c); NULL if op_type is not mapped. */
const ox_op *ox_find_op(const char *op_type);

/* ---- for op functions (onnx.c) ---- */

/* Sets an error naming the node: "FILE: node 'N' (OP, opset K): MESSAGE"; returns false. */
bool ox_fail(ox_node *n, kiln_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Input k in n->g (a known value becomes a constant); KILN_NO_VALUE on failure. */
kiln_value ox_in(ox_node *n, size_t k);
bool ox_has(const ox_node *n, size_t k);
/* Input k's known value, or NULL. */
const ox_const *ox_known(const ox_node *n, size_t k);
/* Is output k wanted (present with a non-empty name)? */
bool ox_wants(const ox_node *n, size_t k);

/* The attribute `name`, or NULL; either way it counts as read. After a node's converter, an
   attribute it never asked for is an error of the node (issue 22 item 8), so a converter asks for
   every attribute whose value it relies on, even one it only checks for the default. */
const Onnx__AttributeProto *ox_attr(ox_node *n, const char *name);
int64_t ox_attr_i(ox_node *n, const char *name, int64_t def);
double ox_attr_f(ox_node *n, const char *name, double def);
/* The attribute's string, or `def`. */
const char *ox_attr_s(ox_node *n, const char *name, const char *def);
/* INTS attribute: count in *cnt (0 and NULL if absent). */
const int64_t *ox_attr_ints(ox_node *n, const char *name, size_t *cnt);
/* Marks the attributes `names` (NULL-terminated) read: ones whose value cannot change the graph
   Kiln imports (a seed, a training-only ratio, the order of an output Kiln refuses). */
void ox_attrs_accept(ox_node *n, const char *const *names);
/* After the converter: false (the node's error set) if an attribute was not read (onnx_attrs.c). */
bool ox_attrs_all_read(ox_node *n);

/* The graph attribute gp imported inline into n's graph, its inputs bound to ins (or known values
   cins), its outputs in outs (or, with couts, the known ones as copies in couts) (onnx.c). The value table may grow:
   read n's inputs (ox_in, ox_known) before. */
bool ox_inline_graph(ox_node *n, const Onnx__GraphProto *gp, size_t nin, const kiln_value *ins,
                     const ox_const *const *cins, size_t nout, kiln_value *outs,
                     ox_const **couts);

/* Decodes a TensorProto into *c (arrays malloc'ed); `what` names it in messages. */
bool ox_tensor_decode(ox *im, const Onnx__TensorProto *t, const char *what, ox_const *c);
ox_const *ox_const_new(ox *im, kiln_dtype dt, int rank, const int64_t *dims);
/* A copy of c, owned by the caller (onnx.c); NULL on failure, the error set. */
ox_const *ox_const_copy(ox *im, const ox_const *c);
void ox_const_free(ox_const *c);
/* The Kiln dtype of ONNX data type `t`; false if Kiln has none. */
bool ox_dtype(int32_t t, kiln_dtype *out);
const char *ox_dtype_name(int32_t t);

/* Type queries on values of n->g. */
kiln_dtype ox_vdtype(const ox_node *n, kiln_value v);
int ox_vrank(const ox_node *n, kiln_value v);
kiln_dim ox_vdim(const ox_node *n, kiln_value v, int axis);

/* The whole file at `path` in a malloc'ed buffer (a regular file of at most 2 GiB). */
kiln_status ox_read_file(kiln_ctx *ctx, const char *path, uint8_t **buf, size_t *len);
/* ox_read_file, and the model's folder (what external data is relative to) as a malloc'ed
   string in *dir; on failure nothing is left allocated. */
kiln_status ox_read_model_file(kiln_ctx *ctx, const char *path, uint8_t **buf, size_t *len,
                               char **dir);
/* buf decoded as a ModelProto; NULL (KILN_ERR_PARSE on ctx, with the byte) if it is not one. */
Onnx__ModelProto *ox_decode_model(kiln_ctx *ctx, const void *buf, size_t len, const char *name);

/*
 * The decoded model m imported into *out, with graph inputs `frozen` known (kiln_onnx_import_frozen).
 * On failure, if needed_cap: `needed` holds the name of the ONNX value that the first failing
 * node needed known at import (ox_need_known), or "" when the failure was another.
 */
/* Graph inputs whose symbolic dims take the dims of shaped[k].value (its data is not read), and
   what the import says back: whether it failed at a node with a symbolic dim among its operands
   (so that fixing the dims may let it through). */
typedef struct ox_dims_fix {
  size_t n;
  const kiln_onnx_frozen *shaped;
  bool sym_failed;
} ox_dims_fix;
kiln_status ox_import_model(kiln_ctx *ctx, const Onnx__ModelProto *m, const char *name,
                            const char *base_dir, size_t nfrozen, const kiln_onnx_frozen *frozen,
                            ox_dims_fix *fix, kiln_graph **out, char *needed, size_t needed_cap);
/* Notes `value` as the one the first failure needs known (when the caller asked, and none yet). */
void ox_note_needed(ox *im, const char *value);

/* ---- the wire-format walk (onnx_wire.c) ---- */

/* Messages nested deeper than this are refused before protobuf-c (which recurses) sees them. */
#define OX_WIRE_MAX_DEPTH 100

/* Whether `buf` is structurally a message of `desc` nested at most OX_WIRE_MAX_DEPTH deep; if
   not, writes why ("byte 17 (in graph.node): ...") into msg. */
bool ox_wire_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                   char *msg, size_t cap);

#endif
