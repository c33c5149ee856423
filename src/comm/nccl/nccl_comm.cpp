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

#include "comm/device/device_progress.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"

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

ncclDataType_t nccl_type(DeviceDtype dtype) {
  switch (dtype) {
    case DeviceDtype::kFloat32:
      return ncclFloat32;
    case DeviceDtype::kFloat16:
      return ncclFloat16;
    case DeviceDtype::kBfloat16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclConfig_t make_config(const DeviceCommOptions& options) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a timeout can abort (nccl_comm.h)
  if (options.nccl_min_ctas > 0) config.minCTAs = options.nccl_min_ctas;
  if (options.nccl_max_ctas > 0) config.maxCTAs = options.nccl_max_ctas;
  return config;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z since 2.9.
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // Takes ownership of `comm`, initialized (ready) for `rank` of `size` on `device`.
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device,
                   const DeviceCommOptions& options)
      : comm_(comm), rank_(rank), size_(size), device_(device), options_(options) {
    try {
      check_cuda_status(cudaSetDevice(device_), "cudaSetDevice");
      check_cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                        "cudaStreamCreateWithFlags (nccl stream)");
      progress_ = std::make_unique<DeviceProgress>(DeviceProgressOptions{
          .rank = rank_,
          .device = device_,
          .backend = "nccl",
          .timeout = options.timeout,
          .health = [this] { return async_error(); },
          .on_timeout = [this] { abort(); },
      });
    } catch (...) {
      if (stream_ != nullptr) cudaStreamDestroy(stream_);
      ncclCommAbort(comm_);
      throw;
    }
  }

  ~NcclCommunicator() override {
    // A clean shutdown; if a peer is gone, finalize cannot finish: abort instead.
    try {
      begin_shutdown();
      std::lock_guard lock(comm_mutex_);
      if (!aborted_.load()) {
        wait_until_ready(comm_, "ncclCommFinalize", options_.timeout);
        ncclCommDestroy(comm_);
        aborted_ = true;  // comm_ is gone
      }
    } catch (const std::exception&) {
      abort();
    }
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  // Finalize completes only once every rank of the node has called it; with non-blocking
  // communicators the call returns at once, so one thread owning several ranks calls this
  // on all of them before destroying any (destroy_device_communicators).
  void begin_shutdown() override {
    if (finalizing_) return;
    finalizing_ = true;
    progress_.reset();  // everything issued has completed, failed or timed out
    cudaSetDevice(device_);
    std::lock_guard lock(comm_mutex_);
    if (!aborted_.load()) check_nccl(ncclCommFinalize(comm_), "ncclCommFinalize", comm_);
  }

  // Ends the communicator now (a timeout, or a rank that failed): pending kernels end and
  // the peers' collectives fail instead of waiting for this rank.
  void abort() override {
    std::lock_guard lock(comm_mutex_);
    if (aborted_.exchange(true)) return;
    ncclCommAbort(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return device_; }
  std::string_view backend_name() const override { return "nccl"; }
  bool emulated() const override { return false; }
  std::string describe() const override {
    auto limit = [](int v) { return v > 0 ? std::to_string(v) : std::string("default"); };
    return nccl_version() + ", " + std::to_string(size_) +
           " ranks (one GPU each; this rank on "
           "device " +
           std::to_string(device_) + "), CTAs min " + limit(options_.nccl_min_ctas) + " max " +
           limit(options_.nccl_max_ctas) + ", non-blocking communicator";
  }
  cudaStream_t stream() const override { return stream_; }

  DeviceWorkPtr allreduce(void* data, std::size_t count, DeviceDtype dtype, ReduceOp op,
                          cudaEvent_t ready, OpInfo info) override {
    if (const std::string broken = progress_->broken(); !broken.empty()) {
      throw RuntimeError("nccl communicator of rank " + std::to_string(rank_) +
                         " is unusable after an earlier failure: " + broken);
    }
    info.kind = SpanKind::kAllreduce;
    info.bytes = static_cast<std::int64_t>(count * element_size(dtype));
    check_cuda_status(cudaSetDevice(device_), "cudaSetDevice");
    auto work = std::make_shared<CudaDeviceWork>(info);
    if (ready != nullptr) {
      check_cuda_status(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent (ready)");
    }
    check_cuda_status(cudaEventRecord(work->start_event(), stream_),
                      "cudaEventRecord (allreduce start)");
    {
      std::lock_guard lock(comm_mutex_);
      throw_if_aborted();  // abort() frees comm_ between the check above and here
      check_nccl(ncclAllReduce(data, data, count, nccl_type(dtype),
                               op == ReduceOp::kAverage ? ncclAvg : ncclSum, comm_, stream_),
                 "ncclAllReduce of " + info.describe() + " on rank " + std::to_string(rank_),
                 comm_);
    }
    if (group_depth_ > 0) {
      // Launched at ncclGroupEnd: the done event goes after it (group_end()).
      grouped_.push_back(std::move(work));
      return grouped_.back();
    }
    finish_launch("ncclAllReduce of " + info.describe());
    enqueue_done(work);
    return work;
  }

  void group_start() override {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    ++group_depth_;
  }

  void group_end() override {
    if (group_depth_ == 0) throw RuntimeError("nccl: group_end() without group_start()");
    {
      std::lock_guard lock(comm_mutex_);
      throw_if_aborted();
      check_nccl(ncclGroupEnd(), "ncclGroupEnd on rank " + std::to_string(rank_), comm_);
    }
    if (--group_depth_ > 0) return;
    std::vector<CudaDeviceWorkPtr> works;
    works.swap(grouped_);
    if (works.empty()) return;
    finish_launch("ncclGroupEnd of " + std::to_string(works.size()) + " collectives");
    for (auto& work : works) enqueue_done(work);
  }

 private:
  // A non-blocking communicator may still be enqueuing the kernel when the call returns
  // ncclInProgress; the done event must follow the kernel on the stream.
  void finish_launch(const std::string& what) {
    std::lock_guard lock(comm_mutex_);
    throw_if_aborted();
    wait_until_ready(comm_, what + " on rank " + std::to_string(rank_), options_.timeout);
  }

  void enqueue_done(const CudaDeviceWorkPtr& work) {
    check_cuda_status(cudaEventRecord(work->done_event(), stream_),
                      "cudaEventRecord (allreduce done)");
    progress_->watch(work, recorder());
  }

  // Progress thread: "" while healthy.
  std::string async_error() {
    if (aborted_.load()) return "the communicator was aborted";
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) return "ncclCommGetAsyncError: " + nccl_text(result, comm_);
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return "NCCL asynchronous error: " + nccl_text(state, comm_);
  }

  // With comm_mutex_ held.
  void throw_if_aborted() const {
    if (aborted_.load()) {
      throw RuntimeError("nccl communicator of rank " + std::to_string(rank_) + " was aborted");
    }
  }

  ncclComm_t comm_;
  const int rank_;
  const int size_;
  const int device_;
  const DeviceCommOptions options_;
  cudaStream_t stream_ = nullptr;
  std::mutex comm_mutex_;             // NCCL calls on comm_ from the issuing and progress threads
  std::atomic<bool> aborted_{false};  // comm_ aborted or destroyed: never call NCCL on it
  bool finalizing_ = false;           // owner thread only
  int group_depth_ = 0;               // issuing thread only
  std::vector<CudaDeviceWorkPtr> grouped_;  // issued inside the open group
  std::unique_ptr<DeviceProgress> progress_;
};

}  // namespace

std::vector<std::unique_ptr<DeviceCommunicator>> make_nccl_local(const DeviceCommOptions& options,
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
  std::vector<std::unique_ptr<DeviceCommunicator>> out;
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
      for (auto& made : out) made->abort();  // finalize would wait for the missing rank
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
std::unique_ptr<DeviceCommunicator> make_nccl_process(const DeviceCommOptions& options,
                                                      Communicator& host, int device) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (host.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<float> wire(sizeof id.internal);
  for (std::size_t i = 0; i < wire.size(); ++i) {
    wire[i] = static_cast<float>(static_cast<unsigned char>(id.internal[i]));
  }
  host.broadcast(std::span<float>(wire), 0, {.kind = SpanKind::kBroadcast})->wait();
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
