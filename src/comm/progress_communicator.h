// The communication-thread skeleton every backend is built on: a Communicator whose
// operations are carried by one thread per rank, where a backend supplies only how to
// start and how to test one operation.
//
// What the skeleton does, once for every backend:
// - turns each collective into an Op, fills OpInfo's kind and bytes, validates what one
//   rank can validate alone (roots, peers, tags, block sizes) and fails the Work at once
//   when that is wrong;
// - queues the Op; the communication thread starts queued Ops in issue order (host
//   backends), or the issuing thread starts them at once (device backends, whose start
//   only enqueues work on a stream);
// - polls every Op in flight with test(); on completion records the comm span (then
//   finishes the Work, so a waiter sees both); a throwing start or test fails the Work
//   with "<operation> on rank R: <reason>";
// - abort(reason): later Ops fail at once, queued ones fail, and Ops in flight fail
//   where the backend can withdraw them (cancel()); the others run to their end;
// - an Op in flight past the timeout is failed with TimeoutError where cancel() allows;
// - drain() returns once nothing is queued or in flight; the destructor drains.
// Backend tasks (run_task) run on the communication thread once nothing is in flight.
// - split(color, key): checks the color, asks the backend for the child (make_split),
//   gives it this rank's recorder and ties it to this communicator's abort: abort()
//   aborts every live child, at once or, for a child made after it, when it is made.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace tandem {

// A backend's own state of one operation (events, requests, a rendezvous slot).
struct OpState {
  virtual ~OpState() = default;
};

// One issued operation. For allreduce and broadcast, input and output are the same buffer.
// Counts are elements of `type`: fp32 for every operation but a 16-bit all-reduce or
// reduce-scatter.
struct Op {
  SpanKind kind = SpanKind::kOther;
  DataType type = DataType::kFloat32;
  const void* input = nullptr;
  std::size_t input_count = 0;
  void* output = nullptr;
  std::size_t output_count = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int peer = -1;  // broadcast: the root; send/recv: the other rank
  int tag = 0;    // send/recv matching tag
  WorkPtr work{};
  RankRecorder* recorder = nullptr;  // captured at issue
  std::int64_t issue_ns = 0;
  // The comm span; a backend may set them (device events, the end of emulated wire
  // time), else the skeleton takes the time of start and of completion.
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  // Backend hint for idle(): nothing can happen to this Op before this time (0: unknown).
  std::int64_t wake_ns = 0;
  std::unique_ptr<OpState> state{};
  std::function<void()> task{};  // run_task(): a backend task instead of an operation
  bool started = false;

  // The output as what it holds (`T` is float for kFloat32, std::uint16_t else).
  template <typename T>
  T* out() const {
    return static_cast<T*>(output);
  }
  std::size_t element_bytes() const { return size_of(type); }
};

struct ProgressOptions {
  int rank = 0;
  int size = 1;
  std::chrono::nanoseconds timeout{std::chrono::seconds(300)};
};

class ProgressCommunicator : public Communicator {
 public:
  explicit ProgressCommunicator(ProgressOptions options);
  // Derived destructors call stop_thread() first: the thread calls their hooks.
  ~ProgressCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::chrono::nanoseconds timeout() const { return options_.timeout; }

  WorkPtr allreduce(std::span<float> data, ReduceOp op, OpInfo info = {}) override;
  WorkPtr reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op,
                         OpInfo info = {}) override;
  WorkPtr allreduce(std::span<std::uint16_t> data, DataType type, ReduceOp op,
                    OpInfo info = {}) override;
  WorkPtr reduce_scatter(std::span<const std::uint16_t> input, std::span<std::uint16_t> output,
                         DataType type, ReduceOp op, OpInfo info = {}) override;
  WorkPtr allgather(std::span<const float> input, std::span<float> output,
                    OpInfo info = {}) override;
  WorkPtr broadcast(std::span<float> data, int root, OpInfo info = {}) override;
  WorkPtr barrier(OpInfo info = {}) override;
  WorkPtr send(std::span<const float> data, int peer, int tag, OpInfo info = {}) override;
  WorkPtr recv(std::span<float> data, int peer, int tag, OpInfo info = {}) override;
  void group_start() override;
  void group_end() override;

  void bind_threads(std::span<const int> cpus) override;
  void abort(const std::string& reason) override;
  void drain() override;
  std::unique_ptr<Communicator> split(int color, int key) final;

 protected:
  // The backend's half of split(): this rank's communicator over the ranks of `color`,
  // made together with them. Called on the issuing thread; color >= 0.
  virtual std::unique_ptr<ProgressCommunicator> make_split(int color, int key) = 0;

  // ---- backend hooks ----
  // Called on the issuing thread for every operation before it is queued (device
  // backends: create events, record the ready event on the bound stream, set the Work's
  // stream wait). Throw to fail the Work.
  virtual void prepare(Op& op) { (void)op; }
  // True: operations start on the issuing thread (start_group), in issue order, and
  // the thread only tests them. False: the communication thread starts them.
  virtual bool starts_on_issue() const { return false; }
  // Whether the next operation in issue order may start now (the local backend runs one
  // operation at a time, as one wire would). Operations after it wait too.
  virtual bool ready_to_start(const Op& next) {
    (void)next;
    return true;
  }
  // Begins moving data. Throw to fail the Work.
  virtual void start(Op& op) = 0;
  // starts_on_issue() backends: one group of operations (a single one outside
  // group_start/group_end). A throw fails every operation of the group.
  virtual void start_group(std::span<Op* const> ops) {
    for (Op* op : ops) start(*op);
  }
  // True once the operation is complete. Throw to fail it.
  virtual bool test(Op& op) = 0;
  // The operation must end now (abort or timeout): true if the backend withdrew it and
  // will never touch its buffers again, false if it must be left to end on its own.
  virtual bool cancel(Op& op) {
    (void)op;
    return false;
  }
  // abort() was called: end what waits on peers (on the caller's thread).
  virtual void on_abort(const std::string& reason) { (void)reason; }
  // First thing the communication thread does (device backends: make the device current).
  virtual void on_thread_start() {}
  // The thread has nothing to do right now: `in_flight` operations, none progressed for
  // `idle_polls` polls. The default blocks until woken (issue, abort, wake()) or, with
  // operations in flight, until the earliest Op::wake_ns.
  virtual void idle(std::size_t in_flight, int idle_polls);

  // ---- for backends ----
  void start_thread();  // at the end of the derived constructor
  // At the start of the derived destructor: leaves the parent's children (abort() no
  // longer reaches this one), drains, then joins.
  void stop_thread();
  // Makes the thread poll again (a peer moved data this rank waits for). Any thread.
  void wake();
  // Blocks the thread until woken or `deadline_ns` (0: no deadline). Thread only.
  void wait_for_wake(std::int64_t deadline_ns);
  // Runs `body` on the communication thread once everything issued before it has
  // completed, and waits for it; rethrows what it threw.
  void run_task(std::function<void()> body);
  // The earliest Op::wake_ns in flight (0: none). Thread only.
  std::int64_t earliest_wake_ns() const;
  // "aborted: <reason>" once abort() was called, else "". Any thread.
  std::string abort_reason() const;
  // Operations queued or in flight; thread only for in_flight.
  std::size_t in_flight() const { return in_flight_.size(); }
  // The operations in flight, oldest first; thread only.
  const std::deque<Op>& ops_in_flight() const { return in_flight_; }
  const Op* oldest_in_flight() const { return in_flight_.empty() ? nullptr : &in_flight_.front(); }

 private:
  WorkPtr issue(Op op, OpInfo info);
  std::string validate(const Op& op) const;
  void enqueue(std::vector<Op> ops);
  void run();
  bool poll();
  void complete(Op& op);
  void fail(Op& op, std::exception_ptr error);
  void fail(Op& op, const std::string& reason);
  void run_task_here(Op& op);

  // The communicators split from one communicator; shared by it and its children, so
  // either may die first.
  struct Children {
    std::mutex mutex;
    std::vector<ProgressCommunicator*> live;
    std::string abort_reason;  // the parent's, once it aborted
  };
  void adopt(ProgressCommunicator& child);
  void leave_parent();

  const ProgressOptions options_;
  std::thread thread_;
  const std::shared_ptr<Children> children_ = std::make_shared<Children>();
  std::shared_ptr<Children> parent_;  // the set this one is in, while it is
  // Span::group of this communicator's comm spans: 0 for a world; a child's mixes its
  // parent's, the parent's count of earlier splits and the color, so members agree
  // (split is collective, called in the same order everywhere) with no message.
  std::uint32_t group_ = 0;
  std::uint32_t splits_ = 0;  // the issuing thread's

  // Issuing threads -> communication thread, under mutex_.
  mutable std::mutex mutex_;
  std::condition_variable cv_;          // the thread waits here
  std::condition_variable drained_cv_;  // drain() waits here
  std::deque<Op> queue_;
  bool woken_ = false;
  bool stopping_ = false;
  bool busy_ = false;  // the thread holds operations not yet in queue_ or done
  // The thread is bound to the one core its issuing thread computes on: an issue hands
  // it the core (Note [the communication thread's turn]).
  std::atomic<bool> share_core_{false};
  std::string abort_reason_;

  // Issuing thread only: operations issued inside group_start/group_end.
  int group_depth_ = 0;
  std::vector<Op> grouped_;

  // Communication thread only.
  std::deque<Op> to_start_;
  std::deque<Op> in_flight_;
};

}  // namespace tandem
