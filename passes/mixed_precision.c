/*
 * mixed_precision.c — the precision passes: 16-bit floats computed with f32
 * accumulation (kp_widen_half) and the `--precision` policy
 * (kp_mixed_precision). What each does is in mixed_precision.h and
 * docs/precision.md; this file is the how.
 *
 * Both are kp_rebuild_module() walks. A cast the pass adds goes through
 * add_cast(), which first looks through the value's own cast: casting back
 * to where an exact widening came from gives the original value, so
 * f16 -> f32 -> f16 pairs — left behind when a widened op feeds another —
 * never reach codegen. Rounded and promoted copies of a value are memoised
 * per graph, so a weight used by the forward matmul and by both backward
 * ones is rounded once per step.
 */
#include <stdlib.h>
#include <string.h>

#include "mixed_precision.h"

static const char *const prec_names[] = {
    [KP_PREC_FP32] = "fp32", [KP_PREC_FP64] = "fp64", [KP_PREC_TF32] = "tf32",
    [KP_PREC_BF16] = "bf16", [KP_PREC_FP16] = "fp16",
};
enum { N_PREC = sizeof prec_names / sizeof prec_names[0] };

bool kp_precision_parse(const char *s, kp_precision *out) {
  for (int p = 0; s && p < N_PREC; p++)
    if (!strcmp(s, prec_names[p])) {
      *out = (kp_precision)p;
      return true;
    }
  return false;
}

const char *kp_precision_name(kp_precision p) { return (unsigned)p < N_PREC ? prec_names[p] : "?"; }

kiln_dtype kp_precision_low_dtype(kp_precision p) {
  return p == KP_PREC_BF16 ? KILN_BF16 : p == KP_PREC_FP16 ? KILN_F16 : KILN_F32;
}

static bool is_half(kir_dtype t) { return t == KILN_F16 || t == KILN_BF16; }

/* Whether every value of `from` is exactly a value of `to` (so to -> from undoes it). */
static bool exact_widening(kir_dtype from, kir_dtype to) {
  if (is_half(from)) return to == KILN_F32 || to == KILN_F64;
  return from == KILN_F32 && to == KILN_F64;
}

/* ------------------------------------------------------------ the state */

typedef struct mp_state {
  kp_precision prec;
  const kir_graph *memo_g; /* the graph `memo` belongs to */
  uint32_t *memo;          /* per value of memo_g: its rounded or promoted copy */
  uint32_t cap;
} mp_state;

/* The memo slot of value v of ng (NULL when out of memory, with the failure set). */
static uint32_t *memo_slot(mp_state *st, kir_graph *ng, uint32_t v) {
  if (st->memo_g != ng) {
    st->memo_g = ng;
    for (uint32_t i = 0; i < st->cap; i++)
      st->memo[i] = KILN_NO_VALUE;
  }
  if (v >= st->cap) {
    uint32_t nc = ng->nvalues * 2u + 64u;
    if (nc <= v) nc = v + 64u;
    uint32_t *m = realloc(st->memo, nc * sizeof *m);
    if (!m) {
      kir_graph_fail(ng, KILN_ERR_NOMEM, "out of memory");
      return NULL;
    }
    for (uint32_t i = st->cap; i < nc; i++)
      m[i] = KILN_NO_VALUE;
    st->memo = m;
    st->cap = nc;
  }
  return &st->memo[v];
}

/* ------------------------------------------------------------ casts */

/* The operand of v's defining cast, or KILN_NO_VALUE when v is not a cast's result. */
static uint32_t cast_source(const kir_graph *ng, uint32_t v) {
  int32_t def = ng->values[v].def;
  if (def < 0) return KILN_NO_VALUE;
  const kir_inst *d = &ng->insts[def];
  return d->op == KIR_OP_cast ? d->in[0] : KILN_NO_VALUE;
}

/* v cast to t, at the position of `at`; cancels against v's own cast when that is exact. */
static uint32_t add_cast(kir_graph *ng, uint32_t v, kir_dtype t, const kir_inst *at) {
  kir_dtype vt = ng->values[v].type.dtype;
  if (vt == t) return v;
  uint32_t src = cast_source(ng, v);
  if (src != KILN_NO_VALUE && ng->values[src].type.dtype == t && exact_widening(t, vt)) return src;
  kir_attr a = {.i = t};
  uint32_t out;
  if (kir_add_inst(ng, KIR_OP_cast, 1, &v, &a, &out, 1, at ? at->line : 0, at ? at->col : 0) != 1)
    return KILN_NO_VALUE;
  return out;
}

/* A cast instruction of the source, cancelled or copied. */
static kp_action rewrite_cast(kir_graph *ng, const kir_inst *inst, const uint32_t *in,
                              uint32_t *out) {
  out[0] = add_cast(ng, in[0], (kir_dtype)inst->attrs[0].i, inst);
  return out[0] == KILN_NO_VALUE ? KP_FAILED : KP_REPLACED;
}

/* ------------------------------------------------------------ widening 16-bit ops */

/* Ops whose result sums (or otherwise folds) many operand elements. */
static bool accumulates(uint16_t op) {
  switch (kir_op(op)->family) {
  case KIR_FAM_REDUCE:
  case KIR_FAM_COMPOUND:
    return true;
  case KIR_FAM_INDEX:
    return op != KIR_OP_gather;
  default:
    return false;
  }
}

/* The source graph that ng is the copy of. */
static const kir_graph *source_of(const kp_rebuild *rb, const kir_graph *ng) {
  const kir_module *m = rb->src->mod;
  for (uint32_t i = 0; i < m->nbodies && i < rb->ngraphs; i++)
    if (rb->graphs[i] == ng) return m->bodies[i];
  return rb->src;
}

/* v cast to f32, once per value of ng. */
static uint32_t widened(mp_state *st, kir_graph *ng, uint32_t v, const kir_inst *at) {
  uint32_t *slot = memo_slot(st, ng, v);
  if (!slot) return KILN_NO_VALUE;
  if (*slot != KILN_NO_VALUE) return *slot;
  uint32_t r = add_cast(ng, v, KILN_F32, at);
  slot = memo_slot(st, ng, v); /* the cast may have grown the graph, not the memo */
  if (slot && r != KILN_NO_VALUE) *slot = r;
  return r;
}

static kp_action widen_inst(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst, const uint32_t *in,
                            uint32_t *out) {
  if (inst->op == KIR_OP_cast) return rewrite_cast(ng, inst, in, out);
  if (!accumulates(inst->op)) return KP_KEEP;
  bool any = false;
  for (uint32_t i = 0; i < inst->nin; i++)
    any |= is_half(ng->values[in[i]].type.dtype);
  if (!any) return KP_KEEP;
  uint32_t win[64], wout[64];
  if (inst->nin > 64 || inst->nout > 64) return KP_KEEP; /* no compound op is that wide */
  for (uint32_t i = 0; i < inst->nin; i++) {
    bool h = is_half(ng->values[in[i]].type.dtype);
    win[i] = h ? widened(rb->user, ng, in[i], inst) : in[i];
    if (win[i] == KILN_NO_VALUE) return KP_FAILED;
  }
  if (!kp_copy_inst(rb, ng, inst, win, wout)) return KP_FAILED;
  const kir_graph *og = source_of(rb, ng);
  for (uint32_t k = 0; k < inst->nout; k++) {
    kir_dtype want = og->values[inst->out[k]].type.dtype;
    out[k] = add_cast(ng, wout[k], want, inst);
    if (out[k] == KILN_NO_VALUE) return KP_FAILED;
  }
  return KP_REPLACED;
}

kir_graph *kp_widen_half(kir_graph *g) {
  mp_state st = {0};
  kir_graph *ng = kp_rebuild_module(g, widen_inst, &st);
  free(st.memo);
  return ng;
}

/* ------------------------------------------------------------ the policy */

/* Ops whose float operands are taken in the low type (the first `n` of them). */
static uint32_t low_operands(uint16_t op) {
  switch (op) {
  case KIR_OP_matmul:
  case KIR_OP_conv2d:
  case KIR_OP_conv2d_grad_input:
  case KIR_OP_conv2d_grad_weight:
    return 2;
  case KIR_OP_attention:
    return 3; /* q, k, v; a mask stays as it is */
  default:
    return 0;
  }
}

/* v rounded to `low` and back to f32, once per value of ng. */
static uint32_t rounded(mp_state *st, kir_graph *ng, uint32_t v, kir_dtype low,
                        const kir_inst *at) {
  uint32_t *slot = memo_slot(st, ng, v);
  if (!slot) return KILN_NO_VALUE;
  if (*slot != KILN_NO_VALUE) return *slot;
  uint32_t l = add_cast(ng, v, low, at);
  uint32_t r = l == KILN_NO_VALUE ? l : add_cast(ng, l, KILN_F32, at);
  slot = memo_slot(st, ng, v); /* the casts may have grown the graph, not the memo */
  if (slot && r != KILN_NO_VALUE) *slot = r;
  return r;
}

static kp_action low_inst(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst, const uint32_t *in,
                          uint32_t *out) {
  mp_state *st = rb->user;
  if (inst->op == KIR_OP_cast) return rewrite_cast(ng, inst, in, out);
  uint32_t n = low_operands(inst->op);
  if (!n) return KP_KEEP;
  kir_dtype low = kp_precision_low_dtype(st->prec);
  uint32_t lin[8];
  if (inst->nin > 8) return KP_KEEP;
  bool any = false;
  for (uint32_t i = 0; i < inst->nin; i++) {
    lin[i] = in[i];
    if (i >= n || ng->values[in[i]].type.dtype != KILN_F32) continue;
    if ((lin[i] = rounded(st, ng, in[i], low, inst)) == KILN_NO_VALUE) return KP_FAILED;
    any = true;
  }
  if (!any) return KP_KEEP;
  return kp_copy_inst(rb, ng, inst, lin, out) ? KP_REPLACED : KP_FAILED;
}

/* fp64: f32 operands promoted (once each), f32 dtype attributes made f64. Entry graph only:
   a scan keeps its body's types, so its operands go back to their own dtypes. */
static uint32_t promoted(mp_state *st, kir_graph *ng, uint32_t v, const kir_inst *at) {
  if (ng->values[v].type.dtype != KILN_F32) return v;
  uint32_t *slot = memo_slot(st, ng, v);
  if (!slot) return KILN_NO_VALUE;
  if (*slot != KILN_NO_VALUE) return *slot;
  uint32_t r = add_cast(ng, v, KILN_F64, at);
  slot = memo_slot(st, ng, v);
  if (slot && r != KILN_NO_VALUE) *slot = r;
  return r;
}

static kp_action fp64_inst(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst, const uint32_t *in,
                           uint32_t *out) {
  mp_state *st = rb->user;
  if (ng != rb->dst) return KP_KEEP;
  uint32_t pin[64];
  if (inst->nin > 64) return KP_KEEP;
  const kir_op_desc *d = kir_op(inst->op);
  if (d->family == KIR_FAM_CONTROL) {
    for (uint32_t i = 0; i < inst->nin; i++) {
      pin[i] = add_cast(ng, in[i], rb->src->values[inst->in[i]].type.dtype, inst);
      if (pin[i] == KILN_NO_VALUE) return KP_FAILED;
    }
    return kp_copy_inst(rb, ng, inst, pin, out) ? KP_REPLACED : KP_FAILED;
  }
  if (inst->op == KIR_OP_cast && inst->attrs[0].i != KILN_F32)
    return rewrite_cast(ng, inst, in, out);
  for (uint32_t i = 0; i < inst->nin; i++)
    if ((pin[i] = promoted(st, ng, in[i], inst)) == KILN_NO_VALUE) return KP_FAILED;
  kir_attr attrs[KIR_MAX_ATTRS];
  memcpy(attrs, inst->attrs, d->nattrs * sizeof *attrs);
  for (int a = 0; a < d->nattrs; a++)
    if (d->attr[a].kind == KIR_ATTR_DTYPE && attrs[a].i == KILN_F32) attrs[a].i = KILN_F64;
  if (inst->op == KIR_OP_cast) { /* a cast to f32 is now one to f64 */
    out[0] = add_cast(ng, pin[0], KILN_F64, inst);
    return out[0] == KILN_NO_VALUE ? KP_FAILED : KP_REPLACED;
  }
  int k = kir_add_inst(ng, inst->op, inst->nin, pin, attrs, out, inst->nout, inst->line, inst->col);
  return k == (int)inst->nout ? KP_REPLACED : KP_FAILED;
}

/* The entry's results cast back to the dtypes of the source's (fp64 promoted them). */
static bool restore_results(const kir_graph *g, kir_graph *ng) {
  uint32_t *r = malloc((ng->nresults + 1u) * sizeof *r);
  if (!r) {
    kir_graph_fail(ng, KILN_ERR_NOMEM, "out of memory");
    return false;
  }
  bool ok = true;
  for (uint32_t i = 0; ok && i < ng->nresults; i++) {
    r[i] = add_cast(ng, ng->results[i], g->values[g->results[i]].type.dtype, NULL);
    ok = r[i] != KILN_NO_VALUE;
  }
  ok = ok && kir_set_results(ng, ng->nresults, r);
  free(r);
  return ok;
}

kir_graph *kp_mixed_precision(kir_graph *g, kp_precision p) {
  mp_state st = {.prec = p};
  kp_rewrite_fn fn = p == KP_PREC_FP64                        ? fp64_inst
                     : p == KP_PREC_BF16 || p == KP_PREC_FP16 ? low_inst
                                                              : NULL;
  kir_graph *ng = kp_rebuild_module(g, fn, &st);
  free(st.memo);
  if (ng && p == KP_PREC_FP64 && !restore_results(g->mod->entry, ng)) {
    kiln_graph_destroy(ng); /* the message is on the shared context */
    return NULL;
  }
  return ng;
}
