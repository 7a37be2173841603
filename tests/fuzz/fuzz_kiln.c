/*
 * fuzz_kiln.c — libFuzzer target for the .kiln lexer, parser and printer.
 *
 * Any input must parse or be rejected with a "FILE:LINE:COL: error: ..."
 * message, never crash, hang, recurse without bound or leak. Whatever parses
 * must print, and its canonical print must parse again and print identically:
 * the property the unit tests compare trees by. The input is handed over
 * without a terminating NUL, as kf_parse allows, so a read past the end is
 * caught by AddressSanitizer.
 *
 * Whatever parses is also evaluated into a layer (frontend/kiln_eval.c),
 * which must succeed or fail with a located message too; a layer small
 * enough to build cheaply (every int argument at most MAX_INT, at most
 * MAX_LAYERS layers) is then built into a graph for its declared inputs, so
 * lambda bodies are turned into IR as well. Failures there are fine; crashes,
 * leaks and unbounded work are not.
 *
 * The same text is also parsed as a program (kf_parse_program: fn blocks, for, if,
 * var, bare expressions anywhere), with the same two properties: a located error
 * or a canonical print that parses back to itself. Programs are not run here (they
 * may read files and train).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kiln_ast.h"
#include "layers/layers.h"

#define MAX_INT 256
#define MAX_LAYERS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *print_module(const kf_module *m, size_t *n) {
  char *s = NULL;
  FILE *f = open_memstream(&s, n);
  if (!f) __builtin_trap();
  kf_module_print(m, f);
  fclose(f);
  return s;
}

/* Is every int argument and list length in `a` small? (Sizes drive the graph's constants.) */
static bool small_layer(const kl_layer *l, unsigned *budget);
static bool small_arg(const kl_arg *a, unsigned *budget) {
  switch (a->kind) {
  case KL_A_INT:
    return a->i >= -MAX_INT && a->i <= MAX_INT;
  case KL_A_FLOAT:
    return a->f >= -MAX_INT && a->f <= MAX_INT;
  case KL_A_LAYER:
    return small_layer(a->layer, budget);
  case KL_A_LIST:
    if (a->n > MAX_LAYERS) return false;
    for (uint32_t i = 0; i < a->n; i++)
      if (!small_arg(&a->items[i], budget)) return false;
    return true;
  default:
    return true;
  }
}

static bool small_layer(const kl_layer *l, unsigned *budget) {
  if (!l || !*budget) return false;
  --*budget;
  for (uint32_t i = 0; i < l->nargs; i++)
    if (!small_arg(&l->args[i], budget)) return false;
  for (uint32_t i = 0; i < l->nkids; i++)
    if (!small_layer(l->kids[i], budget)) return false;
  return true;
}

/* Evaluates the text into a layer and, when it is small, builds its graph. */
static void evaluate(kiln_ctx *ctx, const char *text, size_t size) {
  kiln_model_file *mf = NULL;
  kiln_status s = kiln_model_file_parse(ctx, text, size, "fuzz.kiln", &mf);
  if (s != KILN_OK) {
    const char *msg = kiln_ctx_error(ctx);
    if (mf) __builtin_trap();
    if (s != KILN_ERR_NOMEM && (strncmp(msg, "fuzz.kiln:", 10) != 0 || !strstr(msg, ": error: ")))
      __builtin_trap();
    return;
  }
  const kl_layer *l = kiln_model_file_layer(mf);
  unsigned budget = MAX_LAYERS;
  bool small = small_layer(l, &budget);
  size_t n = kiln_model_file_num_inputs(mf);
  const kiln_model_input *in = kiln_model_file_inputs(mf);
  for (size_t i = 0; i < n && small; i++)
    for (size_t k = 0; k < in[i].rank; k++)
      if (in[i].dims[k] > MAX_INT) small = false;
  if (small) {
    kiln_build_opts opts = {KILN_F32, 1};
    kiln_graph *g = NULL;
    if (kiln_layer_build(ctx, l, n, in, &opts, &g) == KILN_OK && !g) __builtin_trap();
    kiln_graph_destroy(g);
  }
  kiln_model_file_destroy(mf);
}

/* As a program: rejected with a located error, or printed and parsed back identically. */
static void as_program(kiln_ctx *ctx, const char *text, size_t size) {
  kir_arena a1 = {0}, a2 = {0};
  kf_module *m1 = NULL, *m2 = NULL;
  char *s1 = NULL, *s2 = NULL;
  size_t n1 = 0, n2 = 0;
  if (kf_parse_program(ctx, text, size, "fuzz.kiln", &a1, &m1) == KILN_OK) {
    s1 = print_module(m1, &n1);
    if (kf_parse_program(ctx, s1, n1, "printed.kiln", &a2, &m2) != KILN_OK) __builtin_trap();
    s2 = print_module(m2, &n2);
    if (n1 != n2 || memcmp(s1, s2, n1) != 0) __builtin_trap();
  } else {
    const char *msg = kiln_ctx_error(ctx);
    if (strncmp(msg, "fuzz.kiln:", 10) != 0 || !strstr(msg, ": error: ")) __builtin_trap();
  }
  free(s1);
  free(s2);
  kir_arena_free(&a1);
  kir_arena_free(&a2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_ctx *ctx = kiln_ctx_create();
  char *text = malloc(size ? size : 1); /* an exact-size copy: no NUL after it */
  if (!ctx || !text) {
    free(text);
    kiln_ctx_destroy(ctx);
    return 0;
  }
  if (size) memcpy(text, data, size);
  kir_arena a1 = {0}, a2 = {0};
  kf_module *m1 = NULL, *m2 = NULL;
  char *s1 = NULL, *s2 = NULL;
  size_t n1 = 0, n2 = 0;
  if (kf_parse(ctx, text, size, "fuzz.kiln", &a1, &m1) == KILN_OK) {
    s1 = print_module(m1, &n1);
    if (kf_parse(ctx, s1, n1, "printed.kiln", &a2, &m2) != KILN_OK) __builtin_trap();
    s2 = print_module(m2, &n2);
    if (n1 != n2 || memcmp(s1, s2, n1) != 0) __builtin_trap();
    evaluate(ctx, text, size);
  } else {
    const char *msg = kiln_ctx_error(ctx);
    /* every rejection says where and why */
    if (strncmp(msg, "fuzz.kiln:", 10) != 0 || !strstr(msg, ": error: ")) __builtin_trap();
  }
  as_program(ctx, text, size);
  free(s1);
  free(s2);
  kir_arena_free(&a1);
  kir_arena_free(&a2);
  free(text);
  kiln_ctx_destroy(ctx);
  return 0;
}
