// Behaviour of the `local` backend beyond the shared contract: timeouts, errors, abort on
// destruction, determinism across bucketings, link emulation and comm spans.
#include "comm/local/local_comm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_name.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;

std::string error_of(Work& work) {
  try {
    work.wait();
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "(no RuntimeError)";
}

TEST(LocalComm, RejectsZeroRanks) {
  EXPECT_THROW(make_local_communicators(LocalOptions{.ranks = 0}), UsageError);
}

// The names tools show (top -H, perf): each communication thread says its rank, and a
// split made on a rank's thread is named after that thread.
std::vector<std::string> thread_names() {
  std::vector<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    names.push_back(name);
  }
  return names;
}

TEST(LocalComm, CommunicationThreadsAreNamedAfterTheirRank) {
  if (!std::filesystem::exists("/proc/self/task")) GTEST_SKIP() << "no /proc/self/task";
  std::thread([] {
    name_this_thread("a name longer than fifteen");
    EXPECT_EQ(this_thread_name(), "a name longer t");  // Linux keeps 15 characters
  }).join();
  auto comms = make_local_communicators(LocalOptions{.ranks = 2});
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  // A collective both threads carried: both have started, and named themselves.
  WorkPtr w0 = comms[0]->allreduce(a, ReduceOp::kSum);
  WorkPtr w1 = comms[1]->allreduce(b, ReduceOp::kSum);
  w0->wait();
  w1->wait();
  std::vector<std::string> names = thread_names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "tandem r0 comm"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "tandem r1 comm"), 1);
  // Rank 1's thread splits off a group of its own: the child's thread is named after it.
  std::unique_ptr<Communicator> child;
  std::thread rank1([&] {
    name_this_thread("tandem r1");
    child = comms[1]->split(1, 0);
  });
  std::unique_ptr<Communicator> child0 = comms[0]->split(0, 0);
  rank1.join();
  WorkPtr w = child->allreduce(b, ReduceOp::kSum);
  w->wait();
  names = thread_names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "tandem r1 comm"), 2);
}

TEST(LocalComm, BackendBasics) {
  auto comms = make_local_communicators(LocalOptions{.ranks = 3});
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->size(), 3);
    EXPECT_EQ(comms[r]->backend_name(), "local");
  }
}

TEST(LocalComm, WaitForTimesOutWhilePeerHasNotIssuedThenShutdownIsClean) {
  auto comms = make_local_communicators(LocalOptions{.ranks = 2});
  WorkPtr barrier = comms[0]->barrier();
  // Rank 1 never issues the barrier, so it cannot complete: false, whatever the timing.
  EXPECT_FALSE(barrier->wait_for(20ms));
  EXPECT_FALSE(barrier->test());
  EXPECT_EQ(barrier->exception(), nullptr);
  comms.clear();  // must not hang: aborts the world
  EXPECT_TRUE(barrier->test());
  EXPECT_NE(error_of(*barrier).find("aborted"), std::string::npos);
}

// A collective whose peer never arrives: its Work fails with a TimeoutError naming rank,
// operation and step, whether the waiter or the communication thread sees it first, and
// the withdrawn operation leaves nothing behind.
TEST(LocalComm, ACollectiveWhosePeerNeverArrivesTimesOutNamingIt) {
  auto comms = make_local_communicators(LocalOptions{.ranks = 2, .timeout = 50ms});
  std::vector<float> data(10, 1.0f);
  WorkPtr work = comms[0]->allreduce(data, ReduceOp::kSum, {.step = 4, .tag = 1});
  try {
    work->synchronize();
    FAIL() << "completed without rank 1";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: allreduce bucket 1 (40 B, step 4) not complete"),
              std::string::npos)
        << e.what();
  }
  bool ended = false;  // withdrawn by the communication thread, it ends failed
  try {
    ended = work->wait_for(1h);
  } catch (const TimeoutError&) {
    ended = true;
  }
  EXPECT_TRUE(ended);
  EXPECT_NE(work->exception(), nullptr);
  comms.clear();
}

TEST(LocalComm, TestTurnsTrueOnceAllRanksIssued) {
  auto comms = make_local_communicators(LocalOptions{.ranks = 2});
  WorkPtr first = comms[0]->barrier();
  EXPECT_FALSE(first->test());  // rank 1 has not issued yet
  WorkPtr second = comms[1]->barrier();
  EXPECT_TRUE(first->wait_for(1h));
  second->wait();
  EXPECT_TRUE(first->test());
  EXPECT_TRUE(second->test());
}

TEST(LocalComm, DestroyingWithPendingOperationsFailsThemWithoutHanging) {
  auto comms = make_local_communicators(LocalOptions{.ranks = 3});
  std::vector<float> data(1000, 1.0f), in(10);
  WorkPtr allreduce = comms[0]->allreduce(data, ReduceOp::kSum);
  WorkPtr queued = comms[0]->barrier();               // queued behind the allreduce
  WorkPtr recv = comms[2]->recv(in, 1, /*tag=*/4);    // parked: rank 1 never sends
  WorkPtr send = comms[1]->send(data, 2, /*tag=*/5);  // parked: wrong tag
  comms.clear();
  for (WorkPtr* w : {&allreduce, &queued, &recv, &send}) {
    EXPECT_NE(error_of(**w).find("aborted"), std::string::npos) << (*w)->info().describe();
  }
}

TEST(LocalComm, MismatchedSizesFailOnEveryRankAndTheWorldGoesOn) {
  auto comms = make_local_communicators(LocalOptions{.ranks = 2});
  std::vector<float> a(4, 1.0f), b(5, 1.0f);
  WorkPtr w0 = comms[0]->allreduce(a, ReduceOp::kSum);
  WorkPtr w1 = comms[1]->allreduce(b, ReduceOp::kSum);
  EXPECT_NE(error_of(*w0).find("size mismatch"), std::string::npos);
  EXPECT_NE(error_of(*w1).find("size mismatch"), std::string::npos);
  ASSERT_NE(w0->exception(), nullptr);
  EXPECT_THROW(std::rethrow_exception(w0->exception()), RuntimeError);

  WorkPtr m0 = comms[0]->allreduce(a, ReduceOp::kSum);
  WorkPtr m1 = comms[1]->barrier();
  EXPECT_NE(error_of(*m0).find("collective mismatch"), std::string::npos);
  EXPECT_NE(error_of(*m1).find("collective mismatch"), std::string::npos);

  std::vector<float> c(4, 2.0f);
  WorkPtr ok0 = comms[0]->allreduce(a, ReduceOp::kSum);
  WorkPtr ok1 = comms[1]->allreduce(c, ReduceOp::kSum);
  ok0->wait();
  ok1->wait();
  EXPECT_EQ(a, std::vector<float>(4, 3.0f));
  EXPECT_EQ(c, a);
}

TEST(LocalComm, MismatchedSendRecvSizesFailBothSides) {
  auto comms = make_local_communicators(LocalOptions{.ranks = 2});
  std::vector<float> out(6), in(5);
  WorkPtr send = comms[0]->send(out, 1, 0);
  WorkPtr recv = comms[1]->recv(in, 0, 0);
  EXPECT_NE(error_of(*send).find("size mismatch"), std::string::npos);
  EXPECT_NE(error_of(*recv).find("size mismatch"), std::string::npos);
}

// Bitwise reproducibility: the same gradient reduced as one bucket or cut into uneven
// buckets gives identical bits, equal to a serial rank-order sum.
TEST(LocalComm, AllreduceIsBitwiseIndependentOfBucketing) {
  constexpr std::size_t kCount = 100003;
  for (int ranks : {3, 4}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      std::mt19937 rng(1234 + ranks);
      std::normal_distribution<float> normal;
      std::uniform_int_distribution<int> exponent(-20, 20);
      std::vector<std::vector<float>> inputs(ranks, std::vector<float>(kCount));
      for (auto& input : inputs) {
        for (float& x : input) x = std::ldexp(normal(rng), exponent(rng));
      }
      std::vector<float> reference(kCount);
      for (std::size_t i = 0; i < kCount; ++i) {
        float acc = inputs[0][i];
        for (int r = 1; r < ranks; ++r) acc += inputs[r][i];
        reference[i] = op == ReduceOp::kAverage ? acc / static_cast<float>(ranks) : acc;
      }

      auto whole = inputs;
      auto cut = inputs;
      auto comms = make_local_communicators(LocalOptions{.ranks = ranks});
      std::vector<WorkPtr> works;
      const std::size_t cuts[] = {0, 1, 40000, kCount};  // 1, 39999 and 60003 elements
      for (int r = 0; r < ranks; ++r) {
        works.push_back(comms[r]->allreduce(whole[r], op));
        std::span<float> all(cut[r]);
        for (int b = 0; b < 3; ++b) {
          works.push_back(comms[r]->allreduce(all.subspan(cuts[b], cuts[b + 1] - cuts[b]), op));
        }
      }
      for (WorkPtr& w : works) w->wait();
      for (int r = 0; r < ranks; ++r) {
        SCOPED_TRACE("ranks " + std::to_string(ranks) + " op " + std::string(to_string(op)) +
                     " rank " + std::to_string(r));
        EXPECT_EQ(std::memcmp(whole[r].data(), cut[r].data(), kCount * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(whole[r].data(), reference.data(), kCount * sizeof(float)), 0);
      }
    }
  }
}

// The sharded strategies rely on it: rank r's reduce-scatter block is, bit for bit, block
// r of the all-reduce of the same inputs (both sum in rank order), whatever the block size.
TEST(LocalComm, ReduceScatterEqualsTheAllreducesBlockBitwise) {
  for (int ranks : {2, 3, 4}) {
    for (std::size_t block : {std::size_t{1}, std::size_t{7}, std::size_t{33337}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        std::mt19937 rng(99 + ranks);
        std::normal_distribution<float> normal;
        std::uniform_int_distribution<int> exponent(-20, 20);
        const std::size_t n = block * static_cast<std::size_t>(ranks);
        std::vector<std::vector<float>> inputs(ranks, std::vector<float>(n));
        for (auto& input : inputs) {
          for (float& x : input) x = std::ldexp(normal(rng), exponent(rng));
        }
        auto reduced = inputs;
        std::vector<std::vector<float>> blocks(ranks, std::vector<float>(block));
        auto comms = make_local_communicators(LocalOptions{.ranks = ranks});
        std::vector<WorkPtr> works;
        for (int r = 0; r < ranks; ++r) {
          works.push_back(comms[r]->reduce_scatter(inputs[r], blocks[r], op));
          works.push_back(comms[r]->allreduce(reduced[r], op));
        }
        for (WorkPtr& w : works) w->wait();
        for (int r = 0; r < ranks; ++r) {
          EXPECT_EQ(std::memcmp(blocks[r].data(), reduced[r].data() + block * r,
                                block * sizeof(float)),
                    0)
              << ranks << " ranks, block " << block << ", " << to_string(op) << ", rank " << r;
        }
      }
    }
  }
}

TEST(LocalComm, LinkEmulationMakesCommSpansLastAtLeastTheWireTime) {
  const LinkModel link{.bandwidth_Bps = 2e9, .latency_ns = 20'000};
  auto comms = make_local_communicators(LocalOptions{.ranks = 2, .link = link});
  RankRecorder rec0(0, 16), rec1(1, 16);
  comms[0]->set_recorder(&rec0);
  comms[1]->set_recorder(&rec1);
  std::vector<float> a(1 << 18, 1.0f), b(1 << 18, 2.0f);  // 1 MiB each
  std::vector<WorkPtr> works = {
      comms[0]->allreduce(a, ReduceOp::kSum),
      comms[1]->allreduce(b, ReduceOp::kSum),
      comms[0]->barrier(),
      comms[1]->barrier(),
      comms[0]->send(a, 1, 0),
      comms[1]->recv(b, 0, 0),
  };
  for (WorkPtr& w : works) w->wait();
  for (const RankRecorder* rec : {&rec0, &rec1}) {
    ASSERT_EQ(rec->lane(Lane::kComm).size(), 3u);
    for (const Span& span : rec->lane(Lane::kComm)) {
      const std::int64_t wire = link.wire_time_ns(span.kind, span.bytes, 2);
      EXPECT_GT(wire, 0);
      EXPECT_GE(span.duration_ns(), wire) << to_string(span.kind);
    }
  }
  for (WorkPtr& w : works) {
    EXPECT_GE(w->end_ns() - w->start_ns(), link.wire_time_ns(w->info().kind, w->info().bytes, 2));
  }
  EXPECT_EQ(a, std::vector<float>(1 << 18, 3.0f));
}

TEST(LocalComm, RecordsOneCommSpanPerOperationWithItsInfo) {
  constexpr int kRanks = 2;
  NameTable names;
  const NameId bucket_name = names.intern("bucket");
  auto comms = make_local_communicators(LocalOptions{.ranks = kRanks});
  std::vector<std::unique_ptr<RankRecorder>> recorders;
  for (int r = 0; r < kRanks; ++r) {
    recorders.push_back(std::make_unique<RankRecorder>(r, 16));
    comms[r]->set_recorder(recorders[r].get());
  }
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(100, 1.0f));
  std::vector<std::vector<float>> gathered(kRanks, std::vector<float>(200));
  std::vector<std::vector<float>> scattered(kRanks, std::vector<float>(50));
  std::vector<WorkPtr> works;
  for (int r = 0; r < kRanks; ++r) {
    Communicator& c = *comms[r];
    works.push_back(
        c.allreduce(data[r], ReduceOp::kSum, OpInfo{.step = 7, .tag = 3, .name = bucket_name}));
    works.push_back(c.reduce_scatter(data[r], scattered[r], ReduceOp::kSum, OpInfo{.tag = 4}));
    works.push_back(c.allgather(data[r], gathered[r], OpInfo{.step = 1}));
    works.push_back(c.broadcast(data[r], 1));
    works.push_back(c.barrier(OpInfo{.tag = 9}));
    works.push_back(r == 0 ? c.send(data[r], 1, 0) : c.recv(data[r], 0, 0));
  }
  for (WorkPtr& w : works) w->wait();

  struct Expected {
    SpanKind kind;
    std::int64_t bytes;
    std::int32_t step, tag;
    NameId name;
  };
  for (int r = 0; r < kRanks; ++r) {
    const Expected expected[] = {
        {SpanKind::kAllreduce, 400, 7, 3, bucket_name},
        {SpanKind::kReduceScatter, 400, -1, 4, kNoName},
        {SpanKind::kAllgather, 800, 1, -1, kNoName},
        {SpanKind::kBroadcast, 400, -1, -1, kNoName},
        {SpanKind::kBarrier, 0, -1, 9, kNoName},
        {r == 0 ? SpanKind::kSend : SpanKind::kRecv, 400, -1, -1, kNoName},
    };
    const SpanBuffer& lane = recorders[r]->lane(Lane::kComm);
    ASSERT_EQ(lane.size(), std::size(expected)) << "rank " << r;
    EXPECT_EQ(recorders[r]->lane(Lane::kCompute).size(), 0u);
    // Operations in flight together may complete in any order: match spans by kind.
    for (std::size_t i = 0; i < lane.size(); ++i) {
      const Span* found = nullptr;
      for (const Span& s : lane) {
        if (s.kind == expected[i].kind) found = &s;
      }
      SCOPED_TRACE("rank " + std::to_string(r) + " operation " + std::to_string(i));
      ASSERT_NE(found, nullptr);
      const Span& span = *found;
      EXPECT_EQ(span.rank, r);
      EXPECT_EQ(span.lane, Lane::kComm);
      EXPECT_EQ(span.kind, expected[i].kind);
      EXPECT_EQ(span.bytes, expected[i].bytes);
      EXPECT_EQ(span.step, expected[i].step);
      EXPECT_EQ(span.tag, expected[i].tag);
      EXPECT_EQ(span.name, expected[i].name);
      EXPECT_LE(span.start_ns, span.end_ns);
      const WorkPtr& work = works[static_cast<std::size_t>(r) * 6 + i];
      EXPECT_EQ(span.start_ns, work->start_ns());
      EXPECT_EQ(span.end_ns, work->end_ns());
    }
  }
}

}  // namespace
}  // namespace tandem
