/*
 * aot.h — the parts of ahead-of-time compilation that write files: the
 * lowered program as static C tables (aot.c). The driver that runs the
 * code generator and the system compiler is runtime/driver/aot.c.
 */
#ifndef KCG_AOT_H
#define KCG_AOT_H

#include <stdio.h>

#include "program.h"

/*
 * Writes `prog` into `c` as static tables whose symbols start with `prefix`,
 * its kernels declared as `<kernel_prefix><kernel name>` (the object file's
 * symbols), and its constant buffers into `blob` (a seekable file), written as
 * an ELF object to link beside the C file's (it defines `<prefix>blob_start`,
 * which the tables point into). `*entry` is the number of the entry
 * program: its table is `<prefix>p<entry>`, the functions `<prefix>fns`.
 */
/* A code object made ahead of time for a GPU target (runtime/device/device.h's krt_image). */
typedef struct kcg_aot_image {
  uint64_t key;
  char arch[24];
  void *data; /* malloc'ed */
  size_t len;
} kcg_aot_image;

typedef struct kcg_aot_images {
  kcg_aot_image *v;
  uint32_t n, cap;
} kcg_aot_images;

/* Adds an image (taking `data`); false when out of memory (data then freed). */
bool kcg_aot_images_add(kcg_aot_images *t, uint64_t key, const char *arch, void *data, size_t len);
/* Whether the list has an image of `key` for `arch`. */
bool kcg_aot_images_has(const kcg_aot_images *t, uint64_t key, const char *arch);
void kcg_aot_images_free(kcg_aot_images *t);

/* needed[k]: kernel k has a function `<kernel_prefix><name>` (NULL: every kernel); the others'
   entries in `<prefix>fns` are NULL (runtime/exec/rt.h, krt_kernels_needed). */
kiln_status kcg_aot_write_c(kiln_ctx *ctx, const kcg_program *prog, const char *prefix,
                            const char *kernel_prefix, const bool *needed, FILE *c, FILE *blob,
                            uint32_t *entry);

/*
 * The same for a GPU target: no kernel functions (`<prefix>fns` is a table of
 * NULLs), and the images appended to the blob as `<prefix>image_table`, a
 * krt_image_table of runtime/device/device.h (identical images share their bytes).
 */
kiln_status kcg_aot_write_c_gpu(kiln_ctx *ctx, const kcg_program *prog, const char *prefix,
                                const kcg_aot_images *images, FILE *c, FILE *blob,
                                uint32_t *entry);

#endif
