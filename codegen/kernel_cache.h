/*
 * kernel_cache.h — the on-disk cache of compiled CPU kernels (kernel_cache.c).
 *
 * The JIT (llvm_cpu.c) compiles a model's kernels in a few LLVM modules. Each module's key is
 * its whole LLVM IR text before optimisation (which names the target, the CPU and its features on
 * every function) behind a line with what else decides the machine code: Kiln's build (the ELF
 * build ID of the code holding this file), LLVM's version and the optimisation pipeline. The
 * object code of a module is stored under a hash of its key, with the key itself, so a hit is an
 * exact match of the key, never a hash collision. Anything wrong with a file — a short or long
 * one, another key, a damaged object (checksum), a link, not a regular file — is a miss, and the
 * module is compiled and stored again. Files are written under a temporary name and renamed into
 * place, so processes that share a folder never read a half-written file.
 */
#ifndef KCG_KERNEL_CACHE_H
#define KCG_KERNEL_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/options.h"

/*
 * The cache folder that options choose, into buf: kiln_options.cache_dir (KILN_CACHE_DIR), else
 * $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln. False (no cache) when kiln_options.kernel_cache is
 * off (KILN_KERNEL_CACHE=0), when no folder can be named, or when it cannot be created or is
 * not a folder of this user's.
 */
bool kcg_cache_dir(const kiln_options *o, char *buf, size_t size);

/* The first line of every key: Kiln's build, LLVM's version and `pipeline` (the caller's words
   for its optimisation settings). NULL when Kiln's build cannot be identified (no cache then). */
char *kcg_cache_key_header(const char *pipeline);

/* The object stored under `key` in dir, in a malloc'd buffer (*len bytes), or NULL (a miss). */
void *kcg_cache_load(const char *dir, const char *key, size_t key_len, size_t *len);

/* Stores obj under `key` in dir; failing to is not an error (the next compile misses again). */
void kcg_cache_store(const char *dir, const char *key, size_t key_len, const void *obj, size_t len);

/* Hits and misses since the process started (for tests and `KILN_PROFILE`). */
void kcg_cache_counts(uint64_t *hits, uint64_t *misses);

#endif
