/*
 * image.c — keys of precompiled images and their lookup (see image.h), and
 * device.h's krt_image_key: here, so that code keying images (gpu_exec.c,
 * the tests' stand-in drivers) does not pull in every device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/image.h"

#define FNV_BASIS 0xcbf29ce484222325ull
#define FNV_MUL 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_MUL;
  return h;
}

uint64_t krt_image_key(const void *data, size_t n) { return fnv(FNV_BASIS, data, n); }

static uint64_t mix_u64(uint64_t h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  return fnv(h, b, sizeof b);
}

uint64_t krt_kernel_key(const kcg_kernel *k) {
  uint64_t h = FNV_BASIS;
  h = mix_u64(h, k->nbufs), h = mix_u64(h, k->nsizes), h = mix_u64(h, k->nvars);
  for (uint32_t b = 0; b < k->nbufs; b++)
    h = mix_u64(h, (uint64_t)k->bufs[b].dtype << 1 | k->bufs[b].written);
  h = mix_u64(h, k->nexprs);
  for (uint32_t e = 0; e < k->nexprs; e++) {
    const kcg_expr *x = &k->exprs[e];
    uint64_t bits;
    memcpy(&bits, &x->i, sizeof bits);
    h = mix_u64(h, (uint64_t)x->kind << 32 | (uint64_t)x->dtype << 16 | x->op);
    h = mix_u64(h, x->var), h = mix_u64(h, x->a), h = mix_u64(h, x->b), h = mix_u64(h, x->c);
    h = mix_u64(h, bits);
  }
  h = mix_u64(h, k->nstmts);
  for (uint32_t s = 0; s < k->nstmts; s++) {
    const kcg_stmt *st = &k->stmts[s];
    h = mix_u64(h, (uint64_t)st->kind << 1 | st->parallel);
    h = mix_u64(h, st->var), h = mix_u64(h, st->a), h = mix_u64(h, st->b);
    h = mix_u64(h, st->kind == KCG_FOR ? st->nbody : 0);
    for (uint32_t i = 0; st->kind == KCG_FOR && i < st->nbody; i++) h = mix_u64(h, st->body[i]);
  }
  h = mix_u64(h, k->nlocals);
  for (uint32_t l = 0; l < k->nlocals; l++) h = mix_u64(h, k->locals[l]);
  h = mix_u64(h, k->nroot);
  for (uint32_t r = 0; r < k->nroot; r++) h = mix_u64(h, k->root[r]);
  return mix_u64(h, k->nerrors);
}

uint64_t krt_attn_shader_key(const kcg_vk_attn_shader *sh) {
  uint64_t h = krt_image_key("kiln_vk_fa", 10);
  h = mix_u64(h, (uint64_t)sh->kind), h = mix_u64(h, (uint64_t)sh->t);
  h = mix_u64(h, (uint64_t)sh->causal << 1 | sh->has_mask), h = mix_u64(h, sh->nbind);
  h = mix_u64(h, (uint64_t)sh->dm), h = mix_u64(h, (uint64_t)sh->br);
  h = mix_u64(h, (uint64_t)sh->bc);
  return mix_u64(h, (uint64_t)sh->group);
}

const char *krt_spirv_arch(bool f64, bool storage16) {
  return f64 ? (storage16 ? "spirv+f64+s16" : "spirv+f64") : (storage16 ? "spirv+s16" : "spirv");
}

/* NN of "compute_NN" / "sm_NN" after `prefix`, or -1. */
static int arch_number(const char *arch, const char *prefix) {
  size_t n = strlen(prefix);
  if (strncmp(arch, prefix, n) || !arch[n]) return -1;
  char *end;
  long v = strtol(arch + n, &end, 10);
  return *end || v < 10 || v > 999 ? -1 : (int)v;
}

const krt_image *krt_image_find(const krt_image_table *t, uint64_t key, const char *arch) {
  if (!t || !arch) return NULL;
  int sm = arch_number(arch, "sm_"), best_ptx = -1;
  const krt_image *ptx = NULL;
  for (uint32_t i = 0; i < t->n; i++) {
    const krt_image *im = &t->images[i];
    if (im->key != key || !im->arch || !im->data) continue;
    if (!strcmp(im->arch, arch)) return im;
    int c = sm > 0 ? arch_number(im->arch, "compute_") : -1;
    if (c > 0 && c <= sm && c > best_ptx) best_ptx = c, ptx = im;
  }
  return ptx;
}

void krt_image_archs(const krt_image_table *t, char *buf, size_t n) {
  size_t used = 0;
  if (n) buf[0] = 0;
  for (uint32_t i = 0; t && i < t->n; i++) {
    const char *a = t->images[i].arch;
    bool seen = !a;
    for (uint32_t j = 0; j < i && !seen; j++) seen = t->images[j].arch && !strcmp(t->images[j].arch, a);
    if (seen || used >= n) continue;
    int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", a);
    if (w > 0) used += (size_t)w;
  }
  if (!used) snprintf(buf, n, "none");
}
