/*
 * arena.c — the bump allocator that owns everything in a module.
 *
 * Blocks are chained; a request larger than the block size gets a block of
 * its own. Growing an array copies it and leaves the old copy in the arena:
 * graphs are built once and freed at once, so the waste is bounded by the
 * doubling and never matters.
 */
#include <stdlib.h>
#include <string.h>

#include "kir.h"

struct kir_arena_block {
  kir_arena_block *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
};

enum { BLOCK_SIZE = 64 * 1024 };

void *kir_arena_alloc(kir_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  kir_arena_block *b = a->head;
  if (!b || b->size - b->used < size) {
    size_t bs = size > BLOCK_SIZE ? size : BLOCK_SIZE;
    b = malloc(sizeof *b + bs);
    if (!b) return NULL;
    b->size = bs;
    b->used = 0;
    if (a->head && size > BLOCK_SIZE) { /* keep filling the current block */
      b->next = a->head->next;
      a->head->next = b;
    } else {
      b->next = a->head;
      a->head = b;
    }
  }
  void *p = b->data + b->used;
  b->used += size;
  memset(p, 0, size);
  return p;
}

char *kir_arena_strndup(kir_arena *a, const char *s, size_t n) {
  char *p = kir_arena_alloc(a, n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

char *kir_arena_strdup(kir_arena *a, const char *s) { return kir_arena_strndup(a, s, strlen(s)); }

bool kir_arena_grow(kir_arena *a, void **arr, uint32_t *cap, uint32_t need, size_t elem) {
  if (need <= *cap) return true;
  uint32_t ncap = *cap ? *cap : 8;
  while (ncap < need) {
    if (ncap > UINT32_MAX / 2) return false;
    ncap *= 2;
  }
  void *n = kir_arena_alloc(a, (size_t)ncap * elem);
  if (!n) return false;
  if (*arr) memcpy(n, *arr, (size_t)*cap * elem);
  *arr = n;
  *cap = ncap;
  return true;
}

void kir_arena_free(kir_arena *a) {
  kir_arena_block *b = a->head;
  while (b) {
    kir_arena_block *n = b->next;
    free(b);
    b = n;
  }
  a->head = NULL;
}
