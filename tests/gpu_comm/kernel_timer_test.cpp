// KernelTimer: kernel classification (no GPU needed), and spans from CUPTI and from
// events around a cuBLAS GEMM (skipped without a device).
#include "timeline/gpu/kernel_timer.h"

#include <gtest/gtest.h>

#include "compute/cuda/gemm.h"
#include "cuda/resources.h"
#include "gpu/gpu_support.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

TEST(CudaKernelTimerTest, ClassifiesCommKernelsByName) {
  EXPECT_TRUE(KernelTimer::is_comm_kernel("ncclKernel_AllReduce_RING_LL_Sum_float"));
  EXPECT_TRUE(KernelTimer::is_comm_kernel(
      "_Z30ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"));
  EXPECT_TRUE(KernelTimer::is_comm_kernel(
      "_ZN6tandem12_GLOBAL__N_132tandem_emulated_ring_reduce_copyIfEEvPT_PKS2_S3_mmifmmf"));
  EXPECT_FALSE(
      KernelTimer::is_comm_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"));
  EXPECT_FALSE(KernelTimer::is_comm_kernel("ampere_sgemm_128x64_nn"));
}

void time_one_gemm(bool prefer_cupti) {
  const int n = 512;
  cuda::Stream stream;
  cuda::CublasHandle blas;
  blas.set_stream(stream.get());
  cuda::DeviceBuffer<float> a(n * n), b(n * n), c(n * n);
  a.zero(stream.get());
  b.zero(stream.get());
  KernelTimer timer({.device = 0, .prefer_cupti = prefer_cupti});
  timer.start();
  timer.mark_step(stream.get(), 4);
  // The tag (an int) and the FLOP count (a double) by name: a FLOP count in the tag's
  // place would be an out-of-range double -> int conversion.
  const std::int32_t tag = 0;
  const double flops = 2.0 * n * n * n;
  const auto region = timer.begin(stream.get(), Lane::kCompute, SpanKind::kKernel, tag, flops);
  cuda::gemm(blas, Precision::kFp32, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
             c.data(), n);
  timer.end(stream.get(), region);
  timer.marker(stream.get(), Lane::kCompute, SpanKind::kOptimizer);
  NameTable names;
  const std::vector<Span> spans = timer.stop(&names);
  std::printf("kernel timing source: %s, %zu spans\n", timer.source_name().c_str(), spans.size());
  ASSERT_GE(spans.size(), 2u);
  bool kernel = false, marker = false;
  for (const Span& s : spans) {
    EXPECT_EQ(s.step, 4);
    EXPECT_LE(s.start_ns, s.end_ns);
    if (s.kind == SpanKind::kOptimizer) marker = true;
    // Events mode: the region's span carries the tag and FLOPs given to begin().
    if (timer.source() == KernelTimingSource::kEvents && s.kind == SpanKind::kKernel) {
      EXPECT_EQ(s.tag, tag);
      EXPECT_EQ(s.flops, flops);
    }
    if (s.kind == SpanKind::kKernel && s.lane == Lane::kCompute && s.end_ns > s.start_ns)
      kernel = true;
  }
  EXPECT_TRUE(kernel);
  EXPECT_TRUE(marker);
}

TEST(CudaKernelTimerTest, EventsTimeAGemm) {
  TANDEM_SKIP_WITHOUT_GPU();
  time_one_gemm(false);
}

TEST(CudaKernelTimerTest, CuptiOrItsFallbackTimesAGemm) {
  TANDEM_SKIP_WITHOUT_GPU();
  time_one_gemm(true);
}

TEST(CudaKernelTimerTest, SecondTimerOnOneDeviceUsesEvents) {
  TANDEM_SKIP_WITHOUT_GPU();
  KernelTimer first({.device = 0});
  KernelTimer second({.device = 0});
  if (first.source() != KernelTimingSource::kCupti) {
    GTEST_SKIP() << "CUPTI unavailable here: " << first.source_name();
  }
  EXPECT_EQ(second.source(), KernelTimingSource::kEvents);
  EXPECT_NE(second.source_name().find("another kernel timer"), std::string::npos)
      << second.source_name();
}

}  // namespace
}  // namespace tandem
