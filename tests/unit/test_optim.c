/*
 * test_optim.c — optimizers, gradient clipping and schedules (train/optim.c,
 * train/schedule.c) against torch.optim.
 *
 * tests/fixtures/train/gen_optim.py recorded, with PyTorch in float64, the
 * parameters a[3,4] and b[5] after each of 7 steps of every configuration
 * in optim/configs.txt (every optimizer with its defaults, with weight
 * decay and its other options, with clip_grad_norm_, with an lr changed
 * every step) on a fixed sequence of gradients. Each configuration's text
 * goes through kiln_optimizer_parse; its step graph (clip, then
 * kiln_optimizer_step, state fed back between runs, step and lr as
 * run-time scalars) runs in the reference interpreter (f64, to 1e-12
 * relative), compiled in f64 (1e-11) and compiled in f32 (2e-5), and must
 * reproduce torch's parameters after every step.
 *
 * Then: PyTorch's defaults, the state layout, the text form's positional and
 * keyword arguments and its error messages, the range checks, the step's
 * type errors, the norm kiln_clip_grad_norm returns, the schedules at known
 * points, and a small regression trained end to end (loss, kp_grad, clip and
 * adam in one compiled graph) whose loss must fall.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"
#include "kiln/kiln.h"
#include "passes/passes.h"

#include "harness.h"
#define DIR KILN_SOURCE_DIR "/tests/fixtures/train/optim/"
#define STEPS 7
#define MAXS 4 /* state tensors per parameter, at most */

static kiln_tensor *load(kiln_ctx *ctx, const char *name) {
  char path[512];
  snprintf(path, sizeof path, DIR "%s.npy", name);
  kiln_tensor *t = NULL;
  if (kiln_npy_read(ctx, path, &t) != KILN_OK) {
    fprintf(stderr, "cannot read %s: %s\n", path, kiln_ctx_error(ctx));
    failures++;
  }
  return t;
}

/* A tensor of dtype t holding n values of src from offset off (or `fill` everywhere if src is
 * NULL). */
static kiln_tensor *make(kiln_ctx *ctx, kiln_dtype t, size_t rank, const int64_t *dims,
                         const kiln_tensor *src, size_t off, double fill) {
  kiln_tensor *x = NULL;
  if (kiln_tensor_create(ctx, t, rank, dims, &x) != KILN_OK) return NULL;
  for (size_t i = 0; i < kiln_tensor_numel(x); i++)
    kiln_tensor_set(x, i, src ? kiln_tensor_get(src, off + i) : fill);
  return x;
}

/* ------------------------------------------------------------ a runner */

/* A graph run either by the interpreter or compiled. */
typedef struct {
  kiln_graph *g;
  kiln_compiled *c;
} runner;

static bool runner_make(runner *r, kiln_graph *g, bool compiled) {
  r->g = g;
  r->c = NULL;
  if (compiled && kiln_compile(g, NULL, &r->c) != KILN_OK) {
    fprintf(stderr, "compile: %s\n", kiln_ctx_error(kiln_graph_ctx(g)));
    failures++;
    return false;
  }
  return true;
}

static bool runner_run(runner *r, size_t nin, kiln_tensor **in, size_t nout, kiln_tensor **out) {
  kiln_status s = r->c ? kiln_compiled_run(r->c, NULL, nin, in, nout, out, NULL)
                       : kiln_graph_run(r->g, KILN_BACKEND_EAGER, nin, in, nout, out, NULL);
  if (s != KILN_OK) {
    fprintf(stderr, "run: %s\n", kiln_ctx_error(kiln_graph_ctx(r->g)));
    failures++;
  }
  return s == KILN_OK;
}

static void runner_free(runner *r) {
  kiln_compiled_destroy(r->c);
  kiln_graph_destroy(r->g);
}

/* ------------------------------------------------ torch.optim fixtures */

typedef struct {
  char name[64], text[256];
  double clip;
  int schedule;
} config;

static int read_configs(config *cf, int cap) {
  FILE *f = fopen(DIR "configs.txt", "r");
  if (!f) {
    fprintf(stderr, "cannot open %sconfigs.txt\n", DIR);
    failures++;
    return 0;
  }
  char line[512];
  int n = 0;
  while (n < cap && fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    char *name = strtok(line, "\t"), *text = strtok(NULL, "\t"), *clip = strtok(NULL, "\t"),
         *sched = strtok(NULL, "\t\n");
    if (!name || !text || !clip || !sched) continue;
    snprintf(cf[n].name, sizeof cf[n].name, "%s", name);
    snprintf(cf[n].text, sizeof cf[n].text, "%s", text);
    cf[n].clip = atof(clip);
    cf[n].schedule = atoi(sched);
    n++;
  }
  fclose(f);
  return n;
}

static const int64_t dims_a[2] = {3, 4}, dims_b[1] = {5};
static const int64_t *const pdims[2] = {dims_a, dims_b};
static const size_t prank[2] = {2, 1};

/*
 * The step graph: parameters a, b, their grads, the state (parameter-major),
 * step (i64) and lr (f64); results a', b', then the new state.
 */
static kiln_graph *step_graph(kiln_ctx *ctx, const kiln_optimizer *o, double clip, kiln_dtype dt) {
  kiln_graph *g = NULL;
  if (kiln_graph_create(ctx, "step", &g) != KILN_OK) return NULL;
  size_t S = kiln_optimizer_num_state(o);
  kiln_value p[2], gr[2], st[2 * MAXS], np[2 + 2 * MAXS], *ns = np + 2;
  for (int i = 0; i < 2; i++)
    p[i] = kiln_graph_param(g, i ? "b" : "a", dt, prank[i], pdims[i]);
  for (int i = 0; i < 2; i++)
    gr[i] = kiln_graph_param(g, i ? "grad_b" : "grad_a", dt, prank[i], pdims[i]);
  for (int i = 0; i < 2; i++)
    for (size_t k = 0; k < S; k++) {
      kiln_optimizer_state_info info;
      CHECK(kiln_optimizer_state(o, k, &info) == KILN_OK);
      st[i * S + k] = kiln_graph_param(g, info.name, dt, info.scalar ? 0 : prank[i], pdims[i]);
    }
  kiln_value step = kiln_graph_param(g, "step", KILN_I64, 0, NULL);
  kiln_value lr = kiln_graph_param(g, "lr", KILN_F64, 0, NULL);
  if (clip > 0) CHECK(kiln_clip_grad_norm(g, 2, gr, clip, gr) != KILN_NO_VALUE);
  kiln_status s = kiln_optimizer_step(g, o, 2, p, gr, st, step, lr, np, ns);
  if (s == KILN_OK) s = kiln_graph_set_results(g, 2 + 2 * S, np);
  if (s != KILN_OK) {
    fprintf(stderr, "building the step: %s\n", kiln_ctx_error(ctx));
    failures++;
    kiln_graph_destroy(g);
    return NULL;
  }
  return g;
}

/* Runs STEPS steps of config `cf` and compares a and b with torch after each; returns the worst
 * error. */
static double check_config(kiln_ctx *ctx, const config *cf, kiln_dtype dt, bool compiled,
                           double tol) {
  kiln_optimizer o;
  if (kiln_optimizer_parse(ctx, cf->text, &o) != KILN_OK) {
    fprintf(stderr, "%s: parse '%s': %s\n", cf->name, cf->text, kiln_ctx_error(ctx));
    failures++;
    return INFINITY;
  }
  size_t S = kiln_optimizer_num_state(&o);
  kiln_graph *g = step_graph(ctx, &o, cf->clip, dt);
  runner r;
  if (!g || !runner_make(&r, g, compiled)) {
    kiln_graph_destroy(g);
    return INFINITY;
  }
  char nm[96];
  kiln_tensor *p0[2] = {load(ctx, "p0_a"), load(ctx, "p0_b")};
  kiln_tensor *grads[2] = {load(ctx, "grads_a"), load(ctx, "grads_b")}, *want[2];
  snprintf(nm, sizeof nm, "%s_a", cf->name);
  want[0] = load(ctx, nm);
  snprintf(nm, sizeof nm, "%s_b", cf->name);
  want[1] = load(ctx, nm);
  size_t nin = 4 + 2 * S + 2, nout = 2 + 2 * S;
  kiln_tensor *in[4 + 2 * MAXS + 2] = {0}, *out[2 + 2 * MAXS] = {0};
  double worst = 0;
  bool ok = p0[0] && p0[1] && grads[0] && grads[1] && want[0] && want[1];
  for (int i = 0; ok && i < 2; i++) {
    in[i] = make(ctx, dt, prank[i], pdims[i], p0[i], 0, 0);
    for (size_t k = 0; k < S; k++) {
      kiln_optimizer_state_info info;
      kiln_optimizer_state(&o, k, &info);
      in[4 + i * S + k] = make(ctx, dt, info.scalar ? 0 : prank[i], pdims[i], NULL, 0, info.init);
    }
  }
  for (int t = 0; ok && t < STEPS; t++) {
    for (int i = 0; i < 2; i++) {
      size_t n = i ? 5 : 12;
      kiln_tensor_destroy(in[2 + i]);
      in[2 + i] = make(ctx, dt, prank[i], pdims[i], grads[i], (size_t)t * n, 0);
    }
    kiln_tensor_destroy(in[nin - 2]);
    kiln_tensor_destroy(in[nin - 1]);
    in[nin - 2] = make(ctx, KILN_I64, 0, NULL, NULL, 0, t + 1);
    in[nin - 1] = make(ctx, KILN_F64, 0, NULL, NULL, 0, cf->schedule ? o.lr / (t + 1) : o.lr);
    if (!(ok = runner_run(&r, nin, in, nout, out))) break;
    for (int i = 0; i < 2; i++) {
      size_t n = kiln_tensor_numel(out[i]);
      for (size_t e = 0; e < n; e++) {
        double w = kiln_tensor_get(want[i], (size_t)t * n + e), v = kiln_tensor_get(out[i], e);
        double err = fabs(v - w) / (fabs(w) > 1 ? fabs(w) : 1);
        if (!(err <= worst)) worst = err;
        if (!(err <= tol) && ok) {
          fprintf(stderr, "%s (%s, %s) step %d: %s[%zu] = %.17g, torch %.17g\n", cf->name,
                  kiln_dtype_name(dt), compiled ? "compiled" : "eager", t + 1, i ? "b" : "a", e, v,
                  w);
          failures++;
          ok = false;
        }
      }
    }
    /* Feed the new parameters and state back. */
    for (int i = 0; i < 2; i++) {
      kiln_tensor_destroy(in[i]);
      in[i] = out[i];
    }
    for (size_t k = 0; k < 2 * S; k++) {
      kiln_tensor_destroy(in[4 + k]);
      in[4 + k] = out[2 + k];
    }
    memset(out, 0, sizeof out);
  }
  for (size_t i = 0; i < nin; i++)
    kiln_tensor_destroy(in[i]);
  for (int i = 0; i < 2; i++) {
    kiln_tensor_destroy(p0[i]);
    kiln_tensor_destroy(grads[i]);
    kiln_tensor_destroy(want[i]);
  }
  runner_free(&r);
  return worst;
}

static void test_torch_fixtures(kiln_ctx *ctx) {
  config cf[64];
  int n = read_configs(cf, 64);
  CHECK(n >= 29);
  bool seen[KILN_OPTIM_COUNT] = {0};
  for (int i = 0; i < n; i++) {
    kiln_optimizer o;
    if (kiln_optimizer_parse(ctx, cf[i].text, &o) == KILN_OK) seen[o.kind] = true;
    double e64 = check_config(ctx, &cf[i], KILN_F64, false, 1e-12);
    double c64 = check_config(ctx, &cf[i], KILN_F64, true, 1e-11);
    double c32 = check_config(ctx, &cf[i], KILN_F32, true, 2e-5);
    printf("%-18s eager f64 %.1e  compiled f64 %.1e  compiled f32 %.1e\n", cf[i].name, e64, c64,
           c32);
  }
  for (int k = KILN_OPTIM_SGD; k < KILN_OPTIM_COUNT; k++)
    CHECK(seen[k]); /* every optimizer has fixtures */
}

/* --------------------------------------------------- the description */

static void test_defaults(void) {
  kiln_optimizer o = kiln_optimizer_default(KILN_OPTIM_ADAM);
  CHECK(o.lr == 1e-3 && o.b1 == 0.9 && o.b2 == 0.999 && o.eps == 1e-8 && o.weight_decay == 0 &&
        !o.amsgrad && !o.maximize);
  o = kiln_optimizer_default(KILN_OPTIM_ADAMW);
  CHECK(o.lr == 1e-3 && o.b1 == 0.9 && o.b2 == 0.999 && o.eps == 1e-8 && o.weight_decay == 1e-2);
  o = kiln_optimizer_default(KILN_OPTIM_SGD);
  CHECK(o.momentum == 0 && o.dampening == 0 && !o.nesterov && o.weight_decay == 0);
  o = kiln_optimizer_default(KILN_OPTIM_RMSPROP);
  CHECK(o.lr == 1e-2 && o.alpha == 0.99 && o.eps == 1e-8 && o.momentum == 0 && !o.centered);
  o = kiln_optimizer_default(KILN_OPTIM_ADAGRAD);
  CHECK(o.lr == 1e-2 && o.eps == 1e-10 && o.lr_decay == 0 && o.initial_accumulator_value == 0);
  o = kiln_optimizer_default(KILN_OPTIM_NADAM);
  CHECK(o.lr == 2e-3 && o.b1 == 0.9 && o.b2 == 0.999 && o.eps == 1e-8 && o.momentum_decay == 4e-3);
  o = kiln_optimizer_default(KILN_OPTIM_RADAM);
  CHECK(o.lr == 1e-3 && o.b1 == 0.9 && o.b2 == 0.999 && o.eps == 1e-8);
  for (int k = KILN_OPTIM_SGD; k < KILN_OPTIM_COUNT; k++)
    CHECK(kiln_optimizer_name((kiln_optimizer_kind)k) != NULL);
  CHECK(kiln_optimizer_name(KILN_OPTIM_COUNT) == NULL);
  CHECK(kiln_optimizer_name(KILN_OPTIM_DEFAULT) == NULL);
  /* a zeroed optimizer is Adam's defaults; SGD is SGD whatever its lr (no trap at lr 0) */
  o = kiln_optimizer_default(KILN_OPTIM_DEFAULT);
  CHECK(o.kind == KILN_OPTIM_ADAM && o.lr == 1e-3);
  kiln_optimizer none = {0};
  CHECK(kiln_optimizer_check(NULL, &none) == KILN_ERR_INVALID);
  o = kiln_optimizer_default(KILN_OPTIM_SGD);
  o.lr = 0;
  CHECK(kiln_optimizer_check(NULL, &o) == KILN_OK && o.kind == KILN_OPTIM_SGD);
  CHECK(!strcmp(kiln_optimizer_name(KILN_OPTIM_RMSPROP), "rmsprop"));
}

static size_t nstate(kiln_ctx *ctx, const char *text) {
  kiln_optimizer o;
  CHECK(kiln_optimizer_parse(ctx, text, &o) == KILN_OK);
  return kiln_optimizer_num_state(&o);
}

static void test_state_layout(kiln_ctx *ctx) {
  CHECK(nstate(ctx, "sgd") == 0);
  CHECK(nstate(ctx, "sgd(0.1, 0.9)") == 1);
  CHECK(nstate(ctx, "adam") == 2);
  CHECK(nstate(ctx, "adam(amsgrad=true)") == 3);
  CHECK(nstate(ctx, "adamw") == 2);
  CHECK(nstate(ctx, "rmsprop") == 1);
  CHECK(nstate(ctx, "rmsprop(momentum=0.9, centered=true)") == 3);
  CHECK(nstate(ctx, "adagrad") == 1);
  CHECK(nstate(ctx, "nadam") == 3);
  CHECK(nstate(ctx, "radam") == 2);
  kiln_optimizer o;
  kiln_optimizer_state_info info;
  CHECK(kiln_optimizer_parse(ctx, "rmsprop(momentum=0.9, centered=true)", &o) == KILN_OK);
  CHECK(kiln_optimizer_state(&o, 1, &info) == KILN_OK && !strcmp(info.name, "momentum_buffer"));
  CHECK(kiln_optimizer_state(&o, 2, &info) == KILN_OK && !strcmp(info.name, "grad_avg"));
  CHECK(kiln_optimizer_state(&o, 3, &info) == KILN_ERR_INVALID);
  o = kiln_optimizer_default(KILN_OPTIM_NADAM);
  CHECK(kiln_optimizer_state(&o, 2, &info) == KILN_OK && !strcmp(info.name, "mu_product") &&
        info.scalar && info.init == 1);
  CHECK(kiln_optimizer_state(&o, 0, &info) == KILN_OK && !info.scalar && info.init == 0);
  CHECK(kiln_optimizer_parse(ctx, "adagrad(initial_accumulator_value=0.5)", &o) == KILN_OK);
  CHECK(kiln_optimizer_state(&o, 0, &info) == KILN_OK && !strcmp(info.name, "sum") &&
        info.init == 0.5);
}

static void test_parse(kiln_ctx *ctx) {
  kiln_optimizer o;
  CHECK(kiln_optimizer_parse(ctx, "adam(0.1, 0.8)", &o) == KILN_OK);
  CHECK(o.kind == KILN_OPTIM_ADAM && o.lr == 0.1 && o.b1 == 0.8 && o.b2 == 0.999);
  CHECK(kiln_optimizer_parse(ctx, " sgd ( 0.1 , 0.9, nesterov = true ) ", &o) == KILN_OK);
  CHECK(o.kind == KILN_OPTIM_SGD && o.lr == 0.1 && o.momentum == 0.9 && o.nesterov);
  CHECK(kiln_optimizer_parse(ctx, "adamw(lr=3e-4, weight_decay=0.1)", &o) == KILN_OK);
  CHECK(o.kind == KILN_OPTIM_ADAMW && o.lr == 3e-4 && o.weight_decay == 0.1 && o.b1 == 0.9);
  CHECK(kiln_optimizer_parse(ctx, "adamw()", &o) == KILN_OK && o.weight_decay == 1e-2);
  CHECK(kiln_optimizer_parse(ctx, "rmsprop(0.01, 0.9, 1e-6, 0, 0.5, true)", &o) == KILN_OK);
  CHECK(o.alpha == 0.9 && o.eps == 1e-6 && o.momentum == 0.5 && o.centered);
  CHECK(kiln_optimizer_parse(ctx, "adam(amsgrad=1, maximize=false)", &o) == KILN_OK);
  CHECK(o.amsgrad && !o.maximize);

  CHECK(kiln_optimizer_parse(ctx, "adan", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx,
            "unknown optimizer 'adan' (valid: sgd, adam, adamw, rmsprop, adagrad, nadam, radam)");
  CHECK(kiln_optimizer_parse(ctx, "adam x", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx,
            "unknown optimizer 'adam x' (valid: sgd, adam, adamw, rmsprop, adagrad, nadam, radam)");
  CHECK(kiln_optimizer_parse(ctx, "adam(momentum=0.9)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "adam(): unknown argument 'momentum' (valid: lr, b1, b2, eps, weight_decay, "
                 "amsgrad, maximize)");
  CHECK(kiln_optimizer_parse(ctx, "sgd(0.1, lr=0.2)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "sgd(): argument 'lr' given twice");
  CHECK(kiln_optimizer_parse(ctx, "sgd(lr=0.1, 0.9)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "sgd(): a positional argument after a keyword argument");
  CHECK(kiln_optimizer_parse(ctx, "radam(1, 0.9, 0.9, 0, 0, 1, 1)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "radam(): at most 6 arguments");
  CHECK(kiln_optimizer_parse(ctx, "adam(lr=fast)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "adam(): lr must be a number, not 'fast'");
  CHECK(kiln_optimizer_parse(ctx, "adam(amsgrad=yes)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "adam(): amsgrad must be true or false, not 'yes'");
  CHECK(kiln_optimizer_parse(ctx, "adam(0.1", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "adam(): expected ',' or ')' at 'the end'");
  CHECK(kiln_optimizer_parse(ctx, "adam(0.1) x", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "adam(): unexpected text after ')': 'x'");
  CHECK(kiln_optimizer_parse(ctx, "adam(lr=-1)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "adam(): lr must be >= 0, got -1");
  CHECK(kiln_optimizer_parse(ctx, "adam(b2=1)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "adam(): b2 must be in [0, 1), got 1");
  CHECK(kiln_optimizer_parse(ctx, "sgd(0.1, nesterov=true)", &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "sgd(): nesterov momentum needs momentum > 0 and dampening 0");
  o = kiln_optimizer_default(KILN_OPTIM_RMSPROP);
  o.weight_decay = -0.5;
  CHECK(kiln_optimizer_check(ctx, &o) == KILN_ERR_INVALID);
  CHECK_MSG(ctx, "rmsprop(): weight_decay must be >= 0, got -0.5");
}

/* --------------------------------------------------------- the emitter */

static void test_step_errors(kiln_ctx *ctx) {
  kiln_graph *g = NULL;
  int64_t d3[1] = {3}, d4[1] = {4};
  kiln_optimizer adam = kiln_optimizer_default(KILN_OPTIM_ADAM);
  kiln_value np[1], ns[2];

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  kiln_value p = kiln_graph_param(g, "p", KILN_F32, 1, d3),
             gr = kiln_graph_param(g, "g", KILN_F32, 1, d4);
  kiln_value st[2] = {kiln_graph_param(g, "m", KILN_F32, 1, d3),
                      kiln_graph_param(g, "v", KILN_F32, 1, d3)};
  kiln_value step = kiln_graph_param(g, "t", KILN_I64, 0, NULL);
  CHECK(kiln_optimizer_step(g, &adam, 1, &p, &gr, st, step, KILN_NO_VALUE, np, ns) ==
        KILN_ERR_TYPE);
  CHECK_MSG(ctx, "optimizer step: the gradient of parameter 0 must be f32[3], not f32[4]");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 1, d3);
  st[0] = kiln_graph_param(g, "m", KILN_F32, 1, d3);
  st[1] = kiln_graph_param(g, "v", KILN_F64, 1, d3);
  CHECK(kiln_optimizer_step(g, &adam, 1, &p, &p, st, KILN_NO_VALUE, KILN_NO_VALUE, np, ns) ==
        KILN_ERR_INVALID);
  CHECK_MSG(ctx, "optimizer step: this optimizer needs the step number");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 1, d3);
  st[0] = kiln_graph_param(g, "m", KILN_F32, 1, d3);
  st[1] = kiln_graph_param(g, "v", KILN_F64, 1, d3);
  step = kiln_graph_param(g, "t", KILN_F32, 0, NULL);
  CHECK(kiln_optimizer_step(g, &adam, 1, &p, &p, st, step, KILN_NO_VALUE, np, ns) == KILN_ERR_TYPE);
  CHECK_MSG(ctx, "optimizer step: exp_avg_sq of parameter 0 must be f32[3], not f64[3]");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 1, d3);
  kiln_value lr = kiln_graph_param(g, "lr", KILN_I64, 0, NULL);
  kiln_optimizer sgd = kiln_optimizer_default(KILN_OPTIM_SGD);
  CHECK(kiln_optimizer_step(g, &sgd, 1, &p, &p, NULL, KILN_NO_VALUE, lr, np, NULL) ==
        KILN_ERR_TYPE);
  CHECK_MSG(ctx, "optimizer step: the learning rate must be a float scalar");
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 1, d3);
  sgd.lr = -1;
  CHECK(kiln_optimizer_step(g, &sgd, 1, &p, &p, NULL, KILN_NO_VALUE, KILN_NO_VALUE, np, NULL) ==
        KILN_ERR_INVALID);
  CHECK_MSG(ctx, "sgd(): lr must be >= 0, got -1");
  CHECK(kiln_graph_status(g) == KILN_ERR_INVALID);
  kiln_graph_destroy(g);

  CHECK(kiln_graph_create(ctx, "e", &g) == KILN_OK);
  p = kiln_graph_param(g, "p", KILN_F32, 1, d3);
  CHECK(kiln_clip_grad_norm(g, 1, &p, 0, np) == KILN_NO_VALUE);
  CHECK_MSG(ctx, "clip_grad_norm: max_norm must be > 0, got 0");
  kiln_graph_destroy(g);
}

/* Plain SGD with the lr taken from opt->lr (no step, no lr value), and the norm clip returns. */
static void test_clip_and_constant_lr(kiln_ctx *ctx) {
  kiln_graph *g = NULL;
  int64_t d2[1] = {2};
  CHECK(kiln_graph_create(ctx, "clip", &g) == KILN_OK);
  kiln_value p = kiln_graph_param(g, "p", KILN_F32, 1, d2),
             gr = kiln_graph_param(g, "g", KILN_F32, 1, d2);
  kiln_value cg, np;
  kiln_value norm = kiln_clip_grad_norm(g, 1, &gr, 2.5, &cg);
  kiln_optimizer o = kiln_optimizer_default(KILN_OPTIM_SGD);
  o.lr = 0.5;
  CHECK(kiln_optimizer_step(g, &o, 1, &p, &cg, NULL, KILN_NO_VALUE, KILN_NO_VALUE, &np, NULL) ==
        KILN_OK);
  kiln_value res[3] = {norm, cg, np};
  CHECK(kiln_graph_set_results(g, 3, res) == KILN_OK);
  CHECK(kiln_value_dtype(g, norm) == KILN_F64 && kiln_value_rank(g, norm) == 0);
  double gv[2][2] = {{3, 4}, {0.3, 0.4}}; /* norm 5: scaled by 2.5 / (5 + 1e-6); norm 0.5: kept */
  for (int c = 0; c < 2; c++) {
    kiln_tensor *in[2] = {make(ctx, KILN_F32, 1, d2, NULL, 0, 1),
                          make(ctx, KILN_F32, 1, d2, NULL, 0, 0)},
                *out[3] = {0};
    kiln_tensor_set(in[1], 0, gv[c][0]);
    kiln_tensor_set(in[1], 1, gv[c][1]);
    CHECK(kiln_graph_run(g, KILN_BACKEND_EAGER, 2, in, 3, out, NULL) == KILN_OK);
    double n = c ? 0.5 : 5, scale = c ? 1 : 2.5 / (5 + 1e-6);
    if (out[0]) {
      CHECK(fabs(kiln_tensor_get(out[0], 0) - n) < 1e-6);
      for (int i = 0; i < 2; i++) {
        CHECK(fabs(kiln_tensor_get(out[1], i) - gv[c][i] * scale) < 1e-6);
        CHECK(fabs(kiln_tensor_get(out[2], i) - (1 - 0.5 * gv[c][i] * scale)) < 1e-6);
      }
    }
    for (int i = 0; i < 3; i++)
      kiln_tensor_destroy(out[i]);
    kiln_tensor_destroy(in[0]);
    kiln_tensor_destroy(in[1]);
  }
  kiln_graph_destroy(g);
}

/* --------------------------------------------------------- schedules */

static bool near(double a, double b) { return fabs(a - b) <= 1e-15 * (fabs(b) > 1 ? fabs(b) : 1); }

static void test_schedules(void) {
  CHECK(kiln_constant_lr(123, 0.5) == 0.5);
  /* warmup 100 to base 3e-4, cosine to 0 at 1000 */
  CHECK(kiln_cosine_lr(0, 1000, 3e-4, 100) == 0);
  CHECK(near(kiln_cosine_lr(50, 1000, 3e-4, 100), 1.5e-4));
  CHECK(near(kiln_cosine_lr(100, 1000, 3e-4, 100), 3e-4));
  CHECK(near(kiln_cosine_lr(550, 1000, 3e-4, 100), 1.5e-4));
  CHECK(near(kiln_cosine_lr(325, 1000, 3e-4, 100), 3e-4 * 0.5 * (1 + cos(M_PI / 4))));
  CHECK(kiln_cosine_lr(1000, 1000, 3e-4, 100) == 0 && kiln_cosine_lr(5000, 1000, 3e-4, 100) == 0);
  CHECK(near(kiln_cosine_lr(0, 10, 1, 0), 1) && near(kiln_cosine_lr(5, 10, 1, 0), 0.5));
  CHECK(kiln_cosine_lr(-3, 10, 1, 2) == 0);
  /* StepLR(step_size=3, gamma=0.1) */
  CHECK(kiln_step_lr(0, 1, 3, 0.1) == 1 && kiln_step_lr(2, 1, 3, 0.1) == 1);
  CHECK(near(kiln_step_lr(3, 1, 3, 0.1), 0.1) && near(kiln_step_lr(8, 1, 3, 0.1), 0.01));
}

/* ------------------------------------------------------- end to end */

/*
 * y = x w + b fitted with mse: forward, loss, kp_grad, clip and adam in one
 * compiled graph; 60 steps on fixed data must bring the loss far down.
 */
static void test_train_end_to_end(kiln_ctx *ctx) {
  kiln_graph *g = NULL;
  int64_t dx[2] = {8, 3}, dw[2] = {3, 1}, db[1] = {1}, dy[2] = {8, 1};
  CHECK(kiln_graph_create(ctx, "fwd", &g) == KILN_OK);
  kiln_value w = kiln_graph_param(g, "w", KILN_F64, 2, dw),
             b = kiln_graph_param(g, "b", KILN_F64, 1, db);
  kiln_value x = kiln_graph_param(g, "x", KILN_F64, 2, dx),
             y = kiln_graph_param(g, "y", KILN_F64, 2, dy);
  kiln_value loss = kiln_loss(g, "mse", kiln_add(g, kiln_matmul(g, x, w), b), y, NULL);
  CHECK(kiln_graph_set_results(g, 1, &loss) == KILN_OK);
  bool wrt[4] = {true, true, false, false};
  kiln_graph *gg = kp_grad(g, wrt, 0);
  kiln_graph_destroy(g);
  CHECK(gg != NULL);
  if (!gg) return;
  /* Append the state, step and lr parameters and the update to the gradient graph. */
  kiln_optimizer o;
  CHECK(kiln_optimizer_parse(ctx, "adam(lr=0.1)", &o) == KILN_OK);
  kiln_value ps[2] = {kiln_graph_get_param(gg, 0), kiln_graph_get_param(gg, 1)};
  kiln_value grads[2] = {kiln_graph_get_result(gg, 1), kiln_graph_get_result(gg, 2)}, cg[2];
  kiln_value st[4] = {
      kiln_graph_param(gg, "m_w", KILN_F64, 2, dw), kiln_graph_param(gg, "v_w", KILN_F64, 2, dw),
      kiln_graph_param(gg, "m_b", KILN_F64, 1, db), kiln_graph_param(gg, "v_b", KILN_F64, 1, db)};
  kiln_value step = kiln_graph_param(gg, "step", KILN_I64, 0, NULL);
  kiln_value res[7];
  res[0] = kiln_graph_get_result(gg, 0);
  kiln_clip_grad_norm(gg, 2, grads, 10.0, cg);
  CHECK(kiln_optimizer_step(gg, &o, 2, ps, cg, st, step, KILN_NO_VALUE, res + 1, res + 3) ==
        KILN_OK);
  CHECK(kiln_graph_set_results(gg, 7, res) == KILN_OK);
  runner r;
  if (!runner_make(&r, gg, true)) {
    kiln_graph_destroy(gg);
    return;
  }
  kiln_tensor *in[9] = {0}, *out[7] = {0};
  in[0] = make(ctx, KILN_F64, 2, dw, NULL, 0, 0);
  in[1] = make(ctx, KILN_F64, 1, db, NULL, 0, 0);
  in[2] = make(ctx, KILN_F64, 2, dx, NULL, 0, 0);
  in[3] = make(ctx, KILN_F64, 2, dy, NULL, 0, 0);
  for (int i = 0; i < 8; i++) {
    double xs[3] = {sin(i + 1.0), cos(2.0 * i), 0.1 * i - 0.4};
    for (int j = 0; j < 3; j++)
      kiln_tensor_set(in[2], (size_t)(i * 3 + j), xs[j]);
    kiln_tensor_set(in[3], (size_t)i, 2 * xs[0] - xs[1] + 0.5 * xs[2] + 0.3);
  }
  in[4] = make(ctx, KILN_F64, 2, dw, NULL, 0, 0);
  in[5] = make(ctx, KILN_F64, 2, dw, NULL, 0, 0);
  in[6] = make(ctx, KILN_F64, 1, db, NULL, 0, 0);
  in[7] = make(ctx, KILN_F64, 1, db, NULL, 0, 0);
  double first = NAN, last = NAN;
  for (int t = 1; t <= 60; t++) {
    kiln_tensor_destroy(in[8]);
    in[8] = make(ctx, KILN_I64, 0, NULL, NULL, 0, t);
    if (!runner_run(&r, 9, in, 7, out)) break;
    last = kiln_tensor_get(out[0], 0);
    if (t == 1) first = last;
    kiln_tensor_destroy(out[0]);
    int map[6] = {0, 1, 4, 5, 6, 7}; /* w', b', then the state */
    for (int k = 0; k < 6; k++) {
      kiln_tensor_destroy(in[map[k]]);
      in[map[k]] = out[k + 1];
    }
  }
  printf("end to end: mse %.3g -> %.3g in 60 adam steps\n", first, last);
  CHECK(first > 1 && last < first * 1e-2);
  for (int i = 0; i < 9; i++)
    kiln_tensor_destroy(in[i]);
  runner_free(&r);
}

int main(void) {
  kiln_ctx *ctx = kiln_ctx_create();
  test_defaults();
  test_state_layout(ctx);
  test_parse(ctx);
  test_step_errors(ctx);
  test_clip_and_constant_lr(ctx);
  test_schedules();
  test_torch_fixtures(ctx);
  test_train_end_to_end(ctx);
  kiln_ctx_destroy(ctx);
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
