/*
 * rebuild.c — the copying walk that graph-to-graph passes share.
 *
 * A pass never edits a graph in place: kp_rebuild_module() makes a new
 * module and feeds it every graph of the old one (scan bodies first, in
 * module order, since a scan may only use a body defined before it; then
 * the entry), instruction by instruction, through kir_add_inst(). So the
 * shape rules check every rewritten instruction as it is built, and a pass
 * that produces an ill-typed graph fails with the builder's message instead
 * of leaving a broken graph behind.
 *
 * What is carried over unchanged: the symbols (re-created by name in the
 * same order, so every dim code — in types and in attributes — means the
 * same symbol in both modules), the parameters, the names of values, the
 * source positions of instructions, and graph attributes (a scan's body is
 * remapped to the new copy of that body). The pass's callback decides, per
 * instruction, whether to keep it or emit a replacement.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

kir_graph *kp_rebuild_graph(const kp_rebuild *rb, const kir_graph *old) {
  const kir_module *m = rb->src->mod;
  for (uint32_t i = 0; i < m->nbodies && i < rb->ngraphs; i++)
    if (m->bodies[i] == old) return rb->graphs[i];
  return old == m->entry ? rb->dst : NULL;
}

/* Gives value v of ng the name `name` unless it has one already. */
static bool copy_name(kir_graph *ng, uint32_t v, const char *name) {
  if (!name || ng->values[v].name) return true;
  ng->values[v].name = kir_arena_strdup(&ng->mod->arena, name);
  if (ng->values[v].name) return true;
  kir_graph_fail(ng, KILN_ERR_NOMEM, "out of memory");
  return false;
}

bool kp_copy_inst(const kp_rebuild *rb, kir_graph *ng, const kir_inst *inst, const uint32_t *in,
                  uint32_t *out) {
  const kir_op_desc *d = kir_op(inst->op);
  kir_attr attrs[KIR_MAX_ATTRS];
  memcpy(attrs, inst->attrs, d->nattrs * sizeof *attrs);
  for (int a = 0; a < d->nattrs; a++) {
    if (d->attr[a].kind != KIR_ATTR_GRAPH) continue;
    attrs[a].graph = kp_rebuild_graph(rb, inst->attrs[a].graph);
    if (!attrs[a].graph) {
      kir_graph_fail(ng, KILN_ERR_INVALID, "%s: attribute '%s' names a graph of another module",
                     d->name, d->attr[a].name);
      return false;
    }
  }
  int n = kir_add_inst(ng, inst->op, inst->nin, in, attrs, out, inst->nout, inst->line, inst->col);
  return n == (int)inst->nout;
}

/* The result values of one instruction, after the callback or the copy. */
static bool take_results(kir_graph *ng, const kir_graph *og, const kir_inst *inst,
                         const uint32_t *out, uint32_t *map) {
  for (uint32_t k = 0; k < inst->nout; k++) {
    if (out[k] >= ng->nvalues) {
      kir_graph_fail(ng, KILN_ERR_INVALID, "%s: the rewrite gave no value for result %u",
                     kir_op(inst->op)->name, k);
      return false;
    }
    map[inst->out[k]] = out[k];
    if (!copy_name(ng, out[k], og->values[inst->out[k]].name)) return false;
  }
  return true;
}

/* Copies or rewrites graph `og` into `ng`, whose symbols and earlier bodies exist. */
static bool rebuild_graph(kp_rebuild *rb, const kir_graph *og, kir_graph *ng) {
  uint32_t cap = 1;
  for (uint32_t i = 0; i < og->ninsts; i++) {
    if (og->insts[i].nin > cap) cap = og->insts[i].nin;
    if (og->insts[i].nout > cap) cap = og->insts[i].nout;
  }
  if (og->nresults > cap) cap = og->nresults;
  uint32_t *map = malloc((og->nvalues + 1u) * sizeof *map);
  uint32_t *in = malloc(cap * sizeof *in), *out = malloc(cap * sizeof *out);
  if (!map || !in || !out) {
    free(map), free(in), free(out);
    kir_graph_fail(ng, KILN_ERR_NOMEM, "out of memory");
    return false;
  }
  bool ok = true;
  for (uint32_t p = 0; ok && p < og->nparams; p++) {
    const kir_value *v = &og->values[og->params[p]];
    map[og->params[p]] = kir_add_param(ng, v->name, &v->type);
    ok = map[og->params[p]] != KILN_NO_VALUE;
  }
  for (uint32_t i = 0; ok && i < og->ninsts; i++) {
    const kir_inst *inst = &og->insts[i];
    for (uint32_t k = 0; k < inst->nin; k++)
      in[k] = map[inst->in[k]];
    kp_action act = rb->rewrite ? rb->rewrite(rb, ng, inst, in, out) : KP_KEEP;
    if (act == KP_DROP) { /* dead: its results must have no uses */
      for (uint32_t k = 0; k < inst->nout; k++) map[inst->out[k]] = KILN_NO_VALUE;
      continue;
    }
    if (act == KP_KEEP)
      ok = kp_copy_inst(rb, ng, inst, in, out);
    else
      ok = act == KP_REPLACED;
    ok = ok && take_results(ng, og, inst, out, map);
  }
  if (ok) {
    for (uint32_t r = 0; r < og->nresults; r++)
      in[r] = map[og->results[r]];
    ok = kir_set_results(ng, og->nresults, in);
  }
  free(map), free(in), free(out);
  return ok;
}

/* Fresh symbols in the same order, so dim codes carry over unchanged. */
static bool copy_symbols(const kir_module *from, kir_graph *to) {
  for (uint32_t s = 0; s < from->nsyms; s++)
    if (kir_symbol(to->mod, from->syms[s], strlen(from->syms[s])) != KIR_SYM_DIM(s)) {
      kir_graph_fail(to, KILN_ERR_NOMEM, "out of memory");
      return false;
    }
  return true;
}

kir_graph *kp_rebuild_module(kir_graph *g, kp_rewrite_fn rewrite, void *user) {
  kir_module *m = g->mod;
  if (m->status != KILN_OK) return NULL; /* its first error is on the context already */
  kp_rebuild rb = {.src = m->entry, .rewrite = rewrite, .user = user};
  rb.dst = kir_module_new(m->ctx, m->entry->name);
  rb.graphs = calloc(m->nbodies + 1u, sizeof *rb.graphs);
  if (!rb.dst || !rb.graphs) {
    if (rb.dst) kiln_graph_destroy(rb.dst);
    free(rb.graphs);
    kir_fail(m->ctx, KILN_ERR_NOMEM, "out of memory");
    return NULL;
  }
  kir_module_share_pool(rb.dst->mod, m); /* its weights are m's, not copies */
  bool ok = copy_symbols(m, rb.dst);
  for (uint32_t b = 0; ok && b < m->nbodies; b++) {
    rb.graphs[b] = kir_body_new(rb.dst, m->bodies[b]->name);
    if (!rb.graphs[b]) {
      kir_graph_fail(rb.dst, KILN_ERR_NOMEM, "out of memory");
      ok = false;
      break;
    }
    rb.ngraphs = b + 1;
    ok = rebuild_graph(&rb, m->bodies[b], rb.graphs[b]);
  }
  if (ok) {
    rb.graphs[m->nbodies] = rb.dst;
    rb.ngraphs = m->nbodies + 1;
    ok = rebuild_graph(&rb, m->entry, rb.dst);
  }
  if (ok && rb.dst->mod->status != KILN_OK) ok = false; /* a callback's failure */
  free(rb.graphs);
  if (ok) return rb.dst;
  if (rb.dst->mod->status == KILN_OK) kir_fail(m->ctx, KILN_ERR_INVALID, "a pass failed");
  kiln_graph_destroy(rb.dst);
  return NULL;
}
