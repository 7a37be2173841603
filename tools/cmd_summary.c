/*
 * cmd_summary.c — `kiln summary MODEL.kiln`: the model's inputs, its table
 * of layers by parameter path with their parameter counts
 * (kiln_layer_summary), and the total number of trainable parameters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void print_input(const kiln_model_input *in) {
  if (in->kind == KILN_INPUT_GRAPH) {
    printf("  %s: graph\n", in->name);
    return;
  }
  printf("  %s: %s[", in->name, kiln_dtype_name(in->dtype));
  for (size_t i = 0; i < in->rank; i++) {
    if (in->syms && in->syms[i])
      printf("%s%s", i ? ", " : "", in->syms[i]);
    else
      printf("%s%lld", i ? ", " : "", in->dims ? (long long)in->dims[i] : 0LL);
  }
  printf("]%s\n", in->kind == KILN_INPUT_MASK ? " (attention mask)" : "");
}

int cmd_summary(int argc, char **argv) {
  cli_parser p = {.cmd = "summary", .argc = argc, .argv = argv, .i = 1};
  static const cli_option opts[] = {{0}};
  const char *model = NULL, *v;
  int k;
  while ((k = cli_next(&p, opts, &v)) != CLI_END) {
    if (k == CLI_BAD) return 2;
    if (k == CLI_HELP) return cli_command_help(cli_find_command("summary"));
    if (model) return cli_usage_error("summary", "unexpected argument '%s'", v);
    model = v;
  }
  if (!model) return cli_usage_error("summary", "no model file given");

  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  kiln_model_file *m = NULL;
  char *table = NULL;
  int64_t count = 0;
  int status = cli_read_kiln(ctx, model, &m);
  if (!status && (kiln_layer_summary(ctx, kiln_model_file_layer(m), &table) ||
                  kiln_layer_count_params(ctx, kiln_model_file_layer(m), &count)))
    status = cli_error("%s", kiln_ctx_error(ctx));
  if (!status) {
    printf("inputs:\n");
    for (size_t i = 0; i < kiln_model_file_num_inputs(m); i++)
      print_input(&kiln_model_file_inputs(m)[i]);
    fputs(table, stdout);
    /* The table ends with the total; say it here if a future table does not. */
    if (!strstr(table, "total parameters:")) printf("total parameters: %lld\n", (long long)count);
  }
  free(table);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
  return status;
}
