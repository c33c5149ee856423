// Implementation of the backend-independent Communicator contract (see contract.h).
#include "comm/contract.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

// A small integer in [-15, 15] that differs by rank and element: sums over up to 64
// ranks stay exact in fp32.
float input_value(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 31) -
                            15);
}

float reduced_value(int ranks, std::size_t i, ReduceOp op) {
  float sum = 0;
  for (int r = 0; r < ranks; ++r) sum += input_value(r, i);
  return op == ReduceOp::kAverage ? sum / static_cast<float>(ranks) : sum;
}

std::string where(const Communicator& comm, const std::string& what) {
  return "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) + ", " + what;
}

void fail(const Communicator& comm, const std::string& what, const std::string& detail) {
  throw ContractFailure(where(comm, what) + ": " + detail);
}

// Compares got[i] with expected(i); tolerance is relative (0: bitwise equal values).
void check_values(const Communicator& comm, const std::string& what, const std::vector<float>& got,
                  const std::function<float(std::size_t)>& expected, float tolerance = 0) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float want = expected(i);
    const bool ok = tolerance == 0
                        ? got[i] == want
                        : std::fabs(got[i] - want) <= tolerance * std::max(1.0f, std::fabs(want));
    if (!ok) {
      fail(comm, what,
           "element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
               std::to_string(want));
    }
  }
}

// Waits for a Work that must succeed, and checks what the backend filled into its info.
void wait_ok(const Communicator& comm, const std::string& what, Work& work, SpanKind kind,
             std::size_t payload_elems, std::size_t element_bytes = sizeof(float)) {
  work.wait();
  if (!work.test()) fail(comm, what, "test() is false after wait()");
  if (work.exception() != nullptr) fail(comm, what, "exception() is set after success");
  if (work.info().kind != kind) fail(comm, what, "info().kind is not the operation's kind");
  const auto bytes = static_cast<std::int64_t>(payload_elems * element_bytes);
  if (work.info().bytes != bytes) {
    fail(comm, what,
         "info().bytes is " + std::to_string(work.info().bytes) + ", expected " +
             std::to_string(bytes));
  }
  if (work.end_ns() < work.start_ns()) fail(comm, what, "end_ns() < start_ns()");
}

std::string op_what(std::string_view name, std::size_t n, ReduceOp op) {
  return std::string(name) + "(" + std::string(to_string(op)) + ", " + std::to_string(n) +
         " elements)";
}

float tolerance_of(ReduceOp op) { return op == ReduceOp::kAverage ? 1e-6f : 0.0f; }

// Waits for a Work that must fail with RuntimeError.
void expect_failure(const Communicator& comm, const std::string& what, Work& work) {
  bool threw = false;
  try {
    work.wait();
  } catch (const RuntimeError&) {
    threw = true;
  }
  if (!threw) fail(comm, what, "wait() did not throw RuntimeError");
  if (!work.test()) fail(comm, what, "test() is false after a failed wait()");
  if (work.exception() == nullptr) fail(comm, what, "exception() is null after failure");
}

}  // namespace

void contract_allreduce(Communicator& comm, std::size_t n_elems, ReduceOp op) {
  const int rank = comm.rank();
  std::vector<float> data(n_elems);
  for (std::size_t i = 0; i < n_elems; ++i) data[i] = input_value(rank, i);
  const std::string what = op_what("allreduce", n_elems, op);
  WorkPtr work = comm.allreduce(data, op, OpInfo{.step = 2, .tag = 5});
  wait_ok(comm, what, *work, SpanKind::kAllreduce, n_elems);
  if (work->info().step != 2 || work->info().tag != 5) fail(comm, what, "step/tag not kept");
  check_values(
      comm, what, data, [&](std::size_t i) { return reduced_value(comm.size(), i, op); },
      tolerance_of(op));
}

void contract_reduce_scatter(Communicator& comm, std::size_t block_elems, ReduceOp op) {
  const int rank = comm.rank();
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<float> input(n * block_elems);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = input_value(rank, i);
  std::vector<float> output(block_elems, -99.0f);
  const std::string what = op_what("reduce_scatter", block_elems, op);
  WorkPtr work = comm.reduce_scatter(input, output, op);
  wait_ok(comm, what, *work, SpanKind::kReduceScatter, input.size());
  const std::size_t offset = static_cast<std::size_t>(rank) * block_elems;
  check_values(
      comm, what, output, [&](std::size_t i) { return reduced_value(comm.size(), offset + i, op); },
      tolerance_of(op));
}

void contract_compressed(Communicator& comm, std::size_t n_elems, DataType type) {
  const int rank = comm.rank();
  const auto ranks = static_cast<std::size_t>(comm.size());
  // Integers in [-3, 3]: every partial sum over up to 64 ranks is exact in bf16's 8 bits.
  const auto small = [](int r, std::size_t i) {
    return static_cast<float>(static_cast<int>((i * 5 + static_cast<std::size_t>(r) * 3) % 7) - 3);
  };
  const auto reduced = [&](std::size_t i, ReduceOp op) {
    float sum = 0;
    for (int r = 0; r < comm.size(); ++r) sum += small(r, i);
    return op == ReduceOp::kAverage ? sum / static_cast<float>(ranks) : sum;
  };
  // fp16 keeps 11 significant bits, bf16 8: one rounding of the average, or one per step
  // of a ring.
  const float tolerance = type == DataType::kBFloat16 ? 1.0f / 64 : 1.0f / 512;
  const auto widened = [&](const std::vector<std::uint16_t>& values) {
    std::vector<float> out(values.size());
    widen(type, out.data(), values.data(), values.size());
    return out;
  };
  // Every rank must hold the same bits: gather everyone's result (as floats, exact) and
  // compare with this rank's.
  const auto same_everywhere = [&](const std::string& what, const std::vector<float>& mine) {
    std::vector<float> all(ranks * mine.size());
    comm.allgather(mine, all)->wait();
    for (std::size_t r = 0; r < ranks; ++r) {
      if (!std::equal(mine.begin(), mine.end(),
                      all.begin() + static_cast<std::ptrdiff_t>(r * mine.size()))) {
        fail(comm, what, "rank " + std::to_string(r) + " ended with other bits");
      }
    }
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    std::vector<std::uint16_t> data(n_elems);
    for (std::size_t i = 0; i < n_elems; ++i) data[i] = narrow(type, small(rank, i));
    const std::string what = std::string(to_string(type)) + " " + op_what("allreduce", n_elems, op);
    WorkPtr work = comm.allreduce(data, type, op, OpInfo{.step = 1, .tag = 3});
    wait_ok(comm, what, *work, SpanKind::kAllreduce, n_elems, 2);
    const std::vector<float> got = widened(data);
    check_values(
        comm, what, got, [&](std::size_t i) { return reduced(i, op); },
        op == ReduceOp::kAverage ? tolerance : 0.0f);
    same_everywhere(what, got);

    const std::size_t block = n_elems / ranks;
    std::vector<std::uint16_t> input(block * ranks), output(block, narrow(type, -99.0f));
    for (std::size_t i = 0; i < input.size(); ++i) input[i] = narrow(type, small(rank, i));
    const std::string rs_what =
        std::string(to_string(type)) + " " + op_what("reduce_scatter", block, op);
    WorkPtr rs = comm.reduce_scatter(input, output, type, op);
    wait_ok(comm, rs_what, *rs, SpanKind::kReduceScatter, input.size(), 2);
    const std::size_t offset = static_cast<std::size_t>(rank) * block;
    check_values(
        comm, rs_what, widened(output), [&](std::size_t i) { return reduced(offset + i, op); },
        op == ReduceOp::kAverage ? tolerance : 0.0f);
  }
}

void contract_allgather(Communicator& comm, std::size_t block_elems) {
  const int rank = comm.rank();
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<float> input(block_elems);
  for (std::size_t i = 0; i < block_elems; ++i) input[i] = input_value(rank, i);
  std::vector<float> output(n * block_elems, -99.0f);
  const std::string what = "allgather(" + std::to_string(block_elems) + " elements per rank)";
  WorkPtr work = comm.allgather(input, output);
  wait_ok(comm, what, *work, SpanKind::kAllgather, output.size());
  check_values(comm, what, output, [&](std::size_t i) {
    return input_value(static_cast<int>(i / block_elems), i % block_elems);
  });
}

void contract_broadcast(Communicator& comm, std::size_t n_elems, int root) {
  const int rank = comm.rank();
  std::vector<float> data(n_elems);
  for (std::size_t i = 0; i < n_elems; ++i) data[i] = input_value(rank, i);
  const std::string what =
      "broadcast(root " + std::to_string(root) + ", " + std::to_string(n_elems) + " elements)";
  WorkPtr work = comm.broadcast(data, root);
  wait_ok(comm, what, *work, SpanKind::kBroadcast, n_elems);
  check_values(comm, what, data, [&](std::size_t i) { return input_value(root, i); });
}

void contract_barrier(Communicator& comm) {
  // An allreduce of ones after each barrier counts the ranks that issued it: were the
  // barrier a no-op, results would still be right, so the real check is that all ranks
  // complete many barriers in lockstep without mismatching the allreduces around them.
  for (int round = 0; round < 20; ++round) {
    WorkPtr barrier = comm.barrier(OpInfo{.step = round});
    std::vector<float> one(1, 1.0f);
    WorkPtr count = comm.allreduce(one, ReduceOp::kSum);
    const std::string what = "barrier round " + std::to_string(round);
    wait_ok(comm, what, *barrier, SpanKind::kBarrier, 0);
    wait_ok(comm, what, *count, SpanKind::kAllreduce, 1);
    if (one[0] != static_cast<float>(comm.size())) fail(comm, what, "allreduce after barrier");
  }
}

void contract_send_recv(Communicator& comm, std::size_t n_elems) {
  const int rank = comm.rank();
  const int n = comm.size();
  const int right = (rank + 1) % n;
  const int left = (rank + n - 1) % n;
  // Two messages per tag (matched in issue order) on two tags (matched by tag): the
  // receiver issues tag 2 before tag 1, the sender tag 1 before tag 2.
  auto payload = [&](int sender, int message, std::size_t i) {
    return input_value(sender, i) + static_cast<float>(100 * message);
  };
  std::vector<std::vector<float>> out(4, std::vector<float>(n_elems));
  std::vector<std::vector<float>> in(4, std::vector<float>(n_elems, -99.0f));
  for (int m = 0; m < 4; ++m) {
    for (std::size_t i = 0; i < n_elems; ++i) out[m][i] = payload(rank, m, i);
  }
  const int tag_of[4] = {1, 1, 2, 2};
  std::vector<WorkPtr> works;
  // Even ranks receive first, odd ranks send first: both orders must match.
  auto post_recvs = [&] {
    for (int m : {2, 3, 0, 1}) works.push_back(comm.recv(in[m], left, tag_of[m]));
  };
  auto post_sends = [&] {
    for (int m = 0; m < 4; ++m) works.push_back(comm.send(out[m], right, tag_of[m]));
  };
  if (rank % 2 == 0) {
    post_recvs();
    post_sends();
  } else {
    post_sends();
    post_recvs();
  }
  for (WorkPtr& work : works) {
    const std::string what = "send/recv(" + std::to_string(n_elems) + " elements)";
    wait_ok(comm, what, *work, work->info().kind, n_elems);
  }
  for (int m = 0; m < 4; ++m) {
    const std::string what = "recv of message " + std::to_string(m) + " from rank " +
                             std::to_string(left) + " tag " + std::to_string(tag_of[m]);
    check_values(comm, what, in[m], [&](std::size_t i) { return payload(left, m, i); });
  }
}

void contract_many_in_flight(Communicator& comm, std::size_t n_elems) {
  const int rank = comm.rank();
  const int n = comm.size();
  const auto un = static_cast<std::size_t>(n);
  // The allgather takes n_elems in all, like contract_allgather's callers do.
  const std::size_t block_elems = n_elems / un;
  std::vector<float> sum(n_elems), average(n_elems), bcast(n_elems), gathered(un * block_elems);
  for (std::size_t i = 0; i < n_elems; ++i) {
    sum[i] = average[i] = bcast[i] = input_value(rank, i);
  }
  const std::vector<float> block(sum.begin(),
                                 sum.begin() + static_cast<std::ptrdiff_t>(block_elems));
  std::vector<WorkPtr> works;
  works.push_back(comm.allreduce(sum, ReduceOp::kSum));
  works.push_back(comm.broadcast(bcast, n - 1));
  works.push_back(comm.allgather(block, gathered));
  works.push_back(comm.barrier());
  works.push_back(comm.allreduce(average, ReduceOp::kAverage));
  for (auto it = works.rbegin(); it != works.rend(); ++it) {
    (*it)->wait();
  }
  const std::string what = "ops in flight (" + std::to_string(n_elems) + " elements)";
  check_values(comm, what + " allreduce sum", sum,
               [&](std::size_t i) { return reduced_value(n, i, ReduceOp::kSum); });
  check_values(comm, what + " broadcast", bcast,
               [&](std::size_t i) { return input_value(n - 1, i); });
  check_values(comm, what + " allgather", gathered, [&](std::size_t i) {
    return input_value(static_cast<int>(i / block_elems), i % block_elems);
  });
  check_values(
      comm, what + " allreduce average", average,
      [&](std::size_t i) { return reduced_value(n, i, ReduceOp::kAverage); },
      tolerance_of(ReduceOp::kAverage));
}

void contract_invalid_arguments(Communicator& comm) {
  const int n = comm.size();
  std::vector<float> data(8, 1.0f);
  expect_failure(comm, "broadcast with root == size()", *comm.broadcast(data, n));
  expect_failure(comm, "broadcast with root -1", *comm.broadcast(data, -1));
  expect_failure(comm, "send to peer size()", *comm.send(data, n, 0));
  expect_failure(comm, "recv from peer -1", *comm.recv(data, -1, 0));
  std::vector<float> output(3);
  std::vector<float> input(static_cast<std::size_t>(n) * 3 + 1);
  expect_failure(comm, "reduce_scatter with input != size() * output",
                 *comm.reduce_scatter(input, output, ReduceOp::kSum));
  std::vector<float> gathered(static_cast<std::size_t>(n) * 8 + 2);
  expect_failure(comm, "allgather with output != size() * input", *comm.allgather(data, gathered));
  // Still usable: every rank consumed the failed collectives alike.
  WorkPtr work = comm.allreduce(data, ReduceOp::kSum);
  wait_ok(comm, "allreduce after failures", *work, SpanKind::kAllreduce, data.size());
  check_values(comm, "allreduce after failures", data,
               [&](std::size_t) { return static_cast<float>(n); });
}

void contract_timeout_names_operation(Communicator& comm) {
  const int n = comm.size();
  std::vector<float> data(5, 1.0f);
  // Nobody ever sends with this tag.
  WorkPtr recv = comm.recv(data, (comm.rank() + 1) % n, 12345, {.step = 3});
  try {
    recv->synchronize();
    fail(comm, "recv without a sender", "completed");
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    const std::string expected = "rank " + std::to_string(comm.rank()) + ": recv (20 B, step 3)";
    if (what.find(expected) == std::string::npos ||
        what.find("not complete after") == std::string::npos) {
      fail(comm, "recv without a sender", "timeout message '" + what + "' does not start with '" +
                                              expected + " not complete after'");
    }
  }
  bool ended = false;
  try {
    ended = recv->wait_for(std::chrono::seconds(60));
  } catch (const RuntimeError&) {
    ended = true;
  }
  if (!ended) fail(comm, "recv without a sender", "still in flight a minute after its timeout");
  if (recv->exception() == nullptr) fail(comm, "recv without a sender", "ended without an error");
  // Still usable.
  WorkPtr work = comm.allreduce(data, ReduceOp::kSum);
  wait_ok(comm, "allreduce after a timeout", *work, SpanKind::kAllreduce, data.size());
  check_values(comm, "allreduce after a timeout", data,
               [&](std::size_t) { return static_cast<float>(n); });
}

}  // namespace tandem

namespace tandem {
namespace {

// "rank R of N" of a child, for messages.
std::string rank_of(const Communicator& c) {
  return "rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size());
}

void expect_child(const Communicator& comm, const std::string& what, const Communicator& child,
                  int rank, int size) {
  if (child.rank() != rank || child.size() != size) {
    fail(comm, what,
         "child is " + rank_of(child) + ", expected rank " + std::to_string(rank) + " of " +
             std::to_string(size));
  }
  if (child.backend_name() != comm.backend_name()) fail(comm, what, "child of another backend");
}

}  // namespace

void contract_split_by_parity(Communicator& comm, bool keys_reversed) {
  const int rank = comm.rank();
  const int n = comm.size();
  const std::string what =
      std::string("split(rank % 2") + (keys_reversed ? ", keys reversed)" : ")");
  // My group's ranks here, in the child's rank order.
  std::vector<int> group;
  for (int r = 0; r < n; ++r) {
    if (r % 2 == rank % 2) group.push_back(r);
  }
  if (keys_reversed) std::reverse(group.begin(), group.end());
  const int m = static_cast<int>(group.size());
  const int me = static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
  std::unique_ptr<Communicator> child = comm.split(rank % 2, keys_reversed ? -rank : rank);
  expect_child(comm, what, *child, me, m);
  const auto group_sum = [&](std::size_t i) {
    float sum = 0;
    for (int r : group) sum += input_value(r, i);
    return sum;
  };

  // The allreduce sums exactly the group's inputs, which depend on the rank here. The
  // larger size takes the mpi backend's ring (from 256 KiB).
  for (const std::size_t elems : {std::size_t{7}, std::size_t{1} << 17}) {
    std::vector<float> data(elems);
    for (std::size_t i = 0; i < elems; ++i) data[i] = input_value(rank, i);
    const std::string op = what + " allreduce of " + std::to_string(elems);
    wait_ok(comm, op, *child->allreduce(data, ReduceOp::kSum), SpanKind::kAllreduce, elems);
    check_values(comm, op, data, group_sum);
  }

  // Send/recv around the child's ring: the message from the left comes from the rank
  // here that is the child's left neighbour.
  {
    const int right = (me + 1) % m;
    const int left = (me + m - 1) % m;
    std::vector<float> out(9), in(9, -99.0f);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = input_value(rank, i);
    WorkPtr recv = child->recv(in, left, 3);
    WorkPtr send = child->send(out, right, 3);
    wait_ok(comm, what + " send", *send, SpanKind::kSend, out.size());
    wait_ok(comm, what + " recv", *recv, SpanKind::kRecv, in.size());
    const int from = group[static_cast<std::size_t>(left)];
    check_values(comm, what + " recv from the child's left", in,
                 [&](std::size_t i) { return input_value(from, i); });
  }

  // Parent and child operations in flight together, waited in reverse order.
  {
    constexpr std::size_t kElems = 1000;
    constexpr std::size_t kBlock = 5;
    std::vector<float> parent_sum(kElems), child_sum(kElems), child_bcast(kElems);
    for (std::size_t i = 0; i < kElems; ++i) {
      parent_sum[i] = child_sum[i] = child_bcast[i] = input_value(rank, i);
    }
    const std::vector<float> block(parent_sum.begin(), parent_sum.begin() + kBlock);
    std::vector<float> gathered(kBlock * static_cast<std::size_t>(n));
    std::vector<WorkPtr> works;
    works.push_back(comm.allreduce(parent_sum, ReduceOp::kSum));
    works.push_back(child->allreduce(child_sum, ReduceOp::kSum));
    works.push_back(comm.allgather(block, gathered));
    works.push_back(child->broadcast(child_bcast, m - 1));
    works.push_back(child->barrier());
    works.push_back(comm.barrier());
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
    const std::string mixed = what + " with the parent's operations in flight";
    check_values(comm, mixed + ": parent allreduce", parent_sum,
                 [&](std::size_t i) { return reduced_value(n, i, ReduceOp::kSum); });
    check_values(comm, mixed + ": child allreduce", child_sum, group_sum);
    check_values(comm, mixed + ": parent allgather", gathered, [&](std::size_t i) {
      return input_value(static_cast<int>(i / kBlock), i % kBlock);
    });
    const int root = group[static_cast<std::size_t>(m - 1)];
    check_values(comm, mixed + ": child broadcast", child_bcast,
                 [&](std::size_t i) { return input_value(root, i); });
  }

  // The child keeps the generic contract.
  contract_allreduce(*child, 4099, ReduceOp::kAverage);
  contract_send_recv(*child, 7);
  contract_barrier(*child);
  // Every rank is done with its child before any destroys it.
  comm.barrier()->wait();
  child.reset();
  contract_allreduce(comm, 4099, ReduceOp::kSum);
}

void contract_split_singletons(Communicator& comm) {
  std::unique_ptr<Communicator> child = comm.split(comm.rank(), 0);
  expect_child(comm, "split(color rank)", *child, 0, 1);
  contract_allreduce(*child, 7, ReduceOp::kSum);
  contract_send_recv(*child, 7);
  contract_broadcast(*child, 7, 0);
  bool threw = false;
  try {
    comm.split(-1, 0);
  } catch (const UsageError&) {
    threw = true;
  }
  if (!threw) fail(comm, "split(-1, 0)", "no UsageError");
  comm.barrier()->wait();
  child.reset();
  contract_barrier(comm);
}

void contract_split_records_spans(Communicator& comm) {
  RankRecorder recorder(comm.rank(), 64);
  comm.set_recorder(&recorder);
  std::unique_ptr<Communicator> child;
  try {
    child = comm.split(0, comm.rank());
  } catch (...) {
    comm.set_recorder(nullptr);
    throw;
  }
  comm.set_recorder(nullptr);  // from here on only the child records
  std::vector<float> data(1000, 1.0f);
  WorkPtr work = child->allreduce(data, ReduceOp::kSum, {.step = 3, .tag = 4});
  wait_ok(comm, "child allreduce", *work, SpanKind::kAllreduce, data.size());
  std::vector<Span> allreduces;
  for (const Span& s : recorder.collect()) {
    if (s.lane == Lane::kComm && s.kind == SpanKind::kAllreduce) allreduces.push_back(s);
  }
  const std::string what = "child's comm span";
  if (allreduces.size() != 1) {
    fail(comm, what, "expected 1 allreduce span, got " + std::to_string(allreduces.size()));
  }
  const Span& s = allreduces[0];
  if (s.rank != comm.rank() || s.step != 3 || s.tag != 4 || s.bytes != 4000) {
    fail(comm, what, "fields differ from the operation's (rank " + std::to_string(s.rank) + ")");
  }
  if (s.start_ns != work->start_ns() || s.end_ns != work->end_ns()) {
    fail(comm, what, "times differ from the Work's");
  }
  // Span::group: not the world's, and the same on every member (exchanged as two exact
  // 16-bit halves).
  if (s.group == 0) fail(comm, what, "group 0, the world's");
  const std::vector<float> mine = {static_cast<float>(s.group >> 16),
                                   static_cast<float>(s.group & 0xffffu)};
  std::vector<float> all(2 * static_cast<std::size_t>(comm.size()));
  comm.allgather(mine, all)->wait();
  for (std::size_t i = 0; i < all.size(); i += 2) {
    if (all[i] != mine[0] || all[i + 1] != mine[1])
      fail(comm, what, "groups differ across members");
  }
  comm.barrier()->wait();
  child.reset();
}

void contract_split_abort_reaches_children(Communicator& comm) {
  std::unique_ptr<Communicator> child = comm.split(0, comm.rank());
  std::unique_ptr<Communicator> grandchild = child->split(0, child->rank());
  std::vector<float> data(5, 1.0f);
  // Nobody ever sends with this tag.
  WorkPtr recv = grandchild->recv(data, (grandchild->rank() + 1) % grandchild->size(), 4242);
  comm.barrier()->wait();  // every rank's receive is pending
  const std::string reason = "the test aborts the child";
  child->abort(reason);
  const std::string what = "grandchild's pending recv after its parent's abort";
  try {
    recv->wait();
    fail(comm, what, "completed");
  } catch (const AbortedError& e) {
    if (std::string(e.what()).find(reason) == std::string::npos) {
      fail(comm, what, "error '" + std::string(e.what()) + "' does not name the abort's reason");
    }
  } catch (const TimeoutError& e) {
    fail(comm, what, std::string("waited until its timeout: ") + e.what());
  }
  bool failed_at_once = false;
  try {
    grandchild->allreduce(data, ReduceOp::kSum)->wait();
  } catch (const AbortedError&) {
    failed_at_once = true;
  }
  if (!failed_at_once) fail(comm, "grandchild allreduce after the abort", "no AbortedError");
  grandchild->drain();
  child->drain();
  comm.barrier()->wait();
  grandchild.reset();
  child.reset();
  contract_barrier(comm);
}

}  // namespace tandem
