// Data-parallel training on CUDA devices: the CPU trainer's step (engine/trainer.h) with
// the math on a compute stream (compute/cuda/cuda_model.h) and the gradient all-reduce on
// a device communicator's stream (comm/device/device_comm.h).
//
// One step on one rank, with no host synchronization until its end:
//   for each micro-batch: forward, backward; on the last one, after each layer's
//   backward the buckets of the plan (ddp/reducer.h's plan_buckets, the CPU layout) whose
//   parameters are all ready are launched in plan order: an event is recorded on the
//   compute stream and allreduce(bucket, kAverage, that event) is enqueued;
//   then the compute stream waits on every bucket's done_event (a wait span), runs SGD on
//   the fp32 master weights, zeroes the gradients and copies the loss to pinned memory;
//   the host then waits (within the timeout) for the collectives' Works, synchronizes
//   the stream once, and reads the loss for the step line.
// Compute and wait spans are timed with CUDA events (timing source "cuda-events",
// compute/cuda/event_timer.h); comm spans come from the communicator.
#pragma once

#include <string>

#include "comm/backend_registry.h"
#include "comm/device/device_comm.h"
#include "engine/trainer.h"

namespace tandem {

// One rank on comm.device(). `host`, when given, carries --verify's hash comparison
// (multi-process runs); without it the caller compares the records' hashes.
TrainResult train_rank_cuda(const TrainConfig& config, DeviceCommunicator& comm,
                            RankRecorder& recorder, const StepCallback& on_step,
                            Communicator* host = nullptr);

// Every rank a thread of this process, rank r on device r (make_local_device_communicators).
TrainResult train_local_cuda(const TrainConfig& config, const StepCallback& on_step = {});

// This process's rank of an mpirun/srun job; `host` is the mpi communicator (the NCCL id
// travels over it, and the results are gathered to rank 0 over it as on the CPU).
TrainResult train_process_cuda(const TrainConfig& config, ProcessCommunicator& host,
                               const StepCallback& on_step = {});

// "" when a CUDA device is usable, else why not (for --device cuda's error line).
std::string cuda_unavailable_reason();

}  // namespace tandem
