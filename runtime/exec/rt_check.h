/*
 * rt_check.h — checking a lowered program before it runs (rt_check.c), and
 * the executor's error helper.
 */
#ifndef KRT_CHECK_H
#define KRT_CHECK_H

#include "codegen/program.h"
#include "rt.h"

/* KILN_OK, or KILN_ERR_INVALID naming what in prog (or its kernel functions fns) is malformed. */
kiln_status krt_check_program(kiln_ctx *ctx, const kcg_program *prog, const kcg_cpu_fn *fns);
/* Sets ctx's message (printf-style) and status (ctx may be NULL) and returns s. */
kiln_status krt_fail(kiln_ctx *ctx, kiln_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
