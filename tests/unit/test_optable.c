/*
 * test_optable.c — the table walk: every op of ops.def is complete.
 *
 * Each op must have a name, a line of semantics, a well-formed attribute
 * signature, a shape rule, a float64 reference kernel, the scalar functions
 * its family and dtype flags call for, a decomposition when it is a compound
 * op with one in the design (softmax, norms, attention), and a section in
 * docs/ir.md. Its own test file is checked by test_ops.c, its lowering
 * (codegen/lower_table.c) by test_lower.c, its VJP by test_autodiff.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kir.h"

static int failures;

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      printf("FAIL %s: ", d->name);                                                            \
      printf(__VA_ARGS__);                                                                     \
      printf("\n");                                                                            \
      failures++;                                                                              \
    }                                                                                          \
  } while (0)

static char *read_docs(void) {
  FILE *f = fopen(KILN_SOURCE_DIR "/docs/ir.md", "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = calloc(1, (size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = 0;
  fclose(f);
  return buf;
}

static const char *const needs_decomposition[] = {"softmax", "log_softmax", "layer_norm",
                                                  "rms_norm", "attention", "segment_softmax"};

int main(void) {
  const char *sig = kir_ops_check();
  if (sig) {
    printf("FAIL ops.def: %s\n", sig);
    failures++;
  }
  char *docs = read_docs();
  if (!docs) {
    printf("FAIL docs/ir.md is missing\n");
    failures++;
  }
  for (uint16_t op = 0; op < KIR_OP_COUNT; op++) {
    const kir_op_desc *d = kir_op(op);
    CHECK(d->name && d->name[0], "no name");
    CHECK(d->doc && d->doc[0], "no semantics line (.doc)");
    CHECK(d->shape != NULL, "no shape rule");
    CHECK(d->ref != NULL, "no reference kernel");
    CHECK(d->min_in >= 0 && (d->max_in < 0 || d->max_in >= d->min_in), "bad operand counts");
    uint16_t back;
    CHECK(kir_op_lookup(d->name, strlen(d->name), &back) && back == op, "name lookup");
    if (d->ref && d->family == KIR_FAM_UNARY && d->shape && d->f1 == NULL && d->i1 == NULL)
      CHECK(op == KIR_OP_cast || op == KIR_OP_is_finite, "unary op without scalar functions");
    if (d->family == KIR_FAM_UNARY && (d->flags & KIR_F_FLOAT) && op != KIR_OP_cast &&
        op != KIR_OP_is_finite)
      CHECK(d->f1 != NULL, "float unary op without f1");
    if ((d->family == KIR_FAM_UNARY) && (d->flags & (KIR_F_INT | KIR_F_BOOL)) &&
        op != KIR_OP_cast)
      CHECK(d->i1 != NULL, "integer unary op without i1");
    if (d->family == KIR_FAM_COMPARE || (d->family == KIR_FAM_BINARY && op != KIR_OP_select)) {
      if (d->flags & KIR_F_FLOAT) CHECK(d->f2 != NULL, "float binary op without f2");
      if (d->flags & (KIR_F_INT | KIR_F_BOOL)) CHECK(d->i2 != NULL, "integer binary op without i2");
    }
    if (d->family == KIR_FAM_LOGICAL) CHECK(d->i2 != NULL, "logical op without i2");
    for (size_t k = 0; k < sizeof needs_decomposition / sizeof *needs_decomposition; k++)
      if (!strcmp(d->name, needs_decomposition[k]))
        CHECK(d->decompose != NULL, "compound op without a decomposition");
    if (docs) {
      char heading[96];
      snprintf(heading, sizeof heading, "\n### `%s`", d->name);
      CHECK(strstr(docs, heading) != NULL, "docs/ir.md has no section '### `%s`'", d->name);
    }
  }
  free(docs);
  printf("%d ops walked, %d failures\n", KIR_OP_COUNT, failures);
  return failures ? 1 : 0;
}
