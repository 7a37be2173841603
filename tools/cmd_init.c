/*
 * cmd_init.c — `kiln init MODEL.kiln --seed S [--dtype f32] -o P.safetensors`:
 * a model's initial parameters, written as a safetensors file.
 *
 * The parameters are named by their path ("0.W", "blocks.1.att.Wq") and
 * drawn by kiln_layer_init, which depends on nothing but the seed and the
 * path (docs/layers.md), so the same command writes the same bytes on
 * every machine. `kiln run MODEL.kiln --params P.safetensors` reads them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

typedef struct init_opts {
  const char *model, *out;
  uint64_t seed;
  kiln_dtype dtype;
} init_opts;

static int parse_seed(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *end || errno || *s == '-' || *s == '+')
    return cli_usage_error("init", "--seed expects a non-negative integer, got '%s'", s);
  *out = v;
  return 0;
}

/* 0 to go on, > 0 an exit status, < 0 for --help (exit 0). */
static int parse_args(int argc, char **argv, init_opts *o) {
  enum { O_SEED, O_DTYPE, O_OUT };
  static const cli_option opts[] = {[O_SEED] = {"--seed", NULL, true},
                                    [O_DTYPE] = {"--dtype", NULL, true},
                                    [O_OUT] = {"--output", "-o", true},
                                    {0}};
  cli_parser p = {.cmd = "init", .argc = argc, .argv = argv, .i = 1};
  const char *v;
  int k, r = 0;
  while ((k = cli_next(&p, opts, &v)) != CLI_END && !r) {
    switch (k) {
    case CLI_BAD: return 2;
    case CLI_HELP: return cli_command_help(cli_find_command("init")), -1;
    case CLI_ARG:
      if (o->model) return cli_usage_error("init", "unexpected argument '%s'", v);
      o->model = v;
      break;
    case O_SEED: r = parse_seed(v, &o->seed); break;
    case O_DTYPE: r = cli_parse_float_dtype("init", v, &o->dtype); break;
    case O_OUT: o->out = v; break;
    }
  }
  if (r) return r;
  if (!o->model) return cli_usage_error("init", "no model file given");
  if (!o->out) return cli_usage_error("init", "no output file given (-o P.safetensors)");
  return 0;
}

int cmd_init(int argc, char **argv) {
  init_opts o = {.dtype = KILN_F32};
  int r = parse_args(argc, argv, &o);
  if (r) return r < 0 ? 0 : r;
  kiln_ctx *ctx = kiln_ctx_create();
  if (!ctx) return cli_error("out of memory");
  kiln_model_file *m = NULL;
  kiln_params *p = NULL;
  int64_t count = 0;
  int status = cli_read_kiln(ctx, o.model, &m);
  if (!status && (kiln_layer_init(ctx, kiln_model_file_layer(m), o.seed, o.dtype, &p) ||
                  kiln_layer_count_params(ctx, kiln_model_file_layer(m), &count) ||
                  kiln_safetensors_write(ctx, o.out, p)))
    status = cli_error("%s", kiln_ctx_error(ctx));
  if (!status)
    printf("%s: %zu tensors, %lld parameters, %s, seed %llu\n", o.out, kiln_params_count(p),
           (long long)count, kiln_dtype_name(o.dtype), (unsigned long long)o.seed);
  kiln_params_destroy(p);
  kiln_model_file_destroy(m);
  kiln_ctx_destroy(ctx);
  return status;
}
