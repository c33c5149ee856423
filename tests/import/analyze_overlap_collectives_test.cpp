// analyze: HTA's per-rank overlap, collectives with their sizes, one rank
// per GPU, CPU-only (gloo) traces, and the kernels contention slows. Every expected
// value is worked out by hand in the comments.
#include <gtest/gtest.h>

#include "import/import_support.h"
#include "import/kineto_builder.h"
#include "trace_import/analyze_report.h"

namespace tandem::testing {
namespace {

// Three ProfilerSteps of 100 us. Kernels (launch -> GPU interval):
//   step 1: compute c1 [30,60), comm n2 [40,80)    overlap 20
//   step 2: compute c3 [130,150), comm n4 [140,210) overlap 10 (n4 crosses into step 3)
//   step 3: compute c5 [230,260), comm n6 [240,250) overlap 10
// The GPU copy of ProfilerStep#3 starts at 205 (after the CPU one, at 200), so HTA's last
// step starts at 205 and the launch of c5 at 202 is still "before the last step".
std::string three_steps() {
  KinetoBuilder b(0);
  b.profiler_step(1, 0, 100).profiler_step(2, 100, 100).profiler_step(3, 200, 100);
  b.event({{"ph", "X"}, {"cat", "gpu_user_annotation"}, {"name", "ProfilerStep#3"},
           {"pid", 0}, {"tid", 7}, {"ts", 205}, {"dur", 100}, {"args", {{"External id", 9}}}});
  b.launch(10, 1).launch(20, 2).launch(110, 3).launch(120, 4).launch(202, 5).launch(220, 6);
  b.kernel("gemm", 30, 30, 7, 1).nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 40, 40, 2);
  b.kernel("gemm", 130, 20, 7, 3).nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 140, 70, 4);
  b.kernel("gemm", 230, 30, 7, 5).nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 240, 10, 6);
  return b.str();
}

TEST(HtaOverlapTest, WholeTraceWithAndWithoutTheLastStep) {
  const ImportResult r = import_text(three_steps());
  ASSERT_TRUE(r.hta_step_filter);
  ASSERT_EQ(r.ranks.size(), 1u);
  // Default: launches before 205 -> c1 n2 c3 n4 c5. comm 40 + 70 = 110, overlap 20 + 10.
  const HtaOverlap& out = r.hta(r.ranks[0], false);
  EXPECT_DOUBLE_EQ(out.comm_us, 110);
  EXPECT_DOUBLE_EQ(out.overlap_us, 30);
  EXPECT_DOUBLE_EQ(out.hidden_pct, 27.27);
  EXPECT_DOUBLE_EQ(out.compute_us, 80);  // c5 counts: its launch is before the GPU mark
  EXPECT_EQ(out.kernels, 5u);
  // All kernels [30,80) [130,210) [230,260): span 230, busy 160 -> idle 70.
  EXPECT_DOUBLE_EQ(out.idle_us, 70);
  // include_last_profiler_step: n6 too. comm 120, overlap 40 -> 33.33%.
  const HtaOverlap& all = r.hta(r.ranks[0], true);
  EXPECT_DOUBLE_EQ(all.comm_us, 120);
  EXPECT_DOUBLE_EQ(all.overlap_us, 40);
  EXPECT_DOUBLE_EQ(all.hidden_pct, 33.33);
}

TEST(HtaOverlapTest, OneStepNameKeepsEveryKernelInBothModes) {
  KinetoBuilder b(0);
  b.profiler_step(1, 0, 1000).launch(1, 1).launch(2, 2);
  b.kernel("gemm", 10, 10, 7, 1).nccl("ncclKernel_AllGather_RING_LL", 15, 10, 2);
  const ImportResult r = import_text(b.str());
  EXPECT_FALSE(r.hta_step_filter);
  EXPECT_DOUBLE_EQ(r.hta(r.ranks[0], false).hidden_pct, 50);
  EXPECT_DOUBLE_EQ(r.hta(r.ranks[0], true).hidden_pct, 50);
}

// Fractional timestamps: HTA rounds every event inwards to whole microseconds.
//   compute [10.5, 30.5) -> [11, 30); comm [25.2, 35.3) -> [26, 35): overlap 4 of 9.
//   A 0.5 us kernel at 40.2 becomes [41, 40]: HTA's merge keeps it, inverted, and its
//   compute total is 19 - 1 = 18.
// Exact arithmetic would say 5.3 of 10.1 (52.48%).
TEST(HtaOverlapTest, FractionalTimesRoundInwardAsHtaDoes) {
  KinetoBuilder b(0);
  b.kernel("gemm", 10.5, 20.0, 7, 1)
      .nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 25.2, 10.1, 2)
      .kernel("tiny", 40.2, 0.5, 7, 3);
  const ImportResult r = import_text(b.str());
  const HtaOverlap& h = r.hta(r.ranks[0], false);
  EXPECT_DOUBLE_EQ(h.comm_us, 9);
  EXPECT_DOUBLE_EQ(h.overlap_us, 4);
  EXPECT_DOUBLE_EQ(h.hidden_pct, 44.44);
  EXPECT_DOUBLE_EQ(h.compute_us, 18);
}

// Integer timestamp literals ("ts": 10, not 10.0) with a fractional duration: no rounding.
// With one "ts": 10.0, or one entry without a ts (pandas reads a NaN), HTA rounds.
TEST(HtaOverlapTest, IntegerTimestampsAreNotRounded) {
  const auto trace = [](const nlohmann::json& ts, bool entry_without_ts) {
    nlohmann::json events = nlohmann::json::array();
    events.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "gemm"}, {"pid", 0}, {"tid", 7},
                      {"ts", ts}, {"dur", 20.5}, {"args", {{"stream", 7}, {"correlation", 1}}}});
    events.push_back({{"ph", "X"}, {"cat", "kernel"},
                      {"name", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}, {"pid", 0},
                      {"tid", 20}, {"ts", 25}, {"dur", 10},
                      {"args", {{"stream", 20}, {"correlation", 2}}}});
    if (entry_without_ts) events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 0}});
    return import_text(nlohmann::json{{"traceEvents", events}}.dump());
  };
  // Integer: overlap [25, 30.5) = 5.5 of 10. Rounded: [25, 30) = 5 of 10.
  ImportResult r = trace(10, false);
  EXPECT_DOUBLE_EQ(r.hta(r.ranks[0], false).hidden_pct, 55);
  r = trace(10.0, false);
  EXPECT_DOUBLE_EQ(r.hta(r.ranks[0], false).hidden_pct, 50);
  r = trace(10, true);
  EXPECT_DOUBLE_EQ(r.hta(r.ranks[0], false).hidden_pct, 50);
}

// HTA keeps a GPU event only when a CPU event carries its correlation, also with fewer
// than two ProfilerStep names (it then keeps CPU events up to the marks' end); a trace
// without CPU events keeps every GPU event.
TEST(HtaOverlapTest, KernelsWithoutALaunchAreLeftOutOnceTheTraceHasCpuEvents) {
  KinetoBuilder b(0);
  b.profiler_step(1, 0, 1000).launch(1, 1).launch(2, 2);
  b.kernel("gemm", 10, 10, 7, 1).nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 15, 10, 2);
  b.kernel("orphan_gemm", 20, 10, 7, 99);  // correlation 99: no CPU event carries it
  b.kernel("late_gemm", 20, 10, 7, 3);
  b.launch(1500, 3);  // launched after the only mark ended
  const ImportResult r = import_text(b.str());
  const HtaOverlap& h = r.hta(r.ranks[0], false);
  EXPECT_EQ(h.kernels, 2u);
  EXPECT_DOUBLE_EQ(h.hidden_pct, 50);  // [15,20) of [15,25)
}

TEST(HtaOverlapTest, KernelTypesFollowHtaNames) {
  EXPECT_EQ(hta_kernel_type("ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            HtaKernelType::kCommunication);
  EXPECT_EQ(hta_kernel_type("ncclKernel_AllGather_RING_LL_Sum_int8_t"),
            HtaKernelType::kCommunication);
  EXPECT_EQ(hta_kernel_type("nccl_helper"), HtaKernelType::kComputation);  // no "Kernel"
  EXPECT_EQ(hta_kernel_type("Memcpy DtoD (Device -> Device)"), HtaKernelType::kMemory);
  EXPECT_EQ(hta_kernel_type("Memset (Device)"), HtaKernelType::kMemory);
  EXPECT_EQ(hta_kernel_type("void at::foo<Memcpy>"), HtaKernelType::kOther);
  EXPECT_EQ(hta_kernel_type("Event Sync"), HtaKernelType::kOther);
  EXPECT_EQ(hta_kernel_type("sm90_xmma_gemm_bf16"), HtaKernelType::kComputation);
}

TEST(HtaOverlapTest, PythonsFloatOfTheWrittenDecimal) {
  EXPECT_DOUBLE_EQ(hta_us(1'500), 1.5);
  EXPECT_DOUBLE_EQ(hta_us(-2'250), -2.25);
  // 1.7e15 us (an epoch timestamp) has a spacing of 0.25 us: .1 rounds down to the integer.
  EXPECT_EQ(hta_us(1'700'000'000'000'000'100), 1'700'000'000'000'000.0);
}

// Collectives: the type from "Collective name", sizes as nccl-tests.
TEST(CollectivesTest, SizesAndBandwidthsAsNcclTests) {
  KinetoBuilder b(0);
  b.profiler_step(1, 0, 10'000).launch(1, 1).launch(2, 2).launch(3, 3).launch(4, 4);
  // 1 Mi floats all-reduced by 8 ranks in 1000 us: 4 MiB, algbw 4.194 GB/s, busbw x 7/4.
  b.nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 100, 1000, 1, "allreduce", 1 << 20,
         1 << 20, 8, "Float");
  // All-gather of 1024 bf16 per rank to 8192: size is the output, 16 KiB.
  b.nccl("ncclDevKernel_AllGather_RING_LL", 2000, 10, 2, "_allgather_base", 1024, 8192, 8,
         "BFloat16");
  // All-to-all runs as SendRecv kernels; the argument says what it was.
  b.nccl("ncclDevKernel_SendRecv", 3000, 100, 3, "all_to_all", 4096, 4096, 4, "Float");
  // No arguments: the name says SendRecv, the size is unknown.
  b.nccl("ncclDevKernel_SendRecv", 4000, 50, 4);
  // A compute kernel under the first half of the all-reduce.
  b.kernel("gemm", 100, 500, 7, 1);
  const ImportResult r = import_text(b.str());
  const AnalyzeResult a = analyze_imports(r, nullptr, 0);
  ASSERT_EQ(a.collectives.size(), 4u);
  const CollectiveRow& ar = a.collectives[0];
  EXPECT_EQ(ar.type, CollectiveType::kAllReduce);
  EXPECT_EQ(ar.bytes, 4 << 20);
  EXPECT_EQ(ar.group_size, 8);
  EXPECT_EQ(ar.dtype, "Float");
  EXPECT_DOUBLE_EQ(ar.hidden_share(), 0.5);
  EXPECT_NEAR(ar.algbw_gbps(), 4.194304, 1e-9);
  EXPECT_NEAR(ar.busbw_gbps(), 4.194304 * 1.75, 1e-9);
  EXPECT_EQ(a.collectives[1].type, CollectiveType::kAllToAll);
  EXPECT_EQ(a.collectives[1].bytes, 4096 * 4);
  EXPECT_NEAR(a.collectives[1].busbw_gbps(), 16384.0 / 100'000 * 0.75, 1e-12);
  EXPECT_EQ(a.collectives[2].type, CollectiveType::kSendRecv);
  EXPECT_EQ(a.collectives[2].bytes, -1);
  EXPECT_TRUE(std::isnan(a.collectives[2].busbw_gbps()));
  EXPECT_EQ(a.collectives[3].type, CollectiveType::kAllGather);
  EXPECT_EQ(a.collectives[3].bytes, 8192 * 2);
  // The span carries the kind and bytes too.
  for (const Span& s : r.timeline.spans) {
    if (s.lane == Lane::kComm && s.start_ns == us(100)) {
      EXPECT_EQ(s.kind, SpanKind::kAllreduce);
      EXPECT_EQ(s.bytes, 4 << 20);
    }
  }
}

// An NCCL kernel without arguments takes those of the record_param_comms op around its
// launch.
TEST(CollectivesTest, KernelWithoutArgumentsTakesTheCpuOpsAroundItsLaunch) {
  KinetoBuilder b(0);
  b.event({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "record_param_comms"}, {"pid", 1},
           {"tid", 1}, {"ts", 5}, {"dur", 10},
           {"args", {{"Collective name", "reduce_scatter_tensor_coalesced"},
                     {"In msg nelems", 8000}, {"Out msg nelems", 1000}, {"Group size", 8},
                     {"dtype", "Half"}}}});
  b.launch(8, 1).nccl("ncclDevKernel_ReduceScatter_Sum_f16_RING_LL", 100, 10, 1);
  const ImportResult r = import_text(b.str());
  ASSERT_EQ(r.comm.size(), 1u);
  EXPECT_EQ(r.comm[0].type, CollectiveType::kReduceScatter);
  EXPECT_EQ(r.comm[0].bytes, 16000);  // the input, 8000 halves
  EXPECT_EQ(r.comm[0].group_size, 8);
}

// NCCL runs send/recv and all-to-all as SendRecv kernels: one without arguments takes
// the collective of the op around its launch.
TEST(CollectivesTest, SendRecvKernelTakesTheAllToAllOfItsOp) {
  KinetoBuilder b(0);
  b.event({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "record_param_comms"}, {"pid", 1},
           {"tid", 1}, {"ts", 5}, {"dur", 10},
           {"args", {{"Collective name", "all_to_all"}, {"In msg nelems", 1000},
                     {"Out msg nelems", 1000}, {"Group size", 4}, {"dtype", "Float"}}}});
  b.launch(8, 1).nccl("ncclDevKernel_SendRecv", 100, 10, 1);
  const ImportResult r = import_text(b.str());
  ASSERT_EQ(r.comm.size(), 1u);
  EXPECT_EQ(r.comm[0].type, CollectiveType::kAllToAll);
  EXPECT_EQ(r.comm[0].bytes, 4000);
  EXPECT_EQ(r.comm[0].group_size, 4);
}

// A size beyond int64 (hostile arguments) is unknown, not wrapped around.
TEST(CollectivesTest, AnAbsurdElementCountLeavesTheSizeUnknown) {
  KinetoBuilder b(0);
  b.nccl("ncclDevKernel_AllReduce_Sum_f64_RING_LL", 100, 10, 1, "allreduce",
         4611686018427387905L, 4611686018427387905L, 2, "Double");
  const ImportResult r = import_text(b.str());
  ASSERT_EQ(r.comm.size(), 1u);
  EXPECT_EQ(r.comm[0].bytes, -1);
}

TEST(CollectivesTest, TypesFromNamesAndDtypeSizes) {
  EXPECT_EQ(collective_type("reduce_scatter_tensor_coalesced"), CollectiveType::kReduceScatter);
  EXPECT_EQ(collective_type("allgather_into_tensor_coalesced"), CollectiveType::kAllGather);
  EXPECT_EQ(collective_type("ncclDevKernel_Broadcast_RING_LL"), CollectiveType::kBroadcast);
  EXPECT_EQ(collective_type("ncclDevKernel_Reduce_Sum_f32_RING_LL"), CollectiveType::kReduce);
  EXPECT_EQ(collective_type("gloo:all_reduce"), CollectiveType::kAllReduce);
  EXPECT_EQ(collective_type("alltoall_base"), CollectiveType::kAllToAll);
  EXPECT_EQ(collective_type("gemm"), CollectiveType::kUnknown);
  EXPECT_EQ(dtype_bytes("BFloat16"), 2);
  EXPECT_EQ(dtype_bytes("c10::Half"), 2);
  EXPECT_EQ(dtype_bytes("Long"), 8);
  EXPECT_EQ(dtype_bytes("Float8_e4m3fn"), 1);
  EXPECT_EQ(dtype_bytes("mystery"), std::nullopt);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveType::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveType::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveType::kBroadcast, 4), 1);
  EXPECT_TRUE(std::isnan(bus_factor(CollectiveType::kAllReduce, -1)));
}

// One file, two GPUs: two ranks, each with its own HTA number.
TEST(MultiGpuFileTest, EachDeviceIsARank) {
  KinetoBuilder b;  // no distributedInfo: rank from file order (0)
  const auto kernel_on = [&](int device, const std::string& name, double ts, double dur) {
    b.event({{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"pid", device}, {"tid", 7},
             {"ts", ts}, {"dur", dur}, {"args", {{"device", device}, {"stream", 7}}}});
  };
  kernel_on(0, "gemm", 0, 10);
  kernel_on(0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 5, 10);  // 5 of 10 hidden
  kernel_on(1, "gemm", 0, 10);
  kernel_on(1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 10);  // all hidden
  const ImportResult r = import_text(b.str());
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.timeline.ranks, 2);
  EXPECT_EQ(r.files[0].devices, 2u);
  EXPECT_EQ(r.ranks[0].device, 0);
  EXPECT_EQ(r.ranks[1].device, 1);
  EXPECT_DOUBLE_EQ(r.hta(r.ranks[0], false).hidden_pct, 50);
  EXPECT_DOUBLE_EQ(r.hta(r.ranks[1], false).hidden_pct, 100);
  int on_rank1 = 0;
  for (const Span& s : r.timeline.spans) on_rank1 += s.rank == 1;
  EXPECT_EQ(on_rank1, 2);
}

TEST(MultiGpuFileTest, ItsRanksCollideWithAnotherFilesRankClearly) {
  KinetoBuilder two;  // no distributedInfo: a rank per device, 0 and 1
  for (int device : {0, 1}) {
    two.event({{"ph", "X"}, {"cat", "kernel"}, {"name", "gemm"}, {"pid", device}, {"tid", 7},
               {"ts", 0}, {"dur", 10}, {"args", {{"device", device}, {"stream", 7}}}});
  }
  KinetoBuilder one(1);
  one.kernel("gemm", 0, 10);
  TraceImporter importer;
  importer.add_bytes(two.str(), "a.json", 0);
  EXPECT_THROW(
      {
        try {
          importer.add_bytes(one.str(), "b.json", 1);
        } catch (const UsageError& e) {
          EXPECT_STREQ(e.what(), "b.json: rank 1 is also in a.json (one trace per rank)");
          throw;
        }
      },
      UsageError);
}

// A distributed job's file is one rank, whatever devices it names (a stray memset on
// device 0 must not move the rank's work to rank r + 1); HTA's number for a split file
// as a whole is kept too.
TEST(MultiGpuFileTest, ADistributedJobsFileStaysOneRank) {
  KinetoBuilder b(3);
  b.event({{"ph", "X"}, {"cat", "gpu_memset"}, {"name", "Memset (Device)"}, {"pid", 0},
           {"tid", 7}, {"ts", 0}, {"dur", 1}, {"args", {{"device", 0}, {"stream", 7}}}});
  b.event({{"ph", "X"}, {"cat", "kernel"}, {"name", "gemm"}, {"pid", 3}, {"tid", 7},
           {"ts", 0}, {"dur", 10}, {"args", {{"device", 3}, {"stream", 7}}}});
  const ImportResult r = import_text(b.str());
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].rank, 3);
  EXPECT_EQ(r.files[0].devices, 2u);
  EXPECT_FALSE(r.files[0].hta_file);
  for (const Span& s : r.timeline.spans) EXPECT_EQ(s.rank, 3);
}

TEST(MultiGpuFileTest, ASplitFileAlsoHasHtasWholeFileNumber) {
  KinetoBuilder b;
  const auto kernel_on = [&](int device, const std::string& name, int ts, int dur) {
    b.event({{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"pid", device}, {"tid", 7},
             {"ts", ts}, {"dur", dur}, {"args", {{"device", device}, {"stream", 7}}}});
  };
  kernel_on(0, "gemm", 0, 10);
  kernel_on(1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 5, 10);  // device 1: no compute
  const ImportResult r = import_text(b.str());
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(r.hta(r.ranks[1], false).hidden_pct, 0);
  ASSERT_TRUE(r.files[0].hta_file);
  // HTA merges the file's devices: comm [5,15) against compute [0,10) -> 50%.
  EXPECT_DOUBLE_EQ(r.files[0].hta_file->last_step_in.hidden_pct, 50);
}

// A CPU-only DDP job (gloo): CPU operators are the compute, gloo ops the communication,
// sized by the record_param_comms op they start in.
TEST(CpuOnlyTraceTest, GlooJobIsAnalyzed) {
  KinetoBuilder b(0);
  b.profiler_step(1, 0, 1000);
  b.cpu_op("aten::linear", 10, 100).cpu_op("aten::addmm", 20, 50);  // nested: one interval
  b.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", 200, 300);
  b.event({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "record_param_comms"}, {"pid", 100},
           {"tid", 100}, {"ts", 600}, {"dur", 5},
           {"args", {{"Collective name", "allreduce"}, {"In msg nelems", 250},
                     {"Out msg nelems", 250}, {"Group size", 2}, {"dtype", "Float"}}}});
  b.event({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "gloo:all_reduce"}, {"pid", 100},
           {"tid", 101}, {"ts", 602}, {"dur", 200}, {"args", {{"External id", 5}}}});
  b.cpu_op("Optimizer.step#SGD.step", 700, 100);  // overlaps the all-reduce by 100
  const ImportResult r = import_text(b.str());
  const Timeline& t = r.timeline;
  std::size_t compute = 0;
  for (const Span& s : t.spans) compute += s.lane == Lane::kCompute;
  EXPECT_EQ(compute, 3u);
  ASSERT_EQ(r.comm.size(), 1u);
  EXPECT_EQ(r.comm[0].type, CollectiveType::kAllReduce);
  EXPECT_EQ(r.comm[0].bytes, 1000);
  const IterationMetrics m = iteration(t, 0, 1);
  EXPECT_EQ(m.t_comm_ns, us(200));
  EXPECT_EQ(m.t_ovl_ns, us(100));
}

// A thread's CPU ops out of start order still make one outermost interval each.
TEST(CpuOnlyTraceTest, OpsOutOfOrderAreMergedPerThread) {
  KinetoBuilder b(0);
  b.profiler_step(1, 0, 1000);
  b.cpu_op("aten::addmm", 20, 50).cpu_op("aten::linear", 10, 100);  // child first
  b.cpu_op("aten::relu", 300, 10);
  const ImportResult r = import_text(b.str());
  std::vector<std::pair<std::int64_t, std::int64_t>> compute;
  for (const Span& s : r.timeline.spans) {
    if (s.lane == Lane::kCompute) compute.emplace_back(s.start_ns, s.end_ns);
  }
  std::sort(compute.begin(), compute.end());
  EXPECT_EQ(compute, (std::vector<std::pair<std::int64_t, std::int64_t>>{{us(10), us(110)},
                                                                         {us(300), us(310)}}));
}

// Kernel slowdown: the run's gemm takes 12 us where the baseline's took 10.
TEST(KernelSlowdownTest, MatchedByNameAndOccurrence) {
  KinetoBuilder run(0);
  run.profiler_step(1, 0, 1000).launch(1, 1).launch(2, 2).launch(3, 3).launch(4, 4).launch(5, 5);
  run.kernel("gemmA", 100, 12, 7, 1).kernel("gemmA", 200, 12, 7, 2).kernel("gemmB", 300, 10, 7, 3);
  run.kernel("only_in_run", 400, 5, 7, 4);
  // An all-reduce over the first gemmA's last 5 us.
  run.nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 107, 20, 5, "allreduce", 1024, 1024, 2);
  KinetoBuilder base(0);
  base.profiler_step(7, 0, 1000).launch(1, 1).launch(2, 2).launch(3, 3).launch(4, 4);
  base.kernel("gemmA", 100, 10, 7, 1).kernel("gemmA", 200, 10, 7, 2);
  base.kernel("gemmB", 300, 10, 7, 3).kernel("gemmB", 400, 10, 7, 4);
  const ImportResult r = import_text(run.str());
  const ImportResult b = import_text(base.str());
  const AnalyzeResult a = analyze_imports(r, &b, 0);
  ASSERT_TRUE(a.kernels);
  const KernelSlowdownReport& k = *a.kernels;
  EXPECT_EQ(k.iterations_paired, 1u);
  EXPECT_EQ(k.unmatched_run, 1u);       // only_in_run
  EXPECT_EQ(k.unmatched_baseline, 1u);  // the second gemmB
  EXPECT_EQ(k.names_only_run, 1u);
  EXPECT_EQ(k.names_only_baseline, 0u);
  ASSERT_EQ(k.kernels.size(), 2u);
  const KernelSlowdown& gemm = k.kernels[0];  // +4 us, first
  EXPECT_EQ(gemm.name, "gemmA");
  EXPECT_EQ(gemm.count, 2u);
  EXPECT_EQ(gemm.alone_ns, us(20));
  EXPECT_EQ(gemm.overlapped_ns, us(24));
  EXPECT_DOUBLE_EQ(gemm.slowdown(), 0.2);
  EXPECT_EQ(gemm.under_comm_ns, us(5));
  ASSERT_EQ(gemm.collectives.size(), 1u);
  EXPECT_EQ(gemm.collectives[0].type, CollectiveType::kAllReduce);
  EXPECT_EQ(gemm.collectives[0].bytes, 4096);
  EXPECT_EQ(gemm.collectives[0].overlap_ns, us(5));
  EXPECT_EQ(k.kernels[1].name, "gemmB");
  EXPECT_DOUBLE_EQ(k.kernels[1].slowdown(), 0);
}

}  // namespace
}  // namespace tandem::testing
