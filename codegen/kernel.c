/*
 * kernel.c — building and printing kernel IR (see kernel.h).
 *
 * Expression nodes are hash-consed by a linear probe over a small open
 * hash table rebuilt on growth, so building the same index arithmetic for
 * several loads yields one node. i64 constant arithmetic folds on the spot,
 * which keeps the index expressions of fully static kernels short before
 * LLVM ever sees them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"

#define GROW(k, arr, cap, n)                                                                   \
  (kir_arena_grow((k)->arena, (void **)&(k)->arr, &(k)->cap, (n), sizeof *(k)->arr) || ((k)->oom = true, false))

kcg_kernel *kcg_kernel_new(kir_arena *a, const char *name, uint32_t nsizes) {
  kcg_kernel *k = kir_arena_alloc(a, sizeof *k);
  if (!k) return NULL;
  k->arena = a;
  k->name = kir_arena_strdup(a, name);
  k->nsizes = nsizes;
  return k->name ? k : NULL;
}

uint32_t kcg_buf_add(kcg_kernel *k, kir_dtype t, bool written, const char *name) {
  if (!GROW(k, bufs, capbufs, k->nbufs + 1)) return 0;
  k->bufs[k->nbufs] = (kcg_buf){.dtype = t, .written = written,
                                .name = name ? kir_arena_strdup(k->arena, name) : NULL};
  return k->nbufs++;
}

uint32_t kcg_local_add(kcg_kernel *k, kir_dtype t) {
  if (!GROW(k, locals, caplocals, k->nlocals + 1)) return 0;
  k->locals[k->nlocals] = t;
  return k->nlocals++;
}

static bool same_expr(const kcg_expr *a, const kcg_expr *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->var == b->var &&
         a->a == b->a && a->b == b->b && a->c == b->c && a->i == b->i;
}

/*
 * Adds an expression, or returns an identical earlier one. Loads and locals
 * are never shared: a load's value may change between two stores, and a
 * local's between two assignments.
 */
static kcg_ref intern(kcg_kernel *k, kcg_expr e) {
  if (k->oom) return 0;
  bool pure = e.kind != KCG_LOAD && e.kind != KCG_LOCAL;
  if (pure)
    for (uint32_t i = k->nexprs; i-- > 0 && k->nexprs - i <= 256;)
      if (same_expr(&k->exprs[i], &e)) return i;
  if (!GROW(k, exprs, capexprs, k->nexprs + 1)) return 0;
  k->exprs[k->nexprs] = e;
  return k->nexprs++;
}

kcg_ref kcg_const_f(kcg_kernel *k, kir_dtype t, double v) {
  kcg_expr e = {.kind = KCG_CONST, .dtype = t, .a = KCG_NONE, .b = KCG_NONE, .c = KCG_NONE};
  e.f = v;
  return intern(k, e);
}

kcg_ref kcg_const_i(kcg_kernel *k, kir_dtype t, int64_t v) {
  kcg_expr e = {.kind = KCG_CONST, .dtype = t, .a = KCG_NONE, .b = KCG_NONE, .c = KCG_NONE};
  e.i = v;
  return intern(k, e);
}

static kcg_ref leaf(kcg_kernel *k, kcg_kind kind, kir_dtype t, uint32_t var) {
  return intern(k, (kcg_expr){.kind = kind, .dtype = t, .var = var, .a = KCG_NONE,
                              .b = KCG_NONE, .c = KCG_NONE});
}

kcg_ref kcg_index(kcg_kernel *k, uint32_t var) { return leaf(k, KCG_INDEX, KILN_I64, var); }
kcg_ref kcg_size(kcg_kernel *k, uint32_t sym) { return leaf(k, KCG_SIZE, KILN_I64, sym); }
kcg_ref kcg_local(kcg_kernel *k, uint32_t local) {
  return leaf(k, KCG_LOCAL, k->locals[local], local);
}

kcg_ref kcg_dim(kcg_kernel *k, kir_dim d) {
  return KIR_DIM_IS_SYM(d) ? kcg_size(k, KIR_DIM_SYM(d)) : kcg_const_i(k, KILN_I64, d);
}

kcg_ref kcg_load(kcg_kernel *k, uint32_t buf, kcg_ref index, kcg_ref pred) {
  return intern(k, (kcg_expr){.kind = KCG_LOAD, .dtype = k->bufs[buf].dtype, .var = buf,
                              .a = index, .b = KCG_NONE, .c = pred});
}

static bool is_const_i64(const kcg_kernel *k, kcg_ref r, int64_t *v) {
  if (k->oom || r >= k->nexprs) return false;
  const kcg_expr *e = &k->exprs[r];
  if (e->kind != KCG_CONST || e->dtype != KILN_I64) return false;
  *v = e->i;
  return true;
}

/*
 * A derived op (kir_op_desc.expand): its formula built from primitives, so
 * that no renderer sees the op. f16 and bf16 operands compute it in f32 and
 * round once at the end, as the reference rounds it.
 */
static kcg_ref expand(kcg_kernel *k, const kir_expansion *e, kcg_ref x, kcg_ref y) {
  kir_dtype t = k->exprs[x].dtype;
  bool half = t == KILN_F16 || t == KILN_BF16;
  kir_dtype w = half ? KILN_F32 : t;
  kcg_ref args[2] = {half ? kcg_cast(k, w, x) : x, y == KCG_NONE || !half ? y : kcg_cast(k, w, y)};
  kcg_ref v[KIR_EXPAND_MAX] = {0};
  for (int i = 0; i <= e->root && !k->oom; i++) {
    const kir_expand_node *n = &e->nodes[i];
    v[i] = n->kind == KIR_EXPAND_ARG     ? args[n->arg]
           : n->kind == KIR_EXPAND_CONST ? kcg_const_f(k, w, n->v)
           : kir_op(n->op)->family == KIR_FAM_UNARY ? kcg_unary(k, n->op, v[n->a])
                                                    : kcg_binary(k, n->op, v[n->a], v[n->b]);
  }
  if (k->oom) return 0;
  return half ? kcg_cast(k, t, v[e->root]) : v[e->root];
}

kcg_ref kcg_unary(kcg_kernel *k, uint16_t op, kcg_ref a) {
  if (k->oom) return 0;
  const kir_expansion *e = kir_op_expansion(op);
  if (e && kir_dtype_is_float(k->exprs[a].dtype)) return expand(k, e, a, KCG_NONE);
  kir_dtype t = op == KIR_OP_is_finite ? KILN_BOOL : k->exprs[a].dtype;
  return intern(k, (kcg_expr){.kind = KCG_UNARY, .dtype = t, .op = op, .a = a, .b = KCG_NONE,
                              .c = KCG_NONE});
}

kcg_ref kcg_binary(kcg_kernel *k, uint16_t op, kcg_ref a, kcg_ref b) {
  if (k->oom) return 0;
  const kir_expansion *e = kir_op_expansion(op);
  if (e && kir_dtype_is_float(k->exprs[a].dtype)) return expand(k, e, a, b);
  int64_t x, y;
  if (is_const_i64(k, a, &x) && is_const_i64(k, b, &y)) {
    if (op == KIR_OP_add) return kcg_const_i(k, KILN_I64, (int64_t)((uint64_t)x + (uint64_t)y));
    if (op == KIR_OP_mul) return kcg_const_i(k, KILN_I64, (int64_t)((uint64_t)x * (uint64_t)y));
    if (op == KIR_OP_sub) return kcg_const_i(k, KILN_I64, (int64_t)((uint64_t)x - (uint64_t)y));
  }
  if (op == KIR_OP_add && is_const_i64(k, a, &x) && x == 0) return b;
  if ((op == KIR_OP_add || op == KIR_OP_sub) && is_const_i64(k, b, &y) && y == 0) return a;
  if (op == KIR_OP_mul && is_const_i64(k, a, &x) && (x == 1 || x == 0)) return x ? b : a;
  if (op == KIR_OP_mul && is_const_i64(k, b, &y) && (y == 1 || y == 0)) return y ? a : b;
  const kir_op_desc *d = kir_op(op);
  kir_dtype t = d->family == KIR_FAM_COMPARE ? KILN_BOOL : k->exprs[a].dtype;
  return intern(k, (kcg_expr){.kind = KCG_BINARY, .dtype = t, .op = op, .a = a, .b = b,
                              .c = KCG_NONE});
}

kcg_ref kcg_select(kcg_kernel *k, kcg_ref c, kcg_ref a, kcg_ref b) {
  if (k->oom) return 0;
  return intern(k, (kcg_expr){.kind = KCG_SELECT, .dtype = k->exprs[a].dtype, .a = c, .b = a,
                              .c = b});
}

kcg_ref kcg_cast(kcg_kernel *k, kir_dtype t, kcg_ref a) {
  if (k->oom) return 0;
  if (k->exprs[a].dtype == t) return a;
  return intern(k, (kcg_expr){.kind = KCG_CAST, .dtype = t, .a = a, .b = KCG_NONE, .c = KCG_NONE});
}

/* ---- statements ---- */

static uint32_t add_stmt(kcg_kernel *k, uint32_t parent, kcg_stmt s) {
  if (k->oom || !GROW(k, stmts, capstmts, k->nstmts + 1)) return KCG_NONE;
  uint32_t id = k->nstmts;
  k->stmts[k->nstmts++] = s;
  if (parent == KCG_NONE) {
    if (!GROW(k, root, caproot, k->nroot + 1)) return KCG_NONE;
    k->root[k->nroot++] = id;
  } else {
    kcg_stmt *p = &k->stmts[parent];
    if (!kir_arena_grow(k->arena, (void **)&p->body, &p->capbody, p->nbody + 1, sizeof *p->body)) {
      k->oom = true;
      return KCG_NONE;
    }
    p->body[p->nbody++] = id;
  }
  return id;
}

uint32_t kcg_for(kcg_kernel *k, uint32_t parent, kcg_ref extent, bool parallel, uint32_t *var) {
  *var = k->nvars++;
  return add_stmt(k, parent, (kcg_stmt){.kind = KCG_FOR, .var = *var, .a = extent,
                                        .b = KCG_NONE, .parallel = parallel});
}

void kcg_store(kcg_kernel *k, uint32_t parent, uint32_t buf, kcg_ref index, kcg_ref value) {
  add_stmt(k, parent, (kcg_stmt){.kind = KCG_STORE, .var = buf, .a = index, .b = value});
}

void kcg_assign(kcg_kernel *k, uint32_t parent, uint32_t local, kcg_ref value) {
  add_stmt(k, parent, (kcg_stmt){.kind = KCG_ASSIGN, .var = local, .a = value, .b = KCG_NONE});
}

void kcg_check(kcg_kernel *k, uint32_t parent, kcg_ref cond, const char *message) {
  if (k->oom || !GROW(k, errors, caperrors, k->nerrors + 1)) return;
  k->errors[k->nerrors] = kir_arena_strdup(k->arena, message);
  add_stmt(k, parent, (kcg_stmt){.kind = KCG_CHECK, .var = k->nerrors++, .a = cond,
                                 .b = KCG_NONE});
}

/* ---- printing ---- */

static void print_expr(const kcg_kernel *k, const kir_module *m, kcg_ref r, FILE *f) {
  const kcg_expr *e = &k->exprs[r];
  switch (e->kind) {
  case KCG_CONST:
    if (kir_dtype_is_float(e->dtype)) fprintf(f, "%.17g", e->f);
    else fprintf(f, "%lld", (long long)e->i);
    return;
  case KCG_INDEX: fprintf(f, "i%u", e->var); return;
  case KCG_SIZE: fprintf(f, "%s", m ? kir_symbol_name(m, KIR_SYM_DIM(e->var)) : "size"); return;
  case KCG_LOCAL: fprintf(f, "l%u", e->var); return;
  case KCG_LOAD:
    fprintf(f, "b%u[", e->var);
    print_expr(k, m, e->a, f);
    if (e->c != KCG_NONE) {
      fprintf(f, " if ");
      print_expr(k, m, e->c, f);
    }
    fprintf(f, "]");
    return;
  case KCG_UNARY:
    fprintf(f, "%s(", kir_op(e->op)->name);
    print_expr(k, m, e->a, f);
    fprintf(f, ")");
    return;
  case KCG_BINARY:
    fprintf(f, "%s(", kir_op(e->op)->name);
    print_expr(k, m, e->a, f);
    fprintf(f, ", ");
    print_expr(k, m, e->b, f);
    fprintf(f, ")");
    return;
  case KCG_SELECT:
    fprintf(f, "select(");
    print_expr(k, m, e->a, f);
    fprintf(f, ", ");
    print_expr(k, m, e->b, f);
    fprintf(f, ", ");
    print_expr(k, m, e->c, f);
    fprintf(f, ")");
    return;
  case KCG_CAST:
    fprintf(f, "cast<%s>(", kiln_dtype_name(e->dtype));
    print_expr(k, m, e->a, f);
    fprintf(f, ")");
    return;
  }
}

static void print_stmts(const kcg_kernel *k, const kir_module *m, const uint32_t *ids, uint32_t n,
                        int depth, FILE *f) {
  for (uint32_t s = 0; s < n; s++) {
    const kcg_stmt *st = &k->stmts[ids[s]];
    fprintf(f, "%*s", 2 * depth, "");
    switch (st->kind) {
    case KCG_FOR:
      fprintf(f, "%sfor i%u < ", st->parallel ? "parallel " : "", st->var);
      print_expr(k, m, st->a, f);
      fprintf(f, " {\n");
      print_stmts(k, m, st->body, st->nbody, depth + 1, f);
      fprintf(f, "%*s}\n", 2 * depth, "");
      break;
    case KCG_STORE:
      fprintf(f, "b%u[", st->var);
      print_expr(k, m, st->a, f);
      fprintf(f, "] = ");
      print_expr(k, m, st->b, f);
      fprintf(f, "\n");
      break;
    case KCG_ASSIGN:
      fprintf(f, "l%u = ", st->var);
      print_expr(k, m, st->a, f);
      fprintf(f, "\n");
      break;
    case KCG_CHECK:
      fprintf(f, "check ");
      print_expr(k, m, st->a, f);
      fprintf(f, " else \"%s\"\n", k->errors[st->var]);
      break;
    }
  }
}

void kcg_kernel_print(const kcg_kernel *k, const kir_module *m, FILE *f) {
  fprintf(f, "kernel %s(", k->name);
  for (uint32_t b = 0; b < k->nbufs; b++)
    fprintf(f, "%sb%u: %s%s%s", b ? ", " : "", b, k->bufs[b].written ? "out " : "",
            kiln_dtype_name(k->bufs[b].dtype), k->bufs[b].name ? "" : "");
  fprintf(f, ") {\n");
  for (uint32_t l = 0; l < k->nlocals; l++)
    fprintf(f, "  local l%u: %s\n", l, kiln_dtype_name(k->locals[l]));
  print_stmts(k, m, k->root, k->nroot, 1, f);
  fprintf(f, "}\n");
}

/* ---- structural identity (kcg_cpu_jit compiles each distinct kernel once) ---- */

static uint64_t mix(uint64_t h, uint64_t v) { /* FNV-1a over the 8 bytes of v */
  for (int i = 0; i < 8; i++, v >>= 8)
    h = (h ^ (v & 0xff)) * 0x100000001b3ull;
  return h;
}

/* The expressions an expression reads (KCG_NONE where it reads fewer). */
static void expr_kids(const kcg_expr *e, kcg_ref kids[3]) {
  bool leaf = e->kind == KCG_CONST || e->kind == KCG_INDEX || e->kind == KCG_SIZE ||
              e->kind == KCG_LOCAL;
  kids[0] = leaf ? KCG_NONE : e->a;
  kids[1] = e->kind == KCG_BINARY || e->kind == KCG_SELECT ? e->b : KCG_NONE;
  kids[2] = e->kind == KCG_LOAD || e->kind == KCG_SELECT ? e->c : KCG_NONE;
}

/* Whether statement i is the lone outermost parallel loop, whose bounds the caller passes. */
static bool par_root(const kcg_kernel *k, uint32_t i) {
  return k->nroot == 1 && k->root[0] == i && i < k->nstmts && k->stmts[i].kind == KCG_FOR &&
         k->stmts[i].parallel;
}

/*
 * What makes two kernels one function: their statements and the expressions those read, an
 * expression named by its place among the read ones. The extent of a lone outermost parallel
 * loop is not read — the CPU renderer takes that loop's bounds from its caller (lo, hi) and emits
 * an expression only where one is read — so kernels that differ there alone (the same optimizer
 * update over parameters of different sizes, whose extents leave different constants behind)
 * compile to one function. place[e] is e's place, UINT32_MAX where nothing reads it; expressions
 * are built children first, so one pass from the last marks what the rest reads. NULL when out
 * of memory.
 */
static uint32_t *read_places(const kcg_kernel *k, uint32_t *nread) {
  uint32_t *place = calloc(k->nexprs + 1u, sizeof *place);
  if (!place) return NULL;
  for (uint32_t i = 0; i < k->nstmts; i++) {
    const kcg_stmt *st = &k->stmts[i];
    if (st->a < k->nexprs && !par_root(k, i)) place[st->a] = 1;
    if (st->kind == KCG_STORE && st->b < k->nexprs) place[st->b] = 1;
  }
  for (uint32_t i = k->nexprs; i-- > 0;) {
    kcg_ref kids[3];
    expr_kids(&k->exprs[i], kids);
    for (int j = 0; place[i] && j < 3; j++)
      if (kids[j] < i) place[kids[j]] = 1;
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < k->nexprs; i++) place[i] = place[i] ? n++ : UINT32_MAX;
  *nread = n;
  return place;
}

static uint32_t placed(const uint32_t *place, const kcg_kernel *k, kcg_ref r) {
  return r < k->nexprs ? place[r] : r;
}

uint64_t kcg_kernel_hash(const kcg_kernel *k) {
  uint64_t h = 0xcbf29ce484222325ull;
  uint32_t n = 0, *place = read_places(k, &n);
  if (!place) return 0; /* kcg_kernel_same says no to such a kernel */
  h = mix(h, (uint64_t)k->nbufs << 32 | n);
  h = mix(h, (uint64_t)k->nstmts << 32 | k->nroot);
  for (uint32_t i = 0; i < k->nexprs; i++) {
    const kcg_expr *e = &k->exprs[i];
    if (place[i] == UINT32_MAX) continue;
    kcg_ref kids[3];
    expr_kids(e, kids);
    h = mix(h, (uint64_t)e->kind << 48 | (uint64_t)e->dtype << 32 | (uint64_t)e->op << 16);
    h = mix(h, (uint64_t)e->var << 32 | placed(place, k, kids[0]));
    h = mix(h, (uint64_t)placed(place, k, kids[1]) << 32 | placed(place, k, kids[2]));
    h = mix(h, (uint64_t)e->i);
  }
  for (uint32_t i = 0; i < k->nstmts; i++) {
    const kcg_stmt *st = &k->stmts[i];
    h = mix(h, (uint64_t)st->kind << 32 | st->var);
    h = mix(h, (uint64_t)(par_root(k, i) ? UINT32_MAX : placed(place, k, st->a)) << 32 |
                   (st->kind == KCG_STORE ? placed(place, k, st->b) : st->b));
  }
  free(place);
  return h;
}

static bool same_stmt(const kcg_kernel *ka, const uint32_t *pa, uint32_t i, const kcg_kernel *kb,
                      const uint32_t *pb) {
  const kcg_stmt *a = &ka->stmts[i], *b = &kb->stmts[i];
  bool store = a->kind == KCG_STORE;
  return a->kind == b->kind && a->var == b->var && a->parallel == b->parallel &&
         par_root(ka, i) == par_root(kb, i) &&
         (par_root(ka, i) || placed(pa, ka, a->a) == placed(pb, kb, b->a)) &&
         (store ? placed(pa, ka, a->b) == placed(pb, kb, b->b) : a->b == b->b) &&
         a->nbody == b->nbody && (!a->nbody || !memcmp(a->body, b->body, a->nbody * sizeof *a->body));
}

/* The read expressions of a and b, in order, alike (read_places). */
static bool same_reads(const kcg_kernel *a, const uint32_t *pa, const kcg_kernel *b,
                       const uint32_t *pb) {
  uint32_t j = 0;
  for (uint32_t i = 0; i < a->nexprs; i++) {
    if (pa[i] == UINT32_MAX) continue;
    while (j < b->nexprs && pb[j] == UINT32_MAX) j++;
    if (j == b->nexprs) return false;
    const kcg_expr *x = &a->exprs[i], *y = &b->exprs[j++];
    kcg_ref kx[3], ky[3];
    expr_kids(x, kx), expr_kids(y, ky);
    if (x->kind != y->kind || x->dtype != y->dtype || x->op != y->op || x->var != y->var ||
        x->i != y->i)
      return false;
    for (int c = 0; c < 3; c++)
      if (placed(pa, a, kx[c]) != placed(pb, b, ky[c])) return false;
  }
  return true;
}

bool kcg_kernel_same(const kcg_kernel *a, const kcg_kernel *b) {
  if (a->nbufs != b->nbufs || a->nsizes != b->nsizes || a->nstmts != b->nstmts ||
      a->nlocals != b->nlocals || a->nvars != b->nvars || a->nroot != b->nroot ||
      a->nerrors != b->nerrors || a->oom || b->oom)
    return false;
  for (uint32_t i = 0; i < a->nbufs; i++)
    if (a->bufs[i].dtype != b->bufs[i].dtype || a->bufs[i].written != b->bufs[i].written)
      return false;
  uint32_t na = 0, nb = 0, *pa = read_places(a, &na), *pb = read_places(b, &nb);
  bool same = pa && pb && na == nb;
  for (uint32_t i = 0; same && i < a->nstmts; i++) same = same_stmt(a, pa, i, b, pb);
  same = same && same_reads(a, pa, b, pb);
  free(pa);
  free(pb);
  if (!same) return false;
  for (uint32_t i = 0; i < a->nlocals; i++)
    if (a->locals[i] != b->locals[i]) return false;
  if (a->nroot && memcmp(a->root, b->root, a->nroot * sizeof *a->root)) return false;
  for (uint32_t i = 0; i < a->nerrors; i++)
    if (strcmp(a->errors[i], b->errors[i])) return false;
  return true;
}

