// The `mpi` backend: one rank per process, on any MPI library (built and tested on Open
// MPI from Debian). See docs/MPI.md for launching, the thread level, the progress thread,
// the timeout policy and clock alignment.
//
// Threads: MPI is initialized on the thread that creates the communicator, asking for
// MPI_THREAD_MULTIPLE and accepting MPI_THREAD_SERIALIZED (anything lower is a clear
// RuntimeError); after that only the communication thread calls MPI, until the
// destructor has joined it and finalizes. The communication thread posts the
// non-blocking operation of each issued Work (MPI_Iallreduce, MPI_Ireduce_scatter_block,
// MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier, MPI_Isend/MPI_Irecv) in issue order, keeps
// several in flight, and polls them with MPI_Test; a Work starts when posted and ends
// when its test succeeds.
//
// Allreduce algorithms: "native" (the library's MPI_Iallreduce), "ring" (a segmented
// ring over point-to-point messages, docs/MPI.md "Algorithms"), or "auto" (the default:
// native below 256 KiB, ring from there). Average is a sum divided by size() on the
// communication thread.
//
// MPI can be initialized once per process: a second communicator after the first was
// destroyed is a RuntimeError.
//
// split(): MPI_Comm_split of this communicator, made on the communication thread after a
// barrier bounded by the timeout; the child is an mpi communicator of its own (its own
// communication thread, ring and task communicators) and needs MPI_THREAD_MULTIPLE.
// Abort reaches it as the contract says; destroy it before its parent, which finalizes
// MPI.
#pragma once

#include <memory>

#include "comm/backend_registry.h"

namespace tandem {

std::unique_ptr<ProcessCommunicator> make_mpi_communicator(const BackendOptions& options);

}  // namespace tandem
