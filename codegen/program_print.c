/*
 * program_print.c — a lowered program's steps as text, one line each
 * (`kiln ir --emit steps`): what runs, in order, on which buffers, and for
 * a GEMM step its kcg_gemm description (dtype, transpositions, the bf16
 * marks the CPU runtime acts on). Lit tests pin lowering decisions with it,
 * e.g. that a bf16 convolution's GEMM reads bf16 columns
 * (tests/cli/precision_conv.test).
 */
#include <inttypes.h>
#include <stdio.h>

#include "program.h"

/* A dim: its value, or its symbol's name. */
static void put_dim(const kcg_program *p, kir_dim d, FILE *f) {
  if (!KIR_DIM_IS_SYM(d)) fprintf(f, "%lld", (long long)d);
  else if (KIR_DIM_SYM(d) < p->nsyms && p->syms && p->syms[KIR_DIM_SYM(d)])
    fputs(p->syms[KIR_DIM_SYM(d)], f);
  else fprintf(f, "?%u", (unsigned)KIR_DIM_SYM(d));
}

static void put_buf(const kcg_program *p, uint32_t b, FILE *f) {
  if (b >= p->nbufs) {
    fprintf(f, "<buffer %u of %u>", b, p->nbufs);
    return;
  }
  const kcg_pbuf *pb = &p->bufs[b];
  static const char *const kinds[] = {"in", "tmp", "const"};
  fprintf(f, "%s%u:%s[", (unsigned)pb->kind < 3 ? kinds[pb->kind] : "?", b,
          kiln_dtype_name(pb->type.dtype));
  for (int d = 0; d < pb->type.rank; d++) {
    if (d) fputs(", ", f);
    put_dim(p, pb->type.dims[d], f);
  }
  fputc(']', f);
}

static void put_gemm(const kcg_program *p, const kcg_gemm *g, FILE *f) {
  fprintf(f, " %s", kiln_dtype_name(g->dtype));
  if (g->bf16) fprintf(f, " bf16");
  if (g->a_bf16) fprintf(f, " a_bf16");
  if (g->b_bf16) fprintf(f, " b_bf16");
  if (g->trans_a) fprintf(f, " trans_a");
  if (g->trans_b) fprintf(f, " trans_b");
  fputs(" m=", f);
  put_dim(p, g->m, f);
  fputs(" n=", f);
  put_dim(p, g->n, f);
  fputs(" k=", f);
  put_dim(p, g->k, f);
}

/* The steps of `p` at nesting `depth`: a scan's body follows it, indented two more spaces. */
static void print_steps(const kcg_program *p, int depth, FILE *f) {
  static const char *const kinds[] = {"kernel", "gemm", "scan", "attention", "conv"};
  for (uint32_t s = 0; s < p->nsteps; s++) {
    const kcg_step *st = &p->steps[s];
    fprintf(f, "%*sstep %u: %s", 2 * depth, "", s, (unsigned)st->kind < 5 ? kinds[st->kind] : "?");
    if (st->kind != KCG_STEP_SCAN && st->kind != KCG_STEP_ATTENTION && st->kernel < p->nkernels &&
        p->kernels && p->kernels[st->kernel])
      fprintf(f, " %s", p->kernels[st->kernel]->name);
    if (st->kind == KCG_STEP_GEMM) put_gemm(p, &st->gemm, f);
    if (st->kind == KCG_STEP_CONV)
      fprintf(f, " %s c=%" PRId64 " o=%" PRId64 " %" PRId64 "x%" PRId64 " s%" PRId64 "x%" PRId64,
              kcg_conv_mode_name(st->conv.mode), st->conv.c, st->conv.o, st->conv.kh,
              st->conv.kw, st->conv.sh, st->conv.sw);
    if (st->epi.on) {
      fputs(" epilogue(", f);
      if (st->epi.has_bias) {
        fputs("bias ", f);
        put_buf(p, st->epi.bias, f);
        fprintf(f, " /%" PRId64 " %%%" PRId64, st->epi.inner, st->epi.count);
      }
      if (st->epi.has_lo) fprintf(f, "%smax %g", st->epi.has_bias ? ", " : "", st->epi.lo);
      if (st->epi.has_hi)
        fprintf(f, "%smin %g", st->epi.has_bias || st->epi.has_lo ? ", " : "", st->epi.hi);
      fputc(')', f);
    }
    fputs(" (", f);
    for (uint32_t a = 0; a < st->nargs; a++) {
      if (a) fputs(", ", f);
      put_buf(p, st->args[a], f);
    }
    fputs(")\n", f);
    if (st->kind == KCG_STEP_SCAN && st->body && depth < KCG_MAX_SCAN_DEPTH)
      print_steps(st->body, depth + 1, f);
  }
}

void kcg_program_print(const kcg_program *p, FILE *f) { print_steps(p, 0, f); }
