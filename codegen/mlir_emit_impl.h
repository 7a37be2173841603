/*
 * mlir_emit_impl.h — what the files of the MLIR emitter share (internal).
 *
 *   mlir_emit.c         the context, types and attributes, the generic op
 *                       builder, scalar bodies, reshapes, the module driver
 *   mlir_emit_linalg.c  per-op emitters on linalg and tensor ops (elementwise,
 *                       reductions, matmul, pads, gathers, conv and pools)
 *   mlir_emit_loops.c   ops that become scf loops: scatter_add, segments, scan
 *
 * Only libkiln and the kiln CLI link MLIR; none of this is in libkiln_rt.
 */
#ifndef KILN_MLIR_EMIT_IMPL_H
#define KILN_MLIR_EMIT_IMPL_H

#include "codegen/mlir_emit.h"

#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <mlir-c/IR.h>

#include "passes/passes.h"

typedef struct me {
  MlirContext mc;
  MlirLocation loc;
  MlirBlock blk; /* where ops are appended */
  kir_graph *g;
  MlirValue *val; /* per Kiln value */
  MlirValue *sym; /* per module symbol: its size as an index value, or null */
  bool failed;
  char diag[768]; /* MLIR's diagnostics, for the error message */
} me;

#define ME_MAX_OPERANDS 64

typedef MlirValue (*me_body_fn)(me *e, const MlirValue *args, void *user);
/* A body with several outputs: writes one value per output into ys. */
typedef void (*me_body_n_fn)(me *e, const MlirValue *args, MlirValue *ys, void *user);

/* cmpf predicates (ordered; ne is une so that NaN != NaN) and cmpi predicates. */
enum { CMPF_OEQ = 1, CMPF_OGT, CMPF_OGE, CMPF_OLT, CMPF_OLE, CMPF_ONE, CMPF_ORD, CMPF_UNE = 13,
       CMPF_UNO };
enum { CMPI_EQ, CMPI_NE, CMPI_SLT, CMPI_SLE, CMPI_SGT, CMPI_SGE, CMPI_ULT, CMPI_ULE, CMPI_UGT,
       CMPI_UGE };

typedef char me_map[256];

typedef struct inst_view {
  const kir_inst *inst;
  const kir_op_desc *d;
  const kir_type *out; /* the first result's type */
  const kir_type *in[ME_MAX_OPERANDS];
  MlirValue v[ME_MAX_OPERANDS];
} inst_view;

/* mlir_emit.c */
MlirStringRef me_sref(const char *s);
bool me_fail(me *e, const char *fmt, ...) KIR_PRINTF(2, 3);
MlirType me_index(me *e);
MlirType me_elem(me *e, kir_dtype t);
MlirType me_tensor(me *e, const kir_type *t);
MlirAttribute me_attr(me *e, const char *text);
MlirNamedAttribute me_named(me *e, const char *name, MlirAttribute a);
MlirAttribute me_segments(me *e, int n, const int32_t *sizes);
MlirValue me_op_r(me *e, const char *name, intptr_t nin, const MlirValue *in, intptr_t nres,
                  const MlirType *res, intptr_t nattr, const MlirNamedAttribute *attrs,
                  MlirRegion *region, MlirOperation *op_out);
MlirValue me_op(me *e, const char *name, intptr_t nin, const MlirValue *in, MlirType res,
                intptr_t nattr, const MlirNamedAttribute *attrs);
MlirValue me_const_index(me *e, int64_t v);
MlirValue me_const_int(me *e, MlirType t, int64_t v);
MlirValue me_const_scalar(me *e, kir_dtype t, double v);
MlirValue me_dim(me *e, kir_dim d);
MlirValue me_empty(me *e, const kir_type *t);
MlirValue me_named_linalg(me *e, const char *name, int nin, const MlirValue *ins,
                          MlirValue init, int nextra, const MlirNamedAttribute *extra);
MlirValue me_fill(me *e, MlirValue scalar, MlirValue init);
MlirValue me_full(me *e, const kir_type *t, double v);
void me_generic_n(me *e, int nin, const MlirValue *ins, int nout, const MlirValue *inits,
                  const char *const *maps, int ndims, const bool *reduction,
                  me_body_n_fn body, void *user, MlirValue *res);
MlirValue me_generic(me *e, int nin, const MlirValue *ins, MlirValue init,
                     const char *const *maps, int ndims, const bool *reduction,
                     me_body_fn body, void *user);
void me_map_text(char *buf, size_t cap, int ndims, int nres, const int *res);
void me_map_broadcast(char *buf, size_t cap, const kir_type *t, const kir_type *to);
MlirValue me_reshape(me *e, MlirValue x, const kir_type *from, const kir_type *to);
MlirValue me_sc2(me *e, const char *name, MlirValue a, MlirValue b);
MlirValue me_sc_cmp(me *e, bool fl, int pred, MlirValue a, MlirValue b);
MlirValue me_sc_select(me *e, MlirValue c, MlirValue a, MlirValue b);
MlirValue me_scalar(me *e, uint16_t op, kir_dtype t, const MlirValue *a);
MlirValue me_convert(me *e, MlirValue x, kir_dtype from, kir_dtype to);
const kir_attr *me_attr_of(const inst_view *iv, const char *name);
bool me_emit_graph(me *e, kir_graph *gr, const MlirValue *params, MlirValue *results);

/* mlir_emit_linalg.c */
MlirValue me_red_identity(me *e, uint16_t op, kir_dtype t);
MlirValue me_emit_inst(me *e, inst_view *iv);

/* mlir_emit_loops.c */
MlirValue me_emit_scatter_add(me *e, inst_view *iv);
MlirValue me_emit_segment(me *e, inst_view *iv);
bool me_emit_scan(me *e, inst_view *iv, MlirValue *outs);

#endif
