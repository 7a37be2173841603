/*
 * cli_mpi.c — the communicator of a data-parallel `kiln fit` or `kiln run PROGRAM` started by
 * an MPI launcher (docs/distributed.md): found from the launcher's environment, created over
 * the whole job, and closed with every rank agreeing on the exit status.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

/*
 * Under an MPI launcher (mpirun, mpiexec, srun --mpi=pmix) `kiln fit` (or a program's
 * fit(), `kiln run`) is one rank of a data-parallel run: the job's size from the launcher's environment, 1 outside one.
 */
static int launcher_size(const char **var) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) {
      *var = vars[i];
      return atoi(v);
    }
  }
  const char *slurm = getenv("SLURM_NTASKS");
  if (slurm && (getenv("PMIX_RANK") || getenv("PMI_RANK")) && atoi(slurm) > 0) {
    *var = "SLURM_NTASKS";
    return atoi(slurm);
  }
  return 1;
}

/* The communicator of a data-parallel `kiln fit` (NULL in one process), or an exit status. */
int cli_comm_open(kiln_ctx *ctx, const char *what, kiln_comm **comm) {
  const char *var = NULL;
  int size = launcher_size(&var);
  *comm = NULL;
  if (size <= 1) return 0;
  if (!kiln_comm_mpi_available())
    return cli_error("%s runs as one of %d processes (%s=%d), but this build of Kiln has no "
                     "MPI: it cannot train data-parallel (install libopenmpi-dev, or run "
                     "tools/setup.sh, and configure again)", what, size, var, size);
  if (kiln_comm_create_world(ctx, comm)) return cli_error("%s", kiln_ctx_error(ctx));
  return 0;
}

/*
 * The end of a data-parallel run: every rank learns whether any failed. A rank that does not
 * answer within the timeout (it died or hangs) ends the job (MPI_Abort), so that none waits.
 */
int cli_comm_close(kiln_comm *comm, int status) {
  if (!comm) return status;
  int worst = status;
  if (kiln_comm_agree(comm, status, &worst)) {
    fprintf(stderr, "kiln: rank %d: a rank does not answer; ending the job (MPI_Abort)\n",
            kiln_comm_rank(comm));
    kiln_comm_abort(comm, status ? status : 1);
  }
  if (!status && worst)
    fprintf(stderr, "kiln: rank %d: another rank failed (its message says why)\n",
            kiln_comm_rank(comm));
  kiln_comm_destroy(comm);
  return status ? status : worst;
}
