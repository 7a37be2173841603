/*
 * graph.c — modules, graphs, values and instructions: the builder's core.
 *
 * Every graph of a module lives in the module's arena. kir_add_inst() is the
 * one door through which instructions enter a graph (the parser, the C API
 * and the passes all use it): it checks the operand count, fills attribute
 * defaults, runs the op's shape rule and creates the result values. So a
 * graph is well-typed by construction; kir_verify() re-checks it after
 * passes rewrite it.
 */
#include <stdio.h>
#include <string.h>

#include "kir.h"

kiln_status kir_graph_fail(kir_graph *g, kiln_status s, const char *fmt, ...) {
  kir_module *m = g->mod;
  if (m->status != KILN_OK) return m->status; /* keep the first message */
  m->status = s;
  va_list ap;
  va_start(ap, fmt);
  kir_vfail(m->ctx, s, fmt, ap);
  va_end(ap);
  return s;
}

static kir_graph *graph_new(kir_module *m, const char *name) {
  kir_graph *g = kir_arena_alloc(&m->arena, sizeof *g);
  if (!g) return NULL;
  g->mod = m;
  g->name = kir_arena_strdup(&m->arena, name ? name : "main");
  return g->name ? g : NULL;
}

kir_graph *kir_module_new(kiln_ctx *ctx, const char *name) {
  kir_arena a = {0};
  kir_module *m = kir_arena_alloc(&a, sizeof *m);
  if (!m) return NULL;
  m->arena = a;
  m->ctx = ctx;
  m->entry = graph_new(m, name);
  m->pool = kir_pool_new();
  if (!m->entry || !m->pool) {
    kir_pool_unref(m->pool);
    kir_arena_free(&m->arena);
    return NULL;
  }
  return m->entry;
}

void kir_module_share_pool(kir_module *to, kir_module *from) {
  kir_pool_unref(to->pool);
  to->pool = kir_pool_ref(from->pool);
}

kir_graph *kir_body_new(kir_graph *parent, const char *name) {
  kir_module *m = parent->mod;
  if (!kir_arena_grow(&m->arena, (void **)&m->bodies, &m->capbodies, m->nbodies + 1,
                      sizeof *m->bodies))
    return NULL;
  kir_graph *g = graph_new(m, name);
  if (!g) return NULL;
  g->is_body = true;
  m->bodies[m->nbodies++] = g;
  return g;
}

kir_graph *kir_module_find_graph(kir_module *m, const char *name, size_t n) {
  for (uint32_t i = 0; i < m->nbodies; i++)
    if (strlen(m->bodies[i]->name) == n && !memcmp(m->bodies[i]->name, name, n))
      return m->bodies[i];
  if (strlen(m->entry->name) == n && !memcmp(m->entry->name, name, n)) return m->entry;
  return NULL;
}

kir_dim kir_symbol(kir_module *m, const char *name, size_t n) {
  for (uint32_t i = 0; i < m->nsyms; i++)
    if (strlen(m->syms[i]) == n && !memcmp(m->syms[i], name, n)) return KIR_SYM_DIM(i);
  if (!kir_arena_grow(&m->arena, (void **)&m->syms, &m->capsyms, m->nsyms + 1, sizeof *m->syms))
    return 0;
  m->syms[m->nsyms] = kir_arena_strndup(&m->arena, name, n);
  if (!m->syms[m->nsyms]) return 0;
  return KIR_SYM_DIM(m->nsyms++);
}

const char *kir_symbol_name(const kir_module *m, kir_dim d) {
  uint32_t i = KIR_DIM_SYM(d);
  return KIR_DIM_IS_SYM(d) && i < m->nsyms ? m->syms[i] : "?";
}

static uint32_t add_value(kir_graph *g, const kir_type *t, int32_t def, uint16_t def_out) {
  if (!kir_arena_grow(&g->mod->arena, (void **)&g->values, &g->capvalues, g->nvalues + 1,
                      sizeof *g->values)) {
    kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    return KILN_NO_VALUE;
  }
  kir_value *v = &g->values[g->nvalues];
  v->type = *t;
  v->def = def;
  v->def_out = def_out;
  return g->nvalues++;
}

static bool type_valid(kir_graph *g, const kir_type *t) {
  if ((unsigned)t->dtype >= KILN_DTYPE_COUNT || t->rank > KIR_MAX_RANK) return false;
  for (int i = 0; i < t->rank; i++)
    if (KIR_DIM_IS_SYM(t->dims[i]) && KIR_DIM_SYM(t->dims[i]) >= g->mod->nsyms) return false;
  return true;
}

/*
 * Whether the static non-zero dims of `t` multiply, times its element size, to
 * a count of bytes that fits in an int64_t (symbolic dims count as 1, and so do
 * 0 dims: an empty tensor still has strides). Every size and stride the passes,
 * the planner and the runtime compute from a type is then exact.
 */
/* The storage dtypes (f8*, f4e2m1, i4, u4, i2, u2) only go where an op moves or casts values
   (KIR_F_STORAGE): no kernel computes in them, so the refusal is "unsupported", not a type error. */
static bool storage_ok(kir_graph *g, const kir_op_desc *d, const kir_type *t, const char *what,
                       uint32_t i) {
  if (!kir_dtype_is_storage(t->dtype) || (d->flags & KIR_F_STORAGE)) return true;
  kir_graph_fail(g, KILN_ERR_UNSUPPORTED,
                 "%s: %s %u has dtype %s, a storage type that %s does not compute in (cast it to "
                 "f32 or another arithmetic dtype first)",
                 d->name, what, i, kiln_dtype_name(t->dtype), d->name);
  return false;
}

static bool type_fits(const kir_type *t) {
  int64_t bytes = kiln_dtype_size(t->dtype) ? (int64_t)kiln_dtype_size(t->dtype) : 1;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] > 0 && __builtin_mul_overflow(bytes, t->dims[i], &bytes)) return false;
  return true;
}

/* The error of a type that is not type_fits: "f32[1099511627776, 1099511627776]". */
static void fail_too_large(kir_graph *g, const char *what, const kir_type *t) {
  char buf[256];
  kir_format_type(g->mod, t, buf, sizeof buf);
  kir_graph_fail(g, KILN_ERR_TYPE, "%s: %s has more than 2^63 bytes", what, buf);
}

uint32_t kir_add_param(kir_graph *g, const char *name, const kir_type *t) {
  if (g->mod->status != KILN_OK) return KILN_NO_VALUE;
  if (!type_valid(g, t)) {
    kir_graph_fail(g, KILN_ERR_INVALID, "parameter %s: invalid type", name ? name : "");
    return KILN_NO_VALUE;
  }
  if (!type_fits(t)) {
    char what[96];
    snprintf(what, sizeof what, "parameter%s%s", name ? " " : "", name ? name : "");
    fail_too_large(g, what, t);
    return KILN_NO_VALUE;
  }
  if (!kir_arena_grow(&g->mod->arena, (void **)&g->params, &g->capparams, g->nparams + 1,
                      sizeof *g->params)) {
    kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    return KILN_NO_VALUE;
  }
  uint32_t v = add_value(g, t, -1 - (int32_t)g->nparams, 0);
  if (v == KILN_NO_VALUE) return v;
  if (name) g->values[v].name = kir_arena_strdup(&g->mod->arena, name);
  g->params[g->nparams++] = v;
  return v;
}

static void fill_defaults(const kir_op_desc *d, kir_attr *attrs) {
  for (int i = 0; i < d->nattrs; i++) attrs[i] = d->attr[i].def;
}

int kir_add_inst(kir_graph *g, uint16_t op, uint32_t nin, const uint32_t *in,
                 const kir_attr *attrs, uint32_t *outs, uint32_t cap, uint32_t line,
                 uint32_t col) {
  kir_module *m = g->mod;
  if (m->status != KILN_OK) return -1;
  const kir_op_desc *d = kir_op(op);
  if (!d) {
    kir_graph_fail(g, KILN_ERR_INVALID, "unknown op id %u", op);
    return -1;
  }
  if (nin < (uint32_t)d->min_in || (d->max_in >= 0 && nin > (uint32_t)d->max_in)) {
    if (d->min_in == d->max_in)
      kir_graph_fail(g, KILN_ERR_TYPE, "%s takes %d operand%s, got %u", d->name, d->min_in,
                     d->min_in == 1 ? "" : "s", nin);
    else if (d->max_in < 0)
      kir_graph_fail(g, KILN_ERR_TYPE, "%s takes at least %d operand%s, got %u", d->name,
                     d->min_in, d->min_in == 1 ? "" : "s", nin);
    else
      kir_graph_fail(g, KILN_ERR_TYPE, "%s takes %d to %d operands, got %u", d->name, d->min_in,
                     d->max_in, nin);
    return -1;
  }
  kir_type *intypes = kir_arena_alloc(&m->arena, (nin ? nin : 1) * sizeof *intypes);
  if (!intypes) {
    kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    return -1;
  }
  for (uint32_t i = 0; i < nin; i++) {
    if (in[i] >= g->nvalues) {
      kir_graph_fail(g, KILN_ERR_INVALID, "%s: operand %u is not a value of graph @%s", d->name,
                     i, g->name);
      return -1;
    }
    intypes[i] = g->values[in[i]].type;
  }
  for (uint32_t i = 0; i < nin; i++)
    if (!storage_ok(g, d, &intypes[i], "operand", i)) return -1;
  kir_attr full[KIR_MAX_ATTRS];
  if (attrs) memcpy(full, attrs, d->nattrs * sizeof *full);
  else fill_defaults(d, full);

  enum { MAX_OUT = 64 };
  kir_type outtypes[MAX_OUT];
  kir_shape_ctx sc = {.op = d, .g = g, .in = intypes, .nin = nin, .attrs = full,
                      .out = outtypes, .capout = MAX_OUT};
  if (!d->shape(&sc)) {
    kir_graph_fail(g, KILN_ERR_TYPE, "%s: %s", d->name, sc.err[0] ? sc.err : "invalid operands");
    return -1;
  }
  if (d->nout >= 0) sc.nout = (uint32_t)d->nout;
  if (sc.nout > cap) {
    kir_graph_fail(g, KILN_ERR_INVALID, "%s has %u results, room was given for %u", d->name,
                   sc.nout, cap);
    return -1;
  }
  for (uint32_t i = 0; i < sc.nout; i++)
    if (!type_valid(g, &outtypes[i])) {
      kir_graph_fail(g, KILN_ERR_TYPE, "%s: result %u has an invalid type", d->name, i);
      return -1;
    } else if (!type_fits(&outtypes[i])) {
      fail_too_large(g, d->name, &outtypes[i]);
      return -1;
    } else if (!storage_ok(g, d, &outtypes[i], "result", i)) {
      return -1;
    }
  if (!kir_arena_grow(&m->arena, (void **)&g->insts, &g->capinsts, g->ninsts + 1,
                      sizeof *g->insts)) {
    kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    return -1;
  }
  kir_inst inst = {.op = op, .nin = (uint16_t)nin, .nout = (uint16_t)sc.nout, .line = line,
                   .col = col};
  inst.in = kir_arena_alloc(&m->arena, (nin ? nin : 1) * sizeof *inst.in);
  inst.out = kir_arena_alloc(&m->arena, (sc.nout ? sc.nout : 1) * sizeof *inst.out);
  inst.attrs = kir_arena_alloc(&m->arena, (d->nattrs ? d->nattrs : 1) * sizeof *inst.attrs);
  if (!inst.in || !inst.out || !inst.attrs) {
    kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    return -1;
  }
  if (nin) memcpy(inst.in, in, nin * sizeof *in);
  memcpy(inst.attrs, full, d->nattrs * sizeof *full);
  /* List attributes are copied into the arena, so callers may pass stack arrays. */
  for (int i = 0; i < d->nattrs; i++) {
    kir_attr_kind k = d->attr[i].kind;
    if ((k == KIR_ATTR_INTS || k == KIR_ATTR_DIMS || k == KIR_ATTR_FLOATS) && full[i].n) {
      size_t bytes = full[i].n * 8;
      if (bytes >= KIR_POOL_MIN) { /* shared with the modules rebuilt from this one */
        const void *kept = kir_pool_keep(m->pool, full[i].ints, bytes);
        if (!kept) {
          kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
          return -1;
        }
        inst.attrs[i].ints = kept;
        continue;
      }
      void *copy = kir_arena_alloc(&m->arena, bytes);
      if (!copy) {
        kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
        return -1;
      }
      memcpy(copy, (const void *)full[i].ints, bytes);
      inst.attrs[i].ints = copy;
    }
  }
  int32_t idx = (int32_t)g->ninsts;
  for (uint32_t i = 0; i < sc.nout; i++) {
    uint32_t v = add_value(g, &outtypes[i], idx, (uint16_t)i);
    if (v == KILN_NO_VALUE) return -1;
    inst.out[i] = v;
    outs[i] = v;
  }
  g->insts[g->ninsts++] = inst;
  return (int)sc.nout;
}

bool kir_set_results(kir_graph *g, uint32_t n, const uint32_t *vals) {
  if (g->mod->status != KILN_OK) return false;
  for (uint32_t i = 0; i < n; i++)
    if (vals[i] >= g->nvalues) {
      kir_graph_fail(g, KILN_ERR_INVALID, "result %u is not a value of graph @%s", i, g->name);
      return false;
    }
  uint32_t *r = kir_arena_alloc(&g->mod->arena, (n ? n : 1) * sizeof *r);
  if (!r) {
    kir_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    return false;
  }
  if (n) memcpy(r, vals, n * sizeof *r);
  g->results = r;
  g->nresults = n;
  return true;
}

/* ---- helpers for shape rules ---- */

bool kir_shape_error(kir_shape_ctx *sc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sc->err, sizeof sc->err, fmt, ap);
  va_end(ap);
  return false;
}

void kir_format_type(const kir_module *m, const kir_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && k < n; i++) {
    if (KIR_DIM_IS_SYM(t->dims[i]))
      k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", kir_symbol_name(m, t->dims[i]));
    else
      k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
  }
  if (k < n) snprintf(buf + k, n - k, "]");
}

bool kir_broadcast_shapes(kir_shape_ctx *sc, const kir_type *a, const kir_type *b, kir_type *out) {
  uint8_t r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    kir_dim da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da == db || db == 1) out->dims[i] = da;
    else if (da == 1) out->dims[i] = db;
    else {
      char ta[128], tb[128];
      kir_format_type(sc->g->mod, a, ta, sizeof ta);
      kir_format_type(sc->g->mod, b, tb, sizeof tb);
      return kir_shape_error(sc, "cannot broadcast %s with %s (axis %d)", ta, tb, i);
    }
  }
  return true;
}
