/*
 * core.c — layer values, constructor calls, parameter trees and model graphs.
 *
 * Everything here is shared by every route into the catalogue: the .kiln
 * evaluator, the C API and the zoo call constructors through kl_call(),
 * which checks arguments against the signature in catalogue.def, so one
 * constructor behaves the same everywhere. kl_build_graph() turns a layer
 * into an ordinary IR graph whose parameters are the model's parameters,
 * named by path, followed by its inputs.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/budget.h"
#include "layers/layers.h"

/* ------------------------------------------------------------- arguments */

kl_arg kl_int(int64_t v) { return (kl_arg){.kind = KL_A_INT, .i = v, .f = (double)v}; }
kl_arg kl_float(double v) { return (kl_arg){.kind = KL_A_FLOAT, .f = v}; }
kl_arg kl_bool(bool v) { return (kl_arg){.kind = KL_A_BOOL, .b = v}; }
kl_arg kl_str(const char *s) { return s ? (kl_arg){.kind = KL_A_STR, .s = s} : kl_none(); }
kl_arg kl_none(void) { return (kl_arg){.kind = KL_A_NONE}; }
kl_arg kl_layer_arg(kl_layer *l) { return (kl_arg){.kind = KL_A_LAYER, .layer = l}; }

static const char *akind_name(kl_akind k) {
  switch (k) {
  case KL_A_NONE: return "none";
  case KL_A_INT: return "int";
  case KL_A_FLOAT: return "float";
  case KL_A_BOOL: return "bool";
  case KL_A_STR: return "string";
  case KL_A_LIST: return "list";
  case KL_A_LAYER: return "layer";
  case KL_A_FN: return "function";
  }
  return "?";
}

static void arg_free(kl_arg *a) {
  switch (a->kind) {
  case KL_A_STR: free((char *)a->s); break;
  case KL_A_LIST:
    for (uint32_t i = 0; i < a->n; i++) arg_free(&a->items[i]);
    free(a->items);
    break;
  case KL_A_LAYER: kl_layer_release(a->layer); break;
  case KL_A_FN: kl_fn_release(a->fn); break;
  default: break;
  }
  *a = kl_none();
}

/* A deep copy: strings and lists duplicated, layers and functions retained. */
static bool arg_copy(kl_arg *dst, const kl_arg *src) {
  *dst = *src;
  switch (src->kind) {
  case KL_A_STR:
    if (!(dst->s = strdup(src->s))) return *dst = kl_none(), false;
    return true;
  case KL_A_LIST:
    dst->items = src->n ? calloc(src->n, sizeof *dst->items) : NULL;
    if (src->n && !dst->items) return *dst = kl_none(), false;
    for (uint32_t i = 0; i < src->n; i++)
      if (!arg_copy(&dst->items[i], &src->items[i])) {
        dst->n = i;
        arg_free(dst);
        return false;
      }
    return true;
  case KL_A_LAYER: kl_layer_retain(src->layer); return true;
  case KL_A_FN: kl_fn_retain(src->fn); return true;
  default: return true;
  }
}

/* ------------------------------------------------------------- functions */

kl_fn *kl_fn_new(kiln_ctx *ctx, uint32_t nparams, kl_fn_call call, void *closure,
                 void (*free_closure)(void *), const char *text) {
  kl_fn *f = calloc(1, sizeof *f);
  char *t = strdup(text ? text : "fn");
  if (!f || !t) {
    free(f);
    free(t);
    if (free_closure) free_closure(closure);
    kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    return NULL;
  }
  *f = (kl_fn){1, nparams, call, closure, free_closure, t};
  return f;
}

void kl_fn_retain(kl_fn *f) {
  if (f) f->refs++;
}

void kl_fn_release(kl_fn *f) {
  if (!f || --f->refs) return;
  if (f->free_closure) f->free_closure(f->closure);
  free((char *)f->text);
  free(f);
}

/* ------------------------------------------------------------- layers */

kl_layer *kl_layer_new(kiln_ctx *ctx, const kl_impl *impl, const char *ctor, const kl_arg *args,
                       uint32_t nargs) {
  kl_layer *l = calloc(1, sizeof *l);
  if (!l) goto oom;
  l->refs = 1;
  l->impl = impl;
  l->ctor = ctor;
  if (nargs) {
    if (!(l->args = calloc(nargs, sizeof *l->args))) goto oom;
    for (uint32_t i = 0; i < nargs; i++, l->nargs++)
      if (!arg_copy(&l->args[i], &args[i])) goto oom;
  }
  return l;
oom:
  kl_layer_release(l);
  kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  return NULL;
}

kiln_status kl_layer_add_kid(kiln_ctx *ctx, kl_layer *l, const char *name, kl_layer *kid) {
  if (!kid) return KILN_ERR_INVALID; /* the child's constructor already said why */
  kl_layer **k = realloc(l->kids, (l->nkids + 1) * sizeof *k);
  if (k) l->kids = k;
  const char **nm = realloc(l->kid_names, (l->nkids + 1) * sizeof *nm);
  if (nm) l->kid_names = nm;
  char *dup = name ? strdup(name) : NULL;
  if (!k || !nm || (name && !dup)) {
    free(dup);
    kl_layer_release(kid);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  l->kids[l->nkids] = kid;
  l->kid_names[l->nkids++] = dup;
  return KILN_OK;
}

void kl_layer_retain(kl_layer *l) {
  if (l) l->refs++;
}

void kl_layer_release(kl_layer *l) {
  if (!l || --l->refs) return;
  for (uint32_t i = 0; i < l->nargs; i++) arg_free(&l->args[i]);
  free(l->args);
  for (uint32_t i = 0; i < l->nkids; i++) {
    kl_layer_release(l->kids[i]);
    free((char *)l->kid_names[i]);
  }
  free(l->kids);
  free(l->kid_names);
  if (l->free_data) l->free_data(l->data);
  free(l);
}

void kiln_layer_retain(kiln_layer *l) { kl_layer_retain(l); }
void kiln_layer_release(kiln_layer *l) { kl_layer_release(l); }

/* --------------------------------------------------------- constructors */

static const kl_ctor ctors[] = {
#define KL_CTOR(name, sig, doc) {#name, sig, kl_make_##name, doc},
#include "catalogue.def"
#undef KL_CTOR
};

size_t kl_ctor_count(void) { return sizeof ctors / sizeof ctors[0]; }
const kl_ctor *kl_ctor_at(size_t i) { return i < kl_ctor_count() ? &ctors[i] : NULL; }

const kl_ctor *kl_ctor_find(const char *name) {
  for (size_t i = 0; i < kl_ctor_count(); i++)
    if (!strcmp(ctors[i].name, name)) return &ctors[i];
  return NULL;
}

#define KL_MAX_ARGS 16

/* One parsed item of a signature: `name:type[?][=default]`. */
typedef struct sig_item {
  char name[32], type[16], def[48];
  bool nullable, has_def, variadic;
} sig_item;

static uint32_t sig_parse(const char *sig, sig_item *it) {
  uint32_t n = 0;
  for (const char *p = sig; *p && n < KL_MAX_ARGS;) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *end = p;
    /* A default list "[16, 32]" holds spaces: the item ends at a space outside [...] */
    int depth = 0;
    while (*end && (depth || *end != ' ')) {
      if (*end == '[') depth++;
      if (*end == ']') depth--;
      end++;
    }
    sig_item *s = &it[n++];
    memset(s, 0, sizeof *s);
    const char *colon = memchr(p, ':', (size_t)(end - p));
    snprintf(s->name, sizeof s->name, "%.*s", (int)(colon - p), p);
    const char *t = colon + 1, *eq = memchr(t, '=', (size_t)(end - t));
    const char *tend = eq ? eq : end;
    if (tend > t && tend[-1] == '?') s->nullable = true, tend--;
    if (tend > t && tend[-1] == '*') s->variadic = true, tend--;
    snprintf(s->type, sizeof s->type, "%.*s", (int)(tend - t), t);
    if (eq) {
      s->has_def = true;
      snprintf(s->def, sizeof s->def, "%.*s", (int)(end - eq - 1), eq + 1);
    }
    p = end;
  }
  return n;
}

/* Temporary storage of one call: default lists, converted layers. */
typedef struct call_tmp {
  kl_arg items[64];
  uint32_t nitems;
  kl_layer *made[64];
  uint32_t nmade;
} call_tmp;

static kl_arg parse_scalar(const char *s) {
  if (!strcmp(s, "none")) return kl_none();
  if (!strcmp(s, "true")) return kl_bool(true);
  if (!strcmp(s, "false")) return kl_bool(false);
  char *end;
  if ((*s >= '0' && *s <= '9') || *s == '-') {
    if (strpbrk(s, ".eE")) return kl_float(strtod(s, &end));
    return kl_int(strtoll(s, &end, 10));
  }
  return kl_str(s);
}

/* The default text of `it` as an argument (lists live in tmp, strings in `it`). */
static kl_arg parse_default(sig_item *it, call_tmp *tmp) {
  if (it->def[0] != '[') return parse_scalar(it->def);
  kl_arg list = {.kind = KL_A_LIST, .items = tmp->items + tmp->nitems};
  char *p = it->def + 1;
  while (*p && *p != ']' && tmp->nitems < 64) {
    while (*p == ' ' || *p == ',') p++;
    char *e = p;
    while (*e && *e != ',' && *e != ']') e++;
    char save = *e;
    *e = 0; /* stays: a string item points into it->def */
    if (*p) tmp->items[tmp->nitems++] = parse_scalar(p), list.n++;
    if (save != ',') break;
    p = e + 1;
  }
  return list;
}

static kiln_status bad_type(kiln_ctx *ctx, const char *fn, const sig_item *it, const char *want,
                            const kl_arg *got) {
  return kir_fail(ctx, KILN_ERR_INVALID, "%s(): argument '%s' must be %s, not %s", fn, it->name,
                  want, akind_name(got->kind));
}

/* A string or function where a layer is expected becomes activation(...). */
static kiln_status to_layer(kiln_ctx *ctx, const char *fn, const sig_item *it, kl_arg *a,
                            call_tmp *tmp) {
  if (a->kind == KL_A_LAYER) return a->layer ? KILN_OK : KILN_ERR_INVALID;
  if (a->kind != KL_A_STR && a->kind != KL_A_FN) return bad_type(ctx, fn, it, "a layer", a);
  if (tmp->nmade == 64) return kir_fail(ctx, KILN_ERR_INVALID, "%s(): too many layers", fn);
  kl_layer *l = NULL;
  kiln_status s = kl_call(ctx, "activation", 1, a, 0, NULL, NULL, &l);
  if (s) return s;
  tmp->made[tmp->nmade++] = l;
  *a = kl_layer_arg(l);
  return KILN_OK;
}

/*
 * The largest magnitude an int argument may have: every int of the catalogue is a size, a count,
 * an axis or an index, and 2^40 is beyond any tensor that can be allocated while leaving room for
 * the arithmetic the constructors do on sizes (4 * hidden, n_in + hidden, heads * n_out, ...)
 * without overflowing 64 bits.
 */
#define KL_INT_ARG_MAX ((int64_t)1 << 40)

static kiln_status int_in_range(kiln_ctx *ctx, const char *fn, const sig_item *it, int64_t v,
                                int item) {
  if (v >= -KL_INT_ARG_MAX && v <= KL_INT_ARG_MAX) return KILN_OK;
  char which[32] = "";
  if (item >= 0) snprintf(which, sizeof which, " item %d", item);
  return kir_fail(ctx, KILN_ERR_INVALID, "%s(): argument '%s'%s = %lld is out of range (at most 2^40)",
                  fn, it->name, which, (long long)v);
}

/* Checks and converts argument `a` for item `it` in place. */
static kiln_status coerce(kiln_ctx *ctx, const char *fn, const sig_item *it, kl_arg *a,
                          call_tmp *tmp) {
  const char *t = it->type;
  if (a->kind == KL_A_NONE) {
    if (it->nullable || !strcmp(t, "any")) return KILN_OK;
    return kir_fail(ctx, KILN_ERR_INVALID, "%s(): argument '%s' may not be none", fn, it->name);
  }
  if (!strcmp(t, "int")) {
    if (a->kind == KL_A_INT) return int_in_range(ctx, fn, it, a->i, -1);
    if (a->kind == KL_A_FLOAT && a->f == floor(a->f) && fabs(a->f) < 9e15) {
      *a = kl_int((int64_t)a->f);
      return int_in_range(ctx, fn, it, a->i, -1);
    }
    return bad_type(ctx, fn, it, "an int", a);
  }
  if (!strcmp(t, "float")) {
    if (a->kind == KL_A_INT) *a = kl_float((double)a->i);
    return a->kind == KL_A_FLOAT ? KILN_OK : bad_type(ctx, fn, it, "a number", a);
  }
  if (!strcmp(t, "bool")) return a->kind == KL_A_BOOL ? KILN_OK : bad_type(ctx, fn, it, "a bool", a);
  if (!strcmp(t, "str")) return a->kind == KL_A_STR ? KILN_OK : bad_type(ctx, fn, it, "a string", a);
  if (!strcmp(t, "fn")) return a->kind == KL_A_FN ? KILN_OK : bad_type(ctx, fn, it, "a function", a);
  if (!strcmp(t, "act"))
    return a->kind == KL_A_STR || a->kind == KL_A_FN
               ? KILN_OK
               : bad_type(ctx, fn, it, "an activation name or function", a);
  if (!strcmp(t, "any")) return KILN_OK;
  if (!strcmp(t, "layer")) return to_layer(ctx, fn, it, a, tmp);
  if (a->kind != KL_A_LIST) {
    if (!strcmp(t, "strs") && a->kind == KL_A_STR) {
      if (tmp->nitems == 64) return kir_fail(ctx, KILN_ERR_INVALID, "%s(): too many items", fn);
      tmp->items[tmp->nitems] = *a;
      *a = (kl_arg){.kind = KL_A_LIST, .items = &tmp->items[tmp->nitems++], .n = 1};
      return KILN_OK;
    }
    return bad_type(ctx, fn, it, "a list", a);
  }
  if (!strcmp(t, "list")) return KILN_OK;
  /* Element-wise lists: convert into a copy in tmp so the caller's list is untouched. */
  if (tmp->nitems + a->n > 64)
    return kir_fail(ctx, KILN_ERR_INVALID, "%s(): argument '%s' has too many items", fn, it->name);
  kl_arg *items = &tmp->items[tmp->nitems];
  if (a->n) memcpy(items, a->items, a->n * sizeof *items);
  tmp->nitems += a->n;
  a->items = items;
  for (uint32_t i = 0; i < a->n; i++) {
    kl_arg *e = &items[i];
    if (!strcmp(t, "ints")) {
      if (e->kind == KL_A_FLOAT && e->f == floor(e->f) && fabs(e->f) < 9e15)
        *e = kl_int((int64_t)e->f); /* only floats that are exact ints in range */
      if (e->kind != KL_A_INT)
        return kir_fail(ctx, KILN_ERR_INVALID, "%s(): argument '%s' must be a list of ints, item %u is %s",
                        fn, it->name, i, akind_name(e->kind));
      kiln_status s = int_in_range(ctx, fn, it, e->i, (int)i);
      if (s) return s;
    } else if (!strcmp(t, "strs")) {
      if (e->kind != KL_A_STR)
        return kir_fail(ctx, KILN_ERR_INVALID,
                        "%s(): argument '%s' must be a list of strings, item %u is %s", fn,
                        it->name, i, akind_name(e->kind));
    } else if (!strcmp(t, "layers")) {
      kiln_status s = to_layer(ctx, fn, it, e, tmp);
      if (s) return s;
    }
  }
  return KILN_OK;
}

kiln_status kl_call(kiln_ctx *ctx, const char *name, uint32_t npos, const kl_arg *pos,
                    uint32_t nkw, const char *const *kwnames, const kl_arg *kw, kl_layer **out) {
  *out = NULL;
  const kl_ctor *c = kl_ctor_find(name);
  if (!c) return kir_fail(ctx, KILN_ERR_INVALID, "unknown layer '%s'", name);
  sig_item it[KL_MAX_ARGS];
  uint32_t n = sig_parse(c->sig, it);
  kl_arg args[KL_MAX_ARGS];
  bool given[KL_MAX_ARGS] = {0};
  call_tmp *tmp = calloc(1, sizeof *tmp);
  if (!tmp) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  kiln_status s = KILN_OK;
  uint32_t p = 0;
  for (uint32_t i = 0; i < n && p < npos; i++) {
    if (it[i].variadic) { /* the rest of the positional arguments */
      if (npos - p > 64 - tmp->nitems) {
        s = kir_fail(ctx, KILN_ERR_INVALID, "%s(): too many arguments", name);
        goto done;
      }
      args[i] = (kl_arg){.kind = KL_A_LIST, .items = &tmp->items[tmp->nitems], .n = npos - p};
      memcpy(&tmp->items[tmp->nitems], &pos[p], (npos - p) * sizeof *pos);
      tmp->nitems += npos - p;
      p = npos;
    } else {
      args[i] = pos[p++];
    }
    given[i] = true;
  }
  if (p < npos) {
    s = kir_fail(ctx, KILN_ERR_INVALID, "%s() takes %u argument%s but %u were given", name, n,
                 n == 1 ? "" : "s", npos);
    goto done;
  }
  for (uint32_t k = 0; k < nkw; k++) {
    uint32_t i = 0;
    while (i < n && strcmp(it[i].name, kwnames[k])) i++;
    if (i == n) {
      char valid[KL_MAX_ARGS * 34] = "";
      for (uint32_t j = 0; j < n; j++) {
        if (j) strcat(valid, ", ");
        strcat(valid, it[j].name); /* names are under 32 bytes */
      }
      s = kir_fail(ctx, KILN_ERR_INVALID, "%s(): unknown argument '%s' (its arguments: %s)", name,
                   kwnames[k], n ? valid : "none");
      goto done;
    }
    if (given[i]) {
      s = kir_fail(ctx, KILN_ERR_INVALID, "%s(): argument '%s' is given twice", name, kwnames[k]);
      goto done;
    }
    args[i] = kw[k];
    given[i] = true;
  }
  for (uint32_t i = 0; i < n; i++) {
    if (!given[i]) {
      if (it[i].variadic) {
        args[i] = (kl_arg){.kind = KL_A_LIST};
      } else if (!it[i].has_def) {
        s = kir_fail(ctx, KILN_ERR_INVALID, "%s(): missing argument '%s'", name, it[i].name);
        goto done;
      } else {
        args[i] = parse_default(&it[i], tmp);
      }
    }
    if (it[i].variadic) {
      sig_item one = it[i];
      snprintf(one.type, sizeof one.type, "ints");
      if ((s = coerce(ctx, name, &one, &args[i], tmp))) goto done;
    } else if ((s = coerce(ctx, name, &it[i], &args[i], tmp))) {
      goto done;
    }
  }
  s = c->make(ctx, args, out);
  if (s) {
    kl_layer_release(*out);
    *out = NULL;
  }
done:
  for (uint32_t i = 0; i < tmp->nmade; i++) kl_layer_release(tmp->made[i]);
  free(tmp);
  return s;
}

static kl_layer *kl_vmk(kiln_ctx *ctx, const char *ctor, const char *fmt, va_list ap) {
  kl_arg pos[KL_MAX_ARGS], kw[KL_MAX_ARGS];
  const char *kwn[KL_MAX_ARGS];
  char names[KL_MAX_ARGS][32];
  uint32_t npos = 0, nkw = 0;
  kl_layer *owned[KL_MAX_ARGS + 64];
  uint32_t nowned = 0;
  kl_arg lists[KL_MAX_ARGS][64];
  uint32_t nlists = 0;
  bool bad = false;
  for (const char *p = fmt; *p;) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *end = p;
    while (*end && *end != ' ') end++;
    const char *eq = memchr(p, '=', (size_t)(end - p));
    const char *t = eq ? eq + 1 : p;
    kl_arg a = kl_none();
    size_t tl = (size_t)(end - t);
    if (tl == 1 && *t == 'i') a = kl_int(va_arg(ap, int64_t));
    else if (tl == 1 && *t == 'f') a = kl_float(va_arg(ap, double));
    else if (tl == 1 && *t == 'b') a = kl_bool(va_arg(ap, int) != 0);
    else if (tl == 1 && *t == 's') a = kl_str(va_arg(ap, const char *));
    else if (tl == 1 && *t == 'n') a = kl_none();
    else if (tl == 1 && *t == 'F') a = (kl_arg){.kind = KL_A_FN, .fn = va_arg(ap, kl_fn *)};
    else if (tl == 1 && *t == 'L') {
      kl_layer *l = va_arg(ap, kl_layer *);
      if (!l) bad = true;
      else owned[nowned++] = l;
      a = kl_layer_arg(l);
    } else if (tl == 1 && *t == 'I') {
      size_t n = va_arg(ap, size_t);
      const int64_t *v = va_arg(ap, const int64_t *);
      if (n > 64 || nlists == KL_MAX_ARGS) bad = true;
      else {
        for (size_t i = 0; i < n; i++) lists[nlists][i] = kl_int(v[i]);
        a = (kl_arg){.kind = KL_A_LIST, .items = lists[nlists++], .n = (uint32_t)n};
      }
    } else if (tl == 2 && t[0] == 'L' && t[1] == 's') {
      size_t n = va_arg(ap, size_t);
      kl_layer **v = va_arg(ap, kl_layer **);
      if (n > 64 || nlists == KL_MAX_ARGS) bad = true;
      for (size_t i = 0; i < n; i++) {
        if (!v[i]) bad = true;
        else if (nowned < KL_MAX_ARGS + 64) owned[nowned++] = v[i];
      }
      if (n <= 64 && nlists < KL_MAX_ARGS) {
        for (size_t i = 0; i < n; i++) lists[nlists][i] = kl_layer_arg(v[i]);
        a = (kl_arg){.kind = KL_A_LIST, .items = lists[nlists++], .n = (uint32_t)n};
      }
    } else {
      bad = true;
      kir_fail(ctx, KILN_ERR_INVALID, "%s: bad argument format '%s'", ctor, fmt);
      break;
    }
    if (eq) {
      if (nkw < KL_MAX_ARGS) {
        snprintf(names[nkw], sizeof names[nkw], "%.*s", (int)(eq - p), p);
        kwn[nkw] = names[nkw];
        kw[nkw++] = a;
      }
    } else if (npos < KL_MAX_ARGS) {
      pos[npos++] = a;
    }
    p = end;
  }
  kl_layer *out = NULL;
  /* A NULL layer means its constructor failed and already set the message. */
  if (!bad) kl_call(ctx, ctor, npos, pos, nkw, kwn, kw, &out);
  for (uint32_t i = 0; i < nowned; i++) kl_layer_release(owned[i]);
  return out;
}

kl_layer *kl_mk(kiln_ctx *ctx, const char *ctor, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_layer *l = kl_vmk(ctx, ctor, fmt, ap);
  va_end(ap);
  return l;
}

kiln_layer *kiln_layer_call(kiln_ctx *ctx, const char *ctor, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_layer *l = kl_vmk(ctx, ctor, fmt, ap);
  va_end(ap);
  return l;
}

static const sig_item *find_item(const kl_layer *l, const char *name, uint32_t *idx) {
  static _Thread_local sig_item it[KL_MAX_ARGS];
  const kl_ctor *c = kl_ctor_find(l->ctor);
  uint32_t n = c ? sig_parse(c->sig, it) : 0;
  for (uint32_t i = 0; i < n && i < l->nargs; i++)
    if (!strcmp(it[i].name, name)) {
      *idx = i;
      return &it[i];
    }
  return NULL;
}

const kl_arg *kl_get(const kl_layer *l, const char *name) {
  static const kl_arg none = {.kind = KL_A_NONE};
  uint32_t i;
  return find_item(l, name, &i) ? &l->args[i] : &none;
}

int64_t kl_geti(const kl_layer *l, const char *name) { return kl_get(l, name)->i; }
double kl_getf(const kl_layer *l, const char *name) { return kl_get(l, name)->f; }
bool kl_getb(const kl_layer *l, const char *name) { return kl_get(l, name)->b; }
const char *kl_gets(const kl_layer *l, const char *name) {
  const kl_arg *a = kl_get(l, name);
  return a->kind == KL_A_STR ? a->s : NULL;
}
bool kl_is_none(const kl_layer *l, const char *name) { return kl_get(l, name)->kind == KL_A_NONE; }

/* ----------------------------------------------------------- parameters */

kl_init kl_he(int64_t fan_in) { return (kl_init){KL_INIT_NORMAL, sqrt(2.0 / (double)fan_in)}; }
kl_init kl_glorot(int64_t fan_in, int64_t fan_out) {
  return (kl_init){KL_INIT_UNIFORM, sqrt(6.0 / (double)(fan_in + fan_out))};
}

/* One row of a summary: a layer at a path and the parameters under it. */
typedef struct sum_row {
  uint32_t depth;
  char *path;
  const kl_layer *layer;
  int64_t count;
} sum_row;

struct kl_decl {
  kiln_ctx *ctx;
  kl_plist *out;
  char prefix[512];
  size_t plen;
  const kl_layer *owner;
  uint32_t depth;
  sum_row *rows; /* NULL unless a summary is being made */
  uint32_t nrows, caprows;
};

kiln_status kl_decl_tensor(kl_decl *d, const char *name, uint32_t rank, const int64_t *dims,
                           kl_init init) {
  kl_plist *pl = d->out;
  if (rank > KIR_MAX_RANK) return kir_fail(d->ctx, KILN_ERR_INVALID, "parameter rank %u", rank);
  int64_t elems = 1;
  for (uint32_t i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return kir_fail(d->ctx, KILN_ERR_INVALID, "%s: parameter '%s%s' has a negative size",
                      d->owner->ctor, d->prefix, name);
    /* no parameter past 2^48 elements (a petabyte of f32): sums of counts stay in 64 bits */
    if (__builtin_mul_overflow(elems, dims[i], &elems) || elems > ((int64_t)1 << 48))
      return kir_fail(d->ctx, KILN_ERR_INVALID,
                      "%s: parameter '%s%s' would have more than 2^48 elements", d->owner->ctor,
                      d->prefix, name);
  }
  if (pl->n == pl->cap) {
    uint32_t cap = pl->cap ? 2 * pl->cap : 16;
    kl_pinfo *p = realloc(pl->p, cap * sizeof *p);
    if (!p) return kir_fail(d->ctx, KILN_ERR_NOMEM, "out of memory");
    pl->p = p;
    pl->cap = cap;
  }
  kl_pinfo *p = &pl->p[pl->n];
  memset(p, 0, sizeof *p);
  size_t len = d->plen + strlen(name) + 1;
  if (!(p->path = malloc(len))) return kir_fail(d->ctx, KILN_ERR_NOMEM, "out of memory");
  snprintf(p->path, len, "%s%s", d->prefix, name);
  p->rank = rank;
  if (rank) memcpy(p->dims, dims, rank * sizeof *dims);
  p->init = init;
  p->owner = d->owner;
  pl->n++;
  return KILN_OK;
}

static kiln_status declare_layer(kl_decl *d, const kl_layer *l);

kiln_status kl_decl_child(kl_decl *d, const char *name, const kl_layer *kid) {
  size_t save = d->plen, nlen = strlen(name);
  if (save + nlen + 2 > sizeof d->prefix)
    return kir_fail(d->ctx, KILN_ERR_INVALID, "parameter path '%s%s' is too long", d->prefix, name);
  if (d->depth >= 100) return kir_fail(d->ctx, KILN_ERR_INVALID, "layers nested too deeply");
  memcpy(d->prefix + save, name, nlen);
  d->prefix[save + nlen] = '.';
  d->prefix[save + nlen + 1] = 0;
  d->plen = save + nlen + 1;
  const kl_layer *owner = d->owner;
  d->depth++;
  kiln_status s = declare_layer(d, kid);
  d->depth--;
  d->owner = owner;
  d->plen = save;
  d->prefix[save] = 0;
  return s;
}

static kiln_status declare_layer(kl_decl *d, const kl_layer *l) {
  uint32_t row = UINT32_MAX, first = d->out->n;
  if (d->rows || d->caprows == UINT32_MAX) {
    if (d->nrows == d->caprows || !d->rows) {
      uint32_t cap = d->rows ? 2 * d->caprows : 64;
      sum_row *r = realloc(d->rows, cap * sizeof *r);
      if (!r) return kir_fail(d->ctx, KILN_ERR_NOMEM, "out of memory");
      d->rows = r;
      d->caprows = cap;
    }
    row = d->nrows++;
    d->rows[row] = (sum_row){d->depth, strdup(d->prefix), l, 0};
  }
  d->owner = l;
  kiln_status s = KILN_OK;
  if (l->impl->declare) {
    s = l->impl->declare(d, l);
  } else {
    for (uint32_t i = 0; i < l->nkids && !s; i++) {
      char idx[24];
      snprintf(idx, sizeof idx, "%u", i);
      s = kl_decl_child(d, l->kid_names[i] ? l->kid_names[i] : idx, l->kids[i]);
    }
  }
  if (row != UINT32_MAX) {
    int64_t count = 0;
    for (uint32_t i = first; i < d->out->n; i++) {
      int64_t e = 1;
      for (uint32_t k = 0; k < d->out->p[i].rank; k++) e *= d->out->p[i].dims[k];
      count += e;
    }
    d->rows[row].count = count;
  }
  return s;
}

void kl_plist_free(kl_plist *pl) {
  for (uint32_t i = 0; i < pl->n; i++) free(pl->p[i].path);
  free(pl->p);
  memset(pl, 0, sizeof *pl);
}

static kiln_status params_walk(kiln_ctx *ctx, const kl_layer *l, kl_plist *out, kl_decl *d) {
  memset(out, 0, sizeof *out);
  d->ctx = ctx;
  d->out = out;
  d->owner = l;
  kiln_status s = declare_layer(d, l);
  /* Two declarations of one path would make two parameters of one name. */
  for (uint32_t i = 0; i < out->n && !s; i++)
    for (uint32_t j = i + 1; j < out->n && !s; j++)
      if (!strcmp(out->p[i].path, out->p[j].path))
        s = kir_fail(ctx, KILN_ERR_INVALID, "two parameters are named '%s'", out->p[i].path);
  if (s) kl_plist_free(out);
  return s;
}

kiln_status kl_params_of(kiln_ctx *ctx, const kl_layer *l, kl_plist *out) {
  kl_decl d = {0};
  return params_walk(ctx, l, out, &d);
}

static uint32_t fnv1a32(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

/* Two words as a double in [0, 1) with 53 random bits. */
static double unit53(uint32_t hi, uint32_t lo) {
  return ldexp((double)(((uint64_t)(hi >> 5) << 26) | (lo >> 6)), -53);
}

void kl_init_fill(const kl_init *init, uint64_t seed, const char *path, double *out, size_t n) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const uint32_t h = fnv1a32(path);
  const double two_pi = 6.283185307179586476925286766559;
  for (size_t i = 0; i < n; i++) {
    const uint32_t ctr[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), h, 0};
    uint32_t w[4];
    switch (init->kind) {
    case KL_INIT_ZEROS: out[i] = 0; break;
    case KL_INIT_ONES: out[i] = 1; break;
    case KL_INIT_FORGET_BIAS:
      out[i] = (double)i >= init->a && (double)i < 2 * init->a ? 1.0 : 0.0;
      break;
    case KL_INIT_UNIFORM:
      kir_philox4x32(ctr, key, w);
      out[i] = init->a * (2.0 * unit53(w[0], w[1]) - 1.0);
      break;
    case KL_INIT_NORMAL:
      kir_philox4x32(ctr, key, w);
      out[i] = init->a * sqrt(-2.0 * log(1.0 - unit53(w[0], w[1]))) *
               cos(two_pi * unit53(w[2], w[3]));
      break;
    }
  }
}

/*
 * Initialising is one request to the memory budget (ir/budget.h): every
 * parameter at once, and the float64 scratch the largest is drawn into.
 * Refused before anything is allocated, naming the largest parameter.
 */
static kiln_status init_fits(kiln_ctx *ctx, const kl_plist *pl, kiln_dtype t) {
  uint64_t total = 0, most = 0;
  uint32_t big = 0;
  for (uint32_t i = 0; i < pl->n; i++) {
    uint64_t b = kir_shape_bytes(kiln_dtype_size(t), (int)pl->p[i].rank, pl->p[i].dims);
    total = b > UINT64_MAX - total ? UINT64_MAX : total + b;
    if (b >= most) most = b, big = i;
  }
  uint64_t scratch = most / kiln_dtype_size(t) * 8;
  total = scratch > UINT64_MAX - total ? UINT64_MAX : total + scratch;
  kir_budget budget = kir_memory_budget(kir_ctx_opts(ctx), NULL);
  char why[256], shape[200];
  if (!pl->n || kir_budget_fits(&budget, total, why, sizeof why)) return KILN_OK;
  kir_format_shape(t, (int)pl->p[big].rank, pl->p[big].dims, shape, sizeof shape);
  return kir_fail(ctx, KILN_ERR_NOMEM,
                  "init: %u parameters (the largest '%s', %s) and a float64 copy of the largest "
                  "need %s",
                  pl->n, pl->p[big].path, shape, why);
}

kiln_status kiln_layer_init(kiln_ctx *ctx, const kiln_layer *model, uint64_t seed, kiln_dtype t,
                            kiln_params **out) {
  *out = NULL;
  if (t != KILN_F64 && t != KILN_F32 && t != KILN_F16 && t != KILN_BF16)
    return kir_fail(ctx, KILN_ERR_INVALID, "init: parameters must have a float dtype, not %s",
                    kiln_dtype_name(t));
  kl_plist pl;
  kiln_status s = kl_params_of(ctx, model, &pl);
  if (s) return s;
  kiln_params *p = NULL;
  double *buf = NULL;
  if ((s = init_fits(ctx, &pl, t)) || (s = kiln_params_create(ctx, &p))) goto done;
  for (uint32_t i = 0; i < pl.n && !s; i++) {
    kiln_tensor *tt = NULL;
    if ((s = kir_tensor_create_named(ctx, pl.p[i].path, t, pl.p[i].rank, pl.p[i].dims, &tt)))
      break;
    size_t n = kiln_tensor_numel(tt);
    double *nb = realloc(buf, (n ? n : 1) * sizeof *buf);
    if (!nb) {
      kiln_tensor_destroy(tt);
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
      break;
    }
    buf = nb;
    kl_init_fill(&pl.p[i].init, seed, pl.p[i].path, buf, n);
    for (size_t e = 0; e < n; e++) kiln_tensor_set(tt, e, buf[e]);
    s = kiln_params_add(p, pl.p[i].path, tt);
  }
done:
  free(buf);
  kl_plist_free(&pl);
  if (s) kiln_params_destroy(p);
  else *out = p;
  return s;
}

kiln_status kiln_layer_count_params(kiln_ctx *ctx, const kiln_layer *model, int64_t *out) {
  kl_plist pl;
  *out = 0;
  kiln_status s = kl_params_of(ctx, model, &pl);
  if (s) return s;
  for (uint32_t i = 0; i < pl.n; i++) {
    int64_t e = 1;
    for (uint32_t k = 0; k < pl.p[i].rank; k++) e *= pl.p[i].dims[k];
    *out += e;
  }
  kl_plist_free(&pl);
  return KILN_OK;
}

/* The arguments of a layer as written: "4, 3, bias=false" (defaults left out is too
 * costly to decide here, so every scalar argument is shown). */
static void format_args(const kl_layer *l, char *buf, size_t cap) {
  sig_item it[KL_MAX_ARGS];
  const kl_ctor *c = kl_ctor_find(l->ctor);
  uint32_t n = c ? sig_parse(c->sig, it) : 0;
  size_t len = 0;
  buf[0] = 0;
  for (uint32_t i = 0; i < n && i < l->nargs && len + 1 < cap; i++) {
    const kl_arg *a = &l->args[i];
    const char *sep = len ? ", " : "";
    int w = 0;
    switch (a->kind) {
    case KL_A_INT: w = snprintf(buf + len, cap - len, "%s%lld", sep, (long long)a->i); break;
    case KL_A_FLOAT: w = snprintf(buf + len, cap - len, "%s%s=%g", sep, it[i].name, a->f); break;
    case KL_A_BOOL:
      w = snprintf(buf + len, cap - len, "%s%s=%s", sep, it[i].name, a->b ? "true" : "false");
      break;
    case KL_A_STR: w = snprintf(buf + len, cap - len, "%s\"%s\"", sep, a->s); break;
    case KL_A_FN: w = snprintf(buf + len, cap - len, "%s%s", sep, a->fn->text); break;
    case KL_A_LIST:
      if (a->n && a->items[0].kind == KL_A_INT) {
        w = snprintf(buf + len, cap - len, "%s[", sep);
        for (uint32_t k = 0; k < a->n && w >= 0 && len + (size_t)w < cap; k++)
          w += snprintf(buf + len + w, cap - len - w, "%s%lld", k ? ", " : "",
                        (long long)a->items[k].i);
        if (w >= 0 && len + (size_t)w < cap) w += snprintf(buf + len + w, cap - len - w, "]");
      }
      break;
    default: break;
    }
    if (w < 0) break;
    len += (size_t)w;
    if (len >= cap) {
      buf[cap - 1] = 0;
      break;
    }
  }
}

kiln_status kiln_layer_summary(kiln_ctx *ctx, const kiln_layer *model, char **out) {
  *out = NULL;
  kl_plist pl;
  kl_decl d = {.caprows = UINT32_MAX};
  kiln_status s = params_walk(ctx, model, &pl, &d);
  if (s) {
    for (uint32_t i = 0; i < d.nrows; i++) free(d.rows[i].path);
    free(d.rows);
    return s;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  else {
    fprintf(f, "%-32s %-44s %12s\n", "path", "layer", "parameters");
    int64_t total = 0;
    for (uint32_t i = 0; i < d.nrows; i++) {
      const sum_row *r = &d.rows[i];
      char args[160], label[200], path[64];
      format_args(r->layer, args, sizeof args);
      snprintf(label, sizeof label, "%*s%s(%s)", (int)(2 * r->depth), "", r->layer->ctor, args);
      size_t pl2 = strlen(r->path);
      snprintf(path, sizeof path, "%.*s", (int)(pl2 ? pl2 - 1 : 0), r->path);
      fprintf(f, "%-32s %-44s %12lld\n", pl2 ? path : "(model)", label, (long long)r->count);
      if (i == 0) total = r->count;
    }
    fprintf(f, "total parameters: %lld\n", (long long)total);
    fclose(f);
    *out = text;
  }
  for (uint32_t i = 0; i < d.nrows; i++) free(d.rows[i].path);
  free(d.rows);
  kl_plist_free(&pl);
  return s;
}

/* The highest leading index of the names ("2.W" -> 2); -1 if a name has none. */
static int64_t max_index(size_t n, const kiln_params *p, const kl_plist *pl) {
  int64_t best = -1;
  for (size_t i = 0; i < n; i++) {
    const char *name = p ? kiln_params_name(p, i) : pl->p[i].path;
    char *end;
    long long v = strtoll(name, &end, 10);
    if (end == name || *end != '.') return -1;
    if (v > best) best = v;
  }
  return best;
}

kiln_status kiln_layer_check_params(kiln_ctx *ctx, const kiln_layer *model, const kiln_params *p) {
  kl_plist pl;
  kiln_status s = kl_params_of(ctx, model, &pl);
  if (s) return s;
  /* Parameters of another sequential model: the reference's message, which counts the
   * entries of the parameter list (here: the highest leading index + 1). */
  if (!strcmp(model->impl->name, "sequential")) {
    int64_t want = max_index(pl.n, NULL, &pl), got = max_index(kiln_params_count(p), p, NULL);
    if (want != got && got >= 0)
      s = kir_fail(ctx, KILN_ERR_INVALID, "sequential: %u layers but %lld parameter entries",
                   model->nkids, (long long)got + 1);
  }
  for (uint32_t i = 0; i < pl.n && !s; i++) {
    const kiln_tensor *t = kiln_params_find(p, pl.p[i].path);
    if (!t) {
      s = kir_fail(ctx, KILN_ERR_INVALID, "parameter '%s' is missing (the model has %u parameters, the file %zu)",
                   pl.p[i].path, pl.n, kiln_params_count(p));
      break;
    }
    bool same = kiln_tensor_rank(t) == pl.p[i].rank;
    for (uint32_t k = 0; same && k < pl.p[i].rank; k++)
      same = kiln_tensor_dim(t, k) == pl.p[i].dims[k];
    if (!same) {
      char want[128] = "[", got[128] = "[";
      for (uint32_t k = 0; k < pl.p[i].rank; k++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", k ? ", " : "",
                 (long long)pl.p[i].dims[k]);
      for (size_t k = 0; k < kiln_tensor_rank(t); k++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", k ? ", " : "",
                 (long long)kiln_tensor_dim(t, k));
      s = kir_fail(ctx, KILN_ERR_INVALID, "parameter '%s' has shape %s], the model expects %s]",
                   pl.p[i].path, got, want);
    }
  }
  for (size_t i = 0; i < kiln_params_count(p) && !s; i++) {
    const char *name = kiln_params_name(p, i);
    uint32_t k = 0;
    while (k < pl.n && strcmp(pl.p[k].path, name)) k++;
    if (k == pl.n)
      s = kir_fail(ctx, KILN_ERR_INVALID, "parameter '%s' is not a parameter of this model", name);
  }
  kl_plist_free(&pl);
  return s;
}

/* -------------------------------------------------------------- building */

kl_val kl_tensor(kiln_value v) { return (kl_val){.v = v}; }

kl_val kl_list(kl_build *b, uint32_t n) {
  kl_val l = {.is_list = true, .v = KILN_NO_VALUE, .n = n};
  l.items = kir_arena_alloc(&b->arena, (n ? n : 1) * sizeof *l.items);
  if (!l.items) l.n = 0;
  for (uint32_t i = 0; l.items && i < n; i++) l.items[i] = kl_tensor(KILN_NO_VALUE);
  return l;
}

kiln_status kl_fail(kl_build *b, const kl_layer *l, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kir_fail(b->ctx, KILN_ERR_TYPE, "%s: %s", l ? l->ctor : "model", msg);
}

kiln_status kl_check(kl_build *b) { return kiln_graph_status(b->g); }

kiln_status kl_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in, kl_val *out) {
  *out = kl_tensor(KILN_NO_VALUE);
  if (kl_check(b)) return kl_check(b);
  if (!in.is_list && in.v == KILN_NO_VALUE) return kl_fail(b, l, "no input");
  kiln_status s = l->impl->apply(b, l, path, in, out);
  if (!s) s = kl_check(b);
  return s;
}

kiln_status kl_apply_child(kl_build *b, const kl_layer *kid, const char *path, const char *name,
                           kl_val in, kl_val *out) {
  size_t len = strlen(path) + strlen(name) + 2;
  char *p = kir_arena_alloc(&b->arena, len);
  if (!p) return kir_fail(b->ctx, KILN_ERR_NOMEM, "out of memory");
  snprintf(p, len, "%s%s.", path, name);
  return kl_apply(b, kid, p, in, out);
}

kiln_value kl_param(kl_build *b, const char *path, const char *name) {
  size_t pl = strlen(path);
  for (uint32_t i = 0; i < b->params.n; i++) {
    const char *p = b->params.p[i].path;
    if (!strncmp(p, path, pl) && !strcmp(p + pl, name)) return b->pvals[i];
  }
  kir_fail(b->ctx, KILN_ERR_INVALID, "no parameter named '%s%s'", path, name);
  kir_graph_fail(b->g, KILN_ERR_INVALID, "no parameter named '%s%s'", path, name);
  return KILN_NO_VALUE;
}

kiln_value kl_graph_batch(kl_build *b) {
  if (!b->graph.present) return KILN_NO_VALUE;
  if (b->graph.batch == KILN_NO_VALUE) {
    char name[160];
    snprintf(name, sizeof name, "%s.batch", b->graph.name);
    kiln_dim n = b->graph.nodes;
    b->graph.batch = kiln_graph_param(b->g, name, KILN_I64, 1, &n);
    /* The number of graphs G is the length of NAME.graphs (one entry per graph, e.g.
     * its id: only the length is read), so G is known when the model runs. */
    snprintf(name, sizeof name, "%s.graphs", b->graph.name);
    kiln_graph_param(b->g, name, KILN_I64, 1, &b->graph.graphs);
  }
  return b->graph.batch;
}

kiln_value kl_scalar(kl_build *b, double v) { return kiln_scalar(b->g, b->dt, v); }

uint32_t kl_rank(kl_build *b, kiln_value v) { return (uint32_t)kiln_value_rank(b->g, v); }

kiln_dim kl_dim(kl_build *b, kiln_value v, int axis) {
  int r = (int)kiln_value_rank(b->g, v);
  if (axis < 0) axis += r;
  return axis >= 0 && axis < r ? kiln_value_dim(b->g, v, (size_t)axis) : 0;
}

kiln_value kl_affine(kl_build *b, kiln_value x, kiln_value W, kiln_value bias) {
  kiln_value y = kiln_matmul(b->g, x, W);
  return bias == KILN_NO_VALUE ? y : kiln_add(b->g, y, bias);
}

kiln_value kl_random(kl_build *b, uint32_t rank, const kiln_dim *dims, const char *dist) {
  if (b->seed == KILN_NO_VALUE) b->seed = kiln_graph_param(b->g, "seed", KILN_I64, 0, NULL);
  kiln_attr at[4] = {kiln_attr_dtype("dtype", b->dt), kiln_attr_dims("shape", rank, dims),
                     kiln_attr_enum("dist", dist), kiln_attr_int("stream", b->next_stream++)};
  return kiln_op(b->g, "random", 1, &b->seed, 4, at);
}

/* ------------------------------------------------------------- activations */

static const char *const act_names[] = {"relu",       "gelu",    "silu",    "swish",
                                        "mish",       "elu",     "leaky_relu", "tanh",
                                        "sigmoid",    "softplus", "softmax", "linear",
                                        "identity"};

bool kl_activation_valid(const char *name) {
  for (size_t i = 0; i < sizeof act_names / sizeof *act_names; i++)
    if (!strcmp(name, act_names[i])) return true;
  return false;
}

const char *kl_activation_names(void) {
  return "relu, gelu, silu, swish, mish, elu, leaky_relu, tanh, sigmoid, softplus, softmax, "
         "linear, identity";
}

kiln_status kl_activation(kl_build *b, const char *name, kiln_value x, kiln_value *out) {
  kiln_graph *g = b->g;
  kiln_value y = KILN_NO_VALUE;
  if (!strcmp(name, "relu")) {
    y = kiln_binary(g, "max", x, kl_scalar(b, 0));
  } else if (!strcmp(name, "gelu")) { /* the catalogue's gelu is the tanh approximation */
    y = kiln_unary(g, "gelu_tanh", x);
  } else if (!strcmp(name, "swish")) {
    y = kiln_unary(g, "silu", x);
  } else if (!strcmp(name, "leaky_relu")) {
    kiln_value pos = kiln_binary(g, "gt", x, kl_scalar(b, 0));
    kiln_value in[3] = {pos, x, kiln_mul(g, x, kl_scalar(b, 0.01))};
    y = kiln_op(g, "select", 3, in, 0, NULL);
  } else if (!strcmp(name, "silu") || !strcmp(name, "mish") || !strcmp(name, "elu") ||
             !strcmp(name, "tanh") || !strcmp(name, "sigmoid") || !strcmp(name, "softplus")) {
    y = kiln_unary(g, name, x); /* ops of the IR (ir/ops.def) */
  } else if (!strcmp(name, "softmax")) {
    kiln_attr ax = kiln_attr_int("axis", (int64_t)kl_rank(b, x) - 1); /* the last axis */
    y = kiln_op(g, "softmax", 1, &x, 1, &ax);
  } else if (!strcmp(name, "linear") || !strcmp(name, "identity")) {
    y = x;
  } else {
    return kir_fail(b->ctx, KILN_ERR_INVALID, "unknown activation '%s' (valid: %s)", name,
                    kl_activation_names());
  }
  *out = y;
  return kl_check(b);
}

static kiln_status activation_apply(kl_build *b, const kl_layer *l, const char *path, kl_val in,
                                    kl_val *out) {
  (void)path;
  const kl_arg *fn = kl_get(l, "fn");
  if (fn->kind == KL_A_FN) return fn->fn->call(b, fn->fn->closure, 1, &in, out);
  if (in.is_list) return kl_fail(b, l, "expects one tensor, got a list of %u", in.n);
  *out = kl_tensor(KILN_NO_VALUE);
  return kl_activation(b, fn->s, in.v, &out->v);
}

static const kl_impl activation_impl = {"activation", NULL, activation_apply};

kiln_status kl_make_activation(kiln_ctx *ctx, const kl_arg *a, kl_layer **out) {
  if (a[0].kind == KL_A_STR && !kl_activation_valid(a[0].s))
    return kir_fail(ctx, KILN_ERR_INVALID, "unknown activation '%s' (valid: %s)", a[0].s,
                    kl_activation_names());
  *out = kl_layer_new(ctx, &activation_impl, "activation", a, 1);
  return *out ? KILN_OK : KILN_ERR_NOMEM;
}

/* ------------------------------------------------------------ model graph */

kiln_status kl_flatten_results(kl_build *b, kl_val v, kiln_value *res, size_t *n, size_t cap) {
  if (!v.is_list) {
    if (*n == cap) return kir_fail(b->ctx, KILN_ERR_INVALID, "the model has too many outputs");
    res[(*n)++] = v.v;
    return KILN_OK;
  }
  for (uint32_t i = 0; i < v.n; i++) {
    kiln_status s = kl_flatten_results(b, v.items[i], res, n, cap);
    if (s) return s;
  }
  return KILN_OK;
}

static kiln_value input_param(kl_build *b, const kiln_model_input *in, const char *suffix,
                              kiln_dtype t, size_t rank, const kiln_dim *dims) {
  char name[160];
  snprintf(name, sizeof name, "%s%s", in->name, suffix);
  return kiln_graph_param(b->g, name, t, rank, dims);
}

kiln_status kl_build_graph(kiln_ctx *ctx, const kl_layer *model, size_t n_inputs,
                           const kiln_model_input *inputs, const kiln_build_opts *opts,
                           kiln_graph **out) {
  *out = NULL;
  kl_build b = {.ctx = ctx, .dt = opts ? opts->dtype : KILN_F32, .train = opts && opts->train,
                .seed = KILN_NO_VALUE, .mask = KILN_NO_VALUE};
  b.graph.src = b.graph.dst = b.graph.batch = KILN_NO_VALUE;
  if (b.dt != KILN_F64 && b.dt != KILN_F32 && b.dt != KILN_F16 && b.dt != KILN_BF16)
    return kir_fail(ctx, KILN_ERR_INVALID, "the model's dtype must be a float type, not %s",
                    kiln_dtype_name(b.dt));
  kiln_status s = kl_params_of(ctx, model, &b.params);
  if (s) return s;
  if ((s = kiln_graph_create(ctx, "model", &b.g))) goto fail;
  if (!(b.pvals = calloc(b.params.n + 1, sizeof *b.pvals))) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto fail;
  }
  for (uint32_t i = 0; i < b.params.n; i++) {
    kiln_dim dims[KIR_MAX_RANK];
    memcpy(dims, b.params.p[i].dims, sizeof dims);
    b.pvals[i] = kiln_graph_param(b.g, b.params.p[i].path, b.dt, b.params.p[i].rank, dims);
  }
  kiln_value xs[64];
  uint32_t nx = 0;
  kiln_dim first_dim = 0;
  for (size_t i = 0; i < n_inputs; i++) {
    const kiln_model_input *in = &inputs[i];
    kiln_dim dims[KIR_MAX_RANK] = {0};
    if (in->rank > KIR_MAX_RANK) {
      s = kir_fail(ctx, KILN_ERR_INVALID, "input '%s' has rank %zu (at most %d)", in->name,
                   in->rank, KIR_MAX_RANK);
      goto fail;
    }
    for (size_t k = 0; k < in->rank; k++)
      dims[k] = in->syms && in->syms[k] ? kiln_graph_symbol(b.g, in->syms[k])
                                        : (in->dims ? in->dims[k] : 0);
    if (in->kind == KILN_INPUT_GRAPH) {
      if (b.graph.present) {
        s = kir_fail(ctx, KILN_ERR_INVALID, "a model takes at most one graph input");
        goto fail;
      }
      kiln_dim e = kiln_graph_symbol(b.g, "E");
      b.graph.present = true;
      b.graph.name = in->name;
      b.graph.src = input_param(&b, in, ".src", KILN_I64, 1, &e);
      b.graph.dst = input_param(&b, in, ".dst", KILN_I64, 1, &e);
      b.graph.graphs = kiln_graph_symbol(b.g, "G");
    } else if (in->kind == KILN_INPUT_MASK) {
      b.mask = input_param(&b, in, "", in->dtype, in->rank, dims);
    } else {
      if (nx == 64) {
        s = kir_fail(ctx, KILN_ERR_INVALID, "a model takes at most 64 inputs");
        goto fail;
      }
      if (nx == 0) first_dim = in->rank ? dims[0] : 1;
      xs[nx++] = input_param(&b, in, "", in->dtype, in->rank, dims);
    }
  }
  if (nx == 0) {
    s = kir_fail(ctx, KILN_ERR_INVALID, "the model has no input: declare one (input x: f32[N, 4])");
    goto fail;
  }
  b.graph.nodes = first_dim;
  kl_val x = kl_tensor(xs[0]);
  if (nx > 1) {
    x = kl_list(&b, nx);
    for (uint32_t i = 0; i < nx && x.items; i++) x.items[i] = kl_tensor(xs[i]);
  }
  kl_val y;
  if ((s = kl_check(&b)) || (s = kl_apply(&b, model, "", x, &y))) goto fail;
  kiln_value res[64];
  size_t nres = 0;
  if ((s = kl_flatten_results(&b, y, res, &nres, 64))) goto fail;
  if ((s = kiln_graph_set_results(b.g, nres, res)) || (s = kiln_graph_verify(b.g))) goto fail;
  *out = b.g;
  b.g = NULL;
fail:
  kiln_graph_destroy(b.g);
  free(b.pvals);
  kl_plist_free(&b.params);
  kir_arena_free(&b.arena);
  return s;
}

kiln_status kiln_layer_build(kiln_ctx *ctx, const kiln_layer *model, size_t n_inputs,
                             const kiln_model_input *inputs, const kiln_build_opts *opts,
                             kiln_graph **out) {
  return kl_build_graph(ctx, model, n_inputs, inputs, opts, out);
}
