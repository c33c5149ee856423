#include <algorithm>
#include <fstream>

#include "power/power.h"

namespace tandem {

namespace {

std::optional<double> read_number(const std::filesystem::path& path) {
  std::ifstream in(path);
  double value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

class RaplSource final : public PowerSource {
 public:
  RaplSource(std::filesystem::path dir, std::string name, double range_uj)
      : dir_(std::move(dir)), name_(std::move(name)), range_uj_(range_uj) {}

  std::string name() const override { return name_; }

  double energy_joules() override {
    const auto raw = read_number(dir_ / "energy_uj");
    if (!raw) return total_uj_ / 1e6;  // a failed read adds nothing
    if (last_uj_) {
      double delta = *raw - *last_uj_;
      if (delta < 0) delta += range_uj_;  // the counter wrapped
      total_uj_ += delta;
    }
    last_uj_ = *raw;
    return total_uj_ / 1e6;
  }

 private:
  std::filesystem::path dir_;
  std::string name_;
  double range_uj_;
  std::optional<double> last_uj_;
  double total_uj_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<PowerSource>> discover_rapl(const std::filesystem::path& root) {
  std::vector<std::unique_ptr<PowerSource>> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return out;
  std::vector<std::filesystem::path> zones;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("intel-rapl:")) zones.push_back(entry.path());
  }
  std::sort(zones.begin(), zones.end());
  for (const auto& zone : zones) {
    if (!read_number(zone / "energy_uj")) continue;  // unreadable (often root-only)
    std::string label = zone.filename().string();
    std::ifstream name_file(zone / "name");
    std::string zone_name;
    if (name_file >> zone_name) label = zone_name + " (" + label + ")";
    const double range = read_number(zone / "max_energy_range_uj").value_or(4294967296.0);
    out.push_back(std::make_unique<RaplSource>(zone, "rapl " + label, range));
  }
  return out;
}

}  // namespace tandem
