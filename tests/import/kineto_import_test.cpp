// Hand-made Kineto traces with known answers: what becomes compute, communication and
// memory, which iteration a kernel belongs to, which rank a file is, and the overlap
// metrics that follow.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_support.h"
#include "import/import_support.h"
#include "import/kineto_builder.h"

namespace tandem::testing {
namespace {

constexpr const char* kGemm = "ampere_sgemm_128x64_tn";
constexpr const char* kAllReduce = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)";

TEST(KinetoImportTest, OverlappedCommunicationIsHidden) {
  // compute [0,200) in two kernels; all-reduce [50,150) entirely under them.
  const auto r = import_text(KinetoBuilder()
                                 .kernel(kGemm, 0, 100)
                                 .kernel(kGemm, 100, 100)
                                 .kernel(kAllReduce, 50, 100, 13)
                                 .str());
  const IterationMetrics m = iteration(r.timeline, 0, 0);
  EXPECT_EQ(m.e2e_ns, us(200));
  EXPECT_EQ(m.t_comp_ns, us(200));
  EXPECT_EQ(m.t_comm_ns, us(100));
  EXPECT_EQ(m.t_ovl_ns, us(100));
  EXPECT_EQ(m.t_exposed_comm_ns, 0);
  EXPECT_EQ(m.t_other_ns, 0);
}

TEST(KinetoImportTest, SerializedCommunicationIsExposed) {
  // compute [0,100), all-reduce [100,160), compute [160,200): nothing overlaps.
  const auto r = import_text(KinetoBuilder()
                                 .kernel(kGemm, 0, 100)
                                 .kernel(kAllReduce, 100, 60, 13)
                                 .kernel(kGemm, 160, 40)
                                 .str());
  const IterationMetrics m = iteration(r.timeline, 0, 0);
  EXPECT_EQ(m.e2e_ns, us(200));
  EXPECT_EQ(m.t_ovl_ns, 0);
  EXPECT_EQ(m.t_exposed_comm_ns, us(60));
  EXPECT_EQ(m.t_other_ns, 0);
}

TEST(KinetoImportTest, CommunicationLongerThanCompute) {
  // compute [0,40) and [190,200); all-reduce [10,200) covers the gap between them.
  const auto r = import_text(KinetoBuilder()
                                 .kernel(kGemm, 0, 40)
                                 .kernel(kAllReduce, 10, 190, 13)
                                 .kernel(kGemm, 190, 10)
                                 .str());
  const IterationMetrics m = iteration(r.timeline, 0, 0);
  EXPECT_EQ(m.e2e_ns, us(200));
  EXPECT_EQ(m.t_comm_ns, us(190));
  EXPECT_EQ(m.t_ovl_ns, us(40));            // [10,40) + [190,200)
  EXPECT_EQ(m.t_exposed_comm_ns, us(150));  // [40,190)
  EXPECT_EQ(m.t_other_ns, 0);
}

TEST(KinetoImportTest, SeveralComputeStreamsSumTimeButUniteOverlap) {
  // stream 7 [0,100), stream 8 [50,150) and [190,210); comm (stream 13) [120,200).
  const auto r = import_text(KinetoBuilder()
                                 .kernel(kGemm, 0, 100, 7)
                                 .kernel(kGemm, 50, 100, 8)
                                 .kernel(kGemm, 190, 20, 8)
                                 .kernel(kAllReduce, 120, 80, 13)
                                 .str());
  const IterationMetrics m = iteration(r.timeline, 0, 0);
  EXPECT_EQ(m.e2e_ns, us(210));
  EXPECT_EQ(m.t_comp_ns, us(220));         // a sum: concurrent kernels count twice
  EXPECT_EQ(m.t_ovl_ns, us(40));           // [120,150) + [190,200)
  EXPECT_EQ(m.t_exposed_comm_ns, us(40));  // [150,190)
  EXPECT_EQ(m.t_other_ns, 0);
}

TEST(KinetoImportTest, NestedKernelsAndMemoryCopies) {
  // A kernel nested in another, comm nested in both, a memcpy and a gap before the last
  // kernel: the memcpy is neither compute nor comm, so it is idle time.
  const auto r = import_text(KinetoBuilder()
                                 .kernel(kGemm, 0, 100, 7)
                                 .kernel(kGemm, 20, 20, 8)
                                 .kernel(kAllReduce, 30, 30, 13)
                                 .memcpy(100, 20)
                                 .kernel(kGemm, 150, 10, 7)
                                 .str());
  const IterationMetrics m = iteration(r.timeline, 0, 0);
  EXPECT_EQ(m.e2e_ns, us(160));
  EXPECT_EQ(m.t_comp_ns, us(130));
  EXPECT_EQ(m.t_ovl_ns, us(30));
  EXPECT_EQ(m.t_exposed_comm_ns, 0);
  EXPECT_EQ(m.t_other_ns, us(50));  // memcpy [100,120) + gap [120,150)
  const auto memory = std::count_if(r.timeline.spans.begin(), r.timeline.spans.end(),
                                    [](const Span& s) { return s.kind == SpanKind::kMemory; });
  EXPECT_EQ(memory, 1);
  EXPECT_EQ(r.files[0].memory, 1u);
  EXPECT_EQ(r.files[0].compute, 3u);
  EXPECT_EQ(r.files[0].comm, 1u);
}

TEST(KinetoImportTest, SpansCarryLaneKindAndInternedName) {
  const auto r = import_text(KinetoBuilder()
                                 .kernel(kGemm, 0, 10)
                                 .kernel(kGemm, 10, 10)
                                 .kernel(kAllReduce, 20, 10, 13)
                                 .memcpy(30, 5)
                                 .cpu_op("aten::mm", 0, 40)
                                 .str());
  ASSERT_EQ(r.timeline.spans.size(), 4u);  // the CPU op is not a span
  const Span& gemm = r.timeline.spans[0];
  EXPECT_EQ(gemm.lane, Lane::kCompute);
  EXPECT_EQ(gemm.kind, SpanKind::kKernel);
  EXPECT_EQ(r.timeline.name_of(gemm), kGemm);
  EXPECT_EQ(r.timeline.spans[1].name, gemm.name);  // one interned copy per distinct name
  EXPECT_EQ(r.timeline.spans[2].lane, Lane::kComm);
  EXPECT_EQ(r.timeline.spans[2].kind, SpanKind::kAllreduce);
  EXPECT_EQ(r.timeline.spans[3].lane, Lane::kIdle);
  EXPECT_EQ(r.timeline.spans[3].kind, SpanKind::kMemory);
}

// PyTorch built without Kineto (Debian's 1.13) exports its legacy autograd profiler's
// trace: a bare array of events with no category and pid "CPU functions". Its operators
// are the CPU job's compute, its ProfilerStep ranges the iterations, gloo's the comm.
TEST(KinetoImportTest, LegacyAutogradProfilerTracesAreCpuJobs) {
  const auto op = [](const char* name, int tid, double ts, double dur) {
    return nlohmann::json{{"name", name},
                          {"ph", "X"},
                          {"ts", ts},
                          {"dur", dur},
                          {"tid", tid},
                          {"pid", "CPU functions"},
                          {"args", nlohmann::json::object()}};
  };
  const nlohmann::json trace =
      nlohmann::json::array({op("ProfilerStep#3", 1, 0, 100), op("aten::addmm", 1, 2, 40),
                             op("aten::mm", 1, 5, 30), op("c10d::allreduce_", 1, 44, 2),
                             op("gloo:all_reduce", 2, 45, 30), op("aten::add_", 1, 80, 10)});
  const auto r = import_text(trace.dump());
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].compute, 2u);  // addmm (with the mm inside it) and add_
  EXPECT_EQ(r.files[0].comm, 1u);
  EXPECT_EQ(r.files[0].step_windows, 1u);
  const IterationMetrics m = iteration(r.timeline, 0, 3);
  EXPECT_EQ(m.t_comp_ns, us(50));
  EXPECT_EQ(m.t_comm_ns, us(30));
  EXPECT_EQ(m.t_ovl_ns, 0);
}

TEST(KinetoImportTest, FractionalMicrosecondsKeepNanoseconds) {
  const auto r = import_text(KinetoBuilder().kernel(kGemm, 1.0005, 2.2224).str());
  ASSERT_EQ(r.timeline.spans.size(), 1u);
  EXPECT_EQ(r.timeline.spans[0].start_ns, 1001);  // 1000.5 ns rounds away from zero
  EXPECT_EQ(r.timeline.spans[0].end_ns, 1001 + 2222);
}

TEST(KinetoImportTest, KernelBelongsToTheStepThatLaunchedIt) {
  // Steps 3 [0,100) and 4 [100,200). Kernel 1 is launched in step 3 but runs in step 4's
  // window; kernel 2 is launched and runs in step 4; kernel 3 has no correlation (its own
  // start decides); kernel 4 runs after every window.
  const auto r = import_text(KinetoBuilder()
                                 .profiler_step(3, 0, 100)
                                 .profiler_step(4, 100, 100)
                                 .launch(90, 1)
                                 .launch(110, 2)
                                 .kernel(kGemm, 150, 20, 7, 1)
                                 .kernel(kGemm, 180, 10, 7, 2)
                                 .kernel(kGemm, 120, 10, 7)
                                 .kernel(kGemm, 500, 10, 7)
                                 .str());
  ASSERT_EQ(r.timeline.spans.size(), 4u);
  EXPECT_EQ(r.timeline.spans[0].step, 3);
  EXPECT_EQ(r.timeline.spans[1].step, 4);
  EXPECT_EQ(r.timeline.spans[2].step, 4);
  EXPECT_EQ(r.timeline.spans[3].step, -1);
  EXPECT_EQ(r.files[0].outside_steps, 1u);
  EXPECT_EQ(r.files[0].step_windows, 2u);
}

TEST(KinetoImportTest, WithoutProfilerStepsTheWholeTraceIsOneIteration) {
  const auto r = import_text(KinetoBuilder().kernel(kGemm, 0, 10).kernel(kGemm, 1e6, 10).str());
  for (const Span& s : r.timeline.spans) EXPECT_EQ(s.step, 0);
  EXPECT_EQ(iteration(r.timeline, 0, 0).e2e_ns, us(1'000'010));
}

TEST(KinetoImportTest, RankFromDistributedInfoElseFileOrder) {
  TraceImporter importer;
  importer.add_bytes(KinetoBuilder(3).kernel(kGemm, 0, 10).str(), "a.json", 0);
  importer.add_bytes(KinetoBuilder().kernel(kGemm, 0, 10).str(), "b.json", 1);
  const ImportResult r = importer.finish();
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.files[0].rank, 3);
  EXPECT_EQ(r.files[0].rank_source, "distributedInfo.rank");
  EXPECT_EQ(r.files[1].rank, 1);
  EXPECT_EQ(r.files[1].rank_source, "file order");
  EXPECT_EQ(r.timeline.spans[0].rank, 3);
  EXPECT_EQ(r.timeline.spans[1].rank, 1);
  EXPECT_EQ(r.timeline.ranks, 4);
}

TEST(KinetoImportTest, TwoTracesOfOneRankAreAnError) {
  TraceImporter importer;
  importer.add_bytes(KinetoBuilder(0).kernel(kGemm, 0, 10).str(), "a.json", 0);
  try {
    importer.add_bytes(KinetoBuilder(0).kernel(kGemm, 0, 10).str(), "b.json", 1);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("b.json: rank 0 is also in a.json"), std::string::npos)
        << e.what();
  }
}

TEST(KinetoImportTest, BaseTimeShiftsEveryRankOntoOneClock) {
  const auto r = import_text(KinetoBuilder().kernel(kGemm, 5, 10).base_time_ns(1'000'000).str());
  EXPECT_EQ(r.timeline.spans[0].start_ns, 1'000'000 + us(5));
}

TEST(KinetoImportTest, GlooCpuCollectivesAreCommunication) {
  const auto r = import_text(KinetoBuilder()
                                 .kernel(kGemm, 0, 100)
                                 .cpu_op("gloo:all_reduce", 40, 20)
                                 .cpu_op("nccl:all_reduce", 40, 1)  // an enqueue, not comm
                                 .str());
  ASSERT_EQ(r.timeline.spans.size(), 2u);
  EXPECT_EQ(r.timeline.spans[1].lane, Lane::kComm);
  EXPECT_EQ(r.timeline.spans[1].kind, SpanKind::kAllreduce);
  EXPECT_EQ(iteration(r.timeline, 0, 0).t_ovl_ns, us(20));
}

TEST(KinetoImportTest, ClassificationCanBeOverridden) {
  const std::string trace = KinetoBuilder()
                                .kernel(kGemm, 0, 10)
                                .kernel("my_fused_allreduce", 10, 10)
                                .kernel("elementwise_add", 20, 10)
                                .str();
  const auto r = import_text(trace, {.comm = "allreduce", .memory = "^memcpy", .compute = "gemm"});
  ASSERT_EQ(r.timeline.spans.size(), 2u);
  EXPECT_EQ(r.timeline.spans[1].lane, Lane::kComm);
  EXPECT_EQ(r.files[0].ignored, 1u);  // elementwise_add matched no rule
}

TEST(KinetoImportTest, GzipAndPlainReadTheSame) {
  TempDir dir;
  const std::string text = KinetoBuilder(1).kernel(kGemm, 0, 10).kernel(kAllReduce, 5, 10).str();
  const auto plain = dir.path() / "rank1.json";
  const auto packed = dir.path() / "rank1.json.gz";
  {
    std::ofstream(plain) << text;
    gzFile gz = gzopen(packed.c_str(), "wb");
    ASSERT_NE(gz, nullptr);
    ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
              static_cast<int>(text.size()));
    gzclose(gz);
  }
  const ImportResult a = import_traces({plain.string()});
  const ImportResult b = import_traces({packed.string()});
  ASSERT_EQ(a.timeline.spans.size(), 2u);
  ASSERT_EQ(b.timeline.spans.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a.timeline.spans[i].start_ns, b.timeline.spans[i].start_ns);
    EXPECT_EQ(a.timeline.spans[i].end_ns, b.timeline.spans[i].end_ns);
    EXPECT_EQ(a.timeline.spans[i].lane, b.timeline.spans[i].lane);
  }
  EXPECT_EQ(b.files[0].rank, 1);
  EXPECT_EQ(b.files[0].bytes, text.size());  // decompressed bytes
}

TEST(KinetoImportTest, DirectoriesExpandToSortedTraces) {
  TempDir dir;
  for (const char* name : {"b.json", "a.json.gz", "notes.txt", "c.json"}) {
    std::ofstream(dir.path() / name) << "{}";
  }
  const auto files = expand_trace_inputs({dir.path().string()}, "");
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(std::filesystem::path(files[0]).filename(), "a.json.gz");
  EXPECT_EQ(std::filesystem::path(files[1]).filename(), "b.json");
  EXPECT_EQ(std::filesystem::path(files[2]).filename(), "c.json");
  EXPECT_THROW(expand_trace_inputs({(dir.path() / "missing").string()}, ""), UsageError);
}

}  // namespace
}  // namespace tandem::testing
