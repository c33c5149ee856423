// Runs the Communicator contract (contract.h) on the `mpi` backend. This program is one
// rank: ctest runs it under mpirun -np 2 and -np 4 (tests/CMakeLists.txt), once per
// allreduce algorithm (--allreduce=auto|native|ring).
//
// Every rank runs the same cases in the same order. After each case the ranks agree on
// whether any of them failed (an allreduce of failure flags), so one rank's failure fails
// the case everywhere and no rank is left waiting in a collective the failed one skipped.
// Only rank 0 prints gtest's progress; every rank prints its own failures.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "comm/contract.h"
#include "comm/mpi/mpi_comm.h"
#include "core/error.h"

namespace tandem {
namespace {

ProcessCommunicator* g_comm = nullptr;

void run_case(const std::function<void(Communicator&)>& body) {
  std::string error;
  try {
    body(*g_comm);
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::vector<float> failed(1, error.empty() ? 0.0f : 1.0f);
  g_comm->allreduce(failed, ReduceOp::kSum)->wait();
  if (!error.empty()) FAIL() << error;
  if (failed[0] > 0) FAIL() << failed[0] << " other rank(s) failed this case";
}

class MpiContract : public ::testing::TestWithParam<std::size_t> {
 protected:
  std::size_t elems() const { return GetParam(); }
  std::size_t block() const { return elems() / static_cast<std::size_t>(g_comm->size()); }
};

TEST_P(MpiContract, AllreduceSum) {
  run_case([&](Communicator& c) { contract_allreduce(c, elems(), ReduceOp::kSum); });
}

TEST_P(MpiContract, AllreduceAverage) {
  run_case([&](Communicator& c) { contract_allreduce(c, elems(), ReduceOp::kAverage); });
}

TEST_P(MpiContract, CompressedFp16AndBf16) {
  run_case([&](Communicator& c) {
    contract_compressed(c, elems(), DataType::kFloat16);
    contract_compressed(c, elems(), DataType::kBFloat16);
  });
}

TEST_P(MpiContract, ReduceScatter) {
  run_case([&](Communicator& c) {
    contract_reduce_scatter(c, block(), ReduceOp::kSum);
    contract_reduce_scatter(c, block(), ReduceOp::kAverage);
  });
}

TEST_P(MpiContract, Allgather) {
  run_case([&](Communicator& c) { contract_allgather(c, block()); });
}

TEST_P(MpiContract, Broadcast) {
  run_case([&](Communicator& c) {
    contract_broadcast(c, elems(), 0);
    contract_broadcast(c, elems(), c.size() - 1);
  });
}

TEST_P(MpiContract, SendRecv) {
  run_case([&](Communicator& c) { contract_send_recv(c, elems()); });
}

TEST_P(MpiContract, ManyInFlight) {
  run_case([&](Communicator& c) { contract_many_in_flight(c, elems()); });
}

INSTANTIATE_TEST_SUITE_P(Sizes, MpiContract,
                         ::testing::Values<std::size_t>(0, 1, 7, 4099, std::size_t{1} << 20),
                         [](const auto& p) { return std::to_string(p.param) + "elems"; });

TEST(MpiContractRanks, Barrier) { run_case(contract_barrier); }

TEST(MpiContractRanks, InvalidArguments) { run_case(contract_invalid_arguments); }

TEST(MpiSplit, ByParity) {
  run_case([](Communicator& c) { contract_split_by_parity(c, false); });
}

TEST(MpiSplit, ByParityKeysReversed) {
  run_case([](Communicator& c) { contract_split_by_parity(c, true); });
}

TEST(MpiSplit, IntoWorldsOfOne) { run_case(contract_split_singletons); }

TEST(MpiSplit, RecordsSpansAsThisRank) { run_case(contract_split_records_spans); }

TEST(MpiSplit, AbortReachesChildren) { run_case(contract_split_abort_reaches_children); }

// Run by its own ctest entry with --timeout=1 (every other case keeps the default).
TEST(MpiContractRanks, TimeoutNamesTheOperation) {
  if (g_comm->timeout() > std::chrono::seconds(5)) GTEST_SKIP() << "needs --timeout=1";
  run_case(contract_timeout_names_operation);
}

// Work::wait_for gives up without cancelling, and the operation still completes later.
// Rank 0's receive cannot complete before rank 1 sends, and rank 1 sends only after a
// barrier that rank 0 joins after its wait_for has returned false: no timing involved.
TEST(MpiWork, WaitForTimesOutThenTheOperationCompletes) {
  run_case([](Communicator& c) {
    if (c.size() < 2) return;
    std::vector<float> data(3, static_cast<float>(c.rank() + 1));
    if (c.rank() == 0) {
      WorkPtr recv = c.recv(data, 1, 7);
      if (recv->wait_for(std::chrono::milliseconds(20))) {
        throw ContractFailure("rank 0: recv completed before rank 1 sent");
      }
      if (recv->test()) throw ContractFailure("rank 0: test() true before rank 1 sent");
      c.barrier()->wait();
      if (!recv->wait_for(std::chrono::seconds(60))) throw ContractFailure("recv never completed");
      if (data[0] != 2.0f) throw ContractFailure("rank 0: recv got the wrong data");
    } else {
      c.barrier()->wait();
      if (c.rank() == 1) c.send(data, 0, 7)->wait();
    }
  });
}

// Comm spans land in the recorder, on the comm lane, with the caller's step and tag.
TEST(MpiWork, RecordsCommSpans) {
  run_case([](Communicator& c) {
    RankRecorder recorder(c.rank(), 16);
    c.set_recorder(&recorder);
    std::vector<float> data(1000, 1.0f);
    WorkPtr work = c.allreduce(data, ReduceOp::kSum, {.step = 3, .tag = 4});
    work->wait();
    c.set_recorder(nullptr);
    const std::vector<Span> spans = recorder.collect();
    if (spans.size() != 1)
      throw ContractFailure("expected 1 span, got " + std::to_string(spans.size()));
    const Span& s = spans[0];
    if (s.lane != Lane::kComm || s.kind != SpanKind::kAllreduce || s.step != 3 || s.tag != 4 ||
        s.bytes != 4000 || s.rank != c.rank()) {
      throw ContractFailure("span fields differ from the operation's");
    }
    if (s.start_ns != work->start_ns() || s.end_ns != work->end_ns() || s.end_ns < s.start_ns) {
      throw ContractFailure("span times differ from the Work's");
    }
  });
}

// The backend's own collectives: clock offsets on rank 0 only, and gathers in rank order.
TEST(MpiProcess, ClockOffsetsAndGather) {
  run_case([](Communicator&) {
    const auto offsets = g_comm->estimate_clock_offsets(5);
    const bool root = g_comm->rank() == 0;
    if (root != !offsets.empty()) throw ContractFailure("offsets belong to rank 0 only");
    if (root && offsets.size() != static_cast<std::size_t>(g_comm->size())) {
      throw ContractFailure("one offset per rank expected");
    }
    for (const ClockOffset& o : offsets) {
      if (o.uncertainty_ns < 0) throw ContractFailure("negative uncertainty");
    }
    const std::string mine(static_cast<std::size_t>(g_comm->rank()) * 3,
                           static_cast<char>('a' + g_comm->rank()));
    const auto all = g_comm->gather_bytes(mine, g_comm->size() - 1);
    if (g_comm->rank() != g_comm->size() - 1) {
      if (!all.empty()) throw ContractFailure("gather result on a non-root rank");
      return;
    }
    for (int r = 0; r < g_comm->size(); ++r) {
      if (all[static_cast<std::size_t>(r)] !=
          std::string(static_cast<std::size_t>(r) * 3, static_cast<char>('a' + r))) {
        throw ContractFailure("gathered bytes of rank " + std::to_string(r) + " differ");
      }
    }
  });
}

// On ranks other than 0, which print no progress: each failed assertion, one line.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) std::fprintf(stderr, "rank %d: %s\n", rank_, result.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string algorithm = "auto";
  double timeout_s = 120;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--allreduce=", 12) == 0) algorithm = argv[i] + 12;
    if (std::strncmp(argv[i], "--timeout=", 10) == 0) timeout_s = std::atof(argv[i] + 10);
  }
  std::unique_ptr<tandem::ProcessCommunicator> comm;
  try {
    comm = tandem::make_mpi_communicator(
        {.timeout = std::chrono::nanoseconds(static_cast<std::int64_t>(timeout_s * 1e9)),
         .mpi = {.allreduce_algorithm = algorithm}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi contract: %s\n", e.what());
    return 1;
  }
  tandem::g_comm = comm.get();
  if (comm->rank() != 0) {
    // Failures still reach stderr through the assertion text of run_case's FAIL().
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new tandem::FailurePrinter(comm->rank()));
  }
  if (comm->rank() == 0) {
    std::printf("mpi contract: %d ranks, %s\n", comm->size(), comm->describe().c_str());
  }
  const int failed = RUN_ALL_TESTS();
  comm.reset();
  return failed;
}
