/*
 * canonicalize.c — algebraic simplification, constant folding, CSE and DCE,
 * run to a fixpoint (docs/passes.md).
 *
 * One sweep is one kp_rebuild_module() walk. For every instruction, in
 * order, the callback tries:
 *
 *   1. the rewrite rules of `rules[]` below, a table of (op, rule): the rule
 *      looks at the instruction's operands in the graph being built (so a
 *      chain such as neg(neg(neg x)) collapses in one sweep) and either
 *      names the value that replaces the result or emits the replacement;
 *   2. constant folding: an op whose operands are all `constant`s, whose
 *      shapes are concrete and whose results are small (KP_FOLD_MAX_ELEMS
 *      elements, operands at most KP_FOLD_MAX_IN_ELEMS) runs on the op's
 *      float64 reference kernel (ir/ref_*.c, through a one-instruction
 *      module and kir_interp_run) and becomes a `constant` of its dtype
 *      (floats rounded to the dtype; integers folded only while every value
 *      is exact in a double, |v| <= 2^53, since `value` is a float list);
 *   3. CSE: an instruction with the same op, the same operands and equal
 *      attributes as one already built (hashing all three) reuses its
 *      results. Every op of the IR is pure: `random` is counter-based
 *      (Philox keyed by its seed operand and its `stream` attribute), so two
 *      `random`s are merged only when seed value, stream, shape, dtype and
 *      distribution all agree, and then they do produce the same numbers;
 *      two with distinct seeds or streams never hash equal;
 *   4. DCE: an instruction none of whose results reaches the graph's results
 *      (worked out on the input of the sweep, per graph) is dropped.
 *
 * Sweeps repeat until one changes nothing (the fixpoint; at most
 * KP_CANON_MAX_SWEEPS). Float rules keep IEEE semantics exactly: x*1, x/1,
 * x-0 are x for every float x, but x+0 is not (-0 + 0 = +0) and x*0 and x-x
 * are not 0 (NaN, inf), so those three fire on integers only.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "canonicalize.h"
#include "passes.h"

typedef struct canon canon;

/* What a rule sees. */
typedef struct rw {
  canon *c;
  kir_graph *ng;
  const kir_inst *inst;
  const uint32_t *in;
  const kir_type *want; /* result 0's type in the source graph */
  uint32_t *out;
} rw;

/* Returns true with out[0] set when it rewrote the instruction. */
typedef bool (*rule_fn)(rw *r);

typedef struct rule {
  const char *name;
  uint16_t op;
  rule_fn fn;
} rule;

typedef struct cse_table {
  const kir_graph *g; /* the graph indexed */
  uint32_t indexed;   /* its instructions [0, indexed) are in the table */
  uint32_t *slot;     /* instruction index + 1, 0: empty */
  uint32_t cap;       /* a power of two */
  uint32_t n;
} cse_table;

struct canon {
  const kir_module *src;
  bool **live; /* per source graph (bodies, then the entry): per instruction */
  cse_table cse;
  kp_canon_stats *st;
  uint32_t changes; /* in this sweep */
};

/* ---------------------------------------------------------- helpers */

static const kir_inst *def_of(const kir_graph *g, uint32_t v) {
  int32_t d = g->values[v].def;
  return d >= 0 ? &g->insts[d] : NULL;
}

/* v is a `constant` whose elements all equal *x. */
static bool splat(const kir_graph *g, uint32_t v, double *x) {
  const kir_inst *d = def_of(g, v);
  if (!d || d->op != KIR_OP_constant) return false;
  const kir_attr *val = &d->attrs[2];
  if (val->n < 1) return false;
  for (uint32_t i = 1; i < val->n; i++)
    if (memcmp(&val->floats[i], &val->floats[0], sizeof(double))) return false;
  double x0 = val->floats[0];
  kir_dtype dt = g->values[v].type.dtype;
  *x = kir_dtype_is_float(dt) ? x0 : (double)kir_float_to_int(dt, x0);
  return true;
}

static bool is_splat(const kir_graph *g, uint32_t v, double want) {
  double x;
  return splat(g, v, &x) && x == want && !signbit(x) == !signbit(want);
}

static bool same_type(const kir_graph *g, uint32_t v, const kir_type *t) {
  return kir_type_eq(&g->values[v].type, t);
}

/* Replaces the result by existing value v when the types agree. */
static bool use(rw *r, uint32_t v) {
  if (!same_type(r->ng, v, r->want)) return false;
  r->out[0] = v;
  return true;
}

static bool emit(rw *r, uint16_t op, uint32_t nin, const uint32_t *in, const kir_attr *attrs) {
  uint32_t o[4];
  int n = kir_add_inst(r->ng, op, nin, in, attrs, o, 4, r->inst->line, r->inst->col);
  if (n != 1) return false;
  r->out[0] = o[0];
  return true;
}

/* A splat constant of type t holding x. */
static bool emit_splat(rw *r, const kir_type *t, double x) {
  kir_attr a[3] = {{.i = t->dtype}, {.n = t->rank, .ints = t->dims}, {.n = 1, .floats = &x}};
  return emit(r, KIR_OP_constant, 0, NULL, a);
}

/* ------------------------------------------------------------ rules */

static bool r_add_zero(rw *r) { /* x + 0 -> x, integers (float: -0 + 0 is +0) */
  if (kir_dtype_is_float(r->want->dtype)) return false;
  return (is_splat(r->ng, r->in[1], 0) && use(r, r->in[0])) ||
         (is_splat(r->ng, r->in[0], 0) && use(r, r->in[1]));
}

static bool r_sub_zero(rw *r) { /* x - (+0) -> x, exact for every float too */
  return is_splat(r->ng, r->in[1], 0) && use(r, r->in[0]);
}

static bool r_mul_one(rw *r) {
  return (is_splat(r->ng, r->in[1], 1) && use(r, r->in[0])) ||
         (is_splat(r->ng, r->in[0], 1) && use(r, r->in[1]));
}

static bool r_div_one(rw *r) { return is_splat(r->ng, r->in[1], 1) && use(r, r->in[0]); }

static bool r_mul_zero(rw *r) { /* integers only: NaN * 0 and inf * 0 are NaN */
  if (kir_dtype_is_float(r->want->dtype)) return false;
  double x;
  bool z = (splat(r->ng, r->in[0], &x) && x == 0) || (splat(r->ng, r->in[1], &x) && x == 0);
  return z && emit_splat(r, r->want, 0);
}

static bool r_sub_self(rw *r) { /* integers only: inf - inf is NaN */
  if (kir_dtype_is_float(r->want->dtype) || r->in[0] != r->in[1]) return false;
  return emit_splat(r, r->want, 0);
}

static bool r_neg_neg(rw *r) {
  const kir_inst *d = def_of(r->ng, r->in[0]);
  return d && d->op == KIR_OP_neg && use(r, d->in[0]);
}

static bool identity_perm(const kir_attr *p) {
  for (uint32_t i = 0; i < p->n; i++)
    if (p->ints[i] != (int64_t)i) return false;
  return true;
}

static bool r_transpose(rw *r) {
  const kir_attr *p2 = &r->inst->attrs[0];
  if (identity_perm(p2)) return use(r, r->in[0]);
  const kir_inst *d = def_of(r->ng, r->in[0]);
  if (!d || d->op != KIR_OP_transpose || d->attrs[0].n != p2->n || p2->n > KIR_MAX_RANK)
    return false;
  /* y = transpose(x, p1): y.dims[i] = x.dims[p1[i]]; z = transpose(y, p2): q[i] = p1[p2[i]]. */
  int64_t q[KIR_MAX_RANK];
  for (uint32_t i = 0; i < p2->n; i++) {
    if (p2->ints[i] < 0 || p2->ints[i] >= (int64_t)p2->n) return false;
    q[i] = d->attrs[0].ints[p2->ints[i]];
  }
  kir_attr a = {.n = p2->n, .ints = q};
  if (identity_perm(&a)) return use(r, d->in[0]);
  return emit(r, KIR_OP_transpose, 1, d->in, &a);
}

static bool r_reshape(rw *r) {
  if (use(r, r->in[0])) return true;
  const kir_inst *d = def_of(r->ng, r->in[0]);
  if (!d || d->op != KIR_OP_reshape) return false;
  if (use(r, d->in[0])) return true;
  return emit(r, KIR_OP_reshape, 1, d->in, r->inst->attrs);
}

/* Every value of dtype a is exactly a value of dtype b. */
static bool lossless(kir_dtype a, kir_dtype b) {
  if (a == b) return true;
  switch (a) {
  case KILN_BOOL: return b != KILN_F8E8M0; /* 0 and 1 fit every type but f8e8m0 (no 0) */
  case KILN_I8:
  case KILN_U8: /* not into the storage types, which are narrower */
    return b != KILN_BOOL && b != (a == KILN_I8 ? KILN_U8 : KILN_I8) && !kir_dtype_is_storage(b);
  case KILN_I32: return b == KILN_I64 || b == KILN_F64;
  case KILN_F16:
  case KILN_BF16: return b == KILN_F32 || b == KILN_F64;
  case KILN_F32: return b == KILN_F64;
  default: return false;
  }
}

static bool r_cast(rw *r) {
  if (use(r, r->in[0])) return true; /* to its own dtype */
  const kir_inst *d = def_of(r->ng, r->in[0]);
  if (!d || d->op != KIR_OP_cast) return false;
  kir_dtype x = r->ng->values[d->in[0]].type.dtype, mid = r->ng->values[r->in[0]].type.dtype;
  if (!lossless(x, mid)) return false; /* cast(cast(x, wider), t) is cast(x, t) */
  if (use(r, d->in[0])) return true;
  return emit(r, KIR_OP_cast, 1, d->in, r->inst->attrs);
}

static bool r_broadcast(rw *r) {
  if (use(r, r->in[0])) return true;
  double x;
  return splat(r->ng, r->in[0], &x) && emit_splat(r, r->want, x);
}

static bool r_select(rw *r) {
  double c;
  if (r->in[1] == r->in[2] && use(r, r->in[1])) return true;
  return splat(r->ng, r->in[0], &c) && use(r, r->in[c != 0 ? 1 : 2]);
}

static bool r_concat(rw *r) { return r->inst->nin == 1 && use(r, r->in[0]); }

static bool r_slice(rw *r) { /* steps of 1 and the operand's type: the whole of it */
  const kir_attr *step = &r->inst->attrs[2];
  for (uint32_t i = 0; i < step->n; i++)
    if (step->ints[i] != 1) return false;
  return use(r, r->in[0]);
}

/*
 * A 1x1 convolution with a stride and no padding reads every stride-th pixel only: it is a
 * pointwise convolution (stride 1) of those pixels, which a strided slice takes first. The sums
 * are the same (one tap). The CPU runs a pointwise one as a GEMM or a blocked convolution of the
 * small image, where the strided one packed all of x (resnet50's downsampling 1x1/2 convolutions:
 * 2.7 ms each on one Zen 4 core, docs/cpu-runtime.md).
 */
static bool r_conv_stride(rw *r) {
  const kir_attr *a = r->inst->attrs;
  const kir_type *x = &r->ng->values[r->in[0]].type, *w = &r->ng->values[r->in[1]].type;
  if (x->rank != 4 || w->rank != 4 || w->dims[2] != 1 || w->dims[3] != 1) return false;
  if (a[0].ints[0] == 1 && a[0].ints[1] == 1) return false;
  for (int i = 0; i < 4; i++)
    if (a[1].ints[i] != 0) return false;
  for (int d = 2; d < 4; d++)
    if (KIR_DIM_IS_SYM(x->dims[d]) && a[0].ints[d - 2] != 1) return false;
  int64_t start[4] = {0, 0, 0, 0}, stop[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
  int64_t step[4] = {1, 1, a[0].ints[0], a[0].ints[1]}, one[2] = {1, 1};
  kir_attr sa[3] = {{.n = 4, .ints = start}, {.n = 4, .ints = stop}, {.n = 4, .ints = step}};
  uint32_t in[2] = {0, r->in[1]};
  if (kir_add_inst(r->ng, KIR_OP_slice, 1, r->in, sa, in, 1, r->inst->line, r->inst->col) != 1)
    return false;
  kir_attr ca[4] = {{.n = 2, .ints = one}, a[1], a[2], a[3]};
  return emit(r, KIR_OP_conv2d, 2, in, ca) && same_type(r->ng, r->out[0], r->want);
}

/* Unary and binary elementwise ops on splat constants: a splat, at any (symbolic) shape. */
static bool r_splat_fold(rw *r) {
  const kir_op_desc *d = kir_op(r->inst->op);
  kir_dtype dt = r->want->dtype;
  double a, b = 0, y;
  if (r->inst->nout != 1 || !splat(r->ng, r->in[0], &a)) return false;
  if (r->inst->nin == 2 && !splat(r->ng, r->in[1], &b)) return false;
  if (r->ng->values[r->in[0]].type.dtype != dt) return false;
  bool isf = kir_dtype_is_float(dt);
  if (r->inst->nin == 1 && isf && d->f1) y = kir_round_to(dt, d->f1(a));
  else if (r->inst->nin == 1 && !isf && d->i1) y = (double)kir_wrap_int(dt, d->i1((int64_t)a));
  else if (r->inst->nin == 2 && isf && d->f2) y = kir_round_to(dt, d->f2(a, b));
  else if (r->inst->nin == 2 && !isf && d->i2)
    y = (double)kir_wrap_int(dt, d->i2((int64_t)a, (int64_t)b));
  else return false;
  return emit_splat(r, r->want, y);
}

#define SPLAT_FOLD(op) {"splat-fold", KIR_OP_##op, r_splat_fold}

/* The rules, tried in this order for an instruction of their op. */
static const rule rules[] = {
    {"add-zero", KIR_OP_add, r_add_zero},
    {"sub-zero", KIR_OP_sub, r_sub_zero},
    {"sub-self", KIR_OP_sub, r_sub_self},
    {"mul-one", KIR_OP_mul, r_mul_one},
    {"mul-zero", KIR_OP_mul, r_mul_zero},
    {"div-one", KIR_OP_div, r_div_one},
    {"neg-neg", KIR_OP_neg, r_neg_neg},
    {"transpose", KIR_OP_transpose, r_transpose},
    {"reshape", KIR_OP_reshape, r_reshape},
    {"cast", KIR_OP_cast, r_cast},
    {"broadcast", KIR_OP_broadcast, r_broadcast},
    {"select", KIR_OP_select, r_select},
    {"concat-one", KIR_OP_concat, r_concat},
    {"slice-full", KIR_OP_slice, r_slice},
    {"conv-1x1-stride", KIR_OP_conv2d, r_conv_stride},
    SPLAT_FOLD(neg), SPLAT_FOLD(abs), SPLAT_FOLD(exp), SPLAT_FOLD(log), SPLAT_FOLD(sqrt),
    SPLAT_FOLD(rsqrt), SPLAT_FOLD(reciprocal), SPLAT_FOLD(tanh), SPLAT_FOLD(sigmoid),
    SPLAT_FOLD(add), SPLAT_FOLD(sub), SPLAT_FOLD(mul), SPLAT_FOLD(div), SPLAT_FOLD(max),
    SPLAT_FOLD(min), SPLAT_FOLD(pow),
};
#define NRULES (sizeof rules / sizeof rules[0])
_Static_assert(NRULES < KP_CANON_FOLD, "kp_canon_stats.hits has room for the rules");

const char *kp_canon_rule_name(uint32_t i) {
  return i < NRULES ? rules[i].name : i == KP_CANON_FOLD ? "fold" : i == KP_CANON_CSE ? "cse"
                                                          : i == KP_CANON_DCE ? "dce" : "?";
}

/* ------------------------------------------------------ constant folding */

static bool foldable(const kir_graph *g, const kir_inst *inst) {
  const kir_op_desc *d = kir_op(inst->op);
  if (d->family == KIR_FAM_SOURCE || d->family == KIR_FAM_CONTROL || (d->flags & KIR_F_RANDOM) ||
      !d->ref || !inst->nin)
    return false;
  for (int a = 0; a < d->nattrs; a++) { /* the folding module has no symbols */
    const kir_attr *x = &inst->attrs[a];
    if (d->attr[a].kind == KIR_ATTR_DIM && x->i < 0) return false;
    for (uint32_t j = 0; d->attr[a].kind == KIR_ATTR_DIMS && j < x->n; j++)
      if (x->ints[j] < 0) return false;
  }
  for (uint32_t k = 0; k < inst->nin; k++) {
    const kir_inst *c = def_of(g, inst->in[k]);
    int64_t n = kir_type_numel(&g->values[inst->in[k]].type);
    if (!c || c->op != KIR_OP_constant || n < 0 || n > KP_FOLD_MAX_IN_ELEMS) return false;
  }
  return true;
}

/* Runs the instruction (operands in ng) on the reference kernel in a module of its own. */
static bool fold(rw *r) {
  kir_graph *ng = r->ng;
  const kir_inst *inst = r->inst;
  kir_inst probe = *inst;
  probe.in = (uint32_t *)r->in;
  if (!foldable(ng, &probe)) return false;
  kiln_ctx tctx = {.status = KILN_OK};
  kir_graph *t = kir_module_new(&tctx, "fold");
  if (!t) return false;
  uint32_t tin[16], tout[8];
  kir_tensor *res[8] = {0};
  bool ok = inst->nin <= 16 && inst->nout <= 8;
  for (uint32_t k = 0; ok && k < inst->nin; k++) {
    const kir_inst *c = def_of(ng, r->in[k]);
    ok = kir_add_inst(t, KIR_OP_constant, 0, NULL, c->attrs, &tin[k], 1, 0, 0) == 1;
  }
  ok = ok && kir_add_inst(t, inst->op, inst->nin, tin, inst->attrs, tout, 8, 0, 0) ==
                 (int)inst->nout;
  /* transpose, reshape and slice move their operand's elements, no more: a result as large as
     an operand may be (an RNN's weight transposed for its step product, 256 x 64, which the step
     had transposed again on every run: 11 us of the ONNX LSTM's 81) */
  bool moves = inst->op == KIR_OP_transpose || inst->op == KIR_OP_reshape || inst->op == KIR_OP_slice;
  for (uint32_t k = 0; ok && k < inst->nout; k++) {
    int64_t n = kir_type_numel(&t->values[tout[k]].type);
    ok = n >= 0 && n <= (moves ? KP_FOLD_MAX_IN_ELEMS : KP_FOLD_MAX_ELEMS);
  }
  ok = ok && kir_set_results(t, inst->nout, tout) && kir_interp_run(&tctx, t, NULL, res) == KILN_OK;
  /* Materialise each result as a constant of its dtype. */
  uint32_t o[8];
  for (uint32_t k = 0; ok && k < inst->nout; k++) {
    const kir_tensor *x = res[k];
    const kir_type *ty = &t->values[tout[k]].type;
    double *v = kir_arena_alloc(&ng->mod->arena, (size_t)(x->numel ? x->numel : 1) * sizeof *v);
    ok = v != NULL;
    bool all_same = true;
    for (int64_t e = 0; ok && e < x->numel; e++) {
      if (kir_dtype_is_float(x->dtype)) v[e] = kir_round_to(x->dtype, x->f[e]);
      else if (x->i[e] > (1ll << 53) || x->i[e] < -(1ll << 53)) ok = false;
      else v[e] = (double)x->i[e];
      if (ok && e && memcmp(&v[e], &v[0], sizeof *v)) all_same = false;
    }
    if (!x->numel) v[0] = 0;
    kir_attr a[3] = {{.i = ty->dtype}, {.n = ty->rank, .ints = ty->dims},
                     {.n = all_same ? 1u : (uint32_t)x->numel, .floats = v}};
    ok = ok && kir_add_inst(ng, KIR_OP_constant, 0, NULL, a, &o[k], 1, inst->line, inst->col) == 1;
  }
  for (uint32_t k = 0; k < inst->nout; k++) kir_tensor_free(res[k]);
  kiln_graph_destroy(t);
  if (!ok) return false;
  memcpy(r->out, o, inst->nout * sizeof *o);
  return true;
}

/* ------------------------------------------------------------------ CSE */

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* A constant's values hashed at most: every hash of a model's weights in full (each table growth
   rehashes them) was 12% of `kiln compile` of BERT-base. */
#define HASH_SAMPLES 1024

static uint64_t attr_hash(const kir_op_desc *d, const kir_attr *a) {
  uint64_t h = 0;
  for (int i = 0; i < d->nattrs; i++) {
    switch (d->attr[i].kind) {
    case KIR_ATTR_INTS:
    case KIR_ATTR_DIMS:
      h = mix(h, a[i].n);
      for (uint32_t j = 0; j < a[i].n; j++) h = mix(h, (uint64_t)a[i].ints[j]);
      break;
    case KIR_ATTR_FLOATS: { /* at most HASH_SAMPLES values, evenly spaced: attrs_equal decides */
      h = mix(h, a[i].n);
      uint32_t step = a[i].n > HASH_SAMPLES ? a[i].n / HASH_SAMPLES : 1;
      for (uint32_t j = 0; j < a[i].n; j += step) {
        uint64_t b;
        memcpy(&b, &a[i].floats[j], sizeof b);
        h = mix(h, b);
      }
      break;
    }
    case KIR_ATTR_FLOAT: {
      uint64_t b;
      memcpy(&b, &a[i].f, sizeof b);
      h = mix(h, b);
      break;
    }
    case KIR_ATTR_GRAPH: h = mix(h, (uint64_t)(uintptr_t)a[i].graph); break;
    default: h = mix(h, (uint64_t)a[i].i);
    }
  }
  return h;
}

static bool attrs_equal(const kir_op_desc *d, const kir_attr *a, const kir_attr *b) {
  for (int i = 0; i < d->nattrs; i++) {
    switch (d->attr[i].kind) {
    case KIR_ATTR_INTS:
    case KIR_ATTR_DIMS:
      if (a[i].n != b[i].n || (a[i].n && memcmp(a[i].ints, b[i].ints, a[i].n * sizeof(int64_t))))
        return false;
      break;
    case KIR_ATTR_FLOATS:
      if (a[i].n != b[i].n ||
          (a[i].n && memcmp(a[i].floats, b[i].floats, a[i].n * sizeof(double))))
        return false;
      break;
    case KIR_ATTR_FLOAT:
      if (memcmp(&a[i].f, &b[i].f, sizeof(double))) return false;
      break;
    case KIR_ATTR_GRAPH:
      if (a[i].graph != b[i].graph) return false;
      break;
    default:
      if (a[i].i != b[i].i) return false;
    }
  }
  return true;
}

static uint64_t inst_hash(uint16_t op, uint32_t nin, const uint32_t *in, const kir_attr *attrs) {
  uint64_t h = mix(op, nin);
  for (uint32_t k = 0; k < nin; k++) h = mix(h, in[k]);
  return mix(h, attr_hash(kir_op(op), attrs));
}

static bool cse_grow(cse_table *t) {
  uint32_t cap = t->cap ? t->cap * 2 : 256;
  uint32_t *slot = calloc(cap, sizeof *slot);
  if (!slot) return false;
  const kir_graph *g = t->g;
  for (uint32_t s = 0; s < t->cap; s++) {
    if (!t->slot[s]) continue;
    const kir_inst *x = &g->insts[t->slot[s] - 1];
    uint64_t h = inst_hash(x->op, x->nin, x->in, x->attrs);
    uint32_t j = (uint32_t)h & (cap - 1);
    while (slot[j]) j = (j + 1) & (cap - 1);
    slot[j] = t->slot[s];
  }
  free(t->slot);
  t->slot = slot;
  t->cap = cap;
  return true;
}

/* Indexes the instructions of g not indexed yet (g is the graph being built). */
static bool cse_catch_up(cse_table *t, const kir_graph *g) {
  if (t->g != g) {
    free(t->slot);
    *t = (cse_table){.g = g};
  }
  for (; t->indexed < g->ninsts; t->indexed++) {
    if ((t->n + 1) * 2 > t->cap && !cse_grow(t)) return false;
    const kir_inst *x = &g->insts[t->indexed];
    uint32_t j = (uint32_t)inst_hash(x->op, x->nin, x->in, x->attrs) & (t->cap - 1);
    while (t->slot[j]) j = (j + 1) & (t->cap - 1);
    t->slot[j] = t->indexed + 1;
    t->n++;
  }
  return true;
}

static bool cse(rw *r) {
  cse_table *t = &r->c->cse;
  const kir_inst *inst = r->inst;
  if (!cse_catch_up(t, r->ng) || !t->cap) return false;
  const kir_op_desc *d = kir_op(inst->op);
  uint32_t j = (uint32_t)inst_hash(inst->op, inst->nin, r->in, inst->attrs) & (t->cap - 1);
  /* Graph attributes of the source name source bodies: compare the rebuilt ones. */
  for (int a = 0; a < d->nattrs; a++)
    if (d->attr[a].kind == KIR_ATTR_GRAPH) return false;
  for (; t->slot[j]; j = (j + 1) & (t->cap - 1)) {
    const kir_inst *x = &r->ng->insts[t->slot[j] - 1];
    if (x->op != inst->op || x->nin != inst->nin || x->nout != inst->nout ||
        memcmp(x->in, r->in, inst->nin * sizeof *r->in) || !attrs_equal(d, x->attrs, inst->attrs))
      continue;
    memcpy(r->out, x->out, inst->nout * sizeof *r->out);
    return true;
  }
  return false;
}

/* ------------------------------------------------------------------ DCE */

static const kir_graph *source_graph(const kir_module *m, const kir_inst *inst, uint32_t *gi) {
  for (uint32_t b = 0; b <= m->nbodies; b++) {
    const kir_graph *g = b < m->nbodies ? m->bodies[b] : m->entry;
    if (inst >= g->insts && inst < g->insts + g->ninsts) {
      *gi = b;
      return g;
    }
  }
  return NULL;
}

/* live[i]: some result of instruction i reaches g's results. */
static bool *liveness(const kir_graph *g) {
  bool *vlive = calloc(g->nvalues + 1u, sizeof *vlive), *live = calloc(g->ninsts + 1u, 1);
  if (!vlive || !live) {
    free(vlive), free(live);
    return NULL;
  }
  for (uint32_t r = 0; r < g->nresults; r++) vlive[g->results[r]] = true;
  for (uint32_t i = g->ninsts; i-- > 0;) {
    const kir_inst *x = &g->insts[i];
    for (uint32_t k = 0; k < x->nout && !live[i]; k++) live[i] = vlive[x->out[k]];
    for (uint32_t k = 0; live[i] && k < x->nin; k++) vlive[x->in[k]] = true;
  }
  free(vlive);
  return live;
}

/* ---------------------------------------------------------------- sweep */

static kp_action canon_inst(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst,
                            const uint32_t *in, uint32_t *out) {
  canon *c = rb->user;
  uint32_t gi;
  const kir_graph *og = source_graph(c->src, inst, &gi);
  if (!og) return KP_KEEP;
  if (!c->live[gi][inst - og->insts]) {
    c->st->hits[KP_CANON_DCE]++, c->changes++;
    return KP_DROP;
  }
  rw r = {.c = c, .ng = ng, .inst = inst, .in = in, .want = &og->values[inst->out[0]].type,
          .out = out};
  if (inst->nout == 1)
    for (uint32_t i = 0; i < NRULES; i++) {
      if (rules[i].op != inst->op) continue;
      uint32_t before = ng->ninsts;
      if (rules[i].fn(&r)) {
        c->st->hits[i]++, c->changes++;
        return KP_REPLACED;
      }
      if (ng->mod->status != KILN_OK) return KP_FAILED;
      if (ng->ninsts != before) return KP_FAILED; /* a rule must not leave half a rewrite */
    }
  if (fold(&r)) {
    c->st->hits[KP_CANON_FOLD]++, c->changes++;
    return KP_REPLACED;
  }
  if (ng->mod->status != KILN_OK) return KP_FAILED;
  if (cse(&r)) {
    c->st->hits[KP_CANON_CSE]++, c->changes++;
    return KP_REPLACED;
  }
  return KP_KEEP;
}

/* One sweep; *changes counts the rewrites. */
static kir_graph *sweep(kir_graph *g, kp_canon_stats *st, uint32_t *changes) {
  kir_module *m = g->mod;
  canon c = {.src = m, .st = st};
  c.live = calloc(m->nbodies + 1u, sizeof *c.live);
  bool ok = c.live != NULL;
  for (uint32_t b = 0; ok && b <= m->nbodies; b++)
    ok = (c.live[b] = liveness(b < m->nbodies ? m->bodies[b] : m->entry)) != NULL;
  kir_graph *ng = NULL;
  if (ok) ng = kp_rebuild_module(m->entry, canon_inst, &c);
  else kir_fail(m->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t b = 0; c.live && b <= m->nbodies; b++) free(c.live[b]);
  free(c.live);
  free(c.cse.slot);
  *changes = c.changes;
  return ng;
}

kir_graph *kp_canonicalize_ex(kir_graph *g, kp_canon_stats *stats) {
  kp_canon_stats local;
  kp_canon_stats *st = stats ? stats : &local;
  memset(st, 0, sizeof *st);
  kir_graph *cur = g;
  for (;;) {
    uint32_t changes = 0;
    kir_graph *next = sweep(cur, st, &changes);
    if (cur != g) kiln_graph_destroy(cur);
    if (!next) return NULL;
    cur = next;
    st->sweeps++;
    if (!changes) {
      st->fixpoint = true;
      break;
    }
    if (st->sweeps >= KP_CANON_MAX_SWEEPS) break;
  }
  return cur;
}

kir_graph *kp_canonicalize(kir_graph *g) { return kp_canonicalize_ex(g, NULL); }
