// Runs the Communicator contract (contract.h) on the `local` backend: every rank is a
// thread, for 1..8 ranks and sizes from empty to 4 MiB.
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>

#include "comm/contract.h"
#include "comm/local/local_comm.h"
#include "core/error.h"

namespace tandem {
namespace {

// Runs rank_main on every rank, each on its own thread, and rethrows the first failure.
// A failing rank destroys its communicator, which aborts the world, so peers blocked on
// it fail too instead of hanging.
void run_ranks(int ranks, const std::function<void(Communicator&)>& rank_main,
               std::chrono::nanoseconds timeout = std::chrono::seconds(300)) {
  auto comms = make_local_communicators(LocalOptions{.ranks = ranks, .timeout = timeout});
  std::mutex mutex;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        rank_main(*comms[static_cast<std::size_t>(r)]);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (!first_error) first_error = std::current_exception();
        }
        comms[static_cast<std::size_t>(r)].reset();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  comms.clear();
  if (first_error) std::rethrow_exception(first_error);
}

class LocalContract : public ::testing::TestWithParam<std::tuple<int, std::size_t>> {
 protected:
  int ranks() const { return std::get<0>(GetParam()); }
  std::size_t elems() const { return std::get<1>(GetParam()); }
};

TEST_P(LocalContract, AllreduceSum) {
  run_ranks(ranks(), [&](Communicator& c) { contract_allreduce(c, elems(), ReduceOp::kSum); });
}

TEST_P(LocalContract, AllreduceAverage) {
  run_ranks(ranks(), [&](Communicator& c) { contract_allreduce(c, elems(), ReduceOp::kAverage); });
}

TEST_P(LocalContract, CompressedFp16AndBf16) {
  run_ranks(ranks(), [&](Communicator& c) {
    contract_compressed(c, elems(), DataType::kFloat16);
    contract_compressed(c, elems(), DataType::kBFloat16);
  });
}

TEST_P(LocalContract, ReduceScatter) {
  // elems() is the whole array here, so memory stays bounded at 8 ranks.
  const std::size_t block = elems() / static_cast<std::size_t>(ranks());
  run_ranks(ranks(), [&](Communicator& c) {
    contract_reduce_scatter(c, block, ReduceOp::kSum);
    contract_reduce_scatter(c, block, ReduceOp::kAverage);
  });
}

TEST_P(LocalContract, Allgather) {
  const std::size_t block = elems() / static_cast<std::size_t>(ranks());
  run_ranks(ranks(), [&](Communicator& c) { contract_allgather(c, block); });
}

TEST_P(LocalContract, Broadcast) {
  run_ranks(ranks(), [&](Communicator& c) {
    contract_broadcast(c, elems(), 0);
    contract_broadcast(c, elems(), ranks() - 1);
  });
}

TEST_P(LocalContract, SendRecv) {
  run_ranks(ranks(), [&](Communicator& c) { contract_send_recv(c, elems()); });
}

TEST_P(LocalContract, ManyInFlight) {
  run_ranks(ranks(), [&](Communicator& c) { contract_many_in_flight(c, elems()); });
}

INSTANTIATE_TEST_SUITE_P(RanksAndSizes, LocalContract,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values<std::size_t>(0, 1, 7, 4099,
                                                                           std::size_t{1} << 20)),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "ranks_" +
                                  std::to_string(std::get<1>(p.param)) + "elems";
                         });

class LocalContractRanks : public ::testing::TestWithParam<int> {};

TEST_P(LocalContractRanks, Barrier) { run_ranks(GetParam(), contract_barrier); }

TEST_P(LocalContractRanks, InvalidArguments) { run_ranks(GetParam(), contract_invalid_arguments); }

TEST_P(LocalContractRanks, TimeoutNamesTheOperation) {
  run_ranks(GetParam(), contract_timeout_names_operation, std::chrono::milliseconds(100));
}

TEST_P(LocalContractRanks, SplitByParity) {
  run_ranks(GetParam(), [](Communicator& c) { contract_split_by_parity(c, false); });
}

TEST_P(LocalContractRanks, SplitByParityKeysReversed) {
  run_ranks(GetParam(), [](Communicator& c) { contract_split_by_parity(c, true); });
}

TEST_P(LocalContractRanks, SplitIntoWorldsOfOne) {
  run_ranks(GetParam(), contract_split_singletons);
}

TEST_P(LocalContractRanks, SplitRecordsSpansAsThisRank) {
  run_ranks(GetParam(), contract_split_records_spans);
}

TEST_P(LocalContractRanks, SplitAbortReachesChildren) {
  run_ranks(GetParam(), contract_split_abort_reaches_children);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalContractRanks, ::testing::Range(1, 9));

// A rank that fails (its communicator destroyed, as run_ranks and the launcher do) makes
// a peer's pending operation on a child fail instead of waiting: the failing rank's own
// child stays alive here, so only the parent's abort can reach the peer's child.
TEST(LocalSplit, ARankFailingFailsAPeersPendingChildOperation) {
  constexpr int kRanks = 4;
  std::vector<std::unique_ptr<Communicator>> children(kRanks);
  std::string rank0_error;
  EXPECT_THROW(run_ranks(
                   kRanks,
                   [&](Communicator& c) {
                     std::unique_ptr<Communicator> child = c.split(c.rank() % 2, c.rank());
                     Communicator& mine = *child;
                     children[static_cast<std::size_t>(c.rank())] = std::move(child);
                     if (c.rank() == 2) throw ContractFailure("rank 2 gives up");
                     if (c.rank() != 0) return;
                     std::vector<float> data(3, 1.0f);
                     try {
                       mine.allreduce(data, ReduceOp::kSum)->wait();  // waits for rank 2
                       rank0_error = "completed";
                     } catch (const AbortedError&) {
                     } catch (const std::exception& e) {
                       rank0_error = e.what();
                     }
                   },
                   std::chrono::seconds(120)),
               ContractFailure);
  EXPECT_EQ(rank0_error, "");
  children.clear();
}

// The child emulates the same link as its parent.
TEST(LocalSplit, ChildKeepsTheLinkModel) {
  auto comms = make_local_communicators(
      {.ranks = 2, .link = LinkModel::parse("10GB/s,5us"), .timeout = std::chrono::seconds(60)});
  std::vector<std::unique_ptr<Communicator>> children(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      children[static_cast<std::size_t>(r)] = comms[static_cast<std::size_t>(r)]->split(0, r);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(children[static_cast<std::size_t>(r)], nullptr);
    EXPECT_EQ(children[static_cast<std::size_t>(r)]->describe(),
              comms[static_cast<std::size_t>(r)]->describe());
    EXPECT_NE(comms[static_cast<std::size_t>(r)]->describe().find("link"), std::string::npos);
  }
}

// The harness itself: a failing rank's error comes back, and its peers do not hang.
TEST(LocalContractHarness, FirstFailureIsRethrownWithoutHanging) {
  EXPECT_THROW(run_ranks(3,
                         [](Communicator& c) {
                           if (c.rank() == 1) throw ContractFailure("rank 1 gives up");
                           c.barrier()->wait();  // never completes: rank 1 left
                         }),
               ContractFailure);
}

}  // namespace
}  // namespace tandem
