// Steps allocate nothing: a model allocates every buffer when it is built, so a training
// step (forward, loss, backward, spans recorded) makes no heap allocation. Counted by
// replacing the global operator new for this test program. The products run on OpenBLAS
// here: oneDNN's sgemm makes small allocations of its own inside each call (its driver's
// bookkeeping; docs/PERFORMANCE.md), which would hide tandem's.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "compute/cpu/blas.h"
#include "model/mlp.h"
#include "model/rng.h"
#include "model/transformer.h"
#include "timeline/recorder.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// The replaced new allocates with malloc, so free is its match; GCC 12 at -O2 (the
// sanitizer presets) inlines the pair and judges by the names alone.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them): every form that
// the replaced deletes may free must come from malloc.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return ::operator new(size, tag);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace tandem {
namespace {

std::vector<std::int32_t> tokens_for(const ModelSpec& spec, int rows) {
  detail::SplitMix64 rng(3);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows) * (spec.transformer.seq + 1));
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.next() % spec.transformer.vocab);
  return tokens;
}

TEST(AllocationTest, TheCounterSeesAnAllocation) {
  const long before = g_allocations.load();
  auto* p = new std::vector<int>(8);
  EXPECT_GE(g_allocations.load() - before, 2) << "the replaced operator new is in use";
  delete p;
}

// tandem's own code, with the GEMM library that allocates nothing per call.
class OpenBlasForTheTest {
 public:
  OpenBlasForTheTest() : before_(gemm_library()) { set_gemm_library(GemmLibrary::kOpenBlas); }
  ~OpenBlasForTheTest() { set_gemm_library(before_); }

 private:
  GemmLibrary before_;
};

TEST(AllocationTest, ATransformerStepAllocatesNothing) {
  const OpenBlasForTheTest openblas;
  for (const char* text : {"gpt:layers=2,dim=32,heads=4,seq=16,vocab=64",
                           "llama:layers=2,dim=32,heads=4,seq=16,vocab=64"}) {
    const ModelSpec spec = ModelSpec::parse(text);
    Transformer model(spec, 4, 1);
    RankRecorder recorder(0, 1024);
    const std::vector<std::int32_t> tokens = tokens_for(spec, 4);
    const TokenBatch full{.tokens = tokens, .rows = 4};
    const TokenBatch part{.tokens = tokens, .rows = 3};  // fewer rows than built for
    model.forward(full, recorder, 0);  // first use of every buffer
    model.backward(recorder, 0);
    recorder.clear();
    const long before = g_allocations.load();
    for (int step = 1; step <= 2; ++step) {
      model.zero_grad();
      model.forward(step == 1 ? full : part, recorder, step);
      model.backward(recorder, step);
    }
    EXPECT_EQ(g_allocations.load() - before, 0) << text;
    EXPECT_FALSE(recorder.collect().empty()) << "the spans were recorded";
  }
}

TEST(AllocationTest, AnMlpStepAllocatesNothing) {
  const OpenBlasForTheTest openblas;
  const ModelSpec spec = ModelSpec::parse("mlp:3x32", 8);
  Mlp model(spec, 16, 1);
  RankRecorder recorder(0, 1024);
  std::vector<float> x(16 * spec.input, 0.5f);
  std::vector<std::int32_t> y(16, 1);
  const Batch batch{.x = x, .y = y, .rows = 16};
  model.forward(batch, recorder, 0);
  model.backward(recorder, 0, {});
  recorder.clear();
  const long before = g_allocations.load();
  model.zero_grad();
  model.forward(batch, recorder, 1);
  model.backward(recorder, 1, {});
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace tandem
