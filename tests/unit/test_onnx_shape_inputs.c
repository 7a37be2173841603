/*
 * test_onnx_shape_inputs.c — ONNX models whose graph inputs decide shapes, run through
 * kiln_onnx_model (include/kiln/onnx.h): specialised per distinct value of those inputs and
 * cached (LRU). The models are built in memory (onnx_build.h):
 *
 *   reshape: y = Relu(Reshape(x, Concat(h, [-1]))), x: f32[2, 3, 4], h: i64[1] — the shape
 *            input reaches Reshape through a Concat, so the importer's refusal names the
 *            Concat's output and the model walks back to h;
 *   slice:   z = Slice(x, starts, [100], [1]) * 2, x: f32[N, 6], starts: i64[1];
 *   plain:   y = Relu(x), no shape input (specialised once, at the open);
 *   flatten: y = Relu(Flatten(x, 2)), x: f32[N, 3, 2] — N * 3 is no single dim of the IR, so the
 *            model is specialised to each run's dims (kiln_onnx_model_fixes_dims), and a
 *            specialisation for a .so needs them given (kiln_onnx_model_specialize_dims);
 *   expand:  what torch's exporters write around a symbolic batch, folded at import:
 *            Expand(b, Where(Equal(Shape(x), [-1, -1]), [1, 1], Shape(x))) + x, and
 *            Cast(Range(0, Cast(Gather(Shape(x), 0), int64), 1), float) — no dims fixed.
 *
 * Each run takes fresh random inputs; every output is compared with values computed here and
 * with the eager backend (the reference interpreter) on the same inputs. The cache's counters
 * are checked after each run (a repeated value is a hit; capacity 2 evicts the least recently
 * used), and the errors: a shape input of the wrong dtype, a missing one, an unknown name, a
 * value the Reshape cannot take.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "onnx_build.h"

static uint64_t rng = 0x9E3779B97F4A7C15u;

static double uniform(void) { /* xorshift64*, in [-1, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (double)((rng * 2685821657736338717u) >> 11) / (double)(1ull << 52) - 1.0;
}

static kiln_tensor *random_f32(kiln_ctx *ctx, size_t rank, const int64_t *dims) {
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, KILN_F32, rank, dims, &t) != KILN_OK) return NULL;
  for (size_t k = 0; k < kiln_tensor_numel(t); k++) kiln_tensor_set(t, k, uniform());
  return t;
}

static kiln_tensor *ints(kiln_ctx *ctx, size_t n, const int64_t *v) {
  kiln_tensor *t = NULL;
  const int64_t d[1] = {(int64_t)n};
  if (kiln_tensor_create(ctx, KILN_I64, 1, d, &t) != KILN_OK) return NULL;
  memcpy(kiln_tensor_data(t), v, n * sizeof *v);
  return t;
}

static void add_init(pb *g, const char *name, int64_t v) {
  pb t = tensor_i64(name, 1, &v);
  f_msg(g, 5, &t);
}

static pb reshape_model(void) {
  pb g = {0}, t;
  const int64_t xd[3] = {2, 3, 4}, hd[1] = {1}, yd[2] = {-1, -1};
  const char *yp[2] = {"a", "b"};
  t = value_info("x", 3, xd, NULL), f_msg(&g, 11, &t);
  t = value_info_t("h", T_INT64, 1, hd, NULL), f_msg(&g, 11, &t);
  t = value_info("y", 2, yd, yp), f_msg(&g, 12, &t);
  add_init(&g, "minus1", -1);
  pb axis = attr_int("axis", 0);
  t = node("Concat", (const char *[]){"h", "minus1", NULL}, (const char *[]){"hs", NULL}, &axis, 1);
  f_msg(&g, 1, &t);
  t = node("Reshape", (const char *[]){"x", "hs", NULL}, (const char *[]){"r", NULL}, NULL, 0);
  f_str(&t, 3, "r"); /* the node's name */
  f_msg(&g, 1, &t);
  t = node("Relu", (const char *[]){"r", NULL}, (const char *[]){"y", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  return model(&g, 13);
}

static pb slice_model(void) {
  pb g = {0}, t;
  const int64_t xd[2] = {-1, 6}, sd[1] = {1}, zd[2] = {-1, -1};
  const char *xp[2] = {"N", NULL}, *zp[2] = {"N", "w"};
  t = value_info("x", 2, xd, xp), f_msg(&g, 11, &t);
  t = value_info_t("starts", T_INT64, 1, sd, NULL), f_msg(&g, 11, &t);
  t = value_info("z", 2, zd, zp), f_msg(&g, 12, &t);
  add_init(&g, "ends", 100);
  add_init(&g, "axes", 1);
  const float two = 2;
  t = tensor_f("two", 0, NULL, &two, false), f_msg(&g, 5, &t);
  t = node("Slice", (const char *[]){"x", "starts", "ends", "axes", NULL},
           (const char *[]){"s", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  t = node("Mul", (const char *[]){"s", "two", NULL}, (const char *[]){"z", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  return model(&g, 13);
}

static kiln_onnx_model *open_pb(kiln_ctx *ctx, pb m, const char *name, kiln_backend backend,
                                size_t cap) {
  kiln_onnx_model_options o = {.backend = backend, .cache_capacity = cap};
  kiln_onnx_model *om = NULL;
  CHECK_STATUS(ctx, kiln_onnx_model_open_mem(ctx, m.p, m.n, name, NULL, &o, &om), KILN_OK);
  return om;
}

static void check_stats(const kiln_onnx_model *m, size_t hits, size_t misses, size_t evictions,
                        size_t entries, int line) {
  kiln_onnx_cache_stats st;
  kiln_onnx_model_cache_stats(m, &st);
  if (st.hits != hits || st.misses != misses || st.evictions != evictions ||
      st.entries != entries) {
    fprintf(stderr, "line %d: cache %zu hits %zu misses %zu evictions %zu entries, wanted %zu %zu "
            "%zu %zu\n", line, st.hits, st.misses, st.evictions, st.entries, hits, misses,
            evictions, entries);
    failures++;
  }
}
#define STATS(m, h, mi, e, n) check_stats(m, h, mi, e, n, __LINE__)

/* got within 1e-6 of want (same shape), element by element. */
static void check_close(const kiln_tensor *got, const kiln_tensor *want, int line) {
  bool same = got && want && kiln_tensor_rank(got) == kiln_tensor_rank(want);
  for (size_t d = 0; same && d < kiln_tensor_rank(got); d++)
    same = kiln_tensor_dim(got, d) == kiln_tensor_dim(want, d);
  for (size_t k = 0; same && k < kiln_tensor_numel(got); k++)
    same = fabs(kiln_tensor_get(got, k) - kiln_tensor_get(want, k)) <= 1e-6;
  if (!same) {
    fprintf(stderr, "line %d: outputs differ\n", line);
    failures++;
  }
}

/* One run of the reshape model at h, checked against Relu of x laid out as [h, 24 / h]. */
static void run_reshape(kiln_ctx *ctx, kiln_onnx_model *m, kiln_onnx_model *eager, int64_t h) {
  const int64_t xd[3] = {2, 3, 4};
  kiln_tensor *x = random_f32(ctx, 3, xd), *hv = ints(ctx, 1, &h), *y = NULL, *ye = NULL;
  kiln_tensor *in[2] = {hv, x};
  const char *names[2] = {"h", "x"};
  kiln_run_info info;
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 2, names, in, 1, &y, &info), KILN_OK);
  CHECK(info.backend == KILN_BACKEND_COMPILED && !strcmp(info.device, "cpu"));
  CHECK(y && kiln_tensor_rank(y) == 2 && kiln_tensor_dim(y, 0) == h &&
        kiln_tensor_dim(y, 1) == 24 / h);
  for (size_t k = 0; y && k < 24; k++)
    CHECK(kiln_tensor_get(y, k) == fmax(kiln_tensor_get(x, k), 0));
  kiln_tensor *ordered[2] = {x, hv}; /* names NULL: in the model's order */
  CHECK_STATUS(ctx, kiln_onnx_model_run(eager, ctx, 2, NULL, ordered, 1, &ye, &info), KILN_OK);
  CHECK(info.backend == KILN_BACKEND_EAGER);
  check_close(y, ye, __LINE__);
  kiln_tensor_destroy(x), kiln_tensor_destroy(hv), kiln_tensor_destroy(y), kiln_tensor_destroy(ye);
}

static void test_reshape(kiln_ctx *ctx) {
  pb mp = reshape_model();
  kiln_onnx_model *m = open_pb(ctx, mp, "reshape.onnx", KILN_BACKEND_COMPILED, 0);
  kiln_onnx_model *e = open_pb(ctx, mp, "reshape.onnx", KILN_BACKEND_EAGER, 0);
  free(mp.p);
  if (!m || !e) {
    kiln_onnx_model_destroy(m), kiln_onnx_model_destroy(e);
    return;
  }
  CHECK(kiln_onnx_model_num_inputs(m) == 2 && kiln_onnx_model_num_outputs(m) == 1);
  CHECK(!strcmp(kiln_onnx_model_input_name(m, 0), "x") &&
        !strcmp(kiln_onnx_model_input_name(m, 1), "h"));
  CHECK(!kiln_onnx_model_is_shape_input(m, 0) && kiln_onnx_model_is_shape_input(m, 1));
  char *list = NULL;
  int complete = -1;
  CHECK_STATUS(ctx, kiln_onnx_model_shape_inputs(m, ctx, &list, &complete), KILN_OK);
  CHECK(list && !strcmp(list, "h") && complete == 0);
  free(list);
  STATS(m, 0, 0, 0, 0);

  run_reshape(ctx, m, e, 4);
  STATS(m, 0, 1, 0, 1);
  run_reshape(ctx, m, e, 6);
  STATS(m, 0, 2, 0, 2);
  run_reshape(ctx, m, e, 4); /* the first value again: a hit */
  STATS(m, 1, 2, 0, 2);
  run_reshape(ctx, m, e, 4);
  STATS(m, 2, 2, 0, 2);
  CHECK_STATUS(ctx, kiln_onnx_model_shape_inputs(m, ctx, &list, &complete), KILN_OK);
  CHECK(list && !strcmp(list, "h") && complete == 1);
  free(list);

  /* errors: each leaves the cache as it was */
  const int64_t xd[3] = {2, 3, 4}, one[1] = {1}, five = 5, four = 4;
  kiln_tensor *x = random_f32(ctx, 3, xd), *hf = random_f32(ctx, 1, one), *h5 = ints(ctx, 1, &five);
  kiln_tensor *h4 = ints(ctx, 1, &four), *y = NULL;
  const char *names[2] = {"x", "h"};
  kiln_tensor *wrong[2] = {x, hf};
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 2, names, wrong, 1, &y, NULL), KILN_ERR_TYPE);
  CHECK_MSG(ctx, "reshape.onnx: shape input 'h' is i64[1], but the value given is f32[1]");
  CHECK(!y);
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 1, names, &x, 1, &y, NULL), KILN_ERR_INVALID);
  CHECK_MSG(ctx, "shape input 'h' has no value: reshape.onnx: node 'r' (Reshape, opset 13): "
                 "input 1 ('hs') must be known at import (a constant, or computed from shapes)");
  const char *bad_names[2] = {"x", "shape"};
  kiln_tensor *ok[2] = {x, h4};
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 2, bad_names, ok, 1, &y, NULL), KILN_ERR_INVALID);
  CHECK_MSG(ctx, "reshape.onnx: the model has no input named 'shape' (its inputs: x, h)");
  kiln_tensor *no_fit[2] = {x, h5}; /* 24 elements do not make rows of 5 */
  CHECK(kiln_onnx_model_run(m, ctx, 2, names, no_fit, 1, &y, NULL) != KILN_OK && !y);
  CHECK(strstr(kiln_ctx_error(ctx), "node 'r' (Reshape, opset 13)"));
  STATS(m, 2, 2, 0, 2);
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 2, names, ok, 1, &y, NULL), KILN_OK);
  STATS(m, 3, 2, 0, 2);
  kiln_tensor_destroy(y);

  /* the graph specialised to h = 4, for `kiln compile --freeze`: x is its one parameter */
  kiln_graph *g = NULL;
  CHECK_STATUS(ctx, kiln_onnx_model_specialize(m, ctx, 1, &names[1], &h4, &g), KILN_OK);
  CHECK(g && kiln_graph_num_params(g) == 1 && kiln_graph_num_results(g) == 1);
  kiln_graph_destroy(g);
  g = NULL;
  CHECK_STATUS(ctx, kiln_onnx_model_specialize(m, ctx, 0, NULL, NULL, &g), KILN_ERR_UNSUPPORTED);
  CHECK(!g && strstr(kiln_ctx_error(ctx), "shape input 'h' has no value: "));
  kiln_tensor_destroy(x), kiln_tensor_destroy(hf), kiln_tensor_destroy(h5), kiln_tensor_destroy(h4);
  kiln_onnx_model_destroy(m);
  kiln_onnx_model_destroy(e);
}

/* One run of the slice model at `start` with n rows, against x[:, start:] * 2. */
static void run_slice(kiln_ctx *ctx, kiln_onnx_model *m, kiln_onnx_model *eager, int64_t start,
                      int64_t n) {
  const int64_t xd[2] = {n, 6};
  kiln_tensor *x = random_f32(ctx, 2, xd), *s = ints(ctx, 1, &start), *z = NULL, *ze = NULL;
  kiln_tensor *in[2] = {x, s};
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 2, NULL, in, 1, &z, NULL), KILN_OK);
  CHECK(z && kiln_tensor_dim(z, 0) == n && kiln_tensor_dim(z, 1) == 6 - start);
  for (int64_t i = 0; z && i < n; i++)
    for (int64_t j = 0; j < 6 - start; j++)
      CHECK(kiln_tensor_get(z, (size_t)(i * (6 - start) + j)) ==
            2 * kiln_tensor_get(x, (size_t)(i * 6 + start + j)));
  CHECK_STATUS(ctx, kiln_onnx_model_run(eager, ctx, 2, NULL, in, 1, &ze, NULL), KILN_OK);
  check_close(z, ze, __LINE__);
  kiln_tensor_destroy(x), kiln_tensor_destroy(s), kiln_tensor_destroy(z), kiln_tensor_destroy(ze);
}

static void test_slice_lru(kiln_ctx *ctx) {
  pb mp = slice_model();
  kiln_onnx_model *m = open_pb(ctx, mp, "slice.onnx", KILN_BACKEND_AUTO, 2);
  kiln_onnx_model *e = open_pb(ctx, mp, "slice.onnx", KILN_BACKEND_EAGER, 0);
  free(mp.p);
  if (!m || !e) {
    kiln_onnx_model_destroy(m), kiln_onnx_model_destroy(e);
    return;
  }
  CHECK(kiln_onnx_model_is_shape_input(m, 1) && !kiln_onnx_model_is_shape_input(m, 0));
  run_slice(ctx, m, e, 1, 3);
  STATS(m, 0, 1, 0, 1);
  run_slice(ctx, m, e, 1, 5); /* another batch size: the same entry (N stays symbolic) */
  STATS(m, 1, 1, 0, 1);
  run_slice(ctx, m, e, 2, 2);
  STATS(m, 1, 2, 0, 2);
  run_slice(ctx, m, e, 1, 4); /* 1 is now the most recently used */
  STATS(m, 2, 2, 0, 2);
  run_slice(ctx, m, e, 3, 2); /* full: 2 goes */
  STATS(m, 2, 3, 1, 2);
  run_slice(ctx, m, e, 1, 1);
  STATS(m, 3, 3, 1, 2);
  run_slice(ctx, m, e, 2, 3); /* specialised again; 3 goes */
  STATS(m, 3, 4, 2, 2);
  kiln_onnx_cache_stats st;
  kiln_onnx_model_cache_stats(m, &st);
  CHECK(st.capacity == 2);
  kiln_onnx_model_destroy(m);
  kiln_onnx_model_destroy(e);
}

/* No shape input: specialised once, at the open; every run is a hit. */
static void test_plain(kiln_ctx *ctx) {
  pb mp = one_node("Relu");
  kiln_onnx_model *m = open_pb(ctx, mp, "relu.onnx", KILN_BACKEND_AUTO, 0);
  free(mp.p);
  if (!m) return;
  STATS(m, 0, 1, 0, 1);
  char *list = NULL;
  int complete = 0;
  CHECK_STATUS(ctx, kiln_onnx_model_shape_inputs(m, ctx, &list, &complete), KILN_OK);
  CHECK(list && !*list && complete == 1);
  free(list);
  const int64_t d[1] = {2};
  kiln_tensor *x = random_f32(ctx, 1, d), *y = NULL;
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 1, NULL, &x, 1, &y, NULL), KILN_OK);
  for (size_t k = 0; y && k < 2; k++) CHECK(kiln_tensor_get(y, k) == fmax(kiln_tensor_get(x, k), 0));
  STATS(m, 1, 1, 0, 1);
  kiln_tensor_destroy(y);
  y = NULL;
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 0, NULL, NULL, 1, &y, NULL), KILN_ERR_INVALID);
  CHECK_MSG(ctx, "relu.onnx: 0 inputs given, the model takes 1");
  kiln_tensor_destroy(x);
  kiln_onnx_model_destroy(m);
  kiln_onnx_model_options o = {.cache_capacity = 5000};
  CHECK_STATUS(ctx, kiln_onnx_model_open_mem(ctx, "", 0, "x.onnx", NULL, &o, &m),
               KILN_ERR_INVALID);
  CHECK(!m);
}

static pb flatten_model(void) {
  pb g = {0}, t;
  const int64_t xd[3] = {-1, 3, 2}, yd[2] = {-1, 2};
  const char *xp[3] = {"N", NULL, NULL}, *yp[2] = {"M", NULL};
  t = value_info("x", 3, xd, xp), f_msg(&g, 11, &t);
  t = value_info("y", 2, yd, yp), f_msg(&g, 12, &t);
  pb axis = attr_int("axis", 2);
  t = node("Flatten", (const char *[]){"x", NULL}, (const char *[]){"f", NULL}, &axis, 1);
  f_msg(&g, 1, &t);
  t = node("Relu", (const char *[]){"f", NULL}, (const char *[]){"y", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  return model(&g, 13);
}

/* The flatten model at batch n: y is Relu of x laid out as [3n, 2]. */
static void run_flatten(kiln_ctx *ctx, kiln_onnx_model *m, int64_t n) {
  const int64_t xd[3] = {n, 3, 2};
  kiln_tensor *x = random_f32(ctx, 3, xd), *y = NULL;
  CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 1, NULL, &x, 1, &y, NULL), KILN_OK);
  CHECK(y && kiln_tensor_rank(y) == 2 && kiln_tensor_dim(y, 0) == 3 * n &&
        kiln_tensor_dim(y, 1) == 2);
  for (size_t k = 0; y && k < kiln_tensor_numel(x); k++)
    CHECK(kiln_tensor_get(y, k) == fmax(kiln_tensor_get(x, k), 0));
  kiln_tensor_destroy(x);
  kiln_tensor_destroy(y);
}

static void test_flatten_dims(kiln_ctx *ctx) {
  pb mp = flatten_model();
  kiln_onnx_model *m = open_pb(ctx, mp, "flatten.onnx", KILN_BACKEND_AUTO, 0);
  if (!m) {
    free(mp.p);
    return;
  }
  CHECK(kiln_onnx_model_fixes_dims(m) == 1); /* learnt at the open, which compiled nothing */
  STATS(m, 0, 0, 0, 0);
  run_flatten(ctx, m, 2);
  run_flatten(ctx, m, 4);
  run_flatten(ctx, m, 2);
  STATS(m, 1, 2, 0, 2); /* one specialisation per batch */
  kiln_graph *g = NULL;
  CHECK_STATUS(ctx, kiln_onnx_model_specialize(m, ctx, 0, NULL, NULL, &g), KILN_ERR_UNSUPPORTED);
  CHECK_MSG(ctx, "flatten.onnx: input 'x' needs its dims fixed (the import refused a symbolic "
                 "dim: flatten.onnx: node with output 'f' (Flatten, opset 13): the product of dims that "
                 "include a symbolic dim is not a single dim)");
  const int64_t d5[3] = {5, 3, 2}, d2[2] = {5, 6};
  kiln_tensor *dims = random_f32(ctx, 3, d5), *bad = random_f32(ctx, 2, d2);
  const char *name = "x";
  CHECK_STATUS(ctx, kiln_onnx_model_specialize_dims(m, ctx, 0, NULL, NULL, 1, &name, &dims, &g),
               KILN_OK);
  CHECK(g && kiln_graph_num_params(g) == 1);
  if (g) {
    kiln_value p = kiln_graph_get_param(g, 0);
    CHECK(kiln_value_rank(g, p) == 3 && kiln_value_dim(g, p, 0) == 5);
  }
  kiln_graph_destroy(g);
  g = NULL;
  CHECK_STATUS(ctx, kiln_onnx_model_specialize_dims(m, ctx, 0, NULL, NULL, 1, &name, &bad, &g),
               KILN_ERR_TYPE);
  CHECK_MSG(ctx, "flatten.onnx: graph input 'x' has rank 3, the value given 2");
  const char *other = "w";
  CHECK_STATUS(ctx, kiln_onnx_model_specialize_dims(m, ctx, 0, NULL, NULL, 1, &other, &dims, &g),
               KILN_ERR_INVALID);
  CHECK_MSG(ctx, "flatten.onnx: no graph input is named 'w'");
  kiln_tensor_destroy(dims);
  kiln_tensor_destroy(bad);
  kiln_onnx_model_destroy(m);
  free(mp.p);
}

static pb expand_model(void) {
  pb g = {0}, t;
  const int64_t xd[2] = {-1, 4}, yd[2] = {-1, 4}, rd[1] = {-1}, m1[2] = {-1, -1}, one[2] = {1, 1};
  const char *xp[2] = {"N", NULL}, *rp[1] = {"N"};
  t = value_info("x", 2, xd, xp), f_msg(&g, 11, &t);
  t = value_info("y", 2, yd, xp), f_msg(&g, 12, &t);
  t = value_info("r", 1, rd, rp), f_msg(&g, 12, &t);
  t = tensor_i64("minus", 2, m1), f_msg(&g, 5, &t);
  t = tensor_i64("ones", 2, one), f_msg(&g, 5, &t);
  add_init(&g, "zero", 0);
  add_init(&g, "step", 1);
  const float bv[4] = {0.5f, -1, 2, 0.25f};
  const int64_t bd[2] = {1, 4};
  t = tensor_f("b", 2, bd, bv, false), f_msg(&g, 5, &t);
  t = node("Shape", (const char *[]){"x", NULL}, (const char *[]){"s", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  t = node("Equal", (const char *[]){"s", "minus", NULL}, (const char *[]){"e", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  t = node("Where", (const char *[]){"e", "ones", "s", NULL}, (const char *[]){"w", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  t = node("Expand", (const char *[]){"b", "w", NULL}, (const char *[]){"bx", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  t = node("Add", (const char *[]){"bx", "x", NULL}, (const char *[]){"y", NULL}, NULL, 0);
  f_msg(&g, 1, &t);
  pb ax = attr_int("axis", 0);
  t = node("Gather", (const char *[]){"s", "zero", NULL}, (const char *[]){"n", NULL}, &ax, 1);
  f_msg(&g, 1, &t);
  pb to = attr_int("to", T_INT64);
  t = node("Cast", (const char *[]){"n", NULL}, (const char *[]){"n64", NULL}, &to, 1);
  f_msg(&g, 1, &t);
  t = node("Range", (const char *[]){"zero", "n64", "step", NULL}, (const char *[]){"ri", NULL},
           NULL, 0);
  f_msg(&g, 1, &t);
  pb tf = attr_int("to", T_FLOAT);
  t = node("Cast", (const char *[]){"ri", NULL}, (const char *[]){"r", NULL}, &tf, 1);
  f_msg(&g, 1, &t);
  return model(&g, 13);
}

static void test_expand_folded(kiln_ctx *ctx) {
  pb mp = expand_model();
  kiln_onnx_model *m = open_pb(ctx, mp, "expand.onnx", KILN_BACKEND_AUTO, 0);
  free(mp.p);
  if (!m) return;
  CHECK(kiln_onnx_model_fixes_dims(m) == 0);
  STATS(m, 0, 1, 0, 1); /* imported with N symbolic, at the open */
  const float bv[4] = {0.5f, -1, 2, 0.25f};
  for (int64_t n = 1; n <= 3; n += 2) {
    const int64_t xd[2] = {n, 4};
    kiln_tensor *x = random_f32(ctx, 2, xd), *out[2] = {NULL, NULL};
    CHECK_STATUS(ctx, kiln_onnx_model_run(m, ctx, 1, NULL, &x, 2, out, NULL), KILN_OK);
    CHECK(out[0] && kiln_tensor_numel(out[0]) == (size_t)(4 * n));
    CHECK(out[1] && kiln_tensor_rank(out[1]) == 1 && kiln_tensor_dim(out[1], 0) == n);
    for (size_t k = 0; out[0] && k < kiln_tensor_numel(x); k++)
      CHECK(fabs(kiln_tensor_get(out[0], k) - (kiln_tensor_get(x, k) + bv[k % 4])) <= 1e-6);
    for (int64_t k = 0; out[1] && k < n; k++) CHECK(kiln_tensor_get(out[1], (size_t)k) == (double)k);
    kiln_tensor_destroy(x);
    kiln_tensor_destroy(out[0]);
    kiln_tensor_destroy(out[1]);
  }
  STATS(m, 2, 1, 0, 1); /* both batches from the one symbolic entry */
  kiln_onnx_model_destroy(m);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  test_reshape(ctx);
  test_slice_lru(ctx);
  test_plain(ctx);
  test_flatten_dims(ctx);
  test_expand_folded(ctx);
  kiln_ctx_destroy(ctx);
  if (!failures) printf("test_onnx_shape_inputs: OK\n");
  return test_status(failures);
}
