/*
 * cli.h — what the `kiln` tool's commands share: the command table, option
 * parsing, and the two ways a command fails.
 *
 * Each command lives in tools/cmd_<name>.c as one function
 * `int cmd_<name>(int argc, char **argv)` (argv[0] is the command's name)
 * and one row of the table in tools/kiln.c. Commands print errors with
 * cli_error() and return its value (exit status 1), or cli_usage_error()
 * for a malformed command line (status 2, followed by the usage line).
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "kiln/kiln.h"

#define KILN_VERSION_STRING "0.1.0"

typedef int (*cli_fn)(int argc, char **argv);

typedef struct cli_command {
  const char *name;
  cli_fn run;
  const char *usage; /* the arguments after `kiln NAME` */
  const char *help;  /* one line for `kiln --help` */
  const char *more;  /* further lines for `kiln help NAME`, or NULL */
} cli_command;

const cli_command *cli_find_command(const char *name);

#if defined(__GNUC__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
/* Writes a tensor's values on `f` as a nested list, one innermost row per line (values.c). */
void cli_print_values(FILE *f, const kiln_tensor *t);

#endif

/* "kiln: MESSAGE" on stderr; returns 1. */
int cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "kiln: MESSAGE" and "usage: kiln CMD USAGE" on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* The full help of one command on stdout; returns 0. */
int cli_command_help(const cli_command *c);

/* One option a command accepts: "--input" (and an alias such as "-o"). */
typedef struct cli_option {
  const char *name;
  const char *alias; /* or NULL */
  bool has_value;
} cli_option;

enum { CLI_END = -1, CLI_ARG = -2, CLI_BAD = -3, CLI_HELP = -4 };

typedef struct cli_parser {
  const char *cmd;
  int argc;
  char **argv;
  int i;           /* next argument */
  bool only_args;  /* after "--" */
} cli_parser;

/*
 * The next item of the command line: the index of an option in `opts`
 * (with its value in *value, from "--name value" or "--name=value"),
 * CLI_ARG for a positional argument (in *value), CLI_HELP for -h/--help,
 * CLI_END, or CLI_BAD after printing a usage error.
 */
int cli_next(cli_parser *p, const cli_option *opts, const char **value);

/* Writes a tensor's values on `f` as a nested list, one innermost row per line (values.c). */
void cli_print_values(FILE *f, const kiln_tensor *t);

#endif
