/*
 * device_opt.c — `--device cpu|vulkan[:N]|cuda[:N]|hip[:N]|auto`, shared by
 * `kiln run`, `kiln fit` and `kiln check`: the device (as `kiln devices`
 * names it), separate from the backend (`--backend auto|compiled|eager`).
 * `auto` is the first of CUDA, ROCm, a Vulkan GPU (not lavapipe) and the CPU
 * that this machine has (krt_device_auto, runtime/device/device.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "runtime/device/device.h"

int cli_parse_device(const char *cmd, const char *s, char *spec, size_t n) {
  static const char *const kinds[] = {"cpu", "vulkan", "cuda", "hip"};
  char picked[32];
  if (!strcmp(s, "auto")) {
    krt_device_auto(picked, sizeof picked);
    s = picked;
  }
  size_t len = strcspn(s, ":");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    if (strlen(kinds[i]) != len || strncmp(s, kinds[i], len)) continue;
    long v = 0;
    if (s[len]) {
      char *end;
      const char *num = s + len + 1;
      v = strtol(num, &end, 10);
      if (i == 0 || !*num || *end || *num == '-' || *num == '+' || v > 255) break;
    }
    if (i == 0) snprintf(spec, n, "cpu");
    else snprintf(spec, n, "%s:%ld", kinds[i], v);
    return 0;
  }
  return cli_usage_error(cmd, "--device expects cpu, vulkan[:N], cuda[:N], hip[:N] or auto, got '%s' "
                         "(`kiln devices` lists this machine's devices)", s);
}
