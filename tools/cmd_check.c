/*
 * cmd_check.c — `kiln check [--device D] [--tol T]`: every layer type run
 * compiled and on the reference interpreter in float64, outputs and
 * gradients compared (kiln_check_layers, train/check.c). Exit 0 when the
 * largest difference is within the tolerance (default 1e-12), else 1.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "runtime/device/device.h"

int cmd_check(int argc, char **argv) {
  enum { O_DEVICE, O_TOL };
  static const cli_option opts[] = {[O_DEVICE] = {"--device", NULL, true},
                                    [O_TOL] = {"--tol", NULL, true},
                                    {0}};
  cli_parser p = {.cmd = "check", .argc = argc, .argv = argv, .i = 1};
  const char *v, *device = "cpu";
  double tol = 1e-12;
  int k;
  while ((k = cli_next(&p, opts, &v)) != CLI_END) {
    switch (k) {
    case CLI_BAD: return 2;
    case CLI_HELP: return cli_command_help(cli_find_command("check"));
    case CLI_ARG: return cli_usage_error("check", "unexpected argument '%s'", v);
    case O_DEVICE: device = v; break;
    case O_TOL: {
      char *end;
      tol = strtod(v, &end);
      if (!*v || *end || !(tol >= 0)) return cli_usage_error("check", "--tol expects a number, got '%s'", v);
      break;
    }
    }
  }
  char spec[32];
  if (cli_parse_device("check", device, spec, sizeof spec)) return 2;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  if (strcmp(spec, "cpu")) { /* a device that does not open: one line, not one per layer */
    krt_device_kind kind;
    int index;
    krt_device *d = NULL;
    kiln_status s = krt_device_parse(ctx, spec, &kind, &index);
    if (!s) s = krt_device_open(ctx, kind, index, &d);
    krt_device_close(d);
    if (s != KILN_OK) {
      int r = cli_error("%s", kiln_ctx_error(ctx));
      kiln_ctx_destroy(ctx);
      return r;
    }
  }
  printf("kiln check: every layer type, compiled (%s) against the float64 reference\n", spec);
  double worst = 0;
  kiln_status s = kiln_check_layers(ctx, spec, stdout, tol, &worst);
  kiln_ctx_destroy(ctx);
  return s == KILN_OK ? 0 : 1;
}
