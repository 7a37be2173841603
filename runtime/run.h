/*
 * run.h — kiln_graph_run with a device index, for the CLI's
 * `--device cuda:N` / `hip:N` (runtime/run.c). kiln_graph_run is this with
 * index 0; the other backends accept only index 0.
 */
#ifndef KILN_RT_RUN_H
#define KILN_RT_RUN_H

#include "ir/kir.h"

kiln_status krt_graph_run_device(kiln_graph *g, kiln_backend backend, int index, size_t n_in,
                                 kiln_tensor *const *inputs, size_t n_out, kiln_tensor **outputs,
                                 kiln_run_info *info);

#endif
