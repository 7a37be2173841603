/*
 * fuzz_kiln.c — libFuzzer target for the .kiln lexer, parser and printer.
 *
 * Any input must parse or be rejected with a "FILE:LINE:COL: error: ..."
 * message, never crash, hang, recurse without bound or leak. Whatever parses
 * must print, and its canonical print must parse again and print identically:
 * the property the unit tests compare trees by. The input is handed over
 * without a terminating NUL, as kf_parse allows, so a read past the end is
 * caught by AddressSanitizer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kiln_ast.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *print_module(const kf_module *m, size_t *n) {
  char *s = NULL;
  FILE *f = open_memstream(&s, n);
  if (!f) __builtin_trap();
  kf_module_print(m, f);
  fclose(f);
  return s;
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
  } else {
    const char *msg = kiln_ctx_error(ctx);
    /* every rejection says where and why */
    if (strncmp(msg, "fuzz.kiln:", 10) != 0 || !strstr(msg, ": error: ")) __builtin_trap();
  }
  free(s1);
  free(s2);
  kir_arena_free(&a1);
  kir_arena_free(&a2);
  free(text);
  kiln_ctx_destroy(ctx);
  return 0;
}
