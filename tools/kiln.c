/*
 * kiln.c — the `kiln` command-line tool: the command table and main().
 *
 * `kiln COMMAND ARGS...` looks COMMAND up in one plain table and hands it
 * the rest of the command line; each command is a function in
 * tools/cmd_<name>.c that parses its own options with cli_next(). A new
 * command (compile, fit, grad, devices, check, bench, init) is one file and
 * one row below. Errors go to stderr as "kiln: MESSAGE"; a failed command
 * exits with 1, a malformed command line with 2.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_check(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_fit(int argc, char **argv);
int cmd_grad(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_ir(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_summary(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const cli_command commands[] = {
    {"check", cmd_check, "[--device D] [--tol T]",
     "check every layer type, compiled, against the float64 reference (outputs and gradients)",
     "Builds a small model of every layer type (mlp, conv, pooling, norms, lstm, gru,\n"
     "attention, transformers, compositions, siamese, gcn, sage, gat, gin, vae), runs it\n"
     "compiled and on the reference interpreter in float64 on fresh random inputs, and\n"
     "compares the outputs and the gradients of every parameter: one line per layer, then\n"
     "`OK: largest difference D (LAYER)` (exit 0) or the worst layer (exit 1).\n"
     "  --device D  cpu (default), vulkan[:N], cuda[:N], hip[:N] or auto: where the compiled\n"
     "              side runs\n"
     "  --tol T   the largest difference allowed (default 1e-12)"},
    {"compile", cmd_compile,
     "MODEL.kir|MODEL.kiln|MODEL.onnx -o MODEL.so [--header MODEL.h] [--params P.safetensors] "
     "[--name NAME] [--target cpu|vulkan|cuda|hip] [--target-cpu CPU] [--keep-temps] "
     "[--precision P] [--freeze NAME=FILE.npy] [--shape NAME=D0xD1x...]",
     "compile a model ahead of time into a shared object and a C header",
     "The .so needs only libc, libm, pthreads and OpenBLAS (no LLVM). Its entry points are\n"
     "NAME_create, NAME_output_dims, NAME_run, NAME_error and NAME_destroy, NAME taken from\n"
     "the output file unless --name gives it; the header lists the inputs and outputs.\n"
     "  --params P         weights to embed, matched to the model's parameters by name; those\n"
     "                     parameters are then no longer inputs of the .so\n"
     "  --target T         cpu (default), or vulkan, cuda, hip: the kernels compiled now and\n"
     "                     embedded (SPIR-V; sm_90 cubin + PTX; gfx90a/gfx908/gfx1030), run on\n"
     "                     device $KILN_DEVICE_INDEX (default 0) of that kind (docs/aot-gpu.md)\n"
     "  --target-cpu CPU   an LLVM CPU name such as x86-64-v3 (portable AVX2); default: this CPU\n"
     "  --keep-temps       keep the generated object, C tables and constant blob\n"
     "  --precision P      fp32 (default), fp64, tf32, bf16 or fp16 (docs/precision.md)\n"
     "  --freeze NAME=F    (ONNX) bakes the value in F.npy into the .so for graph input NAME,\n"
     "                     which is then no input: needed for inputs that decide shapes\n"
     "                     (Reshape's shape, Slice's starts, ...); the .so serves that value\n"
     "  --shape NAME=DIMS  (ONNX) fixes the symbolic dims of graph input NAME (e.g. 1x128),\n"
     "                     which stays an input: needed where a node refuses a symbolic dim\n"
     "                     (a batch folded into another dim, a dim used as data); the .so\n"
     "                     serves those dims"},
    {"devices", cmd_devices, "",
     "list the devices this machine can run models on",
     "One line per device: name (what --device takes), kind, detail. For the CPU the\n"
     "detail gives its model, vector features, the runtime's threads (KILN_NUM_THREADS\n"
     "or the CPUs) and the OpenBLAS build with the core it chose. Then the Vulkan, CUDA and\n"
     "ROCm devices; a kind with none gets one line saying why (`cuda: no CUDA device (...)`)."},
    {"fit", cmd_fit,
     "MODEL.kiln [--params P] --x X.npy [--y Y.npy] [--loss L] [--opt NAME] [--lr R] "
     "[--epochs E] [--batch-size B] [--seed S] [--clip C] [--schedule cosine|step|constant] "
     "[--val-x X --val-y Y] [--input NAME=FILE] [--mask M] [--precision P] [--backend B] "
     "[--device D] "
     "-o TRAINED.safetensors",
     "train a .kiln model; the whole training step is compiled once",
     "The step (forward, loss, backward, clipping, optimizer) is one compiled graph, run\n"
     "on every mini-batch (reshuffled every epoch from --seed); the last, smaller batch\n"
     "uses the same code through the symbolic batch dim. Prints the loss of every epoch.\n"
     "  --params P      starting parameters (default: kiln init with --seed)\n"
     "  --x X.npy       data for the model's tensor inputs, in declaration order\n"
     "  --y Y.npy       targets (labels for cross_entropy); none: the target is X\n"
     "  --input N=F     a named input, e.g. a graph's g.src=E.npy and g.dst=E.npy\n"
     "  --mask M.npy    weights of each sample/node in the loss (node tasks: a train mask)\n"
     "  --loss L        mse (default), mae, huber, cross_entropy, bce, vae\n"
     "  --opt NAME      sgd, adam (default), adamw, rmsprop, adagrad, nadam, radam, with\n"
     "                  arguments as in torch.optim: \"adamw(lr=3e-4, weight_decay=0.1)\"\n"
     "  --lr R          the learning rate (overrides the optimizer's)\n"
     "  --epochs E      passes over the data (default 10)\n"
     "  --batch-size B  samples per step (default: all)\n"
     "  --clip C        clip the global gradient norm to C\n"
     "  --schedule S    cosine (--total, --warmup), step (--step-size, --gamma) or constant\n"
     "  --val-x, --val-y, --val-mask  validation data: its loss is printed every epoch\n"
     "  --history F     write epoch,loss,val_loss lines to F\n"
     "  -q, --quiet     no progress lines\n"
     "  --precision P   fp32 (default), fp64, tf32, bf16 or fp16: the cast pass on the training\n"
     "                  step; fp16 adds dynamic loss scaling (docs/precision.md)\n"
     "  --backend B     auto (default: compiled, eager for a step the compiler refuses on the\n"
     "                  CPU), compiled (strictly) or eager (the float64 reference, on the CPU)\n"
     "  --device D      cpu (default), vulkan[:N], cuda[:N], hip[:N] or auto (CUDA, ROCm, a\n"
     "                  Vulkan GPU, else the CPU): the step is compiled for it once and every\n"
     "                  step runs there (docs/gpu.md)"},
    {"grad", cmd_grad,
     "MODEL.kiln --params P --x X.npy [--y Y.npy] [--loss L] -o GRADS.safetensors",
     "the gradient of a loss with respect to every parameter",
     "Prints the loss and writes d(loss)/d(parameter) for every parameter, named by path.\n"
     "Takes the data options of `kiln fit` (--x, --y, --input, --mask, --loss, --seed)."},
    {"init", cmd_init, "MODEL.kiln [--seed S] [--dtype f32|f64|f16|bf16] -o P.safetensors",
     "write a .kiln model's initial parameters as a safetensors file",
     "The tensors are named by parameter path (\"0.W\", \"blocks.1.att.Wq\") and depend only on\n"
     "the seed and the path (docs/layers.md), so every machine writes the same bytes.\n"
     "  --seed S    a non-negative integer (default 0)\n"
     "  --dtype T   the parameters' float type (default f32)\n"
     "  -o P        the safetensors file to write"},
    {"ir", cmd_ir, "MODEL.kir|MODEL.kiln [--dtype f32|f64|f16|bf16] [--train] [--pipeline NAME] "
                   "[--passes A,B,...] [--print-after-all] [--split-input-file] [--precision P] "
                   "[--emit kir|mlir|steps] [--full-constants]",
     "print the canonical IR of a model",
     "Parses MODEL.kir and prints it in canonical form on stdout. A .kiln model file is\n"
     "built into its graph: the model's parameters by path, then its inputs.\n"
     "  --dtype T   (.kiln) parameters and activations in T; default: the float inputs' dtype\n"
     "  --train     (.kiln) dropout and sampling on: the graph gets an i64 input \"seed\"\n"
     "  --pipeline NAME  the graph after pass pipeline NAME: cpu, vulkan, cuda, hip (what\n"
     "              compiling for that target runs), training (the gradients of result 0 with\n"
     "              respect to every float parameter) or precision (docs/passes.md)\n"
     "  --passes A,B,...  the graph after these passes of the registry, in order:\n"
     "              mixed-precision, widen-half, attention-tiling, autodiff, legalize,\n"
     "              canonicalize; a last \"fusion\" prints the fusion groups too\n"
     "  --split-input-file  (.kir) each part between \"// -----\" lines is a model of its own;\n"
     "              the results are printed separated the same way\n"
     "  --print-after-all  the graph after each pass of the pipeline (cpu unless --pipeline\n"
     "              names another) and the fusion groups (each becomes one kernel)\n"
     "  --precision P  fp32 (default), fp64, tf32, bf16 or fp16: the graph after the cast\n"
     "              pass (docs/precision.md)\n"
     "  --emit mlir  the legalized graph as an MLIR module (func, arith, math, linalg, tensor;\n"
     "              docs/mlir.md), checked by MLIR's verifier\n"
     "  --emit steps the steps of the CPU program `kiln compile` and `run` lower it to: kernels,\n"
     "              GEMM steps with their dtype and bf16 marks (docs/precision.md)\n"
     "  --full-constants  every element of every constant; by default a list attribute of more\n"
     "              than 64 elements (a model's weights) prints as elided(N), which does not\n"
     "              parse back"},
    {"run", cmd_run, "MODEL.kir --input NAME=FILE.npy ... -o DIR "
                     "[--backend auto|compiled|eager] [--device D] [--print] "
                     "[--params P.safetensors] "
                     "[--dtype T] [--train] [--seed S] [--precision P] [--repeat N]",
     "run a model on .npy inputs and write DIR/output_0.npy ...",
     "MODEL is .kir text, a .kiln model file (built with its parameters named by path) or\n"
     "an ONNX model, whose inputs that decide shapes (Reshape's shape, Slice's starts, ...)\n"
     "are given with --input too: the model is specialised to their values.\n"
     "  --input NAME=FILE.npy  binds the parameter %NAME (once per parameter); for a .kiln\n"
     "                         model its input NAME, and a graph input g as g.src=E.npy,\n"
     "                         g.dst=E.npy (i64[E] edges, self-loops included) and, where\n"
     "                         the model pools per graph, g.batch=B.npy (i64[N], each\n"
     "                         node's graph) and g.graphs=G.npy (i64[G], one per graph)\n"
     "  --params P             binds every parameter named in the safetensors file P; for\n"
     "                         a .kiln model (`kiln init` writes one) all of its parameters\n"
     "  -o, --output DIR       where output_0.npy, output_1.npy, ... are written (created)\n"
     "  --backend B            auto (default: compiled, with the eager fallback on the CPU\n"
     "                         for an op the compiler lacks), compiled (strictly) or eager\n"
     "                         (the float64 reference interpreter, on the CPU only)\n"
     "  --device D             cpu (default), vulkan[:N] (SPIR-V; Mesa's lavapipe where there\n"
     "                         is no GPU), cuda[:N] or hip[:N] (`kiln devices`; N default 0);\n"
     "                         auto: CUDA, ROCm, a Vulkan GPU (not lavapipe), else the CPU.\n"
     "                         Prints the backend and the device that ran\n"
     "  --print                also print every output's values as a nested list\n"
     "  --dtype T              (.kiln) the model's float type; default: its float inputs'\n"
     "  --train, --seed S      (.kiln) dropout and sampling on, seeded by S (default 0)\n"
     "  --precision P          fp32 (default), fp64, tf32, bf16 or fp16: the cast pass's\n"
     "                         policy (docs/precision.md)\n"
     "  --repeat N             (compiled, on the CPU) also compile once and time N more runs:\n"
     "                         prints the compile time and the median and fastest run;\n"
     "                         with KILN_PROFILE=1 the time of every step over those runs"},
    {"summary", cmd_summary, "MODEL.kiln",
     "print a .kiln model's inputs, layers and parameter counts",
     "One row per layer: its parameter path, constructor call and number of parameters,\n"
     "then the total number of trainable parameters."},
    {"help", cmd_help, "[COMMAND]", "show this help, or a command's", NULL},
    {"version", cmd_version, "", "print the version", NULL},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

const cli_command *cli_find_command(const char *name) {
  for (int i = 0; i < N_COMMANDS; i++)
    if (!strcmp(commands[i].name, name)) return &commands[i];
  return NULL;
}

int cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kiln: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static void print_usage_line(FILE *f, const char *cmd) {
  const cli_command *c = cmd ? cli_find_command(cmd) : NULL;
  if (c) fprintf(f, "usage: kiln %s%s%s\n", c->name, c->usage[0] ? " " : "", c->usage);
  else fprintf(f, "usage: kiln COMMAND [ARGS...]   (kiln --help lists the commands)\n");
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kiln: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  print_usage_line(stderr, cmd);
  return 2;
}

int cli_command_help(const cli_command *c) {
  print_usage_line(stdout, c->name);
  printf("\n%s\n", c->help);
  if (c->more) printf("\n%s\n", c->more);
  return 0;
}

static const cli_option *match_option(const cli_option *opts, const char *arg, size_t n) {
  for (const cli_option *o = opts; o && o->name; o++)
    if ((strlen(o->name) == n && !strncmp(o->name, arg, n)) ||
        (o->alias && strlen(o->alias) == n && !strncmp(o->alias, arg, n)))
      return o;
  return NULL;
}

int cli_next(cli_parser *p, const cli_option *opts, const char **value) {
  *value = NULL;
  if (p->i >= p->argc) return CLI_END;
  const char *arg = p->argv[p->i++];
  if (p->only_args || arg[0] != '-' || !arg[1]) {
    *value = arg;
    return CLI_ARG;
  }
  if (!strcmp(arg, "--")) {
    p->only_args = true;
    return cli_next(p, opts, value);
  }
  if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) return CLI_HELP;
  const char *eq = strchr(arg, '=');
  size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
  const cli_option *o = match_option(opts, arg, n);
  if (!o) {
    cli_usage_error(p->cmd, "unknown option '%.*s' for '%s'", (int)n, arg, p->cmd);
    return CLI_BAD;
  }
  if (!o->has_value) {
    if (!eq) return (int)(o - opts);
    cli_usage_error(p->cmd, "option '%s' takes no value", o->name);
    return CLI_BAD;
  }
  if (eq) *value = eq + 1;
  else if (p->i < p->argc) *value = p->argv[p->i++];
  else {
    cli_usage_error(p->cmd, "option '%s' needs a value", o->name);
    return CLI_BAD;
  }
  return (int)(o - opts);
}

static void print_help(void) {
  printf("kiln — a graph compiler for neural networks\n\n"
         "usage: kiln COMMAND [ARGS...]\n\ncommands:\n");
  for (int i = 0; i < N_COMMANDS; i++) printf("  %-10s %s\n", commands[i].name, commands[i].help);
  printf("\n`kiln help COMMAND` or `kiln COMMAND --help` shows a command's options.\n");
}

static int cmd_help(int argc, char **argv) {
  if (argc > 2) return cli_usage_error("help", "help takes at most one command name");
  if (argc == 2) {
    const cli_command *c = cli_find_command(argv[1]);
    if (!c) return cli_usage_error("help", "unknown command '%s'", argv[1]);
    return cli_command_help(c);
  }
  print_help();
  return 0;
}

static int cmd_version(int argc, char **argv) {
  (void)argv;
  if (argc > 1) return cli_usage_error("version", "version takes no arguments");
  printf("kiln %s\n", KILN_VERSION_STRING);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return cli_usage_error(NULL, "no command given");
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) return cmd_help(1, argv + 1);
  if (!strcmp(cmd, "--version")) return cmd_version(1, argv + 1);
  const cli_command *c = cli_find_command(cmd);
  if (!c) {
    if (cmd[0] == '-') return cli_usage_error(NULL, "unknown option '%s'", cmd);
    return cli_usage_error(NULL, "unknown command '%s'", cmd);
  }
  int status = c->run(argc - 1, argv + 1);
  if (fflush(stdout) != 0 && status == 0) return cli_error("cannot write to stdout");
  return status;
}
