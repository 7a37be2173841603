/*
 * kiln_prog.h — what the files of the program runner (program/) share (kiln_prog.c: host tensors,
 * lifts, parameter trees, differentiation, indexing, the functions; kiln_prog_train.c:
 * graphs, fit, predict, optimizers). Internal to frontend/.
 */
#ifndef KILN_PROGRAM_PROG_H
#define KILN_PROGRAM_PROG_H

#include "frontend/kiln_eval.h"
#include "kiln/fit.h"

#define PROG_FUEL (1u << 22)

typedef struct lift {
  kl_build b;
  kiln_tensor **hosts; /* hosts[i] is graph parameter vals[i] */
  kiln_value *vals;
  uint32_t n, cap;
} lift;

struct ke_prog {
  kiln_backend backend;
  const char *device;
  FILE *out;
  kiln_comm *comm; /* data-parallel fit(); print and save_params on rank 0 only */
  bool rank0;
  kiln_tensor **pool;
  size_t npool, cappool;
  uint64_t next_seed; /* randn without seed=, layers given to record(...) */
  lift *lift;
  struct kprog_opt *opts; /* the state of each optimizer's opt.step */
  unsigned runs;     /* graphs run */
  kiln_run_info info; /* of the last run */
};

typedef struct kprog_opt kprog_opt; /* an optimizer's state for opt.step (kiln_prog_train.c) */

static inline kv mk_host(kiln_tensor *t) { return (kv){.k = KV_HOST, .host = t}; }

/* A tensor the program owns (NULL after destroying t on OOM). */
kiln_tensor *kprog_keep(ke_eval *e, kiln_tensor *t);
kiln_tensor *kprog_new_host(ke_eval *e, kiln_dtype t, size_t rank, const int64_t *dims);
/* The parameter tree of a kiln_params (names by path), copied into the program. */
kiln_status kprog_tree_of(ke_eval *e, const kf_node *at, const kiln_params *p, size_t lo,
                          size_t hi, size_t depth, kv *out);
kiln_status kprog_layer_init(ke_eval *e, const kf_node *at, const kl_layer *l, uint64_t seed,
                             kv *out);
const kv *kprog_tree_leaf(const kv *v, const char *path);
kiln_status kprog_lift_begin(ke_eval *e, const kf_node *at, lift *L);
void kprog_lift_close(lift *L);
kiln_status kprog_run_graph(ke_eval *e, const kf_node *at, lift *L, kiln_graph *g, uint32_t n,
                            kiln_tensor **outs);
kiln_status kprog_deep_in(ke_eval *e, const kf_node *at, kv *v);

/* A tensor function of the frontend on host tensors, traced (false: no such function). */
bool kprog_call_named(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                      kv *out, kiln_status *s);
/* grad(f)(...), value_and_grad(f)(...), model(params, x, ...) */
kiln_status kprog_apply(ke_eval *e, const kf_node *call, const kv *f, const ke_args *a, kv *out);

/* Every host tensor of a parameter tree becomes a parameter of the lift's graph, in tree
 * order; and the tree with each of hosts[i] (i < n) replaced by grads[i]. */
kiln_status kprog_params_in(ke_eval *e, const kf_node *at, const kv *v);
kiln_status kprog_grad_tree(ke_eval *e, const kf_node *at, kv *v, kiln_tensor **hosts,
                            kiln_tensor **grads, uint32_t n);
/* kiln_prog_lbfgs.c: minimize(f, params, ...) */
kiln_status kprog_minimize(ke_eval *e, const kf_node *call, const ke_args *a, kv *out);

/* The evaluator's hooks for a program (frontend/kiln_eval.h). */
const ke_hooks *kprog_hooks(void);

/* kiln_prog_train.c */
bool kprog_train_call(ke_eval *e, const kf_node *call, const char *name, const ke_args *a,
                      kv *out, kiln_status *s);
bool kprog_is_train_fn(const char *name);
kiln_status kprog_opt_step(ke_eval *e, const kf_node *call, const kv *opt, const ke_args *a,
                           kv *out);
kiln_status kprog_graph_method(ke_eval *e, const kf_node *call, const kv *g, const char *name,
                               const ke_args *a, kv *out);
void kprog_free_opts(ke_prog *p);
/* The leaves of a parameter tree as a kiln_params named by path ("blocks.0.W"), copied. */
kiln_status kprog_to_params(ke_eval *e, const kf_node *at, const kv *tree, kiln_params **out);

/* kiln_prog_io.c: save_params, load_params (.npz or .safetensors), summary */
kiln_status kprog_save_params(ke_eval *e, const kf_node *call, const ke_args *a, kv *out);
kiln_status kprog_load_params(ke_eval *e, const kf_node *call, const ke_args *a, kv *out);
kiln_status kprog_summary(ke_eval *e, const kf_node *call, const ke_args *a, kv *out);
kiln_status kprog_load_safetensors(ke_eval *e, const kf_node *call, const ke_args *a, kv *out);

#endif
