/*
 * pb_write.h — a protobuf writer for the tests that build ONNX models byte by byte
 * (test_onnx.c, test_budget.c): fields appended to a growing buffer; f_msg nests a message
 * and frees it, so a model is freed once, with free(m.p).
 */
#ifndef KILN_TEST_PB_WRITE_H
#define KILN_TEST_PB_WRITE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pb {
  uint8_t *p;
  size_t n, cap;
} pb;

static inline void put(pb *b, const void *data, size_t len) {
  if (!len) return; /* an empty nested message has no buffer: data may be NULL */
  if (b->n + len > b->cap) {
    b->cap = (b->n + len) * 2 + 64;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, data, len);
  b->n += len;
}
static inline void varint(pb *b, uint64_t v) {
  do {
    uint8_t c = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) c |= 0x80;
    put(b, &c, 1);
  } while (v);
}
static inline void f_int(pb *b, int field, int64_t v) {
  varint(b, (uint64_t)field << 3);
  varint(b, (uint64_t)v);
}
static inline void f_bytes(pb *b, int field, const void *d, size_t len) {
  varint(b, (uint64_t)field << 3 | 2);
  varint(b, len);
  put(b, d, len);
}
static inline void f_str(pb *b, int field, const char *s) { f_bytes(b, field, s, strlen(s)); }
static inline void f_float(pb *b, int field, float f) {
  varint(b, (uint64_t)field << 3 | 5);
  put(b, &f, 4);
}
/* Appends sub as a nested message and frees it. */
static inline void f_msg(pb *b, int field, pb *sub) {
  f_bytes(b, field, sub->p, sub->n);
  free(sub->p);
  *sub = (pb){0};
}

#endif
