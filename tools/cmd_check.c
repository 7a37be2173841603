/*
 * cmd_check.c — `kiln check [--device cpu|vulkan|cuda|hip] [--tol T]`: every layer type run
 * compiled and on the reference interpreter in float64, outputs and
 * gradients compared (kiln_check_layers, train/check.c). Exit 0 when the
 * largest difference is within the tolerance (default 1e-12), else 1.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "runtime/cuda.h"
#include "runtime/hip.h"

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
  kiln_backend backend = KILN_BACKEND_COMPILED;
  int index = 0;
  if (cli_parse_device("check", device, &backend, &index)) return 2;
  if (index != 0)
    return cli_error("`kiln check` runs on device 0 of a kind; '%s' names device %d", device,
                     index);
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  if (backend == KILN_BACKEND_CUDA || backend == KILN_BACKEND_HIP) { /* one line, not one per layer */
    kcu_device *cd = NULL;
    khip_device *hd = NULL;
    kiln_status s = backend == KILN_BACKEND_CUDA ? kcu_device_open(ctx, 0, &cd)
                                                 : khip_device_open(ctx, 0, &hd);
    kcu_device_close(cd);
    khip_device_close(hd);
    if (s != KILN_OK) {
      int r = cli_error("%s", kiln_ctx_error(ctx));
      kiln_ctx_destroy(ctx);
      return r;
    }
  }
  printf("kiln check: every layer type, compiled (%s) against the float64 reference\n", device);
  double worst = 0;
  kiln_status s = kiln_check_layers(ctx, backend, stdout, tol, &worst);
  kiln_ctx_destroy(ctx);
  return s == KILN_OK ? 0 : 1;
}
