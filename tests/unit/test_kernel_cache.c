/*
 * test_kernel_cache.c — the JIT's on-disk kernel cache (codegen/kernel_cache.c): a second
 * compile of the same graph loads every module instead of compiling it and computes the same
 * bits; a damaged, foreign or planted file is a miss that is compiled and written again; the
 * cache switched off, or a folder it must not use, writes nothing. Every run is compared with
 * the float64 reference interpreter on fresh random inputs.
 */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/kernel_cache.h"
#include "harness.h"

static const char *const graph =
    "func @main(%x: f32[24, 40], %w: f32[40, 33], %v: f32[33]) -> (f32[24, 33], f32[24]) {\n"
    "  %y = matmul(%x, %w) : f32[24, 33]\n"
    "  %z = add(%y, %v) : f32[24, 33]\n"
    "  %t = tanh(%z) : f32[24, 33]\n"
    "  %e = exp(%t) : f32[24, 33]\n"
    "  %s = reduce_sum(%e) {axes = [1], keepdims = false} : f32[24]\n"
    "  return %t, %s\n}\n";

static kiln_tensor *random_tensor(kiln_ctx *ctx, size_t rank, const int64_t *dims, unsigned seed) {
  kiln_tensor *t = NULL;
  if (kiln_tensor_create(ctx, KILN_F32, rank, dims, &t) != KILN_OK) return NULL;
  float *p = kiln_tensor_data(t);
  srand(seed);
  for (size_t i = 0; i < kiln_tensor_numel(t); i++)
    p[i] = (float)((double)rand() / RAND_MAX * 2.0 - 1.0);
  return t;
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += strstr(e->d_name, ".kco") != NULL;
  if (d) closedir(d);
  return n;
}

/* The path of the first .kco file in dir, into buf. */
static bool first_file(const char *dir, char *buf, size_t size) {
  DIR *d = opendir(dir);
  bool found = false;
  for (struct dirent *e; d && !found && (e = readdir(d));)
    if (strstr(e->d_name, ".kco")) found = snprintf(buf, size, "%s/%s", dir, e->d_name) > 0;
  if (d) closedir(d);
  return found;
}

typedef struct fixture {
  kiln_ctx *ctx;
  kiln_graph *g;
  kiln_tensor *in[3], *want[2];
  float got[2][24 * 33]; /* the first compile's results */
} fixture;

/*
 * Compiles the graph with `opt`, runs it, compares it with the interpreter (and, when `same`,
 * bit for bit with the first compile's results, which `keep` stores); the cache's hits and
 * misses during the compile go to *hits and *misses.
 */
static void compile_run(fixture *f, const kiln_options *opt, const char *what, bool keep,
                        bool same, uint64_t *hits, uint64_t *misses) {
  uint64_t h0, m0, h1, m1;
  kcg_cache_counts(&h0, &m0);
  kiln_compile_options co = {.options = opt};
  kiln_compiled *c = NULL;
  kiln_tensor *out[2] = {0};
  if (kiln_compile(f->g, &co, &c) != KILN_OK ||
      kiln_compiled_run(c, f->ctx, 3, f->in, 2, out, NULL) != KILN_OK) {
    fprintf(stderr, "%s: %s\n", what, kiln_ctx_error(f->ctx));
    failures++;
  } else {
    for (int r = 0; r < 2; r++) {
      const float *p = kiln_tensor_data(out[r]);
      const double *w = kiln_tensor_data(f->want[r]);
      size_t n = kiln_tensor_numel(out[r]);
      for (size_t i = 0; i < n; i++) {
        if (fabs(p[i] - w[i]) > 1e-5 * (1 + fabs(w[i]))) {
          fprintf(stderr, "%s: result %d[%zu] = %.9g, the interpreter gives %.9g\n", what, r, i,
                  p[i], w[i]);
          failures++;
          break;
        }
      }
      if (keep) memcpy(f->got[r], p, n * sizeof *p);
      if (same && memcmp(f->got[r], p, n * sizeof *p)) {
        fprintf(stderr, "%s: result %d differs from the first compile's\n", what, r);
        failures++;
      }
    }
  }
  kcg_cache_counts(&h1, &m1);
  *hits = h1 - h0;
  *misses = m1 - m0;
  for (int r = 0; r < 2; r++) kiln_tensor_destroy(out[r]);
  kiln_compiled_destroy(c);
}

/* Damages the first cached file with `how`; a compile then misses once and writes it again. */
static void check_damage(fixture *f, const kiln_options *opt, const char *dir, const char *how) {
  char path[4200], other[4300];
  if (!first_file(dir, path, sizeof path)) {
    fprintf(stderr, "%s: no cached file\n", how);
    failures++;
    return;
  }
  struct stat st;
  CHECK(!stat(path, &st));
  if (!strcmp(how, "truncated")) {
    CHECK(!truncate(path, st.st_size - 1));
  } else if (!strcmp(how, "a byte of the object changed")) {
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    CHECK(fd >= 0 && pread(fd, &b, 1, st.st_size - 100) == 1);
    b ^= 0x40;
    CHECK(fd >= 0 && pwrite(fd, &b, 1, st.st_size - 100) == 1);
    if (fd >= 0) close(fd);
  } else if (!strcmp(how, "another key")) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0 && pwrite(fd, "#", 1, 40) == 1); /* inside the key's first line */
    if (fd >= 0) close(fd);
  } else if (!strcmp(how, "a link to a good file")) {
    snprintf(other, sizeof other, "%s.saved", path);
    CHECK(!rename(path, other) && !symlink(other, path));
  } else if (!strcmp(how, "a FIFO")) {
    CHECK(!unlink(path) && !mkfifo(path, 0600));
  } else if (!strcmp(how, "a folder")) {
    CHECK(!unlink(path) && !mkdir(path, 0700));
  }
  uint64_t hits, misses;
  compile_run(f, opt, how, false, true, &hits, &misses);
  if (misses != 1) {
    fprintf(stderr, "%s: %llu misses, expected 1\n", how, (unsigned long long)misses);
    failures++;
  }
  if (!strcmp(how, "a folder")) { /* rename cannot replace a folder: it stays, and misses */
    CHECK(!stat(path, &st) && S_ISDIR(st.st_mode) && !rmdir(path));
  } else { /* a regular file again, written whole (a link or FIFO replaced, not followed) */
    struct stat now;
    CHECK(!lstat(path, &now) && S_ISREG(now.st_mode) && now.st_size == st.st_size);
    if (!strcmp(how, "a link to a good file")) CHECK(!unlink(other));
  }
  compile_run(f, opt, how, false, true, &hits, &misses);
  CHECK(misses == !strcmp(how, "a folder")); /* the folder was removed above: compiled once more */
}

int main(void) {
  fixture f = {0};
  f.ctx = kiln_ctx_create();
  char base[] = "/tmp/kiln-kcache-XXXXXX";
  if (!mkdtemp(base) || kiln_graph_parse(f.ctx, graph, strlen(graph), "cache", &f.g) != KILN_OK) {
    fprintf(stderr, "setup: %s\n", kiln_ctx_error(f.ctx));
    return 1;
  }
  int64_t dx[] = {24, 40}, dw[] = {40, 33}, dv[] = {33};
  f.in[0] = random_tensor(f.ctx, 2, dx, 11);
  f.in[1] = random_tensor(f.ctx, 2, dw, 12);
  f.in[2] = random_tensor(f.ctx, 1, dv, 13);
  /* the reference, in float64 */
  kiln_tensor *in64[3] = {0};
  for (int i = 0; i < 3; i++) {
    size_t rank = kiln_tensor_rank(f.in[i]);
    int64_t dims[2] = {i == 2 ? 33 : i ? 40 : 24, i == 0 ? 40 : 33};
    CHECK(kiln_tensor_create(f.ctx, KILN_F64, rank, dims, &in64[i]) == KILN_OK);
    for (size_t k = 0; k < kiln_tensor_numel(f.in[i]); k++)
      ((double *)kiln_tensor_data(in64[i]))[k] = ((float *)kiln_tensor_data(f.in[i]))[k];
  }
  kiln_graph *g64 = NULL;
  char *text64 = strdup(graph);
  for (char *p = text64; (p = strstr(p, "f32"));) memcpy(p, "f64", 3);
  CHECK(kiln_graph_parse(f.ctx, text64, strlen(text64), "cache64", &g64) == KILN_OK);
  CHECK(kiln_graph_run(g64, KILN_BACKEND_EAGER, 3, in64, 2, f.want, NULL) == KILN_OK);
  free(text64);
  kiln_graph_destroy(g64);
  for (int i = 0; i < 3; i++) kiln_tensor_destroy(in64[i]);

  char dir[256], off[256], shared[256], under_file[300];
  snprintf(dir, sizeof dir, "%s/cache", base); /* made by the first compile */
  kiln_options opt = {.cache_dir = dir};
  uint64_t hits, misses;

  /* cold, then warm: every module from the cache, the same bits */
  compile_run(&f, &opt, "cold", true, false, &hits, &misses);
  int files = count_files(dir);
  CHECK(hits == 0 && misses >= 1 && files == (int)misses);
  compile_run(&f, &opt, "warm", false, true, &hits, &misses);
  CHECK(misses == 0 && (int)hits == files);
  CHECK(count_files(dir) == files);

  static const char *const damage[] = {"truncated", "a byte of the object changed", "another key",
                                       "a link to a good file", "a FIFO", "a folder"};
  for (size_t i = 0; i < sizeof damage / sizeof *damage; i++) check_damage(&f, &opt, dir, damage[i]);

  /* switched off: nothing read or written */
  snprintf(off, sizeof off, "%s/off", base);
  kiln_options o_off = {.cache_dir = off, .kernel_cache = KILN_SWITCH_OFF};
  compile_run(&f, &o_off, "off", false, true, &hits, &misses);
  CHECK(hits == 0 && misses == 0 && access(off, F_OK) != 0);

  /* a folder others can write to is not used */
  snprintf(shared, sizeof shared, "%s/shared", base);
  CHECK(!mkdir(shared, 0700) && !chmod(shared, 0777));
  kiln_options o_shared = {.cache_dir = shared};
  compile_run(&f, &o_shared, "shared folder", false, true, &hits, &misses);
  CHECK(hits == 0 && misses == 0 && count_files(shared) == 0);

  /* a folder that cannot be made: the compile goes on without the cache */
  snprintf(under_file, sizeof under_file, "%s/cache/x.kco.file/sub", base);
  char file[300];
  snprintf(file, sizeof file, "%s/cache/x.kco.file", base);
  FILE *fp = fopen(file, "w");
  CHECK(fp != NULL);
  if (fp) fclose(fp);
  kiln_options o_bad = {.cache_dir = under_file};
  compile_run(&f, &o_bad, "folder under a file", false, true, &hits, &misses);
  CHECK(hits == 0 && misses == 0);

  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  CHECK(system(cmd) == 0);
  for (int i = 0; i < 3; i++) kiln_tensor_destroy(f.in[i]);
  for (int i = 0; i < 2; i++) kiln_tensor_destroy(f.want[i]);
  kiln_graph_destroy(f.g);
  kiln_ctx_destroy(f.ctx);
  if (!failures) printf("test_kernel_cache: cold, warm, 6 kinds of damaged file, off, shared and unusable folders\n");
  return test_status(failures);
}
