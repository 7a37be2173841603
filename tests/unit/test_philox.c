/*
 * test_philox.c — the block function behind the `random` op against the
 * published Philox-4x32-10 known-answer vectors (Random123's kat_vectors,
 * also used by JAX and cuRAND), so the definition in ir/ref_source.c is the
 * standard generator and not merely self-consistent.
 */
#include <stdio.h>

#include "ir/kir.h"

typedef struct {
  uint32_t ctr[4], key[2], want[4];
} kat;

static const kat kats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

int main(void) {
  int failures = 0;
  for (size_t k = 0; k < sizeof kats / sizeof kats[0]; k++) {
    uint32_t out[4];
    kir_philox4x32(kats[k].ctr, kats[k].key, out);
    for (int i = 0; i < 4; i++)
      if (out[i] != kats[k].want[i]) {
        printf("FAIL vector %zu word %d: got 0x%08x, expected 0x%08x\n", k, i, out[i],
               kats[k].want[i]);
        failures++;
      }
  }
  printf("philox4x32-10: %zu vectors, %d failures\n", sizeof kats / sizeof kats[0], failures);
  return failures ? 1 : 0;
}
