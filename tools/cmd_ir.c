/*
 * cmd_ir.c — `kiln ir MODEL.kir`: parse a model and print its canonical IR.
 *
 * The round trip through the parser and the printer is also the quickest way
 * to see what Kiln made of a file: inferred result types, defaults dropped,
 * values in order. Later issues add `--pipeline NAME` and
 * `--print-after-all` here, and .kiln and .onnx models.
 */
#include <stdio.h>

#include "cli.h"

int cmd_ir(int argc, char **argv) {
  cli_parser p = {.cmd = "ir", .argc = argc, .argv = argv, .i = 1};
  static const cli_option opts[] = {{0}};
  const char *model = NULL, *v;
  int k;
  while ((k = cli_next(&p, opts, &v)) != CLI_END) {
    if (k == CLI_BAD) return 2;
    if (k == CLI_HELP) return cli_command_help(cli_find_command("ir"));
    if (model) return cli_usage_error("ir", "unexpected argument '%s'", v);
    model = v;
  }
  if (!model) return cli_usage_error("ir", "no model file given");

  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  kiln_graph *g = NULL;
  int status = 0;
  if (kiln_graph_parse_file(ctx, model, &g) != KILN_OK || kiln_graph_print(g, stdout) != KILN_OK)
    status = cli_error("%s", kiln_ctx_error(ctx));
  kiln_graph_destroy(g);
  kiln_ctx_destroy(ctx);
  return status;
}
