// One rank's replica of a model on its device: the compute interface the engine's rank
// loop drives (engine/trainer.h), implemented once (device_rank_model.h) for every device
// (the CPU here, CUDA in model/cuda/cuda_rank_model.cpp), so one loop serves every device.
//
// A step, as the loop calls it:
//   begin_step(step)
//   for each micro-batch: set_micro_batch(i); forward_unit(u) for u = 0..units-1;
//     forward_loss(); backward_loss(); backward_unit(u) for u = units-1..0
//   optimizer_step(scale); zero_grad()
//   end_step()  -> the step's loss sum and end time
// Device models only enqueue work on stream() until end_step(), which is the step's one
// host synchronization; the CPU model computes as it is called. Both record their
// compute spans (kinds, tags and flops as model.h lists them) on the spans' clock, and
// begin_span()/end_span() time the engine's own intervals (waits, the optimizer) the same
// way: on a GPU a wait span is how long the compute stream stood still.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/precision.h"
#include "core/half.h"
#include "core/stream.h"
#include "model/layout.h"
#include "model/sgd.h"
#include "model/tensor_group.h"
#include "timeline/recorder.h"

namespace tandem {

struct ModelConfig {
  ModelSpec spec;
  int batch = 64;        // rows per micro-batch
  int data_batches = 8;  // distinct batches in the rank's shard, cycled
  std::uint64_t seed = 1;
  SgdOptions sgd{};
  Device device = Device::kCpu;
  Precision precision = Precision::kFp32;
  int rank = 0;           // which shard of the data
  int ranks = 1;          // how many shards (--data files are cut into one per rank)
  std::string data_path;  // transformers: train on this file's bytes (token_data.h)
  int ordinal = -1;       // the device's ordinal (-1: the CPU)
  LayoutOptions layout{};  // how the flat arrays hold the units (a sharded strategy pads)
};

// An array of floats in a rank model's memory (RankModel::allocate_zeroed).
class ModelArray {
 public:
  virtual ~ModelArray() = default;
  virtual std::span<float> span() = 0;
};

class RankModel {
 public:
  virtual ~RankModel() = default;

  virtual const ModelLayout& layout() const = 0;
  int units() const { return layout().units(); }
  // The flat arrays (layout.h) in the model's memory: device pointers on a GPU.
  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  // Elements [begin, end) of params() or grads() are not needed now: the model may give
  // their memory back (the CPU model returns the whole pages among them to the operating
  // system, the CUDA model its units to the driver, cuda/device_pages.h). Before anything
  // touches them again they are restored, and read as zero then; a host copy
  // (download_params) reads them as zero. Sharded strategies (ddp/sharded.h) keep only
  // the units they have gathered this way.
  virtual void discard_params(std::size_t begin, std::size_t end) = 0;
  virtual void discard_grads(std::size_t begin, std::size_t end) = 0;
  virtual void restore_params(std::size_t begin, std::size_t end) = 0;
  virtual void restore_grads(std::size_t begin, std::size_t end) = 0;
  // Elements [begin, end) of grads() become zero and keep their memory (a pipeline stage
  // zeroes its own units between steps). DeviceRankModel zeroes them in place; a model
  // without its own may discard them.
  virtual void zero_grads(std::size_t begin, std::size_t end) { discard_grads(begin, end); }
  // Where device work is enqueued (collectives are ordered after it); null on the CPU.
  virtual ComputeStream stream() const { return nullptr; }

  // State that a sharded strategy (ddp/sharded.h) keeps beside the flat arrays, in the
  // same memory, so that one strategy serves every device. On a device the operations
  // are enqueued on stream(), in order with the passes and the collectives.
  //
  // `numel` zeroed floats in the model's memory (device memory on a GPU), freed with the
  // returned array, which must not outlive the model.
  virtual std::unique_ptr<ModelArray> allocate_zeroed(std::size_t numel) = 0;
  // Copies `from` into `to` (the same size), both in the model's memory.
  virtual void copy(std::span<const float> from, std::span<float> to) = 0;
  // One SGD step with the model's options (model.h's rule) on spans of the model's
  // memory: `velocity` is the caller's momentum state for `params`.
  virtual void sgd_step(std::span<float> params, std::span<const float> grads,
                        std::span<float> velocity, float grad_scale) = 0;
  // Gradient compression (--compress fp16|bf16): to[i] := from[i] * scale rounded to
  // `type` (fp16 or bf16, to nearest even), and back. Both sides in the model's memory (a
  // 16-bit array lives in an allocate_zeroed array of half as many floats), on its stream.
  virtual void narrow(std::span<const float> from, std::uint16_t* to, DataType type,
                      float scale) = 0;
  virtual void widen(const std::uint16_t* from, std::span<float> to, DataType type) = 0;

  // Pipeline stages (engine/pipeline.h, docs/PIPELINE.md): a rank that holds some units
  // of the model and keeps several micro-batches in flight.
  //
  // Before the first step: run only the units marked in `owned` and keep activations for
  // `slots` micro-batches (slot 0 current), of those units only.
  virtual void configure_stage(const std::vector<bool>& owned, int slots) = 0;
  // set_micro_batch and the passes use `slot`'s activations from now on.
  virtual void select_slot(int slot) = 0;
  // The activation `unit` reads (unit - 1's output) in `slot`: a stage receives into it
  // before forward_unit(unit), or sends it after forward_unit(unit - 1).
  virtual std::span<float> unit_input(int unit, int slot) = 0;
  // A stage whose last unit is not the model's starts backward at `unit` from
  // dL/d(unit's output) (copied), instead of backward_loss().
  virtual void begin_backward(int unit, std::span<const float> output_grad) = 0;
  // After backward_unit(unit): dL/d(unit's input), valid until the next backward_unit.
  virtual std::span<const float> input_grad(int unit) = 0;
  // Bytes of the activations kept for this rank's units: every slot's (one micro-batch's
  // each), and the scratch that --recompute fills (one block's, shared by the slots).
  virtual std::int64_t activation_bytes() const = 0;

  // Tensor parallelism (ModelSpec::tensor > 1): the group the passes' collectives go over
  // (it must outlive them), set before the first pass. Only a model split that way takes
  // one.
  virtual void set_tensor_group(TensorGroup* group) = 0;

  // Starts `step`; returns its start time on the spans' clock.
  virtual std::int64_t begin_step(int step) = 0;
  // The shard's batch `index` (mod data_batches) is the input of what follows.
  virtual void set_micro_batch(int index) = 0;
  virtual void forward_unit(int unit) = 0;
  // Adds the micro-batch's mean loss to the step's sum.
  virtual void forward_loss() = 0;
  virtual void backward_loss() = 0;
  // Parameter gradients of `unit` accumulate (+=) into grads().
  virtual void backward_unit(int unit) = 0;
  // False when the current micro-batch skips `unit` (--layer-drop: ModelSpec::layer_drop):
  // its forward and backward run (as the identity), but its parameters get no gradient,
  // as autograd would never reach them.
  virtual bool unit_ran(int unit) const {
    (void)unit;
    return true;
  }
  // The mean loss over held-out data, where the model has some (a transformer trained
  // on a file); computed between steps, recording no spans.
  virtual std::optional<double> validation_loss() { return std::nullopt; }
  // SGD on every parameter with the gradient scaled by grad_scale.
  virtual void optimizer_step(float grad_scale) = 0;
  virtual void zero_grad() = 0;
  // An interval of the engine's own (tag -1: none) on this model's clock; nest freely.
  virtual void begin_span(Lane lane, SpanKind kind, int tag = -1, NameId name = kNoName) = 0;
  virtual void end_span() = 0;

  struct StepEnd {
    double loss_sum = 0;  // over the step's micro-batches
    std::int64_t end_ns = 0;
    // fp16's dynamic loss scale after this step, and the steps it skipped so far (0: the
    // model has none).
    float loss_scale = 0;
    int skipped_steps = 0;
  };
  // Ends the step: waits for the device, records its spans, reads the loss back.
  virtual StepEnd end_step() = 0;

  // A host copy of the parameters (synchronizes a device).
  virtual std::vector<float> download_params() = 0;
  // One line for reports: the BLAS (threads) or cuBLAS and the GEMM precision.
  virtual std::string describe() const = 0;
  // The device, for reports ("" on the CPU).
  virtual std::string device_details() const { return {}; }
  // How compute spans are timed: "host-clock" or "cuda-events".
  virtual std::string timing_source() const = 0;
  // The most memory in use on the model's device since reset_device_peak, as its driver
  // counts it (every process's together; cuda/device_pages.h says when it is read); -1
  // on the CPU, whose peak is the process's resident set.
  virtual void reset_device_peak() = 0;
  virtual std::int64_t device_peak_bytes() const = 0;
};

// Runs `body` inside a span of `model` (begin_span's arguments), ended on the way out,
// a throw included.
template <typename Body>
void in_span(RankModel& model, Lane lane, SpanKind kind, int tag, NameId name, Body&& body) {
  model.begin_span(lane, kind, tag, name);
  try {
    body();
  } catch (...) {
    model.end_span();
    throw;
  }
  model.end_span();
}

// Bytes one replica of `config` allocates on its device, in doubles so that no absurd
// size overflows before it is compared. Nothing is allocated to compute it, so a run can
// be refused before it starts (engine/trainer.h).
struct ReplicaBytes {
  double state = 0;    // parameters, gradients, SGD velocity
  double working = 0;  // the passes' buffers and (on the CPU) the data shard
};
ReplicaBytes replica_bytes(const ModelConfig& config);

// The CPU model (always built in) or a registered device's. Spans go to `recorder`.
// Throws UsageError when the device cannot run here (check_device_available).
std::unique_ptr<RankModel> make_rank_model(const ModelConfig& config, RankRecorder& recorder);

// Devices besides the CPU live in targets that build only with their toolkit
// (model/cuda for --device cuda) and register here at start-up, so the engine and the CLI
// pick a device without including its headers.
struct DeviceModels {
  // "" when the device can run here; else one line saying why not (no device, no driver).
  std::string (*unavailable)() = nullptr;
  std::unique_ptr<RankModel> (*make)(const ModelConfig& config, RankRecorder& recorder) = nullptr;
  // How many devices this machine has (the ranks of an in-process job use 0..n-1).
  int (*count)() = nullptr;
  // Bytes one replica of `config` allocates in device memory (a floor, as replica_bytes),
  // and the free memory of device `ordinal` now (-1: unknown): check_device_memory.
  ReplicaBytes (*replica_bytes)(const ModelConfig& config) = nullptr;
  std::int64_t (*free_bytes)(int ordinal) = nullptr;
  // Device `ordinal`'s PCI bus id ("00000000:65:00.0"), what NVML finds it by; "" unknown.
  std::string (*pci_bus_id)(int ordinal) = nullptr;
};
bool register_device_models(Device device, DeviceModels models);
const DeviceModels* find_device_models(Device device);
// Throws UsageError naming --device when `device` cannot run in this program on this
// machine (not built in, or no device present). The CPU always can.
void check_device_available(Device device);
// Throws UsageError, one line with the bytes needed, when a replica of `config` cannot
// fit in the free memory of the devices it would use: devices 0..ranks_here-1 for an
// in-process run (ranks_here > 0), or (ranks_here == 0: a launcher's process, whose device
// is its index on its host) the device with the most free memory. Does nothing for the
// CPU (the trainer checks host memory), for a device that is not available here, or where
// the free memory is unknown.
void check_device_memory(const ModelConfig& config, int ranks_here);

}  // namespace tandem
