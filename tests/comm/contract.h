// The Communicator contract, written once and run against every backend.
//
// Each case is the code of one rank: a harness calls it on every rank of a world at
// once (a thread per rank for `local`, a process per rank for MPI) and rethrows the
// first failure. Inputs are small integers, so fp32 sums are exact whatever the
// reduction order and every backend must match them bit for bit; averages are allowed
// one rounding. A failed check throws ContractFailure naming the rank and the element.
#pragma once

#include <cstddef>
#include <stdexcept>

#include "comm/communicator.h"

namespace tandem {

class ContractFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// data has n_elems; every rank ends with the sum (or average) of all ranks' inputs.
void contract_allreduce(Communicator& comm, std::size_t n_elems, ReduceOp op);
// Each rank contributes size() blocks of block_elems and receives its own reduced block.
void contract_reduce_scatter(Communicator& comm, std::size_t block_elems, ReduceOp op);
// The 16-bit all-reduce and reduce-scatter of `type` (fp16 or bf16), sum and average:
// sums of small integers are exact, averages within the type's rounding, every rank ends
// with the same bits, and bytes count 2 per element.
void contract_compressed(Communicator& comm, std::size_t n_elems, DataType type);
// Each rank contributes block_elems; every rank ends with all blocks in rank order.
void contract_allgather(Communicator& comm, std::size_t block_elems);
void contract_broadcast(Communicator& comm, std::size_t n_elems, int root);
// Repeated barriers complete, and none completes on a rank before all ranks issued it.
void contract_barrier(Communicator& comm);
// Every rank sends to its right neighbour and receives from its left, issuing both
// before waiting (exchanges must not deadlock), with several tags matched by tag and in
// issue order. With one rank, the rank sends to itself.
void contract_send_recv(Communicator& comm, std::size_t n_elems);
// Several operations of different kinds in flight at once, waited in reverse order.
void contract_many_in_flight(Communicator& comm, std::size_t n_elems);
// Bad roots, peers and sizes fail their Work with RuntimeError (rethrown by wait, kept
// by exception(), test() true), and the communicator keeps working afterwards.
void contract_invalid_arguments(Communicator& comm);
// A receive whose sender never arrives: waiting throws TimeoutError within the
// communicator's timeout (keep it short), naming the rank and the operation, and the
// backend then withdraws it, so its Work ends failed instead of hanging. The
// communicator stays usable.
void contract_timeout_names_operation(Communicator& comm);

// split(color = rank % 2, key = rank, or -rank when keys_reversed): the child's size and
// rank; an allreduce in the child sums exactly its group's inputs (which depend on the
// rank here, so a wrong grouping shows); send/recv around the child's ring; parent and
// child operations in flight together, waited in reverse order; the child's generic
// contract (allreduce, send/recv, barrier); the parent still works afterwards.
void contract_split_by_parity(Communicator& comm, bool keys_reversed);
// Every rank its own color: worlds of one that work; a negative color is a UsageError
// thrown before anything is sent (so every rank throws, none waits).
void contract_split_singletons(Communicator& comm);
// The child's comm spans land in the recorder the parent had at split(), stamped with
// this rank and a group (Span::group) that is not the world's and the same on every member.
void contract_split_records_spans(Communicator& comm);
// A grandchild's receive that no one will ever match is pending; aborting its parent
// (the child) makes it fail with AbortedError instead of waiting, and later operations
// on the grandchild fail at once. The communicator the case runs on is not aborted.
void contract_split_abort_reaches_children(Communicator& comm);

}  // namespace tandem
