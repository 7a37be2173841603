/*
 * test_scan_nesting.c — scans whose bodies hold scans, D deep (issue 22: the
 * lowering reserved room for a body before lowering the bodies inside it, so
 * from D = 8 on it wrote past its list — wrong internal errors, heap
 * corruption under AddressSanitizer from ~110, a stack overflow at 3000).
 *
 * For D = 1, 2, 8 and KCG_MAX_SCAN_DEPTH − 1 the compiled graph must give the
 * reference interpreter's result (f32, 1e-6); at KCG_MAX_SCAN_DEPTH and 3000
 * compiling must fail cleanly, saying how deep bodies may nest.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/program.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"

static int failures;

/* @b0 adds; @bk scans @b(k-1) over a one-row reshape of its slice; @main scans @bD over 3 rows. */
static char *nested_text(int depth) {
  size_t cap = (size_t)depth * 400 + 1024, n = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  n += (size_t)snprintf(s + n, cap - n,
                        "func @b0(%%h: f32[2], %%x: f32[2]) -> (f32[2], f32[2]) {\n"
                        "  %%s = add(%%h, %%x) : f32[2]\n  return %%s, %%s\n}\n");
  for (int k = 1; k <= depth; k++)
    n += (size_t)snprintf(s + n, cap - n,
                          "func @b%d(%%h: f32[2], %%x: f32[2]) -> (f32[2], f32[2]) {\n"
                          "  %%xs = reshape(%%x) {shape = [1, 2]} : f32[1, 2]\n"
                          "  %%hT, %%ys = scan(%%h, %%xs) {body = @b%d, n_carry = 1} : f32[2], "
                          "f32[1, 2]\n  return %%hT, %%hT\n}\n",
                          k, k - 1);
  snprintf(s + n, cap - n,
           "func @main(%%h0: f32[2], %%xs: f32[3, 2]) -> (f32[2]) {\n"
           "  %%hT, %%ys = scan(%%h0, %%xs) {body = @b%d, n_carry = 1} : f32[2], f32[3, 2]\n"
           "  return %%hT\n}\n",
           depth);
  return s;
}

static void check_depth(int depth, bool compiles) {
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = nested_text(depth);
  kiln_graph *g = NULL;
  kiln_tensor *in[2] = {0}, *want = NULL, *got = NULL;
  kiln_compiled *cc = NULL;
  if (!text || kiln_graph_parse(ctx, text, strlen(text), "nested", &g) != KILN_OK) {
    printf("FAIL depth %d: parse: %s\n", depth, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  kiln_tensor_create(ctx, KILN_F32, 1, (int64_t[]){2}, &in[0]);
  kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){3, 2}, &in[1]);
  kiln_tensor_set(in[0], 0, 0.5), kiln_tensor_set(in[0], 1, -1.25);
  for (size_t i = 0; i < 6; i++) kiln_tensor_set(in[1], i, 0.1 * (double)i + 0.05);
  kiln_status s = kiln_compile(g, NULL, &cc);
  if (!compiles) {
    if (s != KILN_ERR_UNSUPPORTED || !strstr(kiln_ctx_error(ctx), "scan bodies nest more than")) {
      printf("FAIL depth %d: compile gave %d (%s), expected a refusal\n", depth, (int)s,
             kiln_ctx_error(ctx));
      failures++;
    }
    goto done;
  }
  if (s != KILN_OK || kiln_compiled_run(cc, ctx, 2, in, 1, &got, NULL) != KILN_OK ||
      kiln_graph_run(g, KILN_BACKEND_EAGER, 2, in, 1, &want, NULL) != KILN_OK) {
    printf("FAIL depth %d: %s\n", depth, kiln_ctx_error(ctx));
    failures++;
    goto done;
  }
  for (size_t i = 0; i < 2; i++)
    if (!(fabs(kiln_tensor_get(got, i) - kiln_tensor_get(want, i)) <= 1e-6)) {
      printf("FAIL depth %d: h[%zu] = %g, the interpreter gives %g\n", depth, i,
             kiln_tensor_get(got, i), kiln_tensor_get(want, i));
      failures++;
    }
done:
  kiln_compiled_destroy(cc);
  kiln_tensor_destroy(got);
  kiln_tensor_destroy(want);
  kiln_tensor_destroy(in[0]);
  kiln_tensor_destroy(in[1]);
  kiln_graph_destroy(g);
  free(text);
  kiln_ctx_destroy(ctx);
}

int main(void) {
  static const int ok[] = {1, 2, 8, KCG_MAX_SCAN_DEPTH - 1};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) check_depth(ok[i], true);
  check_depth(KCG_MAX_SCAN_DEPTH, false);
  check_depth(3000, false);
  if (failures) {
    printf("%d failure(s)\n", failures);
    return 1;
  }
  printf("test_scan_nesting: nested scans to depth %d match the interpreter; deeper ones are "
         "refused\n", KCG_MAX_SCAN_DEPTH - 1);
  return 0;
}
