// A job where one rank skips a collective, run under mpirun -np 2 by test_mpi_cli: rank 1
// never issues the gradient allreduce that rank 0's reducer waits for. Both ranks must
// stop within the timeout, each with one line naming its rank and what it waited for,
// and the job must exit non-zero (the failure policy of engine/launch.h).
//
//   timeout_program SECONDS
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddp/reducer.h"
#include "engine/launch.h"
#include "model/rank_model.h"

int main(int argc, char** argv) {
  using namespace tandem;
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  const auto timeout = std::chrono::nanoseconds(static_cast<std::int64_t>(seconds * 1e9));
  Job job("mpi", {.timeout = timeout});
  job.run({.comm = {.timeout = timeout}, .span_capacity_per_lane = 64}, [&](RankEnv& env) {
    Communicator& comm = env.comm;
    // Both ranks start waiting at the same moment, so that each reaches its own timeout
    // before the other's failure ends the job: rank 0 builds its model and reducer first
    // (loading libraries, first touches of the GEMM library), then both pass a barrier.
    std::unique_ptr<RankModel> model;
    std::unique_ptr<Reducer> reducer;
    if (comm.rank() == 0) {
      // One unit, one parameter of 1000 floats: one bucket of 4000 bytes.
      const ModelConfig config{.spec = ModelSpec::parse("linear:100x10", 10), .batch = 1};
      model = make_rank_model(config, env.recorder);
      reducer = std::make_unique<Reducer>(comm, *model, ReducerOptions{});
    }
    comm.barrier()->synchronize();
    if (comm.rank() == 0) {
      reducer->begin_step(7);
      reducer->after_backward(0, true);
      reducer->before_optimizer();  // throws TimeoutError: rank 1 never joins
    } else {
      // Skips the allreduce; waits for a message rank 0 never sends.
      std::vector<float> data(4);
      comm.recv(data, 0, 99)->synchronize();
    }
    std::fprintf(stderr, "timeout_program: rank %d finished, which it must not\n", comm.rank());
    std::exit(3);
    return std::string();
  });
  return 3;
}
