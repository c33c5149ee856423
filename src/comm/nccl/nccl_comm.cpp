// The nccl device communicator (nccl_comm.h).
#include "comm/nccl/nccl_comm.h"

#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/device/device_communicator.h"
#include "comm/device/device_select.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"
#include "cuda/check.h"

namespace tandem {

namespace {

std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && last[0] != '\0') text += std::string(" (") + last + ")";
  }
  return text;
}

// Non-blocking communicators answer ncclInProgress while they work in the background;
// everything else but success is an error naming the call.
void check_nccl(ncclResult_t result, const std::string& call, ncclComm_t comm = nullptr) {
  if (result != ncclSuccess && result != ncclInProgress) {
    throw RuntimeError(call + " failed: " + nccl_text(result, comm));
  }
}

// Polls a non-blocking communicator until what it started (init, a launch, finalize) is
// done; TimeoutError after `timeout`.
void wait_until_ready(ncclComm_t comm, const std::string& what, std::chrono::nanoseconds timeout) {
  const std::int64_t deadline = now_ns() + timeout.count();
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError (" + what + ")", comm);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) throw RuntimeError(what + " failed: " + nccl_text(state, comm));
    if (now_ns() > deadline) {
      throw TimeoutError(what + " not complete after " +
                         format_duration_ns(static_cast<double>(timeout.count())));
    }
    if (polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

ncclConfig_t make_config(const BackendOptions& options) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a timeout can abort (nccl_comm.h)
  if (options.device.nccl_min_ctas > 0) config.minCTAs = options.device.nccl_min_ctas;
  if (options.device.nccl_max_ctas > 0) config.maxCTAs = options.device.nccl_max_ctas;
  return config;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z since 2.9.
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kAverage ? ncclAvg : ncclSum; }

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // Takes ownership of `comm`, initialized (ready) for `rank` of `size` on `device`.
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device, const BackendOptions& options)
      : DeviceCommunicator({.rank = rank, .size = size, .timeout = options.timeout}, device),
        comm_(comm),
        options_(options) {
    try {
      TANDEM_CUDA_CHECK(cudaMalloc(&barrier_scratch_, sizeof(float)));
      TANDEM_CUDA_CHECK(cudaMemset(barrier_scratch_, 0, sizeof(float)));
    } catch (...) {
      ncclCommAbort(comm_);
      throw;
    }
    start_thread();
  }

  ~NcclCommunicator() override {
    // A clean shutdown; if a peer is gone, finalize cannot finish: abort instead.
    try {
      begin_shutdown();
      std::lock_guard lock(comm_mutex_);
      if (!aborted_.load()) {
        wait_until_ready(comm_, "ncclCommFinalize", timeout());
        ncclCommDestroy(comm_);
        aborted_ = true;  // comm_ is gone
      }
    } catch (const std::exception&) {
      end_now();
    }
    cudaSetDevice(device());
    cudaStreamSynchronize(stream());
    cudaFree(barrier_scratch_);
  }

  // Finalize completes only once every rank of the node has called it; with non-blocking
  // communicators the call returns at once, so one thread owning several ranks calls this
  // on all of them before destroying any (the launcher does).
  void begin_shutdown() override {
    if (finalizing_) return;
    finalizing_ = true;
    stop_thread();  // everything issued has completed, failed or timed out
    cudaSetDevice(device());
    std::lock_guard lock(comm_mutex_);
    if (!aborted_.load()) check_nccl(ncclCommFinalize(comm_), "ncclCommFinalize", comm_);
  }

  std::string_view backend_name() const override { return "nccl"; }
  std::string describe() const override {
    auto limit = [](int v) { return v > 0 ? std::to_string(v) : std::string("default"); };
    return nccl_version() + ", " + std::to_string(size()) +
           " ranks (one GPU each; this rank on device " + std::to_string(device()) +
           "), CTAs min " + limit(options_.device.nccl_min_ctas) + " max " +
           limit(options_.device.nccl_max_ctas) +
           ", non-blocking communicator; point to point matches in issue order (tags unused)";
  }

 protected:
  void enqueue(std::span<Op* const> ops) override {
    std::lock_guard lock(comm_mutex_);
    throw_if_aborted();
    // Point to point with itself never reaches NCCL, which wants both halves in one group.
    std::vector<Op*> group;
    for (Op* op : ops) {
      if (!enqueue_self_p2p(*op)) group.push_back(op);
    }
    if (group.empty()) return;
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    std::string what;
    for (Op* op : group) {
      what = op->work->info().describe() + " on rank " + std::to_string(rank());
      const ncclResult_t result = launch(*op);
      if (result != ncclSuccess && result != ncclInProgress) {
        ncclGroupEnd();
        check_nccl(result, "NCCL call for " + what, comm_);
      }
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd for " + what, comm_);
    // A non-blocking communicator may still be enqueuing the kernels when the call returns
    // ncclInProgress; the done events must follow them on the stream.
    wait_until_ready(comm_, what, timeout());
  }

  std::string health() override {
    if (aborted_.load()) return "the nccl communicator was aborted";
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) return "ncclCommGetAsyncError: " + nccl_text(result, comm_);
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return "NCCL asynchronous error: " + nccl_text(state, comm_);
  }

  // Note [nccl split]: ncclCommSplit (NCCL 2.18 and later) of this communicator, with
  // this one's config (non-blocking, CTA limits); like init, the non-blocking split is
  // done once both communicators stop answering ncclInProgress. Not yet run on GPUs.
  std::unique_ptr<ProgressCommunicator> make_split(int color, int key) override {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    const CurrentDeviceRestorer restore;
    check_cuda_status(cudaSetDevice(device()), "cudaSetDevice (split)");
    ncclConfig_t config = make_config(options_);
    ncclComm_t child = nullptr;
    const std::string what = "ncclCommSplit (rank " + std::to_string(rank()) + ", color " +
                             std::to_string(color) + ", key " + std::to_string(key) + ")";
    {
      std::lock_guard lock(comm_mutex_);
      throw_if_aborted();
      const ncclResult_t result = ncclCommSplit(comm_, color, key, &child, &config);
      if (result != ncclSuccess && result != ncclInProgress) {
        if (child != nullptr) ncclCommAbort(child);
        check_nccl(result, what, comm_);
      }
      wait_until_ready(comm_, what, timeout());
    }
    int child_rank = 0;
    int child_size = 0;
    try {
      wait_until_ready(child, what, timeout());
      check_nccl(ncclCommUserRank(child, &child_rank), "ncclCommUserRank", child);
      check_nccl(ncclCommCount(child, &child_size), "ncclCommCount", child);
    } catch (...) {
      ncclCommAbort(child);
      throw;
    }
    return std::make_unique<NcclCommunicator>(child, child_rank, child_size, device(), options_);
#else
    (void)color;
    (void)key;
    throw RuntimeError(
        "nccl backend: split() needs ncclCommSplit, NCCL 2.18 or later; built with " +
        nccl_version());
#endif
  }

  // ncclCommAbort ends the communicator's kernels: the buffers are free afterwards, and the
  // peers' collectives fail instead of waiting for this rank.
  void on_timeout() override { end_now(); }
  bool can_cancel() const override { return true; }
  void on_abort(const std::string& reason) override {
    (void)reason;
    end_now();
  }

 private:
  static ncclDataType_t nccl_type(DataType type) {
    switch (type) {
      case DataType::kFloat16:
        return ncclFloat16;
      case DataType::kBFloat16:
        return ncclBfloat16;
      case DataType::kFloat32:
        break;
    }
    return ncclFloat32;
  }

  ncclResult_t launch(Op& op) {
    const cudaStream_t s = stream();
    switch (op.kind) {
      case SpanKind::kAllreduce:
        return ncclAllReduce(op.output, op.output, op.output_count, nccl_type(op.type),
                             nccl_op(op.reduce), comm_, s);
      case SpanKind::kReduceScatter:
        return ncclReduceScatter(op.input, op.output, op.output_count, nccl_type(op.type),
                                 nccl_op(op.reduce), comm_, s);
      case SpanKind::kAllgather:
        return ncclAllGather(op.input, op.output, op.input_count, ncclFloat32, comm_, s);
      case SpanKind::kBroadcast:
        return ncclBroadcast(op.output, op.output, op.output_count, ncclFloat32, op.peer, comm_,
                             s);
      case SpanKind::kBarrier:
        // Every rank takes part in a one-element all-reduce: none passes before all came.
        return ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_,
                             s);
      case SpanKind::kSend:
        return ncclSend(op.input, op.input_count, ncclFloat32, op.peer, comm_, s);
      case SpanKind::kRecv:
        return ncclRecv(op.output, op.output_count, ncclFloat32, op.peer, comm_, s);
      default:
        return ncclInvalidArgument;
    }
  }

  // Ends the communicator now (a timeout, or a rank that failed); idempotent.
  void end_now() {
    std::lock_guard lock(comm_mutex_);
    if (aborted_.exchange(true)) return;
    ncclCommAbort(comm_);
  }

  // With comm_mutex_ held.
  void throw_if_aborted() const {
    if (aborted_.load()) {
      throw RuntimeError("nccl communicator of rank " + std::to_string(rank()) + " was aborted");
    }
  }

  ncclComm_t comm_;
  const BackendOptions options_;
  float* barrier_scratch_ = nullptr;
  std::mutex comm_mutex_;             // NCCL calls on comm_ from the issuing and other threads
  std::atomic<bool> aborted_{false};  // comm_ aborted or destroyed: never call NCCL on it
  bool finalizing_ = false;           // owner thread only
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_local(const BackendOptions& options,
                                                           int ranks) {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(ranks), nullptr);
  std::vector<ncclConfig_t> configs(static_cast<std::size_t>(ranks), make_config(options));
  auto abort_all = [&] {
    for (ncclComm_t c : comms) {
      if (c != nullptr) ncclCommAbort(c);
    }
  };
  // One thread initializes every rank: inside a group, as NCCL requires.
  check_nccl(ncclGroupStart(), "ncclGroupStart (init)");
  for (int r = 0; r < ranks; ++r) {
    const auto i = static_cast<std::size_t>(r);
    ncclResult_t result = ncclSuccess;
    const cudaError_t set = cudaSetDevice(r);
    if (set == cudaSuccess) result = ncclCommInitRankConfig(&comms[i], ranks, id, r, &configs[i]);
    if (set != cudaSuccess || (result != ncclSuccess && result != ncclInProgress)) {
      ncclGroupEnd();
      abort_all();
      if (set != cudaSuccess)
        check_cuda_status(set, ("cudaSetDevice(" + std::to_string(r) + ")").c_str());
      check_nccl(result, "ncclCommInitRankConfig (rank " + std::to_string(r) + " of " +
                             std::to_string(ranks) + ")");
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  std::vector<std::unique_ptr<Communicator>> out;
  try {
    check_nccl(end, "ncclGroupEnd (init of " + std::to_string(ranks) + " ranks)");
    for (int r = 0; r < ranks; ++r) {
      wait_until_ready(comms[static_cast<std::size_t>(r)],
                       "ncclCommInitRankConfig (rank " + std::to_string(r) + ")", options.timeout);
    }
  } catch (...) {
    abort_all();
    throw;
  }
  for (int r = 0; r < ranks; ++r) {
    auto& c = comms[static_cast<std::size_t>(r)];
    try {
      out.push_back(std::make_unique<NcclCommunicator>(c, r, ranks, r, options));
    } catch (...) {
      c = nullptr;                           // the constructor aborted it
      for (auto& made : out) made->abort("rank " + std::to_string(r) + " failed to start");
      out.clear();
      abort_all();
      throw;
    }
    c = nullptr;
  }
  return out;
}

// Note [unique id over the host communicator]: the host contract moves floats only, so
// each byte of the 128-byte ncclUniqueId travels as one float (0..255, exact).
std::unique_ptr<Communicator> make_nccl_process(const BackendOptions& options,
                                                ProcessCommunicator& host, int device) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (host.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<float> wire(sizeof id.internal);
  for (std::size_t i = 0; i < wire.size(); ++i) {
    wire[i] = static_cast<float>(static_cast<unsigned char>(id.internal[i]));
  }
  host.broadcast(std::span<float>(wire), 0, {.kind = SpanKind::kBroadcast})->synchronize();
  for (std::size_t i = 0; i < wire.size(); ++i) {
    id.internal[i] = static_cast<char>(static_cast<unsigned char>(wire[i]));
  }
  check_cuda_status(cudaSetDevice(device),
                    ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
  ncclConfig_t config = make_config(options);
  ncclComm_t comm = nullptr;
  const std::string what = "ncclCommInitRankConfig (rank " + std::to_string(host.rank()) + " of " +
                           std::to_string(host.size()) + ", device " + std::to_string(device) + ")";
  const ncclResult_t init = ncclCommInitRankConfig(&comm, host.size(), id, host.rank(), &config);
  if (init != ncclSuccess && init != ncclInProgress && comm != nullptr) ncclCommAbort(comm);
  check_nccl(init, what);
  try {
    wait_until_ready(comm, what, options.timeout);
  } catch (...) {
    ncclCommAbort(comm);
    throw;
  }
  return std::make_unique<NcclCommunicator>(comm, host.rank(), host.size(), device, options);
}

}  // namespace tandem
