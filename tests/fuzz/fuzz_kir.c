/*
 * fuzz_kir.c — libFuzzer target for the .kir parser and printer.
 *
 * Any input must parse or be rejected with a message, never crash, hang or
 * leak. Whatever parses must print, and its printed text must parse again
 * and print identically: the round trip that every IR test relies on.
 * The input is handed over without a terminating NUL, as kiln_graph_parse
 * allows, so a read past the end is caught by AddressSanitizer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return 0;
  char *text = malloc(size ? size : 1); /* an exact-size copy: no NUL after it */
  if (!text) {
    kiln_ctx_destroy(ctx);
    return 0;
  }
  if (size) memcpy(text, data, size);
  kiln_graph *g = NULL, *g2 = NULL;
  char *s1 = NULL, *s2 = NULL;
  if (kiln_graph_parse(ctx, text, size, "fuzz.kir", &g) == KILN_OK) {
    if (kiln_graph_to_string(g, &s1) != KILN_OK) __builtin_trap();
    if (kiln_graph_parse(ctx, s1, strlen(s1), "printed.kir", &g2) != KILN_OK) __builtin_trap();
    if (kiln_graph_to_string(g2, &s2) != KILN_OK) __builtin_trap();
    if (strcmp(s1, s2) != 0) __builtin_trap();
  } else if (kiln_ctx_error(ctx)[0] == 0) {
    __builtin_trap(); /* every rejection says why */
  }
  free(s1);
  free(s2);
  kiln_graph_destroy(g);
  kiln_graph_destroy(g2);
  free(text);
  kiln_ctx_destroy(ctx);
  return 0;
}
