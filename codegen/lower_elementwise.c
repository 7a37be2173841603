/*
 * lower_elementwise.c — one lowering for every elementwise op: the unary,
 * binary, compare and logical families, is_finite, select, cast, and
 * broadcast (an elementwise copy).
 *
 * The kernel is one loop nest over the result, the outermost loop parallel,
 * reading each operand at an offset computed from its own strides. Numpy
 * broadcasting is a zero stride: an operand that lacks an axis, or has it
 * as 1 where the result does not, does not move along that axis.
 *
 * The loop nest is as flat as the broadcasting allows. Result axes of
 * constant size 1 are dropped, and neighbouring axes along which every
 * operand moves the same way (all contiguous, or all broadcast) are merged
 * into one loop, because row-major strides make such a pair one axis of
 * their product. Without broadcasting this leaves a single flat loop over
 * every element — the form LLVM vectorises best; a bias add [N, 4] + [4]
 * becomes two loops, the inner one contiguous in both operands.
 *
 * What the element computes is chosen by the op table alone: the family
 * says unary (kcg_unary with the op's id), binary/compare/logical
 * (kcg_binary), and select, cast and broadcast have their own entry points.
 * No op is named here.
 */
#include "lower.h"

enum { MAX_OPS = 3 };

/* What one element of the result is, given the loaded operand values. */
typedef kcg_ref (*elem_fn)(kcg_lower_ctx *lc, kcg_kernel *k, const kcg_ref *v);

/* The loop structure over the result: merged groups of axes. */
typedef struct {
  int ngroups;
  kcg_ref extent[KIR_MAX_RANK];
  kcg_ref stride[MAX_OPS][KIR_MAX_RANK]; /* each operand's stride along each group; 0: broadcast */
} nest_plan;

/*
 * Whether operand type x moves along result axis d of t (false: broadcast),
 * and its stride there.
 */
static bool moves(kcg_kernel *k, const kir_type *x, const kir_type *t, int d, kcg_ref *stride) {
  int j = d - (t->rank - x->rank);
  if (j < 0 || (x->dims[j] == 1 && t->dims[d] != 1)) return false;
  kcg_ref s = kcg_i64(k, 1);
  for (int e = j + 1; e < x->rank; e++)
    s = kcg_mul(k, s, kcg_dim(k, x->dims[e]));
  *stride = s;
  return true;
}

static nest_plan plan_nest(kcg_kernel *k, const kir_type *t, const kir_type *const *ops, int nops) {
  nest_plan p = {0};
  unsigned prev_mask = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d] == 1) continue; /* the index is always 0 */
    unsigned mask = 0;
    kcg_ref st[MAX_OPS];
    for (int o = 0; o < nops; o++)
      if (moves(k, ops[o], t, d, &st[o])) mask |= 1u << o;
    kcg_ref n = kcg_dim(k, t->dims[d]);
    if (p.ngroups && mask == prev_mask) {
      /* Same movement as the group before: one loop over the product of both. */
      int g = p.ngroups - 1;
      p.extent[g] = kcg_mul(k, p.extent[g], n);
      for (int o = 0; o < nops; o++)
        p.stride[o][g] = (mask >> o & 1) ? st[o] : kcg_i64(k, 0);
      continue;
    }
    int g = p.ngroups++;
    p.extent[g] = n;
    for (int o = 0; o < nops; o++)
      p.stride[o][g] = (mask >> o & 1) ? st[o] : kcg_i64(k, 0);
    prev_mask = mask;
  }
  return p;
}

/*
 * The common kernel: operands 0..nops-1 of the instruction (or of `srcs`),
 * result 0, element function f.
 */
static bool lower_map(kcg_lower_ctx *lc, int nops, elem_fn f) {
  kcg_kernel *k = kcg_lower_kernel(lc, "");
  if (!k) return false;
  const kir_type *t = kcg_out_type(lc, 0), *types[MAX_OPS];
  uint32_t bufs[MAX_OPS];
  for (int o = 0; o < nops; o++) {
    types[o] = kcg_in_type(lc, (uint32_t)o);
    bufs[o] = kcg_lower_arg(lc, lc->in[o], false);
  }
  uint32_t y = kcg_lower_arg(lc, lc->out[0], true);
  nest_plan p = plan_nest(k, t, types, nops);
  kcg_ref idx[KIR_MAX_RANK], off[MAX_OPS + 1], v[MAX_OPS];
  uint32_t parent = KCG_NONE;
  for (int g = 0; g < p.ngroups; g++)
    parent = kcg_loop(k, parent, p.extent[g], g == 0, &idx[g]);
  /* The result is contiguous: its offset is the row-major index over the groups. */
  off[nops] = kcg_i64(k, 0);
  for (int g = 0; g < p.ngroups; g++)
    off[nops] = kcg_add(k, kcg_mul(k, off[nops], p.extent[g]), idx[g]);
  for (int o = 0; o < nops; o++) {
    off[o] = kcg_offset(k, p.ngroups, idx, p.stride[o]);
    v[o] = kcg_load(k, bufs[o], off[o], KCG_NONE);
  }
  kcg_store(k, parent, y, off[nops], f(lc, k, v));
  return kcg_lower_step(lc);
}

static kcg_ref elem_unary(kcg_lower_ctx *lc, kcg_kernel *k, const kcg_ref *v) {
  return kcg_unary(k, lc->inst->op, v[0]);
}

static kcg_ref elem_binary(kcg_lower_ctx *lc, kcg_kernel *k, const kcg_ref *v) {
  return kcg_binary(k, lc->inst->op, v[0], v[1]);
}

static kcg_ref elem_select(kcg_lower_ctx *lc, kcg_kernel *k, const kcg_ref *v) {
  (void)lc;
  return kcg_select(k, v[0], v[1], v[2]);
}

static kcg_ref elem_cast(kcg_lower_ctx *lc, kcg_kernel *k, const kcg_ref *v) {
  return kcg_cast(k, kcg_out_type(lc, 0)->dtype, v[0]);
}

static kcg_ref elem_copy(kcg_lower_ctx *lc, kcg_kernel *k, const kcg_ref *v) {
  (void)lc, (void)k;
  return v[0];
}

/* The unary, binary, compare and logical families (is_finite is a unary op). */
bool kcg_lower_elementwise(kcg_lower_ctx *lc, const kir_inst *inst) {
  bool unary = lc->op->family == KIR_FAM_UNARY;
  if (inst->nin != (unary ? 1u : 2u))
    return kcg_lower_fail(lc, KILN_ERR_INVALID, "%s: %u operands for an elementwise op",
                          lc->op->name, inst->nin);
  return lower_map(lc, (int)inst->nin, unary ? elem_unary : elem_binary);
}

bool kcg_lower_select(kcg_lower_ctx *lc, const kir_inst *inst) {
  (void)inst;
  return lower_map(lc, 3, elem_select);
}

bool kcg_lower_cast(kcg_lower_ctx *lc, const kir_inst *inst) {
  (void)inst;
  return lower_map(lc, 1, elem_cast);
}

bool kcg_lower_broadcast(kcg_lower_ctx *lc, const kir_inst *inst) {
  (void)inst;
  return lower_map(lc, 1, elem_copy);
}
