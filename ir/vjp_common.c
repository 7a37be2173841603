/*
 * vjp_common.c — the building blocks every VJP rule (ir/vjp_*.c) shares.
 *
 * A VJP rule appends instructions to the graph the autodiff pass is building
 * (passes/autodiff.c, through the walk of ir/vjp_walk.c) with kir_add_inst(),
 * so every step of a backward computation is shape-checked like any other
 * instruction. The helpers here
 * emit one instruction each and return its value, or KILN_NO_VALUE once
 * anything has failed (the module's sticky error keeps the first message), so
 * a rule can chain them and check once, at kir_vjp_accum().
 *
 * The one piece of real logic is kir_vjp_unbroadcast(): the transpose of
 * numpy broadcasting. A cotangent shaped like a broadcast result is summed
 * over the leading axes the operand lacks and over the axes where the
 * operand has size 1 and the result does not (a constant 1 against anything
 * else, symbols included), then reshaped to the operand's exact type. Every
 * broadcasting rule (binary ops, select, broadcast, matmul's batch dims)
 * goes through it.
 */
#include <string.h>

#include "ops_impl.h"

void kir_vjp_defaults(uint16_t op, kir_attr *a) {
  const kir_op_desc *d = kir_op(op);
  for (int i = 0; i < d->nattrs; i++)
    a[i] = d->attr[i].def;
}

kir_type kir_vjp_type(const kir_vjp_ctx *vc, uint32_t v) {
  if (v == KILN_NO_VALUE || v >= vc->g->nvalues) return (kir_type){0};
  return vc->g->values[v].type;
}

uint32_t kir_vjp_emit(kir_vjp_ctx *vc, uint16_t op, uint32_t nin, const uint32_t *in,
                      const kir_attr *attrs) {
  uint32_t out[1];
  if (vc->g->mod->status != KILN_OK) return KILN_NO_VALUE;
  for (uint32_t i = 0; i < nin; i++)
    if (in[i] == KILN_NO_VALUE) return KILN_NO_VALUE;
  if (kir_add_inst(vc->g, op, nin, in, attrs, out, 1, vc->line, vc->col) != 1) return KILN_NO_VALUE;
  return out[0];
}

uint32_t kir_vjp_un(kir_vjp_ctx *vc, uint16_t op, uint32_t x) {
  return kir_vjp_emit(vc, op, 1, &x, NULL);
}

uint32_t kir_vjp_bin(kir_vjp_ctx *vc, uint16_t op, uint32_t a, uint32_t b) {
  uint32_t in[2] = {a, b};
  return kir_vjp_emit(vc, op, 2, in, NULL);
}

uint32_t kir_vjp_select(kir_vjp_ctx *vc, uint32_t c, uint32_t a, uint32_t b) {
  uint32_t in[3] = {c, a, b};
  return kir_vjp_emit(vc, KIR_OP_select, 3, in, NULL);
}

uint32_t kir_vjp_scalar(kir_vjp_ctx *vc, kir_dtype t, double v) {
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_constant, a);
  a[0].i = t;
  a[1].n = 0;
  a[1].ints = NULL;
  a[2].n = 1;
  a[2].floats = &v; /* the builder copies attribute lists into the module's arena */
  return kir_vjp_emit(vc, KIR_OP_constant, 0, NULL, a);
}

uint32_t kir_vjp_broadcast_to(kir_vjp_ctx *vc, uint32_t x, const kir_type *t) {
  kir_type xt = kir_vjp_type(vc, x);
  if (x == KILN_NO_VALUE) return x;
  if (kir_type_eq(&xt, t)) return x;
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_broadcast, a);
  a[0].n = t->rank;
  a[0].ints = t->dims;
  return kir_vjp_emit(vc, KIR_OP_broadcast, 1, &x, a);
}

uint32_t kir_vjp_zeros(kir_vjp_ctx *vc, const kir_type *t) {
  return kir_vjp_broadcast_to(vc, kir_vjp_scalar(vc, t->dtype, 0), t);
}

uint32_t kir_vjp_reshape(kir_vjp_ctx *vc, uint32_t x, const kir_type *t) {
  kir_type xt = kir_vjp_type(vc, x);
  if (x == KILN_NO_VALUE) return x;
  if (kir_type_eq(&xt, t)) return x;
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_reshape, a);
  a[0].n = t->rank;
  a[0].ints = t->dims;
  return kir_vjp_emit(vc, KIR_OP_reshape, 1, &x, a);
}

uint32_t kir_vjp_reduce(kir_vjp_ctx *vc, uint16_t op, uint32_t x, const int64_t *axes, uint32_t n,
                        bool keepdims) {
  if (!n) return x;
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(op, a);
  a[0].n = n;
  a[0].ints = axes;
  a[1].i = keepdims;
  return kir_vjp_emit(vc, op, 1, &x, a);
}

uint32_t kir_vjp_unbroadcast(kir_vjp_ctx *vc, uint32_t cot, const kir_type *t) {
  kir_type ct = kir_vjp_type(vc, cot);
  if (cot == KILN_NO_VALUE) return cot;
  int lead = ct.rank - t->rank;
  int64_t axes[KIR_MAX_RANK];
  uint32_t n = 0;
  for (int i = 0; i < ct.rank; i++) {
    kir_dim want = i < lead ? 1 : t->dims[i - lead];
    if (i < lead || (want == 1 && ct.dims[i] != 1)) axes[n++] = i;
  }
  /* Keep the axes so the reshape below only drops leading size-1 axes. */
  cot = kir_vjp_reduce(vc, KIR_OP_reduce_sum, cot, axes, n, true);
  return kir_vjp_reshape(vc, cot, t);
}

uint32_t kir_vjp_expand(kir_vjp_ctx *vc, uint32_t r, const kir_type *x, const int64_t *axes,
                        uint32_t n, bool keepdims) {
  if (r == KILN_NO_VALUE) return r;
  if (!keepdims) {
    kir_type kt = *x;
    for (uint32_t k = 0; k < n; k++)
      kt.dims[axes[k]] = 1;
    kt.dtype = kir_vjp_type(vc, r).dtype;
    r = kir_vjp_reshape(vc, r, &kt);
  }
  kir_type bt = *x;
  bt.dtype = kir_vjp_type(vc, r).dtype;
  return kir_vjp_broadcast_to(vc, r, &bt);
}

uint32_t kir_vjp_iota(kir_vjp_ctx *vc, int64_t n, int64_t start, int64_t step) {
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(KIR_OP_iota, a);
  a[0].i = KILN_I64;
  a[1].n = 1;
  a[1].ints = &n;
  a[2].i = 0;
  uint32_t v = kir_vjp_emit(vc, KIR_OP_iota, 0, NULL, a);
  if (step != 1) v = kir_vjp_bin(vc, KIR_OP_mul, v, kir_vjp_scalar(vc, KILN_I64, (double)step));
  if (start) v = kir_vjp_bin(vc, KIR_OP_add, v, kir_vjp_scalar(vc, KILN_I64, (double)start));
  return v;
}

uint32_t kir_vjp_axis_op(kir_vjp_ctx *vc, uint16_t op, uint32_t nin, const uint32_t *in,
                         int64_t axis) {
  kir_attr a[KIR_MAX_ATTRS];
  kir_vjp_defaults(op, a);
  a[0].i = axis;
  return kir_vjp_emit(vc, op, nin, in, a);
}

bool kir_vjp_none(kir_vjp_ctx *vc, const kir_inst *inst) {
  (void)vc, (void)inst;
  return true;
}

/* Through the decomposition too, but from after the row's scale, which is computed first and
   then held constant: no gradient flows into it (decompose.c says why). */
bool kir_vjp_norm(kir_vjp_ctx *vc, const kir_inst *inst) {
  uint32_t r = kir_norm_rscale(vc->g, inst, vc->in[0]);
  uint32_t first = vc->g->ninsts, outs[1];
  if (!kir_norm_apply(vc->g, inst, vc->in, r, outs)) return false;
  return kir_vjp_backprop(vc, first, outs);
}

bool kir_vjp_decomposed(kir_vjp_ctx *vc, const kir_inst *inst) {
  const kir_op_desc *d = kir_op(inst->op);
  uint32_t outs[4];
  uint32_t first = vc->g->ninsts;
  if (!d->decompose || inst->nout > 4) {
    kir_graph_fail(vc->g, KILN_ERR_UNSUPPORTED, "gradient of %s: it has no decomposition", d->name);
    return false;
  }
  if (!d->decompose(vc->g, inst, vc->in, outs)) return false;
  return kir_vjp_backprop(vc, first, outs);
}
