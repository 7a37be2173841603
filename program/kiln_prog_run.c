/*
 * kiln_prog_run.c — kiln_program_run: reads a .kiln file, parses it as a program, binds
 * the tensors given with --input (the names the file declares with `input NAME: TYPE`,
 * checked against the type, and any other name the file uses), runs its statements in
 * order with the evaluator and the program's hooks, and frees what the run made.
 */
#include "program/kiln_prog.h"

/* ------------------------------------------------------------- running a program */

static kiln_status read_text(kiln_ctx *ctx, const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return kir_fail(ctx, KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0, got;
  do {
    if (n == cap) {
      char *p = realloc(buf, cap = cap ? 2 * cap : 4096);
      if (!p) {
        free(buf);
        fclose(f);
        return kir_fail(ctx, KILN_ERR_NOMEM, "%s: out of memory", path);
      }
      buf = p;
    }
    n += got = fread(buf + n, 1, cap - n, f);
  } while (got);
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return kir_fail(ctx, KILN_ERR_IO, "%s: read error", path);
  }
  *out = buf, *len = n;
  return KILN_OK;
}

/* An input's tensor as the program holds it: float types become f64. */
static kiln_status take_input(ke_eval *e, const char *name, const kiln_tensor *in, kv *out) {
  kiln_dtype t = kiln_tensor_dtype(in);
  bool fl = t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_F64;
  size_t r = kiln_tensor_rank(in);
  int64_t dims[KIR_MAX_RANK];
  for (size_t i = 0; i < r; i++)
    dims[i] = kiln_tensor_dim(in, i);
  kiln_tensor *c = kprog_new_host(e, fl ? KILN_F64 : t, r, dims);
  if (!c) return kir_fail(e->ctx, KILN_ERR_NOMEM, "input %s: out of memory", name);
  if (fl)
    for (size_t i = 0; i < kiln_tensor_numel(in); i++)
      kiln_tensor_set(c, i, kiln_tensor_get(in, i));
  else
    memcpy(kiln_tensor_data(c), kiln_tensor_cdata(in), kiln_tensor_nbytes(in));
  *out = mk_host(c);
  return KILN_OK;
}

static kiln_status bind_input(ke_eval *e, const char *file, const kf_stmt *st,
                              const kiln_program_options *o, const ke_bind **env) {
  size_t i = 0;
  while (i < o->n_inputs && strcmp(o->input_names[i], st->name))
    i++;
  if (i == o->n_inputs)
    return kir_fail(e->ctx, KILN_ERR_INVALID,
                    "%s:%u:%u: error: input '%s' has no value: give it with --input %s=FILE.npy",
                    file, st->line, st->col, st->name, st->name);
  const kiln_tensor *t = o->inputs[i];
  bool ok = !st->type.is_graph && kiln_tensor_rank(t) == st->type.rank;
  for (uint32_t d = 0; ok && d < st->type.rank; d++)
    ok = st->type.dims[d].sym || st->type.dims[d].n == kiln_tensor_dim(t, d);
  if (!ok)
    return kir_fail(e->ctx, KILN_ERR_INVALID,
                    "%s:%u:%u: error: input '%s' does not have the shape this 'input' statement "
                    "declares", file, st->line, st->col, st->name);
  kv v;
  kiln_status s = take_input(e, st->name, t, &v);
  if (s == KILN_OK && !(*env = ke_bind_new(e, *env, st->name, v, false)))
    s = kir_fail(e->ctx, KILN_ERR_NOMEM, "out of memory");
  return s;
}

static kiln_status run_program(ke_eval *e, const kf_module *m, const kiln_program_options *o) {
  const ke_bind *env = NULL;
  for (size_t i = 0; i < o->n_inputs; i++) { /* names the file uses without declaring them */
    bool declared = false;
    for (uint32_t k = 0; k < m->nstmts && !declared; k++)
      declared = m->stmts[k].kind == KF_STMT_INPUT && !strcmp(m->stmts[k].name, o->input_names[i]);
    if (declared) continue;
    kv v;
    kiln_status s = take_input(e, o->input_names[i], o->inputs[i], &v);
    if (s != KILN_OK) return s;
    if (!(env = ke_bind_new(e, env, o->input_names[i], v, false)))
      return kir_fail(e->ctx, KILN_ERR_NOMEM, "out of memory");
  }
  for (uint32_t i = 0; i < m->nstmts; i++) {
    const kf_stmt *st = &m->stmts[i];
    kv ret;
    bool returned = false;
    kiln_status s = st->kind == KF_STMT_INPUT ? bind_input(e, m->file, st, o, &env)
                                              : ke_exec_stmt(e, &env, st, &ret, &returned);
    if (s != KILN_OK) return s;
  }
  if (m->model) {
    kv v;
    return ke_eval_node(e, env, m->model, &v);
  }
  return KILN_OK;
}

KILN_API kiln_status kiln_program_run(kiln_ctx *ctx, const char *path, kiln_program_options *opt,
                                      int *is_program) {
  if (!path || !opt)
    return kir_fail(ctx, KILN_ERR_INVALID, "kiln_program_run: no path or options");
  if (is_program) *is_program = 0;
  char *text = NULL;
  size_t len = 0;
  kiln_status s = read_text(ctx, path, &text, &len);
  if (s != KILN_OK) return s;
  kiln_model_file *mf = calloc(1, sizeof *mf);
  ke_shared *sh = calloc(1, sizeof *sh);
  if (!mf || !sh) {
    free(text), free(mf), free(sh);
    return kir_fail(ctx, KILN_ERR_NOMEM, "%s: out of memory", path);
  }
  sh->refs = 1;
  mf->sh = sh;
  kf_module *m = NULL;
  s = kf_parse_program(ctx, text, len, path, &sh->ast, &m);
  free(text);
  ke_prog P = {.backend = opt->backend, .device = opt->device, .out = opt->out ? opt->out : stdout,
               .comm = opt->comm, .rank0 = kiln_comm_rank(opt->comm) == 0};
  if (s == KILN_OK && (m->program || opt->force)) {
    if (is_program) *is_program = 1;
    ke_eval e = {.ctx = ctx, .sh = sh, .arena = &sh->vals, .mf = mf, .prog = &P,
                 .hooks = kprog_hooks(), .fuel = PROG_FUEL};
    s = run_program(&e, m, opt);
    fflush(P.out);
  }
  opt->graphs_run = P.runs;
  opt->info = P.info;
  for (size_t i = 0; i < P.npool; i++)
    kiln_tensor_destroy(P.pool[i]);
  free(P.pool);
  kprog_free_opts(&P);
  kiln_model_file_destroy(mf);
  return s;
}
