// SPDX-License-Identifier: Apache-2.0
// The `mpi` backend: OpenMPI's collectives, one rank per process. Built with MPI (WITH_MPI).
//
// Under mpirun (OMPI_COMM_WORLD_SIZE > 1) the communicator is MPI_COMM_WORLD's; CommOptions'
// rank and world size must be the launcher's.
//
// Outside a launcher (processes mpirun did not start, e.g. Spark executors) each process is an
// MPI singleton, and the ranks join one communicator through an ompi-server, which every rank
// must be able to reach: start `ompi-server --report-uri FILE` and set
// OMPI_MCA_pmix_server_uri=file:FILE (or the URI itself) in every rank's environment. Rank 0
// opens a port (MPI_Open_port); the others learn its name from CommOptions::mpi_port when the
// caller's rendezvous carried it (OpenMpiPort on rank 0, before the rendezvous), else from the
// server's name service (MPI_Publish_name / MPI_Lookup_name under "cortado-<token>-<attempt>",
// retried until connect_timeout_s). The group then grows one rank at a time, in rank order
// (MPI_Comm_accept by every member, MPI_Comm_connect by the newcomer, MPI_Intercomm_merge):
// before each accept rank 0 publishes "cortado-<token>-<attempt>-turn-<k>", which rank k
// awaits before it connects, because Open MPI 4.1 singletons connecting to one port at the
// same time could leave the accept hanging. The group is finally ordered by the requested
// ranks (MPI_Comm_split). MPI has no timeout for accept and connect, and cannot cancel them:
// they run on a helper thread, and when one has not ended after connect_timeout_s the join fails
// with kTimeout naming the rank that did not join (the ranks waiting for their turn behind it
// name it too). The helper thread is then left detached, blocked in the call; it does not keep
// the process (a JVM) from exiting, but MPI is not finalised at exit any more, and later MPI use
// in the process needs MPI_THREAD_MULTIPLE (which Open MPI provides).
//
// Collectives are MPI's non-blocking ones (MPI_Iallreduce, ...), polled with MPI_Test so that
// CommOptions::timeout_s and Abort end a call that a lost peer would keep forever; the
// communicator is broken afterwards. MPI is initialised once per process, with
// MPI_THREAD_MULTIPLE if offered (calls are serialised by the communicator anyway), errors
// return codes (MPI_ERRORS_RETURN) rather than kill the process, and nothing calls MPI_Abort.
#pragma once

#include <string>

namespace cortado::comm {

// Rank 0 outside mpirun: opens the port the others will connect to and returns its name, to be
// handed to every rank as CommOptions::mpi_port (rank 0's own included). Initialises MPI.
std::string OpenMpiPort();

}  // namespace cortado::comm
