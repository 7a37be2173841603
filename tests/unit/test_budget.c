/*
 * test_budget.c — the memory budget: requests that cannot fit are refused,
 * naming the tensor and the bytes, before anything is allocated (issue 22,
 * item 7).
 *
 * Each of the runaway requests, built here as a small graph or
 * file: ONNX Expand and ConstantOfShape to 10^12 elements, a .kir constant
 * splat of 10^12, an .npy of shape (0, 2^40) reduced and broadcast, and
 * initialising a linear(10^6, 10^6) (the .so at a batch of 10^9 is
 * test_aot's); and temporaries of 10^12 elements behind a small result. Each is run eager and compiled under the default budget (the
 * machine's physical memory: terabytes exceed any machine that runs this)
 * and must fail with KILN_ERR_NOMEM and the message asserted below. Then the
 * ways a user sets the budget: kiln_options.memory_limit on the context,
 * KILN_MEMORY_LIMIT (bytes with K/M/G/T, or "none"), and that a request
 * within the budget still runs.
 */
#include <stdint.h>
#include <stdlib.h>

#include "runner.h"

/* The message must contain `want` (and, if `want2` is not NULL, that too). */
static void expect_nomem(kiln_ctx *ctx, kiln_status s, const char *what, const char *want,
                         const char *want2) {
  const char *msg = kiln_ctx_error(ctx);
  if (s != KILN_ERR_NOMEM || !strstr(msg, want) || (want2 && !strstr(msg, want2))) {
    printf("FAIL %s: %s, '%s'\n  wanted KILN_ERR_NOMEM with '%s'%s%s\n", what, kiln_status_name(s),
           msg, want, want2 ? " and " : "", want2 ? want2 : "");
    failures++;
  } else {
    printf("ok   %s: %s\n", what, msg);
  }
}

/* Runs g with `backend` on n inputs and expects the budget to refuse it. */
static void run_refused(kiln_graph *g, kiln_backend backend, size_t n, kiln_tensor *const *in,
                        const char *what, const char *want, const char *want2) {
  kiln_ctx *ctx = kiln_graph_ctx(g);
  kiln_tensor *out[2] = {0};
  kiln_status s = kiln_graph_run(g, backend, n, in, kiln_graph_num_results(g), out, NULL);
  char label[160];
  snprintf(label, sizeof label, "%s (%s)", what, kiln_backend_name(backend));
  expect_nomem(ctx, s, label, want, want2);
  CHECK(!out[0]);
  tr_free(out, 2);
}

static kiln_graph *parse(kiln_ctx *ctx, const char *text) {
  kiln_graph *g = NULL;
  if (kiln_graph_parse(ctx, text, strlen(text), "budget.kir", &g) != KILN_OK) {
    printf("FAIL parse: %s\n", kiln_ctx_error(ctx));
    failures++;
  }
  return g;
}

/* ---- a .kir constant splat of 10^12 elements ---- */

static void test_constant_splat(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = parse(ctx, "func @main() -> (f32[1000000, 1000000]) {\n"
                             "  %c = constant() {dtype = f32, shape = [1000000, 1000000], value = "
                             "[1.5]} : f32[1000000, 1000000]\n"
                             "  return %c\n}\n");
  if (g) {
    run_refused(g, KILN_BACKEND_EAGER, 0, NULL, "constant splat",
                "2:3: constant: result %c (f32[1000000, 1000000]) needs 8000000000000 bytes, "
                "more than the memory budget of ",
                "(the machine's physical memory; KILN_MEMORY_LIMIT or kiln_options.memory_limit "
                "sets another)");
    run_refused(g, KILN_BACKEND_COMPILED, 0, NULL, "constant splat",
                "result 0 (f32[1000000, 1000000]) needs 4000000000000 bytes, more than the memory "
                "budget of ",
                "physical memory");
  }
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- an .npy of shape (0, 2^40), reduced over its 0 rows and broadcast ---- */

/* A version 1.0 .npy of f32 with `shape` (a Python tuple) and no data. */
static size_t npy_header(char *buf, size_t cap, const char *shape) {
  char dict[128];
  int n =
      snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape);
  size_t hlen = ((size_t)n + 1 + 10 + 63) / 64 * 64 - 10; /* magic + header, a multiple of 64 */
  if (10 + hlen > cap) return 0;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)(hlen & 0xff), buf[9] = (char)(hlen >> 8);
  memset(buf + 10, ' ', hlen);
  memcpy(buf + 10, dict, (size_t)n);
  buf[10 + hlen - 1] = '\n';
  return 10 + hlen;
}

static void test_npy_broadcast(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  char buf[256];
  size_t len = npy_header(buf, sizeof buf, "(0, 1099511627776)");
  kiln_tensor *x = NULL;
  CHECK_STATUS(ctx, kiln_npy_read_mem(ctx, buf, len, "empty.npy", &x), KILN_OK);
  CHECK(x && kiln_tensor_numel(x) == 0 && kiln_tensor_dim(x, 1) == (int64_t)1 << 40);
  kiln_graph *g = parse(ctx, "func @main(%x: f32[N, M]) -> (f32[4, M]) {\n"
                             "  %s = reduce_sum(%x) {axes = [0], keepdims = true} : f32[1, M]\n"
                             "  %b = broadcast(%s) {shape = [4, M]} : f32[4, M]\n"
                             "  return %b\n}\n");
  if (g && x) {
    run_refused(g, KILN_BACKEND_EAGER, 1, &x, ".npy (0, 2^40) reduced and broadcast",
                "2:3: reduce_sum: result %s (f32[1, 1099511627776]) needs 8796093022208 bytes",
                "physical memory");
    run_refused(g, KILN_BACKEND_COMPILED, 1, &x, ".npy (0, 2^40) reduced and broadcast",
                "result 0 (f32[4, 1099511627776]) needs 17592186044416 bytes", "physical memory");
  }
  kiln_tensor_destroy(x);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- ONNX Expand and ConstantOfShape to 10^12 elements ---- */

#include "pb_write.h"

/* A ValueInfoProto: a float tensor of `rank` dims. */
static pb value_info(const char *name, int rank, const int64_t *dims) {
  pb shape = {0}, tt = {0}, type = {0}, vi = {0};
  for (int k = 0; k < rank; k++) {
    pb d = {0};
    f_int(&d, 1, dims[k]);
    f_msg(&shape, 1, &d);
  }
  f_int(&tt, 1, 1); /* FLOAT */
  f_msg(&tt, 2, &shape);
  f_msg(&type, 1, &tt);
  f_str(&vi, 1, name);
  f_msg(&vi, 2, &type);
  return vi;
}

/*
 * A model y = OP(inputs) whose input "shape" is an int64 initializer
 * [10^6, 10^6]; Expand also takes "x": f32[1].
 */
static pb onnx_model(const char *op) {
  static const int64_t one[1] = {1}, big[2] = {1000000, 1000000};
  pb g = {0}, t = {0}, nd = {0}, m = {0}, os = {0};
  bool expand = !strcmp(op, "Expand");
  if (expand) {
    t = value_info("x", 1, one);
    f_msg(&g, 11, &t);
    f_str(&nd, 1, "x");
  }
  f_str(&nd, 1, "shape");
  f_str(&nd, 2, "y");
  f_str(&nd, 4, op);
  f_msg(&g, 1, &nd);
  t = (pb){0};
  f_int(&t, 1, 2); /* TensorProto: dims [2], INT64, int64_data, name */
  f_int(&t, 2, 7);
  f_int(&t, 7, big[0]);
  f_int(&t, 7, big[1]);
  f_str(&t, 8, "shape");
  f_msg(&g, 5, &t);
  t = value_info("y", 2, big);
  f_msg(&g, 12, &t);
  f_int(&m, 1, 8);
  f_str(&os, 1, "");
  f_int(&os, 2, 13);
  f_msg(&m, 8, &os);
  f_msg(&m, 7, &g);
  return m;
}

static void test_onnx(const char *op) {
  kiln_ctx *ctx = kiln_ctx_create();
  pb m = onnx_model(op);
  kiln_graph *g = NULL;
  kiln_tensor *x = NULL;
  int64_t one = 1;
  bool expand = !strcmp(op, "Expand");
  char what[64];
  snprintf(what, sizeof what, "ONNX %s to 10^12", op);
  if (kiln_onnx_import_mem(ctx, m.p, m.n, "big.onnx", NULL, &g) != KILN_OK) {
    printf("FAIL %s: import: %s\n", what, kiln_ctx_error(ctx));
    failures++;
  } else if (!expand || kiln_tensor_create(ctx, KILN_F32, 1, &one, &x) == KILN_OK) {
    if (x) kiln_tensor_set(x, 0, 0.75);
    size_t n = x ? 1 : 0;
    run_refused(g, KILN_BACKEND_EAGER, n, &x, what,
                "(f32[1000000, 1000000]) needs 8000000000000 bytes, more than the memory budget",
                "physical memory");
    run_refused(g, KILN_BACKEND_COMPILED, n, &x, what,
                "result 0 (f32[1000000, 1000000]) needs 4000000000000 bytes, more than the memory "
                "budget",
                "physical memory");
  }
  free(m.p);
  kiln_tensor_destroy(x);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- temporaries of 10^12 elements behind a small result ---- */

static void test_arena(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = parse(ctx, "func @main(%x: f32[N]) -> (f32[N]) {\n"
                             "  %b = broadcast(%x) {shape = [N, N]} : f32[N, N]\n"
                             "  %e = exp(%b) : f32[N, N]\n"
                             "  %s = reduce_sum(%e) {axes = [1]} : f32[N]\n"
                             "  return %s\n}\n");
  int64_t n = 1000000;
  kiln_tensor *x = NULL;
  CHECK_STATUS(ctx, kiln_tensor_create(ctx, KILN_F32, 1, &n, &x), KILN_OK);
  for (size_t i = 0; x && i < kiln_tensor_numel(x); i++) kiln_tensor_set(x, i, 0.5 - 1e-7 * i);
  if (g && x) {
    run_refused(g, KILN_BACKEND_EAGER, 1, &x, "temporaries of 10^12",
                "2:3: broadcast: result %b (f32[1000000, 1000000]) needs 8000000000000 bytes",
                "physical memory");
    setenv("KILN_FUSION", "0", 1); /* fused, the three are one kernel without a temporary */
    run_refused(g, KILN_BACKEND_COMPILED, 1, &x, "temporaries of 10^12",
                "the arena of the run's temporaries (the largest f32[1000000, 1000000]) needs ",
                "physical memory");
    unsetenv("KILN_FUSION");
  }
  kiln_tensor_destroy(x);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- initialising a linear(10^6, 10^6) ---- */

static void test_init(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_layer *l = kiln_linear(ctx, 1000000, 1000000, 1, NULL);
  kiln_params *p = NULL;
  CHECK(l != NULL);
  if (l) {
    kiln_status s = kiln_layer_init(ctx, l, 0, KILN_F32, &p);
    /* W and b in f32 (4 * (10^12 + 10^6)) and W drawn in float64 (8 * 10^12) */
    expect_nomem(ctx, s, "init linear(10^6, 10^6)",
                 "init: 2 parameters (the largest 'W', f32[1000000, 1000000]) and a float64 copy "
                 "of the largest need 12000004000000 bytes, more than the memory budget of ",
                 "physical memory");
    CHECK(!p);
  }
  kiln_params_destroy(p);
  kiln_layer_release(l);
  kiln_ctx_destroy(ctx);
}

/* ---- how a user sets the budget ---- */

static void test_settings(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_tensor *t = NULL;
  int64_t dims[2] = {1024, 1024}; /* 4 MiB of f32 */
  /* KILN_MEMORY_LIMIT, with a unit */
  setenv("KILN_MEMORY_LIMIT", "2M", 1);
  expect_nomem(ctx, kiln_tensor_create(ctx, KILN_F32, 2, dims, &t), "KILN_MEMORY_LIMIT=2M",
               "tensor (f32[1024, 1024]) needs 4194304 bytes, more than the memory budget of "
               "2097152 bytes (KILN_MEMORY_LIMIT)",
               NULL);
  CHECK(!t);
  setenv("KILN_MEMORY_LIMIT", "4194304", 1);
  CHECK_STATUS(ctx, kiln_tensor_create(ctx, KILN_F32, 2, dims, &t), KILN_OK);
  kiln_tensor_destroy(t);
  /* the context's options win over the environment */
  kiln_options o = {.memory_limit = 1 << 20};
  kiln_ctx_set_options(ctx, &o);
  expect_nomem(ctx, kiln_tensor_create(ctx, KILN_F32, 2, dims, &t), "memory_limit = 1 MiB",
               "needs 4194304 bytes, more than the memory budget of 1048576 bytes "
               "(kiln_options.memory_limit)",
               NULL);
  /* A graph under budgets of 8, 3 and 1.5 MiB. x is 1 MiB of f32 (2 MiB in the interpreter),
     %c and the result 2 MiB (4 MiB in the interpreter); compiled, concat and exp are one
     kernel, with no temporary. The run's context sets the budget, not the one the compiled
     model was made under. */
  kiln_graph *g = parse(ctx, "func @main(%x: f32[N, 4]) -> (f32[N, 8]) {\n"
                             "  %c = concat(%x, %x) {axis = 1} : f32[N, 8]\n"
                             "  %y = exp(%c) : f32[N, 8]\n"
                             "  return %y\n}\n");
  int64_t xd[2] = {65536, 4};
  o.memory_limit = 8 << 20;
  kiln_ctx_set_options(ctx, &o);
  kiln_tensor *x = NULL;
  CHECK_STATUS(ctx, kiln_tensor_create(ctx, KILN_F32, 2, xd, &x), KILN_OK);
  for (size_t i = 0; x && i < kiln_tensor_numel(x); i++)
    kiln_tensor_set(x, i, 0.25 + (double)(i % 7) / 8);
  if (g && x) {
    kiln_tensor *a[1] = {0}, *b[1] = {0};
    CHECK(tr_run("within the budget", g, KILN_BACKEND_EAGER, "cpu", 1, &x, 1, a));
    CHECK(tr_run("within the budget", g, KILN_BACKEND_COMPILED, "cpu", 1, &x, 1, b));
    CHECK(a[0] && b[0] && tr_diff(b[0], a[0]) < 1e-6);
    tr_free(a, 1);
    tr_free(b, 1);
    o.memory_limit = 3 << 20;
    kiln_ctx_set_options(ctx, &o);
    run_refused(g, KILN_BACKEND_EAGER, 1, &x, "3 MiB",
                "2:3: concat: result %c (f32[65536, 8]) needs 4194304 bytes, more than the memory "
                "budget of 3145728 bytes (kiln_options.memory_limit); the reference interpreter "
                "holds 8 bytes an element",
                NULL);
    o.memory_limit = 3 << 19;
    kiln_ctx_set_options(ctx, &o);
    run_refused(g, KILN_BACKEND_EAGER, 1, &x, "1.5 MiB",
                "input 0 (f32[65536, 4]), at the reference interpreter's 8 bytes an element, "
                "needs 2097152 bytes, more than the memory budget of 1572864 bytes",
                NULL);
    run_refused(g, KILN_BACKEND_COMPILED, 1, &x, "1.5 MiB",
                "result 0 (f32[65536, 8]) needs 2097152 bytes, more than the memory budget of "
                "1572864 bytes (kiln_options.memory_limit)",
                NULL);
  }
  kiln_tensor_destroy(x);
  kiln_graph_destroy(g);
  /* "none": no budget (then only what calloc says) */
  o.memory_limit = 0;
  kiln_ctx_set_options(ctx, &o);
  setenv("KILN_MEMORY_LIMIT", "none", 1);
  CHECK_STATUS(ctx, kiln_tensor_create(ctx, KILN_F32, 2, dims, &t), KILN_OK);
  kiln_tensor_destroy(t);
  unsetenv("KILN_MEMORY_LIMIT");
  kiln_ctx_destroy(ctx);
}

int main(void) {
  unsetenv("KILN_MEMORY_LIMIT"); /* the defaults first */
  test_constant_splat();
  test_npy_broadcast();
  test_onnx("Expand");
  test_onnx("ConstantOfShape");
  test_arena();
  test_init();
  test_settings();
  printf("%d failures\n", failures);
  return test_status(failures);
}
