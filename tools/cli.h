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

/* ---------------------------------------------- .kiln models (kiln_model.c) */

/* Does `path` name a .kiln model file (by its extension)? */
bool cli_is_kiln_file(const char *path);
/* Does `path` name an ONNX model (by its extension)? */
bool cli_is_onnx_file(const char *path);
/* --dtype's value: f64, f32, f16 or bf16; else a usage error of `cmd` (returns 2). */
int cli_parse_float_dtype(const char *cmd, const char *s, kiln_dtype *out);
/* --device's value (tools/device_opt.c) as "cpu" or "KIND:N" into spec[n] ("auto" resolved);
 * else a usage error (2). */
int cli_parse_device(const char *cmd, const char *s, char *spec, size_t n);
/* Reads MODEL.kiln; on failure prints the error and returns 1. */
int cli_read_kiln(kiln_ctx *ctx, const char *path, kiln_model_file **out);
/*
 * The graph of a model file's layer on its declared inputs (kiln_layer_build).
 * `dtype` is the float type of parameters, activations and float inputs;
 * KILN_DTYPE_COUNT takes it from the first float input the file declares
 * (f32 if none). Prints the error and returns 1 on failure.
 */
int cli_build_kiln(kiln_ctx *ctx, const kiln_model_file *m, kiln_dtype dtype, bool train,
                   kiln_graph **out);
/*
 * The graph of `path`: .kir text parsed, an .onnx model imported, or a .kiln model file built as
 * above (then *m, when m is not NULL, is the model file, the caller's to
 * destroy; else NULL). Prints the error and returns 1 on failure.
 */
int cli_load_model(kiln_ctx *ctx, const char *path, kiln_dtype dtype, bool train,
                   kiln_graph **out, kiln_model_file **m);

/* ------------------------------------------- training data (train_data.c) */

#define CLI_MAX_DATA 32
typedef struct cli_data {
  const char *x[CLI_MAX_DATA]; /* --x, for the model's tensor inputs in order */
  size_t nx;
  const char *input_name[CLI_MAX_DATA]; /* --input NAME=FILE (graph pieces, named inputs) */
  size_t ninputs;
  const char *y, *mask;
} cli_data;

/*
 * Reads the .npy files for a training step's inputs `names` (model inputs,
 * graph pieces, "target", "loss_mask") into out[], converting floats to `dt`
 * and integer labels to i64. Prints the error and returns 1 on failure.
 */
int cli_bind_data(kiln_ctx *ctx, const kiln_model_file *m, kiln_dtype dt, const char *loss,
                  size_t nnames, const char *const *names, const cli_data *d, kiln_tensor **out);

/* ------------------------------------------- data-parallel runs (cli_mpi.c) */

/*
 * Under an MPI launcher, *comm becomes a communicator over the job (NULL outside one); `what`
 * names the command in the message of a build without MPI. Returns an exit status.
 */
int cli_comm_open(kiln_ctx *ctx, const char *what, kiln_comm **comm);
/* Agrees on the ranks' exit status (MPI_Abort when a rank does not answer), destroys comm and
   returns the status to exit with (status, or another rank's failure). NULL comm: status. */
int cli_comm_close(kiln_comm *comm, int status);

#endif
