// Device communicators on a real GPU: the emulated ring against a CPU reference, NCCL with
// one rank, spans, and the timeout policy. Every test skips (with the reason) where there
// is no CUDA device.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/device/device_backends.h"
#include "core/error.h"
#include "gpu/gpu_support.h"

namespace tandem {
namespace {

void check(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

// Device memory for the duration of a test.
struct DeviceArray {
  explicit DeviceArray(std::size_t bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(ptr); }
  void* ptr = nullptr;
};

// Integer-valued data: every partial sum the ring forms is exact in fp32 and bf16.
std::vector<float> small_integers(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i % 17) - 8);
  return v;
}

// Runs one emulated all-reduce of `data` and returns the result.
std::vector<float> emulated_allreduce(const std::vector<float>& data, int peers, int blocks,
                                      ReduceOp op, DeviceDtype dtype) {
  auto comms = make_local_device_communicators(
      {.backend = "emulated", .emulated_peers = peers, .emulated_blocks = blocks}, 1);
  DeviceCommunicator& comm = *comms.at(0);
  const std::size_t n = data.size();
  const std::size_t size = element_size(dtype);
  std::vector<unsigned char> host(n * size);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == DeviceDtype::kBfloat16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(data[i]);
      std::memcpy(host.data() + i * size, &b, size);
    } else {
      std::memcpy(host.data() + i * size, &data[i], size);
    }
  }
  DeviceArray buffer(host.size());
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(buffer.ptr, host.data(), host.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  DeviceWorkPtr work = comm.allreduce(buffer.ptr, n, dtype, op, nullptr, {.step = 1, .tag = 2});
  work->wait();
  EXPECT_EQ(cudaStreamSynchronize(comm.stream()), cudaSuccess);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(host.data(), buffer.ptr, host.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == DeviceDtype::kBfloat16) {
      __nv_bfloat16 b;
      std::memcpy(&b, host.data() + i * size, size);
      out[i] = __bfloat162float(b);
    } else {
      std::memcpy(&out[i], host.data() + i * size, size);
    }
  }
  return out;
}

TEST(GpuCommTest, EmulatedRingMatchesCpuReference) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (int peers : {1, 2, 3, 4, 8}) {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{123457}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        for (DeviceDtype dtype : {DeviceDtype::kFloat32, DeviceDtype::kBfloat16}) {
          const std::vector<float> data = small_integers(n);
          const std::vector<float> got = emulated_allreduce(data, peers, n % 2 ? 1 : 0, op, dtype);
          // Reference: peers ranks holding the same data.
          std::size_t wrong = 0;
          double worst = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const double want =
                op == ReduceOp::kSum ? static_cast<double>(data[i]) * peers : data[i];
            const double diff = std::abs(got[i] - want);
            worst = std::max(worst, diff);
            if (diff > 1e-5 * std::max(1.0, std::abs(want))) ++wrong;
          }
          EXPECT_EQ(wrong, 0u) << "peers " << peers << ", n " << n << ", "
                               << (op == ReduceOp::kSum ? "sum" : "average") << ", dtype "
                               << static_cast<int>(dtype) << ": largest difference " << worst;
        }
      }
    }
  }
}

TEST(GpuCommTest, EmulatedRingSaysSoAndRecordsSpans) {
  TANDEM_SKIP_WITHOUT_GPU();
  auto comms = make_local_device_communicators({.emulated_peers = 4}, 1);  // auto, 1 rank
  DeviceCommunicator& comm = *comms.at(0);
  EXPECT_TRUE(comm.emulated());
  EXPECT_EQ(comm.backend_name(), "emulated");
  EXPECT_NE(comm.describe().find("emulated"), std::string::npos) << comm.describe();
  EXPECT_EQ(comm.size(), 1);

  RankRecorder recorder(0, 16);
  comm.set_recorder(&recorder);
  const std::size_t n = 1 << 20;
  DeviceArray buffer(n * 4);
  check(cudaMemset(buffer.ptr, 0, n * 4), "cudaMemset");
  DeviceWorkPtr work = comm.allreduce(buffer.ptr, n, DeviceDtype::kFloat32, ReduceOp::kAverage,
                                      nullptr, {.step = 5, .tag = 3});
  work->wait();
  EXPECT_EQ(work->info().bytes, static_cast<std::int64_t>(n * 4));
  const auto spans = recorder.collect();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].lane, Lane::kComm);
  EXPECT_EQ(spans[0].kind, SpanKind::kAllreduce);
  EXPECT_EQ(spans[0].bytes, static_cast<std::int64_t>(n * 4));
  EXPECT_EQ(spans[0].step, 5);
  EXPECT_EQ(spans[0].tag, 3);
  EXPECT_LT(spans[0].start_ns, spans[0].end_ns);
  EXPECT_EQ(work->start_ns(), spans[0].start_ns);
}

TEST(NcclCommTest, OneRankAllreduce) {
  TANDEM_SKIP_WITHOUT_GPU();
  std::vector<std::unique_ptr<DeviceCommunicator>> comms;
  try {
    comms = make_local_device_communicators({.backend = "nccl"}, 1);
  } catch (const UsageError& e) {
    GTEST_SKIP() << "no nccl backend in this build: " << e.what();
  }
  DeviceCommunicator& comm = *comms.at(0);
  EXPECT_FALSE(comm.emulated());
  EXPECT_EQ(comm.backend_name(), "nccl");
  EXPECT_NE(comm.describe().find("NCCL"), std::string::npos) << comm.describe();
  RankRecorder recorder(0, 16);
  comm.set_recorder(&recorder);
  const std::vector<float> data = small_integers(4097);
  DeviceArray buffer(data.size() * 4);
  check(cudaMemcpy(buffer.ptr, data.data(), data.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  cudaStream_t producer;
  check(cudaStreamCreate(&producer), "cudaStreamCreate");
  cudaEvent_t ready;
  check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(ready, producer), "cudaEventRecord");
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    DeviceWorkPtr work = comm.allreduce(buffer.ptr, data.size(), DeviceDtype::kFloat32, op, ready,
                                        {.step = 0, .tag = 1});
    work->wait();
  }
  // Grouped: both launch at group_end.
  comm.group_start();
  DeviceWorkPtr a = comm.allreduce(buffer.ptr, 100, DeviceDtype::kFloat32, ReduceOp::kSum, nullptr);
  DeviceWorkPtr b = comm.allreduce(static_cast<float*>(buffer.ptr) + 100, 100,
                                   DeviceDtype::kFloat32, ReduceOp::kSum, nullptr);
  comm.group_end();
  a->wait();
  b->wait();
  std::vector<float> got(data.size());
  check(cudaMemcpy(got.data(), buffer.ptr, got.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  EXPECT_EQ(got, data);  // one rank: sum and average are the identity
  EXPECT_EQ(recorder.collect().size(), 4u);
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
}

TEST(NcclCommTest, TwoRanksInOneProcessSumAndAverage) {
  TANDEM_SKIP_WITHOUT_GPU();
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, " << devices << " visible";
  std::vector<std::unique_ptr<DeviceCommunicator>> comms;
  try {
    comms = make_local_device_communicators({.backend = "nccl"}, 2);
  } catch (const UsageError& e) {
    GTEST_SKIP() << "no nccl backend in this build: " << e.what();
  }
  ASSERT_EQ(comms.size(), 2u);
  const std::size_t n = 100003;
  std::vector<std::vector<float>> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      DeviceCommunicator& comm = *comms[static_cast<std::size_t>(r)];
      ASSERT_EQ(cudaSetDevice(comm.device()), cudaSuccess);
      EXPECT_EQ(comm.rank(), r);
      EXPECT_EQ(comm.size(), 2);
      std::vector<float> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>((i % 7) + 10 * r);
      DeviceArray buffer(n * 4);
      ASSERT_EQ(cudaMemcpy(buffer.ptr, data.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
      comm.allreduce(buffer.ptr, n, DeviceDtype::kFloat32, ReduceOp::kSum, nullptr)->wait();
      comm.allreduce(buffer.ptr, n, DeviceDtype::kFloat32, ReduceOp::kAverage, nullptr)->wait();
      ASSERT_EQ(cudaStreamSynchronize(comm.stream()), cudaSuccess);
      results[static_cast<std::size_t>(r)].resize(n);
      ASSERT_EQ(cudaMemcpy(results[static_cast<std::size_t>(r)].data(), buffer.ptr, n * 4,
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < n; ++i) {
    const float sum = static_cast<float>(2 * (i % 7) + 10);  // rank 0 + rank 1
    ASSERT_EQ(results[0][i], sum) << i;                      // the average of two equal sums
    ASSERT_EQ(results[1][i], sum) << i;
  }
}

// Holds a stream at a host function until released (or 10 s, so a failing test cannot
// hang): whatever is enqueued behind it waits.
struct StreamBlocker {
  std::atomic<bool> released{false};
  static void CUDART_CB hold(void* self) {
    auto* b = static_cast<StreamBlocker*>(self);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!b->released.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

void expect_timeout(const std::string& backend) {
  std::vector<std::unique_ptr<DeviceCommunicator>> comms;
  try {
    comms = make_local_device_communicators(
        {.backend = backend, .emulated_peers = 2, .timeout = std::chrono::seconds(1)}, 1);
  } catch (const UsageError& e) {
    GTEST_SKIP() << backend << " not available: " << e.what();
  }
  DeviceCommunicator& comm = *comms.at(0);
  cudaStream_t producer;
  check(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t ready;
  check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  StreamBlocker blocker;
  check(cudaLaunchHostFunc(producer, StreamBlocker::hold, &blocker), "cudaLaunchHostFunc");
  check(cudaEventRecord(ready, producer), "cudaEventRecord");
  const std::size_t n = 3 << 18;  // 3 MiB of fp32
  DeviceArray buffer(n * 4);
  DeviceWorkPtr work = comm.allreduce(buffer.ptr, n, DeviceDtype::kFloat32, ReduceOp::kSum, ready,
                                      {.step = 7, .tag = 3});
  std::string message;
  try {
    work->wait();
  } catch (const TimeoutError& e) {
    message = e.what();
  }
  blocker.released = true;
  EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
  EXPECT_NE(message.find("allreduce bucket 3"), std::string::npos) << message;
  EXPECT_NE(message.find("3.0 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("step 7"), std::string::npos) << message;
  EXPECT_NE(message.find("not complete after"), std::string::npos) << message;
  // The communicator is unusable now, and says why.
  EXPECT_THROW(comm.allreduce(buffer.ptr, n, DeviceDtype::kFloat32, ReduceOp::kSum, nullptr),
               RuntimeError);
  cudaStreamSynchronize(producer);
  comms.clear();
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
}

TEST(GpuCommTest, EmulatedTimeoutNamesTheCollective) {
  TANDEM_SKIP_WITHOUT_GPU();
  expect_timeout("emulated");
}

TEST(NcclCommTest, TimeoutAbortsAndNamesTheCollective) {
  TANDEM_SKIP_WITHOUT_GPU();
  expect_timeout("nccl");
}

TEST(GpuCommTest, BadOptionsAreUsageErrors) {
  TANDEM_SKIP_WITHOUT_GPU();
  EXPECT_THROW(make_local_device_communicators({.backend = "emulated"}, 2), UsageError);
  EXPECT_THROW(make_local_device_communicators({.backend = "carrier-pigeon"}, 1), UsageError);
  EXPECT_THROW(make_local_device_communicators({.backend = "emulated", .emulated_peers = 0}, 1),
               UsageError);
  EXPECT_THROW(make_local_device_communicators({.backend = "nccl"}, 4096), UsageError);
}

}  // namespace
}  // namespace tandem
