/*
 * kiln_eval.h — what the two halves of the .kiln evaluator share: the values
 * of a model file, the evaluator's state, its error helpers, and the tensor
 * functions (kiln_builtins.c) that the evaluator (kiln_eval.c) calls.
 * Internal to frontend/.
 */
#ifndef KILN_FRONTEND_EVAL_H
#define KILN_FRONTEND_EVAL_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kiln_ast.h"
#include "layers/layers.h"

/* ------------------------------------------------------------------ values */

typedef enum kv_kind {
  KV_NONE,
  KV_INT,
  KV_FLOAT,
  KV_BOOL,
  KV_STR,
  KV_LIST,
  KV_LAYER,  /* borrowed: owned by the model file's pool or by another layer */
  KV_FN,     /* a lambda and the environment it captured */
  KV_TENSOR, /* build time only: a value of the kl_build's graph */
  KV_DIM,    /* build time only: a symbolic size (a graph's node count) */
  KV_INPUT,  /* a tensor input of the model */
  KV_GRAPH,  /* the graph input of the model */
  KV_RECORD, /* record(a=..., b=...): rec.names[i] = rec.items[i] */
  KV_HOST,   /* programs: a tensor with its numbers (owned by the program) */
  KV_GRADFN  /* programs: grad(f) or value_and_grad(f), waiting for its arguments */
} kv_kind;

typedef struct kv kv;
typedef struct ke_bind ke_bind;

typedef struct ke_lambda {
  const kf_node *node; /* the KF_LAMBDA */
  const ke_bind *env;  /* what it captured */
  kl_fn *fn;           /* made once, when first passed to a constructor */
} ke_lambda;

struct kv {
  kv_kind k;
  union {
    int64_t i;
    double f;
    bool b;
    const char *s;
    struct {
      kv *items;
      uint32_t n;
    } list;
    kl_layer *layer;
    ke_lambda *fn;
    kiln_value t;
    kiln_dim dim;
    const kiln_model_input *input;
    struct {
      kv *items;
      const char **names;
      uint32_t n;
    } rec;
    kiln_tensor *host;
    struct {
      ke_lambda *lam;
      bool with_value;
      uint8_t order; /* 0: grad, value_and_grad; 1: hessian; 2: hvp */
    } grad;
  };
};

struct ke_bind {
  const char *name;
  kv v;
  bool is_var; /* bound by `var`: `NAME = ...` may change v */
  const ke_bind *next;
};

typedef struct ke_prog ke_prog; /* a running program (program/kiln_prog.h) */
typedef struct ke_hooks ke_hooks;

/* The syntax tree and the load-time values, shared by the model file and its lambdas. */
typedef struct ke_shared {
  uint32_t refs;
  kir_arena ast;
  kir_arena vals;
} ke_shared;

struct kiln_model_file {
  ke_shared *sh;
  kl_layer *model; /* one of `layers` */
  kiln_model_input *inputs;
  size_t ninputs;
  kl_layer **layers; /* every layer made while loading, owned */
  size_t nlayers, caplayers;
  kl_fn **fns; /* every kl_fn made while loading, owned */
  size_t nfns, capfns;
  /* Functions bound by `let` (a loss for `kiln fit --loss NAME`, say), in the shared block. */
  const char **fn_names;
  kl_fn **named_fns;
  size_t nnamed;
};

void ke_shared_release(ke_shared *sh);

typedef struct ke_eval {
  kiln_ctx *ctx;
  ke_shared *sh;
  kir_arena *arena;    /* where new values go: the shared block, or the build's arena */
  kiln_model_file *mf; /* load time: owns what is made; NULL at build time */
  kl_build *b;         /* build time: the graph bodies emit into; NULL at load time */
  ke_prog *prog;       /* a program run by `kiln run` (program/); NULL for a model file */
  const ke_hooks *hooks; /* what the program adds (NULL with prog) */
  uint32_t fuel;
  unsigned calls;
} ke_eval;

typedef struct ke_args {
  uint32_t npos, nkw;
  kv *pos, *kw;
  const kf_node **pos_node, **kw_node;
  const char **kwnames;
} ke_args;

/* The elementwise functions of one argument, on numbers and (through the op table or
 * the activations) on tensors. */
typedef struct unary_fn {
  const char *name;
  const char *op;     /* the op of ir/ops.def it is, or NULL */
  double (*f)(double); /* its scalar function where it is no op */
  bool activation; /* on tensors through kl_activation (so it matches activation(name)) */
} unary_fn;

static inline bool is_num(const kv *v) { return v->k == KV_INT || v->k == KV_FLOAT; }
static inline double num(const kv *v) { return v->k == KV_INT ? (double)v->i : v->f; }
static inline kv mk_int(int64_t i) { return (kv){.k = KV_INT, .i = i}; }
static inline kv mk_float(double f) { return (kv){.k = KV_FLOAT, .f = f}; }
static inline kv mk_bool(bool b) { return (kv){.k = KV_BOOL, .b = b}; }
static inline kv mk_tensor(kiln_value t) { return (kv){.k = KV_TENSOR, .t = t}; }

/* ---- errors and memory (kiln_eval.c) ---- */

const char *ke_kind_name(const kv *v);
/* An error of the file at node `n`: a bad file at load time, a type error at build time. */
kiln_status ke_fail_at(ke_eval *e, const kf_node *n, const char *fmt, ...) KIR_PRINTF(3, 4);
/* Puts node n's position in front of the message already on the context. */
kiln_status ke_locate(ke_eval *e, const kf_node *n, kiln_status s);
kiln_status ke_nomem(ke_eval *e, const kf_node *n);
/* After emitting ops: the graph's sticky error, located at n. */
kiln_status ke_graph_check(ke_eval *e, const kf_node *n, kiln_value v);
void *ke_alloc(ke_eval *e, size_t n);

/* ---- evaluation (kiln_eval.c) ---- */

kiln_status ke_eval_node(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out);
const ke_bind *ke_lookup(const ke_bind *env, const char *name);
/* The kl_fn of a lambda (made once, owned by the model file): for layers and fit's loss. */
kl_fn *ke_fn_of(ke_eval *e, ke_lambda *f);
const ke_bind *ke_bind_new(ke_eval *e, const ke_bind *env, const char *name, kv v, bool is_var);
kiln_status ke_call_value(ke_eval *e, const kf_node *call, const kv *f, const ke_args *a, kv *out);
/* A builtin tensor function or elementwise function by name (in a build). */
bool ke_call_named(ke_eval *e, const kf_node *call, const char *name, const ke_args *a, kv *out,
                   kiln_status *s);

/* ---- numbers (kiln_numbers.c) ---- */

/* x op y on two numbers (n is the KF_BINARY), and the comparisons of any two values. */
kiln_status ke_num_arith(ke_eval *e, const kf_node *n, const kv *x, const kv *y, kv *out);
kiln_status ke_compare(ke_eval *e, const kf_node *n, const kv *x, const kv *y, kv *out);

/* ---- statements, blocks, ranges and comprehensions (kiln_stmt.c) ---- */

/* Runs one statement: *env grows by what it binds; `ret` is set by `return`. */
kiln_status ke_exec_stmt(ke_eval *e, const ke_bind **env, const kf_stmt *st, kv *ret,
                         bool *returned);
kiln_status ke_exec_block(ke_eval *e, const ke_bind *env, const kf_block *b, kv *ret,
                          bool *returned);
kiln_status ke_eval_range(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out);
kiln_status ke_eval_comp(ke_eval *e, const ke_bind *env, const kf_node *n, kv *out);
/* record(a=..., b=...) */
kiln_status ke_make_record(ke_eval *e, const kf_node *call, const ke_args *a, kv *out);
/* A record's field, or NULL. */
const kv *ke_record_field(const kv *r, const char *name);

/* ---- programs' tensors (kiln_trace.c) ---- */

/* Calls `fn` (the rest of an operation) inside a fresh traced graph when values are host
 * tensors at the top of a program, and brings the tensors of the result back as host ones;
 * elsewhere it calls fn directly. */
typedef kiln_status (*ke_lift_fn)(ke_eval *e, const kf_node *at, void *data, kv *out);
kiln_status ke_lift(ke_eval *e, const kf_node *at, ke_lift_fn fn, void *data, kv *out);
/* Inside a traced graph: a host tensor becomes a parameter of the graph. */
kiln_status ke_host_in(ke_eval *e, const kf_node *at, kv *v);
/* True if `v` holds a KV_HOST anywhere (in lists and records too). */
bool ke_has_host(const kv *v);
/* x[items] on a tensor (traced or host). */
kiln_status ke_tensor_index(ke_eval *e, const ke_bind *env, const kf_node *n, const kv *x,
                            kv *out);

/* What a program adds to the evaluator (program/kiln_prog.c), called through e->hooks. */
struct ke_hooks {
  kiln_status (*host_in)(ke_eval *e, const kf_node *at, kv *v);
  kiln_status (*lift)(ke_eval *e, const kf_node *at, ke_lift_fn fn, void *data, kv *out);
  bool (*is_builtin)(const char *name); /* print, tensor, randn, value_and_grad, fit, ... */
  /* A program's function, or a tensor function on host tensors; false if `name` is neither. */
  bool (*call)(ke_eval *e, const kf_node *call, const char *name, const ke_args *a, kv *out,
               kiln_status *s);
  /* obj.name(args): model.init(seed=0), opt.step(p, g), g.adjacency() */
  kiln_status (*method)(ke_eval *e, const kf_node *call, const kv *obj, const char *name,
                        const ke_args *a, kv *out);
  /* grad(f)(args), value_and_grad(f)(args), model(params, x, ...) */
  kiln_status (*apply)(ke_eval *e, const kf_node *call, const kv *f, const ke_args *a, kv *out);
};

/* ---- the tensor functions (kiln_builtins.c) ---- */

/* The tensor a number becomes next to tensor `like`: a scalar of its dtype. */
kiln_value ke_scalar_like(ke_eval *e, kiln_value like, const kv *v);
/* An elementwise function of one argument (exp, relu, ...) by name, or NULL. */
const unary_fn *ke_find_unary(const char *name);
double ke_unary_number(const unary_fn *u, double x); /* u on a number */
/* Whether `name` is a tensor function of more than one argument (sum, softmax, ...). */
const struct builtin *ke_find_builtin(const char *name);
/* A tensor function (or its number version); false if `name` is none of them. */
bool ke_call_builtin(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                     kv *out, kiln_status *s);

#endif
