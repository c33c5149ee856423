// Device communicators on a real GPU, through the one Communicator contract: the emulated
// ring against a CPU reference, every operation on device buffers (a world of one for the
// emulated ring, NCCL with one rank and, with two GPUs, two), c10d's wait (the bound stream
// waits, the host does not), spans, and the timeout policy. Every test skips (with the
// reason) where there is no CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/backend_registry.h"
#include "core/error.h"
#include "gpu/gpu_support.h"

namespace tandem {
namespace {

void check(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

// Floats in device memory for the duration of a test.
struct DeviceFloats {
  explicit DeviceFloats(std::size_t n) : count(n) {
    if (n > 0) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(float)), cudaSuccess);
    }
  }
  explicit DeviceFloats(const std::vector<float>& host) : DeviceFloats(host.size()) {
    if (count > 0) {
      EXPECT_EQ(cudaMemcpy(ptr, host.data(), count * 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceFloats() { cudaFree(ptr); }
  std::span<float> span() { return {ptr, count}; }
  std::vector<float> host() const {
    std::vector<float> out(count);
    if (count > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), ptr, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }
  float* ptr = nullptr;
  std::size_t count = 0;
};

// Integer-valued data: every partial sum the ring forms is exact in fp32.
std::vector<float> small_integers(std::size_t n, int offset = 0) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(static_cast<int>((i + static_cast<std::size_t>(offset)) % 17) - 8);
  }
  return v;
}

// The world of a device backend, or a skip naming why it is not here.
std::vector<std::unique_ptr<Communicator>> world(const std::string& name, BackendOptions options) {
  const Backend* backend = find_backend(name);
  if (backend == nullptr || backend->make_world == nullptr) return {};
  return backend->make_world(options);
}

#define TANDEM_WORLD_OR_SKIP(comms, name, ...)              \
  std::vector<std::unique_ptr<Communicator>> comms;         \
  try {                                                     \
    comms = world(name, __VA_ARGS__);                       \
  } catch (const UsageError& e) {                           \
    GTEST_SKIP() << name << " not available: " << e.what(); \
  }                                                         \
  if (comms.empty()) GTEST_SKIP() << name << " is not built into this program"

TEST(GpuCommTest, EmulatedRingMatchesCpuReference) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (int peers : {1, 2, 3, 4, 8}) {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{123457}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        TANDEM_WORLD_OR_SKIP(
            comms, "emulated",
            {.ranks = 1, .device = {.emulated_peers = peers, .emulated_blocks = n % 2 ? 1 : 0}});
        const std::vector<float> data = small_integers(n);
        DeviceFloats buffer(data);
        comms[0]->allreduce(buffer.span(), op, {.step = 1, .tag = 2})->synchronize();
        const std::vector<float> got = buffer.host();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          // Reference: peers ranks holding the same data.
          const double want = op == ReduceOp::kSum ? static_cast<double>(data[i]) * peers : data[i];
          if (std::abs(got[i] - want) > 1e-5 * std::max(1.0, std::abs(want))) ++wrong;
        }
        EXPECT_EQ(wrong, 0u) << "peers " << peers << ", n " << n << ", " << to_string(op);
      }
    }
  }
}

// Every operation of the contract in a world of one, on device buffers.
void expect_world_of_one(Communicator& comm) {
  EXPECT_EQ(comm.memory(), MemoryKind::kDevice);
  const std::vector<float> data = small_integers(1031);
  DeviceFloats input(data), output(data.size());
  comm.reduce_scatter(input.span(), output.span(), ReduceOp::kSum)->synchronize();
  EXPECT_EQ(output.host(), data);
  DeviceFloats gathered(data.size());
  comm.allgather(input.span(), gathered.span())->synchronize();
  EXPECT_EQ(gathered.host(), data);
  comm.broadcast(input.span(), 0)->synchronize();
  EXPECT_EQ(input.host(), data);
  comm.barrier()->synchronize();
  DeviceFloats received(data.size());
  WorkPtr send = comm.send(input.span(), 0, 5);
  WorkPtr recv = comm.recv(received.span(), 0, 5);
  send->synchronize();
  recv->synchronize();
  EXPECT_EQ(received.host(), data);
}

TEST(GpuCommTest, EmulatedRingIsAWorldOfOneForEveryOperation) {
  TANDEM_SKIP_WITHOUT_GPU();
  TANDEM_WORLD_OR_SKIP(comms, "emulated", {.ranks = 1, .device = {.emulated_peers = 4}});
  expect_world_of_one(*comms[0]);
}

TEST(NcclCommTest, OneRankDoesEveryOperation) {
  TANDEM_SKIP_WITHOUT_GPU();
  TANDEM_WORLD_OR_SKIP(comms, "nccl", {.ranks = 1});
  expect_world_of_one(*comms[0]);
  EXPECT_NE(comms[0]->describe().find("NCCL"), std::string::npos) << comms[0]->describe();
}

// Communicator::split of a world of one: a world of one of the same backend, on the
// same device, that does every operation; aborting the parent fails the child's later
// operations at once.
void expect_split_of_one(Communicator& parent) {
  std::unique_ptr<Communicator> child = parent.split(3, 7);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->rank(), 0);
  EXPECT_EQ(child->size(), 1);
  EXPECT_EQ(child->backend_name(), parent.backend_name());
  EXPECT_EQ(child->device(), parent.device());
  EXPECT_EQ(child->emulated(), parent.emulated());
  expect_world_of_one(*child);
  // The parent still works with the child alive.
  DeviceFloats one(small_integers(5));
  parent.barrier()->synchronize();
  parent.abort("the test aborts the parent");
  EXPECT_THROW(child->allreduce(one.span(), ReduceOp::kSum)->synchronize(), AbortedError);
  child->drain();
  child->begin_shutdown();
  child.reset();
}

TEST(GpuCommTest, EmulatedRingSplitIsAWorldOfOne) {
  TANDEM_SKIP_WITHOUT_GPU();
  TANDEM_WORLD_OR_SKIP(comms, "emulated", {.ranks = 1, .device = {.emulated_peers = 4}});
  {
    // The child's all-reduce emulates the same ring: 4 peers holding the same data.
    std::unique_ptr<Communicator> child = comms[0]->split(0, 0);
    const std::vector<float> data = small_integers(1000);
    DeviceFloats buffer(data);
    child->allreduce(buffer.span(), ReduceOp::kSum)->synchronize();
    const std::vector<float> got = buffer.host();
    for (std::size_t i = 0; i < data.size(); ++i) ASSERT_EQ(got[i], data[i] * 4) << i;
  }
  expect_split_of_one(*comms[0]);
}

// Built against NCCL 2.18 or later (ncclCommSplit).
TEST(NcclCommTest, OneRankSplitIsAWorldOfOne) {
  TANDEM_SKIP_WITHOUT_GPU();
  TANDEM_WORLD_OR_SKIP(comms, "nccl", {.ranks = 1});
  expect_split_of_one(*comms[0]);
}

TEST(GpuCommTest, EmulatedRingSaysSoAndRecordsSpans) {
  TANDEM_SKIP_WITHOUT_GPU();
  TANDEM_WORLD_OR_SKIP(comms, "emulated", {.ranks = 1, .device = {.emulated_peers = 4}});
  Communicator& comm = *comms[0];
  EXPECT_TRUE(comm.emulated());
  EXPECT_EQ(comm.backend_name(), "emulated");
  EXPECT_NE(comm.describe().find("emulated"), std::string::npos) << comm.describe();
  EXPECT_EQ(comm.size(), 1);

  RankRecorder recorder(0, 16);
  comm.set_recorder(&recorder);
  DeviceFloats buffer(std::vector<float>(1 << 20, 0.0f));
  WorkPtr work = comm.allreduce(buffer.span(), ReduceOp::kAverage, {.step = 5, .tag = 3});
  work->synchronize();
  EXPECT_EQ(work->info().bytes, static_cast<std::int64_t>(4 << 20));
  const auto spans = recorder.collect();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].lane, Lane::kComm);
  EXPECT_EQ(spans[0].kind, SpanKind::kAllreduce);
  EXPECT_EQ(spans[0].bytes, static_cast<std::int64_t>(4 << 20));
  EXPECT_EQ(spans[0].step, 5);
  EXPECT_EQ(spans[0].tag, 3);
  EXPECT_LT(spans[0].start_ns, spans[0].end_ns);
  EXPECT_EQ(work->start_ns(), spans[0].start_ns);
}

// A producer stream bound to `comm` and held by a host function until release() (or
// 10 s): work ordered after it cannot start.
class HeldStream {
 public:
  explicit HeldStream(Communicator& comm) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    comm.bind_stream(stream_);
    check(cudaLaunchHostFunc(stream_, hold, this), "cudaLaunchHostFunc");
  }
  ~HeldStream() {
    release();
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  HeldStream(const HeldStream&) = delete;
  HeldStream& operator=(const HeldStream&) = delete;

  cudaStream_t stream() const { return stream_; }
  void release() { released_ = true; }

 private:
  static void CUDART_CB hold(void* self) {
    auto* h = static_cast<HeldStream*>(self);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!h->released_.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  cudaStream_t stream_ = nullptr;
  std::atomic<bool> released_{false};
};

// c10d's wait: with the producer stream held, the collective cannot start; wait() must
// return at once (the bound stream waits, not the host), and the work after it on the
// bound stream must not run before the collective is done.
TEST(GpuCommTest, WaitMakesTheBoundStreamWaitAndReturnsAtOnce) {
  TANDEM_SKIP_WITHOUT_GPU();
  TANDEM_WORLD_OR_SKIP(comms, "emulated", {.ranks = 1, .device = {.emulated_peers = 2}});
  Communicator& comm = *comms[0];
  HeldStream producer(comm);
  DeviceFloats buffer(std::vector<float>(1000, 1.0f));
  WorkPtr work = comm.allreduce(buffer.span(), ReduceOp::kSum);
  work->wait();  // enqueues the stream's wait; must not block on the held producer
  EXPECT_FALSE(work->test());
  cudaEvent_t after;
  check(cudaEventCreateWithFlags(&after, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(after, producer.stream()), "cudaEventRecord");
  EXPECT_EQ(cudaEventQuery(after), cudaErrorNotReady);
  (void)cudaGetLastError();
  producer.release();
  work->synchronize();
  check(cudaEventSynchronize(after), "cudaEventSynchronize");
  EXPECT_EQ(buffer.host(), std::vector<float>(1000, 2.0f));  // two emulated peers
  cudaEventDestroy(after);
}

void expect_timeout(const std::string& backend) {
  TANDEM_WORLD_OR_SKIP(comms, backend,
                       {.ranks = 1, .timeout = std::chrono::seconds(1), .device = {.emulated_peers = 2}});
  Communicator& comm = *comms[0];
  HeldStream producer(comm);
  DeviceFloats buffer(std::size_t{3} << 18);  // 3 MiB of fp32
  WorkPtr work = comm.allreduce(buffer.span(), ReduceOp::kSum, {.step = 7, .tag = 3});
  std::string message;
  try {
    work->synchronize();
  } catch (const TimeoutError& e) {
    message = e.what();
  }
  producer.release();
  EXPECT_NE(message.find("rank 0: allreduce bucket 3 (3.0 MiB, step 7) not complete after"),
            std::string::npos)
      << message;
  comms.clear();  // the communicators go before the stream they are bound to
}

TEST(GpuCommTest, EmulatedTimeoutNamesTheCollective) {
  TANDEM_SKIP_WITHOUT_GPU();
  expect_timeout("emulated");
}

TEST(NcclCommTest, TimeoutAbortsAndNamesTheCollective) {
  TANDEM_SKIP_WITHOUT_GPU();
  expect_timeout("nccl");
}

TEST(NcclCommTest, TwoRanksInOneProcessSumAndAverage) {
  TANDEM_SKIP_WITHOUT_GPU();
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, " << devices << " visible";
  TANDEM_WORLD_OR_SKIP(comms, "nccl", {.ranks = 2});
  ASSERT_EQ(comms.size(), 2u);
  const std::size_t n = 100003;
  std::vector<std::vector<float>> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Communicator& comm = *comms[static_cast<std::size_t>(r)];
      ASSERT_EQ(cudaSetDevice(comm.device()), cudaSuccess);
      std::vector<float> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>((i % 7) + 10 * r);
      DeviceFloats buffer(data);
      comm.allreduce(buffer.span(), ReduceOp::kSum)->synchronize();
      comm.allreduce(buffer.span(), ReduceOp::kAverage)->synchronize();
      results[static_cast<std::size_t>(r)] = buffer.host();
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < n; ++i) {
    const float sum = static_cast<float>(2 * (i % 7) + 10);  // rank 0 + rank 1
    ASSERT_EQ(results[0][i], sum) << i;                      // the average of two equal sums
    ASSERT_EQ(results[1][i], sum) << i;
  }
}

// ---- shared: several ranks on one GPU ----

// 16-bit values of small integers (exact in fp16 and bf16), and back.
std::uint16_t to_bits(float v, DataType type) {
  if (type == DataType::kBFloat16) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    return static_cast<std::uint16_t>(bits >> 16);  // exact: small integers
  }
  const int i = static_cast<int>(v);  // fp16 of an integer |i| < 2048
  if (i == 0) return 0;
  const std::uint16_t sign = i < 0 ? 0x8000 : 0;
  int m = i < 0 ? -i : i;
  int e = 0;
  while ((m >> e) > 1) ++e;
  const int mantissa = (m << (10 - e)) & 0x3ff;
  return static_cast<std::uint16_t>(sign | ((e + 15) << 10) | mantissa);
}

// One rank's view of every operation in a world of `ranks` on one GPU, each with the
// values a bug in the indexing would change: rank r holds small_integers(n, 3 r).
void shared_rank(Communicator& comm, int ranks, std::vector<std::string>& errors) {
  const int r = comm.rank();
  auto fail = [&](const std::string& what) {
    errors.push_back("rank " + std::to_string(r) + ": " + what);
  };
  ASSERT_EQ(cudaSetDevice(comm.device()), cudaSuccess);
  const std::size_t n = 100003;  // not a multiple of 2, 3 or 4: uneven chunks
  auto data_of = [&](int rank) { return small_integers(n, 3 * rank); };

  // all-reduce, sum then average, in the rank order the host sums in
  DeviceFloats buffer(data_of(r));
  comm.allreduce(buffer.span(), ReduceOp::kSum)->synchronize();
  std::vector<float> sum(n, 0.0f);
  for (int p = 0; p < ranks; ++p) {
    const std::vector<float> d = data_of(p);
    for (std::size_t i = 0; i < n; ++i) sum[i] = p == 0 ? d[i] : sum[i] + d[i];
  }
  if (buffer.host() != sum) fail("allreduce sum");
  comm.allreduce(buffer.span(), ReduceOp::kAverage)->synchronize();
  std::vector<float> average(sum);
  for (float& v : average) {
    float acc = v;
    for (int p = 1; p < ranks; ++p) acc += v;
    v = acc / static_cast<float>(ranks);
  }
  if (buffer.host() != average) fail("allreduce average");

  // 16-bit all-reduce (compressed gradients)
  for (DataType type : {DataType::kBFloat16, DataType::kFloat16}) {
    const std::vector<float> mine = data_of(r);
    std::vector<std::uint16_t> bits(n), want(n);
    for (std::size_t i = 0; i < n; ++i) {
      bits[i] = to_bits(mine[i], type);
      want[i] = to_bits(sum[i], type);
    }
    std::uint16_t* device = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), n * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device, bits.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    comm.allreduce(std::span<std::uint16_t>(device, n), type, ReduceOp::kSum)->synchronize();
    ASSERT_EQ(cudaMemcpy(bits.data(), device, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(device);
    if (bits != want)
      fail(std::string("allreduce ") + (type == DataType::kBFloat16 ? "bf16" : "fp16"));
  }

  // reduce-scatter: block r of every rank's input, summed
  const std::size_t m = 1031;
  std::vector<float> big = small_integers(m * static_cast<std::size_t>(ranks), 5 * r);
  DeviceFloats input(big), block(m);
  comm.reduce_scatter(input.span(), block.span(), ReduceOp::kSum)->synchronize();
  std::vector<float> want_block(m, 0.0f);
  for (int p = 0; p < ranks; ++p) {
    const std::vector<float> other = small_integers(m * static_cast<std::size_t>(ranks), 5 * p);
    for (std::size_t i = 0; i < m; ++i) {
      const float v = other[static_cast<std::size_t>(r) * m + i];
      want_block[i] = p == 0 ? v : want_block[i] + v;
    }
  }
  if (block.host() != want_block) fail("reduce_scatter");

  // allgather: every rank's block in rank order
  DeviceFloats mine(small_integers(m, 7 * r)), gathered(m * static_cast<std::size_t>(ranks));
  comm.allgather(mine.span(), gathered.span())->synchronize();
  std::vector<float> want_gathered;
  for (int p = 0; p < ranks; ++p) {
    const std::vector<float> b = small_integers(m, 7 * p);
    want_gathered.insert(want_gathered.end(), b.begin(), b.end());
  }
  if (gathered.host() != want_gathered) fail("allgather");

  // broadcast from the last rank
  DeviceFloats cast(small_integers(m, 11 * r));
  comm.broadcast(cast.span(), ranks - 1)->synchronize();
  if (cast.host() != small_integers(m, 11 * (ranks - 1))) fail("broadcast");
  comm.barrier()->synchronize();

  // point to point: a ring in one group, then the same ring without groups (rank 0 sends
  // first, the others receive first), then a send to itself
  const int next = (r + 1) % ranks, prev = (r + ranks - 1) % ranks;
  DeviceFloats out(small_integers(m, 13 * r)), in(m);
  comm.group_start();
  WorkPtr send = comm.send(out.span(), next, 1);
  WorkPtr recv = comm.recv(in.span(), prev, 1);
  comm.group_end();
  send->synchronize();
  recv->synchronize();
  if (in.host() != small_integers(m, 13 * prev)) fail("grouped ring");
  DeviceFloats in2(m);
  if (r == 0) {
    comm.send(out.span(), next, 2)->synchronize();
    comm.recv(in2.span(), prev, 2)->synchronize();
  } else {
    comm.recv(in2.span(), prev, 2)->synchronize();
    comm.send(out.span(), next, 2)->synchronize();
  }
  if (in2.host() != small_integers(m, 13 * prev)) fail("ring without groups");
  DeviceFloats self(m);
  WorkPtr to_self = comm.send(out.span(), r, 3);
  comm.recv(self.span(), r, 3)->synchronize();
  to_self->synchronize();
  if (self.host() != small_integers(m, 13 * r)) fail("send to itself");

  // split: even and odd ranks, ordered by key = -rank (the highest rank first)
  std::unique_ptr<Communicator> half = comm.split(r % 2, -r);
  std::vector<int> members;
  for (int p = ranks - 1; p >= 0; --p) {
    if (p % 2 == r % 2) members.push_back(p);
  }
  const auto position = std::find(members.begin(), members.end(), r) - members.begin();
  if (half->rank() != position || half->size() != static_cast<int>(members.size())) {
    fail("split: rank " + std::to_string(half->rank()) + " of " + std::to_string(half->size()));
  }
  DeviceFloats part(std::vector<float>(m, static_cast<float>(r + 1)));
  half->allreduce(part.span(), ReduceOp::kSum)->synchronize();
  float want_part = 0;
  for (int p : members) want_part += static_cast<float>(p + 1);
  if (part.host() != std::vector<float>(m, want_part)) fail("allreduce in the split");
  half->begin_shutdown();
}

TEST(SharedGpuTest, EveryOperationMovesEachRanksOwnData) {
  TANDEM_SKIP_WITHOUT_GPU();
  for (int ranks : {1, 2, 3, 4}) {
    // A rank that fails leaves its peers waiting: the timeout turns that into errors.
    TANDEM_WORLD_OR_SKIP(comms, "shared", {.ranks = ranks, .timeout = std::chrono::seconds(30)});
    ASSERT_EQ(comms.size(), static_cast<std::size_t>(ranks));
    EXPECT_EQ(comms[0]->backend_name(), "shared");
    EXPECT_FALSE(comms[0]->emulated());
    EXPECT_EQ(comms[0]->device(), comms[static_cast<std::size_t>(ranks - 1)]->device());
    std::vector<std::vector<std::string>> errors(static_cast<std::size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        std::vector<std::string>& mine = errors[static_cast<std::size_t>(r)];
        try {
          shared_rank(*comms[static_cast<std::size_t>(r)], ranks, mine);
        } catch (const std::exception& e) {
          mine.push_back(std::string("rank ") + std::to_string(r) + " threw: " + e.what());
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors) {
      for (const std::string& line : e) ADD_FAILURE() << ranks << " ranks: " << line;
    }
  }
}

// A rank that never comes: its peer's collective times out, and nothing hangs (the
// communicators are destroyed with the peer's stream released).
TEST(SharedGpuTest, AMissingRankTimesOutAndNothingHangs) {
  TANDEM_SKIP_WITHOUT_GPU();
  TANDEM_WORLD_OR_SKIP(comms, "shared", {.ranks = 2, .timeout = std::chrono::seconds(1)});
  DeviceFloats buffer(small_integers(4096));
  std::string message;
  try {
    comms[0]->allreduce(buffer.span(), ReduceOp::kSum, {.step = 2, .tag = 4})->synchronize();
  } catch (const TimeoutError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("rank 0: allreduce bucket 4"), std::string::npos) << message;
  comms.clear();
}

TEST(GpuCommTest, BadOptionsAreUsageErrors) {
  TANDEM_SKIP_WITHOUT_GPU();
  if (find_backend("emulated") == nullptr) GTEST_SKIP() << "no emulated backend in this build";
  EXPECT_THROW(world("emulated", {.ranks = 2}), UsageError);
  EXPECT_THROW(world("emulated", {.ranks = 1, .device = {.emulated_peers = 0}}), UsageError);
  if (find_backend("nccl") != nullptr) {
    EXPECT_THROW(world("nccl", {.ranks = 4096}), UsageError);
  }
  EXPECT_THROW(world("shared", {.ranks = 65}), UsageError);
}

TEST(GpuCommTest, DeviceBackendsAreRegisteredByName) {
  // No device needed: registration is static.
  const Backend* emulated = find_backend("emulated");
  ASSERT_NE(emulated, nullptr);
  EXPECT_EQ(emulated->memory, MemoryKind::kDevice);
  EXPECT_NE(emulated->make_world, nullptr);
  EXPECT_NE(emulated->make_job_member, nullptr);
  int devices = 0;
  const bool present = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  (void)cudaGetLastError();
  if (!present) {
    EXPECT_THROW(require_backend("emulated", "--device-comm"), UsageError);
  }
}

}  // namespace
}  // namespace tandem
