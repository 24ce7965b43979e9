/* simcomm.h - core/comm.h over MPI_COMM_WORLD, for fedsim under mpirun: the
 * frames that cross ranks at a window's end (MPI_Alltoallv), the rows'
 * news (MPI_Allgatherv) and the sums and minima (MPI_Allreduce), all
 * blocking: a rank that dies ends the job through mpirun, and a rank that
 * fails calls fed_coll_abort. MPI must be initialised already
 * (fed_coll_mpi_open). mpi/none.c refuses it in a build without MPI. */
#ifndef FED_MPI_SIMCOMM_H
#define FED_MPI_SIMCOMM_H

#include "core/err.h"
#include "core/comm.h"

FED_WUR fed_err fed_mpi_sim_comm_new(fed_comm **out);
void fed_mpi_sim_comm_free(fed_comm *c);

#endif
