/*
 * compile.c — the JIT path of the public API: graph in, native code out.
 *
 * kiln_compile() chains the stages of the data flow that a compiled model
 * needs: the "cpu" pass pipeline (passes/pipeline.h: the precision policy,
 * widening, attention tiling, legalization and canonicalization, in a copy
 * of the graph, as the model's options say), kcg_lower_target() (the copy
 * becomes a kcg_program of kernel-IR kernels and steps, in the compiled
 * model's own arena, with no pointer back into any graph), kcg_cpu_jit()
 * (LLVM compiles every kernel for this CPU in one module), and
 * krt_model_create() (the executor of runtime/exec/rt_exec.c bound to those
 * functions and to a thread pool). The graph can be freed as soon as this
 * returns.
 *
 * With options->device naming a GPU device, the graph is lowered as that
 * device's kiln_graph_run backend lowers it (krt_device_lower) and compiled
 * for the device once (krt_device_program, runtime/device/device.h); runs bind the
 * symbols, size the results and run there, with the same checks and
 * messages as on the CPU.
 *
 * A run converts between the public forms and the executor's: host tensors
 * are checked against the parameters' dtypes and ranks here (the executor
 * checks sizes as it binds the symbols), results are allocated once their
 * concrete shapes are known, and the executor writes straight into them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel_cache.h"
#include "codegen/llvm_cpu.h"
#include "ir/kir.h"
#include "passes/pipeline.h"
#include "runtime/device/device.h"
#include "runtime/driver/compiled.h"
#include "runtime/exec/rt.h"

struct kiln_compiled {
  kiln_ctx *ctx; /* the graph's: for calls that pass no context */
  char *name;
  kir_arena arena; /* the program, its kernels and constants */
  kcg_program *prog;
  kcg_cpu_module *code;
  kcg_cpu_fn *fns;
  krt_pool *pool;
  krt_model *model;
  char **param_names;
  krt_device *dev;            /* a device program instead of the CPU code, model and pool */
  krt_device_program *dprog;
};

KILN_API void kiln_compiled_destroy(kiln_compiled *c) {
  if (!c) return;
  krt_device_program_destroy(c->dprog);
  krt_device_close(c->dev);
  krt_model_destroy(c->model);
  krt_pool_destroy(c->pool);
  kcg_cpu_module_destroy(c->code);
  for (uint32_t i = 0; c->param_names && c->prog && i < c->prog->nparams; i++)
    free(c->param_names[i]);
  free(c->param_names);
  free(c->fns);
  free(c->name);
  kir_arena_free(&c->arena);
  free(c);
}

static kiln_status graph_error(kir_graph *g) {
  kiln_ctx *ctx = g->mod->ctx;
  char first[sizeof ctx->msg];
  snprintf(first, sizeof first, "%s", kiln_ctx_error(ctx));
  return kir_fail(ctx, g->mod->status, "graph @%s has an error: %s", g->name, first);
}

/* The run's pipeline options: the model's options and precision over the context's. */
static kiln_status pipeline_options(kiln_ctx *ctx, kir_graph *g, const kiln_compile_options *opt,
                                    kp_pipeline_options *po) {
  kp_pipeline_options_init(po, g, opt->options);
  if (opt->precision && !kp_precision_parse(opt->precision, &po->precision))
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "unknown precision '%s' (fp64, fp32, tf32, bf16 or fp16)", opt->precision);
  return KILN_OK;
}

/* Runs the cpu pipeline on `g` and lowers the result into c's arena. */
static kiln_status lower(kiln_compiled *c, kir_graph *g, const kp_pipeline_options *po) {
  kir_graph *lg;
  kiln_status s = kp_pipeline_run("cpu", g, po, &lg);
  if (s) return s;
  kcg_lower_options lo;
  kcg_lower_options_for(&po->opts, &lo);
  s = kcg_lower_target(c->ctx, lg, &c->arena, &lo, &c->prog);
  kiln_graph_destroy(lg);
  return s;
}

/* Opens the device `spec` names, lowers `g` for it and compiles the program there. */
static kiln_status compile_device(kiln_compiled *c, kir_graph *g, const char *spec,
                                  const kp_pipeline_options *po) {
  krt_device_kind kind;
  int index;
  kiln_status s = krt_device_parse(c->ctx, spec, &kind, &index);
  if (!s) s = krt_device_open(c->ctx, kind, index, &c->dev);
  if (!s) s = krt_device_lower(c->ctx, kind, g, po, &c->arena, &c->prog);
  if (!s) s = krt_device_program_create(c->ctx, c->dev, c->prog, NULL, &c->dprog);
  return s;
}

static kiln_status keep_param_names(kiln_compiled *c, const kir_graph *g) {
  c->param_names = calloc(g->nparams + 1u, sizeof *c->param_names);
  if (!c->param_names) return kir_fail(c->ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; i < g->nparams; i++) {
    const char *n = g->values[g->params[i]].name;
    if (n && !(c->param_names[i] = strdup(n))) return kir_fail(c->ctx, KILN_ERR_NOMEM, "out of memory");
  }
  if (c->dprog) krt_device_program_set_names(c->dprog, (const char *const *)c->param_names);
  else if (krt_model_set_param_names(c->model, (const char *const *)c->param_names))
    return kir_fail(c->ctx, KILN_ERR_NOMEM, "out of memory");
  return KILN_OK;
}

/*
 * Compiles the kernels a step may call (krt_kernels_needed) into c->fns; the others (a blocked
 * convolution's loop nest, the fallback of a GEMM the library always takes) get no function.
 */
static kiln_status jit_needed(kiln_ctx *ctx, kiln_compiled *c, const kiln_options *opts,
                              const kcg_cpu_options *co) {
  uint32_t n = c->prog->nkernels, m = 0;
  bool *needed = calloc(n, sizeof *needed);
  kcg_kernel **ks = calloc(n, sizeof *ks);
  kcg_cpu_fn *fns = calloc(n, sizeof *fns);
  kiln_status s = needed && ks && fns ? KILN_OK : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (!s) {
    krt_kernels_needed(c->prog, opts, needed);
    for (uint32_t k = 0; k < n; k++)
      if (needed[k]) ks[m++] = c->prog->kernels[k];
    if (m) s = kcg_cpu_jit(ctx, ks, m, co, &c->code, fns);
    for (uint32_t k = 0, i = 0; k < n && !s; k++)
      c->fns[k] = needed[k] ? fns[i++] : NULL;
  }
  free(needed);
  free(ks);
  free(fns);
  return s;
}

KILN_API kiln_status kiln_compile(kiln_graph *g, const kiln_compile_options *opt,
                                  kiln_compiled **out) {
  static const kiln_compile_options defaults;
  kiln_ctx *ctx = g->mod->ctx;
  *out = NULL;
  if (!opt) opt = &defaults;
  if (g->mod->status != KILN_OK) return graph_error(g);
  if (g->is_body)
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s is a scan body: compile the graph that "
                    "uses it", g->name);
  if ((unsigned)opt->opt_level > KILN_O3)
    return kir_fail(ctx, KILN_ERR_INVALID, "unknown optimisation level %d", (int)opt->opt_level);
  kiln_compiled *c = calloc(1, sizeof *c);
  if (!c || !(c->name = strdup(g->name))) {
    free(c);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  c->ctx = ctx;
  char spec[32]; /* "auto": the first GPU that opens, else the CPU (krt_device_auto) */
  snprintf(spec, sizeof spec, "%s", opt->device ? opt->device : "cpu");
  if (!strcmp(spec, "auto")) krt_device_auto(spec, sizeof spec);
  bool on_device = strcmp(spec, "cpu") != 0;
  kp_pipeline_options po;
  kiln_status s = pipeline_options(ctx, g, opt, &po);
  if (!s) s = on_device ? compile_device(c, g, spec, &po) : lower(c, g, &po);
  if (on_device) {
    if (!s) s = keep_param_names(c, g);
    if (s) {
      kiln_compiled_destroy(c);
      return s;
    }
    *out = c;
    return KILN_OK;
  }
  if (!s && !(c->fns = calloc(c->prog->nkernels + 1u, sizeof *c->fns)))
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (!s && c->prog->nkernels) {
    /* The public levels are kcg_opt_level's, in the same order. */
    char dir[4096];
    kcg_cpu_options co = {.cpu = opt->cpu, .features = opt->features,
                          .opt_level = (kcg_opt_level)opt->opt_level, .dump_ir = opt->dump_ir,
                          .cache_dir = kcg_cache_dir(&po.opts, dir, sizeof dir) ? dir : NULL};
    s = jit_needed(ctx, c, &po.opts, &co);
  }
  int threads = opt->num_threads ? opt->num_threads : po.opts.num_threads;
  if (!s && c->prog->nkernels && !(c->pool = krt_pool_create(threads)))
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  if (!s) s = krt_model_create(ctx, c->prog, c->fns, c->pool, &po.opts, &c->model);
  if (!s) s = keep_param_names(c, g);
  if (s) {
    kiln_compiled_destroy(c);
    return s;
  }
  *out = c;
  return KILN_OK;
}

KILN_API void kiln_compiled_device(const kiln_compiled *c, char *buf, size_t size) {
  if (!buf || !size) return;
  if (c->dprog) krt_device_spec(c->dev, buf, size);
  else snprintf(buf, size, "cpu");
}

KILN_API size_t kiln_compiled_num_inputs(const kiln_compiled *c) { return c->prog->nparams; }
KILN_API size_t kiln_compiled_num_outputs(const kiln_compiled *c) { return c->prog->nresults; }
KILN_API int kiln_compiled_num_threads(const kiln_compiled *c) {
  return krt_pool_threads(c->pool);
}
KILN_API size_t kiln_compiled_peak_bytes(const kiln_compiled *c) {
  return c->model ? krt_model_last_total(c->model) : 0; /* not measured on a device */
}
KILN_API size_t kiln_compiled_arena_bytes(const kiln_compiled *c) {
  return c->model ? krt_model_last_peak(c->model) : 0;
}

/* ---- runs ---- */

static const kir_type *param_type(const kiln_compiled *c, size_t p) {
  return &c->prog->bufs[c->prog->params[p]].type;
}

static const kir_type *result_type(const kiln_compiled *c, size_t r) {
  return &c->prog->bufs[c->prog->results[r]].type;
}

/* "f32[N, 3]" with the program's symbol names. */
static void format_type(const kiln_compiled *c, const kir_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && k < n; i++) {
    kir_dim d = t->dims[i];
    const char *sep = i ? ", " : "";
    if (KIR_DIM_IS_SYM(d)) k += (size_t)snprintf(buf + k, n - k, "%s%s", sep, c->prog->syms[KIR_DIM_SYM(d)]);
    else k += (size_t)snprintf(buf + k, n - k, "%s%lld", sep, (long long)d);
  }
  if (k < n) snprintf(buf + k, n - k, "]");
}

static void input_label(const kiln_compiled *c, size_t p, char *buf, size_t n) {
  if (c->param_names[p]) snprintf(buf, n, "%zu (%%%s)", p, c->param_names[p]);
  else snprintf(buf, n, "%zu", p);
}

static kiln_status check_counts(const kiln_compiled *c, kiln_ctx *ctx, size_t n_in,
                                kiln_tensor *const *inputs, size_t n_out, kiln_tensor **outputs) {
  const kcg_program *p = c->prog;
  if ((n_in && !inputs) || (n_out && !outputs))
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s: NULL input or output array", c->name);
  if (n_in != p->nparams)
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s takes %u input%s, got %zu", c->name,
                    p->nparams, p->nparams == 1 ? "" : "s", n_in);
  if (n_out != p->nresults)
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s has %u result%s, room was given for %zu",
                    c->name, p->nresults, p->nresults == 1 ? "" : "s", n_out);
  return KILN_OK;
}

static kiln_status check_tensors(const kiln_compiled *c, kiln_ctx *ctx,
                                 kiln_tensor *const *inputs) {
  for (size_t p = 0; p < c->prog->nparams; p++) {
    const kir_type *want = param_type(c, p);
    const kiln_tensor *t = inputs[p];
    char label[160], ty[160];
    input_label(c, p, label, sizeof label);
    if (!t) return kir_fail(ctx, KILN_ERR_INVALID, "input %s is NULL", label);
    if (t->dtype == want->dtype && t->rank == want->rank) continue;
    format_type(c, want, ty, sizeof ty);
    return kir_fail(ctx, KILN_ERR_TYPE, "input %s: expected %s, got a %s tensor of rank %u",
                    label, ty, kiln_dtype_name(t->dtype), (unsigned)t->rank);
  }
  return KILN_OK;
}

/* Allocates the results at the workspace's shapes, runs, and frees them again on failure. */
static kiln_status run_tensors(kiln_compiled *c, kiln_ctx *ctx, krt_workspace *w,
                               kiln_tensor *const *inputs, kiln_tensor **outputs,
                               const krt_run_hook *hook) {
  const kcg_program *p = c->prog;
  const void **in = calloc(p->nparams + 1u, sizeof *in);
  void **out = calloc(p->nresults + 1u, sizeof *out);
  kiln_status s = in && out ? KILN_OK : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; !s && i < p->nparams; i++) in[i] = inputs[i]->data;
  for (uint32_t r = 0; !s && r < p->nresults; r++) {
    const kir_type *t = result_type(c, r);
    int64_t dims[KIR_MAX_RANK];
    krt_result_dims(w, r, dims);
    s = kiln_tensor_create(ctx, t->dtype, t->rank, dims, &outputs[r]);
    if (!s) out[r] = outputs[r]->data;
  }
  if (!s && hook && hook->begin) hook->begin(hook->arg, out);
  if (!s) s = krt_execute_hooked(w, ctx, in, out, hook ? hook->after_step : NULL,
                                 hook ? hook->arg : NULL);
  if (s)
    for (uint32_t r = 0; r < p->nresults; r++) {
      kiln_tensor_destroy(outputs[r]);
      outputs[r] = NULL;
    }
  free(in);
  free(out);
  return s;
}

/* kiln_compiled_run on the device: results sized by the bound symbols, then one run. */
static kiln_status run_device(kiln_compiled *c, kiln_ctx *ctx, const int64_t *const *dims,
                              kiln_tensor *const *inputs, kiln_tensor **outputs) {
  const kcg_program *p = c->prog;
  const void **in = calloc(p->nparams + 1u, sizeof *in);
  void **out = calloc(p->nresults + 1u, sizeof *out);
  kiln_status s = in && out ? KILN_OK : kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (uint32_t i = 0; !s && i < p->nparams; i++) in[i] = inputs[i]->data;
  for (uint32_t r = 0; !s && r < p->nresults; r++) {
    const kir_type *t = result_type(c, r);
    int64_t rdims[KIR_MAX_RANK];
    s = krt_device_program_result_dims(c->dprog, ctx, dims, r, rdims);
    if (!s) s = kiln_tensor_create(ctx, t->dtype, t->rank, rdims, &outputs[r]);
    if (!s) out[r] = outputs[r]->data;
  }
  if (!s) s = krt_device_program_run(c->dprog, ctx, dims, in, out, NULL);
  if (s)
    for (uint32_t r = 0; r < p->nresults; r++) {
      kiln_tensor_destroy(outputs[r]);
      outputs[r] = NULL;
    }
  free(in);
  free(out);
  return s;
}

bool krt_compiled_result_ready(const kiln_compiled *c, uint32_t *ready, uint32_t *nsteps) {
  if (c->dprog || !c->model) return false;
  krt_model_result_ready(c->model, ready);
  *nsteps = krt_model_num_steps(c->model);
  return true;
}

static kiln_status run_compiled(kiln_compiled *c, kiln_ctx *ctx, size_t n_in,
                                kiln_tensor *const *inputs, size_t n_out, kiln_tensor **outputs,
                                kiln_run_info *info, const krt_run_hook *hook) {
  if (!ctx) ctx = c->ctx;
  for (size_t i = 0; outputs && i < n_out; i++) outputs[i] = NULL;
  kiln_status s = check_counts(c, ctx, n_in, inputs, n_out, outputs);
  if (!s) s = check_tensors(c, ctx, inputs);
  if (s) return s;
  const int64_t **dims = calloc(n_in + 1, sizeof *dims);
  if (!dims) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < n_in; i++) dims[i] = inputs[i]->dims;
  if (c->dprog) {
    s = run_device(c, ctx, dims, inputs, outputs);
    free(dims);
    if (!s && info) {
      info->backend = KILN_BACKEND_COMPILED;
      info->reason[0] = 0;
      krt_device_spec(c->dev, info->device, sizeof info->device);
    }
    return s;
  }
  krt_workspace *w;
  s = krt_prepare(c->model, ctx, dims, &w);
  free(dims);
  if (s) return s;
  s = run_tensors(c, ctx, w, inputs, outputs, hook);
  krt_release(w);
  if (!s && info) {
    info->backend = KILN_BACKEND_COMPILED;
    info->reason[0] = 0;
    snprintf(info->device, sizeof info->device, "cpu");
  }
  return s;
}

KILN_API kiln_status kiln_compiled_run(kiln_compiled *c, kiln_ctx *ctx, size_t n_in,
                                       kiln_tensor *const *inputs, size_t n_out,
                                       kiln_tensor **outputs, kiln_run_info *info) {
  return run_compiled(c, ctx, n_in, inputs, n_out, outputs, info, NULL);
}

kiln_status krt_compiled_run_hooked(kiln_compiled *c, kiln_ctx *ctx, size_t n_in,
                                    kiln_tensor *const *inputs, size_t n_out,
                                    kiln_tensor **outputs, const krt_run_hook *hook) {
  return run_compiled(c, ctx, n_in, inputs, n_out, outputs, NULL, hook);
}

KILN_API kiln_status kiln_compiled_output_shape(kiln_compiled *c, kiln_ctx *ctx,
                                                const int64_t *const *in_dims, size_t r,
                                                kiln_dtype *dtype, size_t *rank, int64_t *dims) {
  if (!ctx) ctx = c->ctx;
  if (r >= c->prog->nresults)
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s has %u result%s, asked for result %zu",
                    c->name, c->prog->nresults, c->prog->nresults == 1 ? "" : "s", r);
  if (c->dprog) {
    if (c->prog->nparams && !in_dims)
      return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s: NULL input dims", c->name);
    kiln_status s = krt_device_program_result_dims(c->dprog, ctx, in_dims, (uint32_t)r, dims);
    if (s) return s;
    const kir_type *t = result_type(c, r);
    *dtype = t->dtype;
    *rank = t->rank;
    return KILN_OK;
  }
  krt_workspace *w;
  kiln_status s = krt_prepare(c->model, ctx, in_dims, &w);
  if (s) return s;
  const kir_type *t = result_type(c, r);
  *dtype = t->dtype;
  *rank = t->rank;
  krt_result_dims(w, (uint32_t)r, dims);
  krt_release(w);
  return KILN_OK;
}

KILN_API kiln_status kiln_compiled_run_raw(kiln_compiled *c, kiln_ctx *ctx,
                                           const void *const *in, const int64_t *const *in_dims,
                                           void *const *out) {
  if (!ctx) ctx = c->ctx;
  if ((c->prog->nparams && (!in || !in_dims)) || (c->prog->nresults && !out))
    return kir_fail(ctx, KILN_ERR_INVALID, "graph @%s: NULL input or output array", c->name);
  if (c->dprog) return krt_device_program_run(c->dprog, ctx, in_dims, in, out, NULL);
  return krt_run(c->model, ctx, in_dims, in, out);
}
