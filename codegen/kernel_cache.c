/*
 * kernel_cache.c — the on-disk cache of compiled CPU kernels (the design: kernel_cache.h).
 *
 * A file is `<dir>/<32 hex digits>.kco`:
 *
 *   "KILNKCO1"   magic, 8 bytes
 *   key_len      u64, little-endian
 *   obj_len      u64
 *   obj_sum      u64, FNV-1a of the object
 *   key          key_len bytes
 *   obj          obj_len bytes
 *
 * and nothing after. The name is two 64-bit FNV-1a hashes of the key (different offsets).
 */
#include "kernel_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <llvm-c/Core.h>

#define MAGIC "KILNKCO1"
#define HEADER 32
/* A cached object larger than this is not read back (a model's unit is a few MB at most). */
#define MAX_OBJECT ((uint64_t)1 << 30)

static _Atomic uint64_t hits, misses;

void kcg_cache_counts(uint64_t *h, uint64_t *m) {
  *h = atomic_load(&hits);
  *m = atomic_load(&misses);
}

static uint64_t fnv1a(const void *p, size_t n, uint64_t h) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
  return h;
}

/* ---- where ---- */

/* mkdir -p for the folders of path (mode 0700 for the ones made). */
static bool make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    bool ok = !mkdir(path, 0700) || errno == EEXIST;
    *p = '/';
    if (!ok) return false;
  }
  return !mkdir(path, 0700) || errno == EEXIST;
}

bool kcg_cache_dir(const kiln_options *o, char *buf, size_t size) {
  if (o->kernel_cache == KILN_SWITCH_OFF) return false;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (o->cache_dir && *o->cache_dir) n = snprintf(buf, size, "%s", o->cache_dir);
  else if (xdg && *xdg == '/') n = snprintf(buf, size, "%s/kiln", xdg);
  else if (home && *home == '/') n = snprintf(buf, size, "%s/.cache/kiln", home);
  else return false;
  if (n <= 0 || (size_t)n >= size) return false;
  if (!make_dirs(buf)) return false;
  /* Machine code is run from here: a folder someone else owns or can write to is not used. */
  struct stat st;
  return !stat(buf, &st) && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
         !(st.st_mode & (S_IWGRP | S_IWOTH));
}

/* ---- the key ---- */

typedef struct build_id {
  const void *addr; /* an address inside the object looked for */
  char hex[2 * 64 + 1];
} build_id;

static int find_build_id(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  build_id *b = arg;
  uintptr_t a = (uintptr_t)b->addr;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    mine = ph->p_type == PT_LOAD && a >= lo && a - lo < ph->p_memsz;
  }
  if (!mine) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
      size_t name = (nh->n_namesz + 3) & ~(size_t)3, desc = (nh->n_descsz + 3) & ~(size_t)3;
      const char *d = p + sizeof *nh + name;
      if (d + desc > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(p + sizeof *nh, "GNU", 4) &&
          nh->n_descsz > 0 && nh->n_descsz <= 64) {
        for (size_t k = 0; k < nh->n_descsz; k++)
          sprintf(b->hex + 2 * k, "%02x", (unsigned char)d[k]);
        return 1;
      }
      p = d + desc;
    }
  }
  return 1; /* the object, without a build ID */
}

static build_id kiln_build;
static pthread_once_t build_once = PTHREAD_ONCE_INIT;

static void read_build_id(void) {
  kiln_build.addr = (const void *)(uintptr_t)&kcg_cache_key_header;
  dl_iterate_phdr(find_build_id, &kiln_build);
}

char *kcg_cache_key_header(const char *pipeline) {
  pthread_once(&build_once, read_build_id);
  if (!kiln_build.hex[0]) return NULL;
  unsigned maj, min, patch;
  LLVMGetVersion(&maj, &min, &patch);
  char *s = NULL;
  if (asprintf(&s, "; kiln build %s, llvm %u.%u.%u, %s\n", kiln_build.hex, maj, min, patch,
               pipeline) < 0)
    return NULL;
  return s;
}

/* ---- files ---- */

static void file_name(const char *dir, const char *key, size_t key_len, char *buf, size_t size) {
  snprintf(buf, size, "%s/%016llx%016llx.kco", dir,
           (unsigned long long)fnv1a(key, key_len, 0xcbf29ce484222325ull),
           (unsigned long long)fnv1a(key, key_len, 0x84222325cbf29ce4ull));
}

static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++, v >>= 8) p[i] = (unsigned char)v;
}

/* All of fd's n bytes into buf. */
static bool read_all(int fd, void *buf, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

static void *load(const char *dir, const char *key, size_t key_len, size_t *len) {
  char path[4096 + 64];
  file_name(dir, key, key_len, path, sizeof path);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  unsigned char h[HEADER];
  void *obj = NULL;
  char *stored = NULL;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < HEADER || !read_all(fd, h, HEADER) ||
      memcmp(h, MAGIC, 8))
    goto miss;
  uint64_t klen = get64(h + 8), olen = get64(h + 16), sum = get64(h + 24);
  if (klen != key_len || olen == 0 || olen > MAX_OBJECT ||
      (uint64_t)st.st_size != HEADER + klen + olen)
    goto miss;
  stored = malloc(klen ? klen : 1);
  obj = malloc(olen);
  if (!stored || !obj || !read_all(fd, stored, klen) || memcmp(stored, key, klen) ||
      !read_all(fd, obj, olen) || fnv1a(obj, olen, 0xcbf29ce484222325ull) != sum)
    goto miss;
  free(stored);
  close(fd);
  *len = olen;
  return obj;
miss:
  free(stored);
  free(obj);
  close(fd);
  return NULL;
}

void *kcg_cache_load(const char *dir, const char *key, size_t key_len, size_t *len) {
  void *obj = load(dir, key, key_len, len);
  atomic_fetch_add(obj ? &hits : &misses, 1);
  return obj;
}

static bool write_all(int fd, const void *buf, size_t n) {
  for (size_t put = 0; put < n;) {
    ssize_t w = write(fd, (const char *)buf + put, n - put);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    put += (size_t)w;
  }
  return true;
}

void kcg_cache_store(const char *dir, const char *key, size_t key_len, const void *obj,
                     size_t len) {
  if (!len || len > MAX_OBJECT) return;
  char path[4096 + 64], tmp[4096 + 128];
  file_name(dir, key, key_len, path, sizeof path);
  static _Atomic unsigned serial;
  snprintf(tmp, sizeof tmp, "%s.%ld.%u.tmp", path, (long)getpid(), atomic_fetch_add(&serial, 1));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  unsigned char h[HEADER];
  memcpy(h, MAGIC, 8);
  put64(h + 8, key_len);
  put64(h + 16, len);
  put64(h + 24, fnv1a(obj, len, 0xcbf29ce484222325ull));
  bool ok = write_all(fd, h, HEADER) && write_all(fd, key, key_len) && write_all(fd, obj, len);
  ok = !close(fd) && ok;
  if (!ok || rename(tmp, path)) unlink(tmp);
}
