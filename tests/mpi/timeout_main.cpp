// A job where one rank skips a collective, run under mpirun -np 2 by test_mpi_cli: rank 1
// never issues the gradient allreduce that rank 0's reducer waits for. Both ranks must
// stop within the timeout, each with one line naming its rank and what it waited for,
// and the job must exit non-zero (the failure policy of abort_job_after).
//
//   timeout_program SECONDS
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/mpi/mpi_comm.h"
#include "core/error.h"
#include "core/parse.h"
#include "ddp/reducer.h"
#include "engine/process_launch.h"

int main(int argc, char** argv) {
  using namespace tandem;
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  const auto timeout_ns = static_cast<std::int64_t>(seconds * 1e9);
  auto comm = make_mpi_communicator({.timeout_ns = timeout_ns});
  try {
    if (comm->rank() == 0) {
      // One layer, one parameter of 1000 floats: one bucket of 4000 bytes.
      std::vector<float> grads(1000, 1.0f);
      RankRecorder recorder(0, 64);
      Reducer reducer({GradParam{.layer = 0, .offset = 0, .numel = grads.size()}}, grads, *comm,
                      recorder, {.timeout_ns = timeout_ns});
      reducer.prepare(7);
      reducer.mark_layer_ready(0);
      reducer.finish();  // throws TimeoutError: rank 1 never joins
    } else {
      // Skips the allreduce; waits for a message rank 0 never sends.
      std::vector<float> data(4);
      WorkPtr work = comm->recv(data, 0, 99);
      if (!work->wait_for(std::chrono::nanoseconds(timeout_ns))) {
        throw TimeoutError("rank " + std::to_string(comm->rank()) + ": " + work->info().describe() +
                           " not complete after " + format_duration_ns(static_cast<double>(timeout_ns)));
      }
    }
    std::fprintf(stderr, "timeout_program: rank %d finished, which it must not\n", comm->rank());
    return 3;
  } catch (const std::exception& e) {
    abort_job_after(*comm, e);
  }
}
