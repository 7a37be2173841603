/*
 * values.c — printing a tensor's values for `kiln run --print`.
 *
 * The values are written as a nested list in row-major order, like NumPy's
 * tolist(): `[[1.5, -2.0], [0.25, 3.0]]`, with each innermost row on its own
 * line. Floats are printed in the shortest form that reads back to the same
 * value in the tensor's own dtype (so an f32 0.1 prints as 0.1, not
 * 0.100000001490116), always with a '.' or an exponent; ints as integers;
 * bools as true/false.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/*
 * The shortest digits that the dtype stores as the same value, laid out as
 * Python's repr() does: positional for exponents in [-4, 16), else d.ddde+XX.
 */
static void format_float(kiln_tensor *scratch, double v, char *buf, size_t n) {
  if (isnan(v) || isinf(v)) {
    snprintf(buf, n, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
    return;
  }
  char e[48];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(e, sizeof e, "%.*e", prec - 1, v);
    kiln_tensor_set(scratch, 0, strtod(e, NULL));
    if (kiln_tensor_get(scratch, 0) == v) break;
  }
  char *x = strchr(e, 'e');
  int exp = atoi(x + 1);
  if (exp < -4 || exp >= 16) {
    snprintf(buf, n, "%s", e);
    return;
  }
  char digits[24];
  size_t nd = 0;
  for (const char *p = e; p < x; p++)
    if (*p >= '0' && *p <= '9') digits[nd++] = *p;
  size_t k = (size_t)snprintf(buf, n, "%s", signbit(v) ? "-" : "");
  if (exp < 0) {
    k += (size_t)snprintf(buf + k, n - k, "0.%.*s%.*s", -exp - 1, "0000", (int)nd, digits);
    return;
  }
  for (size_t i = 0; i <= (size_t)exp; i++) buf[k++] = i < nd ? digits[i] : '0';
  buf[k++] = '.';
  if (nd > (size_t)exp + 1) snprintf(buf + k, n - k, "%.*s", (int)(nd - exp - 1), digits + exp + 1);
  else snprintf(buf + k, n - k, "0");
}

static void format_elem(const kiln_tensor *t, kiln_tensor *scratch, size_t i, char *buf,
                        size_t n) {
  double v = kiln_tensor_get(t, i);
  switch (kiln_tensor_dtype(t)) {
  case KILN_BOOL: snprintf(buf, n, "%s", v != 0 ? "true" : "false"); break;
  case KILN_I64: {
    int64_t x;
    memcpy(&x, (const char *)kiln_tensor_cdata(t) + i * 8, 8); /* exact beyond 2^53 */
    snprintf(buf, n, "%lld", (long long)x);
    break;
  }
  case KILN_I32:
  case KILN_I8:
  case KILN_U8: snprintf(buf, n, "%lld", (long long)v); break;
  default: format_float(scratch, v, buf, n); break;
  }
}

/* Axis `axis` of the block starting at element `start`; `stride` elements per index. */
static void print_block(FILE *f, const kiln_tensor *t, kiln_tensor *scratch, size_t axis,
                        size_t start) {
  size_t rank = kiln_tensor_rank(t);
  if (axis == rank) {
    char buf[64];
    format_elem(t, scratch, start, buf, sizeof buf);
    fputs(buf, f);
    return;
  }
  size_t stride = 1;
  for (size_t a = axis + 1; a < rank; a++) stride *= (size_t)kiln_tensor_dim(t, a);
  size_t dim = (size_t)kiln_tensor_dim(t, axis);
  fputc('[', f);
  for (size_t i = 0; i < dim; i++) {
    if (i && axis + 1 == rank) fputs(", ", f);
    else if (i) fprintf(f, ",\n%*s", (int)axis + 1, "");
    print_block(f, t, scratch, axis + 1, start + i * stride);
  }
  fputc(']', f);
}

void cli_print_values(FILE *f, const kiln_tensor *t) {
  kiln_tensor *scratch = NULL;
  if (kiln_tensor_create(NULL, kiln_tensor_dtype(t), 0, NULL, &scratch) != KILN_OK) {
    fputs("(out of memory)\n", f);
    return;
  }
  print_block(f, t, scratch, 0, 0);
  fputc('\n', f);
  kiln_tensor_destroy(scratch);
}
