/*
 * cmd_devices.c — `kiln devices`: what this machine offers to run models on, one line per
 * device: name (what `--device` takes), kind, detail (kiln_devices_describe,
 * runtime/driver/devices.c, says what each column holds). A kind with no device gets one line
 * saying why ("cuda: no CUDA device (libcuda.so.1 not found)"), which is not an error: exit
 * status 0.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

int cmd_devices(int argc, char **argv) {
  cli_parser p = {.cmd = "devices", .argc = argc, .argv = argv, .i = 1};
  static const cli_option opts[] = {{0}};
  const char *v;
  int k;
  while ((k = cli_next(&p, opts, &v)) != CLI_END) {
    if (k == CLI_BAD) return 2;
    if (k == CLI_HELP) return cli_command_help(cli_find_command("devices"));
    return cli_usage_error("devices", "unexpected argument '%s'", v);
  }
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = NULL;
  if (!ctx || kiln_devices_describe(ctx, &text) != KILN_OK) {
    int rc = cli_error("%s", ctx ? kiln_ctx_error(ctx) : "out of memory");
    kiln_ctx_destroy(ctx);
    return rc;
  }
  fputs(text, stdout);
  free(text);
  kiln_ctx_destroy(ctx);
  return 0;
}
