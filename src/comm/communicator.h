// The Communicator contract that every backend (local threads, MPI processes, NCCL and
// the emulated ring on GPUs) implements: one set of collectives over host or device
// buffers, each returning a Work (comm/work.h) with c10d's meaning of completion.
//
// Rules every backend keeps:
// - Every operation is asynchronous: it returns a Work at once and runs later, in issue
//   order, off the calling thread. Buffers must stay alive and untouched until the Work
//   completes (for device memory: until the bound stream has waited on it).
// - All ranks issue the same collectives in the same order (as MPI requires); point to
//   point operations match by (peer, tag) in issue order.
// - fp32, and for all-reduce and reduce-scatter also fp16 and bf16 (compressed gradients,
//   --compress: half the bytes on the wire). Sum is deterministic where the backend can
//   promise it (local: each element is summed in rank order 0..n-1, so reduce_scatter
//   equals the matching block of allreduce bit for bit). A 16-bit sum is rounded to 16
//   bits: local sums in fp32 and rounds once; rings (mpi, nccl) round every partial sum,
//   as NCCL does; every rank ends with the same bits.
// - Buffers live in memory() : host memory, or the memory of CUDA device device().
//   Device backends order their work after everything enqueued on the bound stream at
//   issue time, and Work::wait() makes that stream wait (bind_stream).
// - A rank's communication spans go to the recorder set with set_recorder(), written
//   only by the backend's communication thread.
// - The backend fills OpInfo::kind and OpInfo::bytes from the operation itself (bytes:
//   the whole array for reduce_scatter and allgather, as in nccl-tests); the caller's
//   step, tag and name are kept.
// - abort() ends what can end: later operations fail at once, and peers waiting for this
//   rank fail instead of waiting forever; drain() returns once no operation touches a
//   caller's buffer any more. A rank that fails calls both before its buffers die.
// - split() makes a communicator over a group of this one's ranks (a child). It is a
//   collective like the others and blocks until the child exists; the child is a
//   communicator of the same backend with this one's recorder, timeout and options, and
//   this one's abort() reaches it (and its own children). The child's own abort() does
//   not reach this one.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "comm/work.h"
#include "core/half.h"
#include "core/stream.h"
#include "timeline/recorder.h"

namespace tandem {

enum class ReduceOp : std::uint8_t { kSum, kAverage };
std::string_view to_string(ReduceOp op);

enum class MemoryKind : std::uint8_t { kHost, kDevice };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend_name() const = 0;  // "local", "mpi", "nccl", "emulated"
  // One line for reports: library, version, algorithm, limits.
  virtual std::string describe() const = 0;
  // Where the buffers live; device(): the CUDA ordinal for kDevice, -1 for host memory.
  virtual MemoryKind memory() const { return MemoryKind::kHost; }
  virtual int device() const { return -1; }
  // True when no real peer exists (the single-GPU emulation): every output says so.
  virtual bool emulated() const { return false; }
  // How many ranks' data an all-reduce's sum adds up: size(), or for the emulated ring its
  // peers, whose data it takes to be this rank's. Whoever divides by the world size before
  // a sum (compressed gradients) divides by this.
  virtual int allreduce_sum_ranks() const { return size(); }

  // data := op over ranks of data.
  virtual WorkPtr allreduce(std::span<float> data, ReduceOp op, OpInfo info = {}) = 0;
  // input has size()*output.size() elements; rank r receives block r of the reduction.
  virtual WorkPtr reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op,
                                 OpInfo info = {}) = 0;
  // output has size()*input.size() elements; block r is rank r's input. The input may be
  // this rank's own block of the output (in place).
  virtual WorkPtr allgather(std::span<const float> input, std::span<float> output,
                            OpInfo info = {}) = 0;
  // The same two collectives over 16-bit floats of `type` (kFloat16 or kBFloat16; kFloat32
  // is a UsageError): what a compressed gradient moves. OpInfo::bytes counts 2 per element.
  virtual WorkPtr allreduce(std::span<std::uint16_t> data, DataType type, ReduceOp op,
                            OpInfo info = {}) = 0;
  virtual WorkPtr reduce_scatter(std::span<const std::uint16_t> input,
                                 std::span<std::uint16_t> output, DataType type, ReduceOp op,
                                 OpInfo info = {}) = 0;
  // data := root's data.
  virtual WorkPtr broadcast(std::span<float> data, int root, OpInfo info = {}) = 0;
  // Completes once every rank has issued it.
  virtual WorkPtr barrier(OpInfo info = {}) = 0;
  // Point to point; a send matches the recv of the same tag from this rank at `peer`,
  // in issue order. Tags are >= 0.
  virtual WorkPtr send(std::span<const float> data, int peer, int tag, OpInfo info = {}) = 0;
  virtual WorkPtr recv(std::span<float> data, int peer, int tag, OpInfo info = {}) = 0;

  // Operations issued between group_start() and group_end() start together (an NCCL
  // group: a send and a recv of one exchange cannot deadlock each other). Each still
  // returns its own Work. Host backends start every operation as issued anyway.
  virtual void group_start() {}
  virtual void group_end() {}

  // A communicator over the ranks of this one that pass the same `color` (>= 0), ranked
  // by (key, rank here): like MPI_Comm_split, ncclCommSplit or c10d's new_group.
  // Collective and blocking: every rank calls it, in the same order with respect to the
  // other collectives, from the thread that issues them, with nothing in flight on this
  // communicator (MPI and NCCL make it a blocking collective of their own). The child
  // uses the same recorder, timeout and options; its spans record as this rank's.
  // Aborting this communicator aborts its children (the launcher aborts only the run's
  // communicators, so a failure must reach the children too). Destroy the children
  // before this one. A negative color is a UsageError, thrown before anything is sent.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Device backends: the stream whose work precedes later operations and that
  // Work::wait() makes wait. Host backends ignore it. Set before issuing.
  virtual void bind_stream(ComputeStream stream) { (void)stream; }

  // The CPUs the threads this communicator runs of its own (a progress thread) may use:
  // its rank's (core/affinity.h). Without threads of its own, nothing to do. Children
  // split off later inherit the calling thread's CPUs.
  virtual void bind_threads(std::span<const int> cpus) { (void)cpus; }

  // See the header comment. `reason` ends up in the errors of what fails.
  virtual void abort(const std::string& reason) = 0;
  virtual void drain() = 0;
  // Starts a clean shutdown that the destructor completes. NCCL's finalize completes only
  // once every rank of a node has started it, so whoever owns several ranks calls this on
  // every one before destroying any (launchers do).
  virtual void begin_shutdown() {}

  // Where this rank's comm spans go (may be null: none recorded). Set before issuing.
  void set_recorder(RankRecorder* recorder) { recorder_ = recorder; }

 protected:
  RankRecorder* recorder() const { return recorder_; }

 private:
  RankRecorder* recorder_ = nullptr;
};

// Ends what this rank has in flight on `comm` (abort, then drain) before the caller's
// buffers die: the rule in the header comment, in one place.
void end_in_flight(Communicator& comm, const std::string& why);

// Runs `body`, whose collectives on `comm` use buffers that die with the caller's frame;
// when it throws, ends what is in flight first, then rethrows.
template <typename Body>
void ending_on_failure(Communicator& comm, const Body& body) {
  try {
    body();
  } catch (const std::exception& e) {
    end_in_flight(comm, e.what());
    throw;
  }
}

}  // namespace tandem
