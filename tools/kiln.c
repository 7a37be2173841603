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

int cmd_compile(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_ir(int argc, char **argv);
int cmd_run(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const cli_command commands[] = {
    {"compile", cmd_compile,
     "MODEL.kir -o MODEL.so [--header MODEL.h] [--params P.safetensors] [--name NAME] "
     "[--target cpu] [--target-cpu CPU] [--keep-temps]",
     "compile a model ahead of time into a shared object and a C header",
     "The .so needs only libc, libm, pthreads and OpenBLAS (no LLVM). Its entry points are\n"
     "NAME_create, NAME_output_dims, NAME_run, NAME_error and NAME_destroy, NAME taken from\n"
     "the output file unless --name gives it; the header lists the inputs and outputs.\n"
     "  --params P         weights to embed, matched to the model's parameters by name; those\n"
     "                     parameters are then no longer inputs of the .so\n"
     "  --target-cpu CPU   an LLVM CPU name such as x86-64-v3 (portable AVX2); default: this CPU\n"
     "  --keep-temps       keep the generated object, C tables and constant blob"},
    {"devices", cmd_devices, "",
     "list the devices this machine can run models on",
     "One line per device: name (what --device takes), kind, detail. For the CPU the\n"
     "detail gives its model, vector features, the runtime's threads (KILN_NUM_THREADS\n"
     "or the CPUs) and the OpenBLAS build with the core it chose."},
    {"ir", cmd_ir, "MODEL.kir",
     "print the canonical IR of a model",
     "Parses MODEL.kir and prints it in canonical form on stdout."},
    {"run", cmd_run, "MODEL.kir --input NAME=FILE.npy ... -o DIR [--backend auto|compiled|eager] "
                     "[--print]",
     "run a model on .npy inputs and write DIR/output_0.npy ...",
     "  --input NAME=FILE.npy  binds the parameter %NAME (once per parameter)\n"
     "  -o, --output DIR       where output_0.npy, output_1.npy, ... are written (created)\n"
     "  --backend B            auto (default), compiled or eager\n"
     "  --print                also print every output's values as a nested list"},
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
