/*
 * Kiln public API: programs — a .kiln file run from top to bottom (docs/kiln-syntax.md,
 * "Programs"; program/kiln_prog.c): functions, loops, records, tensors, value_and_grad,
 * fit, print. Its tensor operations are traced into graphs that run on a backend.
 */
#ifndef KILN_PROGRAM_H
#define KILN_PROGRAM_H

#include <stdio.h>

#include "comm.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_program_options {
  kiln_backend backend; /* for every graph the program runs (the CLI's default: eager) */
  const char *device;   /* NULL: "cpu" */
  FILE *out;            /* where print() writes; NULL: stdout */
  size_t n_inputs;      /* tensors bound to names before the program starts (--input NAME=F) */
  const char *const *input_names;
  kiln_tensor *const *inputs; /* borrowed (copied; float tensors become f64) */
  int force;            /* run even a file that reads as a model file */
  kiln_comm *comm;      /* data-parallel (include/kiln/comm.h): fit() trains over its ranks, and
                           print() and save_params() act on rank 0 only; NULL: one process */
  /* set by kiln_program_run: */
  unsigned graphs_run;
  kiln_run_info info; /* of the last graph run */
} kiln_program_options;

/*
 * Runs the program in file `path`. A file that is a model file (it ends with
 * one model expression and has no other bare expression) is not run unless
 * opt->force: then *is_program is 0 and the status KILN_OK.
 */
KILN_API kiln_status kiln_program_run(kiln_ctx *ctx, const char *path, kiln_program_options *opt,
                                      int *is_program);

#ifdef __cplusplus
}
#endif
#endif
