/*
 * cmd_fit.c — `kiln fit` and `kiln grad`: train a .kiln model on .npy data,
 * or compute one gradient.
 *
 *   kiln fit MODEL.kiln [--params P] --x X.npy [--y Y.npy] --loss L --opt NAME --lr R
 *            --epochs E --batch-size B [--seed S --clip C --schedule ... --val-x --val-y]
 *            -o trained.safetensors
 *   kiln grad MODEL.kiln --params P --x X.npy [--y Y.npy] --loss L -o grads.safetensors
 *
 * The training step (forward, loss, backward, clipping, optimizer) is one
 * compiled graph (kiln_trainer, train/fit.c); the loop is kiln_fit().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "passes/mixed_precision.h"

typedef struct fit_opts {
  const char *model, *params, *out, *loss, *opt, *schedule, *history, *precision;
  cli_data data, val;
  bool has_val;
  double lr, clip, gamma;
  int64_t epochs, batch_size, warmup, total, step_size;
  uint64_t seed;
  kiln_dtype dtype;
  kiln_backend backend;
  bool quiet;
  const char *device_given;   /* --device as given */
  char device[40];            /* what it chose: "vulkan:0", ..., or "" for the CPU */
} fit_opts;

static int parse_num(const char *cmd, const char *opt, const char *v, double *out) {
  char *end;
  errno = 0;
  *out = strtod(v, &end);
  if (!*v || *end || errno) return cli_usage_error(cmd, "%s expects a number, got '%s'", opt, v);
  return 0;
}

static int parse_int(const char *cmd, const char *opt, const char *v, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < 0)
    return cli_usage_error(cmd, "%s expects a non-negative integer, got '%s'", opt, v);
  *out = x;
  return 0;
}

static int add_file(const char *cmd, const char **list, size_t *n, const char *v) {
  if (*n == CLI_MAX_DATA) return cli_usage_error(cmd, "too many data files");
  list[(*n)++] = v;
  return 0;
}

enum {
  O_PARAMS, O_X, O_Y, O_MASK, O_INPUT, O_LOSS, O_OPT, O_LR, O_EPOCHS, O_BATCH, O_SEED, O_CLIP,
  O_SCHEDULE, O_WARMUP, O_TOTAL, O_STEP_SIZE, O_GAMMA, O_VAL_X, O_VAL_Y, O_VAL_MASK, O_DTYPE,
  O_BACKEND, O_QUIET, O_OUT, O_HISTORY, O_PRECISION, O_DEVICE
};
static const cli_option fit_options[] = {
    [O_PARAMS] = {"--params", NULL, true},     [O_X] = {"--x", NULL, true},
    [O_Y] = {"--y", NULL, true},               [O_MASK] = {"--mask", NULL, true},
    [O_INPUT] = {"--input", NULL, true},       [O_LOSS] = {"--loss", NULL, true},
    [O_OPT] = {"--opt", NULL, true},           [O_LR] = {"--lr", NULL, true},
    [O_EPOCHS] = {"--epochs", NULL, true},     [O_BATCH] = {"--batch-size", NULL, true},
    [O_SEED] = {"--seed", NULL, true},         [O_CLIP] = {"--clip", NULL, true},
    [O_SCHEDULE] = {"--schedule", NULL, true}, [O_WARMUP] = {"--warmup", NULL, true},
    [O_TOTAL] = {"--total", NULL, true},       [O_STEP_SIZE] = {"--step-size", NULL, true},
    [O_GAMMA] = {"--gamma", NULL, true},       [O_VAL_X] = {"--val-x", NULL, true},
    [O_VAL_Y] = {"--val-y", NULL, true},       [O_VAL_MASK] = {"--val-mask", NULL, true},
    [O_DTYPE] = {"--dtype", NULL, true},       [O_BACKEND] = {"--backend", NULL, true},
    [O_QUIET] = {"--quiet", "-q", false},      [O_OUT] = {"--output", "-o", true},
    [O_HISTORY] = {"--history", NULL, true},   [O_PRECISION] = {"--precision", NULL, true},
    [O_DEVICE] = {"--device", NULL, true},
    {0}};

/* --device: where the step is compiled for ("" for the CPU); the backend stays --backend's. */
static int pick_device(const char *cmd, fit_opts *o) {
  char spec[32];
  if (cli_parse_device(cmd, o->device_given, spec, sizeof spec)) return 2;
  if (!strcmp(spec, "cpu")) o->device[0] = 0;
  else if (o->backend == KILN_BACKEND_EAGER)
    return cli_usage_error(cmd, "--backend eager runs on the CPU, not on device %s", spec);
  else snprintf(o->device, sizeof o->device, "%s", spec);
  return 0;
}

/* 0 to go on, > 0 an exit status, < 0 for --help. */
static int parse_args(const char *cmd, int argc, char **argv, fit_opts *o) {
  cli_parser p = {.cmd = cmd, .argc = argc, .argv = argv, .i = 1};
  const char *v;
  int k, r = 0;
  bool fit = !strcmp(cmd, "fit");
  while (!r && (k = cli_next(&p, fit_options, &v)) != CLI_END) {
    if (!fit && k >= 0 && k != O_PARAMS && k != O_X && k != O_Y && k != O_MASK && k != O_INPUT &&
        k != O_LOSS && k != O_SEED && k != O_DTYPE && k != O_BACKEND && k != O_OUT &&
        k != O_DEVICE)
      return cli_usage_error(cmd, "%s is an option of `kiln fit`", fit_options[k].name);
    switch (k) {
    case CLI_BAD: return 2;
    case CLI_HELP: return cli_command_help(cli_find_command(cmd)), -1;
    case CLI_ARG:
      if (o->model) return cli_usage_error(cmd, "unexpected argument '%s'", v);
      o->model = v;
      break;
    case O_PARAMS: o->params = v; break;
    case O_X: r = add_file(cmd, o->data.x, &o->data.nx, v); break;
    case O_Y: o->data.y = v; break;
    case O_MASK: o->data.mask = v; break;
    case O_INPUT:
      if (!strchr(v, '=')) return cli_usage_error(cmd, "--input expects NAME=FILE.npy, got '%s'", v);
      r = add_file(cmd, o->data.input_name, &o->data.ninputs, v);
      break;
    case O_LOSS: o->loss = v; break;
    case O_OPT: o->opt = v; break;
    case O_LR:
      r = parse_num(cmd, "--lr", v, &o->lr);
      if (!r && !(o->lr > 0)) r = cli_usage_error(cmd, "--lr expects a positive number, got '%s'", v);
      break;
    case O_EPOCHS: r = parse_int(cmd, "--epochs", v, &o->epochs); break;
    case O_BATCH: r = parse_int(cmd, "--batch-size", v, &o->batch_size); break;
    case O_SEED: {
      int64_t s = 0;
      r = parse_int(cmd, "--seed", v, &s);
      o->seed = (uint64_t)s;
      break;
    }
    case O_CLIP: r = parse_num(cmd, "--clip", v, &o->clip); break;
    case O_SCHEDULE:
      if (strcmp(v, "constant") && strcmp(v, "cosine") && strcmp(v, "step"))
        return cli_usage_error(cmd, "--schedule expects constant, cosine or step, got '%s'", v);
      o->schedule = v;
      break;
    case O_WARMUP: r = parse_int(cmd, "--warmup", v, &o->warmup); break;
    case O_TOTAL: r = parse_int(cmd, "--total", v, &o->total); break;
    case O_STEP_SIZE: r = parse_int(cmd, "--step-size", v, &o->step_size); break;
    case O_GAMMA: r = parse_num(cmd, "--gamma", v, &o->gamma); break;
    case O_VAL_X: o->has_val = true, r = add_file(cmd, o->val.x, &o->val.nx, v); break;
    case O_VAL_Y: o->has_val = true, o->val.y = v; break;
    case O_VAL_MASK: o->has_val = true, o->val.mask = v; break;
    case O_DTYPE: r = cli_parse_float_dtype(cmd, v, &o->dtype); break;
    case O_BACKEND: {
      kiln_ctx *c = kiln_ctx_create();
      if (kiln_backend_parse(c, v, &o->backend) != KILN_OK) r = cli_usage_error(cmd, "%s", kiln_ctx_error(c));
      kiln_ctx_destroy(c);
      break;
    }
    case O_DEVICE: o->device_given = v; break;
    case O_QUIET: o->quiet = true; break;
    case O_OUT: o->out = v; break;
    case O_HISTORY: o->history = v; break;
    case O_PRECISION: {
      kp_precision p;
      if (!kp_precision_parse(v, &p))
        r = cli_usage_error(cmd, "--precision expects fp64, fp32, tf32, bf16 or fp16, got '%s'", v);
      o->precision = v;
      break;
    }
    }
  }
  if (r) return r;
  if (o->device_given && (r = pick_device(cmd, o))) return r;
  if (!o->model) return cli_usage_error(cmd, "no model file given");
  if (!cli_is_kiln_file(o->model)) return cli_usage_error(cmd, "the model must be a .kiln file, got '%s'", o->model);
  if (!o->out) return cli_usage_error(cmd, "no output file given (-o FILE.safetensors)");
  if (!o->data.nx && !o->data.ninputs) return cli_usage_error(cmd, "no data given (--x X.npy)");
  return 0;
}

/* The model file, its float type, and the parameters (read, or initialised from --seed). */
static int load(kiln_ctx *ctx, fit_opts *o, kiln_model_file **m, kiln_params **p) {
  if (cli_read_kiln(ctx, o->model, m)) return 1;
  if (o->dtype == KILN_DTYPE_COUNT) {
    o->dtype = KILN_F32;
    for (size_t i = 0; i < kiln_model_file_num_inputs(*m); i++) {
      kiln_dtype t = kiln_model_file_inputs(*m)[i].dtype;
      if (kiln_model_file_inputs(*m)[i].kind == KILN_INPUT_TENSOR && (t == KILN_F64 || t == KILN_F32)) {
        o->dtype = t;
        break;
      }
    }
  }
  if (o->dtype != KILN_F32 && o->dtype != KILN_F64)
    return cli_error("training runs in f32 or f64, not %s", kiln_dtype_name(o->dtype));
  kiln_status s = o->params ? kiln_safetensors_read(ctx, o->params, p)
                            : kiln_layer_init(ctx, kiln_model_file_layer(*m), o->seed, o->dtype, p);
  if (s) return cli_error("%s", kiln_ctx_error(ctx));
  /* Parameters stored in another float type are converted. */
  for (size_t i = 0; i < kiln_params_count(*p); i++) {
    kiln_tensor *t = kiln_params_tensor(*p, i);
    if (kiln_tensor_dtype(t) == o->dtype) continue;
    kiln_params *c = NULL;
    if (kiln_params_create(ctx, &c)) return cli_error("out of memory");
    for (size_t j = 0; j < kiln_params_count(*p); j++) {
      const kiln_tensor *src = kiln_params_tensor(*p, j);
      size_t r = kiln_tensor_rank(src);
      int64_t dims[KILN_MAX_RANK];
      for (size_t a = 0; a < r; a++) dims[a] = kiln_tensor_dim(src, a);
      kiln_tensor *d = NULL;
      if (kiln_tensor_create(ctx, o->dtype, r, dims, &d)) return cli_error("out of memory");
      for (size_t e = 0; e < kiln_tensor_numel(src); e++) kiln_tensor_set(d, e, kiln_tensor_get(src, e));
      kiln_params_add(c, kiln_params_name(*p, j), d);
    }
    kiln_params_destroy(*p);
    *p = c;
    break;
  }
  if (kiln_layer_check_params(ctx, kiln_model_file_layer(*m), *p))
    return cli_error("%s: %s", o->params ? o->params : "init", kiln_ctx_error(ctx));
  return 0;
}

/* `ins` (64 entries) holds the model's inputs with their float types made --dtype's: a model
 * declared f32 trains in f64 with --dtype f64, its data converted (cli_bind_data). */
static void fill_spec(const fit_opts *o, const kiln_model_file *m, kiln_train_spec *spec,
                      kiln_model_input *ins) {
  memset(spec, 0, sizeof *spec);
  spec->model = kiln_model_file_layer(m);
  size_t n = kiln_model_file_num_inputs(m);
  for (size_t i = 0; i < n && i < 64; i++) {
    ins[i] = kiln_model_file_inputs(m)[i];
    kiln_dtype t = ins[i].dtype;
    bool fl = t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16;
    if (ins[i].kind == KILN_INPUT_TENSOR && fl) ins[i].dtype = o->dtype;
  }
  /* --loss NAME: a built-in loss, or a function the model file binds with `let NAME = fn...`. */
  spec->loss_fn = o->loss ? kiln_model_file_fn(m, o->loss) : NULL;
  spec->n_inputs = n < 64 ? n : 64;
  spec->inputs = ins;
  spec->loss = spec->loss_fn ? NULL : o->loss;
  spec->clip = o->clip;
  spec->masked = o->data.mask != NULL;
  spec->dtype = o->dtype;
  spec->backend = o->backend;
  spec->device = o->device[0] ? o->device : NULL;
  spec->precision = o->precision;
}

static int run(const char *cmd, int argc, char **argv) {
  fit_opts o = {.dtype = KILN_DTYPE_COUNT, .backend = KILN_BACKEND_AUTO, .gamma = 0.1, .step_size = 1};
  int r = parse_args(cmd, argc, argv, &o);
  if (r) return r < 0 ? 0 : r;
  bool fit = !strcmp(cmd, "fit");
  kiln_ctx *ctx = kiln_ctx_create();
  kiln_model_file *m = NULL;
  kiln_params *p = NULL;
  kiln_tensor *data[64] = {0}, *val[64] = {0};
  size_t ndata = 0;
  kiln_trainer *t = NULL;
  kiln_grad_fn *gf = NULL;
  kiln_fit_result res = {0};
  kiln_comm *comm = NULL;
  int status = fit ? cli_comm_open(ctx, "kiln fit", &comm) : 0;
  bool rank0 = kiln_comm_rank(comm) == 0;
  if (!status) status = load(ctx, &o, &m, &p);
  kiln_train_spec spec;
  kiln_model_input ins[64];
  if (!status) {
    fill_spec(&o, m, &spec, ins);
    spec.comm = comm;
    if (o.opt && kiln_optimizer_parse(ctx, o.opt, &spec.opt)) status = cli_error("%s", kiln_ctx_error(ctx));
    else if (!o.opt) spec.opt = kiln_optimizer_default(KILN_OPTIM_ADAM);
    if (o.lr > 0) spec.opt.lr = o.lr;
  }
  /* The trainer's input names tell which file goes where. */
  const char *names[64];
  if (!status && fit) {
    /* Only for the names (and the early errors): on the interpreter, so that the step is not
     * compiled twice — kiln_fit compiles its own. */
    kiln_train_spec names_spec = spec;
    names_spec.backend = KILN_BACKEND_EAGER;
    names_spec.device = NULL;
    names_spec.comm = NULL; /* no exchange for the names */
    if (kiln_trainer_create(ctx, &names_spec, p, &t)) status = cli_error("%s", kiln_ctx_error(ctx));
    ndata = t ? kiln_trainer_num_inputs(t) : 0;
    for (size_t i = 0; i < ndata && i < 64; i++) names[i] = kiln_trainer_input_name(t, i);
  } else if (!status) {
    if (kiln_value_and_grad_create(ctx, &spec, 0, &gf)) status = cli_error("%s", kiln_ctx_error(ctx));
    ndata = gf ? kiln_grad_fn_num_inputs(gf) : 0;
    for (size_t i = 0; i < ndata && i < 64; i++) names[i] = kiln_grad_fn_input_name(gf, i);
  }
  if (!status && ndata > 64) status = cli_error("the model has too many inputs");
  if (!status) status = cli_bind_data(ctx, m, o.dtype, o.loss, ndata, names, &o.data, data);
  if (!status && o.has_val) {
    o.val.ninputs = o.data.ninputs;
    memcpy(o.val.input_name, o.data.input_name, sizeof o.val.input_name);
    if (!o.val.mask) o.val.mask = o.data.mask;
    status = cli_bind_data(ctx, m, o.dtype, o.loss, ndata, names, &o.val, val);
  }
  /* Data-parallel: the ranks agree that all of them are ready before kiln_fit's exchanges, so
     that a rank that failed alone (a file it cannot read) fails them all at once. */
  int worst = 0;
  if (comm && kiln_comm_agree(comm, status, &worst)) {
    fprintf(stderr, "kiln: rank %d: %s; ending the job (MPI_Abort)\n", kiln_comm_rank(comm),
            kiln_ctx_error(ctx));
    kiln_comm_abort(comm, 1);
  }
  if (!status && worst)
    status = cli_error("rank %d: another rank failed before training (its message says why)",
                       kiln_comm_rank(comm));
  if (!status && fit) {
    kiln_trainer_destroy(t), t = NULL; /* kiln_fit makes its own */
    kiln_fit_options fo = {.epochs = o.epochs, .batch_size = o.batch_size, .seed = o.seed,
                           .verbose = !o.quiet, .n_val = o.has_val ? ndata : 0, .val = val};
    if (o.schedule && !strcmp(o.schedule, "cosine"))
      fo.schedule =
          (kiln_schedule){.kind = KILN_SCHEDULE_COSINE, .total = o.total, .warmup = o.warmup};
    else if (o.schedule && !strcmp(o.schedule, "step"))
      fo.schedule =
          (kiln_schedule){.kind = KILN_SCHEDULE_STEP, .step_size = o.step_size, .gamma = o.gamma};
    /* Data-parallel: every rank trains, rank 0 alone writes and prints. */
    if (kiln_fit(ctx, &spec, p, ndata, data, &fo, &res) ||
        (rank0 && kiln_safetensors_write(ctx, o.out, res.params)))
      status = cli_error("%s", kiln_ctx_error(ctx));
    if (!rank0) kiln_fit_result_free(&res); /* nothing more to print */
    if (!status && rank0 && comm)
      fprintf(stderr, "data-parallel: %d ranks (MPI)\n", kiln_comm_size(comm));
    if (!status && rank0) /* what really trained (on stderr: stdout has one line per epoch) */
      fprintf(stderr, "backend: %s%s%s%s\ndevice: %s\n", kiln_backend_name(res.info.backend),
             res.info.reason[0] ? " (auto: " : "", res.info.reason,
             res.info.reason[0] ? ")" : "", res.info.device);
    for (int64_t e = 0; !status && e < res.epochs; e++) {
      if (res.val_history) printf("epoch %lld loss %.9g val_loss %.9g\n", (long long)e + 1, res.history[e], res.val_history[e]);
      else printf("epoch %lld loss %.9g\n", (long long)e + 1, res.history[e]);
    }
    if (!status && rank0 && o.history) {
      FILE *f = fopen(o.history, "w");
      if (!f) status = cli_error("%s: %s", o.history, strerror(errno));
      for (int64_t e = 0; f && e < res.epochs; e++)
        fprintf(f, "%lld,%.17g,%.17g\n", (long long)e + 1, res.history[e], res.val_history ? res.val_history[e] : 0.0);
      if (f) fclose(f);
    }
  } else if (!status) {
    double loss = 0;
    kiln_params *grads = NULL;
    if (kiln_value_and_grad(gf, p, ndata, data, o.seed, &loss, &grads) ||
        kiln_safetensors_write(ctx, o.out, grads))
      status = cli_error("%s", kiln_ctx_error(ctx));
    else
      printf("loss %.17g\n", loss);
    kiln_params_destroy(grads);
  }
  for (size_t i = 0; i < 64; i++) kiln_tensor_destroy(data[i]), kiln_tensor_destroy(val[i]);
  kiln_fit_result_free(&res);
  kiln_trainer_destroy(t);
  kiln_grad_fn_destroy(gf);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  status = cli_comm_close(comm, status);
  kiln_ctx_destroy(ctx);
  return status;
}

int cmd_fit(int argc, char **argv) { return run("fit", argc, argv); }
int cmd_grad(int argc, char **argv) { return run("grad", argc, argv); }
