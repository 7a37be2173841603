/*
 * aot.c — `kiln compile`: a graph into a self-contained shared object.
 *
 * The steps: legalize and lower the graph (as the JIT does), render its
 * kernels into an ELF object for the target CPU (codegen/llvm_cpu.c), write
 * the program as static C tables plus the model's entry points
 * (codegen/aot.c and here), and link the lot with libkiln_rt.a using the
 * system C compiler. The .so therefore carries the same executor, memory
 * plan and thread pool as the JIT path, and no LLVM. The header lists the
 * inputs and outputs with their dtypes and (symbolic) shapes.
 *
 * A bound parameter (a weight embedded from --params) whose every use rounds
 * it to bf16 — what the bf16 precision policy makes of a matmul's weight —
 * is stored in bf16: the same values in half the bytes, which the GEMM
 * steps then read as they are (codegen/program.h, kcg_gemm.a_bf16).
 *
 * For --target vulkan|cuda|hip (kiln_aot_options.target) the program is
 * lowered as the device's JIT lowers it (krt_device_lower), its device code
 * is compiled now (runtime/driver/aot_gpu.c) and appended to the blob as an image
 * table, and the same five entry points are written over runtime/device/device.h;
 * the .so links libkiln_gpurt.a instead (docs/aot-gpu.md).
 *
 * The generated C includes Kiln's own headers, so the compiler needs them and
 * libkiln_rt.a: where the options (or the environment variables
 * KILN_SOURCE_DIR, KILN_LIB_DIR) say; else an installed Kiln's copy of them
 * (`cmake --install`: LIBDIR/kiln/aot/ and LIBDIR/libkiln_rt.a), found from
 * the file this code was loaded from (libkiln.so in LIBDIR, or a program in
 * BINDIR); else the build that made this library; else the install prefix
 * it was configured with (docs/install.md).
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/aot.h"
#include "codegen/llvm_cpu.h"
#include "runtime/driver/aot_gpu.h"
#include "runtime/exec/rt.h"
#include "kiln/aot.h"
#include "kiln/params.h"
#include "ir/options.h"
#include "passes/mixed_precision.h"
#include "passes/pipeline.h"

extern char **environ;

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif
#ifndef KILN_LIB_DIR
#define KILN_LIB_DIR "."
#endif
/* The install layout relative to the prefix (CMake's GNUInstallDirs), and the configured prefix. */
#ifndef KILN_INSTALL_LIBDIR
#define KILN_INSTALL_LIBDIR "lib"
#endif
#ifndef KILN_INSTALL_FULL_LIBDIR
#define KILN_INSTALL_FULL_LIBDIR "/usr/local/lib"
#endif

typedef struct aot_dirs {
  char src[4096]; /* -I SRC (the internal headers) and -I SRC/include (the public ones) */
  char lib[4096]; /* libkiln_rt.a, libkiln_gpurt.a */
} aot_dirs;

/* out = a + b; false when it does not fit. */
static bool path_join(char *out, size_t size, const char *a, const char *b) {
  int n = snprintf(out, size, "%s%s", a, b);
  return n >= 0 && (size_t)n < size;
}

/* True when LIB/libkiln_rt.a and SRC/runtime/exec/rt.h are both there. */
static bool aot_dirs_try(aot_dirs *d, const char *src, const char *lib) {
  char rt[4096], hdr[4096];
  if (!path_join(rt, sizeof rt, lib, "/libkiln_rt.a") ||
      !path_join(hdr, sizeof hdr, src, "/runtime/exec/rt.h") || access(rt, R_OK) ||
      access(hdr, R_OK))
    return false;
  return path_join(d->src, sizeof d->src, src, "") && path_join(d->lib, sizeof d->lib, lib, "");
}

/* An installed kit beside the file this function was loaded from: IMAGE in LIBDIR or in BINDIR. */
static bool aot_dirs_installed(aot_dirs *d) {
  Dl_info info;
  char dir[4096], src[4096], lib[4096];
  if (!dladdr((void *)aot_dirs_installed, &info) || !info.dli_fname) return false;
  /* A program started through PATH is named by its bare argv[0]: /proc/self/exe names it. */
  ssize_t n;
  if (strchr(info.dli_fname, '/')) {
    if (!realpath(info.dli_fname, dir)) return false;
  } else if ((n = readlink("/proc/self/exe", dir, sizeof dir - 1)) < 0) {
    return false;
  } else {
    dir[n] = 0;
  }
  char *slash = strrchr(dir, '/');
  if (!slash) return false;
  *slash = 0;
  if (path_join(src, sizeof src, dir, "/kiln/aot") && aot_dirs_try(d, src, dir))
    return true; /* libkiln.so in LIBDIR */
  return path_join(lib, sizeof lib, dir, "/../" KILN_INSTALL_LIBDIR) && /* a program in BINDIR */
         path_join(src, sizeof src, lib, "/kiln/aot") && aot_dirs_try(d, src, lib);
}

static kiln_status aot_dirs_find(kiln_ctx *ctx, const kiln_options *o, aot_dirs *d) {
  if (o->source_dir || o->lib_dir) {
    if (path_join(d->src, sizeof d->src, o->source_dir ? o->source_dir : KILN_SOURCE_DIR, "") &&
        path_join(d->lib, sizeof d->lib, o->lib_dir ? o->lib_dir : KILN_LIB_DIR, ""))
      return KILN_OK;
    return kir_fail(ctx, KILN_ERR_INVALID, "kiln compile: KILN_SOURCE_DIR or KILN_LIB_DIR is too long");
  }
  if (aot_dirs_installed(d) || aot_dirs_try(d, KILN_SOURCE_DIR, KILN_LIB_DIR) ||
      aot_dirs_try(d, KILN_INSTALL_FULL_LIBDIR "/kiln/aot", KILN_INSTALL_FULL_LIBDIR))
    return KILN_OK;
  return kir_fail(ctx, KILN_ERR_IO,
                  "kiln compile: neither an installed Kiln (%s/kiln/aot) nor its build tree (%s) "
                  "has Kiln's runtime headers and libkiln_rt.a (set KILN_SOURCE_DIR and KILN_LIB_DIR)",
                  KILN_INSTALL_FULL_LIBDIR, KILN_LIB_DIR);
}

static bool valid_identifier(const char *s) {
  if (!s[0] || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_') return false;
  return true;
}

static void put_type_comment(FILE *f, const kir_module *m, const kir_type *t) {
  char buf[256];
  kir_format_type(m, t, buf, sizeof buf);
  fputs(buf, f);
}

/*
 * NAME_signature(): the inputs and outputs, one per line, "in NAME TYPE" then "out TYPE"
 * ("in x f32[N, 4]\nout f32[N, 3]\n"), for callers that load a .so without its header
 * (kiln.load_so in python/, docs/python.md).
 */
static void write_signature(FILE *c, const char *name, const kir_graph *g, const bool *bound) {
  char buf[256];
  fprintf(c, "\nEXPORT const char *%s_signature(void) {\n  return \"", name);
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_value *v = &g->values[g->params[p]];
    if (bound[p]) continue;
    kir_format_type(g->mod, &v->type, buf, sizeof buf);
    fprintf(c, "in %s %s\\n", v->name && valid_identifier(v->name) ? v->name : "_", buf);
  }
  for (uint32_t r = 0; r < g->nresults; r++) {
    kir_format_type(g->mod, &g->values[g->results[r]].type, buf, sizeof buf);
    fprintf(c, "out %s\\n", buf);
  }
  fprintf(c, "\";\n}\n");
}

/*
 * NAME_run_checked and NAME_output_dims_checked (issue 22 item 9): NAME_run
 * takes each input's dims with no rank, so a caller that passes an array of
 * fewer sizes than the header says has them read past its end. The checked
 * forms take the counts of inputs and outputs and each input's rank (and the
 * room in an output's dims), compare them with the model's, and refuse a
 * mismatch with KILN_ERR_INVALID and a message in NAME_error before
 * delegating to the unchecked entry points, written above for either target.
 */
static void write_checked_entry_points(FILE *c, const char *name, const kir_graph *g,
                                       const bool *bound) {
  uint32_t nin = 0;
  fprintf(c, "\n#include <stdio.h>\n\nstatic const int %s_in_ranks[] = {", name);
  for (uint32_t i = 0; i < g->nparams; i++)
    if (!bound[i]) fprintf(c, "%s%u", nin++ ? ", " : "", g->values[g->params[i]].type.rank);
  fprintf(c, "%s};\nstatic const int %s_out_ranks[] = {", nin ? "" : "0", name);
  for (uint32_t r = 0; r < g->nresults; r++)
    fprintf(c, "%s%u", r ? ", " : "", g->values[g->results[r]].type.rank);
  fprintf(c, "%s};\n\n", g->nresults ? "" : "0");
  fprintf(c,
          "static int %s_check(struct %s_model *m, int n_inputs, const int *input_ranks) {\n"
          "  if (!m) return KILN_ERR_INVALID;\n"
          "  if (n_inputs != %u) {\n"
          "    snprintf(m->ctx.msg, sizeof m->ctx.msg, \"%%d inputs given, the model takes %u\", n_inputs);\n"
          "    return KILN_ERR_INVALID;\n  }\n"
          "  if (n_inputs && !input_ranks) {\n"
          "    snprintf(m->ctx.msg, sizeof m->ctx.msg, \"the array of input ranks is NULL\");\n"
          "    return KILN_ERR_INVALID;\n  }\n"
          "  for (int i = 0; i < n_inputs; i++)\n"
          "    if (input_ranks[i] != %s_in_ranks[i]) {\n"
          "      snprintf(m->ctx.msg, sizeof m->ctx.msg, \"input %%d has rank %%d, the model takes rank %%d\",\n"
          "               i, input_ranks[i], %s_in_ranks[i]);\n"
          "      return KILN_ERR_INVALID;\n    }\n"
          "  return KILN_OK;\n}\n\n",
          name, name, nin, nin, name, name);
  fprintf(c,
          "EXPORT int %s_run_checked(struct %s_model *m, int n_inputs, const void *const *inputs,\n"
          "                          const int *input_ranks, const int64_t *const *input_dims,\n"
          "                          int n_outputs, void *const *outputs) {\n"
          "  int s = %s_check(m, n_inputs, input_ranks);\n"
          "  if (s == KILN_OK && n_outputs != %u) {\n"
          "    snprintf(m->ctx.msg, sizeof m->ctx.msg, \"%%d outputs given, the model has %u\", n_outputs);\n"
          "    s = KILN_ERR_INVALID;\n  }\n"
          "  return s != KILN_OK ? s : %s_run(m, inputs, input_dims, outputs);\n}\n\n",
          name, name, name, g->nresults, g->nresults, name);
  fprintf(c,
          "EXPORT int %s_output_dims_checked(struct %s_model *m, int n_inputs, const int *input_ranks,\n"
          "                                  const int64_t *const *input_dims, int r, int capacity,\n"
          "                                  int64_t *dims) {\n"
          "  int s = %s_check(m, n_inputs, input_ranks);\n"
          "  if (s == KILN_OK && r >= 0 && r < %u && capacity < %s_out_ranks[r]) {\n"
          "    snprintf(m->ctx.msg, sizeof m->ctx.msg, \"output %%d has rank %%d, dims holds %%d\", r,\n"
          "             %s_out_ranks[r], capacity);\n"
          "    s = KILN_ERR_INVALID;\n  }\n"
          "  return s != KILN_OK ? s : %s_output_dims(m, input_dims, r, dims);\n}\n",
          name, name, name, g->nresults, name, name, name);
}

/* The entry points: a thin C layer over runtime/exec/rt.h. */
static void write_entry_points(FILE *c, const char *name, const char *prefix, uint32_t entry,
                               const kir_graph *g, const bool *bound) {
  fprintf(c, "#include <stdlib.h>\n#include \"runtime/exec/rt.h\"\n\n");
  fprintf(c, "static const char *%sparam_names[%u] = {", prefix, g->nparams ? g->nparams : 1);
  for (uint32_t i = 0, k = 0; i < g->nparams; i++) {
    const char *n = g->values[g->params[i]].name;
    if (bound[i]) continue;
    fprintf(c, "%s\"%s\"", k++ ? ", " : "", n && valid_identifier(n) ? n : "");
  }
  fprintf(c, "};\n\n");
  fprintf(c,
          "struct %s_model { kiln_ctx ctx; krt_pool *pool; krt_model *m; };\n"
          "#define EXPORT __attribute__((visibility(\"default\")))\n\n"
          "EXPORT void %s_destroy(struct %s_model *m) {\n"
          "  if (!m) return;\n"
          "  krt_model_destroy(m->m);\n"
          "  krt_pool_destroy(m->pool);\n"
          "  free(m);\n}\n\n"
          "EXPORT int %s_create(struct %s_model **out) {\n"
          "  if (!out) return KILN_ERR_INVALID;\n"
          "  struct %s_model *m = calloc(1, sizeof *m);\n"
          "  *out = NULL;\n"
          "  if (!m) return KILN_ERR_NOMEM;\n"
          "  m->pool = krt_pool_create(0);\n"
          "  kiln_status s = krt_model_create(&m->ctx, &%sp%u, %sfns, m->pool, NULL, &m->m);\n"
          "  if (s == KILN_OK) s = krt_model_set_param_names(m->m, %sparam_names);\n"
          "  if (s != KILN_OK) {\n    %s_destroy(m);\n    return s;\n  }\n"
          "  *out = m;\n  return KILN_OK;\n}\n\n"
          "EXPORT const char *%s_error(const struct %s_model *m) { return m ? m->ctx.msg : \"\"; }\n\n"
          "EXPORT int %s_output_dims(struct %s_model *m, const int64_t *const *input_dims, int r,\n"
          "                          int64_t *dims) {\n"
          "  if (!m || !dims || r < 0 || (uint32_t)r >= %sp%u.nresults) return KILN_ERR_INVALID;\n"
          "  krt_workspace *w;\n"
          "  kiln_status s = krt_prepare(m->m, &m->ctx, input_dims, &w);\n"
          "  if (s != KILN_OK) return s;\n"
          "  krt_result_dims(w, (uint32_t)r, dims);\n"
          "  krt_release(w);\n  return KILN_OK;\n}\n\n"
          "EXPORT int %s_run(struct %s_model *m, const void *const *inputs,\n"
          "                  const int64_t *const *input_dims, void *const *outputs) {\n"
          "  if (!m) return KILN_ERR_INVALID;\n"
          "  m->ctx.msg[0] = 0;\n"
          "  return krt_run(m->m, &m->ctx, input_dims, inputs, outputs);\n}\n",
          name, name, name, name, name, name, prefix, entry, prefix, prefix, name, name, name,
          name, name, prefix, entry, name, name);
}

/*
 * The entry points of a GPU target: the same signatures over runtime/device/device.h.
 * create opens device $KILN_DEVICE_INDEX (0 when unset) of the target's kind;
 * when it fails, NAME_error(NULL) says why (the last failure of the thread).
 */
static void write_gpu_entry_points(FILE *c, const char *name, const char *prefix, uint32_t entry,
                                   krt_device_kind kind, const kir_graph *g, const bool *bound) {
  fprintf(c, "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n");
  fprintf(c, "static const char *%sparam_names[%u] = {", prefix, g->nparams ? g->nparams : 1);
  for (uint32_t i = 0, k = 0; i < g->nparams; i++) {
    const char *n = g->values[g->params[i]].name;
    if (bound[i]) continue;
    fprintf(c, "%s\"%s\"", k++ ? ", " : "", n && valid_identifier(n) ? n : "");
  }
  fprintf(c, "};\n\n");
  fprintf(c,
          "struct %s_model { kiln_ctx ctx; krt_device *d; krt_device_program *dp; };\n"
          "#define EXPORT __attribute__((visibility(\"default\")))\n"
          "static _Thread_local kiln_ctx %screate_error;\n\n"
          "EXPORT void %s_destroy(struct %s_model *m) {\n"
          "  if (!m) return;\n"
          "  krt_device_program_destroy(m->dp);\n"
          "  krt_device_close(m->d);\n"
          "  free(m);\n}\n\n"
          "EXPORT const krt_image_table *%s_images(void) { return &%simage_table; }\n\n"
          "EXPORT int %s_create(struct %s_model **out) {\n"
          "  if (!out) return KILN_ERR_INVALID;\n"
          "  struct %s_model *m = calloc(1, sizeof *m);\n"
          "  *out = NULL;\n"
          "  if (!m) return KILN_ERR_NOMEM;\n"
          "  int index = 0;\n"
          "  const char *e = getenv(\"KILN_DEVICE_INDEX\");\n"
          "  kiln_status s = KILN_OK;\n"
          "  if (e && *e) {\n"
          "    char *end;\n"
          "    long v = strtol(e, &end, 10);\n"
          "    if (*end || v < 0 || v > 1023) {\n"
          "      snprintf(m->ctx.msg, sizeof m->ctx.msg, \"KILN_DEVICE_INDEX='%%s' is not a device index\", e);\n"
          "      s = KILN_ERR_INVALID;\n"
          "    }\n"
          "    index = (int)v;\n"
          "  }\n"
          "  if (s == KILN_OK) s = krt_device_open(&m->ctx, (krt_device_kind)%d, index, &m->d);\n"
          "  if (s == KILN_OK) s = krt_device_program_create(&m->ctx, m->d, &%sp%u, &%simage_table, &m->dp);\n"
          "  if (s == KILN_OK) krt_device_program_set_names(m->dp, %sparam_names);\n"
          "  if (s != KILN_OK) {\n"
          "    memcpy(%screate_error.msg, m->ctx.msg, sizeof m->ctx.msg);\n"
          "    %s_destroy(m);\n    return s;\n  }\n"
          "  *out = m;\n  return KILN_OK;\n}\n\n"
          "EXPORT const char *%s_error(const struct %s_model *m) { return m ? m->ctx.msg : %screate_error.msg; }\n\n"
          "EXPORT int %s_output_dims(struct %s_model *m, const int64_t *const *input_dims, int r,\n"
          "                          int64_t *dims) {\n"
          "  if (!m || !dims || r < 0 || (uint32_t)r >= %sp%u.nresults) return KILN_ERR_INVALID;\n"
          "  m->ctx.msg[0] = 0;\n"
          "  return krt_device_program_result_dims(m->dp, &m->ctx, input_dims, (uint32_t)r, dims);\n}\n\n"
          "EXPORT int %s_run(struct %s_model *m, const void *const *inputs,\n"
          "                  const int64_t *const *input_dims, void *const *outputs) {\n"
          "  if (!m) return KILN_ERR_INVALID;\n"
          "  m->ctx.msg[0] = 0;\n"
          "  return krt_device_program_run(m->dp, &m->ctx, input_dims, inputs, outputs, NULL);\n}\n",
          name, prefix, name, name, name, prefix, name, name, name, (int)kind, prefix, entry,
          prefix, prefix, prefix, name, name, name, prefix, name, name, prefix, entry, name, name);
}

static kiln_status write_header(kiln_ctx *ctx, const char *path, const char *name,
                                const kir_graph *g, const bool *bound, const char *target) {
  FILE *h = fopen(path, "w");
  if (!h) return kir_fail(ctx, KILN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  char upper[80], guard[90];
  size_t i = 0;
  for (; name[i] && i < sizeof upper - 1; i++) upper[i] = (char)toupper((unsigned char)name[i]);
  upper[i] = 0;
  snprintf(guard, sizeof guard, "%s_H", upper);
  fprintf(h, "/*\n * %s.h — generated by `kiln compile`. Entry points of %s.so.\n *\n", name, name);
  fprintf(h, " * Inputs (data in row-major order, dims in input_dims[i]):\n");
  uint32_t ninputs = 0;
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_value *v = &g->values[g->params[p]];
    if (bound[p]) continue;
    fprintf(h, " *   %u: %s ", ninputs++, v->name ? v->name : "");
    put_type_comment(h, g->mod, &v->type);
    fprintf(h, "\n");
  }
  fprintf(h, " * Outputs (caller's memory, sized by %s_output_dims):\n", name);
  for (uint32_t r = 0; r < g->nresults; r++) {
    fprintf(h, " *   %u: ", r);
    put_type_comment(h, g->mod, &g->values[g->results[r]].type);
    fprintf(h, "\n");
  }
  fprintf(h, " * Return values are kiln_status codes: 0 success, 6 a run-time error such as a\n"
             " * wrong input shape (NAME_error() says which). One instance per thread at a time.\n");
  if (target)
    fprintf(h, " * Target %s: the kernels are embedded; %s_create opens device $KILN_DEVICE_INDEX\n"
               " * (default 0) of that kind and fails with 5 where there is none, %s_error(NULL)\n"
               " * saying why (docs/aot-gpu.md).\n",
            target, name, name);
  fprintf(h, " */\n");
  fprintf(h, "#ifndef %s\n#define %s\n\n#include <stdint.h>\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n",
          guard, guard);
  fprintf(h, "enum { %s_NUM_INPUTS = %u, %s_NUM_OUTPUTS = %u };\n\n", upper, ninputs, upper,
          g->nresults);
  fprintf(h, "typedef struct %s_model %s_model;\n\n", name, name);
  fprintf(h, "int %s_create(%s_model **out);\n", name, name);
  fprintf(h, "int %s_output_dims(%s_model *m, const int64_t *const *input_dims, int r, int64_t *dims);\n",
          name, name);
  fprintf(h, "int %s_run(%s_model *m, const void *const *inputs, const int64_t *const *input_dims,\n"
             "          void *const *outputs);\n", name, name);
  fprintf(h, "/* The same with the counts of inputs and outputs and each input's rank (and for\n"
             "   output_dims, how many sizes dims holds) checked against the model's: a mismatch\n"
             "   returns 1 with a message in %s_error, where the unchecked forms would read or\n"
             "   write past the caller's arrays. */\n", name);
  fprintf(h, "int %s_run_checked(%s_model *m, int n_inputs, const void *const *inputs,\n"
             "                  const int *input_ranks, const int64_t *const *input_dims,\n"
             "                  int n_outputs, void *const *outputs);\n", name, name);
  fprintf(h, "int %s_output_dims_checked(%s_model *m, int n_inputs, const int *input_ranks,\n"
             "                          const int64_t *const *input_dims, int r, int capacity,\n"
             "                          int64_t *dims);\n", name, name);
  fprintf(h, "const char *%s_error(const %s_model *m);\n", name, name);
  fprintf(h, "/* The inputs and outputs, a line each: \"in NAME TYPE\", then \"out TYPE\". */\n");
  fprintf(h, "const char *%s_signature(void);\n", name);
  fprintf(h, "void %s_destroy(%s_model *m);\n\n#ifdef __cplusplus\n}\n#endif\n#endif\n", name, name);
  bool bad = ferror(h);
  if (fclose(h) || bad) return kir_fail(ctx, KILN_ERR_IO, "%s: write failed", path);
  return KILN_OK;
}

/* Whether every use of f32 parameter p of the entry is a cast to bf16 (and there is one). */
static bool only_rounded_to_bf16(const kir_graph *g, uint32_t p) {
  uint32_t v = g->params[p];
  if (g->values[v].type.dtype != KILN_F32) return false;
  for (uint32_t r = 0; r < g->nresults; r++)
    if (g->results[r] == v) return false;
  bool used = false;
  for (uint32_t i = 0; i < g->ninsts; i++) {
    const kir_inst *in = &g->insts[i];
    for (uint32_t j = 0; j < in->nin; j++) {
      if (in->in[j] != v) continue;
      if (in->op != KIR_OP_cast || in->attrs[0].i != KILN_BF16) return false;
      used = true;
    }
  }
  return used;
}

/* A cast to the dtype its operand has already is that operand. */
static kp_action drop_identity_cast(kp_rebuild *rb, kir_graph *ng, const kir_inst *inst,
                                    const uint32_t *in, uint32_t *out) {
  (void)rb;
  if (inst->op != KIR_OP_cast || ng->values[in[0]].type.dtype != (kir_dtype)inst->attrs[0].i)
    return KP_KEEP;
  out[0] = in[0];
  return KP_REPLACED;
}

/*
 * g with the parameters that `params` binds and that are only ever rounded
 * to bf16 taking bf16 themselves (low[p] set), their casts gone; g itself
 * (not a copy) when there are none. NULL on failure.
 */
static kir_graph *bf16_weights(kir_graph *g, const kiln_params *params, bool *low,
                               const kiln_options *o) {
  if (!kir_switch_on(o->aot_bf16_weights, true)) return g; /* off: keep f32, for comparing */
  bool any = false;
  for (uint32_t p = 0; params && p < g->nparams; p++) {
    const char *n = g->values[g->params[p]].name;
    low[p] = n && kiln_params_find(params, n) && only_rounded_to_bf16(g, p);
    any |= low[p];
  }
  if (!any) return g;
  kir_graph *copy = kp_rebuild_module(g, NULL, NULL);
  if (!copy) return NULL;
  for (uint32_t p = 0; p < copy->nparams; p++)
    if (low[p]) copy->values[copy->params[p]].type.dtype = KILN_BF16;
  kir_graph *ng = kp_rebuild_module(copy, drop_identity_cast, NULL);
  kiln_graph_destroy(copy);
  return ng;
}

/*
 * Turns the entry parameters named in `params` into constant buffers holding
 * the file's data (rounded to bf16 where low[p]), and renumbers the remaining
 * inputs. Sets bound[p].
 */
static kiln_status bind_params(kiln_ctx *ctx, kcg_program *prog, const kir_graph *g,
                               const kiln_params *params, const bool *low, kir_arena *arena,
                               bool *bound) {
  for (size_t i = 0; i < kiln_params_count(params); i++) {
    const char *n = kiln_params_name(params, i);
    bool found = false;
    for (uint32_t p = 0; p < g->nparams; p++) {
      const char *pn = g->values[g->params[p]].name;
      found |= pn && !strcmp(pn, n);
    }
    if (!found)
      return kir_fail(ctx, KILN_ERR_INVALID,
                      "kiln compile: the parameter file has '%s', which the model does not take", n);
  }
  uint32_t next = 0;
  for (uint32_t p = 0; p < g->nparams; p++) {
    const kir_value *v = &g->values[g->params[p]];
    const kiln_tensor *t = v->name ? kiln_params_find(params, v->name) : NULL;
    kcg_pbuf *b = &prog->bufs[prog->params[p]];
    if (!t) {
      b->index = next;
      prog->params[next++] = prog->params[p];
      continue;
    }
    char want[160];
    kir_format_type(g->mod, &v->type, want, sizeof want);
    bool same = kiln_tensor_dtype(t) == v->type.dtype && kiln_tensor_rank(t) == v->type.rank;
    for (int d = 0; same && d < v->type.rank; d++) same = kiln_tensor_dim(t, (size_t)d) == v->type.dims[d];
    if (!same)
      return kir_fail(ctx, KILN_ERR_INVALID,
                      "kiln compile: parameter '%s' is %s in the model, but the file holds a %s "
                      "tensor of rank %zu with other dims",
                      v->name, want, kiln_dtype_name(kiln_tensor_dtype(t)), kiln_tensor_rank(t));
    void *copy = kir_arena_alloc(arena, kiln_tensor_nbytes(t) + 1);
    if (!copy) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    if (low[p]) { /* f32 (checked above) rounded as the casts it replaces round */
      const float *f = kiln_tensor_cdata(t);
      for (size_t i = 0; i < kiln_tensor_numel(t); i++) ((uint16_t *)copy)[i] = kir_f64_to_bf16(f[i]);
    } else {
      memcpy(copy, kiln_tensor_cdata(t), kiln_tensor_nbytes(t));
    }
    b->kind = KCG_PBUF_CONST;
    b->data = copy;
    bound[p] = true;
  }
  prog->nparams = next;
  return KILN_OK;
}

static kiln_status run_cc(kiln_ctx *ctx, char *const *argv) {
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
  if (rc) return kir_fail(ctx, KILN_ERR_IO, "kiln compile: cannot run %s: %s", argv[0], strerror(rc));
  int status;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
    return kir_fail(ctx, KILN_ERR_IO, "kiln compile: %s failed to link the shared object", argv[0]);
  return KILN_OK;
}

static void no_kernel(void **bufs, const int64_t *sizes, int64_t lo, int64_t hi, int32_t *err) {
  (void)bufs, (void)sizes, (void)lo, (void)hi, (void)err;
}

/* The memory plan's peak (arena, inputs, results, constants) when every input dim is constant. */
static kiln_status plan_peak(kiln_ctx *ctx, const kcg_program *prog, size_t *peak) {
  *peak = 0;
  const int64_t **dims = calloc(prog->nparams + 1u, sizeof *dims);
  kcg_cpu_fn *fns = calloc(prog->nkernels + 1u, sizeof *fns);
  if (!dims || !fns) {
    free(dims), free(fns);
    return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  }
  bool fixed = true;
  for (uint32_t p = 0; p < prog->nparams; p++) {
    const kir_type *t = &prog->bufs[prog->params[p]].type;
    for (int d = 0; d < t->rank; d++) fixed &= !KIR_DIM_IS_SYM(t->dims[d]);
    dims[p] = t->dims;
  }
  for (uint32_t k = 0; k < prog->nkernels; k++) fns[k] = no_kernel; /* planned, never run */
  krt_model *m = NULL;
  krt_workspace *w = NULL;
  kiln_status s = fixed ? krt_model_create(ctx, prog, fns, NULL, NULL, &m) : KILN_OK;
  if (fixed && !s) s = krt_prepare(m, ctx, dims, &w);
  if (w) *peak = krt_workspace_total(w);
  krt_release(w);
  krt_model_destroy(m);
  free(dims), free(fns);
  return s;
}

/* Whether `name` is an executable file in a folder of $PATH. */
static bool on_path(const char *name) {
  const char *path = getenv("PATH");
  char file[4200];
  for (const char *p = path; p && *p;) {
    size_t n = strcspn(p, ":");
    if (n && n < 4000) {
      snprintf(file, sizeof file, "%.*s/%s", (int)n, p, name);
      if (!access(file, X_OK)) return true;
    }
    p += n + (p[n] == ':');
  }
  return false;
}

/*
 * Links the generated C with a runtime library into opt->output. With the default compiler and
 * LLVM's linker on PATH (Debian's lld), the link is lld's: GNU ld took 3.4 of the 12.7 s
 * `kiln compile` spent on GPT-2's 620 MB of constants, lld 0.3 s.
 */
static kiln_status link_so(kiln_ctx *ctx, const kiln_aot_options *opt, const char *csrc,
                           const char *consts, const char *obj, bool gpu) {
  kiln_options o;
  kir_options_resolve(kir_ctx_opts(ctx), opt->options, &o);
  aot_dirs dirs;
  kiln_status found = aot_dirs_find(ctx, &o, &dirs);
  if (found) return found;
  char inc_src[4200], inc_api[4200], rtlib[4200];
  snprintf(inc_src, sizeof inc_src, "-I%s", dirs.src);
  snprintf(inc_api, sizeof inc_api, "-I%s/include", dirs.src);
  snprintf(rtlib, sizeof rtlib, "%s/%s", dirs.lib, gpu ? "libkiln_gpurt.a" : "libkiln_rt.a");
  if (access(rtlib, R_OK))
    return kir_fail(ctx, KILN_ERR_IO, "kiln compile: %s is missing (set KILN_LIB_DIR)", rtlib);
  const char *cc = opt->cc ? opt->cc : o.cc ? o.cc : "cc";
  /* "-w" where lld is not used: an empty argument would be a file name */
  char *ld = !opt->cc && !o.cc && on_path("ld.lld") ? "-fuse-ld=lld" : "-w";
  char *cpu_argv[] = {(char *)cc, "-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
                      "-w", ld, inc_src, inc_api, "-o", (char *)opt->output, (char *)csrc,
                      (char *)consts, (char *)obj, rtlib, "-lopenblas", "-lm", "-lpthread", NULL};
  /* The devices' libraries are dlopen'ed at run time: the .so links none. The runtime's own
     public symbols (kiln_*) stay hidden: only the entry points are exported. */
  char *gpu_argv[] = {(char *)cc, "-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
                      "-w", ld, inc_src, inc_api, "-o", (char *)opt->output, (char *)csrc,
                      (char *)consts, rtlib, "-Wl,--exclude-libs,ALL", "-lm", "-ldl", "-lpthread",
                      NULL};
  return run_cc(ctx, gpu ? gpu_argv : cpu_argv);
}

/* --target vulkan|cuda|hip: the program's tables, its device code, entry points over device.h. */
static kiln_status compile_gpu(kiln_ctx *ctx, const kiln_aot_options *opt, const char *name,
                               krt_device_kind kind, const kcg_program *prog, const kir_graph *g,
                               const bool *bound) {
  kcg_aot_images images = {0};
  char csrc[4200], blob[4200], tprefix[80];
  snprintf(csrc, sizeof csrc, "%s.tables.c", opt->output);
  snprintf(blob, sizeof blob, "%s.consts.o", opt->output);
  snprintf(tprefix, sizeof tprefix, "kiln_%s_", name);
  kiln_status s = krt_aot_capture(ctx, kind, prog, &images);
  if (s == KILN_OK && opt->embedded && opt->embedded_size)
    krt_aot_describe(kind, &images, opt->embedded, opt->embedded_size);
  FILE *c = s == KILN_OK ? fopen(csrc, "w") : NULL, *b = c ? fopen(blob, "wb") : NULL;
  if (s == KILN_OK && (!c || !b)) s = kir_fail(ctx, KILN_ERR_IO, "%s: cannot write: %s", csrc, strerror(errno));
  uint32_t entry = 0;
  if (s == KILN_OK) s = kcg_aot_write_c_gpu(ctx, prog, tprefix, &images, c, b, &entry);
  if (s == KILN_OK) write_gpu_entry_points(c, name, tprefix, entry, kind, g, bound);
  if (s == KILN_OK) write_signature(c, name, g, bound);
  if (s == KILN_OK) write_checked_entry_points(c, name, g, bound);
  bool werr = c && fclose(c) != 0;
  werr |= b && fclose(b) != 0;
  if (s == KILN_OK && werr) s = kir_fail(ctx, KILN_ERR_IO, "%s: write failed", csrc);
  if (s == KILN_OK && opt->header) s = write_header(ctx, opt->header, name, g, bound, opt->target);
  if (s == KILN_OK) s = link_so(ctx, opt, csrc, blob, NULL, true);
  if (!opt->keep_temps) {
    remove(csrc);
    remove(blob);
  }
  kcg_aot_images_free(&images);
  return s;
}

KILN_API kiln_status kiln_compile_shared(kiln_graph *g, const kiln_aot_options *opt) {
  kiln_ctx *ctx = g->mod->ctx;
  if (!opt || !opt->output) return kir_fail(ctx, KILN_ERR_INVALID, "kiln compile: no output path");
  const char *name = opt->name ? opt->name : "model";
  if (!valid_identifier(name) || strlen(name) > 64)
    return kir_fail(ctx, KILN_ERR_INVALID, "kiln compile: the model name '%s' is not a C identifier",
                    name);
  /* The target: the CPU, or a GPU device whose code is embedded (runtime/driver/aot_gpu.c). */
  bool gpu = opt->target && strcmp(opt->target, "cpu");
  static const char *const targets[] = {[KRT_DEVICE_VULKAN] = "vulkan", [KRT_DEVICE_CUDA] = "cuda",
                                         [KRT_DEVICE_HIP] = "hip"};
  int t = 0;
  while (gpu && t < KRT_DEVICE_KIND_COUNT && strcmp(targets[t], opt->target)) t++;
  krt_device_kind kind = (krt_device_kind)t;
  if (gpu && t == KRT_DEVICE_KIND_COUNT)
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "kiln compile: unknown target '%s' (cpu, vulkan, cuda or hip)", opt->target);
  if (opt->embedded && opt->embedded_size) opt->embedded[0] = 0;
  kiln_status s = kir_verify(g);
  if (s != KILN_OK) return s;
  bool *low = calloc(g->nparams + 1, sizeof *low), *needed = NULL;
  if (!low) return kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
  /* The pipeline's options: the model's over the context's and the environment's. */
  kp_pipeline_options po;
  kp_pipeline_options_init(&po, g, opt->options);
  if (opt->precision && !kp_precision_parse(opt->precision, &po.precision)) {
    free(low);
    return kir_fail(ctx, KILN_ERR_INVALID,
                    "unknown precision '%s' (fp64, fp32, tf32, bf16 or fp16)", opt->precision);
  }
  /*
   * A GPU target lowers as the device's JIT does (runtime/device/device.c), below. On the CPU the
   * precision policy comes first, so that the weights it only rounds to bf16 are stored so.
   */
  kir_graph *pg = g, *src = NULL, *legal = NULL;
  if (!gpu && po.precision != KP_PREC_FP32) {
    pg = kp_mixed_precision(g, po.precision);
    po.precision = KP_PREC_FP32;
  }
  src = gpu || !pg ? NULL : bf16_weights(pg, opt->params, low, &po.opts);
  if (src) s = kp_pipeline_run("cpu", src, &po, &legal);
  if (src != pg) kiln_graph_destroy(src);
  if (pg != g) kiln_graph_destroy(pg);
  if (!legal && !gpu) {
    free(low);
    if (!s) s = kiln_ctx_status(ctx);
    return s ? s : KILN_ERR_UNSUPPORTED;
  }
  kir_arena arena = {0};
  kcg_program *prog = NULL;
  bool *bound = NULL;
  char tmp[4096 + 32], obj[4200], csrc[4200], blob[4200];
  if (gpu) {
    s = krt_device_lower(ctx, kind, g, &po, &arena, &prog);
  } else {
    kcg_lower_options lo;
    kcg_lower_options_for(&po.opts, &lo);
    s = kcg_lower_target(ctx, legal, &arena, &lo, &prog);
  }
  if (s != KILN_OK) goto done;
  /* Kernel symbols: <name>_k<index>, whatever lowering called them. */
  for (uint32_t k = 0; k < prog->nkernels; k++) {
    char kn[32];
    snprintf(kn, sizeof kn, "k%u", k);
    prog->kernels[k]->name = kir_arena_strdup(&arena, kn);
    if (!prog->kernels[k]->name) {
      s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
      goto done;
    }
  }
  bound = calloc(g->nparams + 1, sizeof *bound);
  if (!bound) {
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  if (opt->params && (s = bind_params(ctx, prog, g, opt->params, low, &arena, bound)) != KILN_OK)
    goto done;
  if (opt->peak_bytes && gpu) *opt->peak_bytes = 0;
  if (opt->peak_bytes && !gpu && (s = plan_peak(ctx, prog, opt->peak_bytes)) != KILN_OK) goto done;
  if (gpu) {
    s = compile_gpu(ctx, opt, name, kind, prog, g, bound);
    goto done;
  }
  snprintf(tmp, sizeof tmp, "%s", opt->output);
  snprintf(obj, sizeof obj, "%s.kernels.o", tmp);
  snprintf(csrc, sizeof csrc, "%s.tables.c", tmp);
  snprintf(blob, sizeof blob, "%s.consts.o", tmp);
  char kprefix[80], tprefix[80];
  snprintf(kprefix, sizeof kprefix, "%s_", name);
  snprintf(tprefix, sizeof tprefix, "kiln_%s_", name);
  kcg_cpu_options copt = {.cpu = opt->target_cpu};
  /* only the kernels a step may call (krt_kernels_needed): the rest get no function */
  needed = calloc(prog->nkernels + 1u, sizeof *needed);
  kcg_kernel **ks = calloc(prog->nkernels + 1u, sizeof *ks);
  uint32_t nk = 0;
  if (!needed || !ks) {
    free(ks);
    s = kir_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    goto done;
  }
  krt_kernels_needed(prog, &po.opts, needed);
  for (uint32_t k = 0; k < prog->nkernels; k++)
    if (needed[k]) ks[nk++] = prog->kernels[k];
  s = kcg_cpu_emit_object(ctx, ks, nk, &copt, kprefix, obj);
  free(ks);
  if (s != KILN_OK) goto done;
  FILE *c = fopen(csrc, "w"), *b = fopen(blob, "wb");
  if (!c || !b) {
    if (c) fclose(c);
    if (b) fclose(b);
    s = kir_fail(ctx, KILN_ERR_IO, "%s: cannot write: %s", csrc, strerror(errno));
    goto done;
  }
  uint32_t entry = 0;
  s = kcg_aot_write_c(ctx, prog, tprefix, kprefix, needed, c, b, &entry);
  if (s == KILN_OK) write_entry_points(c, name, tprefix, entry, g, bound);
  if (s == KILN_OK) write_signature(c, name, g, bound);
  if (s == KILN_OK) write_checked_entry_points(c, name, g, bound);
  bool werr = fclose(c) != 0;
  werr |= fclose(b) != 0;
  if (s == KILN_OK && werr) s = kir_fail(ctx, KILN_ERR_IO, "%s: write failed", csrc);
  if (s == KILN_OK && opt->header) s = write_header(ctx, opt->header, name, g, bound, NULL);
  if (s == KILN_OK) s = link_so(ctx, opt, csrc, blob, obj, false);
  if (!opt->keep_temps) {
    remove(obj);
    remove(csrc);
    remove(blob);
  }
done:
  free(needed);
  free(low);
  free(bound);
  kir_arena_free(&arena);
  kiln_graph_destroy(legal);
  return s;
}
