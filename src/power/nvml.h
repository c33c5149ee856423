// NVML power source for NVIDIA GPUs, loaded at run time: libnvidia-ml.so.1 is opened
// with dlopen (it ships with the driver, not the toolkit), so tandem builds and runs
// without it; where it is missing or finds no GPU, discovery returns no source, which
// reports say as "unavailable", never as 0 W.
//
// Energy: nvmlDeviceGetTotalEnergyConsumption (millijoules since the driver loaded,
// Volta and newer). Where the counter is unsupported, the source integrates
// nvmlDeviceGetPowerUsage (milliwatts, averaged by the driver over about a second on
// recent GPUs) over the time between reads, and its name says "integrated". Each read
// also takes the SM clock (nvmlDeviceGetClockInfo) and the GPU temperature.
// tandem only reads: it never changes power limits, clocks or persistence mode.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "power/power.h"

namespace tandem {

struct NvmlDiscovery {
  std::vector<std::unique_ptr<PowerSource>> sources;  // one per GPU, "nvml gpu0 (NAME)"
  std::string status;  // one line: "2 GPU(s)", or why none ("libnvidia-ml.so.1 not found")
};

// Every GPU NVML sees. `library` is the name given to dlopen (tests pass a missing one).
NvmlDiscovery discover_nvml(const std::string& library = "libnvidia-ml.so.1");

// What train and characterize sample: every RAPL zone under `powercap_root`, and with
// `gpus` every GPU NVML sees. `status` is the header's line about them ("1 RAPL zone(s),
// NVML 1 GPU(s)", or why there is none of a kind).
NvmlDiscovery discover_power(const std::string& powercap_root, bool gpus);

}  // namespace tandem
