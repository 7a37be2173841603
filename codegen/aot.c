/*
 * aot.c — writes a lowered program as C source, for ahead-of-time models.
 *
 * `kiln compile` turns a graph into a shared object that needs no LLVM at
 * run time. Its kernels are machine code in an object file (llvm_cpu.c);
 * everything else the runtime executor needs — the kcg_program with its
 * buffers, steps and kernel descriptions — is plain data, written here as
 * static C tables next to a table of the kernel functions, plus the entry
 * points declared in the generated header. Constant buffers (weights) are
 * not printed as C literals: they go into one binary blob written as an ELF
 * object of its own (write_elf), which the linker takes as it is, so a
 * 100 MB model compiles as fast as a small one.
 *
 * The C file is compiled against codegen/program.h and runtime/exec/rt.h and
 * linked with libkiln_rt.a (the files of runtime/exec/).
 */
#include <elf.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aot.h"

typedef struct writer {
  FILE *c;         /* the C source */
  FILE *blob;      /* the constant bytes */
  uint64_t blob_size;
  const char *prefix;
  uint32_t nprog;  /* programs written so far (the entry and scan bodies) */
  bool failed;
} writer;

static void put_float(FILE *f, double v) {
  if (isnan(v)) fprintf(f, "__builtin_nan(\"\")");
  else if (isinf(v)) fprintf(f, v > 0 ? "__builtin_inf()" : "-__builtin_inf()");
  else fprintf(f, "%a", v);
}

static void put_string(FILE *f, const char *s) {
  if (!s) {
    fprintf(f, "0");
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 32 || ch > 126) fprintf(f, "\\%03o", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static void put_type(FILE *f, const kir_type *t) {
  fprintf(f, "{.dtype = %d, .rank = %u, .dims = {", (int)t->dtype, t->rank);
  for (int i = 0; i < t->rank; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", t->dims[i]);
  fprintf(f, "}}");
}

static void put_u32s(FILE *f, const char *name, const uint32_t *v, uint32_t n) {
  fprintf(f, "static uint32_t %s[%u] = {", name, n ? n : 1);
  for (uint32_t i = 0; i < n; i++) fprintf(f, "%s%u", i ? ", " : "", v[i]);
  fprintf(f, "};\n");
}

/* Writes kernel `k` number `id` as static tables; its functions come from the object file. */
static void write_kernel(writer *w, const kcg_kernel *k, uint32_t id) {
  FILE *f = w->c;
  const char *p = w->prefix;
  for (uint32_t s = 0; s < k->nstmts; s++)
    if (k->stmts[s].kind == KCG_FOR) {
      char name[64];
      snprintf(name, sizeof name, "%sk%u_body%u", p, id, s);
      put_u32s(f, name, k->stmts[s].body, k->stmts[s].nbody);
    }
  fprintf(f, "static kcg_stmt %sk%u_stmts[%u] = {\n", p, id, k->nstmts ? k->nstmts : 1);
  for (uint32_t s = 0; s < k->nstmts; s++) {
    const kcg_stmt *st = &k->stmts[s];
    fprintf(f, "  {.kind = %d, .var = %u, .a = %u, .b = %u, .parallel = %d", (int)st->kind,
            st->var, st->a, st->b, st->parallel);
    if (st->kind == KCG_FOR)
      fprintf(f, ", .body = %sk%u_body%u, .nbody = %u, .capbody = %u", p, id, s, st->nbody,
              st->nbody);
    fprintf(f, "},\n");
  }
  fprintf(f, "};\nstatic kcg_expr %sk%u_exprs[%u] = {\n", p, id, k->nexprs ? k->nexprs : 1);
  for (uint32_t e = 0; e < k->nexprs; e++) {
    const kcg_expr *x = &k->exprs[e];
    fprintf(f, "  {.kind = %d, .dtype = %d, .op = %u, .var = %u, .a = %u, .b = %u, .c = %u, ",
            (int)x->kind, (int)x->dtype, x->op, x->var, x->a, x->b, x->c);
    if (x->kind == KCG_CONST && kir_dtype_is_float(x->dtype)) {
      fprintf(f, ".f = ");
      put_float(f, x->f);
    } else {
      fprintf(f, ".i = INT64_C(%" PRId64 ")", x->i);
    }
    fprintf(f, "},\n");
  }
  fprintf(f, "};\nstatic kcg_buf %sk%u_bufs[%u] = {", p, id, k->nbufs ? k->nbufs : 1);
  for (uint32_t b = 0; b < k->nbufs; b++)
    fprintf(f, "%s{.dtype = %d, .written = %d}", b ? ", " : "", (int)k->bufs[b].dtype,
            k->bufs[b].written);
  fprintf(f, "};\nstatic kir_dtype %sk%u_locals[%u] = {", p, id, k->nlocals ? k->nlocals : 1);
  for (uint32_t l = 0; l < k->nlocals; l++)
    fprintf(f, "%s%d", l ? ", " : "", (int)k->locals[l]);
  fprintf(f, "};\n");
  char root[64];
  snprintf(root, sizeof root, "%sk%u_root", p, id);
  put_u32s(f, root, k->root, k->nroot);
  fprintf(f, "static const char *%sk%u_errors[%u] = {", p, id, k->nerrors ? k->nerrors : 1);
  for (uint32_t e = 0; e < k->nerrors; e++) {
    fprintf(f, "%s", e ? ", " : "");
    put_string(f, k->errors[e]);
  }
  fprintf(f, "};\nstatic kcg_kernel %sk%u = {.name = ", p, id);
  put_string(f, k->name);
  fprintf(f, ", .bufs = %sk%u_bufs, .nbufs = %u, .nsizes = %u, .exprs = %sk%u_exprs, "
             ".nexprs = %u, .stmts = %sk%u_stmts, .nstmts = %u, .locals = %sk%u_locals, "
             ".nlocals = %u, .nvars = %u, .root = %sk%u_root, .nroot = %u, "
             ".errors = %sk%u_errors, .nerrors = %u};\n\n",
          p, id, k->nbufs, k->nsizes, p, id, k->nexprs, p, id, k->nstmts, p, id, k->nlocals,
          k->nvars, p, id, k->nroot, p, id, k->nerrors);
}

/* Appends a constant buffer's bytes to the blob, 64-byte aligned; returns its offset. */
static uint64_t blob_add(writer *w, const void *data, size_t n) {
  static const char zeros[64];
  uint64_t off = (w->blob_size + 63) & ~(uint64_t)63;
  if (off > w->blob_size && fwrite(zeros, 1, off - w->blob_size, w->blob) != off - w->blob_size)
    w->failed = true;
  if (n && fwrite(data, 1, n, w->blob) != n) w->failed = true;
  w->blob_size = off + n;
  return off;
}

/*
 * The blob is an ELF64 x86-64 relocatable object: its header (ELF_DATA bytes, written last over
 * the zeros that open the file), the constants from ELF_DATA on (offsets in the blob count from
 * there) and a zero byte after them in one allocated, read-only, 64-byte aligned section, one
 * hidden symbol `<prefix>blob_start` at its start, and an empty .note.GNU-stack (no executable
 * stack). Before, the C file pulled the blob in with the assembler's .incbin, and `as` copied
 * every byte once more: 2.3 of the 12.7 s `kiln compile` took on GPT-2's 620 MB.
 */
#define ELF_DATA 64
_Static_assert(sizeof(Elf64_Ehdr) <= ELF_DATA, "the ELF header fits before the constants");

static bool put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n; }

static bool pad8(FILE *f, uint64_t *at) {
  static const char zeros[8];
  uint64_t to = (*at + 7) & ~(uint64_t)7, n = to - *at;
  *at = to;
  return put(f, zeros, n);
}

static void write_elf(writer *w) {
  FILE *f = w->blob;
  char sym[96];
  int sl = snprintf(sym, sizeof sym, "%sblob_start", w->prefix);
  static const char shstr[] = "\0.rodata.kiln\0.note.GNU-stack\0.symtab\0.strtab\0.shstrtab";
  enum { N_RODATA = 1, N_NOTE = 14, N_SYMTAB = 30, N_STRTAB = 38, N_SHSTRTAB = 46 };
  uint64_t size = w->blob_size + 1, at = ELF_DATA + size; /* the zero byte after the constants */
  bool ok = sl > 0 && (size_t)sl < sizeof sym && put(f, "", 1);
  uint64_t shstr_at = at, str_at = shstr_at + sizeof shstr;
  ok = ok && put(f, shstr, sizeof shstr) && put(f, "", 1) && put(f, sym, (size_t)sl + 1);
  at = str_at + 1 + (uint64_t)sl + 1;
  ok = ok && pad8(f, &at);
  uint64_t sym_at = at;
  Elf64_Sym syms[2] = {{0},
                       {.st_name = 1, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT),
                        .st_other = STV_HIDDEN, .st_shndx = 1, .st_value = 0, .st_size = size}};
  ok = ok && put(f, syms, sizeof syms);
  at += sizeof syms;
  ok = ok && pad8(f, &at);
  Elf64_Shdr sh[6] = {
      {0},
      {.sh_name = N_RODATA, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC, .sh_offset = ELF_DATA,
       .sh_size = size, .sh_addralign = 64},
      {.sh_name = N_NOTE, .sh_type = SHT_PROGBITS, .sh_offset = ELF_DATA, .sh_addralign = 1},
      {.sh_name = N_SYMTAB, .sh_type = SHT_SYMTAB, .sh_offset = sym_at, .sh_size = sizeof syms,
       .sh_link = 4, .sh_info = 1, .sh_addralign = 8, .sh_entsize = sizeof(Elf64_Sym)},
      {.sh_name = N_STRTAB, .sh_type = SHT_STRTAB, .sh_offset = str_at,
       .sh_size = 1 + (uint64_t)sl + 1, .sh_addralign = 1},
      {.sh_name = N_SHSTRTAB, .sh_type = SHT_STRTAB, .sh_offset = shstr_at,
       .sh_size = sizeof shstr, .sh_addralign = 1}};
  ok = ok && put(f, sh, sizeof sh);
  Elf64_Ehdr eh = {.e_ident = {ELFMAG0, ELFMAG1, ELFMAG2, ELFMAG3, ELFCLASS64, ELFDATA2LSB,
                               EV_CURRENT, ELFOSABI_SYSV},
                   .e_type = ET_REL, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
                   .e_shoff = at, .e_ehsize = sizeof(Elf64_Ehdr),
                   .e_shentsize = sizeof(Elf64_Shdr), .e_shnum = 6, .e_shstrndx = 5};
  ok = ok && fseek(f, 0, SEEK_SET) == 0 && put(f, &eh, sizeof eh);
  if (!ok) w->failed = true;
}

/* Writes program `prog` (and, first, its scan bodies); returns its number. */
static uint32_t write_program(writer *w, const kcg_program *prog) {
  FILE *f = w->c;
  const char *p = w->prefix;
  uint32_t *bodies = NULL;
  uint32_t body_ids[1024];
  if (prog->nsteps > 1024) {
    w->failed = true;
    return 0;
  }
  (void)bodies;
  for (uint32_t s = 0; s < prog->nsteps; s++)
    body_ids[s] = prog->steps[s].kind == KCG_STEP_SCAN ? write_program(w, prog->steps[s].body) : 0;
  uint32_t id = w->nprog++;
  fprintf(f, "static kcg_pbuf %sp%u_bufs[%u] = {\n", p, id, prog->nbufs ? prog->nbufs : 1);
  for (uint32_t b = 0; b < prog->nbufs; b++) {
    const kcg_pbuf *pb = &prog->bufs[b];
    fprintf(f, "  {.type = ");
    put_type(f, &pb->type);
    fprintf(f, ", .kind = %d, .index = %u", (int)pb->kind, pb->index);
    if (pb->kind == KCG_PBUF_CONST) {
      int64_t numel = kir_type_numel(&pb->type);
      size_t bytes = (size_t)(numel < 0 ? 0 : numel) * kiln_dtype_size(pb->type.dtype);
      uint64_t off = blob_add(w, pb->data, bytes);
      fprintf(f, ", .data = %sblob + %" PRIu64, p, off);
    }
    fprintf(f, "},\n");
  }
  fprintf(f, "};\n");
  for (uint32_t s = 0; s < prog->nsteps; s++) {
    char name[64];
    snprintf(name, sizeof name, "%sp%u_s%u_args", p, id, s);
    put_u32s(f, name, prog->steps[s].args, prog->steps[s].nargs);
  }
  fprintf(f, "static kcg_step %sp%u_steps[%u] = {\n", p, id, prog->nsteps ? prog->nsteps : 1);
  for (uint32_t s = 0; s < prog->nsteps; s++) {
    const kcg_step *st = &prog->steps[s];
    const kcg_gemm *g = &st->gemm;
    fprintf(f, "  {.kind = %d, .kernel = %u, .args = %sp%u_s%u_args, .nargs = %u, "
               ".n_const = %u, .n_carry = %u, .length = %" PRId64 ", .reverse = %d",
            (int)st->kind, st->kernel, p, id, s, st->nargs, st->n_const, st->n_carry, st->length,
            st->reverse);
    if (st->kind == KCG_STEP_SCAN) fprintf(f, ", .body = &%sp%u", p, body_ids[s]);
    if (st->kind == KCG_STEP_ATTENTION)
      fprintf(f, ",\n   .attn = {.dtype = %d, .backward = %d, .causal = %d, .has_mask = %d, .scale = %a}",
              (int)st->attn.dtype, st->attn.backward, st->attn.causal, st->attn.has_mask,
              st->attn.scale);
    if (st->kind == KCG_STEP_CONV) {
      const kcg_conv *c = &st->conv;
      fprintf(f, ",\n   .conv = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                 ", %d}",
              c->c, c->h, c->w, c->o, c->kh, c->kw, c->sh, c->sw, c->pt, c->pl, c->ho, c->wo,
              (int)c->mode);
    }
    if (st->epi.on)
      fprintf(f, ",\n   .epi = {.on = 1, .has_bias = %d, .has_lo = %d, .has_hi = %d, .bias = %u, "
                 ".inner = %" PRId64 ", .count = %" PRId64 ", .lo = %a, .hi = %a}",
              st->epi.has_bias, st->epi.has_lo, st->epi.has_hi, st->epi.bias, st->epi.inner,
              st->epi.count, (double)st->epi.lo, (double)st->epi.hi);
    fprintf(f, ",\n   .gemm = {.dtype = %d, .trans_a = %d, .trans_b = %d, .m = %" PRId64
               ", .n = %" PRId64 ", .k = %" PRId64 ", .nbatch = %u, .a_rank = %u, .b_rank = %u",
            (int)g->dtype, g->trans_a, g->trans_b, g->m, g->n, g->k, g->nbatch, g->a_rank,
            g->b_rank);
    fprintf(f, ", .bf16 = %d, .a_bf16 = %d, .b_bf16 = %d", g->bf16, g->a_bf16, g->b_bf16);
    fprintf(f, ", .batch = {");
    for (int i = 0; i < g->nbatch; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", g->batch[i]);
    fprintf(f, "}, .a_batch = {");
    for (int i = 0; i < g->a_rank; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", g->a_batch[i]);
    fprintf(f, "}, .b_batch = {");
    for (int i = 0; i < g->b_rank; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", g->b_batch[i]);
    fprintf(f, "}}},\n");
  }
  fprintf(f, "};\n");
  char name[64];
  snprintf(name, sizeof name, "%sp%u_params", p, id);
  put_u32s(f, name, prog->params, prog->nparams);
  snprintf(name, sizeof name, "%sp%u_results", p, id);
  put_u32s(f, name, prog->results, prog->nresults);
  fprintf(f, "static kcg_program %sp%u = {.nsyms = %u, .syms = %ssyms, .kernels = %skernels, "
             ".nkernels = %u, .bufs = %sp%u_bufs, .nbufs = %u, .steps = %sp%u_steps, "
             ".nsteps = %u, .params = %sp%u_params, .nparams = %u, .results = %sp%u_results, "
             ".nresults = %u};\n\n",
          p, id, prog->nsyms, p, p, prog->nkernels, p, id, prog->nbufs, p, id, prog->nsteps, p,
          id, prog->nparams, p, id, prog->nresults);
  return id;
}

bool kcg_aot_images_add(kcg_aot_images *t, uint64_t key, const char *arch, void *data, size_t len) {
  if (t->n == t->cap) {
    uint32_t cap = t->cap ? 2 * t->cap : 16;
    kcg_aot_image *v = realloc(t->v, cap * sizeof *v);
    if (!v) {
      free(data);
      return false;
    }
    t->v = v, t->cap = cap;
  }
  kcg_aot_image *im = &t->v[t->n++];
  im->key = key, im->data = data, im->len = len;
  snprintf(im->arch, sizeof im->arch, "%s", arch);
  return true;
}

bool kcg_aot_images_has(const kcg_aot_images *t, uint64_t key, const char *arch) {
  for (uint32_t i = 0; i < t->n; i++)
    if (t->v[i].key == key && !strcmp(t->v[i].arch, arch)) return true;
  return false;
}

void kcg_aot_images_free(kcg_aot_images *t) {
  for (uint32_t i = 0; i < t->n; i++) free(t->v[i].data);
  free(t->v);
  *t = (kcg_aot_images){0};
}

/* The images as a krt_image_table, their bytes in the blob (identical ones once). */
static void write_images(writer *w, const kcg_aot_images *t) {
  FILE *f = w->c;
  const char *p = w->prefix;
  uint64_t *off = calloc(t->n + 1u, sizeof *off);
  if (!off) {
    w->failed = true;
    return;
  }
  fprintf(f, "static const krt_image %simages[%u] = {\n", p, t->n ? t->n : 1);
  for (uint32_t i = 0; i < t->n; i++) {
    const kcg_aot_image *im = &t->v[i];
    uint32_t same = i;
    for (uint32_t j = 0; j < i && same == i; j++)
      if (t->v[j].key == im->key && t->v[j].len == im->len && !memcmp(t->v[j].data, im->data, im->len))
        same = j;
    off[i] = same < i ? off[same] : blob_add(w, im->data, im->len);
    fprintf(f, "  {.key = UINT64_C(%" PRIu64 "), .arch = ", im->key);
    put_string(f, im->arch);
    fprintf(f, ", .data = %sblob + %" PRIu64 ", .len = %zu},\n", p, off[i], im->len);
  }
  fprintf(f, "};\nstatic const krt_image_table %simage_table = {%simages, %u};\n\n", p, p, t->n);
  free(off);
}

static kiln_status write_c(kiln_ctx *ctx, const kcg_program *prog, const char *prefix,
                           const char *kernel_prefix, const bool *needed,
                           const kcg_aot_images *images, FILE *c, FILE *blob,
                           uint32_t *entry) {
  writer w = {.c = c, .blob = blob, .prefix = prefix};
  static const char header[ELF_DATA]; /* write_elf's, in the end */
  if (!put(blob, header, sizeof header)) w.failed = true;
  fprintf(c, "/* Generated by `kiln compile`: the lowered program as static tables. */\n"
             "#include <stdint.h>\n#include \"codegen/program.h\"\n%s\n",
          images ? "#include \"runtime/device/device.h\"\n" : "");
  /* The constants: the blob's object (write_elf). */
  fprintf(c, "extern const unsigned char %sblob_start[] __attribute__((visibility(\"hidden\")));\n"
             "#define %sblob ((const void *)%sblob_start)\n\n",
          prefix, prefix, prefix);
  fprintf(c, "static const char *%ssyms[%u] = {", prefix, prog->nsyms ? prog->nsyms : 1);
  for (uint32_t i = 0; i < prog->nsyms; i++) {
    fprintf(c, "%s", i ? ", " : "");
    put_string(c, prog->syms[i]);
  }
  fprintf(c, "};\n\n");
  if (kernel_prefix) {
    for (uint32_t k = 0; k < prog->nkernels; k++)
      if (!needed || needed[k])
        fprintf(c, "__attribute__((visibility(\"hidden\"))) void %s%s(void **, const int64_t *, "
                   "int64_t, int64_t, int32_t *);\n",
                kernel_prefix, prog->kernels[k]->name);
    fprintf(c, "\nstatic const kcg_cpu_fn %sfns[%u] = {", prefix,
            prog->nkernels ? prog->nkernels : 1);
    for (uint32_t k = 0; k < prog->nkernels; k++)
      fprintf(c, "%s%s%s", k ? ", " : "", !needed || needed[k] ? kernel_prefix : "0",
              !needed || needed[k] ? prog->kernels[k]->name : "");
    fprintf(c, "};\n\n");
  } else { /* the kernels run on a device: no CPU functions */
    fprintf(c, "static const kcg_cpu_fn %sfns[%u] = {0};\n\n", prefix,
            prog->nkernels ? prog->nkernels : 1);
  }
  for (uint32_t k = 0; k < prog->nkernels; k++) write_kernel(&w, prog->kernels[k], k);
  fprintf(c, "static kcg_kernel *%skernels[%u] = {", prefix, prog->nkernels ? prog->nkernels : 1);
  for (uint32_t k = 0; k < prog->nkernels; k++) fprintf(c, "%s&%sk%u", k ? ", " : "", prefix, k);
  fprintf(c, "};\n\n");
  *entry = write_program(&w, prog);
  if (images) write_images(&w, images);
  write_elf(&w);
  if (w.failed || ferror(c) || ferror(blob))
    return kir_fail(ctx, KILN_ERR_IO, "kiln compile: writing the generated source failed");
  return KILN_OK;
}

kiln_status kcg_aot_write_c(kiln_ctx *ctx, const kcg_program *prog, const char *prefix,
                            const char *kernel_prefix, const bool *needed, FILE *c, FILE *blob,
                            uint32_t *entry) {
  return write_c(ctx, prog, prefix, kernel_prefix, needed, NULL, c, blob, entry);
}

kiln_status kcg_aot_write_c_gpu(kiln_ctx *ctx, const kcg_program *prog, const char *prefix,
                                const kcg_aot_images *images, FILE *c, FILE *blob,
                                uint32_t *entry) {
  return write_c(ctx, prog, prefix, NULL, NULL, images, c, blob, entry);
}
