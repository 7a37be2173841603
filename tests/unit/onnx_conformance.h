/*
 * onnx_conformance.h — part 3 of test_onnx.c: ONNX's own backend tests, run in worker processes.
 *
 * Two collections of tests, each a set of suites (folders of test_<name>/ with model.onnx and
 * test_data_set_N/{input,output}_K.pb):
 *   - Debian's libonnx-testdata 1.12 (node, pytorch-converted, pytorch-operator, simple under
 *     /usr/share/libonnx-testdata/data), run by default;
 *   - the node tests of the onnx release tools/setup.sh pins (suite "node-VERSION"), which
 *     setup.sh generates from pip's wheel (tools/onnx_node_data.py) into
 *     build-onnx-node/onnx-VERSION/node/ (KILN_ONNX_NODE_DATA, from tests/CMakeLists.txt).
 * Each model is imported, compiled (LLVM, the `compiled` backend, O1), run on every
 * test_data_set_N and compared with ONNX's tolerances (|got - want| <= 1e-7 + 1e-3 |want|, NaN
 * matching NaN). A test is *pass*, *wrong* (values outside the tolerance, or an error other than
 * KILN_ERR_UNSUPPORTED), *unsupported* (import or compilation says KILN_ERR_UNSUPPORTED) or
 * *crash* (the process died in it, or ran past TEST_SECONDS).
 *
 * The tests run in a forked worker that reports each result through a pipe; when the worker
 * dies, the test it was in is a crash and a fresh worker goes on with the next, so a crash costs
 * one test, not the run (KILN_ONNX_FORK=0 runs them in this process, for a debugger).
 *
 * The gate, per suite: tests/fixtures/onnx_conformance/SUITE.pass lists the tests that pass, and
 * SUITE.wrong the tests known to be wrong, each with its reason. This test fails when a listed
 * test no longer passes, when a test is wrong and not in SUITE.wrong, and on any crash; a test
 * that passes and is not listed is a note asking to list it (KILN_ONNX_PASS_OUT=DIR writes the
 * lists of what passed). It prints pass / wrong / unsupported / crash per op; with
 * $KILN_ONNX_SUMMARY set it also writes those tables as markdown (docs/onnx.md holds a copy).
 */
#ifndef KILN_TESTS_ONNX_CONFORMANCE_H
#define KILN_TESTS_ONNX_CONFORMANCE_H

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "ir/kir.h"


#define DEBIAN_DATA "/usr/share/libonnx-testdata/data"
#define FIXTURES KILN_SOURCE_DIR "/tests/fixtures/onnx_conformance"
#define TEST_SECONDS 300 /* a test still running after this is a crash (a hang) */
#define MAX_OPS 512

typedef enum { R_PASS, R_WRONG, R_UNSUPPORTED, R_CRASH, R_COUNT } result;

typedef struct suite_def {
  const char *name; /* in KILN_ONNX_SUITES and the fixtures' file names */
  const char *root; /* the folder of its test_* folders */
  int collection;   /* the table it is counted in: collections[] */
  bool node;        /* its float-typed tests count in the coverage line */
} suite_def;

static const char *const collections[] = {
    "Debian 12, libonnx-testdata 1.12.0 (`" DEBIAN_DATA "`)",
    "onnx " KILN_ONNX_NODE_VERSION "'s node tests, generated from pip's wheel by `tools/setup.sh` "
    "(`build-onnx-node/onnx-" KILN_ONNX_NODE_VERSION "/node`)",
};

static const suite_def suites[] = {
    {"node", DEBIAN_DATA "/node", 0, true},
    {"pytorch-converted", DEBIAN_DATA "/pytorch-converted", 0, false},
    {"pytorch-operator", DEBIAN_DATA "/pytorch-operator", 0, false},
    {"simple", DEBIAN_DATA "/simple", 0, false},
    {"node-" KILN_ONNX_NODE_VERSION, KILN_ONNX_NODE_DATA "/node", 1, true},
};

typedef struct op_stat {
  char name[64];
  int n[R_COUNT];
} op_stat;

typedef struct summary {
  op_stat ops[MAX_OPS];
  int nops;
  int n[R_COUNT];
  int float_node, float_node_supported;
  int frozen; /* float node tests run with operands frozen at import */
} summary;

static op_stat *stat_of(summary *s, const char *name) {
  for (int k = 0; k < s->nops; k++)
    if (!strcmp(s->ops[k].name, name)) return &s->ops[k];
  if (s->nops == MAX_OPS) return &s->ops[MAX_OPS - 1];
  op_stat *o = &s->ops[s->nops++];
  snprintf(o->name, sizeof o->name, "%s", name);
  return o;
}

/* The op a test is about: the longest op type that starts its name (test_reduce_sum_... ->
   ReduceSum), else its last op. */
static void primary_op(const char *test, const char *ops, char *out, size_t cap) {
  char flat[256];
  size_t m = 0;
  for (const char *p = test + 5; *p && m + 1 < sizeof flat; p++)
    if (*p != '_') flat[m++] = (char)(*p | 0x20);
  flat[m] = 0;
  size_t best = 0;
  const char *last = ops;
  out[0] = 0;
  for (const char *p = ops; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    last = p;
    bool prefix = len <= m;
    for (size_t k = 0; prefix && k < len; k++) prefix = (char)(p[k] | 0x20) == flat[k];
    if (prefix && len > best && len < cap) {
      best = len;
      memcpy(out, p, len);
      out[len] = 0;
    }
    p = e ? e + 1 : p + len;
  }
  if (!best) {
    size_t len = strcspn(last, ",");
    if (len >= cap) len = cap - 1;
    memcpy(out, last, len);
    out[len] = 0;
  }
}

/* ONNX's tolerances, as its backend test runner (onnx/backend/test/runner) compares: |got - want|
   <= atol + rtol |want| with atol 1e-7 and rtol 1e-3, or 2^-6 (two ulps) for bfloat16 outputs. */
static bool close_enough(const kiln_tensor *got, const kiln_tensor *want, char *why, size_t cap) {
  const double rtol = kiln_tensor_dtype(want) == KILN_BF16 ? 0x1p-6 : 1e-3;
  if (kiln_tensor_rank(got) != kiln_tensor_rank(want)) {
    snprintf(why, cap, "rank %zu, want %zu", kiln_tensor_rank(got), kiln_tensor_rank(want));
    return false;
  }
  for (size_t k = 0; k < kiln_tensor_rank(got); k++)
    if (kiln_tensor_dim(got, k) != kiln_tensor_dim(want, k)) {
      snprintf(why, cap, "dim %zu is %lld, want %lld", k, (long long)kiln_tensor_dim(got, k),
               (long long)kiln_tensor_dim(want, k));
      return false;
    }
  for (size_t k = 0; k < kiln_tensor_numel(want); k++) {
    double a = kiln_tensor_get(got, k), b = kiln_tensor_get(want, k);
    if (isnan(a) && isnan(b)) continue;
    if (a == b) continue;
    if (!(fabs(a - b) <= 1e-7 + rtol * fabs(b))) {
      snprintf(why, cap, "element %zu is %.9g, want %.9g", k, a, b);
      return false;
    }
  }
  return true;
}

/* The tensors dir/prefix_0.pb, prefix_1.pb, ... (at most cap). */
static size_t read_pbs(kiln_ctx *ctx, const char *dir, const char *prefix, kiln_tensor **out,
                       size_t cap, bool *ok) {
  size_t n = 0;
  *ok = true;
  for (; n < cap; n++) {
    char path[800];
    snprintf(path, sizeof path, "%s/%s_%zu.pb", dir, prefix, n);
    struct stat st;
    if (stat(path, &st)) break;
    if (kiln_onnx_read_tensor(ctx, path, &out[n]) != KILN_OK) {
      *ok = false;
      break;
    }
  }
  return n;
}


/* ONNX 1.12's test data (Debian's libonnx-testdata) holds bfloat16 tensors as UINT16 bit
   patterns, which Kiln reads as u16 since it has that dtype: where the model says bf16, such
   a tensor is taken as the bf16 of its bits. */
static void as_bf16(kiln_ctx *ctx, kiln_tensor **t) {
  if (!*t || kiln_tensor_dtype(*t) != KILN_U16) return;
  size_t r = kiln_tensor_rank(*t);
  int64_t d[KILN_MAX_RANK];
  for (size_t k = 0; k < r; k++) d[k] = kiln_tensor_dim(*t, k);
  kiln_tensor *b = NULL;
  if (kiln_tensor_create(ctx, KILN_BF16, r, d, &b) != KILN_OK) return;
  memcpy(kiln_tensor_data(b), kiln_tensor_cdata(*t), kiln_tensor_nbytes(b));
  kiln_tensor_destroy(*t);
  *t = b;
}

/* as_bf16 on the n inputs (params) and m expected results where g's types are bf16; false
   (with why) when an input's rank contradicts the model's (ONNX 1.12's CastLike data gives
   `like` one element where the model declares [3, 4]): the data are unusable, as when their
   count differs. */
static bool fit_data(kiln_ctx *ctx, const kiln_graph *g, kiln_tensor **in, size_t n,
                     kiln_tensor **want, size_t m, char *why, size_t cap) {
  for (size_t k = 0; k < n && k < g->nparams; k++) {
    const kir_type *t = &g->values[g->params[k]].type;
    if (t->dtype == KILN_BF16) as_bf16(ctx, &in[k]);
    if (in[k] && kiln_tensor_rank(in[k]) != t->rank) {
      snprintf(why, cap, "test data: input %zu has rank %zu, the model declares rank %d", k,
               kiln_tensor_rank(in[k]), t->rank);
      return false;
    }
  }
  for (size_t k = 0; k < m && k < g->nresults; k++)
    if (g->values[g->results[k]].type.dtype == KILN_BF16) as_bf16(ctx, &want[k]);
  return true;
}

/* Runs every test_data_set_N of one model; why says what failed. */
static result run_sets(kiln_ctx *ctx, const kiln_graph *g, kiln_compiled *c, const char *dir,
                       char *why, size_t cap) {
  int sets = 0;
  for (int set = 0;; set++) {
    char sdir[700];
    snprintf(sdir, sizeof sdir, "%s/test_data_set_%d", dir, set);
    struct stat st;
    if (stat(sdir, &st)) break;
    kiln_tensor *in[64] = {0}, *want[64] = {0}, *got[64] = {0};
    bool ok_in, ok_out;
    size_t nin = read_pbs(ctx, sdir, "input", in, 64, &ok_in);
    size_t nout = read_pbs(ctx, sdir, "output", want, 64, &ok_out);
    result r = R_PASS;
    if (!ok_in || !ok_out) {
      snprintf(why, cap, "reading the test data: %s", kiln_ctx_error(ctx));
      r = R_UNSUPPORTED;
    } else if (!fit_data(ctx, g, in, nin, want, nout, why, cap)) {
      r = R_UNSUPPORTED;
    } else if (nin != kiln_compiled_num_inputs(c) || nout != kiln_compiled_num_outputs(c)) {
      snprintf(why, cap, "%zu inputs and %zu outputs for a model of %zu and %zu", nin, nout,
               kiln_compiled_num_inputs(c), kiln_compiled_num_outputs(c));
      r = R_UNSUPPORTED;
    } else if (kiln_compiled_run(c, ctx, nin, in, nout, got, NULL) != KILN_OK) {
      snprintf(why, cap, "run: %s", kiln_ctx_error(ctx));
      r = R_WRONG;
    } else {
      for (size_t k = 0; k < nout && r == R_PASS; k++)
        if (!close_enough(got[k], want[k], why, cap)) r = R_WRONG;
    }
    for (size_t k = 0; k < 64; k++) {
      kiln_tensor_destroy(in[k]);
      kiln_tensor_destroy(want[k]);
      kiln_tensor_destroy(got[k]);
    }
    if (r != R_PASS) return r;
    sets++;
  }
  if (!sets) {
    snprintf(why, cap, "no test data");
    return R_UNSUPPORTED;
  }
  return R_PASS;
}

/* The position in `names` (comma-separated) of the graph input that an
 * import error says "('NAME') must be known at import", or -1. */
static int needed_input(const char *msg, const char *names) {
  const char *e = strstr(msg, "') must be known at import");
  if (!e) return -1;
  const char *b = e;
  while (b > msg && !(b[-1] == '\'' && b - 1 > msg && b[-2] == '(')) b--;
  if (b == msg) return -1;
  size_t len = (size_t)(e - b);
  int pos = 0;
  for (const char *p = names; *p; pos++) {
    size_t l = strcspn(p, ",");
    if (l == len && !strncmp(p, b, len)) return pos;
    p += l;
    if (*p) p++;
  }
  return -1;
}

/*
 * The graph inputs that an operand the importer refused is computed from, as kiln_onnx_model
 * finds them (the graph walked back from the operand, not through Shape or Size), marked in
 * shape[] (the test's nin inputs, in order); false if it finds none.
 */
static bool shape_inputs(kiln_ctx *ctx, const char *path, kiln_tensor **in, size_t nin,
                         bool *shape) {
  kiln_onnx_model *m = NULL;
  if (kiln_onnx_model_open(ctx, path, NULL, &m) != KILN_OK) return false;
  size_t n = kiln_onnx_model_num_inputs(m), marked = 0;
  if (n != nin || n > 64) n = 0;
  for (int round = 0; n && round < 8; round++) { /* each refusal may name more */
    const char *nm[64];
    kiln_tensor *val[64];
    size_t cnt = 0;
    for (size_t k = 0; k < n; k++)
      if (kiln_onnx_model_is_shape_input(m, k)) {
        nm[cnt] = kiln_onnx_model_input_name(m, k);
        val[cnt++] = in[k];
      }
    kiln_graph *g = NULL;
    kiln_status s = kiln_onnx_model_specialize(m, ctx, cnt, nm, val, &g);
    kiln_graph_destroy(g);
    size_t now = 0;
    for (size_t k = 0; k < n; k++) now += kiln_onnx_model_is_shape_input(m, k) == 1;
    if (s == KILN_OK || now == cnt) break;
  }
  for (size_t k = 0; k < n; k++) marked += shape[k] = kiln_onnx_model_is_shape_input(m, k) == 1;
  kiln_onnx_model_destroy(m);
  return marked > 0;
}

/* A model whose shape operands are graph inputs: each test_data_set_N is
 * imported afresh with the inputs the importer says it needs at import
 * frozen to that set's values (kiln_onnx_import_frozen, as TensorRT takes
 * shape tensors at build time), compiled, and run on the other inputs. */
static result run_frozen(kiln_ctx *ctx, const char *dir, const char *path, char *why, size_t cap) {
  char *names = NULL;
  if (kiln_onnx_input_names(ctx, path, &names) != KILN_OK) {
    snprintf(why, cap, "input names: %s", kiln_ctx_error(ctx));
    return R_WRONG;
  }
  result r = R_PASS;
  int set = 0;
  for (; r == R_PASS; set++) {
    char sdir[700];
    snprintf(sdir, sizeof sdir, "%s/test_data_set_%d", dir, set);
    struct stat st;
    if (stat(sdir, &st)) break;
    kiln_tensor *in[64] = {0}, *want[64] = {0}, *got[64] = {0}, *rest[64];
    bool ok_in, ok_out, frozen[64] = {0};
    size_t nin = read_pbs(ctx, sdir, "input", in, 64, &ok_in);
    size_t nout = read_pbs(ctx, sdir, "output", want, 64, &ok_out);
    kiln_onnx_frozen fz[64];
    size_t nfz = 0;
    kiln_graph *g = NULL;
    kiln_compiled *c = NULL;
    kiln_status s = KILN_ERR_UNSUPPORTED;
    bool walked = false;
    if (!ok_in || !ok_out) {
      snprintf(why, cap, "reading the test data: %s", kiln_ctx_error(ctx));
      r = R_UNSUPPORTED;
    }
    while (r == R_PASS) {
      s = kiln_onnx_import_frozen(ctx, path, nfz, fz, &g);
      if (s == KILN_OK) break;
      snprintf(why, cap, "%s", kiln_ctx_error(ctx));
      int k = needed_input(why, names);
      r = s != KILN_ERR_UNSUPPORTED ? R_WRONG : R_UNSUPPORTED;
      bool shape[64] = {0};
      if (s == KILN_ERR_UNSUPPORTED && k < 0 && !walked) {
        /* an operand computed from graph inputs: those kiln_onnx_model would freeze */
        walked = true;
        if (!shape_inputs(ctx, path, in, nin, shape)) break;
      } else if (s != KILN_ERR_UNSUPPORTED || k < 0 || (size_t)k >= nin || frozen[k]) {
        break;
      } else {
        shape[k] = true;
      }
      for (size_t f = 0; f < nin; f++) {
        if (!shape[f] || frozen[f]) continue;
        frozen[f] = true;
        fz[nfz++] = (kiln_onnx_frozen){.name = NULL, .value = in[f]};
        /* the names, in the frozen order */
        for (size_t j = 0, pos = 0; names[j]; pos++) {
          size_t l = strcspn(names + j, ",");
          if (pos == f) fz[nfz - 1].name = strndup(names + j, l);
          j += l + (names[j + l] ? 1 : 0);
        }
      }
      r = R_PASS;
    }
    if (r == R_PASS) {
      kiln_compile_options opt = {.opt_level = KILN_O1, .num_threads = 1};
      s = kiln_compile(g, &opt, &c);
      if (s != KILN_OK) {
        snprintf(why, cap, "compile: %s", kiln_ctx_error(ctx));
        r = s == KILN_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_WRONG;
      }
    }
    size_t nrest = 0;
    for (size_t k = 0; k < nin; k++)
      if (!frozen[k]) rest[nrest++] = in[k];
    if (r == R_PASS) {
      if (!fit_data(ctx, g, rest, nrest, want, nout, why, cap)) r = R_UNSUPPORTED;
      for (size_t k = 0, j = 0; k < nin; k++) /* in[] owns them */
        if (!frozen[k]) in[k] = rest[j++];
    }
    if (r == R_PASS && (nrest != kiln_compiled_num_inputs(c) || nout != kiln_compiled_num_outputs(c))) {
      snprintf(why, cap, "%zu inputs and %zu outputs for a model of %zu and %zu", nrest, nout,
               kiln_compiled_num_inputs(c), kiln_compiled_num_outputs(c));
      r = R_WRONG;
    }
    if (r == R_PASS && kiln_compiled_run(c, ctx, nrest, rest, nout, got, NULL) != KILN_OK) {
      snprintf(why, cap, "run: %s", kiln_ctx_error(ctx));
      r = R_WRONG;
    }
    for (size_t k = 0; k < nout && r == R_PASS; k++)
      if (!close_enough(got[k], want[k], why, cap)) r = R_WRONG;
    for (size_t k = 0; k < nfz; k++) free((char *)fz[k].name);
    for (size_t k = 0; k < 64; k++) {
      kiln_tensor_destroy(in[k]);
      kiln_tensor_destroy(want[k]);
      kiln_tensor_destroy(got[k]);
    }
    kiln_compiled_destroy(c);
    kiln_graph_destroy(g);
  }
  free(names);
  if (r == R_PASS && set == 0) {
    snprintf(why, cap, "no test data");
    r = R_UNSUPPORTED;
  }
  return r;
}

static bool is_float_test(kiln_ctx *ctx, const char *dir) {
  char path[700];
  snprintf(path, sizeof path, "%s/test_data_set_0/input_0.pb", dir);
  kiln_tensor *t = NULL;
  if (kiln_onnx_read_tensor(ctx, path, &t) != KILN_OK) return false;
  kiln_dtype d = kiln_tensor_dtype(t);
  kiln_tensor_destroy(t);
  return d == KILN_F32 || d == KILN_F64 || d == KILN_F16 || d == KILN_BF16;
}

/* What a worker reports of one test: once as it begins (`done` false: the op, so that a crash
   is counted under it), once with its result. Under PIPE_BUF bytes, so written at once. */
typedef struct record {
  uint32_t index;
  bool done, frozen, float_node;
  int result;
  char op[64];
  char why[400];
} record;

/* The op of the test in dir (the longest op type that begins its name, else its last node). */
static void test_op(kiln_ctx *ctx, const char *dir, const char *test, record *r) {
  char path[700], *ops = NULL;
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  if (kiln_onnx_op_types(ctx, path, &ops) == KILN_OK)
    primary_op(test, ops, r->op, sizeof r->op);
  else
    snprintf(r->op, sizeof r->op, "(unreadable model)");
  free(ops);
  r->float_node = is_float_test(ctx, dir);
}

/* Imports, compiles and runs the test in dir; the result and why in r. */
static void conform_one(kiln_ctx *ctx, const char *dir, record *r) {
  char path[700], *why = r->why;
  size_t cap = sizeof r->why;
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  kiln_graph *g = NULL;
  kiln_compiled *c = NULL;
  result res;
  kiln_status st = kiln_onnx_import(ctx, path, &g);
  if (st == KILN_ERR_UNSUPPORTED && strstr(kiln_ctx_error(ctx), "') must be known at import")) {
    r->frozen = true;
    res = run_frozen(ctx, dir, path, why, cap);
  } else if (st == KILN_ERR_UNSUPPORTED) {
    res = R_UNSUPPORTED;
    snprintf(why, cap, "%s", kiln_ctx_error(ctx));
  } else if (st != KILN_OK) {
    res = R_WRONG;
    snprintf(why, cap, "import: %s", kiln_ctx_error(ctx));
  } else {
    kiln_compile_options opt = {.opt_level = KILN_O1, .num_threads = 1};
    st = kiln_compile(g, &opt, &c);
    if (st != KILN_OK) {
      res = st == KILN_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_WRONG;
      snprintf(why, cap, "compile: %s", kiln_ctx_error(ctx));
    } else {
      res = run_sets(ctx, g, c, dir, why, cap);
    }
  }
  r->result = (int)res;
  r->done = true;
  kiln_compiled_destroy(c);
  kiln_graph_destroy(g);
}

static bool write_record(int fd, const record *r) {
  return write(fd, r, sizeof *r) == (ssize_t)sizeof *r;
}

static bool read_record(int fd, record *r) {
  size_t got = 0;
  while (got < sizeof *r) {
    ssize_t k = read(fd, (char *)r + got, sizeof *r - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    got += (size_t)k;
  }
  return true;
}

/* The tests root/names[from..n) in a forked worker, their records in recs. Returns the index
   after the last test it finished; *status is its wait status. */
static size_t run_worker(kiln_ctx *ctx, const char *root, char **names, size_t from, size_t n,
                         record *recs, int *status) {
  int fd[2] = {-1, -1};
  fflush(NULL); /* else the worker's exit would write what this process had buffered, again */
  pid_t pid = pipe(fd) ? -1 : fork();
  if (pid < 0) { /* the tests left are not run: crashes, which fail the gate */
    const char *err = strerror(errno);
    for (size_t k = from; k < n; k++) {
      recs[k].result = R_CRASH;
      snprintf(recs[k].op, sizeof recs[k].op, "(not run)");
      snprintf(recs[k].why, sizeof recs[k].why, "not run: no worker (%s)", err);
    }
    if (fd[0] >= 0) close(fd[0]), close(fd[1]);
    return n;
  }
  if (pid == 0) {
    close(fd[0]);
    signal(SIGPIPE, SIG_DFL);
    for (size_t k = from; k < n; k++) {
      char dir[700];
      record r = {.index = (uint32_t)k};
      snprintf(dir, sizeof dir, "%s/%s", root, names[k]);
      test_op(ctx, dir, names[k], &r);
      if (!write_record(fd[1], &r)) _exit(3);
      alarm(TEST_SECONDS);
      conform_one(ctx, dir, &r);
      alarm(0);
      if (!write_record(fd[1], &r)) _exit(3);
    }
    close(fd[1]);
    exit(0); /* (exit, not _exit: in sanitizer builds LeakSanitizer checks the worker) */
  }
  close(fd[1]);
  size_t next = from;
  record r;
  while (read_record(fd[0], &r))
    if (r.index < n) {
      recs[r.index] = r;
      if (r.done) next = r.index + 1;
    }
  close(fd[0]);
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  return next;
}

static void describe_status(int status, char *why, size_t cap) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    snprintf(why, cap, "still running after %d s", TEST_SECONDS);
  else if (WIFSIGNALED(status))
    snprintf(why, cap, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    snprintf(why, cap, "the process exited with status %d", WEXITSTATUS(status));
}

/* Every test in recs[0..n), each in a worker (or here with KILN_ONNX_FORK=0). */
static void run_tests(kiln_ctx *ctx, const char *root, char **names, size_t n, record *recs) {
  const char *f = getenv("KILN_ONNX_FORK");
  if (f && !strcmp(f, "0")) {
    for (size_t k = 0; k < n; k++) {
      char dir[700];
      snprintf(dir, sizeof dir, "%s/%s", root, names[k]);
      test_op(ctx, dir, names[k], &recs[k]);
      conform_one(ctx, dir, &recs[k]);
    }
    return;
  }
  for (size_t k = 0; k < n;) {
    int status = 0;
    size_t next = run_worker(ctx, root, names, k, n, recs, &status);
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (next < n) {
      recs[next].index = (uint32_t)next; /* its begin record may be all there is */
      if (!recs[next].op[0]) snprintf(recs[next].op, sizeof recs[next].op, "(unknown)");
      recs[next].result = R_CRASH;
      describe_status(status, recs[next].why, sizeof recs[next].why);
      next++;
    } else if (!clean) {
      char why[200];
      describe_status(status, why, sizeof why);
      printf("  FAIL the worker ended after its last test: %s (a sanitizer's report above?)\n", why);
      failures++;
    }
    k = next;
  }
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* $KILN_ONNX_TESTS: comma-separated substrings, one of which a test's name must hold. */
static bool selected(const char *test) {
  const char *f = getenv("KILN_ONNX_TESTS");
  if (!f || !*f) return true;
  for (const char *p = f; *p;) {
    size_t l = strcspn(p, ",");
    for (const char *t = test; l && *t; t++)
      if (!strncmp(t, p, l)) return true;
    p += l;
    if (*p) p++;
  }
  return false;
}

/* $KILN_ONNX_SUITES: the suites named (comma- or space-separated); unset, Debian's. */
static bool suite_selected(const suite_def *sd) {
  const char *f = getenv("KILN_ONNX_SUITES");
  if (!f) return sd->collection == 0;
  size_t len = strlen(sd->name);
  for (const char *p = f; *p;) {
    size_t l = strcspn(p, ", ");
    if (l == len && !strncmp(p, sd->name, len)) return true;
    p += l;
    if (*p) p++;
  }
  return false;
}

/* A list of test names, one a line (after it, on .wrong lists, the reason); '#' comments. */
typedef struct listing {
  bool found;
  size_t n;
  char **names;   /* sorted */
  char **reasons; /* parallel to names; NULL when the file gives none */
} listing;

typedef struct listed {
  char *name, *reason;
} listed;

static int cmp_listed(const void *a, const void *b) {
  return strcmp(((const listed *)a)->name, ((const listed *)b)->name);
}

static listing read_listing(const char *path) {
  listing l = {0};
  FILE *f = fopen(path, "r");
  if (!f) return l;
  l.found = true;
  listed *v = NULL;
  size_t cap = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    char *p = line + strspn(line, " \t");
    if (!*p || *p == '#') continue;
    size_t nl = strcspn(p, " \t");
    char *reason = p + nl + strspn(p + nl, " \t");
    p[nl] = 0;
    if (l.n == cap) v = realloc(v, (cap = cap ? 2 * cap : 256) * sizeof *v);
    v[l.n++] = (listed){strdup(p), *reason ? strdup(reason) : NULL};
  }
  fclose(f);
  if (l.n) qsort(v, l.n, sizeof *v, cmp_listed);
  l.names = calloc(l.n + 1, sizeof *l.names);
  l.reasons = calloc(l.n + 1, sizeof *l.reasons);
  for (size_t k = 0; k < l.n; k++) l.names[k] = v[k].name, l.reasons[k] = v[k].reason;
  free(v);
  return l;
}

/* The position of name in l, or -1. */
static long lookup(const listing *l, const char *name) {
  if (!l->n) return -1;
  char **hit = bsearch(&name, l->names, l->n, sizeof *l->names, cmp_str);
  return hit ? (long)(hit - l->names) : -1;
}

static void free_listing(listing *l) {
  for (size_t k = 0; k < l->n; k++) free(l->names[k]), free(l->reasons[k]);
  free(l->names);
  free(l->reasons);
}

/* The gate: a listed test that no longer passes, a wrong test that SUITE.wrong does not name, and
   any crash fail; a test that passes unlisted is a note. */
static void check_suite(const suite_def *sd, char **names, size_t n, const record *recs) {
  static const char *const what[] = {"passes", "is wrong", "is unsupported", "crashed"};
  char pass_path[600], wrong_path[600];
  snprintf(pass_path, sizeof pass_path, "%s/%s.pass", FIXTURES, sd->name);
  snprintf(wrong_path, sizeof wrong_path, "%s/%s.wrong", FIXTURES, sd->name);
  listing pass = read_listing(pass_path), wrong = read_listing(wrong_path);
  if (!pass.found) {
    printf("  FAIL %s is missing: the tests of suite %s that pass, one a line\n", pass_path,
           sd->name);
    failures++;
  }
  int regressions = 0, unlisted = 0, known = 0;
  for (size_t k = 0; k < n; k++) {
    const record *r = &recs[k];
    long p = lookup(&pass, names[k]), w = lookup(&wrong, names[k]);
    if (w >= 0 && !wrong.reasons[w]) {
      printf("  FAIL %s.wrong names %s without a reason\n", sd->name, names[k]);
      failures++;
    }
    if (r->result == R_PASS && p < 0) {
      printf("  note: %s/%s passes: add it to tests/fixtures/onnx_conformance/%s.pass\n", sd->name,
             names[k], sd->name);
      unlisted++;
    }
    if (r->result == R_PASS && w >= 0)
      printf("  note: %s/%s passes: take it off %s.wrong\n", sd->name, names[k], sd->name);
    if (r->result != R_PASS && p >= 0) {
      printf("  FAIL %s/%s passed (it is in %s.pass) and now %s: %s\n", sd->name, names[k],
             sd->name, what[r->result], r->why);
      regressions++;
    } else if (r->result == R_WRONG && w >= 0) {
      printf("  known wrong %s/%s: %s (%s.wrong: %s)\n", sd->name, names[k], r->why, sd->name,
             wrong.reasons[w] ? wrong.reasons[w] : "");
      known++;
    } else if (r->result == R_WRONG || r->result == R_CRASH) {
      printf("  FAIL %s/%s %s: %s\n", sd->name, names[k], what[r->result], r->why);
      regressions++;
    }
  }
  /* listed tests that are not in the data (a generator that failed, a folder gone) */
  for (size_t k = 0; k < pass.n; k++) {
    const char *t = pass.names[k];
    if (!selected(t) || (n && bsearch(&t, names, n, sizeof *names, cmp_str))) continue;
    printf("  FAIL %s/%s is in %s.pass, but not in %s\n", sd->name, t, sd->name, sd->root);
    regressions++;
  }
  failures += regressions;
  printf("suite %s: %zu tests; %d failing the gate, %d known wrong, %d passing but not listed\n",
         sd->name, n, regressions, known, unlisted);
  free_listing(&pass);
  free_listing(&wrong);
}

/* With $KILN_ONNX_PASS_OUT=DIR: DIR/SUITE.pass, the tests that passed. */
static void write_pass_list(const suite_def *sd, char **names, size_t n, const record *recs) {
  const char *dir = getenv("KILN_ONNX_PASS_OUT");
  if (!dir || !*dir) return;
  const char *filter = getenv("KILN_ONNX_TESTS");
  if (filter && *filter) {
    printf("KILN_ONNX_PASS_OUT: not written, KILN_ONNX_TESTS runs a part of the suite\n");
    return;
  }
  char path[600];
  snprintf(path, sizeof path, "%s/%s.pass", dir, sd->name);
  FILE *f = fopen(path, "w");
  if (!f) {
    printf("KILN_ONNX_PASS_OUT: cannot write %s\n", path);
    return;
  }
  fprintf(f, "# The tests of ONNX suite %s that pass: tests/unit/test_onnx.c fails when one no\n"
             "# longer does. Written by KILN_ONNX_PASS_OUT (docs/onnx.md, \"Conformance\").\n",
          sd->name);
  for (size_t k = 0; k < n; k++)
    if (recs[k].result == R_PASS) fprintf(f, "%s\n", names[k]);
  fclose(f);
  printf("KILN_ONNX_PASS_OUT: wrote %s\n", path);
}

/* One suite: its tests run, counted in s, checked against its lists. */
static void conform_suite(kiln_ctx *ctx, const suite_def *sd, summary *s, bool verbose) {
  DIR *d = opendir(sd->root);
  if (!d) {
    test_skip("ONNX conformance: suite %s: %s is missing (%s)", sd->name, sd->root,
              sd->collection == 0 ? "apt-get install libonnx-testdata"
                                  : "tools/setup.sh generates it");
    return;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !selected(e->d_name)) continue;
    if (n == cap) names = realloc(names, (cap = cap ? 2 * cap : 256) * sizeof *names);
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp_str); /* names is NULL when the filter keeps none */
  record *recs = calloc(n + 1, sizeof *recs);
  run_tests(ctx, sd->root, names, n, recs);
  for (size_t k = 0; k < n; k++) {
    const record *r = &recs[k];
    op_stat *o = stat_of(s, r->op);
    o->n[r->result]++;
    s->n[r->result]++;
    if (sd->node && r->float_node) {
      s->float_node++;
      s->float_node_supported += r->result != R_UNSUPPORTED;
      s->frozen += r->frozen && r->result != R_UNSUPPORTED;
    }
    if (verbose && r->result == R_UNSUPPORTED)
      printf("  unsupported %s/%s: %s\n", sd->name, names[k], r->why);
  }
  check_suite(sd, names, n, recs);
  write_pass_list(sd, names, n, recs);
  for (size_t k = 0; k < n; k++) free(names[k]);
  free(names);
  free(recs);
}

static int cmp_stat(const void *a, const void *b) {
  return strcmp(((const op_stat *)a)->name, ((const op_stat *)b)->name);
}

static void write_summary(FILE *f, summary *s, const char *node, double cpu, double wall) {
  qsort(s->ops, (size_t)s->nops, sizeof *s->ops, cmp_stat);
  fprintf(f, "| op | pass | wrong | unsupported | crash |\n|---|---:|---:|---:|---:|\n");
  for (int k = 0; k < s->nops; k++) {
    const int *n = s->ops[k].n;
    fprintf(f, "| %s | %d | %d | %d | %d |\n", s->ops[k].name, n[R_PASS], n[R_WRONG],
            n[R_UNSUPPORTED], n[R_CRASH]);
  }
  fprintf(f, "| **all** | **%d** | **%d** | **%d** | **%d** |\n\n", s->n[R_PASS], s->n[R_WRONG],
          s->n[R_UNSUPPORTED], s->n[R_CRASH]);
  if (node)
    fprintf(f,
            "Coverage: %d of the %d float-typed `%s` tests are in the supported set (%.1f%%); "
            "%d of them feed operands Kiln needs at import (shapes, axes, sizes, k) as graph "
            "inputs and run with those frozen (`kiln_onnx_import_frozen`). ",
            s->float_node_supported, s->float_node, node,
            s->float_node ? 100.0 * s->float_node_supported / s->float_node : 0.0, s->frozen);
  fprintf(f, "CPU time %.0f s (%.0f s wall).\n", cpu, wall);
}

/* CPU seconds of this process and of its workers that have ended. */
static double cpu_seconds(void) {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  const struct timeval t[4] = {self.ru_utime, self.ru_stime, kids.ru_utime, kids.ru_stime};
  double s = 0;
  for (int k = 0; k < 4; k++) s += (double)t[k].tv_sec + 1e-6 * (double)t[k].tv_usec;
  return s;
}

static double wall_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void test_conformance(kiln_ctx *ctx) {
  bool verbose = getenv("KILN_ONNX_VERBOSE") != NULL;
  const char *out = getenv("KILN_ONNX_SUMMARY");
  FILE *f = out ? fopen(out, "w") : NULL;
  for (int c = 0; c < (int)(sizeof collections / sizeof *collections); c++) {
    summary *s = calloc(1, sizeof *s);
    const char *node = NULL;
    double cpu = cpu_seconds(), wall = wall_seconds();
    for (size_t k = 0; k < sizeof suites / sizeof *suites; k++) {
      if (suites[k].collection != c || !suite_selected(&suites[k])) continue;
      if (suites[k].node) node = suites[k].name;
      conform_suite(ctx, &suites[k], s, verbose);
    }
    cpu = cpu_seconds() - cpu, wall = wall_seconds() - wall;
    if (s->nops) {
      printf("ONNX conformance, %s:\n", collections[c]);
      write_summary(stdout, s, node, cpu, wall);
      if (f) {
        fprintf(f, "Results (%s):\n\n", collections[c]);
        write_summary(f, s, node, cpu, wall);
        fprintf(f, "\n");
      }
    }
    free(s);
  }
  if (f) fclose(f);
}

#endif
