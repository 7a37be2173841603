/*
 * fuse.c — one kernel for a fusion group (passes/fusion.c decides the groups).
 *
 * The members' results never reach memory: each is an expression of the
 * kernel, built from its operands' expressions by the same kernel-IR node
 * its own lowering would store (kcg_unary with the op's id, kcg_binary,
 * select, cast; a broadcast is its operand), so a fused kernel computes
 * every element exactly as the unfused kernels do, rounding included.
 * Externals — operands produced outside the group — are loaded in place.
 *
 * An elementwise group is one loop nest over F, flattened as far as the
 * externals' broadcasting allows (lower_elementwise.c's rule: neighbouring
 * axes along which every external moves the same way become one loop).
 *
 * A group with rows (F's axes [r, rank) reduced) is one parallel loop over
 * the rows, i, and inside it, in the members' order: for each reduction a
 * loop over the row's C columns, j, folding its operand's expression into
 * a local in column order (the reference's order, as lower_tensor.c's
 * reduce_local); for each row-valued elementwise member a local; and, when
 * the root is full, a last loop over j storing it (see value_to_keep for
 * the one value that loop reads back instead of recomputing). Full externals are read
 * at i * C + j, per-row ones at i, per-column ones at j, scalars at 0.
 */
#include <math.h>
#include <stdlib.h>

#include "fuse.h"

enum { MAX_EXT = 16 };

typedef struct {
  kcg_lower_ctx *lc;
  kcg_kernel *k;
  const kir_graph *g;
  const kp_fusion *f;
  uint32_t root;
  kir_type F;
  int r;
  /* externals: value id, kernel buffer, and (elementwise groups) the load of the current element */
  uint32_t ext_val[MAX_EXT], ext_buf[MAX_EXT];
  kcg_ref ext_load[MAX_EXT];
  uint32_t next;
  /* groups with rows */
  kcg_ref i, j, C; /* j is KCG_NONE at row level */
  uint32_t y;      /* the result's kernel buffer */
  uint32_t kept;   /* a full value the last reduction pass stores into y for the final pass, or
                      UINT32_MAX */
  /* per value: its expression in the current loop (epoch), or its row local */
  kcg_ref *memo;
  uint32_t *epoch, cur;
  kcg_ref *row;
} fuse_st;

static bool is_reduce_op(uint16_t op) { return kir_op_is_fold(op); }

static bool member(const fuse_st *s, uint32_t v) {
  int32_t d = s->g->values[v].def;
  return d >= 0 && s->f->group[d] == s->root;
}

static uint32_t ext_index(const fuse_st *s, uint32_t v) {
  for (uint32_t e = 0; e < s->next; e++)
    if (s->ext_val[e] == v) return e;
  return UINT32_MAX;
}

/* The externals in order of first use, each a kernel buffer. */
static bool collect_externals(fuse_st *s, const uint32_t *map) {
  for (uint32_t i = 0; i <= s->root; i++) {
    if (s->f->group[i] != s->root) continue;
    const kir_inst *in = &s->g->insts[i];
    for (uint32_t o = 0; o < in->nin; o++) {
      uint32_t v = in->in[o];
      if (member(s, v) || ext_index(s, v) != UINT32_MAX) continue;
      if (s->next == MAX_EXT)
        return kcg_lower_fail(s->lc, KILN_ERR_INVALID, "fusion: too many operands");
      s->ext_val[s->next] = v;
      s->ext_buf[s->next++] = kcg_lower_arg(s->lc, map[v], false);
    }
  }
  return true;
}

/* The element op of member instruction `in` over operand expressions a[]. */
static kcg_ref element(fuse_st *s, const kir_inst *in, const kcg_ref *a) {
  const kir_op_desc *d = kir_op(in->op);
  if (in->op == KIR_OP_broadcast) return a[0];
  if (in->op == KIR_OP_cast) return kcg_cast(s->k, s->g->values[in->out[0]].type.dtype, a[0]);
  if (in->op == KIR_OP_select) return kcg_select(s->k, a[0], a[1], a[2]);
  if (d->family == KIR_FAM_UNARY) return kcg_unary(s->k, in->op, a[0]);
  return kcg_binary(s->k, in->op, a[0], a[1]);
}

/* Offset of external type x in a group with rows: i * C + j, i, j or 0. */
static kcg_ref row_offset(fuse_st *s, const kir_type *x) {
  bool rows = false, cols = false;
  for (int d = 0; d < s->F.rank; d++) {
    int jx = d - (s->F.rank - x->rank);
    if (s->F.dims[d] == 1 || jx < 0 || x->dims[jx] != s->F.dims[d]) continue;
    if (d < s->r) rows = true;
    else cols = true;
  }
  kcg_ref off = rows ? (cols ? kcg_mul(s->k, s->i, s->C) : s->i) : kcg_i64(s->k, 0);
  return cols ? kcg_add(s->k, off, s->j) : off;
}

static kcg_ref eval(fuse_st *s, uint32_t v) {
  if (!member(s, v)) {
    uint32_t e = ext_index(s, v);
    if (s->r < 0) return s->ext_load[e];
    return kcg_load(s->k, s->ext_buf[e], row_offset(s, &s->g->values[v].type), KCG_NONE);
  }
  if (s->row[v] != KCG_NONE) return s->row[v];
  if (s->epoch[v] == s->cur) return s->memo[v];
  const kir_inst *in = &s->g->insts[s->g->values[v].def];
  kcg_ref a[3] = {0, 0, 0};
  for (uint32_t o = 0; o < in->nin && o < 3; o++)
    a[o] = eval(s, in->in[o]);
  s->memo[v] = element(s, in, a);
  s->epoch[v] = s->cur;
  return s->memo[v];
}

/* ---- elementwise groups ---- */

/* Whether external type x moves along axis d of F, and its stride there. */
static bool moves(kcg_kernel *k, const kir_type *x, const kir_type *t, int d, kcg_ref *stride) {
  int j = d - (t->rank - x->rank);
  if (j < 0 || (x->dims[j] == 1 && t->dims[d] != 1)) return false;
  kcg_ref st = kcg_i64(k, 1);
  for (int e = j + 1; e < x->rank; e++)
    st = kcg_mul(k, st, kcg_dim(k, x->dims[e]));
  *stride = st;
  return true;
}

static bool lower_elementwise_group(fuse_st *s, uint32_t y) {
  kcg_kernel *k = s->k;
  const kir_type *t = &s->F;
  int ng = 0;
  kcg_ref extent[KIR_MAX_RANK], stride[MAX_EXT][KIR_MAX_RANK], idx[KIR_MAX_RANK];
  unsigned prev = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d] == 1) continue;
    unsigned mask = 0;
    kcg_ref st[MAX_EXT];
    for (uint32_t e = 0; e < s->next; e++)
      if (moves(k, &s->g->values[s->ext_val[e]].type, t, d, &st[e])) mask |= 1u << e;
    kcg_ref n = kcg_dim(k, t->dims[d]);
    bool merge = ng && mask == prev;
    int gi = merge ? ng - 1 : ng++;
    extent[gi] = merge ? kcg_mul(k, extent[gi], n) : n;
    for (uint32_t e = 0; e < s->next; e++)
      stride[e][gi] = (mask >> e & 1) ? st[e] : kcg_i64(k, 0);
    prev = mask;
  }
  uint32_t parent = KCG_NONE;
  for (int gi = 0; gi < ng; gi++)
    parent = kcg_loop(k, parent, extent[gi], gi == 0, &idx[gi]);
  kcg_ref yoff = kcg_i64(k, 0);
  for (int gi = 0; gi < ng; gi++)
    yoff = kcg_add(k, kcg_mul(k, yoff, extent[gi]), idx[gi]);
  for (uint32_t e = 0; e < s->next; e++)
    s->ext_load[e] = kcg_load(k, s->ext_buf[e], kcg_offset(k, ng, idx, stride[e]), KCG_NONE);
  s->cur++;
  kcg_store(k, parent, y, yoff, eval(s, s->g->insts[s->root].out[0]));
  return true;
}

/* ---- groups with rows ---- */

/* The reduction's identity and combining op: its row of the op table (kir_op_desc.reduce). */
static kcg_ref reduce_init(kcg_kernel *k, uint16_t op, kir_dtype t) {
  const kir_op_desc *d = kir_op(op);
  return kir_dtype_is_float(t) ? kcg_const_f(k, t, kir_reduce_identity_f(d))
                               : kcg_const_i(k, t, kir_reduce_identity_i(d, t));
}

static uint16_t reduce_combine(uint16_t op) { return kir_op(op)->reduce.combine; }

/*
 * A reduction member: a loop over the row's columns folding into a local.
 * The LLVM renderer lets an accumulator update (l = l + x, max, min)
 * reassociate, so this loop vectorises like an unfused reduction's.
 */
static void lower_row_reduction(fuse_st *s, uint32_t row_loop, const kir_inst *in) {
  kcg_kernel *k = s->k;
  kir_dtype t = s->g->values[in->out[0]].type.dtype;
  kcg_ref acc;
  uint32_t l = kcg_new_local(k, t, &acc);
  kcg_assign(k, row_loop, l, reduce_init(k, in->op, t));
  uint32_t lj = kcg_loop(k, row_loop, s->C, false, &s->j);
  s->cur++;
  kcg_ref x = eval(s, in->in[0]);
  kcg_assign(k, lj, l, kcg_binary(k, reduce_combine(in->op), acc, x));
  if (in->in[0] == s->kept) kcg_store(k, lj, s->y, kcg_add(k, kcg_mul(k, s->i, s->C), s->j), x);
  s->j = KCG_NONE;
  if (in->op == KIR_OP_reduce_mean)
    kcg_assign(k, row_loop, l, kcg_binary(k, KIR_OP_div, acc, kcg_cast(k, t, s->C)));
  s->row[in->out[0]] = kcg_local(k, l);
}

/* Whether the expression of full value v reaches value `target` through full members. */
static bool reaches(const fuse_st *s, uint32_t v, uint32_t target, int depth) {
  if (v == target) return true;
  if (!member(s, v) || depth > 64) return false;
  const kir_inst *in = &s->g->insts[s->g->values[v].def];
  if (is_reduce_op(in->op)) return false; /* a row value: a local */
  for (uint32_t o = 0; o < in->nin; o++)
    if (reaches(s, in->in[o], target, depth + 1)) return true;
  return false;
}

/*
 * The value the last reduction folds, if the root's final pass needs it
 * too and it has the result's dtype: that pass stores it into the result
 * row, still in cache, and the final pass reads it back instead of
 * computing it again — softmax's exp is computed once per element, the
 * final pass only divides. Bitwise the same as recomputing it.
 */
static uint32_t value_to_keep(const fuse_st *s) {
  const kir_inst *last = NULL;
  for (uint32_t i = 0; i <= s->root; i++)
    if (s->f->group[i] == s->root && is_reduce_op(s->g->insts[i].op)) last = &s->g->insts[i];
  uint32_t rv = s->g->insts[s->root].out[0];
  if (!last || is_reduce_op(s->g->insts[s->root].op)) return UINT32_MAX;
  uint32_t v = last->in[0];
  if (!member(s, v) || s->g->values[v].type.dtype != s->g->values[rv].type.dtype ||
      v == rv || !reaches(s, rv, v, 0))
    return UINT32_MAX;
  return v;
}

static bool lower_row_group(fuse_st *s, uint32_t y) {
  kcg_kernel *k = s->k;
  s->y = y;
  s->kept = value_to_keep(s);
  kcg_ref rows = kcg_dims_prod(k, &s->F, 0, s->r);
  s->C = kcg_dims_prod(k, &s->F, s->r, s->F.rank);
  s->j = KCG_NONE;
  uint32_t lr = kcg_loop(k, KCG_NONE, rows, true, &s->i);
  for (uint32_t i = 0; i <= s->root; i++) {
    if (s->f->group[i] != s->root) continue;
    const kir_inst *in = &s->g->insts[i];
    const kir_type *t = &s->g->values[in->out[0]].type;
    if (is_reduce_op(in->op)) {
      lower_row_reduction(s, lr, in);
      continue;
    }
    bool full = t->rank == s->F.rank;
    for (int d = s->r; full && d < t->rank; d++)
      full = t->dims[d] == s->F.dims[d];
    if (full) continue; /* computed where it is used */
    /* A row value: computed once per row into a local. */
    s->cur++;
    kcg_ref v = eval(s, in->out[0]), read;
    uint32_t l = kcg_new_local(k, t->dtype, &read);
    kcg_assign(k, lr, l, v);
    s->row[in->out[0]] = read;
  }
  uint32_t rv = s->g->insts[s->root].out[0];
  if (s->row[rv] != KCG_NONE) {
    kcg_store(k, lr, y, s->i, s->row[rv]);
    return true;
  }
  uint32_t lj = kcg_loop(k, lr, s->C, false, &s->j);
  s->cur++;
  kcg_ref at = kcg_add(k, kcg_mul(k, s->i, s->C), s->j);
  if (s->kept != UINT32_MAX) {
    s->memo[s->kept] = kcg_load(k, y, at, KCG_NONE);
    s->epoch[s->kept] = s->cur;
  }
  kcg_store(k, lj, y, at, eval(s, rv));
  return true;
}

bool kcg_lower_fused(kcg_lower_ctx *lc, const kp_fusion *f, const uint32_t *map) {
  if (kcg_lower_epilogue(lc, f)) return true;
  const kir_graph *g = lc->g;
  fuse_st s = {.lc = lc, .g = g, .f = f, .root = (uint32_t)(lc->inst - g->insts),
               .kept = UINT32_MAX};
  s.r = kp_fusion_group_shape(g, f, s.root, &s.F);
  s.memo = malloc((g->nvalues + 1u) * sizeof *s.memo);
  s.row = malloc((g->nvalues + 1u) * sizeof *s.row);
  s.epoch = calloc(g->nvalues + 1u, sizeof *s.epoch);
  bool ok = s.memo && s.row && s.epoch;
  if (!ok) kcg_lower_fail(lc, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t v = 0; ok && v < g->nvalues; v++)
    s.row[v] = KCG_NONE;
  if (ok) ok = (s.k = kcg_lower_kernel(lc, "fused")) != NULL;
  if (ok) ok = collect_externals(&s, map);
  if (ok) {
    uint32_t y = kcg_lower_arg(lc, lc->out[0], true);
    ok = s.r < 0 ? lower_elementwise_group(&s, y) : lower_row_group(&s, y);
  }
  free(s.memo);
  free(s.row);
  free(s.epoch);
  return ok && kcg_lower_step(lc);
}
