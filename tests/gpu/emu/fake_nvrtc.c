/*
 * fake_nvrtc.c — a stand-in for libnvrtc.so for tests/gpu/gemm_emulate.sh:
 * "compiling" a program runs g++ on its source with cuda_emu.h forced in
 * front plus a launcher (kiln_emu_launch) for the GEMM kernel `kiln_gemm`,
 * and the "cubin" is the path of the shared object, which fake_cuda.c's
 * cuModuleLoadData opens. Only the entry points codegen/cuda.c uses exist.
 * EMU_DIR names this directory (for cuda_emu.h and include/).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct prog {
  char *src;
  char so[256];
  char log[4096];
} prog;

int nvrtcCreateProgram(void **p, const char *src, const char *name, int n, const char *const *h,
                       const char *const *i) {
  (void)name, (void)n, (void)h, (void)i;
  prog *pr = calloc(1, sizeof *pr);
  if (!pr || !(pr->src = strdup(src))) return 1;
  *p = pr;
  return 0;
}

static int count(const char *s, const char *w) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, w)); p += strlen(w)) n++;
  return n;
}

int nvrtcCompileProgram(void *p, int n, const char *const *opts) {
  (void)n, (void)opts;
  prog *pr = p;
  static atomic_int serial;
  const char *dir = getenv("EMU_DIR") ? getenv("EMU_DIR") : ".";
  const char *tmp = getenv("EMU_TMP") ? getenv("EMU_TMP") : "/tmp";
  int id = atomic_fetch_add(&serial, 1);
  char cpp[256];
  snprintf(cpp, sizeof cpp, "%s/kiln_emu_%d_%d.cpp", tmp, (int)getpid(), id);
  snprintf(pr->so, sizeof pr->so, "%s/kiln_emu_%d_%d.so", tmp, (int)getpid(), id);
  FILE *f = fopen(cpp, "w");
  if (!f) return snprintf(pr->log, sizeof pr->log, "cannot write %s", cpp), 6;
  int nb = count(pr->src, "long long d") ; /* batch axes: d0, d1, ... in the signature */
  fprintf(f, "%s\n", pr->src);
  fprintf(f, "static void emu_body_fn(void *a) {\n  void **p = (void **)a;\n"
             "  kiln_gemm((const KG_AT *)(uintptr_t)*(unsigned long long *)p[0],"
             " (const KG_BT *)(uintptr_t)*(unsigned long long *)p[1],"
             " (KG_CT *)(uintptr_t)*(unsigned long long *)p[2]");
  for (int i = 3; i < 7 + 3 * nb; i++) fprintf(f, ", *(long long *)p[%d]", i);
  fprintf(f, ");\n}\nextern \"C\" void kiln_emu_launch(unsigned gx, unsigned gy, unsigned gz,"
             " unsigned bx, void **p) { emu_run(gx, gy, gz, bx, emu_body_fn, p); }\n");
  fclose(f);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "g++ -std=c++17 -O1 -w -fPIC -shared -fsanitize=alignment,bounds "
           "-fno-sanitize-recover=all -include %s/cuda_emu.h -I%s/include -o %s %s 2>%s.log",
           dir, dir, pr->so, cpp, pr->so);
  if (system(cmd) != 0) {
    snprintf(pr->log, sizeof pr->log, "g++ failed: see %s.log", pr->so);
    return 6;
  }
  return 0;
}

int nvrtcGetProgramLogSize(void *p, size_t *n) { *n = strlen(((prog *)p)->log) + 1; return 0; }
int nvrtcGetProgramLog(void *p, char *s) { strcpy(s, ((prog *)p)->log); return 0; }
int nvrtcGetCUBINSize(void *p, size_t *n) { *n = strlen(((prog *)p)->so) + 1; return 0; }
int nvrtcGetCUBIN(void *p, char *s) { strcpy(s, ((prog *)p)->so); return 0; }
int nvrtcGetPTXSize(void *p, size_t *n) { return nvrtcGetCUBINSize(p, n); }
int nvrtcGetPTX(void *p, char *s) { return nvrtcGetCUBIN(p, s); }
int nvrtcDestroyProgram(void **p) {
  prog *pr = *p;
  if (pr) free(pr->src), free(pr);
  *p = NULL;
  return 0;
}
const char *nvrtcGetErrorString(int rc) { return rc ? "NVRTC_ERROR_COMPILATION (emulated)" : "NVRTC_SUCCESS"; }
