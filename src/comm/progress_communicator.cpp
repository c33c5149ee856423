// The communication-thread skeleton (progress_communicator.h).
#include "comm/progress_communicator.h"

#include <algorithm>
#include <utility>

#include "core/affinity.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"
#include "core/thread_name.h"

namespace tandem {

namespace {

constexpr std::string_view kAbortedPrefix = "aborted: ";

std::int64_t payload_bytes(const Op& op) {
  const std::size_t count = op.kind == SpanKind::kReduceScatter || op.kind == SpanKind::kSend
                                ? op.input_count
                                : op.output_count;
  return static_cast<std::int64_t>(count * op.element_bytes());
}

}  // namespace

ProgressCommunicator::ProgressCommunicator(ProgressOptions options) : options_(options) {
  if (options_.size < 1) throw UsageError("ranks must be at least 1");
  if (options_.timeout.count() <= 0) throw UsageError("--timeout must be > 0");
}

ProgressCommunicator::~ProgressCommunicator() {
  // A derived destructor that forgot stop_thread() would leave the thread calling hooks
  // of a destroyed object.
  TANDEM_CHECK(!thread_.joinable());
}

void ProgressCommunicator::start_thread() {
  // Named after the rank thread that made it ("tandem r3 comm", a split's as well), or
  // after its rank where another thread did (a world made for every rank at once).
  std::string name = this_thread_name();
  if (!name.starts_with("tandem r")) name = "tandem r" + std::to_string(options_.rank);
  thread_ = std::thread([this, name = name + " comm"] {
    name_this_thread(name);
    run();
  });
}

void ProgressCommunicator::bind_threads(std::span<const int> cpus) {
  share_core_.store(bind_thread(thread_, cpus) && cpus.size() == 1, std::memory_order_relaxed);
}

void ProgressCommunicator::stop_thread() {
  leave_parent();
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// ---- issuing threads ----

namespace {

// An all-reduce (input and output the same buffer) or a reduce-scatter of `type`.
Op reduction(SpanKind kind, DataType type, const void* input, std::size_t input_count, void* output,
             std::size_t output_count, ReduceOp op) {
  return {.kind = kind,
          .type = type,
          .input = input,
          .input_count = input_count,
          .output = output,
          .output_count = output_count,
          .reduce = op};
}

void check_16_bits(DataType type) {
  if (type == DataType::kFloat32) {
    throw UsageError("a 16-bit collective needs fp16 or bf16, got fp32 (use the float overload)");
  }
}

}  // namespace

WorkPtr ProgressCommunicator::allreduce(std::span<float> data, ReduceOp op, OpInfo info) {
  return issue(reduction(SpanKind::kAllreduce, DataType::kFloat32, data.data(), data.size(),
                         data.data(), data.size(), op),
               info);
}

WorkPtr ProgressCommunicator::reduce_scatter(std::span<const float> input, std::span<float> output,
                                             ReduceOp op, OpInfo info) {
  return issue(reduction(SpanKind::kReduceScatter, DataType::kFloat32, input.data(), input.size(),
                         output.data(), output.size(), op),
               info);
}

WorkPtr ProgressCommunicator::allreduce(std::span<std::uint16_t> data, DataType type, ReduceOp op,
                                        OpInfo info) {
  check_16_bits(type);
  return issue(
      reduction(SpanKind::kAllreduce, type, data.data(), data.size(), data.data(), data.size(), op),
      info);
}

WorkPtr ProgressCommunicator::reduce_scatter(std::span<const std::uint16_t> input,
                                             std::span<std::uint16_t> output, DataType type,
                                             ReduceOp op, OpInfo info) {
  check_16_bits(type);
  return issue(reduction(SpanKind::kReduceScatter, type, input.data(), input.size(), output.data(),
                         output.size(), op),
               info);
}

WorkPtr ProgressCommunicator::allgather(std::span<const float> input, std::span<float> output,
                                        OpInfo info) {
  return issue({.kind = SpanKind::kAllgather,
                .input = input.data(),
                .input_count = input.size(),
                .output = output.data(),
                .output_count = output.size()},
               info);
}

WorkPtr ProgressCommunicator::broadcast(std::span<float> data, int root, OpInfo info) {
  return issue({.kind = SpanKind::kBroadcast,
                .input = data.data(),
                .input_count = data.size(),
                .output = data.data(),
                .output_count = data.size(),
                .peer = root},
               info);
}

WorkPtr ProgressCommunicator::barrier(OpInfo info) {
  return issue({.kind = SpanKind::kBarrier}, info);
}

WorkPtr ProgressCommunicator::send(std::span<const float> data, int peer, int tag, OpInfo info) {
  return issue(
      {.kind = SpanKind::kSend, .input = data.data(), .input_count = data.size(), .peer = peer, .tag = tag},
      info);
}

WorkPtr ProgressCommunicator::recv(std::span<float> data, int peer, int tag, OpInfo info) {
  return issue({.kind = SpanKind::kRecv,
                .output = data.data(),
                .output_count = data.size(),
                .peer = peer,
                .tag = tag},
               info);
}

std::string ProgressCommunicator::validate(const Op& op) const {
  const auto n = static_cast<std::size_t>(size());
  switch (op.kind) {
    case SpanKind::kReduceScatter:
      if (op.input_count != n * op.output_count) {
        return "passed " + std::to_string(op.input_count) + " input elements for " +
               std::to_string(op.output_count) + " output elements (need size() * output = " +
               std::to_string(n * op.output_count) + ")";
      }
      break;
    case SpanKind::kAllgather:
      if (op.output_count != n * op.input_count) {
        return "passed " + std::to_string(op.output_count) + " output elements for " +
               std::to_string(op.input_count) + " input elements (need size() * input = " +
               std::to_string(n * op.input_count) + ")";
      }
      break;
    case SpanKind::kBroadcast:
      if (op.peer < 0 || op.peer >= size()) {
        return "root " + std::to_string(op.peer) + " out of range [0, " + std::to_string(size()) +
               ")";
      }
      break;
    case SpanKind::kSend:
    case SpanKind::kRecv:
      if (op.peer < 0 || op.peer >= size()) {
        return "peer " + std::to_string(op.peer) + " out of range [0, " + std::to_string(size()) +
               ")";
      }
      if (op.tag < 0) return "tag " + std::to_string(op.tag) + " is negative";
      break;
    default:
      break;
  }
  return {};
}

WorkPtr ProgressCommunicator::issue(Op op, OpInfo info) {
  op.recorder = recorder();
  op.issue_ns = now_ns();
  // The operation itself is the truth about its kind and payload.
  info.kind = op.kind;
  info.bytes = payload_bytes(op);
  op.work = std::make_shared<Work>(info, rank(), options_.timeout);
  WorkPtr work = op.work;
  if (const std::string invalid = validate(op); !invalid.empty()) {
    fail(op, invalid);
    return work;
  }
  if (const std::string aborted = abort_reason(); !aborted.empty()) {
    fail(op, aborted);
    return work;
  }
  try {
    prepare(op);
  } catch (...) {
    fail(op, std::current_exception());
    return work;
  }
  if (!starts_on_issue()) {
    std::vector<Op> one;
    one.push_back(std::move(op));
    enqueue(std::move(one));
  } else if (group_depth_ > 0) {
    grouped_.push_back(std::move(op));
  } else {
    Op* ptr = &op;
    try {
      start_group(std::span<Op* const>(&ptr, 1));
      op.started = true;
    } catch (...) {
      fail(op, std::current_exception());
      return work;
    }
    std::vector<Op> one;
    one.push_back(std::move(op));
    enqueue(std::move(one));
  }
  return work;
}

void ProgressCommunicator::group_start() {
  if (starts_on_issue()) ++group_depth_;
}

void ProgressCommunicator::group_end() {
  if (!starts_on_issue()) return;
  if (group_depth_ == 0) throw RuntimeError("group_end() without group_start()");
  if (--group_depth_ > 0) return;
  std::vector<Op> ops;
  ops.swap(grouped_);
  if (ops.empty()) return;
  std::vector<Op*> ptrs;
  for (Op& op : ops) ptrs.push_back(&op);
  try {
    start_group(ptrs);
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    for (Op& op : ops) fail(op, error);
    return;
  }
  for (Op& op : ops) op.started = true;
  enqueue(std::move(ops));
}

// Note [the communication thread's turn]
// Bound with its rank (--bind, engine/launch.cpp), the communication thread shares the one
// core its training thread computes on. Woken by an issue it is runnable, not running: the
// scheduler leaves the core to the training thread, which computes on until it blocks or
// its slice ends. On the 2-core Zen 4 VM, of the collectives a rank posted and went on
// computing (scripts/validate-simulate's runs, five rounds), 9-91% by configuration began
// over 0.2 ms after their issue, 0.2-3.0 ms on average (a bucketed mlp's all-reduces 1.1
// ms, accumulation's 3.0, an fsdp unit's gathers 0.34, a pipeline's transfers 0.22): the
// overlap the strategy planned had not begun, and a peer waiting on the transfer waited
// for that core. So the issuing thread yields once after handing operations over: the
// communication thread starts them (posts a send, joins a ring) before the training
// thread computes again. Eight rounds of each, interleaved: a 2-stage pipeline's step 3-5%
// shorter and its bubble 2-4 points lower (the stage waiting on a transfer no longer waits
// for its sender's core), accumulation's 3% shorter, DDP's and zero2's and fsdp's the same
// within their noise (docs/PERFORMANCE.md, "The communication thread's turn").
void ProgressCommunicator::enqueue(std::vector<Op> ops) {
  {
    std::lock_guard lock(mutex_);
    for (Op& op : ops) queue_.push_back(std::move(op));
  }
  cv_.notify_all();
  if (share_core_.load(std::memory_order_relaxed)) std::this_thread::yield();
}

void ProgressCommunicator::run_task(std::function<void()> body) {
  Op op{.kind = SpanKind::kOther, .task = std::move(body)};
  op.work = std::make_shared<Work>(OpInfo{}, rank(), options_.timeout);
  WorkPtr work = op.work;
  std::vector<Op> one;
  one.push_back(std::move(op));
  enqueue(std::move(one));
  // A task bounds its own blocking steps; its Work is waited for without the timeout.
  while (!work->wait_for(std::chrono::hours(24))) {
  }
  work->synchronize();
}

void ProgressCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (!abort_reason_.empty()) return;
    abort_reason_ = std::string(kAbortedPrefix) + reason;
  }
  on_abort(reason);
  wake();
  // Under the children's lock, so that none dies meanwhile (leave_parent waits).
  std::lock_guard lock(children_->mutex);
  children_->abort_reason = reason;
  for (ProgressCommunicator* child : children_->live) child->abort(reason);
}

std::unique_ptr<Communicator> ProgressCommunicator::split(int color, int key) {
  if (color < 0) {
    throw UsageError("split: color must be >= 0, got " + std::to_string(color) + " on rank " +
                     std::to_string(rank()));
  }
  std::unique_ptr<ProgressCommunicator> child = make_split(color, key);
  child->set_recorder(recorder());
  // Named by (parent, split number, color), the same on every member.
  std::string name;
  for (const std::uint32_t word : {group_, splits_++, static_cast<std::uint32_t>(color)}) {
    for (int byte = 0; byte < 4; ++byte) name += static_cast<char>((word >> (8 * byte)) & 0xffu);
  }
  child->group_ = group_id(name);
  adopt(*child);
  return child;
}

void ProgressCommunicator::adopt(ProgressCommunicator& child) {
  std::string aborted;
  {
    std::lock_guard lock(children_->mutex);
    child.parent_ = children_;
    children_->live.push_back(&child);
    aborted = children_->abort_reason;
  }
  // This one aborted while the child was being made: the child starts aborted.
  if (!aborted.empty()) child.abort(aborted);
}

void ProgressCommunicator::leave_parent() {
  // Moved out first: when the parent is gone this may be the last owner of the set, and
  // the set's mutex must outlive the lock on it.
  const std::shared_ptr<Children> parent = std::move(parent_);
  if (parent == nullptr) return;
  std::lock_guard lock(parent->mutex);
  std::erase(parent->live, this);
}

std::string ProgressCommunicator::abort_reason() const {
  std::lock_guard lock(mutex_);
  return abort_reason_;
}

void ProgressCommunicator::drain() {
  std::unique_lock lock(mutex_);
  drained_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void ProgressCommunicator::wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  cv_.notify_all();
}

// ---- the communication thread ----

void ProgressCommunicator::wait_for_wake(std::int64_t deadline_ns) {
  std::unique_lock lock(mutex_);
  const auto ready = [this] {
    return woken_ || !queue_.empty() || (stopping_ && to_start_.empty() && in_flight_.empty());
  };
  if (stopping_) {
    // Shutting down with operations in flight: look at the stop deadline now and then.
    const std::int64_t cap = now_ns() + 1'000'000;
    deadline_ns = deadline_ns > 0 ? std::min(deadline_ns, cap) : cap;
  }
  if (deadline_ns > 0) {
    const auto deadline =
        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns));
    cv_.wait_until(lock, deadline, ready);
  } else {
    cv_.wait(lock, ready);
  }
  woken_ = false;
}

void ProgressCommunicator::idle(std::size_t in_flight, int idle_polls) {
  (void)idle_polls;
  wait_for_wake(in_flight > 0 ? earliest_wake_ns() : 0);
}

// The earliest time anything may change in flight without a wake(): a backend's wake
// hint, or the moment the oldest operation becomes overdue.
std::int64_t ProgressCommunicator::earliest_wake_ns() const {
  std::int64_t earliest = 0;
  const auto consider = [&](std::int64_t t) {
    if (t > 0 && (earliest == 0 || t < earliest)) earliest = t;
  };
  for (const Op& op : in_flight_) {
    consider(op.wake_ns);
    consider(op.issue_ns + options_.timeout.count() + 1);
  }
  return earliest;
}

void ProgressCommunicator::run() {
  on_thread_start();
  int idle_polls = 0;
  std::int64_t stop_deadline_ns = 0;
  for (;;) {
    bool stuck_at_stop = false;
    {
      std::lock_guard lock(mutex_);
      while (!queue_.empty()) {
        to_start_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      busy_ = !to_start_.empty() || !in_flight_.empty();
      if (!busy_) {
        drained_cv_.notify_all();
        if (stopping_) return;
      } else if (stopping_) {
        // Destroyed with operations in flight: they get the timeout, as a waiter would,
        // then whatever the backend can withdraw is failed.
        if (stop_deadline_ns == 0) stop_deadline_ns = now_ns() + options_.timeout.count();
        stuck_at_stop = now_ns() > stop_deadline_ns && abort_reason_.empty();
      }
    }
    if (stuck_at_stop) abort("communicator destroyed with operations in flight");
    const bool progressed = poll();
    idle_polls = progressed ? 0 : idle_polls + 1;
    if (!progressed) idle(in_flight_.size(), idle_polls);
  }
}

bool ProgressCommunicator::poll() {
  bool progressed = false;
  const std::string aborted = abort_reason();
  while (!to_start_.empty()) {
    if (to_start_.front().task) {
      if (!in_flight_.empty()) break;  // tasks wait for everything issued before them
      Op op = std::move(to_start_.front());
      to_start_.pop_front();
      run_task_here(op);
      progressed = true;
      continue;
    }
    if (!to_start_.front().started && aborted.empty() && !ready_to_start(to_start_.front())) break;
    Op op = std::move(to_start_.front());
    to_start_.pop_front();
    progressed = true;
    if (!op.started) {
      if (!aborted.empty()) {
        fail(op, aborted);
        continue;
      }
      try {
        op.start_ns = 0;
        start(op);
        op.started = true;
      } catch (...) {
        fail(op, std::current_exception());
        continue;
      }
    }
    if (op.start_ns == 0) op.start_ns = now_ns();
    in_flight_.push_back(std::move(op));
  }

  const std::int64_t now = now_ns();
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    Op& op = *it;
    bool done = false;
    try {
      done = test(op);
    } catch (...) {
      fail(op, std::current_exception());
      it = in_flight_.erase(it);
      progressed = true;
      continue;
    }
    if (done) {
      complete(op);
      it = in_flight_.erase(it);
      progressed = true;
      continue;
    }
    const std::int64_t elapsed = now - op.issue_ns;
    const bool overdue = elapsed > options_.timeout.count();
    if ((!aborted.empty() || overdue) && cancel(op)) {
      if (!aborted.empty()) {
        fail(op, aborted);
      } else {
        fail(op, op.work->timeout_error(elapsed));
      }
      it = in_flight_.erase(it);
      progressed = true;
      continue;
    }
    ++it;
  }
  return progressed;
}

// The span, then the Work: whoever waits on the Work also sees the span.
void ProgressCommunicator::complete(Op& op) {
  const std::int64_t end = op.end_ns > 0 ? op.end_ns : now_ns();
  const OpInfo& info = op.work->info();
  if (op.recorder != nullptr) {
    Span span = info.comm_span(op.start_ns, end);
    span.issue_ns = op.issue_ns;
    span.group = group_;
    op.recorder->record(span);
  }
  op.work->mark_started(op.start_ns);
  op.work->finish(end);
}

void ProgressCommunicator::fail(Op& op, const std::string& reason) {
  std::string message = op.work->info().describe() + " on rank " + std::to_string(rank()) + ": " + reason;
  op.work->fail(reason.starts_with(kAbortedPrefix)
                    ? std::make_exception_ptr(AbortedError(std::move(message)))
                    : std::make_exception_ptr(RuntimeError(std::move(message))),
                now_ns());
}

// Errors that already name this rank and operation (timeouts) are kept; others are
// wrapped so that the message says which operation on which rank failed.
void ProgressCommunicator::fail(Op& op, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError&) {
    op.work->fail(error, now_ns());
  } catch (const AbortedError&) {
    op.work->fail(error, now_ns());
  } catch (const std::exception& e) {
    fail(op, std::string(e.what()));
  } catch (...) {
    fail(op, std::string("unknown error"));
  }
}

void ProgressCommunicator::run_task_here(Op& op) {
  try {
    op.task();
    op.work->finish(now_ns());
  } catch (...) {
    op.work->fail(std::current_exception(), now_ns());
  }
}

}  // namespace tandem
