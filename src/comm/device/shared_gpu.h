// The `shared` device communicator: several ranks, threads of one process, on one GPU.
// Each rank has its own streams and buffers; its collectives move real data between the
// ranks' buffers with copy and reduce kernels on its own communication stream, so that
// --ranks N runs what N GPUs would (a sharded strategy holds 1/N of the model per rank, a
// pipeline's stages pass their activations) while the ranks' compute and communication
// kernels share one GPU's SMs and memory bandwidth. See docs/GPU.md ("Ranks sharing one
// GPU") and Note [shared-gpu protocol] in shared_gpu.cu.
//
// What it promises: c10d's and NCCL's meaning for every operation of comm/communicator.h
// (sum and average in fp32, fp16 and bf16; reduce-scatter; allgather; broadcast; barrier;
// point to point matched in issue order per pair of ranks, a send waiting for its
// receive, as NCCL's; groups; split). Every rank issues the same collectives in the same
// order. Unlike NCCL's, an operation is issued (returns its Work) only once the ranks it
// involves have all issued it: the wait NCCL makes on the device is made on the host, so
// that no stream ever waits for work not yet enqueued. Not across processes: a job under
// mpirun uses nccl.
#pragma once

#include <memory>
#include <vector>

#include "comm/backend_registry.h"

namespace tandem {

// `options.ranks` communicators on CUDA device `device`, rank r at index r. Throws
// UsageError for bad options, RuntimeError when CUDA fails.
std::vector<std::unique_ptr<Communicator>> make_shared_gpu_world(const BackendOptions& options,
                                                                 int device);

}  // namespace tandem
