/*
 * arena.c — the bump allocator that owns everything in a module.
 *
 * Blocks are chained; a request larger than the block size gets a block of
 * its own. Growing an array copies it and leaves the old copy in the arena:
 * graphs are built once and freed at once, so the waste is bounded by the
 * doubling and never matters.
 */
#include <pthread.h>
#include <stdatomic.h>
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

/* ------------------------------------------------------------ kir_pool */

struct kir_pool {
  pthread_mutex_t mu;
  _Atomic int refs;
  void **blocks; /* each malloc'ed, in creation order */
  size_t n, cap;
};

kir_pool *kir_pool_new(void) {
  kir_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  atomic_init(&p->refs, 1);
  return p;
}

kir_pool *kir_pool_ref(kir_pool *p) {
  if (p) atomic_fetch_add(&p->refs, 1);
  return p;
}

void kir_pool_unref(kir_pool *p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  for (size_t k = 0; k < p->n; k++) free(p->blocks[k]);
  free(p->blocks);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

const void *kir_pool_keep(kir_pool *p, const void *src, size_t bytes) {
  pthread_mutex_lock(&p->mu);
  /* the newest first: a rebuild copies lists in the order they were made */
  for (size_t k = p->n; k-- > 0;)
    if (p->blocks[k] == src) {
      pthread_mutex_unlock(&p->mu);
      return src;
    }
  void *b = NULL;
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    void **nb = realloc(p->blocks, cap * sizeof *nb);
    if (!nb) goto out;
    p->blocks = nb;
    p->cap = cap;
  }
  if ((b = malloc(bytes ? bytes : 1))) {
    memcpy(b, src, bytes);
    p->blocks[p->n++] = b;
  }
out:
  pthread_mutex_unlock(&p->mu);
  return b;
}
