/*
 * test_device.c — the device layer (runtime/device/device.h) and what is built on
 * it: kiln_compile with a device (the JIT on a GPU) and training on a
 * device, on lavapipe where there is no GPU.
 *
 * - krt_device_parse accepts vulkan[:N], cuda[:N], hip[:N] and refuses the
 *   rest; krt_image_key is FNV-1a 64 (the published test vectors).
 * - Every model of examples/models/ built in f32 is compiled once with
 *   kiln_compile(device "vulkan") and run twice, each time on fresh random
 *   inputs: where the model has a symbolic dim and no graph input, the
 *   second run has other sizes (the same compiled program, rebound). Each
 *   result is compared with the f64 reference interpreter (kiln_graph_run
 *   eager) within 1e-5 relative, as test_vulkan.c. kiln_compiled_run_raw and
 *   kiln_compiled_output_shape agree with kiln_compiled_run on the mlp.
 *   A model the device cannot run must be KILN_ERR_UNSUPPORTED.
 * - A wrong input axis is KILN_ERR_RUNTIME naming the input and the axis;
 *   a symbol bound twice to different sizes names both.
 * - krt_device_lower words a refusal for the device ("backend 'cuda': no
 *   compiled kernel for op 'reduce_sum' (f16)"); Vulkan widens f16 first and
 *   runs it.
 * - "cuda" and "hip" (no such device in CI) give KILN_ERR_UNSUPPORTED with
 *   "no CUDA device (" / "no ROCm device (", leave *out NULL and leak
 *   nothing (ASan); a bad name is KILN_ERR_INVALID.
 * - A training step (mlp on two spirals, cross entropy, Adam and SGD with
 *   momentum) on vulkan for 15 steps ends with every parameter within 1e-4
 *   relative of the same steps on the CPU compiled backend (relative to the
 *   largest value of that parameter), and the loss decreases.
 *
 * - On the stand-in CUDA driver (tests/unit/fake_cuda.c: host memory,
 *   launches recorded, not run) with NVRTC present, the device layer's CUDA
 *   path: kiln_compile(device "cuda") compiles once, runs at two batch
 *   sizes with results of the right shapes, refuses a wrong axis, and a
 *   training step runs there, leaving no device memory, module or stream
 *   behind.
 *
 * Without a Vulkan device the Vulkan parts print why and pass.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda.h"
#include "ir/kir.h"
#include "kiln/kiln.h"
#include "runtime/device/device.h"
#include "skip.h"

#include "runner.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) { /* xorshift64*, in [0, 1) */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* ---- names and keys ---- */

static void test_parse(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  krt_device_kind k;
  int i;
  CHECK(krt_device_parse(ctx, "vulkan", &k, &i) == KILN_OK && k == KRT_DEVICE_VULKAN && i == 0);
  CHECK(krt_device_parse(ctx, "vulkan:1", &k, &i) == KILN_OK && k == KRT_DEVICE_VULKAN && i == 1);
  CHECK(krt_device_parse(ctx, "cuda:0", &k, &i) == KILN_OK && k == KRT_DEVICE_CUDA && i == 0);
  CHECK(krt_device_parse(ctx, "hip:255", &k, &i) == KILN_OK && k == KRT_DEVICE_HIP && i == 255);
  static const char *const bad[] = {"", "cpu", "tpu", "cuda:", "cuda:x", "cuda:-1", "cuda:256",
                                    "vulkan:1a", "vulkanx", "cuda:0:1"};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
    kiln_status s = krt_device_parse(ctx, bad[b], &k, &i);
    CHECK(s == KILN_ERR_INVALID);
    CHECK(strstr(kiln_ctx_error(ctx), "expected vulkan[:N], cuda[:N] or hip[:N]"));
  }
  CHECK(!strcmp(krt_device_kind_name(KRT_DEVICE_VULKAN), "vulkan"));
  CHECK(!strcmp(krt_device_kind_name(KRT_DEVICE_CUDA), "cuda"));
  CHECK(!strcmp(krt_device_kind_name(KRT_DEVICE_HIP), "hip"));
  /* FNV-1a 64 test vectors */
  CHECK(krt_image_key("", 0) == 0xcbf29ce484222325ull);
  CHECK(krt_image_key("a", 1) == 0xaf63dc4c8601ec8cull);
  CHECK(krt_image_key("foobar", 6) == 0x85944171f73967e8ull);
  char spec[32];
  krt_device_auto(spec, sizeof spec);
  printf("auto device: %s\n", spec);
  CHECK(!strcmp(spec, "cpu") || !strncmp(spec, "cuda:", 5) || !strncmp(spec, "hip:", 4) ||
        !strncmp(spec, "vulkan:", 7));
  kiln_ctx_destroy(ctx);
}

/* ---- the example models through kiln_compile(device) ---- */

static kiln_tensor *ints(kiln_ctx *ctx, const int64_t *v, int64_t n) {
  kiln_tensor *t = NULL;
  kiln_tensor_create(ctx, KILN_I64, 1, &n, &t);
  for (int64_t i = 0; t && i < n; i++) kiln_tensor_set(t, (size_t)i, (double)v[i]);
  return t;
}

/* The size a symbol takes in run `run` (0, 1): as test_models.c, then others. */
static int64_t sym_size(const char *s, int run) {
  if (!strcmp(s, "T")) return run ? 7 : 5;
  if (!strcmp(s, "N")) return run ? 9 : 6;
  if (!strcmp(s, "G")) return 2;
  return run ? 4 : 3;
}

static bool is_graph_input(const char *name) {
  static const char *const tails[] = {".src", ".dst", ".batch", ".graphs"};
  size_t len = strlen(name);
  for (int t = 0; t < 4; t++) {
    size_t n = strlen(tails[t]);
    if (len > n && !strcmp(name + len - n, tails[t])) return true;
  }
  return false;
}

/* Whether the model has a graph input (whose node count stays that of the ring below). */
static bool has_graph_input(kiln_graph *g, size_t np) {
  for (size_t i = np; i < kiln_graph_num_params(g); i++)
    if (is_graph_input(kiln_value_name(g, kiln_graph_get_param(g, i)))) return true;
  return false;
}

static bool has_symbol(kiln_graph *g, size_t np) {
  for (size_t i = np; i < kiln_graph_num_params(g); i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    for (size_t k = 0; k < kiln_value_rank(g, v); k++)
      if (kiln_value_dim(g, v, k) < 0) return true;
  }
  return false;
}

/* Inputs of a model graph: its parameters, a ring graph for GNN inputs, random data. */
static bool model_inputs(kiln_ctx *ctx, kiln_graph *g, kiln_params *p, kiln_tensor **in,
                         size_t n, int run) {
  static const int64_t src[] = {0, 1, 2, 3, 4, 5, 1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5};
  static const int64_t dst[] = {1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  static const int64_t batch[] = {0, 0, 0, 1, 1, 1}, graphs[] = {0, 1};
  size_t np = kiln_params_count(p);
  if (has_graph_input(g, np)) run = 0; /* the ring has 6 nodes */
  for (size_t i = 0; i < n; i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    const char *name = kiln_value_name(g, v);
    size_t len = strlen(name);
    if (i < np) in[i] = kiln_params_tensor(p, i);
    else if (len > 4 && !strcmp(name + len - 4, ".src")) in[i] = ints(ctx, src, 18);
    else if (len > 4 && !strcmp(name + len - 4, ".dst")) in[i] = ints(ctx, dst, 18);
    else if (len > 6 && !strcmp(name + len - 6, ".batch")) in[i] = ints(ctx, batch, 6);
    else if (len > 7 && !strcmp(name + len - 7, ".graphs")) in[i] = ints(ctx, graphs, 2);
    else {
      int64_t dims[8];
      size_t r = kiln_value_rank(g, v);
      for (size_t k = 0; k < r && k < 8; k++) {
        kiln_dim d = kiln_value_dim(g, v, k);
        dims[k] = d >= 0 ? d : sym_size(kiln_dim_symbol_name(g, d), run);
      }
      kiln_dtype t = kiln_value_dtype(g, v);
      if (r > 8 || kiln_tensor_create(ctx, t, r, dims, &in[i])) return false;
      for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++)
        kiln_tensor_set(in[i], e, t == KILN_I64 ? floor(5 * uniform()) : 2 * uniform() - 1);
    }
    if (!in[i]) return false;
  }
  return true;
}

/* The largest relative difference (|x - y| / (1 + |x|)) of b from the reference a. */
/* The worst tr_diff of b from the reference a; *shapes false where a shape differs. */
static double difference(kiln_tensor *const *a, kiln_tensor *const *b, size_t nout, bool *shapes) {
  *shapes = true;
  for (size_t k = 0; k < nout; k++) *shapes = *shapes && tr_same_shape(a[k], b[k]);
  return tr_diff_all(b, a, nout);
}

/* kiln_compiled_output_shape and kiln_compiled_run_raw give what kiln_compiled_run gave. */
static void check_raw(kiln_ctx *ctx, kiln_compiled *c, kiln_tensor *const *in, size_t n,
                      kiln_tensor *const *want, size_t nout) {
  const int64_t *dims[128];
  const void *src[128];
  void *dst[8] = {0};
  bool ok = true;
  for (size_t i = 0; i < n; i++) {
    static int64_t none[1];
    dims[i] = kiln_tensor_rank(in[i]) ? NULL : none;
    src[i] = kiln_tensor_cdata(in[i]);
  }
  int64_t alldims[128][8];
  for (size_t i = 0; i < n; i++) {
    for (size_t d = 0; d < kiln_tensor_rank(in[i]) && d < 8; d++)
      alldims[i][d] = kiln_tensor_dim(in[i], d);
    if (!dims[i]) dims[i] = alldims[i];
  }
  for (size_t r = 0; r < nout; r++) {
    kiln_dtype t;
    size_t rank;
    int64_t od[KILN_MAX_RANK];
    ok = ok && kiln_compiled_output_shape(c, ctx, dims, r, &t, &rank, od) == KILN_OK &&
         t == kiln_tensor_dtype(want[r]) && rank == kiln_tensor_rank(want[r]);
    for (size_t d = 0; ok && d < rank; d++) ok = od[d] == kiln_tensor_dim(want[r], d);
    if (ok) dst[r] = calloc(kiln_tensor_nbytes(want[r]) + 1, 1);
    ok = ok && dst[r];
  }
  ok = ok && kiln_compiled_run_raw(c, ctx, src, dims, dst) == KILN_OK;
  for (size_t r = 0; ok && r < nout; r++)
    ok = !memcmp(dst[r], kiln_tensor_cdata(want[r]), kiln_tensor_nbytes(want[r]));
  if (!ok) printf("FAIL run_raw/output_shape differ from run: %s\n", kiln_ctx_error(ctx));
  else printf("ok   run_raw and output_shape agree with run\n");
  failures += !ok;
  for (size_t r = 0; r < nout; r++) free(dst[r]);
}

/* One model file built in f32: compiled once for the device, run twice, against the reference. */
static void check_model(const char *dir, const char *file) {
  kiln_ctx *ctx = kiln_ctx_create();
  char path[1024];
  kiln_model_file *m = NULL;
  kiln_graph *g = NULL;
  kiln_params *p = NULL;
  kiln_compiled *c = NULL;
  kiln_tensor *in[128] = {0}, *a[8] = {0}, *b[8] = {0};
  size_t n = 0, nout = 0, np = 0;
  double worst[2] = {0, 0};
  if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path ||
      kiln_model_file_read(ctx, path, &m))
    goto fail;
  size_t nin = kiln_model_file_num_inputs(m);
  kiln_build_opts bo = {KILN_F32, 0};
  if (nin > 8 || kiln_layer_build(ctx, kiln_model_file_layer(m), nin, kiln_model_file_inputs(m),
                                  &bo, &g) ||
      kiln_layer_init(ctx, kiln_model_file_layer(m), 3, KILN_F32, &p))
    goto fail;
  n = kiln_graph_num_params(g), nout = kiln_graph_num_results(g), np = kiln_params_count(p);
  if (n > 128 || nout > 8) goto fail;
  kiln_compile_options co = {.device = "vulkan"};
  kiln_status s = kiln_compile(g, &co, &c);
  if (s == KILN_ERR_UNSUPPORTED) {
    printf("unsupported model %-28s %s\n", file, kiln_ctx_error(ctx));
    CHECK(c == NULL);
    goto done;
  }
  if (s) goto fail;
  bool sym = has_symbol(g, np) && !has_graph_input(g, np);
  for (int run = 0; run < 2; run++) {
    for (size_t i = np; i < n; i++) kiln_tensor_destroy(in[i]), in[i] = NULL;
    for (size_t k = 0; k < 8; k++) {
      kiln_tensor_destroy(a[k]), kiln_tensor_destroy(b[k]);
      a[k] = b[k] = NULL;
    }
    if (!model_inputs(ctx, g, p, in, n, run)) goto fail;
    if (kiln_graph_run(g, KILN_BACKEND_EAGER, n, in, nout, a, NULL)) goto fail;
    kiln_run_info info = {0};
    if (kiln_compiled_run(c, ctx, n, in, nout, b, &info)) goto fail;
    CHECK(info.backend == KILN_BACKEND_COMPILED && !strcmp(info.device, "vulkan:0"));
    bool shapes;
    worst[run] = difference(a, b, nout, &shapes);
    if (!shapes) printf("FAIL model %s: run %d: result shapes differ\n", file, run), failures++;
    if (run == 1 && !strcmp(file, "mlp.kiln")) check_raw(ctx, c, in, n, b, nout);
  }
  bool ok = worst[0] <= 1e-5 && worst[1] <= 1e-5;
  printf("%s model %-28s %zu output%s, %s, largest difference f32 %.2g, %.2g\n",
         ok ? "ok  " : "FAIL", file, nout, nout == 1 ? "" : "s",
         sym ? "two sizes" : "same sizes", worst[0], worst[1]);
  failures += !ok;
  goto done;
fail:
  printf("FAIL model %s: %s\n", file, kiln_ctx_error(ctx));
  failures++;
done:
  for (size_t i = np; i < n; i++) kiln_tensor_destroy(in[i]);
  for (size_t k = 0; k < 8; k++) kiln_tensor_destroy(a[k]), kiln_tensor_destroy(b[k]);
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
}

static void check_models(void) {
  const char *dir = KILN_SOURCE_DIR "/examples/models";
  DIR *d = opendir(dir);
  struct dirent *de;
  char names[64][256];
  int n = 0;
  while (d && (de = readdir(d)) && n < 64) {
    size_t len = strlen(de->d_name);
    if (len > 5 && !strcmp(de->d_name + len - 5, ".kiln"))
      snprintf(names[n++], sizeof names[0], "%s", de->d_name);
  }
  if (d) closedir(d);
  qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
  for (int i = 0; i < n; i++) check_model(dir, names[i]);
  if (!n) printf("FAIL no model in %s\n", dir), failures++;
}

/* ---- errors ---- */

/* f32[N, 4] @ f32[4, 3] + f32[N, 3]: a symbol shared by two inputs. */
static kiln_graph *small_graph(kiln_ctx *ctx) {
  kiln_graph *g = NULL;
  if (kiln_graph_create(ctx, "small", &g)) return NULL;
  kiln_dim n = kiln_graph_symbol(g, "N");
  kiln_value x = kiln_graph_param(g, "x", KILN_F32, 2, (const kiln_dim[]){n, 4});
  kiln_value w = kiln_graph_param(g, "w", KILN_F32, 2, (const kiln_dim[]){4, 3});
  kiln_value z = kiln_graph_param(g, "z", KILN_F32, 2, (const kiln_dim[]){n, 3});
  kiln_value y = kiln_add(g, kiln_matmul(g, x, w), z);
  kiln_graph_set_results(g, 1, &y);
  return g;
}

static kiln_tensor *random_tensor(kiln_ctx *ctx, int64_t d0, int64_t d1) {
  kiln_tensor *t = NULL;
  int64_t dims[2] = {d0, d1};
  if (kiln_tensor_create(ctx, KILN_F32, 2, dims, &t)) return NULL;
  for (size_t e = 0; e < kiln_tensor_numel(t); e++) kiln_tensor_set(t, e, 2 * uniform() - 1);
  return t;
}

static void test_errors(bool have_vulkan) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = small_graph(ctx);
  CHECK(g && kiln_graph_status(g) == KILN_OK);
  if (!g) {
    kiln_ctx_destroy(ctx);
    return;
  }
  kiln_compiled *c = (kiln_compiled *)&c; /* must be set to NULL on failure */
  kiln_compile_options co = {.device = "cuda"};
  CHECK(kiln_compile(g, &co, &c) == KILN_ERR_UNSUPPORTED && c == NULL);
  CHECK(!strncmp(kiln_ctx_error(ctx), "no CUDA device (", 16));
  printf("cuda: %s\n", kiln_ctx_error(ctx));
  co.device = "hip:1";
  CHECK(kiln_compile(g, &co, &c) == KILN_ERR_UNSUPPORTED && c == NULL);
  CHECK(!strncmp(kiln_ctx_error(ctx), "no ROCm device (", 16));
  printf("hip: %s\n", kiln_ctx_error(ctx));
  co.device = "tpu";
  CHECK(kiln_compile(g, &co, &c) == KILN_ERR_INVALID && c == NULL);
  CHECK(strstr(kiln_ctx_error(ctx), "unknown device 'tpu'"));
  co.device = "vulkan:200";
  CHECK(kiln_compile(g, &co, &c) == KILN_ERR_UNSUPPORTED && c == NULL);
  CHECK(!strncmp(kiln_ctx_error(ctx), "no Vulkan device (", 18));
  if (have_vulkan) {
    co.device = "vulkan:0";
    CHECK(kiln_compile(g, &co, &c) == KILN_OK && c);
    kiln_tensor *x = random_tensor(ctx, 5, 4), *w = random_tensor(ctx, 4, 3);
    kiln_tensor *z = random_tensor(ctx, 5, 3), *bad = random_tensor(ctx, 5, 2);
    kiln_tensor *z6 = random_tensor(ctx, 6, 3), *out = NULL, *want = NULL;
    kiln_tensor *in[3] = {x, w, z};
    if (c && x && w && z && bad && z6) {
      CHECK(kiln_compiled_run(c, ctx, 3, in, 1, &out, NULL) == KILN_OK);
      CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 3, in, 1, &want, NULL) == KILN_OK);
      bool shapes;
      CHECK(out && want && difference(&want, &out, 1, &shapes) <= 1e-5 && shapes);
      kiln_tensor_destroy(out), out = NULL;
      in[1] = bad; /* w: f32[5, 2], not [4, 3] */
      CHECK(kiln_compiled_run(c, ctx, 3, in, 1, &out, NULL) == KILN_ERR_RUNTIME && !out);
      CHECK(!strcmp(kiln_ctx_error(ctx), "input 1 (%w): axis 0 has size 5, expected 4"));
      printf("wrong shape: %s\n", kiln_ctx_error(ctx));
      in[1] = w, in[2] = z6; /* N is 5 from x, 6 from z */
      CHECK(kiln_compiled_run(c, ctx, 3, in, 1, &out, NULL) == KILN_ERR_RUNTIME && !out);
      CHECK(!strcmp(kiln_ctx_error(ctx),
                    "input 2 (%z): axis 0 (N) has size 6, but N is 5 from an earlier input"));
      printf("wrong shape: %s\n", kiln_ctx_error(ctx));
      const int64_t *dims[3] = {(const int64_t[]){5, 4}, (const int64_t[]){4, 7},
                                (const int64_t[]){5, 3}};
      kiln_dtype t;
      size_t rank;
      int64_t od[KILN_MAX_RANK];
      CHECK(kiln_compiled_output_shape(c, ctx, dims, 0, &t, &rank, od) == KILN_ERR_RUNTIME);
      CHECK(strstr(kiln_ctx_error(ctx), "input 1 (%w): axis 1 has size 7, expected 3"));
    }
    kiln_tensor_destroy(x), kiln_tensor_destroy(w), kiln_tensor_destroy(z);
    kiln_tensor_destroy(bad), kiln_tensor_destroy(z6), kiln_tensor_destroy(want);
    kiln_compiled_destroy(c);
  }
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/*
 * The devices' lowerings: CUDA and HIP take f16 as it is (no f16 reduction
 * kernel: refused, worded for the device), Vulkan widens it to f32 first.
 */
static void test_lowering(bool have_vulkan) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_graph *g = NULL;
  CHECK(kiln_graph_create(ctx, "half", &g) == KILN_OK);
  if (!g) {
    kiln_ctx_destroy(ctx);
    return;
  }
  kiln_value x = kiln_graph_param(g, "x", KILN_F16, 2, (const kiln_dim[]){3, 4});
  kiln_attr axes = kiln_attr_ints("axes", 1, (const int64_t[]){1});
  kiln_value y = kiln_op(g, "reduce_sum", 1, &x, 1, &axes);
  CHECK(kiln_graph_set_results(g, 1, &y) == KILN_OK);
  kir_arena arena = {0};
  kcg_program *p = NULL;
  CHECK(krt_device_lower(ctx, KRT_DEVICE_CUDA, g, NULL, &arena, &p) == KILN_ERR_UNSUPPORTED && !p);
  CHECK(!strcmp(kiln_ctx_error(ctx), "backend 'cuda': no compiled kernel for op 'reduce_sum' (f16)"));
  printf("cuda lowering: %s\n", kiln_ctx_error(ctx));
  kir_arena_free(&arena);
  memset(&arena, 0, sizeof arena);
  CHECK(krt_device_lower(ctx, KRT_DEVICE_VULKAN, g, NULL, &arena, &p) == KILN_OK && p);
  kir_arena_free(&arena);
  if (have_vulkan) { /* and it runs: the sum of 4 halves, in f32, rounded to f16 */
    kiln_compiled *c = NULL;
    kiln_compile_options co = {.device = "vulkan"};
    kiln_tensor *in = NULL, *out = NULL, *want = NULL;
    CHECK(kiln_compile(g, &co, &c) == KILN_OK);
    CHECK(kiln_tensor_create(ctx, KILN_F16, 2, (const int64_t[]){3, 4}, &in) == KILN_OK);
    for (size_t e = 0; in && e < 12; e++) kiln_tensor_set(in, e, 2 * uniform() - 1);
    CHECK(c && in && kiln_compiled_run(c, ctx, 1, &in, 1, &out, NULL) == KILN_OK);
    CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 1, &in, 1, &want, NULL) == KILN_OK);
    for (size_t e = 0; out && want && e < 3; e++)
      CHECK(fabs(kiln_tensor_get(out, e) - kiln_tensor_get(want, e)) <= 2e-3);
    kiln_tensor_destroy(in), kiln_tensor_destroy(out), kiln_tensor_destroy(want);
    kiln_compiled_destroy(c);
  }
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
}

/* ---- training ---- */

/* 15 steps of an mlp on two spirals on `device` (NULL: the CPU); the losses and parameters. */
static kiln_status train(kiln_ctx *ctx, const char *device, kiln_optimizer opt, double *loss,
                         kiln_params **params, double *moved) {
  enum { N = 96, STEPS = 15 };
  static const int64_t xd[2] = {N, 2}, yd[1] = {N};
  kiln_tensor *x = NULL, *y = NULL;
  kiln_tensor_create(ctx, KILN_F32, 2, xd, &x);
  kiln_tensor_create(ctx, KILN_I64, 1, yd, &y);
  uint64_t keep = rng;
  rng = 0x1234567887654321ull; /* the same data on every device */
  for (int i = 0; x && y && i < N; i++) {
    int cls = i % 2;
    double r = (double)(i / 2) / (N / 2) + 0.05, th = 3.0 * M_PI * r + cls * M_PI;
    kiln_tensor_set(x, (size_t)(2 * i), r * cos(th) + 0.05 * (uniform() - 0.5));
    kiln_tensor_set(x, (size_t)(2 * i + 1), r * sin(th) + 0.05 * (uniform() - 0.5));
    kiln_tensor_set(y, (size_t)i, cls);
  }
  rng = keep;
  kiln_layer *l = kiln_layer_call(ctx, "mlp", "I", (size_t)4, (const int64_t[]){2, 32, 32, 2});
  const char *syms[2] = {"N", NULL};
  kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F32, 2, xd, syms};
  kiln_params *p0 = NULL;
  kiln_trainer *t = NULL;
  kiln_status s = l && x && y ? kiln_layer_init(ctx, l, 7, KILN_F32, &p0) : KILN_ERR_NOMEM;
  kiln_train_spec spec = {.model = l, .n_inputs = 1, .inputs = &in, .loss = "cross_entropy",
                          .opt = opt, .dtype = KILN_F32, .backend = KILN_BACKEND_COMPILED,
                          .device = device};
  if (!s) s = kiln_trainer_create(ctx, &spec, p0, &t);
  for (int k = 0; !s && k < STEPS; k++) {
    /* batches of 48 and, every third step, 40: one compiled step, two sizes */
    int64_t b = k % 3 == 2 ? 40 : 48, off = k % 2 ? 48 : 0;
    int64_t bx[2] = {b, 2};
    kiln_tensor *xb = NULL, *yb = NULL;
    s = kiln_tensor_create(ctx, KILN_F32, 2, bx, &xb);
    if (!s) s = kiln_tensor_create(ctx, KILN_I64, 1, &b, &yb);
    if (!s) {
      memcpy(kiln_tensor_data(xb), (const float *)kiln_tensor_cdata(x) + 2 * off,
             (size_t)b * 2 * sizeof(float));
      memcpy(kiln_tensor_data(yb), (const int64_t *)kiln_tensor_cdata(y) + off,
             (size_t)b * sizeof(int64_t));
      kiln_tensor *data[2] = {xb, yb};
      s = kiln_trainer_step(t, 2, data, opt.lr, 0, &loss[k]);
    }
    kiln_tensor_destroy(xb), kiln_tensor_destroy(yb);
  }
  if (!s) {
    kiln_tensor *data[2] = {x, y};
    s = kiln_trainer_eval(t, 2, data, &loss[STEPS]);
  }
  if (!s) s = kiln_params_create(ctx, params);
  for (size_t i = 0; !s && t && i < kiln_params_count(kiln_trainer_params(t)); i++) {
    const kiln_tensor *src = kiln_params_tensor(kiln_trainer_params(t), i);
    int64_t dims[KILN_MAX_RANK];
    for (size_t d = 0; d < kiln_tensor_rank(src); d++) dims[d] = kiln_tensor_dim(src, d);
    kiln_tensor *cp = NULL;
    s = kiln_tensor_create(ctx, kiln_tensor_dtype(src), kiln_tensor_rank(src), dims, &cp);
    const kiln_tensor *init = kiln_params_find(p0, kiln_params_name(kiln_trainer_params(t), i));
    for (size_t e = 0; !s && init && e < kiln_tensor_numel(src); e++)
      *moved = fmax(*moved, fabs(kiln_tensor_get(src, e) - kiln_tensor_get(init, e)));
    if (!s) {
      memcpy(kiln_tensor_data(cp), kiln_tensor_cdata(src), kiln_tensor_nbytes(src));
      s = kiln_params_add(*params, kiln_params_name(kiln_trainer_params(t), i), cp);
    }
  }
  kiln_trainer_destroy(t);
  kiln_params_destroy(p0);
  kiln_layer_release(l);
  kiln_tensor_destroy(x), kiln_tensor_destroy(y);
  return s;
}

static void test_training(const char *optname, kiln_optimizer opt) {
  enum { STEPS = 15 };
  kiln_ctx *ctx = kiln_ctx_create();
  double lc[STEPS + 1] = {0}, lv[STEPS + 1] = {0};
  kiln_params *pc = NULL, *pv = NULL;
  double moved = 0, moved_v = 0;
  kiln_status s = train(ctx, NULL, opt, lc, &pc, &moved);
  if (s) printf("FAIL train %s on the CPU: %s\n", optname, kiln_ctx_error(ctx));
  if (!s) s = train(ctx, "vulkan", opt, lv, &pv, &moved_v);
  if (s) printf("FAIL train %s on vulkan: %s\n", optname, kiln_ctx_error(ctx));
  failures += s != KILN_OK;
  if (!s) {
    double worst = 0, loss_diff = 0;
    for (size_t i = 0; i < kiln_params_count(pc); i++) {
      const kiln_tensor *a = kiln_params_tensor(pc, i);
      const kiln_tensor *b = kiln_params_find(pv, kiln_params_name(pc, i));
      CHECK(b && kiln_tensor_numel(a) == kiln_tensor_numel(b));
      double scale = 0;
      for (size_t e = 0; b && e < kiln_tensor_numel(a); e++)
        scale = fmax(scale, fabs(kiln_tensor_get(a, e)));
      for (size_t e = 0; b && e < kiln_tensor_numel(a); e++) {
        double d = fabs(kiln_tensor_get(a, e) - kiln_tensor_get(b, e)) / (scale > 0 ? scale : 1);
        worst = isnan(d) ? INFINITY : fmax(worst, d);
      }
    }
    for (int k = 0; k <= STEPS; k++)
      loss_diff = fmax(loss_diff, fabs(lc[k] - lv[k]) / (1 + fabs(lc[k])));
    bool ok = worst <= 1e-4 && loss_diff <= 1e-4 && lv[STEPS - 1] < lv[0] && lv[STEPS] < lv[0] &&
              moved_v > 5e-3;
    printf("%s train %-5s 15 steps on vulkan: loss %.4f -> %.4f (eval %.4f), params moved %.2g, "
           "vs CPU %.2g, losses %.2g\n", ok ? "ok  " : "FAIL", optname, lv[0], lv[STEPS - 1],
           lv[STEPS], moved_v, worst, loss_diff);
    failures += !ok;
  }
  kiln_params_destroy(pc), kiln_params_destroy(pv);
  kiln_ctx_destroy(ctx);
}

/* kiln_fit on vulkan: strict, so a model the device cannot run is refused, never interpreted. */
static void test_fit_errors(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_layer *l = kiln_layer_call(ctx, "mlp", "I", (size_t)3, (const int64_t[]){2, 4, 1});
  static const int64_t xd[2] = {8, 2};
  const char *syms[2] = {"N", NULL};
  kiln_model_input in = {"x", KILN_INPUT_TENSOR, KILN_F32, 2, xd, syms};
  kiln_params *p0 = NULL;
  kiln_trainer *t = (kiln_trainer *)&t;
  CHECK(l && kiln_layer_init(ctx, l, 1, KILN_F32, &p0) == KILN_OK);
  kiln_train_spec spec = {.model = l, .n_inputs = 1, .inputs = &in, .dtype = KILN_F32,
                          .opt = kiln_optimizer_default(KILN_OPTIM_SGD),
                          .device = "cuda"};
  CHECK(kiln_trainer_create(ctx, &spec, p0, &t) == KILN_ERR_UNSUPPORTED && !t);
  CHECK(!strncmp(kiln_ctx_error(ctx), "no CUDA device (", 16));
  spec.backend = KILN_BACKEND_EAGER, spec.device = "vulkan";
  t = (kiln_trainer *)&t;
  CHECK(kiln_trainer_create(ctx, &spec, p0, &t) == KILN_ERR_INVALID && !t);
  CHECK(strstr(kiln_ctx_error(ctx), "backend 'eager' runs on the CPU, not on device 'vulkan'"));
  kiln_params_destroy(p0);
  kiln_layer_release(l);
  kiln_ctx_destroy(ctx);
}

/* ---- the CUDA path on the stand-in driver ---- */

typedef struct fake_cuda_state { /* as tests/unit/fake_cuda.c */
  int live_allocs, live_modules, live_streams, retained, launches, copies;
  int errors;
  unsigned last_grid, last_block;
} fake_cuda_state;

static void test_fake_cuda(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  void *bin = NULL;
  size_t len = 0;
  kiln_status s = kcg_cuda_compile_source(ctx, "extern \"C\" __global__ void f() {}", "sm_90",
                                          false, &bin, &len);
  free(bin);
  void *lib = s == KILN_OK ? dlopen(FAKE_CUDA, RTLD_NOW) : NULL;
  void *sym = lib ? dlsym(lib, "fake_cuda_state_get") : NULL;
  fake_cuda_state *(*get)(void) = NULL;
  memcpy(&get, &sym, sizeof sym);
  if (!get) {
    test_skip("the stand-in CUDA part: %s", s ? kiln_ctx_error(ctx) : "no fake_cuda");
    CHECK(s == KILN_ERR_UNSUPPORTED);
    if (lib) dlclose(lib);
    kiln_ctx_destroy(ctx);
    return;
  }
  fake_cuda_state *st = get();
  setenv("KILN_CUDA", FAKE_CUDA, 1);
  kiln_graph *g = small_graph(ctx);
  kiln_compiled *c = NULL;
  kiln_compile_options co = {.device = "cuda:0"};
  CHECK(g && kiln_compile(g, &co, &c) == KILN_OK && c);
  if (!c) printf("FAIL fake cuda: %s\n", kiln_ctx_error(ctx));
  for (int run = 0; c && run < 2; run++) {
    int64_t n = run ? 9 : 5;
    kiln_tensor *x = random_tensor(ctx, n, 4), *w = random_tensor(ctx, 4, 3);
    kiln_tensor *z = random_tensor(ctx, n, 3), *out = NULL;
    kiln_tensor *in[3] = {x, w, z};
    kiln_run_info info = {0};
    int before = st->launches;
    CHECK(kiln_compiled_run(c, ctx, 3, in, 1, &out, &info) == KILN_OK);
    CHECK(out && kiln_tensor_dim(out, 0) == n && kiln_tensor_dim(out, 1) == 3);
    CHECK(info.backend == KILN_BACKEND_COMPILED && !strcmp(info.device, "cuda:0") &&
          st->launches > before && st->live_allocs == 0);
    kiln_tensor_destroy(out), out = NULL;
    in[2] = w;
    CHECK(kiln_compiled_run(c, ctx, 3, in, 1, &out, NULL) == KILN_ERR_RUNTIME && !out);
    CHECK(strstr(kiln_ctx_error(ctx), "input 2 (%z): axis 0 (N) has size 4, but N is"));
    kiln_tensor_destroy(x), kiln_tensor_destroy(w), kiln_tensor_destroy(z);
  }
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
  CHECK(st->live_allocs == 0 && st->live_modules == 0 && st->live_streams == 0 &&
        st->retained == 0 && st->errors == 0);
  /* a training step compiled for cuda:0 runs there (the values are not computed) */
  double loss[16];
  kiln_params *pp = NULL;
  double moved = 0;
  int before = st->launches;
  kiln_optimizer sgd = kiln_optimizer_default(KILN_OPTIM_SGD);
  s = train(ctx, "cuda", sgd, loss, &pp, &moved);
  if (s) printf("FAIL fake cuda training: %s\n", kiln_ctx_error(ctx));
  CHECK(s == KILN_OK && st->launches > before);
  kiln_params_destroy(pp);
  CHECK(st->live_allocs == 0 && st->live_modules == 0 && st->live_streams == 0 &&
        st->retained == 0 && st->errors == 0);
  printf("%s the device layer on the stand-in CUDA driver: %d launches\n",
         st->errors || st->live_allocs ? "FAIL" : "ok  ", st->launches);
  unsetenv("KILN_CUDA");
  kiln_ctx_destroy(ctx);
  dlclose(lib);
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  test_parse();
  kiln_ctx *ctx = kiln_ctx_create();
  krt_device *d = NULL;
  kiln_status s = krt_device_open(ctx, KRT_DEVICE_VULKAN, 0, &d);
  bool have = s == KILN_OK;
  if (have) {
    char desc[256];
    krt_device_describe(d, desc, sizeof desc);
    printf("device: vulkan:0 %s\n", desc);
    CHECK(krt_device_kind_of(d) == KRT_DEVICE_VULKAN);
  } else {
    test_skip("the Vulkan parts: %s", kiln_ctx_error(ctx));
    CHECK(s == KILN_ERR_UNSUPPORTED);
  }
  krt_device_close(d);
  kiln_ctx_destroy(ctx);
  if (!only || !strcmp(only, "errors")) test_errors(have), test_fit_errors(), test_lowering(have);
  if (have && (!only || !strcmp(only, "train"))) {
    test_training("adam", kiln_optimizer_default(KILN_OPTIM_ADAM));
    kiln_optimizer sgd = kiln_optimizer_default(KILN_OPTIM_SGD);
    sgd.lr = 0.05, sgd.momentum = 0.9;
    test_training("sgd", sgd);
  }
  if (!only || !strcmp(only, "cuda")) test_fake_cuda();
  if (have && (!only || !strcmp(only, "models"))) check_models();
  printf("%d failures\n", failures);
  return test_status(failures);
}
