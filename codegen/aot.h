/*
 * aot.h — the parts of ahead-of-time compilation that write files: the
 * lowered program as static C tables (aot.c). The driver that runs the
 * code generator and the system compiler is runtime/aot.c.
 */
#ifndef KCG_AOT_H
#define KCG_AOT_H

#include <stdio.h>

#include "program.h"

/*
 * Writes `prog` into `c` as static tables whose symbols start with `prefix`,
 * its kernels declared as `<kernel_prefix><kernel name>` (the object file's
 * symbols), and its constant buffers into `blob`, which the C file includes
 * from `blob_path` with `.incbin`. `*entry` is the number of the entry
 * program: its table is `<prefix>p<entry>`, the functions `<prefix>fns`.
 */
kiln_status kcg_aot_write_c(kiln_ctx *ctx, const kcg_program *prog, const char *prefix,
                            const char *kernel_prefix, const char *blob_path, FILE *c,
                            FILE *blob, uint32_t *entry);

#endif
