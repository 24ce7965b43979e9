/* none.c - the MPI entry points of mpi/coll.h in a build without MPI (no
 * mpicc found): says so, and refuses to open (fed_coll_mpi_launched, in
 * mpi/coll.c, still tells the program mpirun started it). Linked instead of
 * mpi/mpi_coll.c. */
#include "mpi/coll.h"

int fed_coll_mpi_built(void)
{
    return 0;
}

fed_err fed_coll_mpi_open(int *argc, char ***argv, fed_coll **out)
{
    (void)argc, (void)argv;
    *out = NULL;
    return FED_ERR_UNSUPPORTED;
}

/* fedsim's comm (mpi/simcomm.h) in a build without MPI */
#include "mpi/simcomm.h"

fed_err fed_mpi_sim_comm_new(fed_comm **out)
{
    *out = NULL;
    return FED_ERR_UNSUPPORTED;
}

void fed_mpi_sim_comm_free(fed_comm *c)
{
    (void)c;
}
