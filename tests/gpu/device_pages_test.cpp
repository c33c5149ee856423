// Device memory given back piece by piece (cuda/device_pages.h): what is kept keeps its
// bytes, what is discarded reads zero once restored and on the host, whole pieces go back
// to the driver (its count of memory in use falls) and come back when restored, partial
// ones are zeroed in place, and a piece restored before its release went through is kept.
#include "cuda/device_pages.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "cuda/resources.h"
#include "gpu/gpu_support.h"

namespace tandem {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kUnit = 64 * kMiB / sizeof(float);  // elements of one piece

struct Pages {
  cuda::Stream stream;
  cuda::DevicePageArray<float> array;
  std::vector<float> host;

  // Four units of 64 MiB, filled with their element indices.
  Pages() {
    const std::vector<std::size_t> cuts = {0, kUnit, 2 * kUnit, 3 * kUnit};
    array = cuda::DevicePageArray<float>(4 * kUnit, cuts, stream.get());
    host.resize(4 * kUnit);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 1000003);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(array.data(), host.data(), host.size() * sizeof(float),
                                      cudaMemcpyHostToDevice, stream.get()));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  }
  // How many elements of [first, last) differ from `host`, or from zero where `zeroed`.
  std::size_t wrong(const std::vector<float>& got, std::size_t first, std::size_t last,
                    bool zeroed) const {
    std::size_t n = 0;
    for (std::size_t i = first; i < last; ++i) n += got[i] != (zeroed ? 0.0f : host[i]);
    return n;
  }
};

TEST(DevicePagesTest, DiscardedUnitsGoBackToTheDriverAndComeBackZero) {
  TANDEM_SKIP_WITHOUT_GPU();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  Pages p;
  if (!p.array.gives_back()) GTEST_SKIP() << "this device manages no virtual memory";
  EXPECT_EQ(p.array.backed_bytes(), 4 * kUnit * sizeof(float));
  const std::int64_t before = cuda::device_memory_in_use(device);

  p.array.discard(kUnit, 2 * kUnit);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(p.stream.get()));
  p.array.discard(2 * kUnit, 3 * kUnit);  // the first release went through: given back now
  EXPECT_EQ(p.array.backed_bytes(), 3 * kUnit * sizeof(float));
  const std::int64_t after = cuda::device_memory_in_use(device);
  EXPECT_GE(before - after, static_cast<std::int64_t>(kUnit * sizeof(float)) / 2)
      << "the driver's memory in use fell from " << before << " to " << after;

  // The host reads zeros where nothing backs the array, and the rest as it was.
  std::vector<float> got = p.array.download();
  EXPECT_EQ(p.wrong(got, 0, kUnit, false), 0u);
  EXPECT_EQ(p.wrong(got, kUnit, 3 * kUnit, true), 0u);
  EXPECT_EQ(p.wrong(got, 3 * kUnit, 4 * kUnit, false), 0u);

  // Restored (the second before its release went through, or after), both read zero and
  // take writes; the memory is backed again.
  p.array.restore(kUnit, 3 * kUnit);
  EXPECT_EQ(p.array.backed_bytes(), 4 * kUnit * sizeof(float));
  TANDEM_CUDA_CHECK(cudaMemsetAsync(p.array.data() + kUnit, 0x3f, 16, p.stream.get()));
  got = p.array.download();
  EXPECT_NE(got[kUnit], 0.0f);
  EXPECT_EQ(p.wrong(got, kUnit + 4, 3 * kUnit, true), 0u);
  EXPECT_EQ(p.wrong(got, 3 * kUnit, 4 * kUnit, false), 0u);
  EXPECT_GE(cuda::device_peak(device), cuda::device_memory_in_use(device) - 1);
}

TEST(DevicePagesTest, PartialRangesAreZeroedInPlaceAndKept) {
  TANDEM_SKIP_WITHOUT_GPU();
  Pages p;
  // Half a unit, and a range across a cut: no whole piece, nothing given back.
  p.array.discard(kUnit / 4, kUnit / 2);
  p.array.discard(2 * kUnit - 100, 2 * kUnit + 100);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(p.stream.get()));
  p.array.restore(0, 4 * kUnit);
  EXPECT_EQ(p.array.backed_bytes(), 4 * kUnit * sizeof(float));
  const std::vector<float> got = p.array.download();
  EXPECT_EQ(p.wrong(got, 0, kUnit / 4, false), 0u);
  EXPECT_EQ(p.wrong(got, kUnit / 4, kUnit / 2, true), 0u);
  EXPECT_EQ(p.wrong(got, kUnit / 2, 2 * kUnit - 100, false), 0u);
  EXPECT_EQ(p.wrong(got, 2 * kUnit - 100, 2 * kUnit + 100, true), 0u);
  EXPECT_EQ(p.wrong(got, 2 * kUnit + 100, 4 * kUnit, false), 0u);
}

TEST(DevicePagesTest, ZeroLeavesWhatIsGivenBackAlone) {
  TANDEM_SKIP_WITHOUT_GPU();
  Pages p;
  p.array.discard(0, kUnit);
  p.array.zero();  // would fault on memory no longer backed
  p.array.restore(0, kUnit);
  const std::vector<float> got = p.array.download();
  EXPECT_EQ(p.wrong(got, 0, 4 * kUnit, true), 0u);
}

}  // namespace
}  // namespace tandem
