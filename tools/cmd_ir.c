/*
 * cmd_ir.c — `kiln ir MODEL`: parse a model and print its canonical IR.
 *
 * The round trip through the parser and the printer is also the quickest way
 * to see what Kiln made of a file: inferred result types, defaults dropped,
 * values in order. A .kiln model file is built into its graph first
 * (parameters by path, then the inputs), in the dtype of its float inputs
 * or --dtype, with dropout and sampling when --train is given. Later issues
 * add `--pipeline NAME` and `--print-after-all` here, and .onnx models.
 */
#include <stdio.h>

#include "cli.h"

int cmd_ir(int argc, char **argv) {
  cli_parser p = {.cmd = "ir", .argc = argc, .argv = argv, .i = 1};
  enum { O_DTYPE, O_TRAIN };
  static const cli_option opts[] = {
      [O_DTYPE] = {"--dtype", NULL, true}, [O_TRAIN] = {"--train", NULL, false}, {0}};
  const char *model = NULL, *v;
  kiln_dtype dtype = KILN_DTYPE_COUNT;
  bool train = false, kiln_only = false;
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
    case CLI_ARG:
      if (model) return cli_usage_error("ir", "unexpected argument '%s'", v);
      model = v;
      break;
    }
  }
  if (!model) return cli_usage_error("ir", "no model file given");
  if (kiln_only && !cli_is_kiln_file(model))
    return cli_usage_error("ir", "--dtype and --train apply to .kiln model files only");

  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  kiln_graph *g = NULL;
  int status = cli_load_model(ctx, model, dtype, train, &g, NULL);
  if (!status && kiln_graph_print(g, stdout) != KILN_OK)
    status = cli_error("%s", kiln_ctx_error(ctx));
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return status;
}
