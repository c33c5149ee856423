// The classification rules: defaults for NCCL/RCCL/HCCL names and Kineto's memory
// operations, overrides, and the collective guessed from a name.
#include "trace_import/classify.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tandem {
namespace {

EventRole classify(EventClassifier& c, NameTable& names, const std::string& name,
                   bool memory_category = false) {
  return c.classify(names.intern(name), memory_category, names);
}

TEST(ClassifyTest, DefaultRules) {
  NameTable names;
  EventClassifier c{ClassificationRules{}};
  EXPECT_EQ(classify(c, names, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
            EventRole::kComm);
  EXPECT_EQ(classify(c, names, "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)"), EventRole::kComm);
  EXPECT_EQ(classify(c, names, "void ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL()"),
            EventRole::kComm);
  EXPECT_EQ(classify(c, names, "HcclAllReduce"), EventRole::kComm);
  EXPECT_EQ(classify(c, names, "Memcpy DtoD (Device -> Device)"), EventRole::kMemory);
  EXPECT_EQ(classify(c, names, "Memset (Device)"), EventRole::kMemory);
  EXPECT_EQ(classify(c, names, "anything", /*memory_category=*/true), EventRole::kMemory);
  EXPECT_EQ(classify(c, names, "void at::native::vectorized_elementwise_kernel<4>()"),
            EventRole::kCompute);
  // "memcpy" in the middle of a compute kernel's name is still compute.
  EXPECT_EQ(classify(c, names, "void at::native::unrolled_memcpy_kernel()"), EventRole::kCompute);
}

TEST(ClassifyTest, CacheKeepsTheCategoryApart) {
  NameTable names;
  EventClassifier c{ClassificationRules{}};
  const NameId id = names.intern("copy");
  EXPECT_EQ(c.classify(id, true, names), EventRole::kMemory);
  EXPECT_EQ(c.classify(id, false, names), EventRole::kCompute);
  EXPECT_EQ(c.classify(id, true, names), EventRole::kMemory);
}

TEST(ClassifyTest, OverridesAndIgnored) {
  NameTable names;
  EventClassifier c{{.comm = "^custom_ar", .memory = "^xfer", .compute = "gemm|conv"}};
  EXPECT_EQ(classify(c, names, "custom_ar_kernel"), EventRole::kComm);
  EXPECT_EQ(classify(c, names, "ncclKernel_AllReduce"), EventRole::kIgnored);
  EXPECT_EQ(classify(c, names, "XFER_h2d"), EventRole::kMemory);  // case-insensitive
  EXPECT_EQ(classify(c, names, "sm90_gemm_bf16"), EventRole::kCompute);
  EXPECT_EQ(classify(c, names, "softmax"), EventRole::kIgnored);
}

TEST(ClassifyTest, InvalidRegexNamesTheFlag) {
  try {
    EventClassifier c{{.comm = "nccl(", .memory = "x", .compute = ""}};
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--comm-regex"), std::string::npos) << e.what();
  }
  EXPECT_THROW((EventClassifier{{.comm = "x", .memory = "x", .compute = "[a-"}}), UsageError);
}

TEST(ClassifyTest, CollectiveGuessedFromName) {
  EXPECT_EQ(guess_comm_kind("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), SpanKind::kAllreduce);
  EXPECT_EQ(guess_comm_kind("ncclKernel_ReduceScatter_RING_LL_Sum_half"), SpanKind::kReduceScatter);
  EXPECT_EQ(guess_comm_kind("ncclDevKernel_AllGather_RING_LL"), SpanKind::kAllgather);
  EXPECT_EQ(guess_comm_kind("ncclKernel_Broadcast_RING_LL"), SpanKind::kBroadcast);
  EXPECT_EQ(guess_comm_kind("ncclDevKernel_SendRecv"), SpanKind::kOther);
  EXPECT_EQ(guess_comm_kind("ncclKernel_Send"), SpanKind::kSend);
  EXPECT_EQ(guess_comm_kind("gloo:all_gather"), SpanKind::kAllgather);
  EXPECT_EQ(guess_comm_kind("ncclDevKernel_AllToAll"), SpanKind::kOther);
}

}  // namespace
}  // namespace tandem
