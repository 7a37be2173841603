/*
 * fuse_epilogue.c — a fusion group that only finishes a convolution's or a
 * matrix product's result becomes that step's epilogue (program.h,
 * kcg_epilogue) instead of a kernel of its own.
 *
 * A convolution exported by PyTorch is conv2d, then add of its bias
 * [O, 1, 1], then for ReLU max(·, 0) and for ReLU6 min(·, 6) as well: one
 * elementwise group (passes/fusion.c) that reads the whole result back from
 * memory and writes it again. On the CPU executor (kcg_lower_options.
 * runtime_epilogue) such a group, or such an op alone (a bias add with no
 * activation after it), is taken into the CONV or GEMM step that computed
 * its operand when
 *  - the group is add? max? min? (at least one, in that order), each member
 *    reading the one before, the first reading the step's result v, an f32
 *    value of the group's shape that nothing else reads;
 *  - add's other operand is a CONST or INPUT f32 buffer that moves along one
 *    run of the result's axes (per channel, per row, per column, or a
 *    scalar), the clamps' are f32 constant scalars other than NaN;
 *  - v's step is the last one that uses v's buffer, an f32 GEMM or a blocked
 *    or depthwise CONV step without an epilogue.
 * The step then writes the group's result buffer, and v's buffer is left
 * unused (the memory plan gives it no bytes). Elements are computed as the
 * group's kernel computes them: one f32 add, then exact max and min.
 */
#include <string.h>

#include "fuse.h"

enum { MAX_EPI = 3 };

/* The value of a constant f32 scalar operand (any rank, one element, not NaN). */
static bool const_scalar(const kcg_lower_ctx *lc, uint32_t v, float *out) {
  uint32_t b = lc->map[v];
  if (b == UINT32_MAX || b >= lc->prog->nbufs) return false;
  const kcg_pbuf *pb = &lc->prog->bufs[b];
  if (pb->kind != KCG_PBUF_CONST || !pb->data || pb->type.dtype != KILN_F32) return false;
  for (int d = 0; d < pb->type.rank; d++)
    if (pb->type.dims[d] != 1) return false;
  float x;
  memcpy(&x, pb->data, sizeof x);
  *out = x;
  return x == x;
}

/*
 * Whether v (a bias against the result's type F) reads at flat / inner % count. A bias that is
 * a reshape of a CONST or INPUT buffer (a layer's b[O] made [O, 1, 1]) is read in that buffer:
 * a reshape keeps the order of the elements, and its copy is then read by nothing.
 */
static bool bias_layout(const kcg_lower_ctx *lc, uint32_t v, const kir_type *F, kcg_epilogue *e) {
  uint32_t b = lc->map[v];
  if (b == UINT32_MAX || b >= lc->prog->nbufs) return false;
  const kir_type *t = &lc->prog->bufs[b].type; /* v's type, the one that broadcasts against F */
  int32_t def = lc->g->values[v].def;
  if (lc->prog->bufs[b].kind == KCG_PBUF_TEMP && def >= 0 &&
      lc->g->insts[def].op == KIR_OP_reshape && lc->map[lc->g->insts[def].in[0]] < lc->prog->nbufs)
    b = lc->map[lc->g->insts[def].in[0]];
  const kcg_pbuf *pb = &lc->prog->bufs[b];
  if ((pb->kind != KCG_PBUF_CONST && pb->kind != KCG_PBUF_INPUT) || t->dtype != KILN_F32 ||
      t->rank > F->rank || (pb->kind == KCG_PBUF_CONST && !pb->data))
    return false;
  int a0 = -1, a1 = -1; /* the run of F's axes along which the bias moves */
  for (int d = 0; d < F->rank; d++) {
    int j = d - (F->rank - t->rank);
    kir_dim td = j >= 0 ? t->dims[j] : 1;
    if (td == 1) continue;
    if (td != F->dims[d] || KIR_DIM_IS_SYM(td) || (a1 >= 0 && a1 != d)) return false;
    if (a0 < 0) a0 = d;
    a1 = d + 1;
  }
  int64_t inner = 1, count = 1;
  for (int d = a0 < 0 ? F->rank : a0; d < F->rank; d++) {
    if (KIR_DIM_IS_SYM(F->dims[d])) return false;
    if (d < a1)
      count *= F->dims[d];
    else
      inner *= F->dims[d];
  }
  if (a0 < 0) inner = 1;
  e->has_bias = true, e->bias = b, e->inner = inner, e->count = count;
  return true;
}

/* How many operands of the graph and results read v. */
static uint32_t uses(const kir_graph *g, uint32_t v) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < g->ninsts; i++)
    for (uint32_t o = 0; o < g->insts[i].nin; o++)
      n += g->insts[i].in[o] == v;
  for (uint32_t r = 0; r < g->nresults; r++)
    n += g->results[r] == v;
  return n;
}

/* The step that computes buffer b and is the last to use it, if it can take an epilogue. */
static kcg_step *producer(kcg_program *p, uint32_t b) {
  for (uint32_t s = p->nsteps; s-- > 0;) {
    kcg_step *st = &p->steps[s];
    bool out = st->nargs > 2 && st->args[2] == b;
    for (uint32_t a = 0; a < st->nargs; a++)
      if (st->args[a] == b && (a != 2 || !out)) return NULL; /* read, or written elsewhere */
    if (!out) continue;
    bool conv = st->kind == KCG_STEP_CONV &&
                (kcg_conv_dense(st->conv.mode) || st->conv.mode == KCG_CONV_DEPTHWISE);
    bool gemm = st->kind == KCG_STEP_GEMM && st->gemm.dtype == KILN_F32;
    return (conv || gemm) && !st->epi.on ? st : NULL;
  }
  return NULL;
}

bool kcg_lower_epilogue(kcg_lower_ctx *lc, const kp_fusion *f) {
  const kir_graph *g = lc->g;
  uint32_t root = (uint32_t)(lc->inst - g->insts), mem[MAX_EPI], n = 0;
  kir_type F = g->values[lc->inst->out[0]].type;
  if (!kcg_lower_opts(lc)->runtime_epilogue || lc->inst->nout != 1 ||
      (f && kp_fusion_group_shape(g, f, root, &F) >= 0))
    return false;
  for (uint32_t i = 0; i <= root; i++)
    if (f ? f->group[i] == root : i == root) {
      if (n == MAX_EPI) return false;
      mem[n++] = i;
    }
  kcg_epilogue e = {.on = true, .inner = 1, .count = 1};
  static const uint16_t order[MAX_EPI] = {KIR_OP_add, KIR_OP_max, KIR_OP_min};
  uint32_t v = UINT32_MAX, prev = UINT32_MAX;
  int stage = 0;
  for (uint32_t m = 0; m < n; m++) {
    const kir_inst *in = &g->insts[mem[m]];
    while (stage < MAX_EPI && order[stage] != in->op)
      stage++;
    if (stage == MAX_EPI || in->nin != 2 || g->values[in->out[0]].type.dtype != KILN_F32)
      return false;
    /* the operand that carries the result on (the step's, or the member before), and the other */
    int on = m ? (in->in[0] == prev ? 0 : in->in[1] == prev ? 1 : -1) : -1;
    if (!m)
      for (int o = 0; o < 2 && on < 0; o++) {
        const kir_type *t = &g->values[in->in[o]].type;
        bool same = t->rank == F.rank && t->dtype == KILN_F32;
        for (int d = 0; same && d < t->rank; d++)
          same = t->dims[d] == F.dims[d];
        if (same && lc->map[in->in[o]] != UINT32_MAX && uses(g, in->in[o]) == 1) on = o;
      }
    if (on < 0) return false;
    uint32_t other = in->in[1 - on];
    if (!m) v = in->in[on];
    bool ok = stage == 0   ? bias_layout(lc, other, &F, &e)
              : stage == 1 ? (e.has_lo = const_scalar(lc, other, &e.lo))
                           : (e.has_hi = const_scalar(lc, other, &e.hi));
    if (!ok) return false;
    prev = in->out[0];
    stage++;
  }
  if (v == UINT32_MAX || lc->prog->bufs[lc->map[v]].kind != KCG_PBUF_TEMP) return false;
  kcg_step *st = producer(lc->prog, lc->map[v]);
  if (!st) return false;
  st->epi = e;
  st->args[2] = lc->out[0];
  return true;
}
