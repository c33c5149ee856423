// Work: the handle of one asynchronous communication operation, with c10d's meaning of
// completion for host and device buffers alike.
//
// Every operation returns a Work at once; the operation runs on the rank's
// communication thread (or in the network, or on a communication stream) while the
// caller goes on. A Work is completed exactly once, by its backend, either successfully
// or with an error that is stored here and rethrown to whoever waits.
//
// Two ways to wait:
// - wait(): afterwards the result may be used by its consumer. For host memory the
//   calling thread blocks until the operation completed. For device memory (nccl,
//   emulated) the consumer is the stream bound to the communicator
//   (Communicator::bind_stream): wait() makes that stream wait for the operation and
//   returns without blocking the host, so nothing synchronizes on the hot path.
// - synchronize(): the calling thread blocks until the operation completed, whatever
//   the memory (the one host synchronization at the end of a GPU step).
// Both are bounded by the communicator's timeout: an operation not complete by then
// throws TimeoutError "rank R: <operation> not complete after <elapsed>", and the
// operation stays in flight (Communicator::abort ends it where the backend can).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "timeline/span.h"

namespace tandem {

// What an operation is, for error messages and the timeline.
struct OpInfo {
  SpanKind kind = SpanKind::kOther;
  std::int64_t bytes = 0;
  std::int32_t step = -1;  // training step that issued it (-1: none)
  std::int32_t tag = -1;   // bucket, chunk or unit index (-1: none)
  NameId name = kNoName;
  // What the tag counts: a bucket (DDP), a model unit (sharded strategies; kTensorUnit:
  // a tensor-parallel collective inside that unit's pass) or a micro-batch (pipeline
  // transfers, whose comm span then carries it as Span::micro).
  enum class TagKind : std::uint8_t { kBucket, kUnit, kTensorUnit, kMicroBatch };
  TagKind tag_kind = TagKind::kBucket;

  // "allreduce bucket 3 (25.0 MiB, step 7)", "allgather unit 2 ...", "tensor-parallel
  // allreduce unit 1 ..."
  std::string describe() const;
  // The comm-lane span of this operation over [start_ns, end_ns).
  Span comm_span(std::int64_t start_ns, std::int64_t end_ns) const;
};

class Work {
 public:
  // `rank` names the issuing rank in errors; `timeout` bounds wait() and synchronize().
  explicit Work(OpInfo info, int rank = 0,
                std::chrono::nanoseconds timeout = std::chrono::seconds(300));

  // The result is usable by its consumer afterwards (see the header comment): host
  // memory blocks until completion; device memory makes the bound stream wait and
  // returns at once. Rethrows the stored error once the operation has failed;
  // TimeoutError past the communicator's timeout.
  void wait();
  // Blocks the calling thread until the operation completed, whatever the memory;
  // rethrows its error; TimeoutError past the communicator's timeout.
  void synchronize();
  // Blocks at most `timeout`; false if still running then (nothing is cancelled), true
  // once completed; rethrows the stored error if it failed.
  bool wait_for(std::chrono::nanoseconds timeout);
  // Non-blocking: true once completed, successfully or not. Never throws.
  bool test() const;
  // The stored error, or null while running or after success.
  std::exception_ptr exception() const;

  const OpInfo& info() const { return info_; }
  int rank() const { return rank_; }
  // When data started and stopped moving (the comm span); valid once test() is true.
  std::int64_t start_ns() const;
  std::int64_t end_ns() const;

  // ---- backend side ----
  // Device backends: what wait() does instead of blocking (enqueue a wait on the bound
  // stream). Set before the Work is returned to the caller.
  void set_stream_wait(std::function<void()> enqueue_wait) {
    stream_wait_ = std::move(enqueue_wait);
  }
  // Each called at most once, finish/fail exactly once.
  void mark_started(std::int64_t t_ns);
  void finish(std::int64_t t_ns);
  void fail(std::exception_ptr error, std::int64_t t_ns);
  // The TimeoutError a waiter throws after `elapsed_ns`.
  std::exception_ptr timeout_error(std::int64_t elapsed_ns) const;

 private:
  const OpInfo info_;
  const int rank_;
  const std::chrono::nanoseconds timeout_;
  std::function<void()> stream_wait_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::int64_t start_ns_ = 0;
  std::int64_t end_ns_ = 0;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace tandem
