/*
 * attention_tiling.c — replaces attention by flash_attention, whose kernel
 * walks the keys tile by tile with an online softmax and never holds the
 * T x S score matrix (ir/flash_attention.c, runtime/exec/rt_attention.c).
 *
 * What it finds:
 *   - the compound `attention` op that the layers emit (causal or not, with
 *     or without an additive mask, K/V with fewer heads than Q, T != S);
 *   - the written-out form softmax(q k^T * c + mask) v, as an imported model
 *     or a user's lambda spells it: matmul(q, k, transpose_b) [mul or div by
 *     a scalar constant] [add a mask] softmax(axis -1) matmul(., v), on
 *     rank-4 [B, H, T, D] operands with the same heads, each intermediate
 *     used only by the next step (otherwise the scores are needed anyway).
 * Either becomes flash_attention(q, k, v[, mask]); its first result takes
 * the place of the attention's. Only f32 and f64 are rewritten: those are
 * the dtypes of the CPU kernel; the others stay for kp_legalize to
 * decompose.
 *
 * The gradient follows: flash_attention's VJP is flash_attention_grad,
 * which recomputes the scores from the saved log-sum-exp, so a training
 * step after this pass is linear in T too.
 *
 * The pipelines (passes/pipeline.c) run it just before kp_legalize unless
 * kiln_options.attention_tiling is off (KILN_ATTENTION_TILING=0), which
 * keeps the plain attention for measuring the difference
 * (bench/attention.sh).
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static bool tiled_dtype(kir_dtype t) { return t == KILN_F32 || t == KILN_F64; }

/* ---- the written-out form ---- */

enum { ACT_COPY, ACT_EMIT, ACT_DROP, ACT_FINAL };

/* One matched softmax(q k^T * c + mask) v. */
typedef struct {
  uint32_t src[4], nsrc; /* q, k, v[, mask] as source values */
  double scale;
  uint32_t out, lse;     /* flash_attention's results in the new graph */
} chain;

/* What the rewrite knows of one source graph. */
typedef struct {
  const kir_graph *g;
  uint32_t *uses;  /* uses of each value (operands and results) */
  int32_t *def;    /* defining instruction of each value, or -1 */
  uint32_t *map;   /* new value of each source value, once copied */
  uint8_t *act;    /* per instruction: ACT_* */
  uint32_t *chain_of; /* per instruction: its chain (ACT_EMIT, DROP, FINAL) */
  chain *chains;
  uint32_t nchains;
} graph_info;

typedef struct {
  graph_info *info; /* the module's bodies, then its entry */
  uint32_t ninfo;
} tiling_state;

/* The single-use instruction defining v, if its op is `op`. */
static const kir_inst *def_of(const graph_info *u, uint32_t v, uint16_t op) {
  if (u->uses[v] != 1 || u->def[v] < 0) return NULL;
  const kir_inst *in = &u->g->insts[u->def[v]];
  return in->op == op ? in : NULL;
}

/* A constant holding one value (rank 0, or splat to a shape of ones): its value into *c. */
static bool scalar_constant(const graph_info *u, uint32_t v, double *c) {
  if (u->def[v] < 0 || kir_type_numel(&u->g->values[v].type) != 1) return false;
  const kir_inst *in = &u->g->insts[u->def[v]];
  if (in->op != KIR_OP_constant || in->attrs[2].n != 1) return false;
  *c = in->attrs[2].floats[0];
  return true;
}

/* Instruction index of inst in u's graph. */
static uint32_t index_of(const graph_info *u, const kir_inst *inst) {
  return (uint32_t)(inst - u->g->insts);
}

/* v is available before instruction `at`: a parameter or defined earlier. */
static bool defined_before(const graph_info *u, uint32_t v, uint32_t at) {
  return u->def[v] < (int32_t)at;
}

/*
 * `inst` is matmul(p, v). Walks back p = softmax(x, -1), x = s [+ mask],
 * s = qk [* c | / c], qk = matmul(q, k, transpose_b); on a match marks the
 * chain's instructions in u and returns true.
 */
static bool match_scores(graph_info *u, const kir_inst *inst, const kir_inst *sm,
                         const kir_inst *add, uint32_t x, uint32_t mask) {
  const kir_graph *g = u->g;
  const kir_inst *scl = NULL, *qk;
  double scale = 1, c;
  const kir_inst *mul = def_of(u, x, KIR_OP_mul), *div = def_of(u, x, KIR_OP_div);
  if (mul && scalar_constant(u, mul->in[1], &c)) x = mul->in[0], scale = c, scl = mul;
  else if (mul && scalar_constant(u, mul->in[0], &c)) x = mul->in[1], scale = c, scl = mul;
  else if (div && scalar_constant(u, div->in[1], &c)) x = div->in[0], scale = 1 / c, scl = div;
  if (!(scale > 0) || !(qk = def_of(u, x, KIR_OP_matmul))) return false;
  if (qk->attrs[0].i || !qk->attrs[1].i) return false;
  const kir_type *q = &g->values[qk->in[0]].type, *k = &g->values[qk->in[1]].type,
                 *v = &g->values[inst->in[1]].type, *s = &g->values[x].type;
  if (q->rank != 4 || k->rank != 4 || v->rank != 4 || !tiled_dtype(q->dtype)) return false;
  for (int i = 0; i < 2; i++) /* the same batch and heads: no matmul broadcasting */
    if (q->dims[i] != k->dims[i] || q->dims[i] != v->dims[i]) return false;
  if (k->dims[2] != v->dims[2]) return false;
  if (mask != KILN_NO_VALUE) {
    const kir_type *m = &g->values[mask].type;
    if (m->rank > 4 || m->dtype != q->dtype) return false;
    for (int i = 0; i < m->rank; i++) /* broadcasts to the scores without widening them */
      if (m->dims[i] != 1 && m->dims[i] != s->dims[4 - m->rank + i]) return false;
  }
  /* flash_attention is emitted where q k^T was: v and the mask must exist by then. */
  uint32_t at = index_of(u, qk);
  if (!defined_before(u, inst->in[1], at) ||
      (mask != KILN_NO_VALUE && !defined_before(u, mask, at)))
    return false;
  chain *ch = &u->chains[u->nchains];
  *ch = (chain){.src = {qk->in[0], qk->in[1], inst->in[1], mask},
                .nsrc = mask == KILN_NO_VALUE ? 3 : 4, .scale = scale};
  const kir_inst *drop[3] = {scl, add, sm};
  u->act[at] = ACT_EMIT;
  u->chain_of[at] = u->nchains;
  for (int i = 0; i < 3; i++)
    if (drop[i]) {
      u->act[index_of(u, drop[i])] = ACT_DROP;
      u->chain_of[index_of(u, drop[i])] = u->nchains;
    }
  u->act[index_of(u, inst)] = ACT_FINAL;
  u->chain_of[index_of(u, inst)] = u->nchains++;
  return true;
}

/*
 * `inst` is matmul(p, v). Walks back p = softmax(x, -1), x = s [+ mask]
 * (the mask on either side), s = qk [* c | / c], qk = matmul(q, k,
 * transpose_b); on a match marks the chain's instructions in u.
 */
static bool match_written(graph_info *u, const kir_inst *inst) {
  if (inst->attrs[0].i || inst->attrs[1].i) return false; /* p v, untransposed */
  const kir_inst *sm = def_of(u, inst->in[0], KIR_OP_softmax), *add;
  if (!sm || (sm->attrs[0].i != -1 && sm->attrs[0].i != 3)) return false;
  if (!(add = def_of(u, sm->in[0], KIR_OP_add)))
    return match_scores(u, inst, sm, NULL, sm->in[0], KILN_NO_VALUE);
  return match_scores(u, inst, sm, add, add->in[0], add->in[1]) ||
         match_scores(u, inst, sm, add, add->in[1], add->in[0]);
}

static bool build_info(graph_info *u, const kir_graph *g) {
  uint32_t nv = g->nvalues + 1u, ni = g->ninsts + 1u;
  *u = (graph_info){.g = g};
  u->uses = calloc(nv, sizeof *u->uses);
  u->def = malloc(nv * sizeof *u->def);
  u->map = malloc(nv * sizeof *u->map);
  u->act = calloc(ni, sizeof *u->act);
  u->chain_of = calloc(ni, sizeof *u->chain_of);
  u->chains = calloc(ni, sizeof *u->chains);
  if (!u->uses || !u->def || !u->map || !u->act || !u->chain_of || !u->chains) return false;
  for (uint32_t v = 0; v < g->nvalues; v++) u->def[v] = -1, u->map[v] = KILN_NO_VALUE;
  for (uint32_t i = 0; i < g->ninsts; i++) {
    const kir_inst *in = &g->insts[i];
    for (uint32_t k = 0; k < in->nin; k++) u->uses[in->in[k]]++;
    for (uint32_t k = 0; k < in->nout; k++) u->def[in->out[k]] = (int32_t)i;
  }
  for (uint32_t r = 0; r < g->nresults; r++) u->uses[g->results[r]]++;
  for (uint32_t i = 0; i < g->ninsts; i++)
    if (g->insts[i].op == KIR_OP_matmul && u->act[i] == ACT_COPY) match_written(u, &g->insts[i]);
  return true;
}

static void free_info(graph_info *u) {
  free(u->uses), free(u->def), free(u->map), free(u->act), free(u->chain_of), free(u->chains);
}

/* ---- the rewrite ---- */

/* The source graph holding inst. */
static graph_info *info_of(tiling_state *ts, const kir_inst *inst) {
  for (uint32_t i = 0; i < ts->ninfo; i++) {
    const kir_graph *g = ts->info[i].g;
    if (inst >= g->insts && inst < g->insts + g->ninsts) return &ts->info[i];
  }
  return NULL;
}

/* The new value of source value v: mapped when copied, or a parameter of ng. */
static uint32_t new_value(const graph_info *u, kir_graph *ng, uint32_t v) {
  int32_t d = u->g->values[v].def;
  return d < 0 ? ng->params[-1 - d] : u->map[v];
}

static kp_action emit_chain(const kp_rebuild *rb, graph_info *u, kir_graph *ng, chain *ch,
                            const kir_inst *inst) {
  (void)rb;
  uint32_t in[4], res[2];
  for (uint32_t i = 0; i < ch->nsrc; i++)
    if ((in[i] = new_value(u, ng, ch->src[i])) == KILN_NO_VALUE) {
      kir_graph_fail(ng, KILN_ERR_INVALID, "attention tiling: an operand was not copied");
      return KP_FAILED;
    }
  kir_attr attrs[KIR_MAX_ATTRS];
  memset(attrs, 0, sizeof attrs);
  attrs[0].i = 0;
  attrs[1].f = ch->scale;
  if (kir_add_inst(ng, KIR_OP_flash_attention, ch->nsrc, in, attrs, res, 2, inst->line, inst->col) != 2)
    return KP_FAILED;
  ch->out = res[0], ch->lse = res[1];
  return KP_REPLACED;
}

static kp_action tile_inst(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst, const uint32_t *in,
                           uint32_t *out) {
  graph_info *u = info_of(rb->user, inst);
  if (!u) return KP_KEEP;
  uint32_t at = index_of(u, inst);
  chain *ch = &u->chains[u->chain_of[at]];
  kp_action a = KP_REPLACED;
  switch (u->act[at]) {
  case ACT_EMIT: /* q k^T: flash_attention here; the dropped values stand on its lse */
    a = emit_chain(rb, u, ng, ch, inst);
    out[0] = ch->lse;
    break;
  case ACT_DROP: out[0] = ch->lse; break;
  case ACT_FINAL: out[0] = ch->out; break;
  default:
    if (inst->op == KIR_OP_attention && tiled_dtype(ng->values[in[0]].type.dtype)) {
      uint32_t res[2];
      if (kir_add_inst(ng, KIR_OP_flash_attention, inst->nin, in, inst->attrs, res, 2, inst->line,
                       inst->col) != 2)
        return KP_FAILED;
      out[0] = res[0];
    } else if (!kp_copy_inst(rb, ng, inst, in, out)) {
      return KP_FAILED;
    }
  }
  for (uint32_t k = 0; a == KP_REPLACED && k < inst->nout; k++) u->map[inst->out[k]] = out[k];
  return a;
}

kir_graph *kp_attention_tiling(kir_graph *g) {
  kir_module *m = g->mod;
  tiling_state ts = {.ninfo = m->nbodies + 1};
  ts.info = calloc(ts.ninfo, sizeof *ts.info);
  bool ok = ts.info != NULL;
  for (uint32_t i = 0; ok && i < m->nbodies; i++) ok = build_info(&ts.info[i], m->bodies[i]);
  if (ok) ok = build_info(&ts.info[m->nbodies], m->entry);
  kir_graph *r = NULL;
  if (ok) r = kp_rebuild_module(g, tile_inst, &ts);
  else kir_fail(m->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; ts.info && i < ts.ninfo; i++) free_info(&ts.info[i]);
  free(ts.info);
  return r;
}
