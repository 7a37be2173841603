/*
 * shape_elementwise.c — shape rules of the sources (constant, iota, random)
 * and of the elementwise ops (unary, binary, compare, logical, select, cast),
 * plus the small checks every shape rule shares.
 *
 * A shape rule is the op's type system: kir_add_inst() runs it before an
 * instruction exists, and kir_verify() runs it again after passes rewrite a
 * graph, so it must be a pure function of the operand types and attributes.
 * Elementwise ops never promote: operands of different dtypes are an error
 * whose message suggests the cast, because a silent promotion would change
 * the precision that mixed-precision passes decide explicitly. Which dtypes
 * an op takes comes from its `flags` in ops.def, so this file names no op.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops_impl.h"

/* ---- checks shared by every shape rule ---- */

void kir_format_dim(const kir_module *m, kir_dim d, char *buf, size_t n) {
  if (KIR_DIM_IS_SYM(d))
    snprintf(buf, n, "%s", kir_symbol_name(m, d));
  else
    snprintf(buf, n, "%lld", (long long)d);
}

static bool dtype_fits(kir_dtype t, uint32_t flags) {
  if ((unsigned)t >= KILN_DTYPE_COUNT) return false;
  if (kir_dtype_is_float(t)) return flags & KIR_F_FLOAT;
  if (t == KILN_BOOL) return flags & KIR_F_BOOL;
  return flags & KIR_F_INT;
}

/* The dtypes that `flags` allow, in words. */
static const char *dtype_class(uint32_t flags) {
  switch (flags & KIR_F_ANY) {
  case KIR_F_FLOAT:
    return "float";
  case KIR_F_INT:
    return "integer";
  case KIR_F_BOOL:
    return "bool";
  case KIR_F_NUMERIC:
    return "float or integer";
  case KIR_F_INT | KIR_F_BOOL:
    return "integer or bool";
  case KIR_F_FLOAT | KIR_F_BOOL:
    return "float or bool";
  default:
    return "any";
  }
}

bool kir_shape_check_dtype(kir_shape_ctx *sc, uint32_t i) {
  kir_dtype t = sc->in[i].dtype;
  if (dtype_fits(t, sc->op->flags)) return true;
  return kir_shape_error(sc, "operand %u has dtype %s; %s takes %s operands", i, kiln_dtype_name(t),
                         sc->op->name, dtype_class(sc->op->flags));
}

bool kir_shape_same_dtype(kir_shape_ctx *sc, uint32_t ref, uint32_t i) {
  if (sc->in[i].dtype == sc->in[ref].dtype) return true;
  return kir_shape_error(sc, "operand %u has dtype %s, operand %u has %s (insert a cast)", i,
                         kiln_dtype_name(sc->in[i].dtype), ref, kiln_dtype_name(sc->in[ref].dtype));
}

bool kir_shape_check_axis(kir_shape_ctx *sc, int64_t axis, int rank) {
  if (axis >= 0 && axis < rank) return true;
  return kir_shape_error(sc, "axis %lld is out of range for rank %d", (long long)axis, rank);
}

bool kir_shape_read_dims(kir_shape_ctx *sc, int a, kir_type *t) {
  const kir_attr *at = &sc->attrs[a];
  const char *name = sc->op->attr[a].name;
  if (at->n > KIR_MAX_RANK)
    return kir_shape_error(sc, "attribute '%s' has %u dims, more than %d", name, at->n,
                           KIR_MAX_RANK);
  for (uint32_t i = 0; i < at->n; i++) {
    kir_dim d = at->ints[i];
    if (KIR_DIM_IS_SYM(d) && KIR_DIM_SYM(d) >= sc->g->mod->nsyms)
      return kir_shape_error(sc,
                             "attribute '%s': dim %u is %lld, which is no symbol of this "
                             "module (give every dim; there is no -1)",
                             name, i, (long long)d);
    t->dims[i] = d;
  }
  t->rank = (uint8_t)at->n;
  return true;
}

/* Reads dtype attribute `a` into t->dtype; `flags` say which dtypes the op makes. */
static bool read_dtype_attr(kir_shape_ctx *sc, int a, uint32_t flags, kir_type *t) {
  int64_t v = sc->attrs[a].i;
  if (v < 0 || v >= KILN_DTYPE_COUNT)
    return kir_shape_error(sc, "attribute '%s' is %lld, which is no dtype", sc->op->attr[a].name,
                           (long long)v);
  if (!dtype_fits((kir_dtype)v, flags))
    return kir_shape_error(sc, "attribute '%s' is %s; %s makes %s tensors", sc->op->attr[a].name,
                           kiln_dtype_name((kir_dtype)v), sc->op->name, dtype_class(flags));
  t->dtype = (kir_dtype)v;
  return true;
}

static bool has_symbol(const kir_type *t) {
  for (int i = 0; i < t->rank; i++)
    if (KIR_DIM_IS_SYM(t->dims[i])) return true;
  return false;
}

/* ---- sources ---- */

/* An integer or bool literal must be exact: the reference keeps it as an int64. */
static bool check_int_value(kir_shape_ctx *sc, kir_dtype t, uint32_t i, double v) {
  if (t == KILN_BOOL && v != 0 && v != 1)
    return kir_shape_error(sc, "value[%u] is %g; a bool constant takes 0 or 1", i, v);
  if (v != floor(v) || !(v >= -0x1p63 && v < 0x1p63))
    return kir_shape_error(sc, "value[%u] is %g; a %s constant takes integers", i, v,
                           kiln_dtype_name(t));
  return true;
}

bool kir_shape_constant(kir_shape_ctx *sc) {
  kir_type *t = &sc->out[0];
  if (!read_dtype_attr(sc, 0, sc->op->flags, t) || !kir_shape_read_dims(sc, 1, t)) return false;
  const kir_attr *v = &sc->attrs[2];
  if (has_symbol(t)) {
    if (v->n != 1)
      return kir_shape_error(sc, "a shape with symbols takes one value to splat, got %u", v->n);
  } else {
    int64_t n = kir_type_numel(t);
    if (n < 0) return kir_shape_error(sc, "the shape has more elements than an int64 counts");
    if ((int64_t)v->n != n && v->n != 1) {
      char buf[160];
      kir_format_type(sc->g->mod, t, buf, sizeof buf);
      return kir_shape_error(sc, "attribute 'value' has %u values; %s needs %lld (or 1 to splat)",
                             v->n, buf, (long long)n);
    }
  }
  if (!kir_dtype_is_float(t->dtype))
    for (uint32_t i = 0; i < v->n; i++)
      if (!check_int_value(sc, t->dtype, i, v->floats[i])) return false;
  return true;
}

bool kir_shape_iota(kir_shape_ctx *sc) {
  kir_type *t = &sc->out[0];
  if (!read_dtype_attr(sc, 0, sc->op->flags, t) || !kir_shape_read_dims(sc, 1, t)) return false;
  return kir_shape_check_axis(sc, sc->attrs[2].i, t->rank);
}

bool kir_shape_random(kir_shape_ctx *sc) {
  const kir_type *seed = &sc->in[0];
  if (seed->dtype != KILN_I64 || seed->rank != 0) {
    char buf[160];
    kir_format_type(sc->g->mod, seed, buf, sizeof buf);
    return kir_shape_error(sc,
                           "operand 0 (the seed) has type %s; random takes an i64 scalar "
                           "(i64[])",
                           buf);
  }
  kir_type *t = &sc->out[0];
  return read_dtype_attr(sc, 0, sc->op->flags, t) && kir_shape_read_dims(sc, 1, t);
}

/* ---- elementwise ---- */

bool kir_shape_unary(kir_shape_ctx *sc) {
  if (!kir_shape_check_dtype(sc, 0)) return false;
  sc->out[0] = sc->in[0];
  return true;
}

bool kir_shape_is_finite(kir_shape_ctx *sc) {
  if (!kir_shape_check_dtype(sc, 0)) return false;
  sc->out[0] = sc->in[0];
  sc->out[0].dtype = KILN_BOOL;
  return true;
}

bool kir_shape_cast(kir_shape_ctx *sc) {
  if (!kir_shape_check_dtype(sc, 0)) return false;
  sc->out[0] = sc->in[0];
  return read_dtype_attr(sc, 0, KIR_F_ANY, &sc->out[0]);
}

/* Two operands of one dtype allowed by the flags, broadcast together. */
static bool broadcast2(kir_shape_ctx *sc) {
  if (!kir_shape_check_dtype(sc, 0) || !kir_shape_check_dtype(sc, 1) ||
      !kir_shape_same_dtype(sc, 0, 1))
    return false;
  sc->out[0].dtype = sc->in[0].dtype;
  return kir_broadcast_shapes(sc, &sc->in[0], &sc->in[1], &sc->out[0]);
}

bool kir_shape_binary(kir_shape_ctx *sc) { return broadcast2(sc); }

bool kir_shape_logical(kir_shape_ctx *sc) { return broadcast2(sc); }

bool kir_shape_compare(kir_shape_ctx *sc) {
  if (!broadcast2(sc)) return false;
  sc->out[0].dtype = KILN_BOOL;
  return true;
}

bool kir_shape_select(kir_shape_ctx *sc) {
  if (sc->in[0].dtype != KILN_BOOL)
    return kir_shape_error(sc,
                           "operand 0 (the condition) has dtype %s; select takes a bool "
                           "condition (compare, or cast to bool)",
                           kiln_dtype_name(sc->in[0].dtype));
  if (!kir_shape_check_dtype(sc, 1) || !kir_shape_check_dtype(sc, 2) ||
      !kir_shape_same_dtype(sc, 1, 2))
    return false;
  kir_type ab = {.dtype = sc->in[1].dtype};
  if (!kir_broadcast_shapes(sc, &sc->in[1], &sc->in[2], &ab)) return false;
  sc->out[0].dtype = ab.dtype;
  return kir_broadcast_shapes(sc, &ab, &sc->in[0], &sc->out[0]);
}
