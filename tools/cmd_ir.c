/*
 * cmd_ir.c — `kiln ir MODEL`: parse a model and print its canonical IR.
 *
 * The round trip through the parser and the printer is also the quickest way
 * to see what Kiln made of a file: inferred result types, defaults dropped,
 * values in order. A .kiln model file is built into its graph first
 * (parameters by path, then the inputs), in the dtype of its float inputs
 * or --dtype, with dropout and sampling when --train is given.
 * `--pipeline NAME` prints the graph after pass pipeline NAME
 * (passes/pipeline.h: cpu, vulkan, cuda, hip, training, precision);
 * `--print-after-all` prints it after each pass of that pipeline (cpu when
 * none is named) and the fusion groups (passes/fusion.c). `--passes a,b`
 * runs a list of the registry's passes instead of a named pipeline ("fusion"
 * last prints the groups), the way `mlir-opt --pass-pipeline` does, so a
 * pass has FileCheck tests of its own (tests/passes/). `--split-input-file`
 * treats each part of a .kir file between `// -----` lines as a model of its
 * own and prints the results separated the same way; errors keep the file's
 * line numbers. `--emit mlir`
 * prints the legalized graph as an MLIR module instead (codegen/mlir_emit.c);
 * `--emit steps` the steps of the CPU program kiln_compile would lower it to
 * (codegen/program_print.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "codegen/mlir_emit.h"
#include "codegen/program.h"
#include "passes/mixed_precision.h"
#include "passes/pipeline.h"

/* g through kiln_compile's pipeline and lowered (runtime/driver/compile.c); its steps on stdout. */
static kiln_status print_steps(kiln_graph *g, const kp_pipeline_options *po) {
  kiln_ctx *ctx = kiln_graph_ctx(g);
  kir_graph *lg;
  kiln_status s = kp_pipeline_run("cpu", g, po, &lg);
  if (s) return s;
  kir_arena arena = {0};
  kcg_program *p = NULL;
  kcg_lower_options lo;
  kcg_lower_options_for(&po->opts, &lo);
  s = kcg_lower_target(ctx, lg, &arena, &lo, &p);
  if (s == KILN_OK) kcg_program_print(p, stdout);
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  return s;
}

/* g after pipeline `name` (training: the gradients of result 0 for every float parameter). */
static kiln_status print_pipeline(kiln_graph *g, const char *name, kp_pipeline_options *po,
                                  bool after_all) {
  bool *wrt = NULL;
  if (!strcmp(name, "training")) {
    wrt = calloc(g->nparams + 1, sizeof *wrt);
    if (!wrt) return kir_fail(kiln_graph_ctx(g), KILN_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < g->nparams; i++)
      wrt[i] = kir_dtype_is_float(g->values[g->params[i]].type.dtype);
    po->wrt = wrt;
  }
  kiln_status s;
  if (after_all) {
    s = kp_print_after_all(name, g, po, stdout);
  } else {
    s = kp_print_result(name, g, po, stdout);
  }
  free(wrt);
  po->wrt = NULL;
  return s;
}

typedef struct ir_job {
  kp_precision precision;
  const char *pipeline;
  bool after_all, mlir, steps;
  uint32_t elide; /* list attributes of more elements printed elided (0: all) */
} ir_job;

/* One graph: the precision policy, then what the flags ask for; a message on failure. */
static int run_job(kiln_ctx *ctx, kiln_graph *g, const ir_job *j) {
  int status = 0;
  if (j->precision != KP_PREC_FP32) { /* where the policy pass puts its casts */
    kiln_graph *pg = kp_mixed_precision(g, j->precision);
    if (!pg)
      return cli_error("--precision %s: %s", kp_precision_name(j->precision), kiln_ctx_error(ctx));
    kiln_graph_destroy(g), g = pg;
  }
  kp_pipeline_options po;
  kp_pipeline_options_init(&po, g, NULL);
  po.print_elide = j->elide;
  kiln_status s = j->mlir                         ? kcg_emit_mlir(g, stdout)
                  : j->steps                      ? print_steps(g, &po)
                  : j->after_all || j->pipeline ? print_pipeline(g, j->pipeline ? j->pipeline : "cpu",
                                                                 &po, j->after_all)
                                                  : kir_graph_print(g, j->elide, stdout);
  if (s != KILN_OK) status = cli_error("%s", kiln_ctx_error(ctx));
  kiln_graph_destroy(g);
  return status;
}

/*
 * --split-input-file: each part between `// -----` lines parsed on its own,
 * preceded by as many newlines as there are lines before it, so messages
 * give the line of the whole file. Every part runs; the status is the
 * first failure's.
 */
static int run_split(kiln_ctx *ctx, const char *path, const ir_job *j) {
  char *text;
  size_t n;
  if (kir_read_file(ctx, path, &text, &n) != KILN_OK) return cli_error("%s", kiln_ctx_error(ctx));
  int status = 0;
  size_t start = 0, line = 0, start_line = 0; /* the part's first byte and its line */
  for (size_t i = 0;; i++) {
    bool eol = i == n || text[i] == '\n';
    bool sep = (i == 0 || text[i - 1] == '\n') && !strncmp(text + i, "// -----", 8);
    if (sep || i == n) {
      char *part = malloc(start_line + (i - start) + 1);
      if (!part) {
        status = cli_error("out of memory");
        break;
      }
      memset(part, '\n', start_line);
      memcpy(part + start_line, text + start, i - start);
      kiln_graph *g = NULL;
      if (start) printf("// -----\n");
      fflush(stdout);
      int st = kiln_graph_parse(ctx, part, start_line + (i - start), path, &g) != KILN_OK
                   ? cli_error("%s", kiln_ctx_error(ctx))
                   : run_job(ctx, g, j);
      fflush(stdout);
      free(part);
      if (st && !status) status = st;
      if (i == n) break;
      while (i < n && text[i] != '\n') i++; /* the separator line */
      if (i == n) break;
      start = i + 1, start_line = ++line;
      continue;
    }
    if (eol && i < n) line++;
  }
  free(text);
  return status;
}

int cmd_ir(int argc, char **argv) {
  cli_parser p = {.cmd = "ir", .argc = argc, .argv = argv, .i = 1};
  enum { O_DTYPE, O_TRAIN, O_AFTER_ALL, O_PRECISION, O_EMIT, O_PIPELINE, O_PASSES, O_SPLIT,
         O_FULL };
  static const cli_option opts[] = {[O_DTYPE] = {"--dtype", NULL, true},
                                    [O_TRAIN] = {"--train", NULL, false},
                                    [O_AFTER_ALL] = {"--print-after-all", NULL, false},
                                    [O_PRECISION] = {"--precision", NULL, true},
                                    [O_EMIT] = {"--emit", NULL, true},
                                    [O_PIPELINE] = {"--pipeline", NULL, true},
                                    [O_PASSES] = {"--passes", NULL, true},
                                    [O_SPLIT] = {"--split-input-file", NULL, false},
                                    [O_FULL] = {"--full-constants", NULL, false},
                                    {0}};
  kp_precision precision = KP_PREC_FP32;
  const char *model = NULL, *pipeline = NULL, *v;
  kiln_dtype dtype = KILN_DTYPE_COUNT;
  bool train = false, kiln_only = false, after_all = false, mlir = false, steps = false;
  bool split = false, passes = false, full = false;
  int k;
  while ((k = cli_next(&p, opts, &v)) != CLI_END) {
    switch (k) {
    case CLI_BAD: return 2;
    case CLI_HELP: return cli_command_help(cli_find_command("ir"));
    case O_DTYPE:
      if (cli_parse_float_dtype("ir", v, &dtype)) return 2;
      kiln_only = true;
      break;
    case O_TRAIN: train = kiln_only = true; break;
    case O_AFTER_ALL: after_all = true; break;
    case O_PRECISION:
      if (!kp_precision_parse(v, &precision))
        return cli_usage_error("ir", "--precision expects fp64, fp32, tf32, bf16 or fp16, got '%s'",
                               v);
      break;
    case O_EMIT:
      if (strcmp(v, "mlir") && strcmp(v, "kir") && strcmp(v, "steps"))
        return cli_usage_error("ir", "--emit expects kir, mlir or steps, got '%s'", v);
      mlir = !strcmp(v, "mlir");
      steps = !strcmp(v, "steps");
      break;
    case O_PIPELINE:
      if (!kp_pipeline_exists(v) || strchr(v, ','))
        return cli_usage_error("ir", "--pipeline expects cpu, vulkan, cuda, hip, training or "
                               "precision, got '%s'", v);
      if (pipeline) return cli_usage_error("ir", "--pipeline and --passes do not go together");
      pipeline = v;
      break;
    case O_PASSES:
      if (!kp_pipeline_exists(v) || kp_pipeline_is_named(v)) {
        char names[256] = "";
        for (const char *const *n = kp_pass_names(); *n; n++)
          snprintf(names + strlen(names), sizeof names - strlen(names), "%s, ", *n);
        return cli_usage_error("ir", "--passes expects a comma-separated list of %sending "
                               "optionally in fusion; got '%s'", names, v);
      }
      if (pipeline) return cli_usage_error("ir", "--pipeline and --passes do not go together");
      pipeline = v, passes = true;
      break;
    case O_SPLIT: split = true; break;
    case O_FULL: full = true; break;
    case CLI_ARG:
      if (model) return cli_usage_error("ir", "unexpected argument '%s'", v);
      model = v;
      break;
    }
  }
  if (!model) return cli_usage_error("ir", "no model file given");
  if ((mlir || steps) && (after_all || pipeline))
    return cli_usage_error("ir", "--emit %s and --%s do not go together", mlir ? "mlir" : "steps",
                           after_all ? "print-after-all" : passes ? "passes" : "pipeline");
  if (split && cli_is_kiln_file(model))
    return cli_usage_error("ir", "--split-input-file applies to .kir files only");
  if (kiln_only && !cli_is_kiln_file(model))
    return cli_usage_error("ir", "--dtype and --train apply to .kiln model files only");

  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  /* A model's weights as text are its size many times over (resnet50: gigabytes), as in MLIR,
     whose printer elides resource blobs; `--full-constants` for text that parses back. */
  ir_job job = {precision, pipeline, after_all, mlir, steps, full ? 0 : 64};
  int status;
  if (split) {
    status = run_split(ctx, model, &job);
  } else {
    kiln_graph *g = NULL;
    status = cli_load_model(ctx, model, dtype, train, &g, NULL);
    if (!status) status = run_job(ctx, g, &job);
  }
  kiln_ctx_destroy(ctx);
  return status;
}
