// The `mpi` backend: a communication thread per process owns every MPI call between
// initialization and finalization, posts the non-blocking operation of each Work in issue
// order and polls them (see mpi_comm.h).
#include "comm/mpi/mpi_comm.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "comm/mpi/mpi_ring.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {
namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) throw RuntimeError(std::string(what) + ": " + mpi_error_text(code));
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "unknown";
  }
}

enum class Algorithm : std::uint8_t { kAuto, kNative, kRing };

// auto: the ring from this size on. Measured on Open MPI 4.1 shared memory (docs/MPI.md,
// docs/PERFORMANCE.md): below it MPI_Iallreduce's latency wins, above it the ring's
// bandwidth does, by up to 2x at 64 MiB.
constexpr std::int64_t kAutoRingBytes = 256 << 10;

// Polling (Note [progress polling] below): a few immediate re-polls, then a yield per
// poll; with a sleep configured, sleeps once this many polls found nothing.
constexpr int kSpinPolls = 16;
constexpr int kYieldPolls = 256;
constexpr std::size_t kRingSegmentElems = (256 << 10) / sizeof(float);  // 256 KiB

// MPI may be initialized once per process.
std::atomic<bool> g_mpi_used{false};

// One issued operation, from the issuing thread to the communication thread.
// For allreduce and broadcast, input and output are the same buffer.
struct MpiOp {
  SpanKind kind = SpanKind::kOther;
  const float* input = nullptr;
  std::size_t input_count = 0;
  float* output = nullptr;
  std::size_t output_count = 0;
  ReduceOp op = ReduceOp::kSum;
  int peer = -1;  // broadcast: root; send/recv: the other rank
  int tag = 0;
  WorkPtr work{};
  RankRecorder* recorder = nullptr;
  std::function<void()> task{};  // set: run on the comm thread once nothing is in flight
};

// An operation the communication thread has posted and polls.
struct Posted {
  MpiOp op;
  std::int64_t start_ns = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  std::unique_ptr<RingAllreduce> ring{};  // ring allreduce: progressed instead of tested
  bool ring_waiting = false;              // queued behind the ring that runs now
};

std::int64_t payload_bytes(const MpiOp& op) {
  const std::size_t count = op.kind == SpanKind::kReduceScatter || op.kind == SpanKind::kSend
                                ? op.input_count
                                : op.output_count;
  return static_cast<std::int64_t>(count * sizeof(float));
}

class MpiCommunicator final : public ProcessCommunicator {
 public:
  MpiCommunicator(const ProcessBackendOptions& options, Algorithm algorithm)
      : timeout_ns_(options.timeout_ns),
        poll_sleep_ns_(options.poll_sleep_ns < 0 ? 0 : options.poll_sleep_ns),
        algorithm_(algorithm) {
    init_mpi();
    thread_ = std::thread([this] { run(); });
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    // The communication thread has ended: this thread may call MPI again.
    MPI_Comm_free(&ring_comm_);
    MPI_Comm_free(&task_comm_);
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend_name() const override { return "mpi"; }

  WorkPtr allreduce(std::span<float> data, ReduceOp op, OpInfo info) override {
    return issue({.kind = SpanKind::kAllreduce,
                  .input = data.data(),
                  .input_count = data.size(),
                  .output = data.data(),
                  .output_count = data.size(),
                  .op = op},
                 info);
  }
  WorkPtr reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op,
                         OpInfo info) override {
    return issue({.kind = SpanKind::kReduceScatter,
                  .input = input.data(),
                  .input_count = input.size(),
                  .output = output.data(),
                  .output_count = output.size(),
                  .op = op},
                 info);
  }
  WorkPtr allgather(std::span<const float> input, std::span<float> output, OpInfo info) override {
    return issue({.kind = SpanKind::kAllgather,
                  .input = input.data(),
                  .input_count = input.size(),
                  .output = output.data(),
                  .output_count = output.size()},
                 info);
  }
  WorkPtr broadcast(std::span<float> data, int root, OpInfo info) override {
    return issue({.kind = SpanKind::kBroadcast,
                  .input = data.data(),
                  .input_count = data.size(),
                  .output = data.data(),
                  .output_count = data.size(),
                  .peer = root},
                 info);
  }
  WorkPtr barrier(OpInfo info) override { return issue({.kind = SpanKind::kBarrier}, info); }
  WorkPtr send(std::span<const float> data, int peer, int tag, OpInfo info) override {
    return issue({.kind = SpanKind::kSend,
                  .input = data.data(),
                  .input_count = data.size(),
                  .peer = peer,
                  .tag = tag},
                 info);
  }
  WorkPtr recv(std::span<float> data, int peer, int tag, OpInfo info) override {
    return issue({.kind = SpanKind::kRecv,
                  .output = data.data(),
                  .output_count = data.size(),
                  .peer = peer,
                  .tag = tag},
                 info);
  }

  std::string describe() const override {
    std::string poll = poll_sleep_ns_ > 0
                           ? "sleep " + format_duration_ns(static_cast<double>(poll_sleep_ns_))
                           : std::string("yield");
    return library_ + ", " + thread_level_name(thread_level_) + ", allreduce " + algorithm_name() +
           ", idle poll " + poll;
  }
  std::string algorithm_name() const {
    switch (algorithm_) {
      case Algorithm::kAuto:
        return "auto (ring from " + format_bytes(kAutoRingBytes) + ")";
      case Algorithm::kNative:
        return "native";
      case Algorithm::kRing:
        return "ring";
    }
    return "?";
  }
  int hosts() const override { return hosts_; }
  int ranks_on_host() const override { return ranks_on_host_; }
  std::string host_name() const override { return host_name_; }

  std::vector<ClockOffset> estimate_clock_offsets(int rounds) override {
    std::vector<ClockOffset> offsets;
    run_task({.kind = SpanKind::kOther}, [&] { offsets = ping_pong(std::max(1, rounds)); });
    return offsets;
  }

  std::vector<std::string> gather_bytes(std::string_view mine, int root) override {
    std::vector<std::string> all;
    run_task({.kind = SpanKind::kOther}, [&] { all = gather(mine, root); });
    return all;
  }

  [[noreturn]] void abort_job(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    if (thread_level_ == MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, exit_code);
    // SERIALIZED: only the communication thread may call MPI now; it aborts at its next
    // poll. If it is stuck outside MPI for long, leave without MPI's help.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abort_code_ = exit_code;
    }
    cv_.notify_all();
    std::this_thread::sleep_for(std::chrono::seconds(30));
    std::_Exit(exit_code);
  }

 private:
  // Constructing thread, before the communication thread exists.
  void init_mpi() {
    if (g_mpi_used.exchange(true)) {
      throw RuntimeError("mpi backend: MPI can be initialized once per process, and it was");
    }
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Query_thread(&thread_level_);
    } else {
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_),
                "MPI_Init_thread");
      owns_mpi_ = true;
    }
    if (thread_level_ < MPI_THREAD_SERIALIZED) {
      const std::string level = thread_level_name(thread_level_);
      if (owns_mpi_) MPI_Finalize();
      throw RuntimeError(
          "mpi backend: the MPI library provides only " + level +
          "; tandem's communication thread needs MPI_THREAD_SERIALIZED or better (ask your "
          "MPI for thread support, e.g. Open MPI built with --enable-mpi-thread-multiple)");
    }
    // Private communicators: user operations, backend tasks and ring messages never
    // match each other. Errors come back as codes and become failed Works.
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_dup(MPI_COMM_WORLD, &task_comm_);
    MPI_Comm_dup(MPI_COMM_WORLD, &ring_comm_);
    for (MPI_Comm c : {comm_, task_comm_, ring_comm_})
      MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    if (found && tag_ub != nullptr) tag_ub_ = *tag_ub;

    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    MPI_Get_processor_name(name, &length);
    host_name_.assign(name, static_cast<std::size_t>(length));
    MPI_Comm host_comm;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host_comm);
    int host_rank = 0;
    MPI_Comm_size(host_comm, &ranks_on_host_);
    MPI_Comm_rank(host_comm, &host_rank);
    MPI_Comm_free(&host_comm);
    int leader = host_rank == 0 ? 1 : 0;
    MPI_Allreduce(&leader, &hosts_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(version, &length);
    library_.assign(version, static_cast<std::size_t>(length));
    library_ = library_.substr(0, library_.find_first_of(",\n"));
  }

  // Caller's thread: wraps the op in a Work and queues it; never calls MPI.
  WorkPtr issue(MpiOp op, OpInfo info) {
    op.recorder = recorder();
    info.kind = op.kind;
    info.bytes = payload_bytes(op);
    op.work = std::make_shared<Work>(info);
    WorkPtr work = op.work;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(op));
    }
    cv_.notify_all();
    return work;
  }

  // Runs `body` on the communication thread after everything issued before it has
  // completed, and waits for it; rethrows what it threw.
  void run_task(MpiOp op, std::function<void()> body) {
    op.task = std::move(body);
    WorkPtr work = issue(std::move(op), OpInfo{});
    work->wait();
  }

  // ---- the communication thread ----

  void run() {
    int idle_polls = 0;
    for (;;) {
      std::deque<MpiOp> fresh;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (posted_.empty()) {
          cv_.wait(lock, [this] { return !queue_.empty() || stopping_ || abort_code_ >= 0; });
        }
        if (abort_code_ >= 0) MPI_Abort(MPI_COMM_WORLD, abort_code_);
        if (stopping_ && queue_.empty() && posted_.empty()) return;
        if (stopping_ && queue_.empty()) {
          // The owner is destroying us with operations still in flight: give them the
          // timeout, as a waiter would, then end the job rather than hang in finalize.
          if (stop_deadline_ns_ == 0) stop_deadline_ns_ = now_ns() + timeout_ns_;
          if (now_ns() > stop_deadline_ns_) abort_in_flight();
        }
        fresh.swap(queue_);
      }
      for (MpiOp& op : fresh) {
        if (op.task) {
          drain();
          run_task_here(op);
        } else {
          post(std::move(op));
        }
      }
      const bool completed = poll();
      idle_polls = completed || !fresh.empty() ? 0 : idle_polls + 1;
      if (!posted_.empty()) back_off(idle_polls);
    }
  }

  // Note [progress polling]: MPI moves a non-blocking operation's data only inside MPI
  // calls (no asynchronous progress thread in Open MPI's shared-memory and TCP paths), so
  // the communication thread must keep calling MPI_Test while anything is in flight. A
  // pure spin would take a core from the compute that overlap is meant to hide
  // communication behind; so after a few immediate re-polls it yields the core between
  // polls, and with --mpi-poll-us it sleeps instead once polling has been fruitless for a
  // while. With nothing in flight it blocks on the queue's condition variable.
  void back_off(int idle_polls) const {
    if (idle_polls < kSpinPolls) return;
    if (poll_sleep_ns_ > 0 && idle_polls >= kYieldPolls) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(poll_sleep_ns_));
    } else {
      sched_yield();
    }
  }

  // Validates and posts one operation, or fails its Work at once.
  void post(MpiOp op) {
    Posted p{.op = std::move(op), .start_ns = now_ns()};
    try {
      validate(p.op);
      start(p);
    } catch (const std::exception& e) {
      fail(p.op, e.what());
      return;
    }
    posted_.push_back(std::move(p));
  }

  void validate(const MpiOp& op) const {
    const auto n = static_cast<std::size_t>(size_);
    const auto too_big = [](std::size_t count) {
      return count > static_cast<std::size_t>(INT_MAX);
    };
    if (too_big(op.input_count) || too_big(op.output_count)) {
      throw RuntimeError("more than INT_MAX elements in one MPI operation");
    }
    switch (op.kind) {
      case SpanKind::kReduceScatter:
        if (op.input_count != n * op.output_count) {
          throw RuntimeError(
              "rank " + std::to_string(rank_) + " passed " + std::to_string(op.input_count) +
              " input elements for " + std::to_string(op.output_count) +
              " output elements (need size() * output = " + std::to_string(n * op.output_count) +
              ")");
        }
        break;
      case SpanKind::kAllgather:
        if (op.output_count != n * op.input_count) {
          throw RuntimeError(
              "rank " + std::to_string(rank_) + " passed " + std::to_string(op.output_count) +
              " output elements for " + std::to_string(op.input_count) +
              " input elements (need size() * input = " + std::to_string(n * op.input_count) + ")");
        }
        break;
      case SpanKind::kBroadcast:
        if (op.peer < 0 || op.peer >= size_) {
          throw RuntimeError("root " + std::to_string(op.peer) + " out of range [0, " +
                             std::to_string(size_) + ")");
        }
        break;
      case SpanKind::kSend:
      case SpanKind::kRecv:
        if (op.peer < 0 || op.peer >= size_) {
          throw RuntimeError("peer " + std::to_string(op.peer) + " out of range [0, " +
                             std::to_string(size_) + ")");
        }
        if (op.tag < 0 || op.tag > tag_ub_) {
          throw RuntimeError("tag " + std::to_string(op.tag) + " out of MPI's range [0, " +
                             std::to_string(tag_ub_) + "]");
        }
        break;
      default:
        break;
    }
  }

  void start(Posted& p) {
    MpiOp& op = p.op;
    const auto in_count = static_cast<int>(op.input_count);
    const auto out_count = static_cast<int>(op.output_count);
    switch (op.kind) {
      case SpanKind::kAllreduce:
        if (algorithm_ == Algorithm::kRing ||
            (algorithm_ == Algorithm::kAuto && op.work->info().bytes >= kAutoRingBytes)) {
          // One ring at a time (mpi_ring.h): later ones wait in issue order.
          p.ring_waiting = ring_busy_;
          if (!ring_busy_) start_ring(p);
          return;
        }
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, op.output, out_count, MPI_FLOAT, MPI_SUM, comm_,
                                 &p.request),
                  "MPI_Iallreduce");
        return;
      case SpanKind::kReduceScatter:
        check_mpi(MPI_Ireduce_scatter_block(op.input, op.output, out_count, MPI_FLOAT, MPI_SUM,
                                            comm_, &p.request),
                  "MPI_Ireduce_scatter_block");
        return;
      case SpanKind::kAllgather: {
        // MPI forbids aliased buffers: my block already in place is MPI_IN_PLACE.
        const bool in_place =
            op.input == op.output + static_cast<std::size_t>(rank_) * op.input_count;
        check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : op.input, in_count, MPI_FLOAT, op.output,
                                 in_count, MPI_FLOAT, comm_, &p.request),
                  "MPI_Iallgather");
        return;
      }
      case SpanKind::kBroadcast:
        check_mpi(MPI_Ibcast(op.output, out_count, MPI_FLOAT, op.peer, comm_, &p.request),
                  "MPI_Ibcast");
        return;
      case SpanKind::kBarrier:
        check_mpi(MPI_Ibarrier(comm_, &p.request), "MPI_Ibarrier");
        return;
      case SpanKind::kSend:
        check_mpi(MPI_Isend(op.input, in_count, MPI_FLOAT, op.peer, op.tag, comm_, &p.request),
                  "MPI_Isend");
        return;
      case SpanKind::kRecv:
        check_mpi(MPI_Irecv(op.output, out_count, MPI_FLOAT, op.peer, op.tag, comm_, &p.request),
                  "MPI_Irecv");
        return;
      default:
        throw RuntimeError("unsupported operation");
    }
  }

  void start_ring(Posted& p) {
    p.ring = std::make_unique<RingAllreduce>(ring_comm_,
                                             std::span<float>(p.op.output, p.op.output_count),
                                             kRingSegmentElems, ring_scratch_);
    p.ring_waiting = false;
    p.start_ns = now_ns();
    ring_busy_ = true;
  }

  // Tests everything in flight once; completes what finished. True if anything did.
  bool poll() {
    bool completed = false;
    for (auto it = posted_.begin(); it != posted_.end();) {
      Posted& p = *it;
      bool done = false;
      try {
        done = test(p);
      } catch (const std::exception& e) {
        if (p.ring) ring_busy_ = false;
        fail(p.op, e.what());
        it = posted_.erase(it);
        completed = true;
        continue;
      }
      if (!done) {
        ++it;
        continue;
      }
      if (p.ring) ring_busy_ = false;
      complete(p);
      it = posted_.erase(it);
      completed = true;
    }
    if (completed && !ring_busy_) {
      for (Posted& p : posted_) {
        if (p.ring_waiting) {
          start_ring(p);
          break;
        }
      }
    }
    return completed;
  }

  bool test(Posted& p) {
    if (p.ring_waiting) return false;
    if (p.ring) return p.ring->progress();
    int done = 0;
    check_mpi(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }

  void drain() {
    int idle_polls = 0;
    while (!posted_.empty()) {
      idle_polls = poll() ? 0 : idle_polls + 1;
      back_off(idle_polls);
    }
  }

  // Average is a sum divided here; then the span, then the Work (so a waiter sees both).
  void complete(Posted& p) {
    const MpiOp& op = p.op;
    if (op.op == ReduceOp::kAverage &&
        (op.kind == SpanKind::kAllreduce || op.kind == SpanKind::kReduceScatter)) {
      const auto n = static_cast<float>(size_);
      for (std::size_t i = 0; i < op.output_count; ++i) op.output[i] /= n;
    }
    const std::int64_t end = now_ns();
    const OpInfo& info = op.work->info();
    if (op.recorder != nullptr) {
      op.recorder->record(info.comm_span(p.start_ns, end));
    }
    op.work->mark_started(p.start_ns);
    op.work->finish(end);
  }

  void fail(const MpiOp& op, const std::string& reason) {
    const std::string message =
        op.work->info().describe() + " on rank " + std::to_string(rank_) + ": " + reason;
    op.work->fail(std::make_exception_ptr(RuntimeError(message)), now_ns());
  }

  void run_task_here(MpiOp& op) {
    try {
      op.task();
      op.work->finish(now_ns());
    } catch (...) {
      op.work->fail(std::current_exception(), now_ns());
    }
  }

  [[noreturn]] void abort_in_flight() {
    const Posted& p = posted_.front();
    std::fprintf(stderr,
                 "tandem: rank %d: communicator destroyed while %s was still in flight after "
                 "%s; aborting the job\n",
                 rank_, p.op.work->info().describe().c_str(),
                 format_duration_ns(static_cast<double>(now_ns() - p.start_ns)).c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  // Tasks: blocking steps of the backend itself, on task_comm_, bounded by the timeout.
  void wait_request(MPI_Request& request, const char* what) {
    const std::int64_t deadline = now_ns() + timeout_ns_;
    int idle_polls = 0;
    for (;;) {
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (now_ns() > deadline) {
        throw TimeoutError("rank " + std::to_string(rank_) + ": " + what + " not complete after " +
                           format_duration_ns(static_cast<double>(timeout_ns_)));
      }
      back_off(++idle_polls);
    }
  }

  // Note [clock alignment]: rank 0 ping-pongs with each rank in turn. A round sends rank
  // 0's time t0, the peer answers with its own time tp, rank 0 reads t1; if the two
  // legs take equally long, tp was read at rank 0's (t0 + t1) / 2, so the offset is
  // tp - (t0 + t1) / 2, wrong by at most (t1 - t0) / 2. The round with the shortest
  // round trip is kept and its half round trip reported as the uncertainty.
  std::vector<ClockOffset> ping_pong(int rounds) {
    std::vector<ClockOffset> offsets;
    std::int64_t message[2] = {0, 0};
    MPI_Request request;
    if (rank_ != 0) {
      for (int round = 0; round < rounds; ++round) {
        check_mpi(MPI_Irecv(message, 1, MPI_INT64_T, 0, 0, task_comm_, &request),
                  "clock MPI_Irecv");
        wait_request(request, "clock ping from rank 0");
        message[0] = now_ns();
        check_mpi(MPI_Isend(message, 1, MPI_INT64_T, 0, 1, task_comm_, &request),
                  "clock MPI_Isend");
        wait_request(request, "clock pong to rank 0");
      }
      return offsets;
    }
    offsets.resize(static_cast<std::size_t>(size_));
    offsets[0].at_ns = now_ns();
    for (int peer = 1; peer < size_; ++peer) {
      std::int64_t best_rtt = INT64_MAX;
      ClockOffset& best = offsets[static_cast<std::size_t>(peer)];
      for (int round = 0; round < rounds; ++round) {
        std::int64_t reply = 0;
        message[0] = now_ns();
        const std::int64_t t0 = message[0];
        check_mpi(MPI_Isend(message, 1, MPI_INT64_T, peer, 0, task_comm_, &request),
                  "clock MPI_Isend");
        wait_request(request, "clock ping");
        check_mpi(MPI_Irecv(&reply, 1, MPI_INT64_T, peer, 1, task_comm_, &request),
                  "clock MPI_Irecv");
        wait_request(request, "clock pong");
        const std::int64_t t1 = now_ns();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best = {.offset_ns = reply - (t0 + (t1 - t0) / 2),
                  .uncertainty_ns = (t1 - t0 + 1) / 2,
                  .at_ns = t0 + (t1 - t0) / 2};
        }
      }
    }
    return offsets;
  }

  std::vector<std::string> gather(std::string_view mine, int root) {
    if (mine.size() > static_cast<std::size_t>(INT_MAX)) {
      throw RuntimeError("gather of more than 2 GiB from one rank");
    }
    int my_size = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<std::size_t>(size_));
    MPI_Request request;
    check_mpi(
        MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, task_comm_, &request),
        "MPI_Igather");
    wait_request(request, "gather of sizes");
    std::vector<int> displs(static_cast<std::size_t>(size_));
    std::vector<char> buffer;
    if (rank_ == root) {
      long long total = 0;
      for (int r = 0; r < size_; ++r) {
        displs[static_cast<std::size_t>(r)] = static_cast<int>(total);
        total += sizes[static_cast<std::size_t>(r)];
        if (total > INT_MAX) throw RuntimeError("gather of more than 2 GiB in all");
      }
      buffer.resize(static_cast<std::size_t>(total));
    }
    check_mpi(MPI_Igatherv(mine.data(), my_size, MPI_BYTE, buffer.data(), sizes.data(),
                           displs.data(), MPI_BYTE, root, task_comm_, &request),
              "MPI_Igatherv");
    wait_request(request, "gather of bytes");
    std::vector<std::string> all;
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        const auto begin = static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]);
        all.emplace_back(buffer.data() + begin,
                         static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
      }
    }
    return all;
  }

  const std::int64_t timeout_ns_;
  const std::int64_t poll_sleep_ns_;
  const Algorithm algorithm_;
  bool owns_mpi_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm task_comm_ = MPI_COMM_NULL;
  MPI_Comm ring_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  int hosts_ = 1;
  int ranks_on_host_ = 1;
  std::string host_name_;
  std::string library_;

  // Issuing threads -> communication thread, under mutex_.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<MpiOp> queue_;
  bool stopping_ = false;
  int abort_code_ = -1;

  // Communication thread only.
  std::deque<Posted> posted_;
  bool ring_busy_ = false;
  std::vector<float> ring_scratch_;
  std::int64_t stop_deadline_ns_ = 0;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<ProcessCommunicator> make_mpi_communicator(const ProcessBackendOptions& options) {
  Algorithm algorithm = Algorithm::kAuto;
  if (options.allreduce_algorithm == "ring") {
    algorithm = Algorithm::kRing;
  } else if (options.allreduce_algorithm == "native") {
    algorithm = Algorithm::kNative;
  } else if (!options.allreduce_algorithm.empty() && options.allreduce_algorithm != "auto") {
    throw UsageError("--mpi-allreduce: unknown algorithm '" + options.allreduce_algorithm +
                     "' (expected auto, native or ring)");
  }
  if (options.timeout_ns <= 0) throw UsageError("--timeout must be > 0");
  return std::make_unique<MpiCommunicator>(options, algorithm);
}

}  // namespace tandem
