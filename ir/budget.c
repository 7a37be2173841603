/*
 * budget.c — the memory budget (budget.h): how many bytes one request may
 * take, and the words that refuse one that cannot fit.
 *
 * The default is the machine's physical memory (sysconf), read once: a
 * request larger than that cannot be served without swapping the machine
 * to a standstill, so it is refused before calloc is asked (which on Linux
 * may say yes to terabytes it cannot back). The user sets another through
 * kiln_options.memory_limit or KILN_MEMORY_LIMIT (ir/options.c reads it).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "budget.h"
#include "options.h"

/* The machine's physical memory in bytes, read once (UINT64_MAX where sysconf cannot say). */
static uint64_t physical_memory(void) {
  static _Atomic uint64_t cached;
  uint64_t b = cached;
  if (b) return b;
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  b = pages > 0 && size > 0 && (uint64_t)pages <= UINT64_MAX / (uint64_t)size
          ? (uint64_t)pages * (uint64_t)size
          : UINT64_MAX;
  cached = b;
  return b;
}

kir_budget kir_memory_budget(const kiln_options *ctx_opts, const kiln_options *call_opts) {
  int64_t env = kir_env_memory_limit();
  int64_t v = call_opts && call_opts->memory_limit ? call_opts->memory_limit
              : ctx_opts && ctx_opts->memory_limit ? ctx_opts->memory_limit
                                                   : env;
  /* Options resolved from the environment carry its value: name the variable then. */
  const char *source = v == env ? "KILN_MEMORY_LIMIT" : "kiln_options.memory_limit";
  if (v < 0) return (kir_budget){UINT64_MAX, source};
  if (v > 0) return (kir_budget){(uint64_t)v, source};
  return (kir_budget){physical_memory(), "the machine's physical memory; KILN_MEMORY_LIMIT or "
                                         "kiln_options.memory_limit sets another"};
}

bool kir_budget_fits(const kir_budget *b, uint64_t bytes, char *why, size_t n) {
  if (bytes <= b->bytes) return true;
  if (bytes == UINT64_MAX)
    snprintf(why, n, "more than 2^64 bytes, more than the memory budget of %llu bytes (%s)",
             (unsigned long long)b->bytes, b->source);
  else
    snprintf(why, n, "%llu bytes, more than the memory budget of %llu bytes (%s)",
             (unsigned long long)bytes, (unsigned long long)b->bytes, b->source);
  return false;
}

uint64_t kir_shape_bytes(size_t esize, int rank, const int64_t *dims) {
  uint64_t n = esize;
  bool over = false;
  for (int i = 0; i < rank; i++) {
    if (dims[i] <= 0) return 0;
    over |= __builtin_mul_overflow(n, (uint64_t)dims[i], &n);
  }
  return over ? UINT64_MAX : n;
}

void kir_format_shape(kiln_dtype t, int rank, const int64_t *dims, char *buf, size_t n) {
  static const char *const names[KILN_DTYPE_COUNT] = {
      [KILN_F64] = "f64",   [KILN_F32] = "f32", [KILN_F16] = "f16",
      [KILN_BF16] = "bf16", [KILN_I64] = "i64", [KILN_I32] = "i32",
      [KILN_I8] = "i8",     [KILN_U8] = "u8",   [KILN_BOOL] = "bool",
      /* kiln_dtype_name's, which the AOT runtime does not link */
      [KILN_F8E4M3FN] = "f8e4m3fn", [KILN_F8E4M3FNUZ] = "f8e4m3fnuz", [KILN_F8E5M2] = "f8e5m2",
      [KILN_F8E5M2FNUZ] = "f8e5m2fnuz", [KILN_F8E8M0] = "f8e8m0", [KILN_F4E2M1] = "f4e2m1",
      [KILN_I4] = "i4", [KILN_U4] = "u4", [KILN_I2] = "i2", [KILN_U2] = "u2",
      [KILN_I16] = "i16", [KILN_U16] = "u16", [KILN_U32] = "u32"};
  size_t at = (size_t)snprintf(buf, n, "%s[", (unsigned)t < KILN_DTYPE_COUNT ? names[t] : "?");
  for (int i = 0; i < rank && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)dims[i]);
  if (at < n) snprintf(buf + at, n - at, "]");
}
