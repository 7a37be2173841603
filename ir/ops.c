/*
 * ops.c — the op table, built from ops.def.
 *
 * Each KIR_OP line becomes one kir_op_desc. The attribute signature strings
 * ("axes:ints keepdims:bool=false") are parsed once, on first use, into
 * kir_attr_spec entries that the builder, the parser, the printer and the
 * verifier all read. A malformed signature is a bug in ops.def, caught by the
 * table-walk test (tests/unit/test_optable.c) through kir_ops_check().
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

/* Family defaults, spelled once. */
#define UNARY_F(fn) .shape = kir_shape_unary, .ref = kir_ref_unary, .flags = KIR_F_FLOAT, .f1 = fn
#define UNARY_N(f, i)                                                                   \
  .shape = kir_shape_unary, .ref = kir_ref_unary, .flags = KIR_F_NUMERIC, .f1 = f, .i1 = i
#define UNARY_B(i) .shape = kir_shape_unary, .ref = kir_ref_unary, .flags = KIR_F_BOOL, .i1 = i
#define UNARY_I(i) .shape = kir_shape_unary, .ref = kir_ref_unary, .flags = KIR_F_INT, .i1 = i
#define BINARY_I(i) .shape = kir_shape_binary, .ref = kir_ref_binary, .flags = KIR_F_INT, .i2 = i
#define BINARY_F(fn) .shape = kir_shape_binary, .ref = kir_ref_binary, .flags = KIR_F_FLOAT, .f2 = fn
#define BINARY_N(f, i)                                                                  \
  .shape = kir_shape_binary, .ref = kir_ref_binary, .flags = KIR_F_NUMERIC, .f2 = f, .i2 = i
#define CMP_FNS(f, i)                                                                   \
  .shape = kir_shape_compare, .ref = kir_ref_binary, .flags = KIR_F_ANY, .f2 = f, .i2 = i
#define LOGIC_FNS(i) .shape = kir_shape_logical, .ref = kir_ref_binary, .flags = KIR_F_BOOL, .i2 = i
#define REDUCE_FNS(fl) .shape = kir_shape_reduce, .ref = kir_ref_reduce, .flags = (fl)

static kir_op_desc table[KIR_OP_COUNT] = {
#define KIR_OP(id, fam, mn, mx, no, sig, ...)                                           \
  [KIR_OP_##id] = {.name = #id,                                                         \
                   .family = KIR_FAM_##fam,                                             \
                   .min_in = mn,                                                        \
                   .max_in = mx,                                                        \
                   .nout = no,                                                          \
                   .signature = sig,                                                    \
                   __VA_ARGS__},
#include "ops.def"
#undef KIR_OP
};

static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static char table_error[256];

static const struct {
  const char *name;
  kir_attr_kind kind;
} attr_kinds[] = {
    {"int", KIR_ATTR_INT},       {"float", KIR_ATTR_FLOAT}, {"bool", KIR_ATTR_BOOL},
    {"ints", KIR_ATTR_INTS},     {"dims", KIR_ATTR_DIMS},   {"dim", KIR_ATTR_DIM},
    {"floats", KIR_ATTR_FLOATS}, {"dtype", KIR_ATTR_DTYPE}, {"graph", KIR_ATTR_GRAPH},
    {"enum", KIR_ATTR_ENUM},
};

static bool sig_fail(const kir_op_desc *d, const char *what) {
  if (!table_error[0])
    snprintf(table_error, sizeof table_error, "ops.def: op '%s': %s", d->name, what);
  return false;
}

/* Parses a default value `p[0..n)` for `spec`. */
static bool parse_default(kir_op_desc *d, kir_attr_spec *spec, const char *p, size_t n) {
  char buf[128];
  if (n >= sizeof buf) return sig_fail(d, "default too long");
  memcpy(buf, p, n);
  buf[n] = 0;
  char *end;
  switch (spec->kind) {
  case KIR_ATTR_INT:
  case KIR_ATTR_DIM:
    spec->def.i = strtoll(buf, &end, 10);
    return *end ? sig_fail(d, "bad int default") : true;
  case KIR_ATTR_FLOAT:
    spec->def.f = strtod(buf, &end);
    return *end ? sig_fail(d, "bad float default") : true;
  case KIR_ATTR_BOOL:
    if (!strcmp(buf, "true") || !strcmp(buf, "false")) {
      spec->def.i = buf[0] == 't';
      return true;
    }
    return sig_fail(d, "bad bool default");
  case KIR_ATTR_INTS: {
    if (buf[0] != '[' || buf[n - 1] != ']') return sig_fail(d, "bad list default");
    uint32_t k = 0;
    char *s = buf + 1;
    while (*s && *s != ']') {
      if (k == 8) return sig_fail(d, "list default too long");
      spec->def_store[k++] = strtoll(s, &end, 10);
      if (end == s) return sig_fail(d, "bad list default");
      s = end;
      if (*s == ',') s++;
    }
    spec->def.n = k;
    spec->def.ints = spec->def_store;
    return true;
  }
  case KIR_ATTR_ENUM:
    for (uint8_t i = 0; i < spec->nchoices; i++)
      if (!strcmp(spec->choices[i], buf)) {
        spec->def.i = i;
        return true;
      }
    return sig_fail(d, "enum default is not a choice");
  default:
    return sig_fail(d, "this kind takes no default");
  }
}

/* Parses "name:kind[(choices)][=default]" words into d->attr[]. */
static bool parse_signature(kir_op_desc *d) {
  const char *p = d->signature;
  while (*p) {
    while (*p == ' ') p++;
    if (!*p) break;
    if (d->nattrs == KIR_MAX_ATTRS) return sig_fail(d, "too many attributes");
    kir_attr_spec *spec = &d->attr[d->nattrs++];
    const char *colon = strchr(p, ':');
    if (!colon) return sig_fail(d, "attribute without kind");
    size_t nlen = (size_t)(colon - p);
    char *name = malloc(nlen + 1); /* lives as long as the process, like the table */
    if (!name) return sig_fail(d, "out of memory");
    memcpy(name, p, nlen);
    name[nlen] = 0;
    spec->name = name;
    p = colon + 1;
    const char *k = p;
    while (isalpha((unsigned char)*p)) p++;
    size_t klen = (size_t)(p - k);
    bool found = false;
    for (size_t i = 0; i < sizeof attr_kinds / sizeof attr_kinds[0]; i++)
      if (strlen(attr_kinds[i].name) == klen && !memcmp(attr_kinds[i].name, k, klen)) {
        spec->kind = attr_kinds[i].kind;
        found = true;
      }
    if (!found) return sig_fail(d, "unknown attribute kind");
    if (spec->kind == KIR_ATTR_ENUM) {
      if (*p != '(') return sig_fail(d, "enum without choices");
      p++;
      while (*p != ')') {
        const char *c = p;
        while (*p && *p != '|' && *p != ')') p++;
        if (!*p || spec->nchoices == KIR_MAX_CHOICES) return sig_fail(d, "bad enum choices");
        char *choice = malloc((size_t)(p - c) + 1);
        if (!choice) return sig_fail(d, "out of memory");
        memcpy(choice, c, (size_t)(p - c));
        choice[p - c] = 0;
        spec->choices[spec->nchoices++] = choice;
        if (*p == '|') p++;
      }
      p++;
    }
    if (*p == '=') {
      p++;
      const char *v = p;
      while (*p && *p != ' ') p++;
      if (!parse_default(d, spec, v, (size_t)(p - v))) return false;
    } else {
      spec->required = true;
    }
    if (*p && *p != ' ') return sig_fail(d, "junk after attribute");
  }
  return true;
}

#ifdef KILN_DEVICE_RUNTIME
/* Inside a `kiln compile --target` shared object, which may be dlclose'd: the parsed names go
   with it (in libkiln they live as long as the process). */
__attribute__((destructor)) static void free_table(void) {
  for (int i = 0; i < KIR_OP_COUNT; i++)
    for (int a = 0; a < table[i].nattrs; a++) {
      free((char *)table[i].attr[a].name);
      for (int c = 0; c < table[i].attr[a].nchoices; c++) free((char *)table[i].attr[a].choices[c]);
    }
}
#endif

static kir_expansion expansions[KIR_OP_COUNT];
static bool expansion_ok[KIR_OP_COUNT];

static void init_table(void) {
  for (int i = 0; i < KIR_OP_COUNT; i++)
    parse_signature(&table[i]);
}

/* Parsed after the table (a formula names other ops), once. */
static pthread_once_t expand_once = PTHREAD_ONCE_INIT;

static void init_expansions(void) {
  for (int i = 0; i < KIR_OP_COUNT; i++) {
    char err[200];
    if (!table[i].expand) continue;
    expansion_ok[i] = kir_expansion_parse(table[i].expand, &expansions[i], err, sizeof err);
    if (!expansion_ok[i]) sig_fail(&table[i], err);
  }
}

const kir_expansion *kir_op_expansion(uint16_t op) {
  const kir_op_desc *d = kir_op(op);
  if (!d || !d->expand) return NULL;
  pthread_once(&expand_once, init_expansions);
  return expansion_ok[op] ? &expansions[op] : NULL;
}

const kir_op_desc *kir_op(uint16_t op) {
  pthread_once(&table_once, init_table);
  return op < KIR_OP_COUNT ? &table[op] : NULL;
}

bool kir_op_is_fold(uint16_t op) {
  const kir_op_desc *d = kir_op(op);
  return d && d->reduce.init != KIR_REDUCE_NONE;
}

void kir_dtype_int_range(kir_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
  case KILN_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
  case KILN_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
  case KILN_U8: *lo = 0, *hi = UINT8_MAX; break;
  case KILN_BOOL: *lo = 0, *hi = 1; break;
  default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

double kir_reduce_identity_f(const kir_op_desc *d) {
  switch (d->reduce.init) {
  case KIR_REDUCE_ONE: return 1.0;
  case KIR_REDUCE_LEAST: return -INFINITY;
  case KIR_REDUCE_GREATEST: return INFINITY;
  default: return 0.0;
  }
}

int64_t kir_reduce_identity_i(const kir_op_desc *d, kir_dtype t) {
  int64_t lo, hi;
  kir_dtype_int_range(t, &lo, &hi);
  switch (d->reduce.init) {
  case KIR_REDUCE_ONE: return 1;
  case KIR_REDUCE_LEAST: return lo;
  case KIR_REDUCE_GREATEST: return hi;
  default: return 0;
  }
}

/* Non-NULL if ops.def has a malformed signature: a build defect, tested. */
const char *kir_ops_check(void) {
  pthread_once(&table_once, init_table);
  pthread_once(&expand_once, init_expansions);
  return table_error[0] ? table_error : NULL;
}

bool kir_op_lookup(const char *name, size_t n, uint16_t *out) {
  pthread_once(&table_once, init_table);
  for (uint16_t i = 0; i < KIR_OP_COUNT; i++)
    if (strlen(table[i].name) == n && !memcmp(table[i].name, name, n)) {
      *out = i;
      return true;
    }
  return false;
}

bool kir_op_is_map(uint16_t op) {
  const kir_op_desc *d = kir_op(op);
  if (!d) return false;
  return d->family == KIR_FAM_UNARY || d->family == KIR_FAM_BINARY ||
         d->family == KIR_FAM_COMPARE || d->family == KIR_FAM_LOGICAL || op == KIR_OP_broadcast;
}

int kir_op_attr_index(const kir_op_desc *d, const char *name, size_t n) {
  for (int i = 0; i < d->nattrs; i++)
    if (strlen(d->attr[i].name) == n && !memcmp(d->attr[i].name, name, n)) return i;
  return -1;
}
