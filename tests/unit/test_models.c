/*
 * test_models.c — every model file in examples/models/ (one per zoo model and
 * per recipe) evaluates, builds, and gives the same outputs on the reference
 * interpreter and the compiled backend in float64 (<= 1e-12 relative), with
 * the output shapes of the layer reference's tables.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"
#include "runner.h"

#define FAIL(...)                     \
  do {                                \
    fprintf(stderr, __VA_ARGS__);     \
    fputc('\n', stderr);              \
    failures++;                       \
  } while (0)

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* The size a symbol takes in this test. */
static int64_t sym_size(const char *s) {
  if (!strcmp(s, "T")) return 5;
  if (!strcmp(s, "N")) return 6;
  if (!strcmp(s, "G")) return 2;
  return 3; /* B and anything else */
}

/* The expected output shapes: "rows x cols" per output, rows the batch/node/graph count. */
typedef struct expect {
  const char *file;
  const char *shapes; /* e.g. "6,3" or "3,5,65" or "6,784;6,16" */
} expect;

static const expect expects[] = {
    {"mlp.kiln", "6,3"},
    {"resnet_mlp.kiln", "6,4"},
    {"cnn.kiln", "3,10"},
    {"lstm_classifier.kiln", "3,4"},
    {"transformer_lm.kiln", "3,5,65"},
    {"transformer_classifier.kiln", "3,5"},
    {"autoencoder.kiln", "6,784;6,16"},
    {"vae.kiln", "6,784;6,16;6,16"},
    {"gcn_net.kiln", "6,4"},
    {"gat_net.kiln", "6,4"},
    {"gin_net.kiln", "2,2"},
    {"siamese.kiln", "6,1"},
    {"lstm_regression.kiln", "3,1"},
    {"wide_deep.kiln", "6,1"},
    {"two_inputs.kiln", "3,10;3,1"},
};

static kiln_tensor *ints(const int64_t *v, int64_t n) {
  kiln_tensor *t = NULL;
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_tensor_create(ctx, KILN_I64, 1, &n, &t);
  for (int64_t i = 0; t && i < n; i++) kiln_tensor_set(t, (size_t)i, (double)v[i]);
  kiln_ctx_destroy(ctx);
  return t;
}

static void check_model(kiln_ctx *ctx, const char *dir, const expect *ex) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, ex->file);
  kiln_model_file *m = NULL;
  if (kiln_model_file_read(ctx, path, &m)) {
    FAIL("%s: %s", ex->file, kiln_ctx_error(ctx));
    return;
  }
  const kiln_layer *l = kiln_model_file_layer(m);
  size_t nin = kiln_model_file_num_inputs(m);
  const kiln_model_input *ins = kiln_model_file_inputs(m);
  /* f64 versions of the inputs. */
  kiln_model_input in64[8];
  for (size_t i = 0; i < nin && i < 8; i++) {
    in64[i] = ins[i];
    if (in64[i].dtype == KILN_F32) in64[i].dtype = KILN_F64;
  }
  kiln_build_opts bo = {KILN_F64, 0};
  kiln_graph *g = NULL;
  kiln_params *p = NULL;
  kiln_tensor *in[128] = {0}, *a[4] = {0}, *b[4] = {0};
  size_t n = 0;
  if (kiln_layer_build(ctx, l, nin, in64, &bo, &g) || kiln_layer_init(ctx, l, 3, KILN_F64, &p)) {
    FAIL("%s: %s", ex->file, kiln_ctx_error(ctx));
    goto done;
  }
  n = kiln_graph_num_params(g);
  if (n > 128) {
    FAIL("%s: too many inputs", ex->file);
    goto done;
  }
  size_t np = kiln_params_count(p);
  /* The graph: a ring over N = 6 nodes in two graphs of 3, with self-loops. */
  static const int64_t src[] = {0, 1, 2, 3, 4, 5, 1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5};
  static const int64_t dst[] = {1, 2, 0, 4, 5, 3, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  static const int64_t batch[] = {0, 0, 0, 1, 1, 1}, graphs[] = {0, 1};
  for (size_t i = 0; i < n; i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    const char *name = kiln_value_name(g, v);
    if (i < np) {
      in[i] = kiln_params_tensor(p, i);
      continue;
    }
    size_t len = strlen(name);
    if (len > 4 && !strcmp(name + len - 4, ".src")) in[i] = ints(src, 18);
    else if (len > 4 && !strcmp(name + len - 4, ".dst")) in[i] = ints(dst, 18);
    else if (len > 6 && !strcmp(name + len - 6, ".batch")) in[i] = ints(batch, 6);
    else if (len > 7 && !strcmp(name + len - 7, ".graphs")) in[i] = ints(graphs, 2);
    else {
      int64_t dims[8];
      size_t r = kiln_value_rank(g, v);
      for (size_t k = 0; k < r; k++) {
        kiln_dim d = kiln_value_dim(g, v, k);
        dims[k] = d >= 0 ? d : sym_size(kiln_dim_symbol_name(g, d));
      }
      kiln_dtype t = kiln_value_dtype(g, v);
      if (kiln_tensor_create(ctx, t, r, dims, &in[i])) {
        FAIL("%s: %s", ex->file, kiln_ctx_error(ctx));
        goto done;
      }
      for (size_t e = 0; e < kiln_tensor_numel(in[i]); e++)
        kiln_tensor_set(in[i], e, t == KILN_I64 ? floor(5 * urand()) : 2 * urand() - 1);
    }
  }
  size_t nout = kiln_graph_num_results(g);
  if (nout > 4) {
    FAIL("%s: %zu results", ex->file, nout);
    goto done;
  }
  if (!tr_run(ex->file, g, KILN_BACKEND_EAGER, "cpu", n, in, nout, a) ||
      !tr_run(ex->file, g, KILN_BACKEND_COMPILED, "cpu", n, in, nout, b))
    goto done;
  /* Shapes as the tables say, and the two backends agree. */
  char got[256] = "";
  double worst = 0;
  for (size_t k = 0; k < nout; k++) {
    for (size_t d = 0; d < kiln_tensor_rank(a[k]); d++)
      snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : (k ? ";" : ""),
               (long long)kiln_tensor_dim(a[k], d));
  }
  worst = tr_diff_all(b, a, nout);
  if (strcmp(got, ex->shapes)) FAIL("%s: output shapes %s, expected %s", ex->file, got, ex->shapes);
  if (!(worst <= 1e-12)) FAIL("%s: compiled differs from eager by %g", ex->file, worst);
  printf("%-28s %-20s compiled-eager %.1e\n", ex->file, got, worst);
done:
  for (size_t i = kiln_params_count(p); i < n; i++) kiln_tensor_destroy(in[i]);
  for (size_t k = 0; k < 4; k++) kiln_tensor_destroy(a[k]), kiln_tensor_destroy(b[k]);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  const char *dir = KILN_SOURCE_DIR "/examples/models";
  /* Every model file has an expectation, and every expectation a file. */
  DIR *d = opendir(dir);
  struct dirent *de;
  size_t nfiles = 0;
  while (d && (de = readdir(d))) {
    size_t len = strlen(de->d_name);
    if (len < 6 || strcmp(de->d_name + len - 5, ".kiln")) continue;
    nfiles++;
    size_t k = 0;
    while (k < sizeof expects / sizeof *expects && strcmp(expects[k].file, de->d_name)) k++;
    if (k == sizeof expects / sizeof *expects) FAIL("%s: no expected shapes in test_models.c", de->d_name);
  }
  if (d) closedir(d);
  if (nfiles != sizeof expects / sizeof *expects) FAIL("%zu model files, %zu expectations", nfiles, sizeof expects / sizeof *expects);
  for (size_t i = 0; i < sizeof expects / sizeof *expects; i++) check_model(ctx, dir, &expects[i]);
  kiln_ctx_destroy(ctx);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  else printf("test_models: OK\n");
  return test_status(failures);
}
