/*
 * fusion.c — grouping elementwise chains and tail reductions into kernels.
 *
 * Unfused, every instruction is a kernel that reads its operands from
 * memory and writes its result back: gelu(x * a + b) makes four passes over
 * 16M floats where one would do, a softmax five. This pass decides which
 * instructions share a kernel; codegen/fuse.c builds it.
 *
 * Groups grow backwards from a root. Walking the graph from its end, an
 * instruction that is not yet in a group and can be fused starts one; the
 * group then takes in the producer of any operand whose every use is
 * inside the group (and that is not a graph result), as long as the
 * producer fits the group's iteration space. Because only the root's result
 * leaves the group and every other member feeds it, lowering the whole
 * group at the root's place in the program reads nothing before it is
 * written.
 *
 * What fits. F is the root's type (a reduction root's operand type).
 *  - Elementwise ops (unary, binary, compare, logical, select, cast) and
 *    broadcast, whose result is F: a "full" value, one per element of F.
 *  - Once the group has a reduction over a tail [r, rank) of F with
 *    keepdims — the form softmax, log_softmax and the norms decompose to —
 *    values of F's type with the tail axes 1 are "row" values, one per row;
 *    every reduction of the group must fold the same tail of a full value.
 * Operands from outside the group (externals) are read in place with
 * broadcasting. In a group with rows, an external must be full, per row,
 * per column (the tail axes only, like a norm's gain) or a scalar, so that
 * its offset is i * C + j, i, j or 0 for row i and column j.
 *
 * The kernel of a group with rows runs one parallel loop over rows and, in
 * each row, one loop over the tail per reduction plus one for a full root:
 * a softmax reads its row three times from cache instead of making five
 * passes over memory. Full values are recomputed in every loop that needs
 * them (exp in softmax is computed for the sum and again for the quotient).
 * The recompute budget bounds that: a full value recomputed in n loops
 * costs (n - 1) times its weight (1 for cheap ops, 4 for div and sqrt, 8
 * for transcendental functions); the group is kept only if the total is at
 * most 8 per full intermediate it keeps out of memory (each one saved a
 * store and a load of the whole tensor). Elementwise groups recompute
 * nothing: a value used twice is one expression of the kernel.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fusion.h"
#include "ir/kir.h"
#include "passes.h"
#include "canonicalize.h"
#include "mixed_precision.h"

enum { MAX_MEMBERS = 64, MAX_EXTERNALS = 16 };

typedef enum { CLS_NONE, CLS_FULL, CLS_ROW } val_class;

static bool is_reduction(uint16_t op) { return kir_op_is_fold(op); }

static bool kernel_dtype(kir_dtype t) { return t != KILN_F16 && t != KILN_BF16; }

static bool fusible(const kir_graph *g, const kir_inst *in) {
  if (in->nout != 1) return false;
  /* Elementwise maps (codegen/fuse.c builds the same element as their own lowering;
   * test_fusion.c checks the op table against the lowerings) and reductions. */
  if (!kir_op_is_map(in->op) && !is_reduction(in->op)) return false;
  if (!kernel_dtype(g->values[in->out[0]].type.dtype)) return false;
  for (uint32_t i = 0; i < in->nin; i++)
    if (!kernel_dtype(g->values[in->in[i]].type.dtype)) return false;
  return true;
}

static bool same_dims(const kir_type *a, const kir_type *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The split of a reduction over a keepdims tail of its operand, or -1. */
static int tail_split(const kir_graph *g, const kir_inst *in) {
  if (!is_reduction(in->op) || !in->attrs[1].i) return -1;
  const kir_type *x = &g->values[in->in[0]].type;
  uint32_t n = in->attrs[0].n;
  if (n == 0 || n > x->rank) return -1;
  int r = x->rank - (int)n;
  bool all_one = true;
  for (uint32_t a = 0; a < n; a++) {
    if (in->attrs[0].ints[a] != r + (int)a) return -1; /* axes are sorted and unique */
    all_one &= x->dims[r + (int)a] == 1;
  }
  return all_one ? -1 : r; /* folding size-1 axes makes rows equal to the full values */
}

/* The group being grown. */
typedef struct {
  const kir_graph *g;
  kir_type F;
  int r;
  uint32_t members[MAX_MEMBERS];
  uint32_t n;
  const uint32_t *nuses; /* per value: operand uses, UINT32_MAX for graph results */
  uint32_t *mark;        /* per instruction: the root of the group being grown, if a member */
  uint32_t root;
  kp_fusion *plan;
} grower;

static bool is_member(const grower *gr, int32_t def) {
  return def >= 0 && gr->mark[def] == gr->root;
}

static val_class classify(const grower *gr, const kir_type *t) {
  if (same_dims(t, &gr->F)) return CLS_FULL;
  if (gr->r < 0 || t->rank != gr->F.rank) return CLS_NONE;
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] != (d < gr->r ? gr->F.dims[d] : 1)) return CLS_NONE;
  return CLS_ROW;
}

/*
 * Whether external operand type x reads at one of the offsets a group with
 * rows can form: each of the row part and the tail either moves with F or
 * is broadcast as a whole.
 */
static bool external_ok(const grower *gr, const kir_type *x) {
  if (gr->r < 0) return true; /* elementwise groups broadcast along any axis */
  const kir_type *F = &gr->F;
  if (x->rank > F->rank) return false;
  int moves[2] = {0, 0}, bcast[2] = {0, 0};
  for (int d = 0; d < F->rank; d++) {
    if (F->dims[d] == 1) continue;
    int j = d - (F->rank - x->rank);
    bool mv = j >= 0 && x->dims[j] == F->dims[d];
    if (j >= 0 && !mv && x->dims[j] != 1) return false;
    (mv ? moves : bcast)[d >= gr->r]++;
  }
  return !(moves[0] && bcast[0]) && !(moves[1] && bcast[1]);
}

/* Every member fits the space and every external can be read. */
static bool group_valid(const grower *gr) {
  uint32_t next = 0, ext[MAX_EXTERNALS * 2];
  for (uint32_t m = 0; m < gr->n; m++) {
    const kir_inst *in = &gr->g->insts[gr->members[m]];
    val_class c = classify(gr, &gr->g->values[in->out[0]].type);
    if (c == CLS_NONE) return false;
    if (is_reduction(in->op)) {
      if (tail_split(gr->g, in) != gr->r || c != CLS_ROW ||
          classify(gr, &gr->g->values[in->in[0]].type) != CLS_FULL)
        return false;
    }
    for (uint32_t i = 0; i < in->nin; i++) {
      uint32_t v = in->in[i];
      if (is_member(gr, gr->g->values[v].def)) continue;
      if (!external_ok(gr, &gr->g->values[v].type)) return false;
      bool seen = false;
      for (uint32_t e = 0; e < next; e++)
        seen |= ext[e] == v;
      if (!seen && next == MAX_EXTERNALS) return false;
      if (!seen) ext[next++] = v;
    }
  }
  return true;
}

/* Uses of value v by members of the group. */
static uint32_t uses_inside(const grower *gr, uint32_t v) {
  uint32_t n = 0;
  for (uint32_t m = 0; m < gr->n; m++) {
    const kir_inst *in = &gr->g->insts[gr->members[m]];
    for (uint32_t i = 0; i < in->nin; i++)
      n += in->in[i] == v;
  }
  return n;
}

/*
 * The split a row value of type t would give F: t equals F up to axis r and
 * is 1 from there, while F is not; -1 if t is no such value.
 */
static int row_split(const kir_type *F, const kir_type *t) {
  if (t->rank != F->rank) return -1;
  int r = 0;
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] != 1) r = d + 1;
  bool tail = false;
  for (int d = 0; d < t->rank; d++) {
    if (d < r && t->dims[d] != F->dims[d]) return -1;
    tail |= d >= r && F->dims[d] != 1;
  }
  return tail ? r : -1;
}

/*
 * Tries to take in instruction p; keeps the group unchanged when it does
 * not fit. The first reduction or row value met sets the split; a reduction
 * whose result has the type of F (the group so far computed rows) makes its
 * operand the new F.
 */
static bool try_add(grower *gr, uint32_t p) {
  if (gr->n == MAX_MEMBERS) return false;
  const kir_inst *in = &gr->g->insts[p];
  const kir_type *t = &gr->g->values[in->out[0]].type;
  int old_r = gr->r;
  kir_type old_F = gr->F;
  if (is_reduction(in->op)) {
    int r = tail_split(gr->g, in);
    if (r < 0 || (gr->r >= 0 && gr->r != r)) return false;
    if (gr->r < 0 && same_dims(t, &gr->F)) gr->F = gr->g->values[in->in[0]].type;
    gr->r = r;
  } else if (gr->r < 0 && !same_dims(t, &gr->F)) {
    gr->r = row_split(&gr->F, t);
    if (gr->r < 0) return false;
  }
  gr->members[gr->n++] = p;
  gr->mark[p] = gr->root;
  if (group_valid(gr)) return true;
  gr->mark[p] = KP_NO_GROUP;
  gr->n--;
  gr->r = old_r;
  gr->F = old_F;
  return false;
}

/* ---- the recompute budget ---- */

static int op_weight(uint16_t op) {
  const kir_expansion *e = kir_op_expansion(op);
  if (e) { /* a derived op weighs what its formula does */
    int w = 0;
    for (int i = 0; i <= e->root; i++)
      if (e->nodes[i].kind == KIR_EXPAND_OP) w += op_weight(e->nodes[i].op);
    return w;
  }
  switch (op) {
  case KIR_OP_exp: case KIR_OP_expm1: case KIR_OP_log: case KIR_OP_log1p: case KIR_OP_sin:
  case KIR_OP_cos: case KIR_OP_tanh: case KIR_OP_sigmoid: case KIR_OP_erf: case KIR_OP_pow:
    return 8;
  case KIR_OP_div: case KIR_OP_sqrt: case KIR_OP_rsqrt: case KIR_OP_reciprocal: return 4;
  default: return 1;
  }
}

/* Marks in `seen` (bit `pass`) every full member the expression of value v reaches. */
static void reach(const grower *gr, uint32_t v, uint32_t pass, uint64_t *seen) {
  int32_t def = gr->g->values[v].def;
  if (!is_member(gr, def)) return;
  const kir_inst *in = &gr->g->insts[def];
  if (classify(gr, &gr->g->values[v].type) != CLS_FULL) return; /* rows are locals */
  uint32_t m = 0;
  while (gr->members[m] != (uint32_t)def) m++;
  if (seen[m] >> pass & 1) return;
  seen[m] |= 1ull << pass;
  for (uint32_t i = 0; i < in->nin; i++)
    reach(gr, in->in[i], pass, seen);
}

static bool within_budget(const grower *gr) {
  if (gr->r < 0) return true;
  uint64_t seen[MAX_MEMBERS] = {0};
  uint32_t pass = 0;
  for (uint32_t m = 0; m < gr->n && pass < 63; m++) {
    const kir_inst *in = &gr->g->insts[gr->members[m]];
    if (is_reduction(in->op)) reach(gr, in->in[0], pass++, seen);
  }
  reach(gr, gr->g->insts[gr->root].out[0], pass, seen);
  int64_t cost = 0, saved = 0;
  for (uint32_t m = 0; m < gr->n; m++) {
    const kir_inst *in = &gr->g->insts[gr->members[m]];
    if (classify(gr, &gr->g->values[in->out[0]].type) != CLS_FULL) continue;
    int loops = __builtin_popcountll(seen[m]);
    if (loops > 1) cost += (int64_t)(loops - 1) * op_weight(in->op);
    if (gr->members[m] != gr->root) saved += 8;
  }
  return cost <= saved;
}

/* ---- the plan ---- */

static void grow(grower *gr) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (uint32_t m = 0; m < gr->n; m++) {
      const kir_inst *in = &gr->g->insts[gr->members[m]];
      for (uint32_t i = 0; i < in->nin; i++) {
        uint32_t v = in->in[i];
        int32_t p = gr->g->values[v].def;
        if (p < 0 || gr->mark[p] != KP_NO_GROUP || !fusible(gr->g, &gr->g->insts[p])) continue;
        if (gr->nuses[v] != uses_inside(gr, v)) continue;
        if (try_add(gr, (uint32_t)p)) changed = true;
      }
    }
  }
}

static bool start_group(grower *gr, uint32_t i) {
  const kir_inst *in = &gr->g->insts[i];
  gr->root = i;
  gr->n = 0;
  gr->r = tail_split(gr->g, in);
  if (is_reduction(in->op) && gr->r < 0) return false;
  gr->F = gr->g->values[gr->r >= 0 ? in->in[0] : in->out[0]].type;
  gr->members[gr->n++] = i;
  gr->mark[i] = i;
  if (!group_valid(gr)) {
    gr->mark[i] = KP_NO_GROUP;
    return false;
  }
  return true;
}

bool kp_fusion_plan(const kir_graph *g, kp_fusion *out) {
  memset(out, 0, sizeof *out);
  uint32_t *nuses = calloc(g->nvalues + 1u, sizeof *nuses);
  out->group = malloc((g->ninsts + 1u) * sizeof *out->group);
  out->split = malloc((g->ninsts + 1u) * sizeof *out->split);
  out->full = malloc((g->ninsts + 1u) * sizeof *out->full);
  if (!nuses || !out->group || !out->split || !out->full) {
    free(nuses);
    kp_fusion_free(out);
    return false;
  }
  out->ninsts = g->ninsts;
  for (uint32_t i = 0; i < g->ninsts; i++) {
    out->group[i] = KP_NO_GROUP;
    for (uint32_t j = 0; j < g->insts[i].nin; j++)
      if (nuses[g->insts[i].in[j]] != UINT32_MAX) nuses[g->insts[i].in[j]]++;
  }
  for (uint32_t r = 0; r < g->nresults; r++)
    nuses[g->results[r]] = UINT32_MAX; /* a result must be in memory */
  grower gr = {.g = g, .nuses = nuses, .mark = out->group};
  for (uint32_t i = g->ninsts; i-- > 0;) {
    if (out->group[i] != KP_NO_GROUP || !fusible(g, &g->insts[i]) || !start_group(&gr, i))
      continue;
    grow(&gr);
    if (gr.n >= 2 && within_budget(&gr)) {
      out->ngroups++;
      out->split[i] = gr.r;
      out->full[i] = gr.F;
      continue;
    }
    for (uint32_t m = 0; m < gr.n; m++) /* alone, or too much recomputation: unfused */
      out->group[gr.members[m]] = KP_NO_GROUP;
  }
  free(nuses);
  return true;
}

void kp_fusion_free(kp_fusion *f) {
  free(f->group);
  free(f->split);
  free(f->full);
  f->group = NULL;
  f->split = NULL;
  f->full = NULL;
  f->ninsts = f->ngroups = 0;
}

int kp_fusion_group_shape(const kir_graph *g, const kp_fusion *f, uint32_t root, kir_type *full) {
  (void)g;
  *full = f->full[root];
  return f->split[root];
}

static void print_value(const kir_graph *g, uint32_t v, FILE *out) {
  if (g->values[v].name) fprintf(out, "%%%s", g->values[v].name);
  else fprintf(out, "%%%u", v);
}

void kp_fusion_print(const kir_graph *g, const kp_fusion *f, FILE *out) {
  uint32_t n = 0;
  for (uint32_t root = 0; root < f->ninsts; root++) {
    if (f->group[root] != root) continue;
    kir_type full;
    int r = kp_fusion_group_shape(g, f, root, &full);
    fprintf(out, "// fused group %u (%s):", n++, r < 0 ? "elementwise" : "rows");
    for (uint32_t i = 0; i <= root; i++)
      if (f->group[i] == root) fprintf(out, " %s", kir_op(g->insts[i].op)->name);
    fprintf(out, " -> ");
    print_value(g, g->insts[root].out[0], out);
    fprintf(out, "\n");
  }
}
