/*
 * device_opt.c — `--device cpu|vulkan[:N]|cuda[:N]|hip[:N]`, shared by
 * `kiln run`, `kiln fit` and `kiln check`: the name `kiln devices` prints
 * selects a backend and a device index. `auto` is the first of CUDA, ROCm,
 * a Vulkan GPU (not lavapipe) and the CPU that this machine has
 * (krt_device_auto, runtime/device.c).
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "runtime/device.h"

int cli_parse_device(const char *cmd, const char *s, kiln_backend *backend, int *index) {
  static const struct {
    const char *name;
    kiln_backend backend;
  } kinds[] = {{"cpu", KILN_BACKEND_COMPILED},
               {"vulkan", KILN_BACKEND_VULKAN},
               {"cuda", KILN_BACKEND_CUDA},
               {"hip", KILN_BACKEND_HIP}};
  char picked[32];
  if (!strcmp(s, "auto")) {
    krt_device_auto(picked, sizeof picked);
    s = picked;
  }
  size_t len = strcspn(s, ":");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    if (strlen(kinds[i].name) != len || strncmp(s, kinds[i].name, len)) continue;
    *backend = kinds[i].backend, *index = 0;
    if (!s[len]) return 0;
    char *end;
    const char *n = s + len + 1;
    long v = strtol(n, &end, 10);
    if (i == 0 || !*n || *end || *n == '-' || *n == '+' || v > 255)
      break;
    *index = (int)v;
    return 0;
  }
  return cli_usage_error(cmd, "--device expects cpu, vulkan[:N], cuda[:N], hip[:N] or auto, got '%s' "
                         "(`kiln devices` lists this machine's devices)", s);
}
