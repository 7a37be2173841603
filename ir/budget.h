/*
 * budget.h — the memory budget: the most bytes one request may take.
 *
 * Every place where the size of an allocation comes from a user's file,
 * graph or call — a host tensor, a result of the reference interpreter, a
 * compiled run's arena and results — asks kir_budget_fits() before it
 * allocates, and refuses with a message that names the tensor and the bytes
 * (docs/options.md, "Memory budget"; docs/decisions.md). Built into
 * libkiln_rt.a too, so shared objects written by `kiln compile` keep it.
 */
#ifndef KIR_BUDGET_H
#define KIR_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/core.h"
#include "kiln/options.h"

typedef struct kir_budget {
  uint64_t bytes;     /* UINT64_MAX: no budget */
  const char *source; /* where it came from, for messages */
} kir_budget;

/*
 * `memory_limit` of the call's options, else the context's, else
 * KILN_MEMORY_LIMIT, else the machine's physical memory (either options may
 * be NULL).
 */
kir_budget kir_memory_budget(const kiln_options *ctx_opts, const kiln_options *call_opts);

/*
 * Whether `bytes` fit budget `b`. When they do not, `why` (of `n` bytes)
 * says so, for a message "WHAT needs WHY": "4000000000000 bytes, more than
 * the memory budget of 17179869184 bytes (KILN_MEMORY_LIMIT)".
 */
bool kir_budget_fits(const kir_budget *b, uint64_t bytes, char *why, size_t n);

/* numel * esize of `dims`, UINT64_MAX when that overflows (0 when a dim is 0). */
uint64_t kir_shape_bytes(size_t esize, int rank, const int64_t *dims);

/* "f32[1000000, 1000000]" into buf. */
void kir_format_shape(kiln_dtype t, int rank, const int64_t *dims, char *buf, size_t n);

#endif
