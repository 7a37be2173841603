/*
 * check.c — `kiln check`: every layer type, compiled against the reference.
 *
 * For each layer type a small model is built, initialised in float64 and
 * run on fresh random inputs by the reference interpreter and by the
 * compiled backend; the outputs and the gradients of sum(output * r) (r a
 * fixed random tensor) with respect to every parameter are compared. One
 * line per layer, then "OK: largest difference D (LAYER)" — the same check
 * as the seed's check_torch().
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/fit.h"
#include "layers/layers.h"
#include "passes/passes.h"

typedef struct check_case {
  const char *name;
  kiln_layer *(*make)(kiln_ctx *ctx);
  const char *inputs; /* "x:f:4,5 y:i7:4,3 g:graph" — name:kind:dims; i7 = ints below 7 */
} check_case;

#define MK(fn, body) \
  static kiln_layer *fn(kiln_ctx *ctx) { return body; }

MK(mk_mlp, kiln_layer_call(ctx, "mlp", "I", (size_t)4, (const int64_t[]){5, 8, 8, 3}))
MK(mk_conv, kiln_layer_call(ctx, "sequential", "Ls", (size_t)3,
                            (kiln_layer *[]){kiln_layer_call(ctx, "conv2d_layer", "i i", (int64_t)2, (int64_t)3),
                                             kiln_layer_call(ctx, "activation", "s", "relu"),
                                             kiln_layer_call(ctx, "conv2d_layer", "i i k=i stride=i padding=i",
                                                             (int64_t)3, (int64_t)2, (int64_t)3, (int64_t)2, (int64_t)0)}))
MK(mk_pool, kiln_layer_call(ctx, "sequential", "Ls", (size_t)4,
                            (kiln_layer *[]){kiln_layer_call(ctx, "conv2d_layer", "i i", (int64_t)2, (int64_t)3),
                                             kiln_layer_call(ctx, "max_pool", "i", (int64_t)2),
                                             kiln_layer_call(ctx, "avg_pool", "i", (int64_t)2),
                                             kiln_layer_call(ctx, "flatten_layer", "")}))
MK(mk_batch_norm, kiln_layer_call(ctx, "batch_norm_layer", "i", (int64_t)3))
MK(mk_layer_norm, kiln_layer_call(ctx, "layer_norm_layer", "i", (int64_t)5))
MK(mk_rms_norm, kiln_layer_call(ctx, "rms_norm_layer", "i", (int64_t)5))
MK(mk_lstm, kiln_layer_call(ctx, "lstm_layer", "i i", (int64_t)3, (int64_t)4))
MK(mk_gru, kiln_layer_call(ctx, "gru_layer", "i i return_sequences=b", (int64_t)3, (int64_t)4, 0))
MK(mk_attention, kiln_layer_call(ctx, "multi_head_attention", "i heads=i causal=b", (int64_t)8, (int64_t)2, 1))
MK(mk_transformer, kiln_layer_call(ctx, "transformer_encoder", "i heads=i layers=i ff=i", (int64_t)8, (int64_t)2,
                                   (int64_t)2, (int64_t)16))
MK(mk_transformer_lm, kiln_layer_call(ctx, "transformer_lm", "i d=i heads=i layers=i context=i", (int64_t)11,
                                      (int64_t)8, (int64_t)2, (int64_t)1, (int64_t)8))
MK(mk_residual, kiln_layer_call(ctx, "residual", "L pre_norm=L", kiln_layer_call(ctx, "linear", "i i", (int64_t)5, (int64_t)5),
                                kiln_layer_call(ctx, "layer_norm_layer", "i", (int64_t)5)))
MK(mk_parallel, kiln_layer_call(ctx, "parallel", "Ls combine=s", (size_t)2,
                                (kiln_layer *[]){kiln_layer_call(ctx, "linear", "i i", (int64_t)5, (int64_t)3),
                                                 kiln_layer_call(ctx, "dense", "i i act=s", (int64_t)5, (int64_t)3, "tanh")},
                                "concat"))
static kiln_layer *mk_dag(kiln_ctx *ctx) {
  kl_arg n1[3] = {kl_str("a"), kl_layer_arg(kiln_layer_call(ctx, "linear", "i i", (int64_t)5, (int64_t)4)), kl_str("x")};
  kl_arg n2[3] = {kl_str("b"), kl_layer_arg(kiln_layer_call(ctx, "dense", "i i act=s", (int64_t)5, (int64_t)4, "gelu")), kl_str("x")};
  kl_arg ins[2] = {kl_str("a"), kl_str("b")};
  kl_arg n3[3] = {kl_str("c"), kl_layer_arg(kiln_layer_call(ctx, "add", "")), {.kind = KL_A_LIST, .items = ins, .n = 2}};
  kl_arg nodes[3] = {{.kind = KL_A_LIST, .items = n1, .n = 3}, {.kind = KL_A_LIST, .items = n2, .n = 3},
                     {.kind = KL_A_LIST, .items = n3, .n = 3}};
  kl_arg list = {.kind = KL_A_LIST, .items = nodes, .n = 3};
  kl_layer *out = NULL;
  bool ok = n1[1].layer && n2[1].layer && n3[1].layer;
  if (ok) kl_call(ctx, "dag", 1, &list, 0, NULL, NULL, &out);
  kl_layer_release(n1[1].layer), kl_layer_release(n2[1].layer), kl_layer_release(n3[1].layer);
  return out;
}
MK(mk_siamese, kiln_layer_call(ctx, "siamese", "L combine=s head=L",
                               kiln_layer_call(ctx, "mlp", "I", (size_t)3, (const int64_t[]){5, 6, 4}), "concat",
                               kiln_layer_call(ctx, "linear", "i i", (int64_t)8, (int64_t)1)))
MK(mk_gcn, kiln_layer_call(ctx, "gcn", "i i", (int64_t)5, (int64_t)3))
MK(mk_sage, kiln_layer_call(ctx, "sage", "i i aggregate=s", (int64_t)5, (int64_t)3, "max"))
MK(mk_gat, kiln_layer_call(ctx, "gat", "i i heads=i", (int64_t)5, (int64_t)3, (int64_t)2))
MK(mk_gin, kiln_layer_call(ctx, "gin", "i i", (int64_t)5, (int64_t)3))
MK(mk_gin_net, kiln_layer_call(ctx, "gin_net", "i i i layers=i", (int64_t)5, (int64_t)6, (int64_t)3, (int64_t)2))
MK(mk_vae, kiln_layer_call(ctx, "vae", "i i hidden=I", (int64_t)6, (int64_t)2, (size_t)1, (const int64_t[]){8}))
MK(mk_embedding, kiln_layer_call(ctx, "sequential", "Ls", (size_t)3,
                                 (kiln_layer *[]){kiln_layer_call(ctx, "embedding", "i i", (int64_t)7, (int64_t)6),
                                                  kiln_layer_call(ctx, "positional_encoding", "i i", (int64_t)16, (int64_t)6),
                                                  kiln_layer_call(ctx, "mean_pool", "")}))

static const check_case cases[] = {
    {"mlp", mk_mlp, "x:f:4,5"},
    {"conv", mk_conv, "x:f:2,2,6,6"},
    {"pooling", mk_pool, "x:f:2,2,8,8"},
    {"batch_norm", mk_batch_norm, "x:f:4,3,2,2"},
    {"layer_norm", mk_layer_norm, "x:f:4,5"},
    {"rms_norm", mk_rms_norm, "x:f:4,5"},
    {"lstm", mk_lstm, "x:f:2,5,3"},
    {"gru", mk_gru, "x:f:2,5,3"},
    {"attention", mk_attention, "x:f:2,5,8"},
    {"transformer", mk_transformer, "x:f:2,5,8"},
    {"transformer_lm", mk_transformer_lm, "t:i11:2,6"},
    {"embedding", mk_embedding, "t:i7:2,5"},
    {"residual", mk_residual, "x:f:4,5"},
    {"parallel", mk_parallel, "x:f:4,5"},
    {"dag", mk_dag, "x:f:4,5"},
    {"siamese", mk_siamese, "a:f:4,5 b:f:4,5"},
    {"gcn", mk_gcn, "x:f:6,5 g:graph"},
    {"sage", mk_sage, "x:f:6,5 g:graph"},
    {"gat", mk_gat, "x:f:6,5 g:graph"},
    {"gin", mk_gin, "x:f:6,5 g:graph"},
    {"gin_net", mk_gin_net, "x:f:6,5 g:graph"},
    {"vae", mk_vae, "x:f:4,6"},
};

/* Fresh random numbers for the check (xorshift; the seed varies per run). */
static uint64_t rng_state;
static double urand(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

typedef struct check_io {
  kiln_model_input in[8];
  int64_t dims[8][KILN_MAX_RANK];
  char names[8][16];
  int64_t ints[8]; /* 0: floats, else integer ids below it */
  size_t n;
} check_io;

static bool parse_inputs(const char *spec, check_io *io) {
  memset(io, 0, sizeof *io);
  char buf[128];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *tok = strtok(buf, " "); tok && io->n < 8; tok = strtok(NULL, " ")) {
    size_t k = io->n++;
    char *c1 = strchr(tok, ':');
    if (!c1) return false;
    *c1 = 0;
    snprintf(io->names[k], sizeof io->names[k], "%s", tok);
    kiln_model_input *in = &io->in[k];
    in->name = io->names[k];
    char *kind = c1 + 1, *c2 = strchr(kind, ':');
    if (!strcmp(kind, "graph")) {
      in->kind = KILN_INPUT_GRAPH;
      continue;
    }
    if (!c2) return false;
    *c2 = 0;
    in->kind = KILN_INPUT_TENSOR;
    in->dtype = kind[0] == 'i' ? KILN_I64 : KILN_F64;
    io->ints[k] = kind[0] == 'i' ? atoll(kind + 1) : 0;
    for (char *d = c2 + 1; d && *d && in->rank < KILN_MAX_RANK; d = strchr(d, ',') ? strchr(d, ',') + 1 : NULL)
      io->dims[k][in->rank++] = atoll(d);
    in->dims = io->dims[k];
  }
  return true;
}

/* The data of the graph inputs: a ring with chords plus self-loops, 6 nodes. */
static const int64_t g_src[] = {0, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 0, 0, 3, 0, 1, 2, 3, 4, 5};
static const int64_t g_dst[] = {1, 2, 3, 4, 5, 0, 0, 1, 2, 3, 4, 5, 3, 0, 0, 1, 2, 3, 4, 5};
static const int64_t g_batch[] = {0, 0, 0, 1, 1, 1};

static kiln_tensor *ints_tensor(kiln_ctx *ctx, const int64_t *v, int64_t n) {
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, KILN_I64, 1, &n, &t)) return NULL;
  for (int64_t i = 0; i < n; i++) kiln_tensor_set(t, (size_t)i, (double)v[i]);
  return t;
}

static double rel_diff(const kiln_tensor *a, const kiln_tensor *b) {
  double worst = 0;
  size_t n = kiln_tensor_numel(a);
  if (n != kiln_tensor_numel(b)) return INFINITY;
  for (size_t i = 0; i < n; i++) {
    double x = kiln_tensor_get(a, i), y = kiln_tensor_get(b, i);
    double d = fabs(x - y) / fmax(1.0, fmax(fabs(x), fabs(y)));
    if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
  }
  return worst;
}

/* Appends loss = sum over results of sum(result * r_k) with r_k random inputs. */
static kiln_status add_probe_loss(kiln_graph *g, size_t *nprobe) {
  size_t nres = kiln_graph_num_results(g);
  kiln_value loss = KILN_NO_VALUE;
  for (size_t k = 0; k < nres; k++) {
    kiln_value y = kiln_graph_get_result(g, k);
    size_t r = kiln_value_rank(g, y);
    kiln_dim dims[KILN_MAX_RANK];
    for (size_t a = 0; a < r; a++) dims[a] = kiln_value_dim(g, y, a);
    char name[32];
    snprintf(name, sizeof name, "probe%zu", k);
    kiln_value rv = kiln_graph_param(g, name, kiln_value_dtype(g, y), r, dims);
    int64_t axes[KILN_MAX_RANK];
    for (size_t a = 0; a < r; a++) axes[a] = (int64_t)a;
    kiln_value s = kiln_reduce(g, "reduce_sum", kiln_mul(g, y, rv), r, axes, 0);
    loss = loss == KILN_NO_VALUE ? s : kiln_add(g, loss, s);
  }
  *nprobe = nres;
  return kiln_graph_status(g) ? kiln_graph_status(g) : kiln_graph_set_results(g, 1, &loss);
}

/* Runs g on both backends; the worst relative difference over all results. */
static kiln_status compare_runs(kiln_ctx *ctx, kiln_graph *g, const char *device, size_t nin,
                                kiln_tensor **in, double *worst) {
  kiln_run_options compiled = {.backend = KILN_BACKEND_COMPILED, .device = device};
  size_t nout = kiln_graph_num_results(g);
  kiln_tensor **a = calloc(nout + 1, sizeof *a), **b = calloc(nout + 1, sizeof *b);
  kiln_status s = !a || !b ? KILN_ERR_NOMEM : KILN_OK;
  if (!s) s = kiln_graph_run(g, KILN_BACKEND_EAGER, nin, in, nout, a, NULL);
  if (!s) s = kiln_graph_run_on(g, &compiled, nin, in, nout, b, NULL);
  *worst = 0;
  for (size_t k = 0; !s && k < nout; k++) *worst = fmax(*worst, rel_diff(a[k], b[k]));
  for (size_t k = 0; k < nout; k++) {
    if (a) kiln_tensor_destroy(a[k]);
    if (b) kiln_tensor_destroy(b[k]);
  }
  free(a), free(b);
  (void)ctx;
  return s;
}

static kiln_status check_one(kiln_ctx *ctx, const check_case *c, const char *device,
                             double *out_diff, double *grad_diff) {
  check_io io;
  if (!parse_inputs(c->inputs, &io)) return kir_fail(ctx, KILN_ERR_INVALID, "bad check case");
  kiln_layer *l = c->make(ctx);
  if (!l) return KILN_ERR_INVALID;
  kiln_build_opts bo = {KILN_F64, 0};
  kiln_graph *g = NULL, *lg = NULL, *gg = NULL;
  kiln_params *p = NULL;
  kiln_tensor *in[64] = {0};
  size_t nin = 0;
  kiln_status s = kiln_layer_init(ctx, l, (uint64_t)(urand() * 1e9), KILN_F64, &p);
  if (!s) s = kiln_layer_build(ctx, l, io.n, io.in, &bo, &g);
  /* The inputs, by role: parameters, then the graph's other inputs in order. */
  size_t np = p ? kiln_params_count(p) : 0;
  for (size_t i = 0; !s && g && i < kiln_graph_num_params(g); i++) {
    kiln_value v = kiln_graph_get_param(g, i);
    const char *name = kiln_value_name(g, v);
    kiln_tensor *t = NULL;
    if (i < np) {
      const kiln_tensor *src = kiln_params_tensor(p, i);
      size_t r = kiln_tensor_rank(src);
      int64_t d[KILN_MAX_RANK];
      for (size_t a = 0; a < r; a++) d[a] = kiln_tensor_dim(src, a);
      if (!(s = kiln_tensor_create(ctx, KILN_F64, r, d, &t)))
        memcpy(kiln_tensor_data(t), kiln_tensor_cdata(src), kiln_tensor_nbytes(src));
    } else if (strstr(name, ".src")) {
      t = ints_tensor(ctx, g_src, 20);
    } else if (strstr(name, ".dst")) {
      t = ints_tensor(ctx, g_dst, 20);
    } else if (strstr(name, ".batch")) {
      t = ints_tensor(ctx, g_batch, 6);
    } else if (strstr(name, ".graphs")) {
      t = ints_tensor(ctx, g_batch + 2, 2); /* two graphs: only the length counts */
    } else {
      size_t k = 0;
      while (k < io.n && strcmp(io.names[k], name)) k++;
      if (k == io.n) {
        s = kir_fail(ctx, KILN_ERR_INVALID, "check %s: unexpected input '%s'", c->name, name);
        break;
      }
      if (!(s = kiln_tensor_create(ctx, io.in[k].dtype, io.in[k].rank, io.dims[k], &t)))
        for (size_t e = 0; e < kiln_tensor_numel(t); e++)
          kiln_tensor_set(t, e, io.ints[k] ? floor(urand() * (double)io.ints[k]) : 2 * urand() - 1);
    }
    if (!t && !s) s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    in[nin++] = t;
  }
  if (!s) s = compare_runs(ctx, g, device, nin, in, out_diff);
  /* Gradients of the probe loss with respect to every parameter. */
  size_t nprobe = 0;
  if (!s) {
    char *text = NULL;
    s = kiln_graph_to_string(g, &text);
    if (!s) s = kiln_graph_parse(ctx, text, strlen(text), c->name, &lg);
    free(text);
  }
  if (!s) s = add_probe_loss(lg, &nprobe);
  if (!s) {
    bool *wrt = calloc(kiln_graph_num_params(lg) + 1, sizeof *wrt);
    for (size_t i = 0; wrt && i < np; i++) wrt[i] = true;
    gg = wrt ? kp_grad(lg, wrt, 0) : NULL;
    free(wrt);
    if (!gg) s = kiln_graph_status(lg) ? kiln_graph_status(lg) : KILN_ERR_INVALID;
  }
  size_t nbase = nin;
  for (size_t k = 0; !s && k < nprobe; k++) {
    kiln_value y = kiln_graph_get_result(g, k);
    size_t r = kiln_value_rank(g, y);
    int64_t d[KILN_MAX_RANK];
    /* The probe has the output's shape: run the graph once to learn it. */
    kiln_tensor *outs[8] = {0};
    s = kiln_graph_run(g, KILN_BACKEND_EAGER, nbase, in, kiln_graph_num_results(g), outs, NULL);
    for (size_t a = 0; !s && a < r; a++) d[a] = kiln_tensor_dim(outs[k], a);
    for (size_t j = 0; j < 8; j++) kiln_tensor_destroy(outs[j]);
    kiln_tensor *t = NULL;
    if (!s && !(s = kiln_tensor_create(ctx, KILN_F64, r, d, &t)))
      for (size_t e = 0; e < kiln_tensor_numel(t); e++) kiln_tensor_set(t, e, 2 * urand() - 1);
    in[nin++] = t;
  }
  if (!s) s = compare_runs(ctx, gg, device, nin, in, grad_diff);
  for (size_t i = 0; i < nin; i++) kiln_tensor_destroy(in[i]);
  kiln_graph_destroy(gg);
  kiln_graph_destroy(lg);
  kiln_graph_destroy(g);
  kiln_params_destroy(p);
  kiln_layer_release(l);
  return s;
}

kiln_status kiln_check_layers(kiln_ctx *ctx, const char *device, FILE *report, double tol,
                              double *worst_out) {
  rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)&rng_state ^ (uint64_t)time(NULL);
  double worst = 0;
  const char *worst_name = "none";
  kiln_status result = KILN_OK;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    double od = 0, gd = 0;
    kiln_status s = check_one(ctx, &cases[i], device, &od, &gd);
    if (s) {
      fprintf(report, "  %-16s FAILED: %s\n", cases[i].name, kiln_ctx_error(ctx));
      result = s;
      worst = INFINITY;
      worst_name = cases[i].name;
      continue;
    }
    fprintf(report, "  %-16s outputs %.2e  gradients %.2e\n", cases[i].name, od, gd);
    double d = fmax(od, gd);
    if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d, worst_name = cases[i].name;
  }
  *worst_out = worst;
  if (result == KILN_OK && worst <= tol) {
    fprintf(report, "OK: largest difference %.2e (%s)\n", worst, worst_name);
    return KILN_OK;
  }
  if (result == KILN_OK)
    fprintf(report, "FAILED: largest difference %.2e in %s (tolerance %.0e)\n", worst, worst_name, tol);
  else
    fprintf(report, "FAILED: %s did not run\n", worst_name);
  return kir_fail(ctx, result ? result : KILN_ERR_RUNTIME, "kiln check: %s differs by %.2e", worst_name, worst);
}
