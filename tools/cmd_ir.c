/*
 * cmd_ir.c — `kiln ir MODEL`: parse a model and print its canonical IR.
 *
 * The round trip through the parser and the printer is also the quickest way
 * to see what Kiln made of a file: inferred result types, defaults dropped,
 * values in order. A .kiln model file is built into its graph first
 * (parameters by path, then the inputs), in the dtype of its float inputs
 * or --dtype, with dropout and sampling when --train is given.
 * `--print-after-all` prints the graph after each pass of the compiled
 * pipeline (legalize) and the fusion groups (passes/fusion.c). `--emit mlir`
 * prints the legalized graph as an MLIR module instead (codegen/mlir_emit.c);
 * `--emit steps` the steps of the CPU program kiln_compile would lower it to
 * (codegen/program_print.c).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "codegen/mlir_emit.h"
#include "codegen/program.h"
#include "passes/canonicalize.h"
#include "passes/fusion.h"
#include "passes/mixed_precision.h"

/* g through kiln_compile's passes (runtime/compile.c) and lowered; its steps on stdout. */
static kiln_status print_steps(kiln_graph *g) {
  kiln_ctx *ctx = kiln_graph_ctx(g);
  kir_graph *wg = kp_widen_half(g);
  kir_graph *tg = !wg ? NULL : kp_attention_tiling_enabled() ? kp_attention_tiling(wg) : wg;
  kir_graph *lg = tg ? kp_legalize(tg) : NULL;
  if (tg != wg) kiln_graph_destroy(tg);
  kiln_graph_destroy(wg);
  if (lg && kp_canonicalize_enabled()) {
    kir_graph *cg = kp_canonicalize(lg);
    kiln_graph_destroy(lg);
    lg = cg;
  }
  if (!lg) return KILN_ERR_INVALID; /* the message is on the context */
  kir_arena arena = {0};
  kcg_program *p = NULL;
  kiln_status s = kcg_lower(ctx, lg, &arena, &p);
  if (s == KILN_OK) kcg_program_print(p, stdout);
  kir_arena_free(&arena);
  kiln_graph_destroy(lg);
  return s;
}

int cmd_ir(int argc, char **argv) {
  cli_parser p = {.cmd = "ir", .argc = argc, .argv = argv, .i = 1};
  enum { O_DTYPE, O_TRAIN, O_AFTER_ALL, O_PRECISION, O_EMIT };
  static const cli_option opts[] = {[O_DTYPE] = {"--dtype", NULL, true},
                                    [O_TRAIN] = {"--train", NULL, false},
                                    [O_AFTER_ALL] = {"--print-after-all", NULL, false},
                                    [O_PRECISION] = {"--precision", NULL, true},
                                    [O_EMIT] = {"--emit", NULL, true},
                                    {0}};
  kp_precision precision = KP_PREC_FP32;
  const char *model = NULL, *v;
  kiln_dtype dtype = KILN_DTYPE_COUNT;
  bool train = false, kiln_only = false, after_all = false, mlir = false, steps = false;
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
    case CLI_ARG:
      if (model) return cli_usage_error("ir", "unexpected argument '%s'", v);
      model = v;
      break;
    }
  }
  if (!model) return cli_usage_error("ir", "no model file given");
  if ((mlir || steps) && after_all)
    return cli_usage_error("ir", "--emit %s and --print-after-all do not go together",
                           mlir ? "mlir" : "steps");
  if (kiln_only && !cli_is_kiln_file(model))
    return cli_usage_error("ir", "--dtype and --train apply to .kiln model files only");

  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  kiln_graph *g = NULL;
  int status = cli_load_model(ctx, model, dtype, train, &g, NULL);
  if (!status && precision != KP_PREC_FP32) { /* where the policy pass puts its casts */
    kiln_graph *pg = kp_mixed_precision(g, precision);
    if (!pg) status = cli_error("--precision %s: %s", kp_precision_name(precision),
                                kiln_ctx_error(ctx));
    else kiln_graph_destroy(g), g = pg;
  }
  if (!status) {
    kiln_status s = mlir        ? kcg_emit_mlir(g, stdout)
                    : steps     ? print_steps(g)
                    : after_all ? kp_print_after_all(g, stdout)
                                : kiln_graph_print(g, stdout);
    if (s != KILN_OK) status = cli_error("%s", kiln_ctx_error(ctx));
  }
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return status;
}
