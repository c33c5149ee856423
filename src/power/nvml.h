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
// tandem only reads, except where the user asks for power caps (`characterize --sweep
// power-cap=...`, NvmlPowerLimits below): clocks and persistence mode are never changed,
// and a changed power limit is put back as it was.
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

// The power limits of the given GPUs (or every one NVML sees), changed only when the user
// sweeps them, and put back as they were found when this object goes (or at restore()). Opening
// reads each GPU's limit and the range it accepts, and tries the right to change it by setting the
// limit it has: without the right (root, or the driver's permission) or without NVML it
// throws UsageError, one line naming --sweep power-cap, before anything ran. A process
// killed outright (SIGKILL) cannot put the limits back: `nvidia-smi -pl` can.
class NvmlPowerLimits {
 public:
  struct Gpu {
    std::string name;    // "gpu0 (NVIDIA H100 80GB HBM3)"
    double found_w = 0;  // the limit when opened
    double min_w = 0;
    double max_w = 0;
  };

  // `pci_bus_ids`: the GPUs to limit (the run's: cuda_pci_bus_ids()); empty: every GPU.
  explicit NvmlPowerLimits(const std::string& library = "libnvidia-ml.so.1",
                           const std::vector<std::string>& pci_bus_ids = {});
  ~NvmlPowerLimits();
  NvmlPowerLimits(const NvmlPowerLimits&) = delete;
  NvmlPowerLimits& operator=(const NvmlPowerLimits&) = delete;

  const std::vector<Gpu>& gpus() const { return gpus_; }
  // Throws UsageError when `watts` is outside some GPU's range (nothing is set then).
  void check(double watts) const;
  // Every GPU's limit to `watts` (checked first).
  void set(double watts);
  // Every GPU's limit back to what it was when opened; a failure is thrown after every
  // GPU was tried.
  void restore();
  // restore(), and no set() after it: what a signal's cleanup calls (core/interrupt.h)
  // while the sweep's thread may be about to set the next point's limit. Thread-safe, as
  // are set() and restore().
  void close();

 private:
  struct State;
  void put_back();  // under State::mutex
  std::unique_ptr<State> state_;
  std::vector<Gpu> gpus_;
};

// "300W", "300" (watts) or "0.3kW", in (0, 100 kW]; throws UsageError naming `flag`.
double parse_watts(const std::string& text, const std::string& flag);

}  // namespace tandem
