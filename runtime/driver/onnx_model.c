/*
 * onnx_model.c — an ONNX model opened once and run with the values of its
 * shape inputs given at run time (kiln_onnx_model, include/kiln/onnx.h).
 *
 * Kiln's IR has no tensor whose shape is another tensor's value, so a model
 * whose graph input decides a shape (Reshape's shape, Slice's starts, TopK's
 * k, ...) is specialised: imported with that input frozen to its value
 * (ox_import_model, as kiln_onnx_import_frozen), compiled, and the compiled
 * model kept in a small LRU cache keyed by the bytes, dtype and dims of the
 * shape inputs' values (docs/decisions.md says why not symbolic).
 *
 * Which inputs are shape inputs is learnt from the importer: when a node
 * refuses an operand that "must be known at import", the importer notes the
 * operand's ONNX name (ox_note_needed); walking the graph backwards from it
 * to the graph inputs it is computed from (stopping at Shape and Size, which
 * read only dims) gives the inputs to freeze, and the import is tried again
 * with their values. The set depends on the graph alone, so once an import
 * has succeeded it is complete.
 *
 * It lives with the JIT driver, not in frontend/, because it compiles and
 * runs what it imports (frontend/ depends on ir/ only; tools/check_layers.sh).
 * The model decodes the file once and keeps the ModelProto; the graphs it
 * imports live in a context of its own, so callers' contexts may come and
 * go; errors are copied to the context of the call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_impl.h"
#include "ir/kir.h"
#include "kiln/compile.h"
#include "passes/mixed_precision.h"

enum { MAX_FROZEN = 64, MAX_CACHE = 1024 };

typedef struct model_input {
  char *name;
  kiln_dtype dtype;
  size_t rank;                /* SIZE_MAX: not a tensor of a known rank (the import says why) */
  int64_t dims[KILN_MAX_RANK]; /* -1 where symbolic */
  bool shape;                 /* a shape input */
  char *why;                  /* the importer's refusal that made it one */
} model_input;

typedef struct entry {
  uint8_t *key;
  size_t keylen;
  kiln_compiled *c; /* NULL: eager runs g */
  kiln_graph *g;    /* kept only for eager runs */
  char reason[256]; /* why `auto` runs eager, "" */
  uint64_t used;    /* the tick of its last use */
} entry;

typedef struct producer {
  const char *name; /* a node output */
  size_t node;
} producer;

struct kiln_onnx_model {
  kiln_ctx *ictx; /* the graphs' */
  Onnx__ModelProto *proto;
  char *name, *base_dir;
  model_input *in;
  size_t nin, nout;
  bool complete;
  bool fix_dims; /* the inputs' symbolic dims are specialised too (the import refused them) */
  char *dims_why; /* the refusal that made it so */
  kiln_backend backend;
  char device[32];
  kp_precision precision;
  producer *prod; /* sorted by name */
  size_t nprod;
  entry *cache;
  size_t ncache, cap;
  uint64_t tick;
  kiln_onnx_cache_stats st;
};

static const char *S(const char *s) { return s ? s : ""; }

/* The caller's ctx gets m's internal failure (status and message). */
static kiln_status pass_on(kiln_ctx *ctx, const kiln_ctx *from, kiln_status s) {
  if (ctx == from) return s;
  return kir_fail(ctx, s, "%s", kiln_ctx_error(from));
}

/* ---------------------------------------------------------------- the graph */

static int by_producer(const void *a, const void *b) {
  return strcmp(((const producer *)a)->name, ((const producer *)b)->name);
}

static int by_cstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every node output with its node, sorted, for the backward walk. */
static kiln_status index_producers(kiln_onnx_model *m, kiln_ctx *ctx) {
  const Onnx__GraphProto *gp = m->proto->graph;
  size_t n = 0;
  for (size_t k = 0; k < gp->n_node; k++) n += gp->node[k]->n_output;
  if (!(m->prod = malloc((n + 1) * sizeof *m->prod)))
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (size_t k = 0; k < gp->n_node; k++)
    for (size_t j = 0; j < gp->node[k]->n_output; j++)
      if (*S(gp->node[k]->output[j])) m->prod[m->nprod++] = (producer){gp->node[k]->output[j], k};
  qsort(m->prod, m->nprod, sizeof *m->prod, by_producer);
  return KILN_OK;
}

/* The graph inputs that are not initializers, with their declared types. */
static kiln_status read_inputs(kiln_onnx_model *m, kiln_ctx *ctx) {
  const Onnx__GraphProto *gp = m->proto->graph;
  const char **init = malloc((gp->n_initializer + 1) * sizeof *init);
  if (!init || !(m->in = calloc(gp->n_input + 1, sizeof *m->in))) {
    free(init);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  for (size_t k = 0; k < gp->n_initializer; k++) init[k] = S(gp->initializer[k]->name);
  qsort(init, gp->n_initializer, sizeof *init, by_cstr);
  kiln_status s = KILN_OK;
  for (size_t k = 0; k < gp->n_input && !s; k++) {
    const Onnx__ValueInfoProto *vi = gp->input[k];
    const char *name = S(vi->name);
    if (bsearch(&name, init, gp->n_initializer, sizeof *init, by_cstr)) continue;
    model_input *in = &m->in[m->nin];
    if (!(in->name = strdup(name))) {
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
      break;
    }
    m->nin++;
    in->rank = SIZE_MAX;
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type ||
        !tp->tensor_type->has_elem_type || !ox_dtype(tp->tensor_type->elem_type, &in->dtype) ||
        !tp->tensor_type->shape || tp->tensor_type->shape->n_dim > KILN_MAX_RANK)
      continue;
    in->rank = tp->tensor_type->shape->n_dim;
    for (size_t d = 0; d < in->rank; d++) {
      const Onnx__TensorShapeProto__Dimension *dim = tp->tensor_type->shape->dim[d];
      in->dims[d] = dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE
                        ? dim->dim_value : -1;
    }
  }
  free(init);
  return s;
}

static size_t find_input(const kiln_onnx_model *m, const char *name) {
  for (size_t k = 0; k < m->nin; k++)
    if (!strcmp(m->in[k].name, name)) return k;
  return SIZE_MAX;
}

/* A growable stack of value names for walk_back. */
typedef struct name_stack {
  const char **v;
  size_t n, cap;
  bool oom;
} name_stack;

static void push_name(name_stack *st, const char *name) {
  if (!*name || st->oom) return;
  if (st->n == st->cap) {
    size_t cap = st->cap ? 2 * st->cap : 64;
    const char **v = realloc(st->v, cap * sizeof *v);
    if (!v) {
      st->oom = true;
      return;
    }
    st->v = v, st->cap = cap;
  }
  st->v[st->n++] = name;
}

/* The inputs of node nd and, for an If, Loop or Scan, every name its graph attributes read (the
   outer values they use among them; their own names find no producer and are dropped). */
static void push_node_inputs(name_stack *st, const Onnx__NodeProto *nd, int depth) {
  for (size_t j = 0; j < nd->n_input; j++) push_name(st, S(nd->input[j]));
  if (depth > 32) return; /* the wire check bounds nesting long before this */
  for (size_t a = 0; a < nd->n_attribute; a++) {
    const Onnx__AttributeProto *at = nd->attribute[a];
    for (size_t g = 0; g < at->n_graphs + (at->g != NULL); g++) {
      const Onnx__GraphProto *gp = g < at->n_graphs ? at->graphs[g] : at->g;
      for (size_t k = 0; gp && k < gp->n_node; k++) push_node_inputs(st, gp->node[k], depth + 1);
    }
  }
}

/* The index of the node of g that outputs `name`, or SIZE_MAX. */
static size_t producer_in(const Onnx__GraphProto *g, const char *name) {
  for (size_t k = 0; k < g->n_node; k++)
    for (size_t j = 0; j < g->node[k]->n_output; j++)
      if (!strcmp(S(g->node[k]->output[j]), name)) return k;
  return SIZE_MAX;
}

/* The graph attribute of a node of gp whose own nodes output `name`, or NULL. */
static const Onnx__GraphProto *inner_graph_of(const Onnx__GraphProto *gp, const char *name) {
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *nd = gp->node[k];
    for (size_t a = 0; a < nd->n_attribute; a++) {
      const Onnx__AttributeProto *at = nd->attribute[a];
      for (size_t g = 0; g < at->n_graphs + (at->g != NULL); g++) {
        const Onnx__GraphProto *sg = g < at->n_graphs ? at->graphs[g] : at->g;
        if (sg && producer_in(sg, name) != SIZE_MAX) return sg;
      }
    }
  }
  return NULL;
}

/*
 * An operand defined inside a graph attribute (a value an If's branch needs known): walked back
 * through the nodes of that graph; the outer values it is computed from go on `outer`.
 */
static void walk_inner(const Onnx__GraphProto *sg, const char *value, name_stack *outer) {
  name_stack st = {0};
  bool *seen = calloc(sg->n_node + 1, sizeof *seen);
  if (!seen) outer->oom = true;
  push_name(&st, value);
  while (seen && st.n && !st.oom) {
    const char *v = st.v[--st.n];
    size_t i = producer_in(sg, v);
    if (i == SIZE_MAX) { /* an outer value, unless the graph's own input or initializer */
      bool own = false;
      for (size_t k = 0; k < sg->n_input; k++) own |= !strcmp(S(sg->input[k]->name), v);
      for (size_t k = 0; k < sg->n_initializer; k++)
        own |= !strcmp(S(sg->initializer[k]->name), v);
      if (!own) push_name(outer, v);
      continue;
    }
    if (seen[i]) continue;
    seen[i] = true;
    const Onnx__NodeProto *nd = sg->node[i];
    if (!strcmp(S(nd->op_type), "Shape") || !strcmp(S(nd->op_type), "Size")) continue;
    push_node_inputs(&st, nd, 0);
  }
  outer->oom |= st.oom;
  free(st.v);
  free(seen);
}

/*
 * Marks (mark[k]) the inputs that `value` is computed from, walking back
 * through the nodes that make it (and the outer values their graph
 * attributes read); Shape and Size read only their input's dims, so the walk
 * stops there. Returns false when out of memory.
 */
static bool walk_back(const kiln_onnx_model *m, const char *value, bool *mark) {
  const Onnx__GraphProto *gp = m->proto->graph;
  name_stack st = {0};
  bool *seen = calloc(gp->n_node + 1, sizeof *seen);
  const Onnx__GraphProto *sg = NULL;
  if (seen && find_input(m, value) == SIZE_MAX && producer_in(gp, value) == SIZE_MAX &&
      (sg = inner_graph_of(gp, value)))
    walk_inner(sg, value, &st); /* an operand inside an If's branch */
  else if (seen)
    push_name(&st, value);
  while (st.n && !st.oom) {
    const char *v = st.v[--st.n];
    size_t k = find_input(m, v);
    if (k != SIZE_MAX) {
      mark[k] = true;
      continue;
    }
    producer key = {v, 0}, *p = bsearch(&key, m->prod, m->nprod, sizeof *p, by_producer);
    if (!p || seen[p->node]) continue;
    seen[p->node] = true;
    const Onnx__NodeProto *nd = gp->node[p->node];
    if (!strcmp(S(nd->op_type), "Shape") || !strcmp(S(nd->op_type), "Size")) continue;
    push_node_inputs(&st, nd, 0);
  }
  bool ok = seen && !st.oom;
  free(st.v);
  free(seen);
  return ok;
}

/* ------------------------------------------------------------ specialising */

/* Whether an input that is not a shape input has a symbolic dim. */
static bool has_symbolic_dims(const kiln_onnx_model *m) {
  for (size_t k = 0; k < m->nin; k++)
    for (size_t d = 0; !m->in[k].shape && m->in[k].rank != SIZE_MAX && d < m->in[k].rank; d++)
      if (m->in[k].dims[d] < 0) return true;
  return false;
}

static kiln_status missing_shape(const kiln_onnx_model *m, kiln_ctx *ctx, size_t k,
                                 kiln_status s) {
  return kir_fail(ctx, s, "shape input '%s' has no value: %s", m->in[k].name, m->in[k].why);
}

/*
 * Imports the model into ctx with every shape input frozen to vals[k]
 * (NULL: none given; so are the inputs in also[], which the caller freezes
 * too). A refusal that names an operand made from other inputs makes them
 * shape inputs and the import is tried again. *missing is set when the
 * import stopped because a shape input has no value.
 */
static kiln_status import_spec(kiln_onnx_model *m, kiln_ctx *ctx, kiln_tensor *const *vals,
                               const bool *also, kiln_tensor *const *dimv, kiln_graph **out,
                               bool *missing) {
  kiln_onnx_frozen fz[MAX_FROZEN], *shaped = calloc(m->nin + 1, sizeof *shaped);
  char needed[512];
  *missing = false;
  if (!shaped) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (;;) {
    ox_dims_fix fix = {.shaped = shaped};
    for (size_t k = 0; k < m->nin; k++) {
      if (m->in[k].shape || (also && also[k])) continue;
      kiln_tensor *t = dimv && dimv[k] ? dimv[k] : m->fix_dims ? vals[k] : NULL;
      if (!t && m->fix_dims) { /* opening, or a .so: the dims come with a run, or not at all */
        free(shaped);
        *missing = true;
        return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: input '%s' needs its dims fixed (the "
                        "import refused a symbolic dim: %s)", m->name, m->in[k].name,
                        m->dims_why ? m->dims_why : "");
      }
      if (t) shaped[fix.n++] = (kiln_onnx_frozen){m->in[k].name, t};
    }
    size_t nfz = 0;
    for (size_t k = 0; k < m->nin; k++) {
      if (!m->in[k].shape && !(also && also[k])) continue;
      if (!vals[k]) {
        free(shaped);
        *missing = true;
        return missing_shape(m, ctx, k, KILN_ERR_UNSUPPORTED);
      }
      if (nfz == MAX_FROZEN) {
        free(shaped);
        return kir_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: more than %d shape inputs", m->name,
                        MAX_FROZEN);
      }
      fz[nfz++] = (kiln_onnx_frozen){m->in[k].name, vals[k]};
    }
    kiln_status s = ox_import_model(ctx, m->proto, m->name, m->base_dir, nfz, fz, &fix, out,
                                    needed, sizeof needed);
    if (s == KILN_OK) {
      bool extra = false;
      for (size_t k = 0; also && k < m->nin; k++) extra |= also[k] && !m->in[k].shape;
      if (!extra) m->complete = true; /* nothing frozen could hide a shape input */
      free(shaped);
      return KILN_OK;
    }
    if (!needed[0]) {
      /* a node that refused a symbolic dim (a product of dims as one, a dim as data, ...): the
         inputs' dims are fixed to each run's, as the shape inputs' values are */
      if (s == KILN_ERR_UNSUPPORTED && fix.sym_failed && !m->fix_dims && has_symbolic_dims(m)) {
        m->fix_dims = true;
        free(m->dims_why);
        m->dims_why = strdup(kiln_ctx_error(ctx)); /* NULL (no memory): the message says less */
        continue;
      }
      free(shaped);
      return s;
    }
    bool *mark = calloc(m->nin + 1, sizeof *mark);
    if (!mark || !walk_back(m, needed, mark)) {
      free(mark);
      free(shaped);
      return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    size_t added = 0;
    for (size_t k = 0; k < m->nin; k++) {
      if (!mark[k] || m->in[k].shape || (also && also[k])) continue;
      char *why = strdup(kiln_ctx_error(ctx));
      if (!why) {
        free(mark);
        free(shaped);
        return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
      }
      m->in[k].shape = true, m->in[k].why = why, added++;
    }
    free(mark);
    if (!added) { /* frozen already, or from no input: the refusal stands */
      free(shaped);
      return s;
    }
  }
}

static void entry_free(entry *e) {
  free(e->key);
  kiln_compiled_destroy(e->c);
  kiln_graph_destroy(e->g);
  memset(e, 0, sizeof *e);
}

/* A new specialisation for vals in *e: imported, the precision policy applied, compiled. */
static kiln_status make_entry(kiln_onnx_model *m, kiln_ctx *ctx, kiln_tensor *const *vals,
                              entry *e, bool *missing) {
  kiln_graph *g = NULL;
  kiln_status s = import_spec(m, m->ictx, vals, NULL, NULL, &g, missing);
  if (s) return pass_on(ctx, m->ictx, s);
  size_t nparams = 0;
  for (size_t k = 0; k < m->nin; k++) nparams += !m->in[k].shape;
  size_t gp = kiln_graph_num_params(g), gr = kiln_graph_num_results(g);
  if (gp != nparams || gr != m->nout) { /* the importer's contract, checked */
    kiln_graph_destroy(g);
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: the specialised graph has %zu parameters and %zu "
                    "results, not %zu and %zu", m->name, gp, gr, nparams, m->nout);
  }
  if (m->precision != KP_PREC_FP32) { /* the policy pass, as `kiln run --precision` */
    kiln_graph *pg = kp_mixed_precision(g, m->precision);
    kiln_graph_destroy(g);
    if (!pg) return pass_on(ctx, m->ictx, kiln_ctx_status(m->ictx));
    g = pg;
  }
  if (m->backend == KILN_BACKEND_EAGER) {
    e->g = g;
    return KILN_OK;
  }
  kiln_compile_options co = {.device = strcmp(m->device, "cpu") ? m->device : NULL};
  s = kiln_compile(g, &co, &e->c);
  if (s == KILN_ERR_UNSUPPORTED && m->backend == KILN_BACKEND_AUTO && !co.device) {
    snprintf(e->reason, sizeof e->reason, "%s", kiln_ctx_error(m->ictx));
    e->g = g; /* `auto`: the interpreter, and says why */
    return KILN_OK;
  }
  kiln_graph_destroy(g);
  return s ? pass_on(ctx, m->ictx, s) : KILN_OK;
}

/* The cache key of vals: dtype, rank, dims and bytes of each shape input's value. */
static kiln_status make_key(const kiln_onnx_model *m, kiln_ctx *ctx, kiln_tensor *const *vals,
                            uint8_t **key, size_t *len) {
  size_t n = 0;
  for (size_t k = 0; k < m->nin; k++)
    if (m->in[k].shape) n += 2 + 8 * kiln_tensor_rank(vals[k]) + kiln_tensor_nbytes(vals[k]);
    else if (m->fix_dims && vals[k]) n += 1 + 8 * kiln_tensor_rank(vals[k]);
  uint8_t *p = *key = malloc(n + 1);
  if (!p) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (size_t k = 0; k < m->nin; k++) {
    if (!m->in[k].shape && m->fix_dims && vals[k]) { /* the dims a specialisation fixed */
      *p++ = (uint8_t)kiln_tensor_rank(vals[k]);
      for (size_t d = 0; d < kiln_tensor_rank(vals[k]); d++) {
        int64_t v = kiln_tensor_dim(vals[k], d);
        memcpy(p, &v, 8), p += 8;
      }
    }
    if (!m->in[k].shape) continue;
    const kiln_tensor *t = vals[k];
    *p++ = (uint8_t)kiln_tensor_dtype(t);
    *p++ = (uint8_t)kiln_tensor_rank(t);
    for (size_t d = 0; d < kiln_tensor_rank(t); d++) {
      int64_t v = kiln_tensor_dim(t, d);
      memcpy(p, &v, 8), p += 8;
    }
    memcpy(p, kiln_tensor_cdata(t), kiln_tensor_nbytes(t)), p += kiln_tensor_nbytes(t);
  }
  *len = n;
  return KILN_OK;
}

/* The entry for vals: a hit moves up in the LRU order; a miss specialises, evicting the oldest. */
static kiln_status lookup(kiln_onnx_model *m, kiln_ctx *ctx, kiln_tensor *const *vals,
                          entry **out, bool *missing) {
  uint8_t *key = NULL;
  size_t len = 0;
  *missing = false;
  kiln_status s = make_key(m, ctx, vals, &key, &len);
  if (s) return s;
  for (size_t i = 0; i < m->ncache; i++)
    if (m->cache[i].keylen == len && !memcmp(m->cache[i].key, key, len)) {
      free(key);
      m->st.hits++;
      m->cache[i].used = ++m->tick;
      *out = &m->cache[i];
      return KILN_OK;
    }
  free(key);
  entry e = {0};
  if ((s = make_entry(m, ctx, vals, &e, missing))) return s;
  /* the import may have found more shape inputs (the first run): key on all of them */
  if ((s = make_key(m, ctx, vals, &e.key, &e.keylen))) {
    entry_free(&e);
    return s;
  }
  m->st.misses++;
  size_t slot = m->ncache;
  if (m->ncache == m->cap) { /* the least recently used goes */
    slot = 0;
    for (size_t i = 1; i < m->ncache; i++)
      if (m->cache[i].used < m->cache[slot].used) slot = i;
    entry_free(&m->cache[slot]);
    m->st.evictions++;
  } else {
    m->ncache++;
  }
  e.used = ++m->tick;
  m->cache[slot] = e;
  *out = &m->cache[slot];
  return KILN_OK;
}

/* ------------------------------------------------------------------- open */

KILN_API void kiln_onnx_model_destroy(kiln_onnx_model *m) {
  if (!m) return;
  for (size_t i = 0; i < m->ncache; i++) entry_free(&m->cache[i]);
  free(m->cache);
  for (size_t k = 0; k < m->nin; k++) free(m->in[k].name), free(m->in[k].why);
  free(m->in);
  free(m->dims_why);
  free(m->prod);
  if (m->proto) onnx__model_proto__free_unpacked(m->proto, NULL);
  free(m->name);
  free(m->base_dir);
  kiln_ctx_destroy(m->ictx);
  free(m);
}

static kiln_status set_options(kiln_onnx_model *m, kiln_ctx *ctx,
                               const kiln_onnx_model_options *opt) {
  static const kiln_onnx_model_options defaults;
  if (!opt) opt = &defaults;
  if ((unsigned)opt->backend > KILN_BACKEND_EAGER)
    return kir_fail(ctx, KILN_ERR_INVALID, "unknown backend %d: expected one of auto, compiled, "
                    "eager", (int)opt->backend);
  m->backend = opt->backend;
  if (snprintf(m->device, sizeof m->device, "%s", opt->device ? opt->device : "cpu") >=
      (int)sizeof m->device)
    return kir_fail(ctx, KILN_ERR_INVALID, "device '%s': name too long", opt->device);
  if (m->backend == KILN_BACKEND_EAGER && strcmp(m->device, "cpu"))
    return kir_fail(ctx, KILN_ERR_INVALID, "backend 'eager' runs on the CPU, not on device '%s'",
                    m->device);
  m->precision = KP_PREC_FP32;
  if (opt->precision && !kp_precision_parse(opt->precision, &m->precision))
    return kir_fail(ctx, KILN_ERR_INVALID, "precision '%s': expected fp64, fp32, tf32, bf16 or "
                    "fp16", opt->precision);
  m->cap = opt->cache_capacity ? opt->cache_capacity : KILN_ONNX_MODEL_CACHE_DEFAULT;
  if (m->cap > MAX_CACHE)
    return kir_fail(ctx, KILN_ERR_INVALID, "cache_capacity %zu: at most %d", m->cap, MAX_CACHE);
  m->st.capacity = m->cap;
  if (!(m->cache = calloc(m->cap, sizeof *m->cache)))
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  return KILN_OK;
}

/*
 * Decoded, its inputs and producers indexed, and imported once without
 * values: a model without shape inputs is then specialised (its only entry);
 * one with them knows those the first refusal names.
 */
static kiln_status open_model(kiln_onnx_model *m, kiln_ctx *ctx, const void *buf, size_t len,
                              const kiln_onnx_model_options *opt) {
  kiln_status s = set_options(m, ctx, opt);
  if (s) return s;
  if (!(m->proto = ox_decode_model(ctx, buf, len, m->name))) return KILN_ERR_PARSE;
  if (!m->proto->graph) return kir_fail(ctx, KILN_ERR_PARSE, "%s: the model has no graph", m->name);
  m->nout = m->proto->graph->n_output;
  if ((s = read_inputs(m, ctx)) || (s = index_producers(m, ctx))) return s;
  kiln_tensor **none = calloc(m->nin + 1, sizeof *none);
  entry *e;
  bool missing;
  if (!none) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  s = lookup(m, m->ictx, none, &e, &missing); /* errors on ictx: a missing value is none */
  free(none);
  if (s && missing) return KILN_OK; /* shape inputs: specialised at run time */
  return s ? pass_on(ctx, m->ictx, s) : KILN_OK;
}

KILN_API kiln_status kiln_onnx_model_open_mem(kiln_ctx *ctx, const void *buf, size_t len,
                                              const char *name, const char *base_dir,
                                              const kiln_onnx_model_options *opt,
                                              kiln_onnx_model **out) {
  if (!ctx || !out || (!buf && len)) return KILN_ERR_INVALID;
  *out = NULL;
  kiln_onnx_model *m = calloc(1, sizeof *m);
  if (!m || !(m->ictx = kiln_ctx_create()) || !(m->name = strdup(name ? name : "<memory>")) ||
      (base_dir && !(m->base_dir = strdup(base_dir)))) {
    kiln_onnx_model_destroy(m);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  m->ictx->opts = ctx->opts; /* the caller's options (kernel cache, threads, ...) */
  kiln_status s = open_model(m, ctx, buf, len, opt);
  if (s) {
    kiln_onnx_model_destroy(m);
    return s;
  }
  *out = m;
  return KILN_OK;
}

KILN_API kiln_status kiln_onnx_model_open(kiln_ctx *ctx, const char *path,
                                          const kiln_onnx_model_options *opt,
                                          kiln_onnx_model **out) {
  if (!ctx || !path || !out) return KILN_ERR_INVALID;
  *out = NULL;
  uint8_t *buf;
  size_t len;
  char *dir;
  kiln_status s = ox_read_model_file(ctx, path, &buf, &len, &dir);
  if (s) return s;
  s = kiln_onnx_model_open_mem(ctx, buf, len, path, dir, opt, out);
  free(dir);
  free(buf);
  return s;
}

/* --------------------------------------------------------------- queries */

KILN_API size_t kiln_onnx_model_num_inputs(const kiln_onnx_model *m) { return m ? m->nin : 0; }

KILN_API const char *kiln_onnx_model_input_name(const kiln_onnx_model *m, size_t i) {
  return m && i < m->nin ? m->in[i].name : NULL;
}

KILN_API size_t kiln_onnx_model_num_outputs(const kiln_onnx_model *m) { return m ? m->nout : 0; }

KILN_API int kiln_onnx_model_is_shape_input(const kiln_onnx_model *m, size_t i) {
  return m && i < m->nin && m->in[i].shape;
}

KILN_API kiln_status kiln_onnx_model_shape_inputs(const kiln_onnx_model *m, kiln_ctx *ctx,
                                                  char **out, int *complete) {
  if (!m || !ctx || !out) return KILN_ERR_INVALID;
  size_t n = 1, used = 0;
  for (size_t k = 0; k < m->nin; k++) n += m->in[k].shape ? strlen(m->in[k].name) + 1 : 0;
  if (!(*out = calloc(n, 1))) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (size_t k = 0; k < m->nin; k++)
    if (m->in[k].shape) used += (size_t)sprintf(*out + used, "%s%s", used ? "," : "", m->in[k].name);
  if (complete) *complete = m->complete;
  return KILN_OK;
}

KILN_API void kiln_onnx_model_cache_stats(const kiln_onnx_model *m, kiln_onnx_cache_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!m) return;
  *out = m->st;
  out->entries = m->ncache;
}

/* ------------------------------------------------------------------- runs */

static void format_type(kiln_dtype t, size_t rank, const int64_t *dims, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(t));
  for (size_t i = 0; i < rank && k < n; i++)
    k += dims[i] < 0 ? (size_t)snprintf(buf + k, n - k, "%s?", i ? ", " : "")
                     : (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "",
                                        (long long)dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Whether t fits input k's declared dtype, rank and static dims (KILN_ERR_TYPE naming it). */
static kiln_status check_value(const kiln_onnx_model *m, kiln_ctx *ctx, size_t k,
                               const kiln_tensor *t) {
  const model_input *in = &m->in[k];
  if (in->rank == SIZE_MAX) return KILN_OK; /* the import refuses such an input */
  bool fits = kiln_tensor_dtype(t) == in->dtype && kiln_tensor_rank(t) == in->rank;
  for (size_t d = 0; fits && d < in->rank; d++)
    fits = in->dims[d] < 0 || in->dims[d] == kiln_tensor_dim(t, d);
  if (fits) return KILN_OK;
  char want[256], got[256];
  int64_t dims[KILN_MAX_RANK];
  for (size_t d = 0; d < kiln_tensor_rank(t); d++) dims[d] = kiln_tensor_dim(t, d);
  format_type(in->dtype, in->rank, in->dims, want, sizeof want);
  format_type(kiln_tensor_dtype(t), kiln_tensor_rank(t), dims, got, sizeof got);
  return kir_fail(ctx, KILN_ERR_TYPE, "%s: %sinput '%s' is %s, but the value given is %s", m->name,
                  in->shape ? "shape " : "", in->name, want, got);
}

/* vals[k] = the value named for input k (names NULL: in order), each checked; NULL if none. */
static kiln_status bind(const kiln_onnx_model *m, kiln_ctx *ctx, size_t n,
                        const char *const *names, kiln_tensor *const *values,
                        kiln_tensor **vals) {
  if (n && !values) return KILN_ERR_INVALID;
  if (!names && n != m->nin)
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: %zu inputs given, the model takes %zu", m->name, n,
                    m->nin);
  for (size_t i = 0; i < n; i++) {
    size_t k = names ? (names[i] ? find_input(m, names[i]) : SIZE_MAX) : i;
    if (k == SIZE_MAX) {
      char list[1024] = "";
      size_t used = 0;
      for (size_t j = 0; j < m->nin && used < sizeof list; j++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", j ? ", " : "",
                                 m->in[j].name);
      return kir_fail(ctx, KILN_ERR_INVALID, "%s: the model has no input named '%s' (its inputs: "
                      "%s)", m->name, S(names[i]), m->nin ? list : "none");
    }
    if (vals[k])
      return kir_fail(ctx, KILN_ERR_INVALID, "%s: input '%s' is given twice", m->name,
                      m->in[k].name);
    if (!values[i]) return kir_fail(ctx, KILN_ERR_INVALID, "%s: input '%s' is NULL", m->name,
                                    m->in[k].name);
    kiln_status s = check_value(m, ctx, k, values[i]);
    if (s) return s;
    vals[k] = values[i];
  }
  return KILN_OK;
}

static kiln_status run_entry(kiln_onnx_model *m, kiln_ctx *ctx, entry *e, kiln_tensor **vals,
                             size_t n_out, kiln_tensor **outputs, kiln_run_info *info) {
  size_t na = 0;
  for (size_t k = 0; k < m->nin; k++)
    if (!m->in[k].shape) vals[na++] = vals[k]; /* the graph's parameters, in order */
  if (e->c) return kiln_compiled_run(e->c, ctx, na, vals, n_out, outputs, info);
  kiln_run_options ro = {.backend = KILN_BACKEND_EAGER};
  kiln_status s = kiln_graph_run_on(e->g, &ro, na, vals, n_out, outputs, info);
  if (s) return pass_on(ctx, m->ictx, s);
  if (info) snprintf(info->reason, sizeof info->reason, "%s", e->reason);
  return KILN_OK;
}

KILN_API kiln_status kiln_onnx_model_run(kiln_onnx_model *m, kiln_ctx *ctx, size_t n_in,
                                         const char *const *names, kiln_tensor *const *inputs,
                                         size_t n_out, kiln_tensor **outputs,
                                         kiln_run_info *info) {
  if (!m || !ctx || (n_out && !outputs)) return KILN_ERR_INVALID;
  for (size_t r = 0; r < n_out; r++) outputs[r] = NULL;
  if (n_out != m->nout)
    return kir_fail(ctx, KILN_ERR_INVALID, "%s: room for %zu outputs, the model has %zu", m->name,
                    n_out, m->nout);
  kiln_tensor **vals = calloc(m->nin + 1, sizeof *vals);
  if (!vals) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  kiln_status s = bind(m, ctx, n_in, names, inputs, vals);
  for (size_t k = 0; !s && k < m->nin; k++)
    if (!vals[k])
      s = m->in[k].shape ? missing_shape(m, ctx, k, KILN_ERR_INVALID)
                         : kir_fail(ctx, KILN_ERR_INVALID, "%s: no value for input '%s'", m->name,
                                    m->in[k].name);
  entry *e = NULL;
  bool missing;
  if (!s) s = lookup(m, ctx, vals, &e, &missing);
  if (!s) s = run_entry(m, ctx, e, vals, n_out, outputs, info);
  free(vals);
  return s;
}

/* kiln_onnx_model_specialize, and the inputs dnames[k] with their dims fixed to dims[k]'s. */
KILN_API kiln_status kiln_onnx_model_specialize_dims(kiln_onnx_model *m, kiln_ctx *ctx, size_t n,
                                                     const char *const *names,
                                                     kiln_tensor *const *values, size_t nd,
                                                     const char *const *dnames,
                                                     kiln_tensor *const *dims, kiln_graph **out) {
  if (!m || !ctx || !out || (n && !names) || (nd && (!dnames || !dims))) return KILN_ERR_INVALID;
  *out = NULL;
  kiln_tensor **vals = calloc(m->nin + 1, sizeof *vals), **dimv = calloc(m->nin + 1, sizeof *dimv);
  bool *also = calloc(m->nin + 1, sizeof *also);
  kiln_status s = !vals || !also || !dimv ? kir_fail(ctx, KILN_ERR_NOMEM, "out of memory")
                 : n                      ? bind(m, ctx, n, names, values, vals)
                                          : KILN_OK;
  for (size_t k = 0; !s && k < m->nin; k++) also[k] = vals[k] != NULL;
  for (size_t i = 0; !s && i < nd; i++) {
    size_t k = find_input(m, dnames[i]);
    if (k == SIZE_MAX)
      s = kir_fail(ctx, KILN_ERR_INVALID, "%s: no graph input is named '%s'", m->name, dnames[i]);
    else if (also[k])
      s = kir_fail(ctx, KILN_ERR_INVALID, "%s: input '%s' is given a value and dims", m->name,
                   dnames[i]);
    else
      dimv[k] = dims[i];
  }
  bool missing;
  if (!s) s = import_spec(m, ctx, vals, also, dimv, out, &missing);
  free(vals);
  free(dimv);
  free(also);
  return s;
}

KILN_API kiln_status kiln_onnx_model_specialize(kiln_onnx_model *m, kiln_ctx *ctx, size_t n,
                                                const char *const *names,
                                                kiln_tensor *const *values, kiln_graph **out) {
  return kiln_onnx_model_specialize_dims(m, ctx, n, names, values, 0, NULL, NULL, out);
}

KILN_API int kiln_onnx_model_fixes_dims(const kiln_onnx_model *m) { return m && m->fix_dims; }
