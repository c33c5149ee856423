// The replay of PyTorch profiles (experiment/profile_replay.h, Note [profile graph]) on
// hand-built two-rank traces whose replays and what-ifs are computed by hand.
#include "experiment/profile_replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "analysis/metrics.h"
#include "core/error.h"
#include "import/kineto_builder.h"

namespace tandem {
namespace {

using testing::KinetoBuilder;

constexpr const char* kAllReduce = "ncclDevKernel_AllReduce_Sum_f32_RING_LL";

// One rank of a DDP-like job, every time in us from the step's start t0 (steps 1000 us
// apart): two forward and two backward kernels on stream 7, `slow` making backward's
// first kernel slower; an all-reduce after each backward kernel on stream 20, each
// started 2 us after its gradients (a stream wait) and ending 150 us after the later
// rank (rank 1, slow 30) started it (the first `first_extra` us later); the optimizer 3 us
// after the second all-reduce.
// Every kernel launched 300 us before it runs (the CPU ahead of the GPU), but each step's
// first, launched 2 us before: the CPU waited for the step before (a loss.item()).
struct DdpRank {
  KinetoBuilder trace;
  long correlation = 0;

  DdpRank(int rank, int slow, int steps = 3, int fwd2 = 100, int first_extra = 0) : trace(rank) {
    for (int step = 0; step < steps; ++step) {
      const double t0 = 1000 + 1000.0 * step;
      trace.profiler_step(step, t0 - 400, 999);
      kernel("fwd1", t0, 100, 2);
      kernel("fwd2", t0 + 100, fwd2);
      kernel("bwd2", t0 + 100 + fwd2, 200 + slow);
      kernel("bwd1", t0 + 300 + fwd2 + slow, 200);
      const double last_a = t0 + 100 + fwd2 + 232;  // rank 1's bwd2 end + 2
      nccl(t0 + 100 + fwd2 + 200 + slow + 2, last_a + 150 + first_extra);
      const double last_b = t0 + 100 + fwd2 + 432;
      nccl(t0 + 100 + fwd2 + 400 + slow + 2, last_b + 150);
      kernel("sgd", last_b + 153, 100);
    }
  }
  void kernel(const std::string& name, double ts, double dur, double ahead = 300) {
    const long c = ++correlation;
    trace.launch(ts - ahead, c).kernel(name, ts, dur, 7, c);
  }
  void nccl(double ts, double end) {
    const long c = ++correlation;
    trace.launch(ts - 300, c).nccl(kAllReduce, ts, end - ts, c, "allreduce", 1 << 20, 1 << 20, 2);
  }
};

ImportResult import_ranks(const std::vector<std::string>& traces) {
  TraceImporter importer;
  for (std::size_t r = 0; r < traces.size(); ++r) {
    importer.add_bytes(traces[r], "rank" + std::to_string(r) + ".json", static_cast<int>(r));
  }
  return importer.finish();
}

ImportResult ddp_job(int fwd2 = 100) {
  return import_ranks({DdpRank(0, 0, 3, fwd2).trace.str(), DdpRank(1, 30, 3, fwd2).trace.str()});
}

// Every step's E2E (the slowest rank's iteration window), us.
std::vector<double> e2e_us(const Timeline& t) {
  std::vector<double> out;
  for (const StepMetrics& m : compute_step_metrics(t)) out.push_back(m.e2e_ns / 1e3);
  return out;
}

const Span& span_named(const Timeline& t, int rank, int step, const std::string& name) {
  for (const Span& s : t.spans) {
    if (s.rank == rank && s.step == step && t.names->name(s.name) == name) return s;
  }
  ADD_FAILURE() << "no span " << name << " on rank " << rank << " step " << step;
  return t.spans.front();
}

TEST(ProfileReplay, ReplayWithoutAWhatIfReproducesEverySpan) {
  const ImportResult job = ddp_job();
  const ProfileReplay r = replay_profile(job, {});
  ASSERT_EQ(r.replayed.spans.size(), job.timeline.spans.size());
  for (std::size_t i = 0; i < job.timeline.spans.size(); ++i) {
    EXPECT_EQ(r.replayed.spans[i].start_ns, job.timeline.spans[i].start_ns) << i;
    EXPECT_EQ(r.replayed.spans[i].end_ns, job.timeline.spans[i].end_ns) << i;
  }
  EXPECT_EQ(r.stats.collectives, 6u);  // two all-reduces a step, three steps
  EXPECT_EQ(r.stats.unmatched_comm, 0u);
  // Each all-reduce waited for its gradients, each optimizer for its all-reduce, and each
  // step's backward... on stream 7 for nothing else: 3 a step and rank.
  EXPECT_EQ(r.stats.cross_queue, 18u);
  EXPECT_EQ(e2e_us(r.what_if), e2e_us(job.timeline));
}

TEST(ProfileReplay, FasterNetworkShortensTransfersAndWhatWaitsForThem) {
  const ImportResult job = ddp_job();
  WhatIf w;
  w.network = 2;
  const ProfileReplay r = replay_profile(job, w);
  // By hand: the second all-reduce's last start is t0 + 632 on both ranks; its 150 us
  // transfer becomes 75, so it ends at t0 + 707 and the optimizer runs 710..810.
  for (int step = 0; step < 3; ++step) {
    const std::int64_t t0 = 1'000'000 + 1'000'000LL * step;
    const Span& sgd = span_named(r.what_if, 0, step, "sgd");
    EXPECT_EQ(sgd.start_ns, t0 + 710'000);
    EXPECT_EQ(sgd.end_ns, t0 + 810'000);
  }
  for (double e : e2e_us(r.what_if)) EXPECT_DOUBLE_EQ(e, 810);
  for (double e : e2e_us(r.replayed)) EXPECT_DOUBLE_EQ(e, 885);
  // Compute is not the network's: the backward kernels stay where they were.
  EXPECT_EQ(span_named(r.what_if, 1, 1, "bwd1").start_ns,
            span_named(job.timeline, 1, 1, "bwd1").start_ns);
}

TEST(ProfileReplay, OverlapOffRunsEachRanksQueuesAsOne) {
  const ImportResult job = ddp_job();
  WhatIf w;
  w.overlap_off = true;
  const ProfileReplay r = replay_profile(job, w);
  // By hand: the first all-reduce cannot start before bwd1 ends (rank 1's at t0 + 630),
  // ends at 630 + 150; the second, 2 us after it (its own latency after its gradients and
  // its stream), 782 .. 932; the optimizer 3 us after that: 935 .. 1035.
  for (double e : e2e_us(r.what_if)) EXPECT_DOUBLE_EQ(e, 1035);
  // Nothing overlaps on any rank.
  for (const IterationMetrics& m : compute_iteration_metrics(r.what_if)) {
    EXPECT_EQ(m.t_ovl_ns, 0) << "rank " << m.rank << " step " << m.step;
  }
}

TEST(ProfileReplay, ContentionOffGivesOverlappedKernelsTheirUnoverlappedTime) {
  // bwd1 runs beside the first all-reduce; a copy of it that overlaps nothing (an extra
  // kernel of the same name after the optimizer, 160 us instead of 200) says what it
  // costs alone.
  std::vector<std::string> traces;
  for (int rank = 0; rank < 2; ++rank) {
    DdpRank job(rank, 30 * rank, 1);
    job.kernel("bwd1", 2000, 160);
    traces.push_back(job.trace.str());
  }
  WhatIf w;
  w.contention_off = true;
  const ProfileReplay r = replay_profile(import_ranks(traces), w);
  // bwd1 at 160 us: rank 1's gradients of bucket b ready at t0 + 590, its all-reduce at
  // 592, ends at 592 + 150; the optimizer 745 .. 845. Rank 0 (bwd1 400 .. 560) joins it.
  EXPECT_EQ(span_named(r.what_if, 1, 0, "sgd").start_ns, 1'745'000);
  // bwd1 and the first all-reduce on each rank (the all-reduce at the second one's
  // transfer, which nothing overlapped: the same 150 us).
  EXPECT_EQ(r.stats.contention_changed, 4u);
  // Compute-bound spans no communication overlapped keep their time.
  const Span& fwd = span_named(r.what_if, 0, 0, "fwd2");
  EXPECT_EQ(fwd.end_ns - fwd.start_ns, 100'000);
}

TEST(ProfileReplay, SlowdownOffGivesOnlyTheKernelsTheirUnoverlappedTime) {
  // As above, with the first all-reduce, beside bwd1, 40 us longer than the second, which
  // overlapped nothing: slowdown=off keeps its 190 us, contention=off gives it 150.
  std::vector<std::string> traces;
  for (int rank = 0; rank < 2; ++rank) {
    DdpRank job(rank, 30 * rank, 1, 100, /*first_extra=*/40);
    job.kernel("bwd1", 2000, 160);
    traces.push_back(job.trace.str());
  }
  const ImportResult run = import_ranks(traces);
  WhatIf w;
  w.slowdown_off = true;
  EXPECT_EQ(w.describe(), "slowdown off");
  const ProfileReplay r = replay_profile(run, w);
  EXPECT_EQ(r.stats.contention_changed, 2u);  // bwd1 on each rank, nothing else
  // By hand: rank 1's bwd1 ends at t0 + 590, but the first all-reduce (432 .. 622) holds
  // the stream: the second starts its 2 us after it, transfers 624 .. 774, and the
  // optimizer starts 3 us after that.
  const Span& first = span_named(r.what_if, 1, 0, kAllReduce);
  EXPECT_EQ(first.end_ns - first.start_ns, 190'000);
  EXPECT_EQ(span_named(r.what_if, 1, 0, "sgd").start_ns, 1'777'000);
  w.contention_off = true;
  const ProfileReplay both = replay_profile(run, w);
  EXPECT_EQ(both.stats.contention_changed, 4u);
  EXPECT_EQ(span_named(both.what_if, 1, 0, "sgd").start_ns, 1'745'000);
}

TEST(ProfileReplay, AComputeOnlyProfilePricesKernelsThatAlwaysOverlapped) {
  // The same job without its extra alone copy of bwd1: only a compute-only profile of it
  // (bwd1 160 us) says what bwd1 costs alone, and gives the same what-if.
  std::vector<std::string> traces, alone;
  for (int rank = 0; rank < 2; ++rank) {
    traces.push_back(DdpRank(rank, 30 * rank, 1).trace.str());
    KinetoBuilder b(rank);
    b.kernel("bwd1", 0, 160, 7).kernel("fwd2", 200, 100, 7);
    alone.push_back(b.str());
  }
  WhatIf w;
  w.contention_off = true;
  const ImportResult run = import_ranks(traces);
  const ProfileReplay without = replay_profile(run, w);
  EXPECT_EQ(span_named(without.what_if, 1, 0, "sgd").start_ns, 1'785'000);  // nothing to go by
  const ImportResult baseline = import_ranks(alone);
  const ProfileReplay r = replay_profile(run, w, &baseline);
  EXPECT_EQ(span_named(r.what_if, 1, 0, "sgd").start_ns, 1'745'000);
}

TEST(ProfileReplay, AGapLongerThanTheWindowIsNotAWait) {
  // Rank 0's optimizer starts 1 ms after its all-reduce ends (something on the CPU held
  // it), far beyond kDependencyWindow: a faster network must not move it.
  std::vector<std::string> traces;
  for (int rank = 0; rank < 2; ++rank) {
    KinetoBuilder t(rank);
    t.launch(0, 1).kernel("bwd", 100, 200, 7, 1);
    t.launch(0, 2).nccl(kAllReduce, 302, 300, 2, "allreduce", 1 << 20, 1 << 20, 2);
    t.launch(0, 3).kernel("sgd", 1602, 100, 7, 3);
    traces.push_back(t.str());
  }
  WhatIf w;
  w.network = 3;
  const ProfileReplay r = replay_profile(import_ranks(traces), w);
  EXPECT_EQ(span_named(r.what_if, 0, 0, kAllReduce).end_ns, 402'000);
  EXPECT_EQ(span_named(r.what_if, 0, 0, "sgd").start_ns, 1'602'000);
}

// A "cuda_sync" Stream Wait Event as PyTorch writes it with enable_cuda_sync_events:
// `stream` waits for the event that the runtime call of correlation `record` recorded on
// `on`; its own correlation is the cudaStreamWaitEvent call's.
nlohmann::json stream_wait(double ts, int stream, int on, long record, long correlation) {
  return {{"ph", "X"},
          {"cat", "cuda_sync"},
          {"name", "Stream Wait Event"},
          {"pid", 0},
          {"tid", stream},
          {"ts", ts},
          {"dur", 0},
          {"args",
           {{"cuda_sync_kind", "Stream Wait Event"},
            {"stream", stream},
            {"correlation", correlation},
            {"device", 0},
            {"wait_on_stream", on},
            {"wait_on_cuda_event_record_corr_id", record}}}};
}

TEST(ProfileReplay, RecordedStreamWaitsAreTheGraphsEdges) {
  // Backward on stream 7, an event recorded after it; the all-reduce's stream 20 waits for
  // it; the optimizer's stream waits for an event recorded after the all-reduce, and starts
  // 80 us after it ends: beyond kDependencyWindow, so only the recorded wait links them.
  std::vector<std::string> traces;
  for (int rank = 0; rank < 2; ++rank) {
    KinetoBuilder t(rank);
    t.launch(0, 1).kernel("bwd", 100, 200, 7, 1);
    t.launch(1, 2);  // cudaEventRecord on stream 7
    t.launch(2, 3).event(stream_wait(300, 20, 7, 2, 3));
    t.launch(3, 4).nccl(kAllReduce, 310, 300, 4, "allreduce", 1 << 20, 1 << 20, 2);
    t.launch(4, 5);  // cudaEventRecord on stream 20
    t.launch(5, 6).event(stream_wait(610, 7, 20, 5, 6));
    t.launch(6, 7).kernel("sgd", 690, 100, 7, 7);
    traces.push_back(t.str());
  }
  const ImportResult job = import_ranks(traces);
  ASSERT_EQ(job.stream_waits.size(), 4u);
  WhatIf w;
  w.network = 2;
  const ProfileReplay r = replay_profile(job, w);
  EXPECT_EQ(r.stats.explicit_waits, 4u);
  EXPECT_EQ(r.stats.cross_queue, 0u);  // nothing read from the timing on these ranks
  // The transfer at 150 us: the all-reduce ends at 460, the optimizer 80 us later.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(span_named(r.what_if, rank, 0, kAllReduce).end_ns, 460'000) << rank;
    EXPECT_EQ(span_named(r.what_if, rank, 0, "sgd").start_ns, 540'000) << rank;
  }
  for (std::size_t i = 0; i < job.timeline.spans.size(); ++i) {
    EXPECT_EQ(r.replayed.spans[i].start_ns, job.timeline.spans[i].start_ns) << i;
  }
}

TEST(ProfileReplay, ALateRankKeepsItsPeerWaiting) {
  // Rank 1 reaches the all-reduce 100 us after rank 0; both end 50 us after it arrived.
  // With twice the network each ends 25 us after rank 1's start: rank 0 still waits
  // for it, the skew is not the network's.
  std::vector<std::string> traces;
  for (int rank = 0; rank < 2; ++rank) {
    KinetoBuilder t(rank);
    const double compute = rank == 0 ? 100 : 200;
    t.launch(0, 1).kernel("bwd", 0, compute, 7, 1);
    t.launch(0, 2).nccl(kAllReduce, compute, 250 - compute, 2, "allreduce", 1 << 20, 1 << 20, 2);
    traces.push_back(t.str());
  }
  WhatIf w;
  w.network = 2;
  const ProfileReplay r = replay_profile(import_ranks(traces), w);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(span_named(r.what_if, rank, 0, kAllReduce).end_ns, 225'000) << rank;
  }
}

TEST(ProfileReplay, ClocksAreAlignedByTheCollectivesEnds) {
  // The late-rank job again, rank 1's trace on a clock 5 ms ahead: aligned by the
  // all-reduce's ends, the what-if is the same as on one clock, and each rank's spans
  // stay on its own clock.
  std::vector<std::string> traces;
  for (int rank = 0; rank < 2; ++rank) {
    KinetoBuilder t(rank);
    const double compute = rank == 0 ? 100 : 200;
    const double clock = rank == 0 ? 0 : 5000;
    t.launch(clock, 1).kernel("bwd", clock, compute, 7, 1);
    t.launch(clock, 2).nccl(kAllReduce, clock + compute, 250 - compute, 2, "allreduce", 1 << 20,
                            1 << 20, 2);
    traces.push_back(t.str());
  }
  WhatIf w;
  w.network = 2;
  const ProfileReplay r = replay_profile(import_ranks(traces), w);
  EXPECT_EQ(span_named(r.what_if, 0, 0, kAllReduce).end_ns, 225'000);
  EXPECT_EQ(span_named(r.what_if, 1, 0, kAllReduce).end_ns, 5'225'000);
  EXPECT_NE(
      std::find_if(r.notes.begin(), r.notes.end(),
                   [](const std::string& n) { return n.find("+5.000 ms") != std::string::npos; }),
      r.notes.end());
}

TEST(ProfileReplay, QueuedCollectivesAreNotCountedTwice) {
  // A CPU job (gloo): two all-reduces enqueued 10 us apart on two worker threads; gloo's
  // span opens at the enqueue, so the second's [110, 500) holds 190 us queued behind the
  // first's [100, 300); the main thread goes on when it ends. The job already ran
  // nothing beside its communication: with overlap off the second still moves its 200 us
  // after the first, and the step ends at 510 as measured, not at 300 + 390 + 10.
  std::vector<std::string> traces;
  for (int rank = 0; rank < 2; ++rank) {
    KinetoBuilder t(rank);
    const auto op = [&](const char* name, int tid, double ts, double dur) {
      t.event({{"ph", "X"},
               {"cat", "cpu_op"},
               {"name", name},
               {"pid", 1},
               {"tid", tid},
               {"ts", ts},
               {"dur", dur}});
    };
    op("aten::mm", 1, 0, 100);
    op("gloo:all_reduce", 2, 100, 200);
    op("gloo:all_reduce", 3, 110, 390);
    op("aten::add_", 1, 500, 10);
    traces.push_back(t.str());
  }
  WhatIf w;
  w.overlap_off = true;
  const ProfileReplay r = replay_profile(import_ranks(traces), w);
  ASSERT_EQ(r.stats.collectives, 2u);
  for (double e : e2e_us(r.what_if)) EXPECT_DOUBLE_EQ(e, 510);
}

TEST(ProfileReplay, AnyTraceReplaysOrIsRefusedInOneLine) {
  // Random two-rank traces (fixed seeds): kernels and all-reduces on a few streams, some
  // overlapping on their stream, some of zero length, collectives the ranks issued in
  // different numbers and orders, launches before or after their kernels. Each either
  // replays under every what-if, with as many spans, each ending no earlier than it
  // starts, or is refused with a UsageError; nothing else.
  std::mt19937_64 rng(7);
  const auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  int replayed = 0, refused = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> traces;
    for (int rank = 0; rank < 2; ++rank) {
      KinetoBuilder t(rank);
      const int events = 1 + pick(12);
      for (int e = 0; e < events; ++e) {
        const double ts = pick(500), dur = pick(4) == 0 ? 0 : pick(200);
        const long c = e + 1;
        if (pick(3) > 0) t.launch(ts + pick(100) - 50, c);
        if (pick(3) == 0) {
          t.nccl(kAllReduce, ts, dur, c, "allreduce", 1 << pick(4), 1 << pick(4), 2);
        } else if (pick(4) == 0) {
          t.nccl("ncclDevKernel_AllGather_RING_LL", ts, dur, c, "_allgather_base", 4, 8, 2);
        } else {
          t.kernel(pick(2) ? "a" : "b", ts, dur, 7 + pick(2), c);
        }
      }
      traces.push_back(t.str());
    }
    const ImportResult job = import_ranks(traces);
    for (int w = 0; w < 4; ++w) {
      WhatIf what;
      what.network = w == 1 ? 3 : 1;
      what.contention_off = w == 2;
      what.overlap_off = w == 3;
      try {
        const ProfileReplay r = replay_profile(job, what);
        ASSERT_EQ(r.what_if.spans.size(), job.timeline.spans.size());
        for (const Span& span : r.what_if.spans) EXPECT_GE(span.end_ns, span.start_ns);
        ++replayed;
      } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        ++refused;
      }
    }
  }
  EXPECT_GT(replayed, 0);
  EXPECT_GT(refused, 0);  // crossed collectives among them
}

TEST(ProfileReplay, RefusesWhatAProfileCannotReplay) {
  WhatIf ranks;
  ranks.ranks = 8;
  try {
    replay_profile(ddp_job(), ranks);
    FAIL() << "a rank count replayed";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--what-if ranks"), std::string::npos) << e.what();
  }
  WhatIf buckets;
  buckets.bucket_mb = 5;
  EXPECT_THROW(replay_profile(ddp_job(), buckets), UsageError);
  // Collectives issued in opposite orders on the two ranks cannot both have waited for
  // each other: the error names the collective.
  std::vector<std::string> traces;
  for (int rank = 0; rank < 2; ++rank) {
    KinetoBuilder t(rank);
    const char* first = rank == 0 ? "allreduce" : "_allgather_base";
    const char* second = rank == 0 ? "_allgather_base" : "allreduce";
    t.nccl(rank == 0 ? kAllReduce : "ncclDevKernel_AllGather_RING_LL", 0, 100, 1, first, 4, 4, 2);
    t.nccl(rank == 0 ? "ncclDevKernel_AllGather_RING_LL" : kAllReduce, 100, 100, 2, second, 4, 4,
           2);
    traces.push_back(t.str());
  }
  try {
    replay_profile(import_ranks(traces), {});
    FAIL() << "crossed collectives replayed";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("another order"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
