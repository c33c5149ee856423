#include "engine/device_trainer.h"

#include <map>
#include <mutex>

#include "core/error.h"
#include "engine/process_launch.h"

namespace tandem {
namespace {

// Function-local statics: registration runs from other translation units' static
// initializers, in an order nobody controls.
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<Device, DeviceTrainer>& registry() {
  static std::map<Device, DeviceTrainer> trainers;
  return trainers;
}

const DeviceTrainer& trainer_for(const TrainConfig& config) {
  check_device_available(config);
  const DeviceTrainer* trainer = find_device_trainer(config.device);
  TANDEM_CHECK(trainer != nullptr);
  return *trainer;
}

}  // namespace

bool register_device_trainer(Device device, DeviceTrainer trainer) {
  TANDEM_CHECK(device != Device::kCpu);
  std::lock_guard lock(registry_mutex());
  registry()[device] = trainer;
  return true;
}

const DeviceTrainer* find_device_trainer(Device device) {
  std::lock_guard lock(registry_mutex());
  const auto it = registry().find(device);
  return it == registry().end() ? nullptr : &it->second;
}

void check_device_available(const TrainConfig& config) {
  if (config.device == Device::kCpu) return;
  const std::string name(to_string(config.device));
  const DeviceTrainer* trainer = find_device_trainer(config.device);
  if (trainer == nullptr) {
    throw UsageError("--device " + name + ": this tandem was built without " + name +
                     " support (no CUDA toolkit at build time; see docs/GPU.md)");
  }
  if (const std::string why = trainer->unavailable(); !why.empty()) {
    throw UsageError("--device " + name + ": " + why);
  }
}

TrainResult train_local_on_device(const TrainConfig& config, const StepCallback& on_step) {
  if (config.device == Device::kCpu) return train_local(config, on_step);
  return trainer_for(config).train_local(config, on_step);
}

TrainResult train_process_on_device(const TrainConfig& config, ProcessCommunicator& host,
                                    const StepCallback& on_step) {
  if (config.device == Device::kCpu) return train_process(config, host, on_step);
  return trainer_for(config).train_process(config, host, on_step);
}

}  // namespace tandem
