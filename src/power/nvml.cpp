// NVML power source (nvml.h), through dlopen and a handful of function pointers.
#include "power/nvml.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {

namespace {

// The few NVML declarations tandem needs, from NVML's public API (nvml.h is not
// required at build time). Return codes: 0 is NVML_SUCCESS.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;         // NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

struct NvmlApi {
  NvmlReturn (*init)() = nullptr;                                         // nvmlInit_v2
  NvmlReturn (*shutdown)() = nullptr;                                     // nvmlShutdown
  const char* (*error_string)(NvmlReturn) = nullptr;                      // nvmlErrorString
  NvmlReturn (*device_count)(unsigned int*) = nullptr;                    // nvmlDeviceGetCount_v2
  NvmlReturn (*handle_by_index)(unsigned int, NvmlDevice*) = nullptr;     // ..._v2
  NvmlReturn (*name)(NvmlDevice, char*, unsigned int) = nullptr;          // nvmlDeviceGetName
  NvmlReturn (*total_energy)(NvmlDevice, unsigned long long*) = nullptr;  // mJ
  NvmlReturn (*power_usage)(NvmlDevice, unsigned int*) = nullptr;         // mW
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned int*) = nullptr;     // MHz
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned int*) = nullptr;    // degrees C
  // Power limits (NvmlPowerLimits only; a library without them still measures).
  NvmlReturn (*get_limit)(NvmlDevice, unsigned int*) = nullptr;                   // mW
  NvmlReturn (*limit_range)(NvmlDevice, unsigned int*, unsigned int*) = nullptr;  // mW
  NvmlReturn (*set_limit)(NvmlDevice, unsigned int) = nullptr;                    // mW
  NvmlReturn (*handle_by_pci)(const char*, NvmlDevice*) = nullptr;                // ..._v2
};

// The loaded library, initialized; shut down and closed with the last source.
class NvmlLibrary {
 public:
  NvmlLibrary(void* handle, NvmlApi api) : handle_(handle), api_(api) {}
  ~NvmlLibrary() {
    api_.shutdown();
    dlclose(handle_);
  }
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;
  const NvmlApi& api() const { return api_; }
  std::string error(NvmlReturn r) const {
    const char* text = api_.error_string != nullptr ? api_.error_string(r) : nullptr;
    return text != nullptr ? text : "NVML error " + std::to_string(r);
  }

 private:
  void* handle_;
  NvmlApi api_;
};

class NvmlSource final : public PowerSource {
 public:
  NvmlSource(std::shared_ptr<NvmlLibrary> lib, NvmlDevice device, std::string name, bool counter)
      : lib_(std::move(lib)), device_(device), name_(std::move(name)), counter_(counter) {}

  std::string name() const override { return name_; }

  double energy_joules() override {
    const NvmlApi& api = lib_->api();
    if (counter_) {
      unsigned long long mj = 0;
      // A failed read adds nothing (as RAPL's does).
      if (api.total_energy(device_, &mj) == kNvmlSuccess) {
        if (!origin_mj_) origin_mj_ = mj;
        last_joules_ = static_cast<double>(mj - *origin_mj_) / 1e3;
      }
      return last_joules_;
    }
    // No counter: trapezoids of the power readings over time.
    unsigned int mw = 0;
    const std::int64_t t = now_ns();
    if (api.power_usage(device_, &mw) != kNvmlSuccess) return last_joules_;
    const double watts = mw / 1e3;
    if (last_t_ns_ != 0) {
      last_joules_ += (watts + last_watts_) / 2 * static_cast<double>(t - last_t_ns_) / 1e9;
    }
    last_t_ns_ = t;
    last_watts_ = watts;
    return last_joules_;
  }

  PowerGauges gauges() override {
    const NvmlApi& api = lib_->api();
    PowerGauges g;
    unsigned int value = 0;
    if (api.clock_info(device_, kNvmlClockSm, &value) == kNvmlSuccess) g.sm_clock_mhz = value;
    if (api.temperature(device_, kNvmlTemperatureGpu, &value) == kNvmlSuccess)
      g.temperature_c = value;
    return g;
  }

 private:
  std::shared_ptr<NvmlLibrary> lib_;
  NvmlDevice device_;
  std::string name_;
  bool counter_;
  std::optional<unsigned long long> origin_mj_;
  double last_joules_ = 0;
  std::int64_t last_t_ns_ = 0;
  double last_watts_ = 0;
};

template <typename F>
bool load(void* handle, const char* symbol, F& fn) {
  fn = reinterpret_cast<F>(dlsym(handle, symbol));
  return fn != nullptr;
}

// The library loaded and initialized, or null with `why`.
std::shared_ptr<NvmlLibrary> open_nvml(const std::string& library, std::string& why) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    why = library + " not found (no NVIDIA driver)";
    return nullptr;
  }
  NvmlApi api;
  const char* missing = nullptr;
  for (auto [symbol, ok] :
       {std::pair{"nvmlInit_v2", load(handle, "nvmlInit_v2", api.init)},
        {"nvmlShutdown", load(handle, "nvmlShutdown", api.shutdown)},
        {"nvmlErrorString", load(handle, "nvmlErrorString", api.error_string)},
        {"nvmlDeviceGetCount_v2", load(handle, "nvmlDeviceGetCount_v2", api.device_count)},
        {"nvmlDeviceGetHandleByIndex_v2",
         load(handle, "nvmlDeviceGetHandleByIndex_v2", api.handle_by_index)},
        {"nvmlDeviceGetName", load(handle, "nvmlDeviceGetName", api.name)},
        {"nvmlDeviceGetTotalEnergyConsumption",
         load(handle, "nvmlDeviceGetTotalEnergyConsumption", api.total_energy)},
        {"nvmlDeviceGetPowerUsage", load(handle, "nvmlDeviceGetPowerUsage", api.power_usage)},
        {"nvmlDeviceGetClockInfo", load(handle, "nvmlDeviceGetClockInfo", api.clock_info)},
        {"nvmlDeviceGetTemperature", load(handle, "nvmlDeviceGetTemperature", api.temperature)}}) {
    if (!ok && missing == nullptr) missing = symbol;
  }
  if (missing != nullptr) {
    dlclose(handle);
    why = library + " lacks " + missing;
    return nullptr;
  }
  load(handle, "nvmlDeviceGetPowerManagementLimit", api.get_limit);
  load(handle, "nvmlDeviceGetPowerManagementLimitConstraints", api.limit_range);
  load(handle, "nvmlDeviceSetPowerManagementLimit", api.set_limit);
  load(handle, "nvmlDeviceGetHandleByPciBusId_v2", api.handle_by_pci);
  if (const NvmlReturn r = api.init(); r != kNvmlSuccess) {
    const char* text = api.error_string(r);
    why = std::string("nvmlInit_v2 failed: ") + (text != nullptr ? text : "?");
    dlclose(handle);
    return nullptr;
  }
  return std::make_shared<NvmlLibrary>(handle, api);
}

}  // namespace

NvmlDiscovery discover_nvml(const std::string& library) {
  NvmlDiscovery out;
  const std::shared_ptr<NvmlLibrary> lib = open_nvml(library, out.status);
  if (lib == nullptr) return out;
  const NvmlApi& api = lib->api();
  unsigned int count = 0;
  if (const NvmlReturn r = api.device_count(&count); r != kNvmlSuccess) {
    out.status = "nvmlDeviceGetCount_v2 failed: " + lib->error(r);
    return out;
  }
  std::string skipped;
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (const NvmlReturn r = api.handle_by_index(i, &device); r != kNvmlSuccess) {
      skipped += " gpu" + std::to_string(i) + ": " + lib->error(r) + ";";
      continue;
    }
    char name[96] = {};
    if (api.name(device, name, sizeof name) != kNvmlSuccess) name[0] = '\0';
    unsigned long long mj = 0;
    unsigned int mw = 0;
    const bool counter = api.total_energy(device, &mj) == kNvmlSuccess;
    if (!counter && api.power_usage(device, &mw) != kNvmlSuccess) {
      skipped += " gpu" + std::to_string(i) + ": no energy counter and no power reading;";
      continue;
    }
    std::string label = "nvml gpu" + std::to_string(i);
    if (name[0] != '\0') label += std::string(" (") + name + ")";
    if (!counter) label += " [power integrated]";
    out.sources.push_back(std::make_unique<NvmlSource>(lib, device, label, counter));
  }
  out.status = std::to_string(out.sources.size()) + " GPU(s)";
  if (!skipped.empty()) out.status += ", skipped:" + skipped;
  if (count == 0) out.status = "NVML sees no GPU";
  return out;
}

NvmlDiscovery discover_power(const std::string& powercap_root, bool gpus) {
  NvmlDiscovery out{.sources = discover_rapl(powercap_root)};
  out.status = out.sources.empty() ? "RAPL unavailable (no readable zone)"
                                   : std::to_string(out.sources.size()) + " RAPL zone(s)";
  if (gpus) {
    NvmlDiscovery nvml = discover_nvml();
    out.status +=
        nvml.sources.empty() ? ", NVML unavailable (" + nvml.status + ")" : ", NVML " + nvml.status;
    for (auto& s : nvml.sources) out.sources.push_back(std::move(s));
  }
  return out;
}

struct NvmlPowerLimits::State {
  std::mutex mutex;  // set, restore and close may come from a signal's thread
  bool closed = false;
  std::shared_ptr<NvmlLibrary> lib;
  std::vector<NvmlDevice> devices;
  std::vector<unsigned int> found_mw;
  bool changed = false;
};

NvmlPowerLimits::NvmlPowerLimits(const std::string& library,
                                 const std::vector<std::string>& pci_bus_ids)
    : state_(std::make_unique<State>()) {
  const std::string what = "--sweep power-cap: ";
  std::string why;
  state_->lib = open_nvml(library, why);
  if (state_->lib == nullptr)
    throw UsageError(what + "cannot reach the GPUs' power limits: " + why);
  const NvmlApi& api = state_->lib->api();
  if (api.get_limit == nullptr || api.limit_range == nullptr || api.set_limit == nullptr ||
      api.handle_by_pci == nullptr) {
    throw UsageError(what + library + " has no power-limit calls");
  }
  unsigned int count = 0;
  if (const NvmlReturn r = api.device_count(&count); r != kNvmlSuccess || count == 0) {
    throw UsageError(what + "NVML sees no GPU" +
                     (r != kNvmlSuccess ? " (" + state_->lib->error(r) + ")" : std::string()));
  }
  // The GPUs given by PCI bus id, else every one NVML sees.
  const unsigned int gpus =
      pci_bus_ids.empty() ? count : static_cast<unsigned int>(pci_bus_ids.size());
  for (unsigned int i = 0; i < gpus; ++i) {
    NvmlDevice device = nullptr;
    unsigned int limit = 0, low = 0, high = 0;
    const std::string gpu =
        pci_bus_ids.empty() ? "gpu" + std::to_string(i)
                            : "cuda device " + std::to_string(i) + " (PCI " + pci_bus_ids[i] + ")";
    NvmlReturn r = pci_bus_ids.empty() ? api.handle_by_index(i, &device)
                                       : api.handle_by_pci(pci_bus_ids[i].c_str(), &device);
    if (r == kNvmlSuccess) r = api.get_limit(device, &limit);
    if (r == kNvmlSuccess) r = api.limit_range(device, &low, &high);
    if (r != kNvmlSuccess) {
      throw UsageError(what + "cannot read " + gpu + "'s power limit: " + state_->lib->error(r));
    }
    // The right to change it, tried without changing anything.
    if (r = api.set_limit(device, limit); r != kNvmlSuccess) {
      throw UsageError(what + "may not change " + gpu + "'s power limit (" + state_->lib->error(r) +
                       "): it takes root or the driver's permission, and a GPU that is yours "
                       "to change");
    }
    char name[96] = {};
    if (api.name(device, name, sizeof name) != kNvmlSuccess) name[0] = '\0';
    state_->devices.push_back(device);
    state_->found_mw.push_back(limit);
    gpus_.push_back({.name = name[0] != '\0' ? gpu + " (" + name + ")" : gpu,
                     .found_w = limit / 1e3,
                     .min_w = low / 1e3,
                     .max_w = high / 1e3});
  }
}

NvmlPowerLimits::~NvmlPowerLimits() {
  try {
    restore();
  } catch (const std::exception& e) {
    // A destructor must not throw; the limits a user must put back by hand are named.
    std::fprintf(stderr, "tandem: %s\n", e.what());
  }
}

void NvmlPowerLimits::check(double watts) const {
  for (const Gpu& g : gpus_) {
    if (watts < g.min_w || watts > g.max_w) {
      char range[96];
      std::snprintf(range, sizeof range, "%g W outside %s's range, %g to %g W", watts,
                    g.name.c_str(), g.min_w, g.max_w);
      throw UsageError(std::string("--sweep power-cap: ") + range);
    }
  }
}

void NvmlPowerLimits::set(double watts) {
  check(watts);
  std::lock_guard lock(state_->mutex);
  if (state_->closed) throw RuntimeError("the power limits were put back: the run is ending");
  const NvmlApi& api = state_->lib->api();
  const auto mw = static_cast<unsigned int>(std::lround(watts * 1e3));
  state_->changed = true;
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    if (const NvmlReturn r = api.set_limit(state_->devices[i], mw); r != kNvmlSuccess) {
      throw RuntimeError("setting " + gpus_[i].name + "'s power limit to " +
                         std::to_string(mw / 1000) + " W failed: " + state_->lib->error(r));
    }
  }
}

void NvmlPowerLimits::close() {
  std::lock_guard lock(state_->mutex);
  state_->closed = true;
  put_back();
}

void NvmlPowerLimits::restore() {
  std::lock_guard lock(state_->mutex);
  put_back();
}

void NvmlPowerLimits::put_back() {
  if (!state_->changed) return;
  const NvmlApi& api = state_->lib->api();
  std::string failed;
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    if (const NvmlReturn r = api.set_limit(state_->devices[i], state_->found_mw[i]);
        r != kNvmlSuccess) {
      failed += " " + gpus_[i].name + " (to " + std::to_string(state_->found_mw[i] / 1000) +
                " W: " + state_->lib->error(r) + ")";
    }
  }
  state_->changed = !failed.empty();
  if (!failed.empty()) throw RuntimeError("could not put back the power limit of" + failed);
}

double parse_watts(const std::string& text, const std::string& flag) {
  const bool kilo = text.ends_with("kW");
  const std::size_t unit = kilo ? 2 : text.ends_with("W") ? 1 : 0;
  try {
    return parse_double_in(std::string_view(text).substr(0, text.size() - unit), flag,
                           {.min = 0, .max = kilo ? 100 : 1e5, .min_open = true}) *
           (kilo ? 1e3 : 1);
  } catch (const UsageError&) {
    throw UsageError(flag + ": must be a power above 0 W and at most 100 kW (\"300W\", " +
                     "\"0.3kW\"), got '" + text + "'");
  }
}

}  // namespace tandem
