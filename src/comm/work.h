// Work: the handle of one asynchronous communication operation.
//
// Every collective returns a Work at once; the operation runs on the rank's
// communication thread (or in the network, or on a stream) while the caller goes on.
// A Work is completed exactly once, by its backend, either successfully or with an
// error that is stored here and rethrown to whoever waits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
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
  std::int32_t tag = -1;   // bucket or chunk index (-1: none)
  NameId name = kNoName;

  std::string describe() const;  // "allreduce bucket 3 (25.0 MiB, step 7)"
  // The comm-lane span of this operation over [start_ns, end_ns).
  Span comm_span(std::int64_t start_ns, std::int64_t end_ns) const {
    Span span;
    span.lane = Lane::kComm;
    span.kind = kind;
    span.name = name;
    span.step = step;
    span.tag = tag;
    span.start_ns = start_ns;
    span.end_ns = end_ns;
    span.bytes = bytes;
    return span;
  }
};

class Work {
 public:
  explicit Work(OpInfo info) : info_(info) {}

  // Blocks until the operation completes; rethrows its stored error if it failed.
  void wait();
  // Blocks at most `timeout`; returns false if still running then (nothing is
  // cancelled), true once completed; rethrows the stored error if it failed.
  bool wait_for(std::chrono::nanoseconds timeout);
  // Non-blocking: true once completed, successfully or not. Never throws.
  bool test() const;
  // The stored error, or null while running or after success.
  std::exception_ptr exception() const;

  const OpInfo& info() const { return info_; }
  // When data started and stopped moving (the comm span); valid once test() is true.
  std::int64_t start_ns() const;
  std::int64_t end_ns() const;

  // Backend side: each called at most once, start before finish/fail.
  void mark_started(std::int64_t t_ns);
  void finish(std::int64_t t_ns);
  void fail(std::exception_ptr error, std::int64_t t_ns);

 private:
  const OpInfo info_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::int64_t start_ns_ = 0;
  std::int64_t end_ns_ = 0;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace tandem
