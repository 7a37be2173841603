/*
 * test_shape.c — the shape rule of every op and the IR verifier.
 *
 * Graphs are built through the public builder (kiln_op with kiln_attr_*),
 * which runs each op's shape rule; a check either compares the result type
 * with its printed form ("f32[N, 4]") or expects the build to fail with a
 * message containing a given substring. The builder is sticky after an
 * error, so every expected error starts a fresh graph. The verifier checks
 * build valid graphs, then corrupt them by hand through the internal structs
 * (ir/kir.h), as a buggy pass would.
 *
 * Prints one line per failed check and a summary; exits nonzero on failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/kiln.h"

static int checks, failures;
static kiln_ctx *ctx;
static kiln_graph *g;

#define F64 KILN_F64
#define F32 KILN_F32
#define F16 KILN_F16
#define I64 KILN_I64
#define I32 KILN_I32
#define I8 KILN_I8
#define BOOL KILN_BOOL
#define MAXI INT64_MAX

#define IN(...)                                                                                    \
  sizeof((kiln_value[]){__VA_ARGS__}) / sizeof(kiln_value), (kiln_value[]) { __VA_ARGS__ }
#define AT(...)                                                                                    \
  sizeof((kiln_attr[]){__VA_ARGS__}) / sizeof(kiln_attr), (kiln_attr[]) { __VA_ARGS__ }
#define NOAT 0, NULL
#define LIST(T, ...)                                                                               \
  sizeof((T[]){__VA_ARGS__}) / sizeof(T), (T[]) { __VA_ARGS__ }
#define INTS(name, ...) kiln_attr_ints(name, LIST(int64_t, __VA_ARGS__))
#define DIMS(name, ...) kiln_attr_dims(name, LIST(kiln_dim, __VA_ARGS__))
#define FLOATS(name, ...) kiln_attr_floats(name, LIST(double, __VA_ARGS__))
#define NONE(name) kiln_attr_ints(name, 0, NULL)
#define OP(name, in, at) kiln_op(g, name, in, at)

static void fail(int line, const char *fmt, const char *a, const char *b) {
  failures++;
  printf("test_shape.c:%d: FAIL: ", line);
  printf(fmt, a, b);
  printf("\n");
}

static void reset(void) {
  kiln_graph_destroy(g);
  if (kiln_graph_create(ctx, "main", &g) != KILN_OK) {
    printf("cannot create a graph\n");
    exit(2);
  }
}

static kiln_dim S(const char *name) { return kiln_graph_symbol(g, name); }

/* A parameter of type dtype[shape], shape like "N,4" ("" for a scalar). */
static kiln_value P(kiln_dtype t, const char *shape) {
  kiln_dim dims[KILN_MAX_RANK];
  size_t rank = 0;
  for (const char *p = shape; *p;) {
    char tok[32];
    size_t n = strcspn(p, ",");
    snprintf(tok, sizeof tok, "%.*s", (int)n, p);
    dims[rank++] = tok[0] >= '0' && tok[0] <= '9' ? atoll(tok) : S(tok);
    p += n + (p[n] == ',');
  }
  return kiln_graph_param(g, NULL, t, rank, dims);
}

static void type_str(kiln_graph *gr, kiln_value v, char *buf, size_t n) {
  kir_format_type(gr->mod, &gr->values[v].type, buf, n);
}

static void expect_type(int line, kiln_value v, const char *want) {
  checks++;
  if (v == KILN_NO_VALUE) {
    fail(line, "error '%s', expected type %s", kiln_ctx_error(ctx), want);
    reset();
    return;
  }
  char got[256];
  type_str(g, v, got, sizeof got);
  if (strcmp(got, want)) fail(line, "type %s, expected %s", got, want);
}

static void expect_error(int line, kiln_value v, const char *want) {
  checks++;
  if (v != KILN_NO_VALUE) {
    char got[256];
    type_str(g, v, got, sizeof got);
    fail(line, "built a %s, expected an error containing '%s'", got, want);
  } else if (!strstr(kiln_ctx_error(ctx), want)) {
    fail(line, "error '%s' does not contain '%s'", kiln_ctx_error(ctx), want);
  }
  reset();
}

static void expect_status(int line, kiln_status got, kiln_status want, const char *msg) {
  checks++;
  if (got != want)
    fail(line, "status %s, expected %s", kiln_status_name(got), kiln_status_name(want));
  else if (msg && !strstr(kiln_ctx_error(ctx), msg))
    fail(line, "message '%s' does not contain '%s'", kiln_ctx_error(ctx), msg);
}

#define TY(v, want) expect_type(__LINE__, v, want)
#define ER(v, want) expect_error(__LINE__, v, want)
#define ST(s, want, msg) expect_status(__LINE__, s, want, msg)

/* ---- sources ---- */

static void test_sources(void) {
  kiln_attr f32 = kiln_attr_dtype("dtype", F32), i32 = kiln_attr_dtype("dtype", I32);
  TY(OP("constant", IN(), AT(f32, DIMS("shape", 2, 3), FLOATS("value", 1, 2, 3, 4, 5, 6))),
     "f32[2, 3]");
  TY(OP("constant", IN(), AT(f32, DIMS("shape", 2, 3), FLOATS("value", 7))), "f32[2, 3]");
  TY(OP("constant", IN(), AT(f32, kiln_attr_dims("shape", 0, NULL), FLOATS("value", 7))), "f32[]");
  TY(OP("constant", IN(), AT(f32, DIMS("shape", S("N"), 2), FLOATS("value", 0))), "f32[N, 2]");
  TY(OP("constant", IN(), AT(i32, DIMS("shape", 2), FLOATS("value", -3, 4))), "i32[2]");
  TY(OP("constant", IN(), AT(f32, DIMS("shape", 0, 3), kiln_attr_floats("value", 0, NULL))),
     "f32[0, 3]");
  ER(OP("constant", IN(), AT(f32, DIMS("shape", 2, 3), FLOATS("value", 1, 2, 3, 4))),
     "attribute 'value' has 4 values; f32[2, 3] needs 6 (or 1 to splat)");
  ER(OP("constant", IN(), AT(f32, DIMS("shape", S("N")), FLOATS("value", 1, 2))),
     "a shape with symbols takes one value to splat, got 2");
  ER(OP("constant", IN(), AT(i32, DIMS("shape", 2), FLOATS("value", 1, 1.5))),
     "value[1] is 1.5; a i32 constant takes integers");
  ER(OP("constant", IN(), AT(kiln_attr_dtype("dtype", BOOL), DIMS("shape", 1), FLOATS("value", 2))),
     "value[0] is 2; a bool constant takes 0 or 1");
  ER(OP("constant", IN(), AT(i32, DIMS("shape", 1), FLOATS("value", NAN))), "takes integers");
  ER(OP("constant", IN(), AT(f32, DIMS("shape", -3), FLOATS("value", 1))),
     "attribute 'shape': dim 0 is -3, which is no symbol of this module");
  ER(OP("constant", IN(), AT(f32, DIMS("shape", 1, 1, 1, 1, 1, 1, 1, 1, 1), FLOATS("value", 1))),
     "attribute 'shape' has 9 dims, more than 8");

  kiln_attr i64 = kiln_attr_dtype("dtype", I64);
  TY(OP("iota", IN(), AT(i64, DIMS("shape", 3, S("N")), kiln_attr_int("axis", 1))), "i64[3, N]");
  TY(OP("iota", IN(), AT(f32, DIMS("shape", 3), kiln_attr_int("axis", 0))), "f32[3]");
  ER(OP("iota", IN(), AT(i64, DIMS("shape", 3, 4), kiln_attr_int("axis", 2))),
     "axis 2 is out of range for rank 2");
  ER(OP("iota", IN(),
        AT(kiln_attr_dtype("dtype", BOOL), DIMS("shape", 3), kiln_attr_int("axis", 0))),
     "attribute 'dtype' is bool; iota makes float or integer tensors");

  TY(OP("random", IN(P(I64, "")), AT(f32, DIMS("shape", S("N"), 4))), "f32[N, 4]");
  TY(OP("random", IN(P(I64, "")),
        AT(kiln_attr_dtype("dtype", F64), DIMS("shape", 2), kiln_attr_enum("dist", "normal"))),
     "f64[2]");
  ER(OP("random", IN(P(I32, "")), AT(f32, DIMS("shape", 2))),
     "operand 0 (the seed) has type i32[]; random takes an i64 scalar");
  ER(OP("random", IN(P(I64, "1")), AT(f32, DIMS("shape", 2))),
     "operand 0 (the seed) has type i64[1]");
  ER(OP("random", IN(P(I64, "")), AT(i32, DIMS("shape", 2))),
     "attribute 'dtype' is i32; random makes float tensors");
}

/* ---- elementwise ---- */

static void test_elementwise(void) {
  TY(OP("exp", IN(P(F32, "N,4")), NOAT), "f32[N, 4]");
  ER(OP("exp", IN(P(I32, "3")), NOAT), "exp: operand 0 has dtype i32; exp takes float operands");
  TY(OP("neg", IN(P(I32, "3")), NOAT), "i32[3]");
  TY(OP("abs", IN(P(KILN_BF16, "")), NOAT), "bf16[]");
  ER(OP("neg", IN(P(BOOL, "3")), NOAT),
     "operand 0 has dtype bool; neg takes float or integer operands");
  TY(OP("logical_not", IN(P(BOOL, "2,2")), NOAT), "bool[2, 2]");
  ER(OP("logical_not", IN(P(F32, "2")), NOAT), "logical_not takes bool operands");
  TY(OP("is_finite", IN(P(F16, "N")), NOAT), "bool[N]");
  ER(OP("is_finite", IN(P(I32, "N")), NOAT), "is_finite takes float operands");
  TY(OP("cast", IN(P(F32, "N,2")), AT(kiln_attr_dtype("dtype", I8))), "i8[N, 2]");
  TY(OP("cast", IN(P(BOOL, "2")), AT(kiln_attr_dtype("dtype", F64))), "f64[2]");
  ER(OP("cast", IN(P(BOOL, "2")), AT(kiln_attr_dtype("dtype", (kiln_dtype)42))), "no dtype");

  TY(OP("add", IN(P(F32, "N,4"), P(F32, "4")), NOAT), "f32[N, 4]");
  TY(OP("mul", IN(P(F32, "3,1"), P(F32, "1,5")), NOAT), "f32[3, 5]");
  TY(OP("sub", IN(P(I64, ""), P(I64, "2,N")), NOAT), "i64[2, N]");
  TY(OP("max", IN(P(I8, "2"), P(I8, "2")), NOAT), "i8[2]");
  ER(OP("add", IN(P(F32, "3"), P(F64, "3")), NOAT),
     "add: operand 1 has dtype f64, operand 0 has f32 (insert a cast)");
  ER(OP("add", IN(P(F32, "3"), P(F32, "4")), NOAT), "cannot broadcast f32[3] with f32[4] (axis 0)");
  ER(OP("add", IN(P(F32, "N"), P(F32, "M")), NOAT), "cannot broadcast f32[N] with f32[M]");
  ER(OP("pow", IN(P(I32, "3"), P(I32, "3")), NOAT), "pow takes float operands");
  ER(OP("add", IN(P(BOOL, "3"), P(BOOL, "3")), NOAT), "add takes float or integer operands");

  TY(OP("lt", IN(P(F32, "N,1"), P(F32, "3")), NOAT), "bool[N, 3]");
  TY(OP("eq", IN(P(BOOL, "2"), P(BOOL, "2")), NOAT), "bool[2]");
  ER(OP("lt", IN(P(I32, "2"), P(I64, "2")), NOAT), "operand 1 has dtype i64, operand 0 has i32");
  TY(OP("logical_and", IN(P(BOOL, "2,1"), P(BOOL, "3")), NOAT), "bool[2, 3]");
  ER(OP("logical_or", IN(P(I32, "2"), P(I32, "2")), NOAT), "logical_or takes bool operands");
  TY(OP("bit_and", IN(P(KILN_U8, "N,1"), P(KILN_U8, "3")), NOAT), "u8[N, 3]");
  TY(OP("shift_right", IN(P(I64, ""), P(I64, "2")), NOAT), "i64[2]");
  TY(OP("bit_not", IN(P(I8, "2")), NOAT), "i8[2]");
  ER(OP("bit_xor", IN(P(F32, "2"), P(F32, "2")), NOAT), "bit_xor takes integer operands");
  ER(OP("shift_left", IN(P(BOOL, "2"), P(BOOL, "2")), NOAT), "shift_left takes integer operands");
  ER(OP("bit_not", IN(P(BOOL, "2")), NOAT), "bit_not takes integer operands");
  ER(OP("shift_left", IN(P(I32, "2"), P(I64, "2")), NOAT),
     "operand 1 has dtype i64, operand 0 has i32");

  TY(OP("select", IN(P(BOOL, "N,1"), P(F32, "1,4"), P(F32, "N,4")), NOAT), "f32[N, 4]");
  TY(OP("select", IN(P(BOOL, "3"), P(I32, "2,1"), P(I32, "1")), NOAT), "i32[2, 3]");
  ER(OP("select", IN(P(F32, "3"), P(F32, "3"), P(F32, "3")), NOAT),
     "operand 0 (the condition) has dtype f32; select takes a bool condition");
  ER(OP("select", IN(P(BOOL, "3"), P(F32, "3"), P(F64, "3")), NOAT),
     "operand 2 has dtype f64, operand 1 has f32 (insert a cast)");
  ER(OP("select", IN(P(BOOL, "4"), P(F32, "3"), P(F32, "3")), NOAT), "cannot broadcast");
}

/* ---- reductions and data movement ---- */

static void test_reduce(void) {
  TY(OP("reduce_sum", IN(P(F32, "2,3,4")), AT(INTS("axes", 0, 2))), "f32[3]");
  TY(OP("reduce_sum", IN(P(F32, "2,N,4")), AT(INTS("axes", 0, 2), kiln_attr_bool("keepdims", 1))),
     "f32[1, N, 1]");
  TY(OP("reduce_max", IN(P(I32, "2,3")), AT(NONE("axes"))), "i32[2, 3]");
  TY(OP("reduce_prod", IN(P(I64, "5")), AT(INTS("axes", 0))), "i64[]");
  ER(OP("reduce_sum", IN(P(F32, "2,3,4")), AT(INTS("axes", 2, 0))),
     "axes must be strictly ascending: 0 follows 2");
  ER(OP("reduce_sum", IN(P(F32, "2,3,4")), AT(INTS("axes", 1, 1))), "strictly ascending");
  ER(OP("reduce_sum", IN(P(F32, "2,3,4")), AT(INTS("axes", -1))),
     "axis -1 is out of range for rank 3");
  ER(OP("reduce_min", IN(P(F32, "2")), AT(INTS("axes", 1))), "axis 1 is out of range for rank 1");
  ER(OP("reduce_mean", IN(P(I32, "2")), AT(INTS("axes", 0))), "reduce_mean takes float operands");
  ER(OP("reduce_sum", IN(P(BOOL, "2")), AT(INTS("axes", 0))), "reduce_sum takes float or integer");

  TY(OP("argmax", IN(P(F32, "N,5")), AT(kiln_attr_int("axis", 1))), "i64[N]");
  TY(OP("argmin", IN(P(I8, "N,5")), AT(kiln_attr_int("axis", 0), kiln_attr_bool("keepdims", 1))),
     "i64[1, 5]");
  ER(OP("argmax", IN(P(F32, "N,5")), AT(kiln_attr_int("axis", 2))),
     "axis 2 is out of range for rank 2");
  ER(OP("argmax", IN(P(F32, "")), AT(kiln_attr_int("axis", 0))),
     "axis 0 is out of range for rank 0");
  ER(OP("argmin", IN(P(BOOL, "3")), AT(kiln_attr_int("axis", 0))), "argmin takes float or integer");
}

static void test_movement(void) {
  TY(OP("reshape", IN(P(F32, "2,3")), AT(DIMS("shape", 3, 2))), "f32[3, 2]");
  TY(OP("reshape", IN(P(F32, "N,6")), AT(DIMS("shape", S("N"), 2, 3))), "f32[N, 2, 3]");
  TY(OP("reshape", IN(P(I32, "N,M")), AT(DIMS("shape", S("M"), 1, S("N")))), "i32[M, 1, N]");
  TY(OP("reshape", IN(P(F32, "1")), AT(kiln_attr_dims("shape", 0, NULL))), "f32[]");
  ER(OP("reshape", IN(P(F32, "2,3")), AT(DIMS("shape", 4, 2))),
     "cannot reshape f32[2, 3] to f32[4, 2]: 6 elements vs 8");
  ER(OP("reshape", IN(P(F32, "N,4")), AT(DIMS("shape", S("M"), 4))),
     "both sides must hold the same symbols");
  ER(OP("reshape", IN(P(F32, "N,N")), AT(DIMS("shape", S("N"), 1))), "the same symbols");
  ER(OP("reshape", IN(P(F32, "6")), AT(DIMS("shape", -1, 3))), "no symbol of this module");

  TY(OP("transpose", IN(P(F32, "N,3,4")), AT(INTS("perm", 2, 0, 1))), "f32[4, N, 3]");
  ER(OP("transpose", IN(P(F32, "N,3,4")), AT(INTS("perm", 0, 0, 1))),
     "perm is not a permutation of [0, 3): entry 1 is 0");
  ER(OP("transpose", IN(P(F32, "N,3,4")), AT(INTS("perm", 1, 0))),
     "attribute 'perm' has 2 values; the operand has rank 3");

  TY(OP("broadcast", IN(P(F32, "3,1")), AT(DIMS("shape", 2, 3, 4))), "f32[2, 3, 4]");
  TY(OP("broadcast", IN(P(F32, "N,1")), AT(DIMS("shape", S("N"), 5))), "f32[N, 5]");
  TY(OP("broadcast", IN(P(BOOL, "")), AT(DIMS("shape", S("M")))), "bool[M]");
  ER(OP("broadcast", IN(P(F32, "3")), AT(DIMS("shape", 4))),
     "cannot broadcast f32[3] to f32[4]: operand axis 0 is neither 1 nor the target's size");
  ER(OP("broadcast", IN(P(F32, "2,3")), AT(DIMS("shape", 3))), "the target has a lower rank");
  ER(OP("broadcast", IN(P(F32, "N")), AT(DIMS("shape", S("M")))),
     "cannot broadcast f32[N] to f32[M]");

  TY(OP("slice", IN(P(F32, "10,N")),
        AT(INTS("start", 2, 0), INTS("stop", 9, MAXI), INTS("step", 3, 1))),
     "f32[3, N]");
  TY(OP("slice", IN(P(F32, "10")), AT(INTS("start", 4), INTS("stop", 100), INTS("step", 1))),
     "f32[6]");
  TY(OP("slice", IN(P(F32, "10")), AT(INTS("start", 12), INTS("stop", 20), INTS("step", 2))),
     "f32[0]");
  TY(OP("slice", IN(P(F32, "10")), AT(INTS("start", 0), INTS("stop", 10), INTS("step", 4))),
     "f32[3]");
  TY(OP("slice", IN(P(F32, "10")), AT(INTS("start", 3), INTS("stop", 3), INTS("step", 1))),
     "f32[0]");
  ER(OP("slice", IN(P(F32, "10")), AT(INTS("start", 0), INTS("stop", 5), INTS("step", 0))),
     "axis 0: step 0 must be >= 1");
  ER(OP("slice", IN(P(F32, "10")), AT(INTS("start", 5), INTS("stop", 4), INTS("step", 1))),
     "axis 0: start 5, stop 4: need 0 <= start <= stop");
  ER(OP("slice", IN(P(F32, "10")), AT(INTS("start", -1), INTS("stop", 4), INTS("step", 1))),
     "need 0 <= start <= stop");
  ER(OP("slice", IN(P(F32, "N")), AT(INTS("start", 1), INTS("stop", MAXI), INTS("step", 1))),
     "axis 0 has symbolic size N: only the whole axis (start 0, stop 9223372036854775807, step 1)");
  ER(OP("slice", IN(P(F32, "N")), AT(INTS("start", 0), INTS("stop", 5), INTS("step", 1))),
     "only the whole axis");
  ER(OP("slice", IN(P(F32, "3,3")), AT(INTS("start", 0), INTS("stop", 2), INTS("step", 1))),
     "attribute 'start' has 1 values; the operand has rank 2");

  kiln_attr ax0 = kiln_attr_int("axis", 0), ax1 = kiln_attr_int("axis", 1);
  TY(OP("concat", IN(P(F32, "2,3"), P(F32, "4,3")), AT(ax0)), "f32[6, 3]");
  TY(OP("concat", IN(P(F32, "N,3")), AT(ax0)), "f32[N, 3]");
  TY(OP("concat", IN(P(F32, "N,2"), P(F32, "N,3"), P(F32, "N,0")), AT(ax1)), "f32[N, 5]");
  ER(OP("concat", IN(P(F32, "N,3"), P(F32, "2,3")), AT(ax0)),
     "operand 0 has symbolic size N on the concat axis 0; only a lone operand");
  ER(OP("concat", IN(P(F32, "2,3"), P(F32, "2,4")), AT(ax0)),
     "operand 1 is f32[2, 4], operand 0 is f32[2, 3]: they differ on axis 1, not only on the "
     "concat axis 0");
  ER(OP("concat", IN(P(F32, "2,3"), P(I32, "2,3")), AT(ax0)),
     "operand 1 has dtype i32, operand 0 has f32");
  ER(OP("concat", IN(P(F32, "2,3"), P(F32, "2")), AT(ax0)), "ranks differ");
  ER(OP("concat", IN(P(F32, "2,3"), P(F32, "2,3")), AT(kiln_attr_int("axis", 2))),
     "axis 2 is out of range for rank 2");
  ER(OP("concat", IN(P(F32, "")), AT(ax0)), "axis 0 is out of range for rank 0");

  TY(OP("pad", IN(P(F32, "2,N")), AT(INTS("low", 1, 0), INTS("high", 2, 0))), "f32[5, N]");
  TY(OP("pad", IN(P(F32, "2")),
        AT(INTS("low", 1), INTS("high", 1), kiln_attr_float("value", -INFINITY))),
     "f32[4]");
  TY(OP("pad", IN(P(I32, "2")), AT(INTS("low", 1), INTS("high", 0), kiln_attr_float("value", -7))),
     "i32[3]");
  ER(OP("pad", IN(P(F32, "2,N")), AT(INTS("low", 0, 1), INTS("high", 0, 0))),
     "axis 1 has symbolic size N and cannot be padded");
  ER(OP("pad", IN(P(F32, "2")), AT(INTS("low", -1), INTS("high", 0))),
     "axis 0: padding -1, 0 must be >= 0");
  ER(OP("pad", IN(P(I32, "2")), AT(INTS("low", 1), INTS("high", 0), kiln_attr_float("value", 0.5))),
     "value 0.5 cannot be stored in i32");
  ER(OP("pad", IN(P(F32, "2,2")), AT(INTS("low", 1), INTS("high", 0, 0))),
     "attribute 'low' has 1 values");
}

/* ---- indexing ---- */

static void test_index(void) {
  TY(OP("gather", IN(P(F32, "5,N,3"), P(I64, "2,4")), AT(kiln_attr_int("axis", 1))),
     "f32[5, 2, 4, 3]");
  TY(OP("gather", IN(P(F32, "5,3"), P(I32, "")), NOAT), "f32[3]");
  TY(OP("gather", IN(P(BOOL, "V,3"), P(I32, "E")), NOAT), "bool[E, 3]");
  ER(OP("gather", IN(P(F32, "5,3"), P(F32, "2")), NOAT),
     "operand 1 (the indices) has dtype f32; indices must be i32 or i64");
  ER(OP("gather", IN(P(F32, "5,3"), P(I32, "2")), AT(kiln_attr_int("axis", 2))),
     "axis 2 is out of range for rank 2");
  ER(OP("gather", IN(P(F32, "1,1,1,1,1"), P(I32, "1,1,1,1,1")), NOAT),
     "the result would have rank 9");

  TY(OP("scatter_add", IN(P(F32, "5,3"), P(I32, "4"), P(F32, "4,3")), NOAT), "f32[5, 3]");
  TY(OP("scatter_add", IN(P(I64, "N,3"), P(I64, "E"), P(I64, "N,E")), AT(kiln_attr_int("axis", 1))),
     "i64[N, 3]");
  ER(OP("scatter_add", IN(P(F32, "5,3"), P(I32, "4"), P(F32, "4,2")), NOAT),
     "operand 2 (the updates) is f32[4, 2]; gathering x at idx gives f32[4, 3]");
  ER(OP("scatter_add", IN(P(F32, "5,3"), P(I32, "4"), P(F64, "4,3")), NOAT),
     "operand 2 has dtype f64, operand 0 has f32");
  ER(OP("scatter_add", IN(P(BOOL, "5"), P(I32, "4"), P(BOOL, "4")), NOAT),
     "scatter_add takes float or integer");
  ER(OP("scatter_add", IN(P(F32, "5"), P(BOOL, "4"), P(F32, "4")), NOAT),
     "indices must be i32 or i64");

  TY(OP("segment_sum", IN(P(F32, "E,4"), P(I32, "E")), AT(kiln_attr_dim("n", S("N")))),
     "f32[N, 4]");
  TY(OP("segment_max", IN(P(I32, "6"), P(I64, "6")), AT(kiln_attr_dim("n", 7))), "i32[7]");
  TY(OP("segment_mean", IN(P(F64, "E,2,2"), P(I64, "E")), AT(kiln_attr_dim("n", 3))),
     "f64[3, 2, 2]");
  ER(OP("segment_sum", IN(P(F32, "E,4"), P(I32, "F")), AT(kiln_attr_dim("n", 3))),
     "operand 1 (the segment ids) is i32[F]; it must be a vector of the data's E rows");
  ER(OP("segment_sum", IN(P(F32, "E,4"), P(I32, "E,1")), AT(kiln_attr_dim("n", 3))),
     "it must be a vector");
  ER(OP("segment_sum", IN(P(F32, "E"), P(F32, "E")), AT(kiln_attr_dim("n", 3))),
     "indices must be i32 or i64");
  ER(OP("segment_mean", IN(P(I32, "E"), P(I32, "E")), AT(kiln_attr_dim("n", 3))),
     "segment_mean takes float");
  ER(OP("segment_sum", IN(P(F32, ""), P(I32, "E")), AT(kiln_attr_dim("n", 3))),
     "operand 0 (the data) is a scalar");
  ER(OP("segment_sum", IN(P(F32, "E"), P(I32, "E")), AT(kiln_attr_dim("n", -9))),
     "no symbol of this module");
  TY(OP("segment_softmax", IN(P(F32, "E"), P(I64, "E")), AT(kiln_attr_dim("n", S("N")))), "f32[E]");
  TY(OP("segment_softmax", IN(P(F16, "E,H"), P(I32, "E")), AT(kiln_attr_dim("n", 4))), "f16[E, H]");
  ER(OP("segment_softmax", IN(P(I32, "E"), P(I32, "E")), AT(kiln_attr_dim("n", 4))),
     "takes float operands");
}

/* ---- compound ops ---- */

static void test_matmul(void) {
  kiln_attr ta = kiln_attr_bool("transpose_a", 1), tb = kiln_attr_bool("transpose_b", 1);
  TY(OP("matmul", IN(P(F32, "N,3,4"), P(F32, "4,5")), NOAT), "f32[N, 3, 5]");
  TY(OP("matmul", IN(P(F32, "2,1,3,4"), P(F32, "5,4,6")), NOAT), "f32[2, 5, 3, 6]");
  TY(OP("matmul", IN(P(F32, "3,4"), P(F32, "5,4")), AT(tb)), "f32[3, 5]");
  TY(OP("matmul", IN(P(F32, "4,3"), P(F32, "4,5")), AT(ta)), "f32[3, 5]");
  TY(OP("matmul", IN(P(F64, "B,K,M"), P(F64, "B,N,K")), AT(ta, tb)), "f64[B, M, N]");
  TY(OP("matmul", IN(P(I32, "2,2"), P(I32, "2,2")), NOAT), "i32[2, 2]");
  ER(OP("matmul", IN(P(F32, "3,4"), P(F32, "5,6")), NOAT),
     "contracted dims differ: operand 0 has 4 (axis 1), operand 1 has 5 (axis 0)");
  ER(OP("matmul", IN(P(F32, "3,K"), P(F32, "J,6")), NOAT),
     "operand 0 has K (axis 1), operand 1 has J");
  ER(OP("matmul", IN(P(F32, "4"), P(F32, "4,5")), NOAT),
     "operand 0 has rank 1; matmul takes rank >= 2");
  ER(OP("matmul", IN(P(F32, "2,3,4"), P(F32, "5,4,6")), NOAT),
     "the batch dims of f32[2, 3, 4] and f32[5, 4, 6] do not broadcast");
  ER(OP("matmul", IN(P(F32, "3,4"), P(F16, "4,5")), NOAT),
     "operand 1 has dtype f16, operand 0 has f32");
  ER(OP("matmul", IN(P(BOOL, "3,4"), P(BOOL, "4,5")), NOAT), "matmul takes float or integer");
}

static void test_conv(void) {
  kiln_attr s2 = INTS("stride", 2, 2), p1 = INTS("padding", 1, 1, 1, 1);
  TY(OP("conv2d", IN(P(F32, "N,3,32,32"), P(F32, "8,3,3,3")), AT(p1)), "f32[N, 8, 32, 32]");
  TY(OP("conv2d", IN(P(F32, "N,3,32,32"), P(F32, "8,3,3,3")), AT(s2)), "f32[N, 8, 15, 15]");
  TY(OP("conv2d", IN(P(F32, "N,C,32,32"), P(F32, "O,C,3,3")), AT(INTS("dilation", 2, 1))),
     "f32[N, O, 28, 30]");
  TY(OP("conv2d", IN(P(F32, "N,3,30,30"), P(F32, "6,1,3,3")), AT(kiln_attr_int("groups", 3))),
     "f32[N, 6, 28, 28]");
  TY(OP("conv2d", IN(P(F32, "1,1,5,6"), P(F32, "1,1,3,3")), AT(s2, INTS("padding", 1, 0, 0, 2))),
     "f32[1, 1, 2, 3]");
  ER(OP("conv2d", IN(P(F32, "N,3,32,32"), P(F32, "8,1,3,3")), AT(kiln_attr_int("groups", 2))),
     "groups 2 does not divide the 3 input channels");
  ER(OP("conv2d", IN(P(F32, "N,4,32,32"), P(F32, "8,4,3,3")), AT(kiln_attr_int("groups", 2))),
     "w has 4 channels per group on axis 1; x's channels / groups is 2");
  ER(OP("conv2d", IN(P(F32, "N,C,32,32"), P(F32, "8,1,3,3")), AT(kiln_attr_int("groups", 2))),
     "the input channels are the symbol C; with groups 2 they must be constant");
  ER(OP("conv2d", IN(P(F32, "N,3,2,32"), P(F32, "8,3,3,3")), NOAT),
     "the window spans 3, more than the padded height 2");
  ER(OP("conv2d", IN(P(F32, "N,3,H,32"), P(F32, "8,3,3,3")), NOAT),
     "operand 0: the height is the symbol H; conv2d needs it constant");
  ER(OP("conv2d", IN(P(F32, "N,3,8,8"), P(F32, "8,3,K,3")), NOAT),
     "the kernel height is the symbol K");
  ER(OP("conv2d", IN(P(F32, "N,3,8,8"), P(F32, "8,3,0,3")), NOAT), "the kernel is empty");
  ER(OP("conv2d", IN(P(F32, "N,3,8,8"), P(F32, "8,3,3,3")), AT(INTS("stride", 0, 1))),
     "attribute 'stride': value 0 is 0, it must be in [1, ");
  ER(OP("conv2d", IN(P(F32, "N,3,8,8"), P(F32, "8,3,3,3")), AT(INTS("padding", 1, 1, 1))),
     "attribute 'padding' has 3 values, it takes 4");
  ER(OP("conv2d", IN(P(F32, "N,3,8,8"), P(F32, "8,3,3,3")), AT(kiln_attr_int("groups", 0))),
     "groups is 0; it must be >= 1");
  ER(OP("conv2d", IN(P(I32, "N,3,8,8"), P(I32, "8,3,3,3")), NOAT), "conv2d takes float operands");
  ER(OP("conv2d", IN(P(F32, "3,8,8"), P(F32, "8,3,3,3")), NOAT),
     "operand 0 has rank 3; conv2d takes x[B, C, H, W] (rank 4)");

  kiln_attr in32 = INTS("input_size", 32, 32);
  TY(OP("conv2d_grad_input", IN(P(F32, "N,8,15,15"), P(F32, "8,3,3,3")), AT(s2, in32)),
     "f32[N, 3, 32, 32]");
  TY(OP("conv2d_grad_input", IN(P(F32, "N,8,15,15"), P(F32, "8,3,3,3")),
        AT(s2, INTS("input_size", 31, 31))),
     "f32[N, 3, 31, 31]");
  TY(OP("conv2d_grad_input", IN(P(F32, "N,8,32,32"), P(F32, "8,2,3,3")),
        AT(p1, kiln_attr_int("groups", 2), in32)),
     "f32[N, 4, 32, 32]");
  ER(OP("conv2d_grad_input", IN(P(F32, "N,8,15,15"), P(F32, "8,3,3,3")),
        AT(s2, INTS("input_size", 30, 30))),
     "operand 0 (dy) has height 15; the forward op on input 30x30 gives 14");
  ER(OP("conv2d_grad_input", IN(P(F32, "N,7,15,15"), P(F32, "8,3,3,3")), AT(s2, in32)),
     "output channels differ: operand 0 has 7 (axis 1), operand 1 has 8 (axis 0)");
  ER(OP("conv2d_grad_input", IN(P(F32, "N,8,15,15"), P(F32, "8,3,3,3")), AT(s2)),
     "needs attribute 'input_size'");

  kiln_attr k3 = INTS("kernel_size", 3, 3);
  TY(OP("conv2d_grad_weight", IN(P(F32, "N,3,32,32"), P(F32, "N,8,15,15")), AT(s2, k3)),
     "f32[8, 3, 3, 3]");
  TY(OP("conv2d_grad_weight", IN(P(F32, "N,6,8,8"), P(F32, "N,9,6,6")),
        AT(kiln_attr_int("groups", 3), k3)),
     "f32[9, 2, 3, 3]");
  TY(OP("conv2d_grad_weight", IN(P(F32, "N,C,8,8"), P(F32, "N,O,6,6")), AT(k3)), "f32[O, C, 3, 3]");
  ER(OP("conv2d_grad_weight", IN(P(F32, "N,3,32,32"), P(F32, "M,8,15,15")), AT(s2, k3)),
     "batch sizes differ: operand 0 has N (axis 0), operand 1 has M (axis 0)");
  ER(OP("conv2d_grad_weight", IN(P(F32, "N,3,32,32"), P(F32, "N,8,15,16")), AT(s2, k3)),
     "operand 1 (dy) has width 16; the forward op on input 32x32 gives 15");
  ER(OP("conv2d_grad_weight", IN(P(F32, "N,6,8,8"), P(F32, "N,8,6,6")),
        AT(kiln_attr_int("groups", 3), k3)),
     "groups 3 does not divide the 8 output channels");
}

static void test_pool(void) {
  kiln_attr k2 = INTS("kernel", 2, 2), s2 = INTS("stride", 2, 2);
  TY(OP("max_pool2d", IN(P(F32, "N,C,32,32")), AT(k2, s2)), "f32[N, C, 16, 16]");
  TY(OP("max_pool2d", IN(P(F32, "N,C,33,32")), AT(k2, s2)), "f32[N, C, 16, 16]");
  TY(OP("avg_pool2d", IN(P(F64, "N,C,32,32")),
        AT(INTS("kernel", 3, 3), s2, INTS("padding", 1, 1, 1, 1))),
     "f64[N, C, 16, 16]");
  TY(OP("avg_pool2d", IN(P(F64, "1,1,4,4")), AT(INTS("kernel", 4, 1), INTS("stride", 1, 1))),
     "f64[1, 1, 1, 4]");
  ER(OP("max_pool2d", IN(P(F32, "N,C,32,32")),
        AT(INTS("kernel", 3, 3), s2, INTS("padding", 2, 1, 1, 1))),
     "padding 2 is more than half the kernel height 3");
  ER(OP("max_pool2d", IN(P(F32, "N,C,32,32")),
        AT(INTS("kernel", 3, 2), s2, INTS("padding", 0, 2, 0, 0))),
     "padding 2 is more than half the kernel width 2");
  ER(OP("max_pool2d", IN(P(F32, "N,C,1,32")), AT(k2, s2)),
     "the window spans 2, more than the padded height 1");
  ER(OP("max_pool2d", IN(P(F32, "N,C,H,32")), AT(k2, s2)), "the height is the symbol H");
  ER(OP("avg_pool2d", IN(P(F32, "N,C,8,8")), AT(k2, INTS("stride", 2))),
     "attribute 'stride' has 1 values, it takes 2");
  ER(OP("avg_pool2d", IN(P(I32, "N,C,8,8")), AT(k2, s2)), "avg_pool2d takes float operands");
  ER(OP("max_pool2d", IN(P(F32, "C,8,8")), AT(k2, s2)), "operand 0 has rank 3");

  TY(OP("max_pool2d_grad", IN(P(F32, "N,C,32,32"), P(F32, "N,C,16,16")), AT(k2, s2)),
     "f32[N, C, 32, 32]");
  ER(OP("max_pool2d_grad", IN(P(F32, "N,C,32,32"), P(F32, "N,C,16,15")), AT(k2, s2)),
     "operand 1 (dy) is f32[N, C, 16, 15]; the pool's output is f32[N, C, 16, 16]");
  ER(OP("max_pool2d_grad", IN(P(F32, "N,C,32,32"), P(F64, "N,C,16,16")), AT(k2, s2)),
     "operand 1 has dtype f64, operand 0 has f32");
  TY(OP("avg_pool2d_grad", IN(P(F32, "N,C,16,16")), AT(k2, s2, INTS("input_size", 32, 32))),
     "f32[N, C, 32, 32]");
  TY(OP("avg_pool2d_grad", IN(P(F32, "N,C,16,16")), AT(k2, s2, INTS("input_size", 33, 32))),
     "f32[N, C, 33, 32]");
  ER(OP("avg_pool2d_grad", IN(P(F32, "N,C,16,16")), AT(k2, s2, INTS("input_size", 30, 30))),
     "operand 0 (dy) has height 16; the forward op on input 30x30 gives 15");
}

static void test_softmax_norm(void) {
  TY(OP("softmax", IN(P(F32, "N,10")), AT(kiln_attr_int("axis", 1))), "f32[N, 10]");
  TY(OP("log_softmax", IN(P(F16, "N,10")), AT(kiln_attr_int("axis", 0))), "f16[N, 10]");
  ER(OP("softmax", IN(P(F32, "N,10")), AT(kiln_attr_int("axis", 2))),
     "axis 2 is out of range for rank 2");
  ER(OP("log_softmax", IN(P(I32, "10")), AT(kiln_attr_int("axis", 0))),
     "log_softmax takes float operands");

  kiln_attr ax2 = kiln_attr_int("axis", 2), ax1 = kiln_attr_int("axis", 1);
  TY(OP("layer_norm", IN(P(F32, "N,T,4"), P(F32, "4"), P(F32, "4")), AT(ax2)), "f32[N, T, 4]");
  TY(OP("layer_norm", IN(P(F32, "N,T,4"), P(F32, "T,4"), P(F32, "T,4")), AT(ax1)), "f32[N, T, 4]");
  TY(OP("rms_norm", IN(P(F64, "N,8"), P(F64, "8")), AT(ax1, kiln_attr_float("eps", 1e-3))),
     "f64[N, 8]");
  ER(OP("layer_norm", IN(P(F32, "N,T,4"), P(F32, "4"), P(F32, "4")), AT(ax1)),
     "operand 1 (gamma) is f32[4]; it must be f32[T, 4], the dims of x from axis 1");
  ER(OP("layer_norm", IN(P(F32, "N,T,4"), P(F32, "4"), P(F32, "1,4")), AT(ax2)),
     "operand 2 (beta) is f32[1, 4]");
  ER(OP("layer_norm", IN(P(F32, "N,T,4"), P(F32, "4"), P(F64, "4")), AT(ax2)),
     "operand 2 has dtype f64, operand 0 has f32");
  ER(OP("layer_norm", IN(P(F32, "N,4"), P(F32, "4"), P(F32, "4")),
        AT(ax1, kiln_attr_float("eps", 0))),
     "eps is 0; it must be > 0");
  ER(OP("rms_norm", IN(P(F32, "N,4"), P(F32, "4")), AT(ax1, kiln_attr_float("eps", NAN))),
     "it must be > 0");
  ER(OP("rms_norm", IN(P(F32, "N,4"), P(F32, "4")), AT(ax2)), "axis 2 is out of range for rank 2");
  ER(OP("rms_norm", IN(P(I32, "N,4"), P(I32, "4")), AT(ax1)), "rms_norm takes float operands");
}

static void test_attention(void) {
  TY(OP("attention", IN(P(F32, "B,8,T,64"), P(F32, "B,2,S,64"), P(F32, "B,2,S,32")), NOAT),
     "f32[B, 8, T, 32]");
  TY(OP("attention", IN(P(F16, "B,H,T,D"), P(F16, "B,H,S,D"), P(F16, "B,H,S,D"), P(F16, "T,S")),
        AT(kiln_attr_bool("causal", 1), kiln_attr_float("scale", 0.125))),
     "f16[B, H, T, D]");
  TY(OP("attention", IN(P(F32, "B,H,T,D"), P(F32, "B,1,S,D"), P(F32, "B,1,S,D"), P(F32, "B,1,1,S")),
        NOAT),
     "f32[B, H, T, D]");
  ER(OP("attention", IN(P(F32, "B,8,T,D"), P(F32, "B,3,S,D"), P(F32, "B,3,S,D")), NOAT),
     "q has 8 heads, k and v have 3: not a multiple");
  ER(OP("attention", IN(P(F32, "B,H,T,D"), P(F32, "B,G,S,D"), P(F32, "B,G,S,D")), NOAT),
     "q has H heads, k and v have G");
  ER(OP("attention", IN(P(F32, "B,8,T,64"), P(F32, "B,8,S,32"), P(F32, "B,8,S,32")), NOAT),
     "head sizes differ: operand 0 has 64 (axis 3), operand 1 has 32 (axis 3)");
  ER(OP("attention", IN(P(F32, "B,8,T,64"), P(F32, "B,8,S,64"), P(F32, "B,8,R,64")), NOAT),
     "key lengths differ");
  ER(OP("attention", IN(P(F32, "B,8,T,64"), P(F32, "B,8,S,64"), P(F32, "C,8,S,64")), NOAT),
     "batch sizes differ");
  ER(OP("attention", IN(P(F32, "B,8,T,64"), P(F32, "B,8,S,64"), P(F32, "B,4,S,64")), NOAT),
     "kv heads differ");
  ER(OP("attention",
        IN(P(F32, "B,8,T,64"), P(F32, "B,8,S,64"), P(F32, "B,8,S,64"), P(F32, "2,T,S")), NOAT),
     "operand 3 (the mask) is f32[2, T, S]; it does not broadcast to f32[B, 8, T, S]");
  ER(OP("attention",
        IN(P(F32, "B,8,T,64"), P(F32, "B,8,S,64"), P(F32, "B,8,S,64"), P(F32, "1,1,1,T,S")), NOAT),
     "it must broadcast to");
  ER(OP("attention", IN(P(F32, "B,8,T,64"), P(F32, "B,8,S,64"), P(F32, "B,8,S,64"), P(F64, "T,S")),
        NOAT),
     "operand 3 has dtype f64, operand 0 has f32");
  ER(OP("attention", IN(P(F32, "B,8,T,64"), P(F32, "B,8,S,64"), P(F32, "B,8,S,64")),
        AT(kiln_attr_float("scale", -1))),
     "scale is -1; it must be >= 0");
  ER(OP("attention", IN(P(F32, "8,T,64"), P(F32, "B,8,S,64"), P(F32, "B,8,S,64")), NOAT),
     "operand 0 has rank 3; attention takes q[B, H, T, D] (rank 4)");
  ER(OP("attention", IN(P(I32, "B,8,T,64"), P(I32, "B,8,S,64"), P(I32, "B,8,S,64")), NOAT),
     "attention takes float operands");
}

/* ---- scan ---- */

/* @cell(consts..., h: f64[N, 4], x: f64[N, 4]) -> (t, t) with t = tanh(h + x). */
static kiln_graph *cell(const char *name, int nconst) {
  kiln_graph *b;
  if (kiln_graph_create_body(g, name, &b) != KILN_OK) return NULL;
  kiln_dim d[2] = {S("N"), 4};
  for (int i = 0; i < nconst; i++)
    kiln_graph_param(b, NULL, F64, 1, d + 1);
  kiln_value h = kiln_graph_param(b, "h", F64, 2, d);
  kiln_value x = kiln_graph_param(b, "x", F64, 2, d);
  kiln_value t = kiln_unary(b, "tanh", kiln_add(b, h, x));
  kiln_value r[2] = {t, t};
  kiln_graph_set_results(b, 2, r);
  return b;
}

static int scan(kiln_value *out, kiln_graph *body, size_t nin, const kiln_value *in, int64_t nconst,
                int64_t ncarry) {
  kiln_attr a[3] = {kiln_attr_graph("body", body), kiln_attr_int("n_const", nconst),
                    kiln_attr_int("n_carry", ncarry)};
  return kiln_op_multi(g, "scan", nin, in, 3, a, 8, out);
}

static void expect_scan(int line, int n, const kiln_value *out, const char *t0, const char *t1) {
  checks++;
  char a[128] = "", b[128] = "";
  if (n == 2) {
    type_str(g, out[0], a, sizeof a);
    type_str(g, out[1], b, sizeof b);
  }
  if (n != 2 || strcmp(a, t0) || strcmp(b, t1))
    fail(line, "scan gave %s / %s", n == 2 ? a : kiln_ctx_error(ctx), b);
  reset();
}

static void expect_scan_error(int line, int n, const char *want) {
  expect_error(line, n < 0 ? KILN_NO_VALUE : 0, want);
}

static void test_scan(void) {
  kiln_value out[8];
  int n = scan(out, cell("cell", 0), IN(P(F64, "N,4"), P(F64, "5,N,4")), 0, 1);
  expect_scan(__LINE__, n, out, "f64[N, 4]", "f64[5, N, 4]");
  n = scan(out, cell("cell", 1), IN(P(F64, "4"), P(F64, "N,4"), P(F64, "T,N,4")), 1, 1);
  expect_scan(__LINE__, n, out, "f64[N, 4]", "f64[T, N, 4]");
  n = scan(out, cell("cell", 0), IN(P(F64, "N,4"), P(F64, "5,N,4")), 0, 0);
  expect_scan_error(__LINE__, n, "body parameter 0 is f64[N, 4]; a slice of operand 0 is f64[4]");
  n = scan(out, cell("cell", 0), IN(P(F32, "N,4"), P(F64, "5,N,4")), 0, 1);
  expect_scan_error(__LINE__, n, "body parameter 0 is f64[N, 4]; operand 0 is f32[N, 4]");
  n = scan(out, cell("cell", 0), IN(P(F64, "N,4"), P(F64, "N,4")), 0, 2);
  expect_scan_error(__LINE__, n, "2 operands, n_const 0, n_carry 2: nothing to scan");
  n = scan(out, cell("cell", 0), IN(P(F64, "N,4"), P(F64, "5,N,4")), 0, -1);
  expect_scan_error(__LINE__, n, "n_const 0 and n_carry -1 must be >= 0");
  n = scan(out, cell("cell", 0), IN(P(F64, "N,4"), P(F64, "5,N,4"), P(F64, "6,N,4")), 0, 1);
  expect_scan_error(__LINE__, n, "body @cell has 2 parameters; the scan passes it 3");
  n = scan(out, cell("cell", 0), IN(P(F64, "N,4"), P(F64, "")), 0, 1);
  expect_scan_error(__LINE__, n, "operand 1 is a scalar and cannot be scanned");
  n = scan(out, g, IN(P(F64, "N,4"), P(F64, "5,N,4")), 0, 1);
  expect_scan_error(__LINE__, n, "body @main is the graph that holds this scan");

  /* Two scanned operands must agree on their length. */
  kiln_graph *b;
  kiln_graph_create_body(g, "two", &b);
  kiln_dim d4[1] = {4};
  kiln_value x = kiln_graph_param(b, "x", F32, 1, d4), y = kiln_graph_param(b, "y", F32, 1, d4);
  kiln_value s = kiln_add(b, x, y);
  kiln_graph_set_results(b, 1, &s);
  n = scan(out, b, IN(P(F32, "T,4"), P(F32, "U,4")), 0, 0);
  expect_scan_error(__LINE__, n,
                    "scan lengths differ: operand 0 has T (axis 0), operand 1 has U (axis 0)");

  kiln_graph_create_body(g, "unset", &b);
  kiln_graph_param(b, "x", F32, 1, d4);
  n = scan(out, b, IN(P(F32, "T,4")), 0, 0);
  expect_scan_error(__LINE__, n, "body @unset has no results set");

  /* The carry result must keep the carry's type. */
  kiln_graph_create_body(g, "bad", &b);
  kiln_value h = kiln_graph_param(b, "h", F32, 1, d4);
  kiln_graph_param(b, "x", F32, 1, d4);
  kiln_value c = kiln_cast(b, h, F64);
  kiln_graph_set_results(b, 1, &c);
  n = scan(out, b, IN(P(F32, "4"), P(F32, "T,4")), 0, 1);
  expect_scan_error(__LINE__, n, "body result 0 is f64[4]; carry operand 0 is f32[4]");

  /* A stacked result must stay within rank 8. */
  kiln_graph_create_body(g, "deep", &b);
  kiln_dim ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  kiln_value z = kiln_graph_param(b, "z", F32, 7, ones);
  kiln_value z8 = kiln_reshape(b, z, 8, ones);
  kiln_graph_set_results(b, 1, &z8);
  n = scan(out, b, IN(P(F32, "2,1,1,1,1,1,1,1")), 0, 0);
  expect_scan_error(__LINE__, n, "body result 0 has rank 8; stacking it would exceed rank 8");
}

/* ---- the verifier ---- */

/* @main(%a: f32[N, 3], %b: f32[3, 5]) with %y = matmul(%a, %b) as instruction 1, and a scan. */
static kiln_value build_valid(void) {
  reset();
  kiln_graph *body = cell("cell", 0);
  kiln_value a = P(F32, "N,3"), b = P(F32, "3,5");
  kiln_value e = kiln_unary(g, "exp", a);
  kiln_value y = kiln_matmul(g, e, b);
  kiln_value_set_name(g, y, "y");
  kiln_value out[8];
  scan(out, body, IN(P(F64, "N,4"), P(F64, "7,N,4")), 0, 1);
  kiln_value r[3] = {y, out[0], out[1]};
  kiln_graph_set_results(g, 3, r);
  return y;
}

static void test_verify(void) {
  build_valid();
  ST(kiln_graph_verify(g), KILN_OK, NULL);

  kiln_value y = build_valid();
  g->values[y].type.dims[1] = 6;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE,
     "@main: instruction 1 (%y = matmul): result 0 is typed f32[N, 6]; the shape rule gives f32[N, "
     "5]");

  build_valid();
  g->insts[1].line = 7;
  g->insts[1].col = 3;
  g->insts[1].in[0] = g->insts[1].in[1]; /* matmul(%b, %b): 5 != 3 */
  ST(kiln_graph_verify(g), KILN_ERR_TYPE,
     "@main: instruction 1 (%y = matmul) at 7:3: contracted dims differ");

  build_valid();
  g->insts[0].in[0] = g->insts[1].out[0]; /* exp reads the later matmul */
  ST(kiln_graph_verify(g), KILN_ERR_TYPE,
     "@main: instruction 0 (%2 = exp): operand 0 (%y) is defined by "
     "instruction 1, not before it");

  y = build_valid();
  g->values[y].def_out = 1;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE,
     "instruction 1 (%y = matmul): result 0's value says it is result 1");

  build_valid();
  g->insts[1].in[1] = 999;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "instruction 1 (%y = matmul): operand 1 is id 999");

  y = build_valid();
  g->values[y].type.rank = 9;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "@main: value %y has an invalid type");

  build_valid();
  g->insts[1].attrs[0].i = 2; /* transpose_a */
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "attribute 'transpose_a' is 2, not a bool");

  build_valid();
  g->insts[2].attrs[0].graph = g; /* scan over the entry itself */
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "@main: instruction 2 (%");
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "attribute 'body': @main reaches @main again");

  build_valid();
  kiln_graph *other;
  kiln_graph_create(ctx, "other", &other);
  g->insts[2].attrs[0].graph = other;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "attribute 'body' is not a graph of this module");
  kiln_graph_destroy(other);

  build_valid();
  g->results[0] = 12345;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "@main: result 0 is id 12345");

  build_valid();
  g->mod->bodies[0]->results = NULL;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "@cell: no results are set");

  build_valid();
  g->mod->bodies[0]->values[0].type.dtype = F32; /* %h of @cell */
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "@cell: instruction 0 (%");

  build_valid();
  g->params[1] = g->params[0];
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "@main: parameter 1 is %0, which says it is parameter 0");

  build_valid(); /* a value a pass left behind */
  if (!kir_arena_grow(&g->mod->arena, (void **)&g->values, &g->capvalues, g->nvalues + 1,
                      sizeof *g->values))
    return;
  g->values[g->nvalues++] = (kir_value){.type = {.dtype = F32}, .def = 1, .def_out = 3};
  ST(kiln_graph_verify(g), KILN_ERR_TYPE,
     "@main: value %8 says it is result 3 of instruction 1, which does not define it");

  /* A scan body that itself scans: @outer scans @cell; making it scan itself is a cycle. */
  reset();
  kiln_graph *inner = cell("cell", 0), *outer;
  kiln_graph_create_body(g, "outer", &outer);
  kiln_dim d[3] = {7, S("N"), 4};
  kiln_value h0 = kiln_graph_param(outer, "h0", F64, 2, d + 1);
  kiln_value xs = kiln_graph_param(outer, "xs", F64, 3, d);
  kiln_attr at[2] = {kiln_attr_graph("body", inner), kiln_attr_int("n_carry", 1)};
  kiln_value res[8];
  int n = kiln_op_multi(outer, "scan", 2, (kiln_value[]){h0, xs}, 2, at, 8, res);
  kiln_graph_set_results(outer, 1, res);
  kiln_value top[8];
  kiln_attr at2[2] = {kiln_attr_graph("body", outer), kiln_attr_int("n_carry", 0)};
  kiln_op_multi(g, "scan", 2, (kiln_value[]){P(F64, "5,N,4"), P(F64, "5,7,N,4")}, 2, at2, 8, top);
  kiln_graph_set_results(g, 1, top);
  checks++;
  if (n != 2 || kiln_graph_status(g) != KILN_OK)
    fail(__LINE__, "nested scan: %s%s", kiln_ctx_error(ctx), "");
  ST(kiln_graph_verify(g), KILN_OK, NULL);
  outer->insts[0].attrs[0].graph = outer;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "@outer: instruction 0 (%");
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "attribute 'body': @outer reaches @outer again");

  /* A graph with a builder error reports that error. */
  reset();
  kiln_value bad = OP("exp", IN(P(I32, "2")), NOAT);
  (void)bad;
  ST(kiln_graph_verify(g), KILN_ERR_TYPE, "exp takes float operands");
  reset();
}

int main(void) {
  ctx = kiln_ctx_create();
  if (!ctx) return 2;
  reset();
  test_sources();
  test_elementwise();
  test_reduce();
  test_movement();
  test_index();
  test_matmul();
  test_conv();
  test_pool();
  test_softmax_norm();
  test_attention();
  test_scan();
  test_verify();
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  printf("test_shape: %d checks, %d failed\n", checks, failures);
  return failures != 0;
}
