/*
 * options.h — reading kiln_options (include/kiln/options.h) inside the library.
 *
 * ir/options.c is the only file of the library that reads the environment;
 * it is built into libkiln_rt.a too, so shared objects written by `kiln
 * compile` read the same variables when they create their models.
 */
#ifndef KIR_OPTIONS_H
#define KIR_OPTIONS_H

#include <stdbool.h>

#include "kiln/core.h"
#include "kiln/options.h"

/* `s`, with the default `dflt` for KILN_SWITCH_DEFAULT. */
static inline bool kir_switch_on(kiln_switch s, bool dflt) {
  return s == KILN_SWITCH_DEFAULT ? dflt : s == KILN_SWITCH_ON;
}

/* The environment's options, read now (hidden: libkiln exports kiln_options_from_env). */
void kir_options_env(kiln_options *out);
/*
 * The options a decision uses: the environment's, overridden by every field
 * the context's options set, overridden by every field the call's set
 * (either may be NULL).
 */
void kir_options_resolve(const kiln_options *ctx_opts, const kiln_options *call_opts,
                         kiln_options *out);

/* Points o's strings at copies in one malloc'ed *block (the caller frees it), so that o outlives
   the strings it was given; false when out of memory. */
bool kir_options_own(kiln_options *o, char **block);

/* KILN_MEMORY_LIMIT, read now: bytes; 0 unset (or meaningless), -1 "none". */
int64_t kir_env_memory_limit(void);

#endif
