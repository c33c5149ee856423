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

INSTANTIATE_TEST_SUITE_P(Ranks, LocalContractRanks, ::testing::Range(1, 9));

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
