// The Communicator contract that every backend (local threads, MPI, NCCL) implements.
//
// Rules every backend keeps:
// - Every operation is asynchronous: it returns a Work at once and runs later, in issue
//   order, off the calling thread. Buffers must stay alive and untouched until the Work
//   completes.
// - All ranks issue the same collectives in the same order (as MPI requires).
// - fp32 only. Sum is deterministic where the backend can promise it (local: each
//   element is summed in rank order 0..n-1).
// - A rank's communication spans go to the recorder set with set_recorder(), written
//   only by the backend's communication thread.
// - The backend fills OpInfo::kind and OpInfo::bytes from the operation itself (bytes:
//   the whole array for reduce_scatter and allgather, as in nccl-tests); the caller's
//   step, tag and name are kept.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "comm/work.h"
#include "timeline/recorder.h"

namespace tandem {

enum class ReduceOp : std::uint8_t { kSum, kAverage };
std::string_view to_string(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend_name() const = 0;

  // data := op over ranks of data.
  virtual WorkPtr allreduce(std::span<float> data, ReduceOp op, OpInfo info = {}) = 0;
  // input has size()*output.size() elements; rank r receives block r of the reduction.
  virtual WorkPtr reduce_scatter(std::span<const float> input, std::span<float> output,
                                 ReduceOp op, OpInfo info = {}) = 0;
  // output has size()*input.size() elements; block r is rank r's input.
  virtual WorkPtr allgather(std::span<const float> input, std::span<float> output,
                            OpInfo info = {}) = 0;
  // data := root's data.
  virtual WorkPtr broadcast(std::span<float> data, int root, OpInfo info = {}) = 0;
  // Completes once every rank has issued it.
  virtual WorkPtr barrier(OpInfo info = {}) = 0;
  // Point to point; a send matches the recv of the same tag from this rank at `peer`,
  // in issue order.
  virtual WorkPtr send(std::span<const float> data, int peer, int tag, OpInfo info = {}) = 0;
  virtual WorkPtr recv(std::span<float> data, int peer, int tag, OpInfo info = {}) = 0;

  // Where this rank's comm spans go (may be null: none recorded). Set before issuing.
  void set_recorder(RankRecorder* recorder) { recorder_ = recorder; }

 protected:
  RankRecorder* recorder() const { return recorder_; }

 private:
  RankRecorder* recorder_ = nullptr;
};

// Link emulation: alpha-beta wire time added after the real data movement, to mimic a
// slower interconnect than shared memory. Always reported as emulated.
struct LinkModel {
  double bandwidth_Bps = 0;    // beta^-1
  std::int64_t latency_ns = 0;  // alpha
  bool enabled() const { return bandwidth_Bps > 0; }

  // Parses "25GB/s,5us" (either part may come first); throws UsageError.
  static LinkModel parse(std::string_view text);
  std::string describe() const;  // "25.0 GB/s, 5 us (emulated)"
  // Wire time of one operation on n ranks, as a ring algorithm would spend it:
  // allreduce 2(n-1) steps of bytes/n, reduce_scatter/allgather n-1 steps of bytes/n
  // (bytes = the whole array), broadcast and send/recv one message, barrier 2(n-1) alphas.
  std::int64_t wire_time_ns(SpanKind kind, std::int64_t bytes, int n) const;
};

}  // namespace tandem
