#include "core/error.h"
#include "experiment/workload.h"
#include "report/train_report.h"

namespace tandem {

std::string_view to_string(Scenario scenario) {
  switch (scenario) {
    case Scenario::kComputeOnly:
      return "compute-only";
    case Scenario::kCommOnly:
      return "comm-only";
    case Scenario::kSequential:
      return "sequential";
    case Scenario::kOverlapped:
      return "overlapped";
  }
  return "?";
}

namespace {

// What a training workload says of itself: one line, and its configuration.
std::string train_description(const TrainConfig& config) {
  std::string text = "train " + config.model.text + ", " + std::to_string(config.ranks) +
                     " ranks, batch " + std::to_string(config.batch) + ", " +
                     config.reducer.plan.strategy.to_string();
  if (config.pipeline.stages > 1) {
    text += ", pipeline " + std::to_string(config.pipeline.stages) + " stages " +
            to_string(config.pipeline.schedule) + " x " + std::to_string(micro_batches(config)) +
            " micro-batches";
  }
  if (config.device != Device::kCpu) {
    text += ", " + std::string(to_string(config.device)) + " " +
            std::string(to_string(config.precision));
  }
  return text;
}

nlohmann::json train_workload_json(const TrainConfig& config) {
  nlohmann::json j = train_config_json(config, {});
  // What only a run knows: characterize() adds where the runs ran.
  for (const char* key : {"buckets", "steps", "backend", "backend_details", "binding", "hosts",
                          "ranks_per_host", "clock_uncertainty_ns", "clock_offset_ns"}) {
    j.erase(key);
  }
  j["workload"] = "train";
  return j;
}

class TrainWorkload final : public Workload {
 public:
  explicit TrainWorkload(const TrainConfig& config) : config_(config) {
    config_.record = true;
    validate(config_);
    // One split for every scenario, measured before any runs (--split auto).
    if (config_.pipeline.split_auto) config_.pipeline.split = measured_split(config_);
  }

  std::string describe() const override { return train_description(config_); }
  nlohmann::json config_json() const override { return train_workload_json(config_); }

  Timeline run(Job& job, Scenario scenario, int steps) override {
    TrainConfig c = scenario_config(config_, scenario);
    c.steps = steps;
    return train(c, job).timeline;
  }

 private:
  TrainConfig config_;
};

// Note [simulated workload]: a training configuration whose scenarios are predicted on a
// cluster; what it describes and records is the train workload's, plus the cluster.
class SimulatedWorkload final : public Workload {
 public:
  SimulatedWorkload(const TrainConfig& config, const SimulateOptions& options)
      : config_(config), options_(options) {
    config_.record = true;
    if (config_.pipeline.split_auto) config_.pipeline.split = predicted_split(config_, options_);
  }

  std::string describe() const override {
    return train_description(config_) + ", " + std::string(to_string(config_.precision)) +
           ", simulated on " + options_.cluster.describe();
  }
  nlohmann::json config_json() const override {
    nlohmann::json j = train_workload_json(config_);
    j["workload"] = "simulated";
    j["device"] = "simulated";
    j["cluster"] = options_.cluster.name;
    j["device_profile"] = options_.cluster.device.name;
    return j;
  }
  Timeline run(Job&, Scenario scenario, int steps) override {
    TrainConfig c = scenario_config(config_, scenario);
    c.steps = steps;
    return simulate_training(c, options_).timeline;
  }

 private:
  TrainConfig config_;
  SimulateOptions options_;
};

}  // namespace

TrainConfig scenario_config(TrainConfig c, Scenario scenario) {
  switch (scenario) {
    case Scenario::kComputeOnly:
      c.reducer.mode = CommMode::kOff;
      break;
    case Scenario::kCommOnly:
      c.compute = false;
      break;
    case Scenario::kSequential:
      c.reducer.mode = CommMode::kSequential;
      break;
    case Scenario::kOverlapped:
      break;
  }
  return c;
}

std::unique_ptr<Workload> make_simulated_workload(const TrainConfig& config,
                                                  const SimulateOptions& options) {
  return std::make_unique<SimulatedWorkload>(config, options);
}

std::unique_ptr<Workload> make_train_workload(const TrainConfig& config) {
  return std::make_unique<TrainWorkload>(config);
}

}  // namespace tandem
