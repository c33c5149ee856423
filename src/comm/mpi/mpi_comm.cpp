// The `mpi` backend: a ProgressCommunicator whose communication thread owns every MPI
// call between initialization and finalization, posts the non-blocking operation of each
// Work in issue order and polls them (see mpi_comm.h).
#include "comm/mpi/mpi_comm.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
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
// The least the first clock alignment waits for a peer (Note [clock alignment]).
constexpr std::chrono::seconds kMeetingWait{30};
constexpr int kYieldPolls = 256;
constexpr std::size_t kRingSegmentElems = (256 << 10) / sizeof(float);  // 256 KiB

// MPI may be initialized once per process.
std::atomic<bool> g_mpi_used{false};

// MPI_Abort asks Open MPI's runtime to end the whole job. With a host unreachable the
// runtime can take minutes (mpirun 4.1 was seen to hang ~2 min, then crash): this
// process does not wait for it. A few seconds after asking, it ends itself with the same
// code, so every rank's end is bounded by its own --timeout plus this grace
// (docs/MULTIHOST.md, "Network faults").
constexpr auto kAbortGrace = std::chrono::seconds(3);

[[noreturn]] void abort_job_now(int code) {
  std::thread([code] {
    std::this_thread::sleep_for(kAbortGrace);
    std::_Exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// What MPI initialization learns, before the communicator (and its skeleton) exists.
struct MpiState {
  bool owns_mpi = false;
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Comm comm = MPI_COMM_NULL;       // user operations
  MPI_Comm task_comm = MPI_COMM_NULL;  // the backend's own tasks (clock, gathers)
  MPI_Comm ring_comm = MPI_COMM_NULL;  // ring allreduce messages
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;
  int hosts = 1;
  int ranks_on_host = 1;
  int local_rank = 0;
  std::string host_name;
  std::string library;
};

MpiState init_mpi();
void find_placement(MPI_Comm comm, MpiState& m);

// An operation's MPI side.
struct MpiOpState final : OpState {
  MPI_Request request = MPI_REQUEST_NULL;
  std::unique_ptr<RingCollective> ring{};  // a ring: progressed instead of tested
  bool ring_waiting = false;               // queued behind the ring that runs now
};

class MpiCommunicator final : public ProcessCommunicator {
 public:
  MpiCommunicator(const BackendOptions& options, Algorithm algorithm, MpiState state)
      : ProcessCommunicator({.rank = state.rank, .size = state.size, .timeout = options.timeout}),
        poll_sleep_ns_(options.mpi.poll_sleep_ns < 0 ? 0 : options.mpi.poll_sleep_ns),
        algorithm_(algorithm),
        m_(std::move(state)) {
    start_thread();
  }

  ~MpiCommunicator() override {
    stop_thread();
    // The communication thread has ended: this thread may call MPI again.
    MPI_Comm_free(&m_.ring_comm);
    MPI_Comm_free(&m_.task_comm);
    MPI_Comm_free(&m_.comm);
    if (m_.owns_mpi) MPI_Finalize();
  }

  std::string_view backend_name() const override { return "mpi"; }

  std::string describe() const override {
    std::string poll = poll_sleep_ns_ > 0
                           ? "sleep " + format_duration_ns(static_cast<double>(poll_sleep_ns_))
                           : std::string("yield");
    return m_.library + ", " + thread_level_name(m_.thread_level) + ", allreduce " +
           algorithm_name() + ", idle poll " + poll;
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
  int hosts() const override { return m_.hosts; }
  int ranks_on_host() const override { return m_.ranks_on_host; }
  int local_rank() const override { return m_.local_rank; }
  std::string host_name() const override { return m_.host_name; }

  std::vector<ClockOffset> estimate_clock_offsets(int rounds) override {
    std::vector<ClockOffset> offsets;
    run_task([&] { offsets = ping_pong(std::max(1, rounds)); });
    return offsets;
  }

  std::vector<std::string> gather_bytes(std::string_view mine, int root) override {
    std::vector<std::string> all;
    run_task([&] { all = gather(mine, root); });
    return all;
  }

  std::string broadcast_bytes(std::string_view mine, int root) override {
    std::string out;
    run_task([&] { out = broadcast_string(mine, root); });
    return out;
  }

  [[noreturn]] void abort_job(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    if (m_.thread_level == MPI_THREAD_MULTIPLE) abort_job_now(exit_code);
    // SERIALIZED: only the communication thread may call MPI now; it aborts at its next
    // poll. If it is stuck outside MPI for long, leave without MPI's help.
    abort_code_.store(exit_code);
    wake();
    std::this_thread::sleep_for(std::chrono::seconds(30));
    std::_Exit(exit_code);
  }

  // After abort(): operations MPI cannot withdraw would keep the caller's buffers in use,
  // so a drain with any of them in flight ends the job (printing the abort's reason) on
  // the communication thread instead of waiting. Without abort, drain waits.
  void drain() override {
    if (!abort_reason().empty()) {
      end_job_if_busy_.store(true);
      wake();
    }
    ProgressCommunicator::drain();
  }

 protected:
  // Note [mpi split]: the child is an MpiCommunicator of its own on MPI_Comm_split of
  // this one's communicator (and duplicates of it for tasks and ring messages), with its
  // own communication thread; this thread makes it, as a task in issue order. MPI
  // functions that create communicators block without a timeout, so a barrier bounded
  // by the timeout first makes sure every rank has come. Two communication threads call
  // MPI at once: that needs MPI_THREAD_MULTIPLE (same on every rank, so every rank
  // refuses alike). The child does not own MPI: destroy it before this one finalizes.
  std::unique_ptr<ProgressCommunicator> make_split(int color, int key) override {
    if (m_.thread_level != MPI_THREAD_MULTIPLE) {
      throw RuntimeError(std::string("mpi backend: split() needs MPI_THREAD_MULTIPLE (the child's "
                                     "communication thread calls MPI alongside this one's); "
                                     "the library provides ") +
                         thread_level_name(m_.thread_level));
    }
    MpiState child;
    run_task([&] { child = split_state(color, key); });
    const BackendOptions options{.timeout = timeout(), .mpi = {.poll_sleep_ns = poll_sleep_ns_}};
    return std::make_unique<MpiCommunicator>(options, algorithm_, std::move(child));
  }

  void start(Op& op) override {
    check_job_abort();
    validate(op);
    auto state = std::make_unique<MpiOpState>();
    MpiOpState& st = *state;
    op.state = std::move(state);
    const auto in_count = static_cast<int>(op.input_count);
    const auto out_count = static_cast<int>(op.output_count);
    switch (op.kind) {
      case SpanKind::kAllreduce:
      case SpanKind::kReduceScatter:
      case SpanKind::kAllgather:
        if (use_ring(op)) {
          // One ring at a time (mpi_ring.h): later ones wait in issue order.
          st.ring_waiting = true;
          if (!ring_busy_) start_ring(op, st);
          return;
        }
        start_native(op, st);
        return;
      case SpanKind::kBroadcast:
        check_mpi(MPI_Ibcast(op.output, out_count, MPI_FLOAT, op.peer, m_.comm, &st.request),
                  "MPI_Ibcast");
        return;
      case SpanKind::kBarrier:
        check_mpi(MPI_Ibarrier(m_.comm, &st.request), "MPI_Ibarrier");
        return;
      case SpanKind::kSend:
        check_mpi(MPI_Isend(op.input, in_count, MPI_FLOAT, op.peer, op.tag, m_.comm, &st.request),
                  "MPI_Isend");
        return;
      case SpanKind::kRecv:
        check_mpi(MPI_Irecv(op.output, out_count, MPI_FLOAT, op.peer, op.tag, m_.comm, &st.request),
                  "MPI_Irecv");
        return;
      default:
        throw RuntimeError("unsupported operation");
    }
  }

  bool test(Op& op) override {
    check_job_abort();
    auto& st = static_cast<MpiOpState&>(*op.state);
    bool done = false;
    if (st.ring_waiting) {
      if (!ring_busy_) start_ring(op, st);
      return false;
    }
    try {
      if (st.ring) {
        done = st.ring->progress();
      } else {
        int flag = 0;
        check_mpi(MPI_Test(&st.request, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        done = flag != 0;
      }
    } catch (...) {
      if (st.ring) ring_busy_ = false;
      throw;
    }
    if (!done) return false;
    if (st.ring) ring_busy_ = false;
    // Average is a sum divided here.
    if (op.reduce == ReduceOp::kAverage &&
        (op.kind == SpanKind::kAllreduce || op.kind == SpanKind::kReduceScatter)) {
      const auto n = static_cast<float>(size());
      if (op.type == DataType::kFloat32) {
        for (std::size_t i = 0; i < op.output_count; ++i) op.out<float>()[i] /= n;
      } else {
        std::uint16_t* out = op.out<std::uint16_t>();
        for (std::size_t i = 0; i < op.output_count; ++i) {
          out[i] = narrow(op.type, widen(op.type, out[i]) / n);
        }
      }
    }
    return true;
  }

  // A ring that has not started is MPI's to forget, and a receive can be cancelled
  // (MPI_Cancel); other posted requests run on.
  bool cancel(Op& op) override {
    if (!op.state) return true;
    auto& st = static_cast<MpiOpState&>(*op.state);
    if (st.ring_waiting) return true;
    if (op.kind != SpanKind::kRecv || st.request == MPI_REQUEST_NULL) return false;
    if (MPI_Cancel(&st.request) != MPI_SUCCESS) return false;
    // A cancelled receive completes at once (or it had matched: then it is complete).
    MPI_Wait(&st.request, MPI_STATUS_IGNORE);
    return true;
  }

  void idle(std::size_t in_flight, int idle_polls) override {
    check_job_abort();
    if (in_flight > 0 && end_job_if_busy_.load()) end_job_in_flight();
    if (in_flight == 0) {
      wait_for_wake(0);
      return;
    }
    back_off(idle_polls);
  }

 private:
  void check_job_abort() {
    const int code = abort_code_.load();
    if (code >= 0) abort_job_now(code);
  }

  // See drain(): one line naming why, then the whole job ends.
  [[noreturn]] void end_job_in_flight() {
    const Op* op = oldest_in_flight();
    std::string reason = abort_reason();
    if (reason.starts_with("aborted: ")) reason = reason.substr(9);
    std::fprintf(stderr, "%s\n", failure_line(rank(), reason).c_str());
    if (op != nullptr && reason.find("in flight") != std::string::npos) {
      std::fprintf(stderr, "tandem: rank %d: %s was still in flight after %s\n", rank(),
                   op->work->info().describe().c_str(),
                   format_duration_ns(static_cast<double>(now_ns() - op->issue_ns)).c_str());
    }
    std::fflush(stderr);
    abort_job_now(1);
  }

  void validate(const Op& op) const {
    const auto too_big = [](std::size_t count) {
      return count > static_cast<std::size_t>(INT_MAX);
    };
    if (too_big(op.input_count) || too_big(op.output_count)) {
      throw RuntimeError("more than INT_MAX elements in one MPI operation");
    }
    if ((op.kind == SpanKind::kSend || op.kind == SpanKind::kRecv) && op.tag > m_.tag_ub) {
      throw RuntimeError("tag " + std::to_string(op.tag) + " out of MPI's range [0, " +
                         std::to_string(m_.tag_ub) + "]");
    }
  }

  // Note [ring or native]: --mpi-allreduce picks the algorithm of allreduce,
  // reduce-scatter and allgather alike: tandem's segmented ring (mpi_ring.h) or Open
  // MPI's non-blocking collective; auto takes the ring from kAutoRingBytes. Besides being
  // faster for large buffers (docs/PERFORMANCE.md), the ring's reduce-scatter needs
  // scratch of 2/n of its input, where Open MPI's allocates a temporary of the whole
  // input: for sharded strategies, which exist to save memory, that matters.
  // MPI has no 16-bit float type (nor a sum of one): those always take the ring.
  bool use_ring(const Op& op) const {
    return algorithm_ == Algorithm::kRing || op.type != DataType::kFloat32 ||
           (algorithm_ == Algorithm::kAuto && op.work->info().bytes >= kAutoRingBytes);
  }

  void start_native(Op& op, MpiOpState& st) {
    const auto in_count = static_cast<int>(op.input_count);
    const auto out_count = static_cast<int>(op.output_count);
    if (op.kind == SpanKind::kAllreduce) {
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, op.output, out_count, MPI_FLOAT, MPI_SUM, m_.comm,
                               &st.request),
                "MPI_Iallreduce");
    } else if (op.kind == SpanKind::kReduceScatter) {
      check_mpi(MPI_Ireduce_scatter_block(op.input, op.output, out_count, MPI_FLOAT, MPI_SUM,
                                          m_.comm, &st.request),
                "MPI_Ireduce_scatter_block");
    } else {
      // MPI forbids aliased buffers: my block already in place is MPI_IN_PLACE.
      const bool in_place =
          op.input == op.out<float>() + static_cast<std::size_t>(rank()) * op.input_count;
      check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : op.input, in_count, MPI_FLOAT, op.output,
                               in_count, MPI_FLOAT, m_.comm, &st.request),
                "MPI_Iallgather");
    }
  }

  void start_ring(Op& op, MpiOpState& st) {
    const RingKind kind = op.kind == SpanKind::kAllreduce       ? RingKind::kAllreduce
                          : op.kind == SpanKind::kReduceScatter ? RingKind::kReduceScatter
                                                                : RingKind::kAllgather;
    const void* input = kind == RingKind::kAllreduce ? op.output : op.input;
    const std::size_t total = kind == RingKind::kAllgather       ? op.output_count
                              : kind == RingKind::kReduceScatter ? op.input_count
                                                                 : op.output_count;
    st.ring = std::make_unique<RingCollective>(m_.ring_comm, kind, op.type, input, op.output, total,
                                               kRingSegmentElems, ring_scratch_);
    st.ring_waiting = false;
    op.start_ns = now_ns();
    ring_busy_ = true;
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

  // Tasks: blocking steps of the backend itself, on m_.task_comm, bounded by the timeout.
  void wait_request(MPI_Request& request, const char* what) {
    wait_request(request, what, timeout());
  }
  void wait_request(MPI_Request& request, const char* what, std::chrono::nanoseconds limit) {
    const std::int64_t deadline = now_ns() + limit.count();
    int idle_polls = 0;
    for (;;) {
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (now_ns() > deadline) {
        throw TimeoutError("rank " + std::to_string(rank()) + ": " + what + " not complete after " +
                           format_duration_ns(static_cast<double>(limit.count())));
      }
      back_off(++idle_polls);
    }
  }

  // Note [clock alignment]: rank 0 ping-pongs with each rank in turn. A round sends rank
  // 0's time t0, the peer answers with its own time tp, rank 0 reads t1; if the two
  // legs take equally long, tp was read at rank 0's (t0 + t1) / 2, so the offset is
  // tp - (t0 + t1) / 2, wrong by at most (t1 - t0) / 2. The round with the shortest
  // round trip is kept and its half round trip reported as the uncertainty.
  // The first alignment is where the processes of a job meet, each arriving when its own
  // start-up is done: a launcher starts them with some skew, and a loaded host delays
  // some more, so its waits are bounded by max(--timeout, 30 s); later ones by --timeout.
  std::vector<ClockOffset> ping_pong(int rounds) {
    const std::chrono::nanoseconds limit =
        aligned_once_ ? timeout() : std::max<std::chrono::nanoseconds>(timeout(), kMeetingWait);
    aligned_once_ = true;
    std::vector<ClockOffset> offsets;
    std::int64_t message[2] = {0, 0};
    MPI_Request request;
    if (rank() != 0) {
      for (int round = 0; round < rounds; ++round) {
        check_mpi(MPI_Irecv(message, 1, MPI_INT64_T, 0, 0, m_.task_comm, &request),
                  "clock MPI_Irecv");
        wait_request(request, "clock ping from rank 0", limit);
        message[0] = now_ns();
        check_mpi(MPI_Isend(message, 1, MPI_INT64_T, 0, 1, m_.task_comm, &request),
                  "clock MPI_Isend");
        wait_request(request, "clock pong to rank 0", limit);
      }
      return offsets;
    }
    offsets.resize(static_cast<std::size_t>(size()));
    offsets[0].at_ns = now_ns();
    for (int peer = 1; peer < size(); ++peer) {
      std::int64_t best_rtt = INT64_MAX;
      ClockOffset& best = offsets[static_cast<std::size_t>(peer)];
      for (int round = 0; round < rounds; ++round) {
        std::int64_t reply = 0;
        message[0] = now_ns();
        const std::int64_t t0 = message[0];
        check_mpi(MPI_Isend(message, 1, MPI_INT64_T, peer, 0, m_.task_comm, &request),
                  "clock MPI_Isend");
        wait_request(request, "clock ping", limit);
        check_mpi(MPI_Irecv(&reply, 1, MPI_INT64_T, peer, 1, m_.task_comm, &request),
                  "clock MPI_Irecv");
        wait_request(request, "clock pong", limit);
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

  // Communication thread: the MPI side of a split (Note [mpi split]).
  MpiState split_state(int color, int key) {
    MPI_Request request;
    check_mpi(MPI_Ibarrier(m_.task_comm, &request), "MPI_Ibarrier (split)");
    wait_request(request, "split: every rank's arrival");
    MpiState s;
    s.thread_level = m_.thread_level;
    s.tag_ub = m_.tag_ub;
    s.host_name = m_.host_name;
    s.library = m_.library;
    try {
      check_mpi(MPI_Comm_split(m_.comm, color, key, &s.comm), "MPI_Comm_split");
      check_mpi(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      check_mpi(MPI_Comm_dup(s.comm, &s.task_comm), "MPI_Comm_dup (split tasks)");
      check_mpi(MPI_Comm_dup(s.comm, &s.ring_comm), "MPI_Comm_dup (split rings)");
      for (MPI_Comm c : {s.task_comm, s.ring_comm}) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
      MPI_Comm_rank(s.comm, &s.rank);
      MPI_Comm_size(s.comm, &s.size);
      find_placement(s.task_comm, s);
    } catch (...) {
      for (MPI_Comm* c : {&s.ring_comm, &s.task_comm, &s.comm}) {
        if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
      }
      throw;
    }
    return s;
  }

  std::vector<std::string> gather(std::string_view mine, int root) {
    if (mine.size() > static_cast<std::size_t>(INT_MAX)) {
      throw RuntimeError("gather of more than 2 GiB from one rank");
    }
    int my_size = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<std::size_t>(size()));
    MPI_Request request;
    check_mpi(
        MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, m_.task_comm, &request),
        "MPI_Igather");
    wait_request(request, "gather of sizes");
    std::vector<int> displs(static_cast<std::size_t>(size()));
    std::vector<char> buffer;
    if (rank() == root) {
      long long total = 0;
      for (int r = 0; r < size(); ++r) {
        displs[static_cast<std::size_t>(r)] = static_cast<int>(total);
        total += sizes[static_cast<std::size_t>(r)];
        if (total > INT_MAX) throw RuntimeError("gather of more than 2 GiB in all");
      }
      buffer.resize(static_cast<std::size_t>(total));
    }
    check_mpi(MPI_Igatherv(mine.data(), my_size, MPI_BYTE, buffer.data(), sizes.data(),
                           displs.data(), MPI_BYTE, root, m_.task_comm, &request),
              "MPI_Igatherv");
    wait_request(request, "gather of bytes");
    std::vector<std::string> all;
    if (rank() == root) {
      for (int r = 0; r < size(); ++r) {
        const auto begin = static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]);
        all.emplace_back(buffer.data() + begin,
                         static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
      }
    }
    return all;
  }

  std::string broadcast_string(std::string_view mine, int root) {
    if (mine.size() > static_cast<std::size_t>(INT_MAX)) {
      throw RuntimeError("broadcast of more than 2 GiB");
    }
    int length = static_cast<int>(mine.size());
    MPI_Request request;
    check_mpi(MPI_Ibcast(&length, 1, MPI_INT, root, m_.task_comm, &request), "MPI_Ibcast");
    wait_request(request, "broadcast of a length");
    std::string out =
        rank() == root ? std::string(mine) : std::string(static_cast<std::size_t>(length), '\0');
    check_mpi(MPI_Ibcast(out.data(), length, MPI_BYTE, root, m_.task_comm, &request), "MPI_Ibcast");
    wait_request(request, "broadcast of bytes");
    return out;
  }

  const std::int64_t poll_sleep_ns_;
  const Algorithm algorithm_;
  MpiState m_;
  std::atomic<int> abort_code_{-1};
  std::atomic<bool> end_job_if_busy_{false};

  // Communication thread only.
  bool ring_busy_ = false;
  bool aligned_once_ = false;  // the first clock alignment (the job's meeting) is done
  std::vector<float> ring_scratch_;
};

// Constructing thread, before the communication thread exists.
MpiState init_mpi() {
  MpiState m;
  if (g_mpi_used.exchange(true)) {
    throw RuntimeError("mpi backend: MPI can be initialized once per process, and it was");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&m.thread_level);
  } else {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &m.thread_level),
              "MPI_Init_thread");
    m.owns_mpi = true;
  }
  if (m.thread_level < MPI_THREAD_SERIALIZED) {
    const std::string level = thread_level_name(m.thread_level);
    if (m.owns_mpi) MPI_Finalize();
    throw RuntimeError(
        "mpi backend: the MPI library provides only " + level +
        "; tandem's communication thread needs MPI_THREAD_SERIALIZED or better (ask your "
        "MPI for thread support, e.g. Open MPI built with --enable-mpi-thread-multiple)");
  }
  // Private communicators: user operations, backend tasks and ring messages never
  // match each other. Errors come back as codes and become failed Works.
  MPI_Comm_dup(MPI_COMM_WORLD, &m.comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &m.task_comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &m.ring_comm);
  for (MPI_Comm c : {m.comm, m.task_comm, m.ring_comm})
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  MPI_Comm_rank(m.comm, &m.rank);
  MPI_Comm_size(m.comm, &m.size);
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
  if (found && tag_ub != nullptr) m.tag_ub = *tag_ub;

  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  m.host_name.assign(name, static_cast<std::size_t>(length));
  find_placement(MPI_COMM_WORLD, m);

  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Get_library_version(version, &length);
  m.library.assign(version, static_cast<std::size_t>(length));
  m.library = m.library.substr(0, m.library.find_first_of(",\n"));
  return m;
}

// The hosts of `comm`'s ranks and this rank's place among its host's (blocking: every
// rank of `comm` calls it).
void find_placement(MPI_Comm comm, MpiState& m) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm host_comm;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host_comm);
  MPI_Comm_size(host_comm, &m.ranks_on_host);
  MPI_Comm_rank(host_comm, &m.local_rank);
  MPI_Comm_free(&host_comm);
  int leader = m.local_rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &m.hosts, 1, MPI_INT, MPI_SUM, comm);
}

}  // namespace

std::unique_ptr<ProcessCommunicator> make_mpi_communicator(const BackendOptions& options) {
  Algorithm algorithm = Algorithm::kAuto;
  if (options.mpi.allreduce_algorithm == "ring") {
    algorithm = Algorithm::kRing;
  } else if (options.mpi.allreduce_algorithm == "native") {
    algorithm = Algorithm::kNative;
  } else if (!options.mpi.allreduce_algorithm.empty() && options.mpi.allreduce_algorithm != "auto") {
    throw UsageError("--mpi-allreduce: unknown algorithm '" + options.mpi.allreduce_algorithm +
                     "' (expected auto, native or ring)");
  }
  if (options.timeout.count() <= 0) throw UsageError("--timeout must be > 0");
  return std::make_unique<MpiCommunicator>(options, algorithm, init_mpi());
}

}  // namespace tandem
