/*
 * cmd_run.c — `kiln run MODEL --input NAME=FILE.npy ... [--params P.safetensors] -o DIR`.
 *
 * Binds each .npy file to the graph parameter of that name, and every
 * parameter the safetensors file has by name, runs the graph on the chosen
 * backend, writes DIR/output_<i>.npy, and says which backend really ran
 * (with the reason when `auto` chose). Inputs are checked here against the
 * parameters' dtypes, ranks and constant dims first, so that a mistake is
 * reported with the file that caused it; the runtime checks the rest.
 *
 * MODEL is .kir text, an ONNX model (run_onnx: through kiln_onnx_model, which
 * specialises it to the values of its shape inputs) or a .kiln model file. A
 * .kiln model's graph has the model's parameters (named by path: "0.W") and
 * then its inputs: a tensor input x is --input x=..., a graph input g is
 * --input g.src=... and --input g.dst=... (i64 edge lists, self-loops
 * included) and, for layers that pool per graph, --input g.batch=...; with
 * --train the graph's seed input comes from --seed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "cli.h"
#include "passes/mixed_precision.h"

enum { MAX_INPUTS = 256 };

typedef struct run_opts {
  const char *model, *outdir, *params;
  const char *input_name[MAX_INPUTS], *input_file[MAX_INPUTS];
  size_t ninputs;
  kiln_backend backend;
  char device[32]; /* --device, "cpu" or "KIND:N" */
  bool print, train, kiln_only, backend_given;
  kiln_dtype dtype; /* KILN_DTYPE_COUNT: the model file's own */
  uint64_t seed;
  kp_precision precision; /* docs/precision.md */
  long repeat;            /* --repeat: timed runs of the compiled model after the first */
} run_opts;

/* Where a graph parameter's value comes from besides an --input (slot values). */
enum { FROM_PARAMS = SIZE_MAX - 2, FROM_SEED = SIZE_MAX - 1, UNBOUND = SIZE_MAX };

static int parse_args(int argc, char **argv, run_opts *o) {
  enum {
    OPT_INPUT, OPT_OUTPUT, OPT_BACKEND, OPT_PRINT, OPT_PARAMS, OPT_DTYPE, OPT_TRAIN, OPT_SEED,
    OPT_PRECISION, OPT_DEVICE, OPT_REPEAT
  };
  static const cli_option opts[] = {
      [OPT_INPUT] = {"--input", NULL, true},     [OPT_OUTPUT] = {"--output", "-o", true},
      [OPT_BACKEND] = {"--backend", NULL, true}, [OPT_PRINT] = {"--print", NULL, false},
      [OPT_PARAMS] = {"--params", NULL, true},   [OPT_DTYPE] = {"--dtype", NULL, true},
      [OPT_TRAIN] = {"--train", NULL, false},    [OPT_SEED] = {"--seed", NULL, true},
      [OPT_PRECISION] = {"--precision", NULL, true}, [OPT_DEVICE] = {"--device", NULL, true},
      [OPT_REPEAT] = {"--repeat", NULL, true},
      {0},
  };
  cli_parser p = {.cmd = "run", .argc = argc, .argv = argv, .i = 1};
  const char *v;
  int k;
  while ((k = cli_next(&p, opts, &v)) != CLI_END) {
    switch (k) {
    case CLI_BAD: return 2;
    case CLI_HELP: return cli_command_help(cli_find_command("run")), -1;
    case CLI_ARG:
      if (o->model) return cli_usage_error("run", "unexpected argument '%s'", v);
      o->model = v;
      break;
    case OPT_INPUT: {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1])
        return cli_usage_error("run", "--input expects NAME=FILE.npy, got '%s'", v);
      if (o->ninputs == MAX_INPUTS) return cli_usage_error("run", "too many --input options");
      o->input_name[o->ninputs] = v;
      o->input_file[o->ninputs++] = eq + 1;
      break;
    }
    case OPT_OUTPUT: o->outdir = v; break;
    case OPT_BACKEND: {
      kiln_ctx *ctx = kiln_ctx_create();
      kiln_status s = ctx ? kiln_backend_parse(ctx, v, &o->backend) : KILN_ERR_NOMEM;
      int r = s ? cli_usage_error("run", "%s", ctx ? kiln_ctx_error(ctx) : "out of memory") : 0;
      kiln_ctx_destroy(ctx);
      if (r) return r;
      o->backend_given = true;
      break;
    }
    case OPT_DEVICE:
      if (cli_parse_device("run", v, o->device, sizeof o->device)) return 2;
      break;
    case OPT_PRINT: o->print = true; break;
    case OPT_PARAMS: o->params = v; break;
    case OPT_PRECISION:
      if (!kp_precision_parse(v, &o->precision))
        return cli_usage_error("run", "--precision expects fp64, fp32, tf32, bf16 or fp16, got '%s'",
                               v);
      break;
    case OPT_DTYPE:
      if (cli_parse_float_dtype("run", v, &o->dtype)) return 2;
      o->kiln_only = true;
      break;
    case OPT_TRAIN: o->train = o->kiln_only = true; break;
    case OPT_REPEAT: {
      char *end;
      o->repeat = strtol(v, &end, 10);
      if (!*v || *end || o->repeat < 1 || o->repeat > 100000)
        return cli_usage_error("run", "--repeat expects a number of runs from 1 to 100000, got '%s'",
                               v);
      break;
    }
    case OPT_SEED: {
      char *end;
      o->seed = strtoull(v, &end, 10);
      if (!*v || *end || *v == '-')
        return cli_usage_error("run", "--seed expects a non-negative integer, got '%s'", v);
      o->kiln_only = true;
      break;
    }
    }
  }
  if (o->backend == KILN_BACKEND_EAGER && strcmp(o->device, "cpu"))
    return cli_usage_error("run", "--backend eager runs on the CPU, not on device %s", o->device);
  if (!o->model) return cli_usage_error("run", "no model file given");
  if (o->kiln_only && !cli_is_kiln_file(o->model))
    return cli_usage_error("run", "--dtype, --train and --seed apply to .kiln model files only");
  if (!o->outdir && !cli_is_kiln_file(o->model)) /* a .kiln program needs none */
    return cli_usage_error("run", "no output directory given (-o DIR)");
  if (o->repeat && (o->backend == KILN_BACKEND_EAGER || strcmp(o->device, "cpu")))
    return cli_usage_error("run", "--repeat times the compiled model on the CPU only");
  return 0;
}

/* The name a parameter is bound by: its name in the text form, without '%'. */
static void param_name(const kiln_graph *g, size_t p, char *buf, size_t n) {
  kiln_value v = kiln_graph_get_param(g, p);
  const char *name = kiln_value_name(g, v);
  if (name) snprintf(buf, n, "%s", name);
  else snprintf(buf, n, "%u", (unsigned)v);
}

/* Length of the NAME part of "NAME=FILE", without a leading '%'. */
static const char *binding_name(const char *b, size_t *len) {
  if (*b == '%') b++;
  *len = (size_t)(strchr(b, '=') - b);
  return b;
}

/* The names the --input options may bind: every parameter, less those --params gives. */
static int unknown_input(const kiln_graph *g, const kiln_params *params, const char *name,
                         size_t len) {
  char list[1024] = "", one[128];
  size_t n = kiln_graph_num_params(g), k = 0;
  for (size_t p = 0; p < n && k < sizeof list; p++) {
    param_name(g, p, one, sizeof one);
    if (params && kiln_params_find(params, one)) continue;
    k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", one);
  }
  return cli_error("the model has no %s named '%.*s' (its %s: %s)", params ? "input" : "parameter",
                   (int)len, name, params ? "inputs" : "parameters", k ? list : "none");
}

/* Is graph parameter `name` one of the .kiln model's inputs (not a model parameter)? */
static bool is_model_input(const kiln_model_file *m, const char *name) {
  if (!strcmp(name, "seed")) return true;
  for (size_t i = 0; i < kiln_model_file_num_inputs(m); i++) {
    const char *in = kiln_model_file_inputs(m)[i].name;
    size_t n = strlen(in);
    if (!strncmp(name, in, n) && (!name[n] || (kiln_model_file_inputs(m)[i].kind ==
                                                   KILN_INPUT_GRAPH && name[n] == '.')))
      return true;
  }
  return false;
}

static int unbound(const kiln_graph *g, const kiln_model_file *m, const run_opts *o, size_t p) {
  char pn[128];
  param_name(g, p, pn, sizeof pn);
  if (m && !is_model_input(m, pn)) {
    if (!o->params)
      return cli_error("the model has parameters ('%s', ...): give --params P.safetensors "
                       "(`kiln init %s -o P.safetensors` makes one)", pn, o->model);
    return cli_error("%s: no tensor '%s' for the model's parameter", o->params, pn);
  }
  if (m && strchr(pn, '.'))
    return cli_error("no --input for the model's input '%s' (a graph input g is given as "
                     "--input g.src=FILE.npy --input g.dst=FILE.npy, and g.batch, g.graphs "
                     "where the model pools per graph)", pn);
  if (m)
    return cli_error("no --input for the model's input '%s' (give --input %s=FILE.npy)", pn, pn);
  return cli_error("no --input for parameter '%s' (give --input %s=FILE.npy)", pn, pn);
}

/*
 * Finds, for every parameter, what binds it: slot[p] is an index into
 * o->input_*, FROM_PARAMS (the tensor of that name in `params`) or
 * FROM_SEED (a .kiln model's seed input, from --seed).
 */
static int bind_inputs(const kiln_graph *g, const kiln_model_file *m, const kiln_params *params,
                       const run_opts *o, size_t *slot) {
  size_t n = kiln_graph_num_params(g);
  for (size_t p = 0; p < n; p++) slot[p] = UNBOUND;
  for (size_t i = 0; i < o->ninputs; i++) {
    size_t len, p;
    const char *name = binding_name(o->input_name[i], &len);
    char pn[128];
    for (p = 0; p < n; p++) {
      param_name(g, p, pn, sizeof pn);
      if (strlen(pn) == len && !strncmp(pn, name, len)) break;
    }
    if (p == n) return unknown_input(g, params, name, len);
    if (slot[p] != UNBOUND) return cli_error("input '%s' is given twice", pn);
    slot[p] = i;
  }
  for (size_t p = 0; p < n; p++) {
    char pn[128];
    param_name(g, p, pn, sizeof pn);
    if (slot[p] != UNBOUND) continue;
    if (params && kiln_params_find(params, pn)) slot[p] = FROM_PARAMS;
    else if (m && !strcmp(pn, "seed")) slot[p] = FROM_SEED;
    else return unbound(g, m, o, p);
  }
  return 0;
}

static void format_value_type(const kiln_graph *g, kiln_value v, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(kiln_value_dtype(g, v)));
  for (size_t i = 0; i < kiln_value_rank(g, v) && k < n; i++) {
    kiln_dim d = kiln_value_dim(g, v, i);
    if (d < 0) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "",
                                     kiln_dim_symbol_name(g, d));
    else k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)d);
  }
  if (k < n) snprintf(buf + k, n - k, "]");
}

static void format_tensor_type(const kiln_tensor *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(kiln_tensor_dtype(t)));
  for (size_t i = 0; i < kiln_tensor_rank(t) && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "",
                          (long long)kiln_tensor_dim(t, i));
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Does the tensor read from `file` fit parameter p? Symbolic dims are left to the runtime. */
static int check_input(const kiln_graph *g, size_t p, const kiln_tensor *t, const char *file) {
  kiln_value v = kiln_graph_get_param(g, p);
  bool fits = kiln_tensor_dtype(t) == kiln_value_dtype(g, v) &&
              kiln_tensor_rank(t) == kiln_value_rank(g, v);
  for (size_t i = 0; fits && i < kiln_tensor_rank(t); i++) {
    kiln_dim d = kiln_value_dim(g, v, i);
    fits = d < 0 || d == kiln_tensor_dim(t, i);
  }
  if (fits) return 0;
  char pn[128], want[256], got[256];
  param_name(g, p, pn, sizeof pn);
  format_value_type(g, v, want, sizeof want);
  format_tensor_type(t, got, sizeof got);
  return cli_error("%s: parameter '%s' is %s, but the file holds %s", file, pn, want, got);
}

/* The value bound to parameter p (a new tensor except FROM_PARAMS, which is borrowed). */
static int read_input(kiln_ctx *ctx, const kiln_graph *g, const kiln_params *params,
                      const run_opts *o, size_t p, size_t slot, kiln_tensor **out) {
  char pn[128];
  if (slot == FROM_SEED) {
    if (kiln_tensor_create(ctx, KILN_I64, 0, NULL, out) != KILN_OK)
      return cli_error("%s", kiln_ctx_error(ctx));
    *(int64_t *)kiln_tensor_data(*out) = (int64_t)o->seed;
    return 0;
  }
  if (slot == FROM_PARAMS) {
    param_name(g, p, pn, sizeof pn);
    *out = kiln_params_find(params, pn);
    kiln_dtype want = kiln_value_dtype(g, kiln_graph_get_param(g, p));
    if (kiln_tensor_dtype(*out) != want)
      return cli_error("%s: parameter '%s' is %s, but the model runs in %s (give --dtype %s, "
                       "or make the parameters with kiln init --dtype %s)", o->params, pn,
                       kiln_dtype_name(kiln_tensor_dtype(*out)), kiln_dtype_name(want),
                       kiln_dtype_name(kiln_tensor_dtype(*out)), kiln_dtype_name(want));
    return check_input(g, p, *out, o->params);
  }
  if (kiln_npy_read(ctx, o->input_file[slot], out) != KILN_OK)
    return cli_error("%s", kiln_ctx_error(ctx));
  return check_input(g, p, *out, o->input_file[slot]);
}

/* mkdir -p */
static int make_dirs(const char *dir) {
  char path[4096];
  size_t n = strlen(dir);
  if (n >= sizeof path) return cli_error("%s: path too long", dir);
  memcpy(path, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (path[i] != '/' && path[i] != 0) continue;
    char c = path[i];
    path[i] = 0;
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
      return cli_error("%s: cannot create directory: %s", path, strerror(errno));
    path[i] = c;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return cli_error("%s: not a directory", dir);
  return 0;
}

static int write_outputs(kiln_ctx *ctx, const run_opts *o, size_t n, kiln_tensor **out) {
  size_t dl = strlen(o->outdir);
  const char *sep = dl && o->outdir[dl - 1] == '/' ? "" : "/";
  for (size_t i = 0; i < n; i++) {
    char path[4200], type[256];
    snprintf(path, sizeof path, "%s%soutput_%zu.npy", o->outdir, sep, i);
    if (kiln_npy_write(ctx, path, out[i]) != KILN_OK)
      return cli_error("output_%zu: %s", i, kiln_ctx_error(ctx));
    format_tensor_type(out[i], type, sizeof type);
    printf("output_%zu: %s -> %s\n", i, type, path);
    if (o->print) cli_print_values(stdout, out[i]);
  }
  return 0;
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The line --repeat prints: the compile, and the median and fastest of the n run times t. */
static void print_times(double compile_ms, double *t, long n) {
  qsort(t, (size_t)n, sizeof *t, by_value);
  printf("time: compile %.1f ms; %ld runs: median %.3f ms, fastest %.3f ms\n", compile_ms, n,
         t[n / 2], t[0]);
  fflush(stdout);
}

/* "backend: NAME [(auto: why)]" and "device: D". */
static void print_backend(const run_opts *o, const kiln_run_info *info) {
  printf("backend: %s", kiln_backend_name(info->backend));
  if (o->backend == KILN_BACKEND_AUTO && info->reason[0]) printf(" (auto: %s)", info->reason);
  else if (o->backend == KILN_BACKEND_AUTO) printf(" (auto)");
  printf("\ndevice: %s\n", info->device);
}

/* --repeat: g compiled once, then n timed runs; the times on stdout (the profile, if on, at the end). */
static int time_runs(kiln_ctx *ctx, kiln_graph *g, long n, size_t nin, kiln_tensor **in,
                     size_t nout) {
  double t0 = seconds(), *t = calloc((size_t)n, sizeof *t);
  kiln_tensor **out = calloc(nout + 1, sizeof *out);
  kiln_compiled *c = NULL;
  int status = !t || !out ? cli_error("out of memory")
               : kiln_compile(g, NULL, &c) != KILN_OK ? cli_error("%s", kiln_ctx_error(ctx))
                                                      : 0;
  double compile_ms = (seconds() - t0) * 1e3;
  for (long r = 0; r < n && !status; r++) {
    double s = seconds();
    if (kiln_compiled_run(c, ctx, nin, in, nout, out, NULL) != KILN_OK)
      status = cli_error("%s", kiln_ctx_error(ctx));
    t[r] = (seconds() - s) * 1e3;
    for (size_t k = 0; k < nout; k++) kiln_tensor_destroy(out[k]), out[k] = NULL;
  }
  if (!status) print_times(compile_ms, t, n);
  kiln_compiled_destroy(c);
  free(out);
  free(t);
  return status;
}

/* Reads the inputs, runs, writes. `g`, `m` (NULL for .kir), `params` and `ctx` are the caller's. */
static int run_model(kiln_ctx *ctx, kiln_graph *g, const kiln_model_file *m,
                     const kiln_params *params, const run_opts *o) {
  size_t nin = kiln_graph_num_params(g), nout = kiln_graph_num_results(g);
  size_t *slot = calloc(nin + 1, sizeof *slot);
  kiln_tensor **in = calloc(nin + 1, sizeof *in), **out = calloc(nout + 1, sizeof *out);
  int status =
      !slot || !in || !out ? cli_error("out of memory") : bind_inputs(g, m, params, o, slot);
  for (size_t p = 0; p < nin && !status; p++)
    status = read_input(ctx, g, params, o, p, slot[p], &in[p]);
  kiln_run_info info = {0};
  kiln_run_options ro = {.backend = o->backend, .device = o->device};
  if (!status && kiln_graph_run_on(g, &ro, nin, in, nout, out, &info) != KILN_OK)
    status = cli_error("%s", kiln_ctx_error(ctx));
  if (!status) status = make_dirs(o->outdir);
  if (!status) {
    print_backend(o, &info);
    status = write_outputs(ctx, o, nout, out);
  }
  if (!status && o->repeat) status = time_runs(ctx, g, o->repeat, nin, in, nout);
  for (size_t p = 0; in && slot && p < nin; p++)
    if (slot[p] != FROM_PARAMS) kiln_tensor_destroy(in[p]);
  for (size_t r = 0; out && r < nout; r++) kiln_tensor_destroy(out[r]);
  free(slot);
  free(in);
  free(out);
  return status;
}

/*
 * A .kiln program (docs/kiln-syntax.md, "Programs") runs from top to bottom: its
 * print() goes to stdout, and a last line on stderr says how many graphs ran on which
 * backend. --input NAME=FILE.npy binds NAME. Returns -1 when the file is a model file.
 */
static int run_program(kiln_ctx *ctx, const run_opts *o) {
  kiln_tensor *in[MAX_INPUTS] = {0};
  char *names[MAX_INPUTS] = {0};
  int status = 0;
  for (size_t i = 0; i < o->ninputs && !status; i++) {
    size_t n = (size_t)(strchr(o->input_name[i], '=') - o->input_name[i]);
    if (!(names[i] = strndup(o->input_name[i], n))) status = cli_error("out of memory");
    else if (kiln_npy_read(ctx, o->input_file[i], &in[i]) != KILN_OK)
      status = cli_error("%s", kiln_ctx_error(ctx));
  }
  kiln_comm *comm = NULL; /* under an MPI launcher: fit() trains data-parallel */
  if (!status) status = cli_comm_open(ctx, "kiln run", &comm);
  kiln_program_options po = {.backend = o->backend_given ? o->backend : KILN_BACKEND_EAGER,
                             .device = o->device, .n_inputs = o->ninputs,
                             .input_names = (const char *const *)names, .inputs = in,
                             .comm = comm};
  int is_program = 0;
  if (!status && kiln_program_run(ctx, o->model, &po, &is_program) != KILN_OK)
    status = cli_error("%s", kiln_ctx_error(ctx));
  else if (!status && !is_program)
    status = -1;
  else if (!status && kiln_comm_rank(comm) == 0)
    fprintf(stderr, "program: %u graph%s ran, backend %s, device %s%s\n", po.graphs_run,
            po.graphs_run == 1 ? "" : "s",
            po.graphs_run ? kiln_backend_name(po.info.backend) : kiln_backend_name(po.backend),
            po.graphs_run ? po.info.device : "cpu", comm ? ", data-parallel (MPI)" : "");
  if (status != -1) status = cli_comm_close(comm, status);
  else kiln_comm_destroy(comm);
  for (size_t i = 0; i < o->ninputs; i++) {
    kiln_tensor_destroy(in[i]);
    free(names[i]);
  }
  return status;
}

/*
 * An ONNX model runs through kiln_onnx_model (include/kiln/onnx.h), as a C program would run
 * it: graph inputs that decide shapes (Reshape's shape, Slice's starts, TopK's k, ...) take their
 * --input values at run time, the model specialised to them as ONNX Runtime and TensorRT take
 * shape tensors' values. Each --input names a graph input; one without takes the --params tensor
 * of its name. With --repeat, "compile" is the open and the first run (import, compile, run).
 */
static int onnx_bind(kiln_ctx *ctx, const run_opts *o, const kiln_onnx_model *m,
                     const kiln_params *params, const char **names, kiln_tensor **in,
                     size_t *n_given, size_t *missing) {
  size_t nin = kiln_onnx_model_num_inputs(m), n = 0;
  *missing = SIZE_MAX;
  for (size_t i = 0; i < o->ninputs; i++, n++) {
    size_t len, k;
    const char *name = binding_name(o->input_name[i], &len);
    for (k = 0; k < nin; k++) {
      const char *mk = kiln_onnx_model_input_name(m, k);
      if (strlen(mk) == len && !strncmp(mk, name, len)) break;
    }
    if (k == nin) {
      char list[1024] = "";
      for (size_t j = 0, used = 0; j < nin && used < sizeof list; j++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", j ? ", " : "",
                                 kiln_onnx_model_input_name(m, j));
      return cli_error("the model has no input named '%.*s' (its inputs: %s)", (int)len, name,
                       nin ? list : "none");
    }
    names[n] = kiln_onnx_model_input_name(m, k);
    if (kiln_npy_read(ctx, o->input_file[i], &in[n]) != KILN_OK)
      return cli_error("%s", kiln_ctx_error(ctx));
  }
  for (size_t k = 0; k < nin; k++) {
    const char *mk = kiln_onnx_model_input_name(m, k);
    bool given = false;
    for (size_t i = 0; i < o->ninputs && !given; i++) given = !strcmp(names[i], mk);
    if (given) continue;
    kiln_tensor *t = params ? kiln_params_find(params, mk) : NULL;
    if (t) names[n] = mk, in[n++] = t;
    else if (*missing == SIZE_MAX) *missing = k;
  }
  *n_given = n;
  return 0;
}

static int run_onnx(kiln_ctx *ctx, const run_opts *o) {
  kiln_onnx_model_options mo = {
      .backend = o->backend, .device = o->device,
      .precision = o->precision != KP_PREC_FP32 ? kp_precision_name(o->precision) : NULL};
  double t0 = seconds();
  kiln_onnx_model *m = NULL;
  kiln_params *params = NULL;
  if (kiln_onnx_model_open(ctx, o->model, &mo, &m) != KILN_OK)
    return cli_error("%s", kiln_ctx_error(ctx));
  size_t nin = kiln_onnx_model_num_inputs(m), nout = kiln_onnx_model_num_outputs(m);
  size_t cap = nin + o->ninputs + 1, n = 0, missing;
  const char **names = calloc(cap, sizeof *names);
  kiln_tensor **in = calloc(cap, sizeof *in), **out = calloc(nout + 1, sizeof *out);
  int status = !names || !in || !out ? cli_error("out of memory") : 0;
  if (!status && o->params && kiln_safetensors_read(ctx, o->params, &params) != KILN_OK)
    status = cli_error("%s", kiln_ctx_error(ctx));
  if (!status) status = onnx_bind(ctx, o, m, params, names, in, &n, &missing);
  kiln_run_info info = {0};
  kiln_status s = status ? KILN_OK : kiln_onnx_model_run(m, ctx, n, names, in, nout, out, &info);
  if (s == KILN_ERR_INVALID && missing != SIZE_MAX) /* the first input without a value */
    status = cli_error("%s; give its value with --input %s=FILE.npy", kiln_ctx_error(ctx),
                       kiln_onnx_model_input_name(m, missing));
  else if (s)
    status = cli_error("%s", kiln_ctx_error(ctx));
  double compile_ms = (seconds() - t0) * 1e3;
  if (!status) status = make_dirs(o->outdir);
  if (!status) {
    print_backend(o, &info);
    status = write_outputs(ctx, o, nout, out);
  }
  double *t = !status && o->repeat ? calloc((size_t)o->repeat, sizeof *t) : NULL;
  if (!status && o->repeat && !t) status = cli_error("out of memory");
  for (long r = 0; r < o->repeat && !status; r++) { /* specialised already: cache hits */
    for (size_t k = 0; k < nout; k++) kiln_tensor_destroy(out[k]), out[k] = NULL;
    double st = seconds();
    if (kiln_onnx_model_run(m, ctx, n, names, in, nout, out, NULL) != KILN_OK)
      status = cli_error("%s", kiln_ctx_error(ctx));
    t[r] = (seconds() - st) * 1e3;
  }
  if (!status && o->repeat) print_times(compile_ms, t, o->repeat);
  free(t);
  for (size_t i = 0; in && i < o->ninputs; i++) kiln_tensor_destroy(in[i]); /* the rest: params' */
  for (size_t r = 0; out && r < nout; r++) kiln_tensor_destroy(out[r]);
  free(names);
  free(in);
  free(out);
  kiln_params_destroy(params);
  kiln_onnx_model_destroy(m);
  return status;
}

int cmd_run(int argc, char **argv) {
  run_opts o = {.backend = KILN_BACKEND_AUTO, .device = "cpu", .dtype = KILN_DTYPE_COUNT};
  int r = parse_args(argc, argv, &o);
  if (r) return r < 0 ? 0 : r;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  if (cli_is_kiln_file(o.model) && !o.params && !o.outdir && !o.kiln_only) {
    int ps = run_program(ctx, &o);
    if (ps >= 0) {
      kiln_ctx_destroy(ctx);
      return ps;
    }
  }
  if (!o.outdir) {
    kiln_ctx_destroy(ctx);
    return cli_usage_error("run", "no output directory given (-o DIR)");
  }
  if (cli_is_onnx_file(o.model)) {
    int os = run_onnx(ctx, &o);
    kiln_ctx_destroy(ctx);
    return os;
  }
  kiln_graph *g = NULL;
  kiln_model_file *m = NULL;
  kiln_params *params = NULL;
  int status = cli_load_model(ctx, o.model, o.dtype, o.train, &g, &m);
  if (!status && o.params && kiln_safetensors_read(ctx, o.params, &params) != KILN_OK)
    status = cli_error("%s", kiln_ctx_error(ctx));
  /* A .kiln model's parameters must all be there, by path and shape, and nothing else. */
  if (!status && m && params &&
      kiln_layer_check_params(ctx, kiln_model_file_layer(m), params) != KILN_OK)
    status = cli_error("%s: %s", o.params, kiln_ctx_error(ctx));
  if (!status && o.precision != KP_PREC_FP32) { /* the policy pass: the graph's casts */
    kiln_graph *pg = kp_mixed_precision(g, o.precision);
    if (!pg) status = cli_error("--precision %s: %s", kp_precision_name(o.precision),
                                kiln_ctx_error(ctx));
    else kiln_graph_destroy(g), g = pg;
  }
  if (!status) status = run_model(ctx, g, m, params, &o);
  kiln_params_destroy(params);
  kiln_model_file_destroy(m);
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return status;
}
