// Runs this process's rank of a multi-process job (a process backend such as mpi) and
// brings every rank's results to rank 0 as one run: step records and spans gathered
// there, their times moved onto rank 0's clock.
//
// Clock alignment (docs/MPI.md): offsets to rank 0 are estimated by ping-pong before
// and after training; a rank's time t becomes t - offset(t), with the offset
// interpolated linearly between the two estimates (so a steady drift cancels), and the
// largest half round trip is reported as the uncertainty.
#pragma once

#include <functional>

#include "comm/backend_registry.h"
#include "engine/trainer.h"

namespace tandem {

// Collective over `comm`. On rank 0 the result holds every rank's steps and spans
// (sorted like train_local's) and rank 0's final parameters; on other ranks only their
// own steps. config.ranks must equal comm.size().
TrainResult train_process(const TrainConfig& config, ProcessCommunicator& comm,
                          const StepCallback& on_step = {});

// What train_process runs between the clock estimates: this rank's training, recording
// into `recorder` (train_rank for the CPU; the CUDA trainer passes its own).
using RankTraining = std::function<TrainResult(RankRecorder& recorder)>;
// train_process with the rank's training given; the recorder holds span_capacity spans
// per lane. The result's device fields come from what `train` returned.
TrainResult train_process_with(const TrainConfig& config, ProcessCommunicator& comm,
                               std::size_t span_capacity, const RankTraining& train);

// Moves rank-local times onto rank 0's clock: t - offset, the offset interpolated
// between `before` and `after` by t (extrapolated flat outside them).
std::int64_t to_rank0_clock(std::int64_t t_ns, const ClockOffset& before, const ClockOffset& after);

// The failure policy of a multi-process job: prints "tandem: rank R: <what>" as one
// line on stderr and ends every process of the job with exit code 1, so no rank waits
// forever for one that failed.
[[noreturn]] void abort_job_after(ProcessCommunicator& comm, const std::exception& error);

}  // namespace tandem
