// Training on an accelerator. The trainer for a device lives in a target that builds
// only where its toolkit is found (tandem_cuda_engine for --device cuda) and registers
// itself here at start-up, so the CLI and the characterize workloads pick a device
// without including its headers, and a build without the toolkit answers with one clear
// UsageError.
#pragma once

#include <string>

#include "comm/backend_registry.h"
#include "engine/trainer.h"

namespace tandem {

struct DeviceTrainer {
  // Empty when the device can run here; else one line saying why (no device, no driver).
  std::string (*unavailable)() = nullptr;
  // Every rank a thread of this process, rank r on device r: train_local's twin.
  TrainResult (*train_local)(const TrainConfig& config, const StepCallback& on_step) = nullptr;
  // This process's rank of a multi-process job over `host`: train_process's twin.
  TrainResult (*train_process)(const TrainConfig& config, ProcessCommunicator& host,
                               const StepCallback& on_step) = nullptr;
};

// Returns true so that a static initializer can call it.
bool register_device_trainer(Device device, DeviceTrainer trainer);
// Null when this program has no trainer for `device` (always null for kCpu).
const DeviceTrainer* find_device_trainer(Device device);

// Throws UsageError naming --device when config.device cannot run in this program on
// this machine (not built in, or no device present). The CPU always can.
void check_device_available(const TrainConfig& config);

// train_local / train_process for any device.
TrainResult train_local_on_device(const TrainConfig& config, const StepCallback& on_step = {});
TrainResult train_process_on_device(const TrainConfig& config, ProcessCommunicator& host,
                                    const StepCallback& on_step = {});

}  // namespace tandem
