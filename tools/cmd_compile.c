/*
 * cmd_compile.c — `kiln compile MODEL.kir|MODEL.kiln|MODEL.onnx -o model.so [--header model.h]
 * [--target cpu|vulkan|cuda|hip] [--freeze NAME=FILE.npy] [--shape NAME=D0xD1x...]`:
 * ahead-of-time compilation into a shared object that needs
 * no LLVM (for a GPU target: its kernels compiled now and embedded, runtime/driver/aot_gpu.c).
 *
 * The work is kiln_compile_shared() (runtime/driver/aot.c); this file reads the
 * command line, the weights (--params P.safetensors, embedded in the .so
 * and no longer inputs), and picks the defaults: the entry points are named after the
 * output file (`mlp.so` gives `mlp_create`, `mlp_run`, ...) unless --name
 * says otherwise.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kiln/aot.h"
#include "passes/mixed_precision.h"

/* "dir/my-model.so" -> "my_model"; a leading digit gets a '_' first. */
static void name_from_path(const char *path, char *out, size_t n) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t k = 0;
  if (isdigit((unsigned char)*base) && k + 1 < n) out[k++] = '_';
  for (; *base && *base != '.' && k + 1 < n; base++)
    out[k++] = isalnum((unsigned char)*base) ? *base : '_';
  if (!k) out[k++] = 'm';
  out[k] = 0;
}

enum { MAX_FREEZE = 64 };

/*
 * An ONNX model with the inputs --freeze names baked in (kiln_onnx_model_specialize, the path
 * `kiln run` and the C API specialise by). A graph input that decides shapes (Reshape's shape,
 * Slice's starts, ...) cannot be a symbolic input of a .so, since Kiln's IR has no shape made
 * from a tensor's values: without --freeze the error names it and says how to give it.
 */
/* --shape NAME=D0xD1x...: a u8 tensor of those dims (the importer reads only its dims). */
static int parse_shape(kiln_ctx *ctx, const char *spec, char **name, kiln_tensor **t) {
  const char *eq = strchr(spec, '='), *p = eq + 1;
  int64_t dims[KILN_MAX_RANK];
  size_t rank = 0;
  for (;;) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0 || rank == KILN_MAX_RANK || *p == '-' || *p == '+')
      return cli_usage_error("compile", "--shape expects NAME=D0xD1x... (dims from 0, at most %d), "
                             "got '%s'", KILN_MAX_RANK, spec);
    dims[rank++] = v;
    if (!*end) break;
    if (*end != 'x')
      return cli_usage_error("compile", "--shape expects NAME=D0xD1x..., got '%s'", spec);
    p = end + 1;
  }
  if (!(*name = strndup(spec, (size_t)(eq - spec)))) return cli_error("out of memory");
  if (kiln_tensor_create(ctx, KILN_U8, rank, dims, t) != KILN_OK)
    return cli_error("--shape %s: %s", spec, kiln_ctx_error(ctx));
  return 0;
}

static int load_onnx(kiln_ctx *ctx, const char *path, size_t n, const char *const *freeze,
                     size_t nshape, const char *const *shape, kiln_graph **g) {
  kiln_onnx_model_options mo = {.backend = KILN_BACKEND_EAGER}; /* specialised here, not run */
  kiln_onnx_model *m = NULL;
  kiln_tensor *vals[MAX_FREEZE] = {0}, *dims[MAX_FREEZE] = {0};
  char *names[MAX_FREEZE] = {0}, *dnames[MAX_FREEZE] = {0};
  int status = 0;
  if (kiln_onnx_model_open(ctx, path, &mo, &m) != KILN_OK) return cli_error("%s", kiln_ctx_error(ctx));
  for (size_t i = 0; i < n && !status; i++) {
    const char *eq = strchr(freeze[i], '=');
    if (!(names[i] = strndup(freeze[i], (size_t)(eq - freeze[i])))) status = cli_error("out of memory");
    else if (kiln_npy_read(ctx, eq + 1, &vals[i]) != KILN_OK)
      status = cli_error("%s", kiln_ctx_error(ctx));
  }
  for (size_t i = 0; i < nshape && !status; i++)
    status = parse_shape(ctx, shape[i], &dnames[i], &dims[i]);
  kiln_status s = status ? KILN_OK
                         : kiln_onnx_model_specialize_dims(m, ctx, n, (const char *const *)names,
                                                           vals, nshape,
                                                           (const char *const *)dnames, dims, g);
  size_t k = 0, nin = kiln_onnx_model_num_inputs(m); /* the first shape input not frozen */
  for (; s == KILN_ERR_UNSUPPORTED && k < nin; k++) {
    bool given = false;
    for (size_t i = 0; i < n && !given; i++) given = !strcmp(names[i], kiln_onnx_model_input_name(m, k));
    if (kiln_onnx_model_is_shape_input(m, k) && !given) break;
  }
  if (s == KILN_ERR_UNSUPPORTED && k < nin) {
    const char *name = kiln_onnx_model_input_name(m, k);
    status = cli_error("%s; a .so cannot take '%s' as a symbolic input (its value decides shapes): "
                       "bake a value in with --freeze %s=FILE.npy, or run the model with `kiln run "
                       "--input %s=FILE.npy`, which specialises it to each value",
                       kiln_ctx_error(ctx), name, name, name);
  } else if (s == KILN_ERR_UNSUPPORTED && kiln_onnx_model_fixes_dims(m)) {
    status = cli_error("%s; a .so cannot keep these symbolic dims: fix them with --shape "
                       "NAME=D0xD1x... for each input (a .so for those dims), or run the model "
                       "with `kiln run`, which specialises it to each run's dims",
                       kiln_ctx_error(ctx));
  } else if (s) {
    status = cli_error("%s", kiln_ctx_error(ctx));
  }
  for (size_t i = 0; i < n; i++) free(names[i]), kiln_tensor_destroy(vals[i]);
  for (size_t i = 0; i < nshape; i++) free(dnames[i]), kiln_tensor_destroy(dims[i]);
  kiln_onnx_model_destroy(m);
  return status;
}

/*
 * "peak memory: N bytes" (arena, inputs, results, constants of one run), or
 * "peak memory: depends on B, T" naming the symbols of the inputs' shapes.
 */
static void print_peak(kiln_graph *g, size_t peak) {
  if (peak) {
    printf("peak memory: %zu bytes\n", peak);
    return;
  }
  printf("peak memory: depends on");
  const char *sep = " ";
  for (uint32_t s = 0; s < g->mod->nsyms; s++) {
    bool used = false;
    for (uint32_t p = 0; p < g->nparams && !used; p++) {
      const kir_type *t = &g->values[g->params[p]].type;
      for (int d = 0; d < t->rank; d++) used |= t->dims[d] == KIR_SYM_DIM(s);
    }
    if (!used) continue;
    printf("%s%s", sep, g->mod->syms[s]);
    sep = ", ";
  }
  printf("\n");
}

int cmd_compile(int argc, char **argv) {
  cli_parser p = {.cmd = "compile", .argc = argc, .argv = argv, .i = 1};
  enum { O_OUT, O_HEADER, O_NAME, O_TARGET, O_TARGET_CPU, O_KEEP, O_PARAMS, O_PRECISION, O_FREEZE,
         O_SHAPE };
  static const cli_option opts[] = {
      [O_OUT] = {"--output", "-o", true},     [O_HEADER] = {"--header", NULL, true},
      [O_NAME] = {"--name", NULL, true},      [O_TARGET] = {"--target", NULL, true},
      [O_TARGET_CPU] = {"--target-cpu", NULL, true}, [O_KEEP] = {"--keep-temps", NULL, false},
      [O_PARAMS] = {"--params", NULL, true},  [O_PRECISION] = {"--precision", NULL, true},
      [O_FREEZE] = {"--freeze", NULL, true}, [O_SHAPE] = {"--shape", NULL, true},
      {0}};
  const char *freeze[MAX_FREEZE], *shape[MAX_FREEZE];
  size_t nfreeze = 0, nshape = 0;
  kp_precision precision = KP_PREC_FP32;
  const char *model = NULL, *params_path = NULL, *v;
  kiln_aot_options opt = {0};
  char name[80];
  int k;
  while ((k = cli_next(&p, opts, &v)) != CLI_END) {
    switch (k) {
    case CLI_BAD: return 2;
    case CLI_HELP: return cli_command_help(cli_find_command("compile"));
    case CLI_ARG:
      if (model) return cli_usage_error("compile", "unexpected argument '%s'", v);
      model = v;
      break;
    case O_OUT: opt.output = v; break;
    case O_HEADER: opt.header = v; break;
    case O_NAME: opt.name = v; break;
    case O_TARGET_CPU: opt.target_cpu = v; break;
    case O_KEEP: opt.keep_temps = 1; break;
    case O_TARGET:
      if (strcmp(v, "cpu") && strcmp(v, "vulkan") && strcmp(v, "cuda") && strcmp(v, "hip"))
        return cli_usage_error("compile", "--target expects cpu, vulkan, cuda or hip, got '%s'", v);
      opt.target = v;
      break;
    case O_PARAMS: params_path = v; break;
    case O_FREEZE: {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1])
        return cli_usage_error("compile", "--freeze expects NAME=FILE.npy, got '%s'", v);
      if (nfreeze == MAX_FREEZE) return cli_usage_error("compile", "too many --freeze options");
      freeze[nfreeze++] = v;
      break;
    }
    case O_SHAPE: {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1])
        return cli_usage_error("compile", "--shape expects NAME=D0xD1x..., got '%s'", v);
      if (nshape == MAX_FREEZE) return cli_usage_error("compile", "too many --shape options");
      shape[nshape++] = v;
      break;
    }
    case O_PRECISION:
      if (!kp_precision_parse(v, &precision))
        return cli_usage_error("compile",
                               "--precision expects fp64, fp32, tf32, bf16 or fp16, got '%s'", v);
      break;
    }
  }
  if (!model) return cli_usage_error("compile", "no model file given");
  if ((nfreeze || nshape) && !cli_is_onnx_file(model))
    return cli_usage_error("compile", "--freeze and --shape apply to ONNX models (.onnx)");
  if (!opt.output) return cli_usage_error("compile", "no output file given (-o model.so)");
  if (!opt.name) {
    name_from_path(opt.output, name, sizeof name);
    opt.name = name;
  }
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  kiln_graph *g = NULL;
  kiln_params *params = NULL;
  int status = 0;
  if (params_path && kiln_safetensors_read(ctx, params_path, &params) != KILN_OK)
    status = cli_error("%s", kiln_ctx_error(ctx));
  opt.params = params;
  /* A .kiln model is built into its graph (parameters by path, then its inputs); its
   * parameters, when given, are checked against the model before they are embedded. */
  kiln_model_file *mf = NULL;
  if (!status && cli_is_onnx_file(model)) status = load_onnx(ctx, model, nfreeze, freeze, nshape, shape, &g);
  else if (!status) status = cli_load_model(ctx, model, KILN_DTYPE_COUNT, false, &g, &mf);
  if (!status && mf && params &&
      kiln_layer_check_params(ctx, kiln_model_file_layer(mf), params) != KILN_OK)
    status = cli_error("%s: %s", params_path, kiln_ctx_error(ctx));
  if (!status && precision != KP_PREC_FP32) { /* the policy pass: the graph's casts */
    kiln_graph *pg = kp_mixed_precision(g, precision);
    if (!pg) status = cli_error("--precision %s: %s", kp_precision_name(precision),
                                kiln_ctx_error(ctx));
    else kiln_graph_destroy(g), g = pg;
  }
  size_t peak = 0;
  char embedded[512] = "";
  opt.peak_bytes = &peak;
  opt.embedded = embedded, opt.embedded_size = sizeof embedded;
  if (!status && kiln_compile_shared(g, &opt) != KILN_OK) status = cli_error("%s", kiln_ctx_error(ctx));
  if (!status) {
    printf("wrote %s%s%s (entry points %s_create, %s_run, ...)\n", opt.output,
           opt.header ? " and " : "", opt.header ? opt.header : "", opt.name, opt.name);
    if (opt.target && strcmp(opt.target, "cpu")) printf("embedded: %s\n", embedded);
    else print_peak(g, peak);
  }
  kiln_model_file_destroy(mf);
  kiln_graph_destroy(g);
  kiln_params_destroy(params);
  kiln_ctx_destroy(ctx);
  return status;
}
