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

class TrainWorkload final : public Workload {
 public:
  explicit TrainWorkload(const TrainConfig& config) : config_(config) {
    config_.record = true;
    validate(config_);
  }

  std::string describe() const override {
    std::string text = "train " + config_.model.text + ", " + std::to_string(config_.ranks) +
                       " ranks, batch " + std::to_string(config_.batch) + ", " +
                       config_.reducer.plan.strategy.to_string();
    if (config_.pipeline.stages > 1) {
      text += ", pipeline " + std::to_string(config_.pipeline.stages) + " stages " +
              to_string(config_.pipeline.schedule) + " x " +
              std::to_string(micro_batches(config_)) + " micro-batches";
    }
    if (config_.device != Device::kCpu) {
      text += ", " + std::string(to_string(config_.device)) + " " +
              std::string(to_string(config_.precision));
    }
    return text;
  }

  nlohmann::json config_json() const override {
    nlohmann::json j = train_config_json(config_, {});
    // What only a run knows: characterize() adds where the runs ran.
    for (const char* key : {"buckets", "steps", "backend", "backend_details", "hosts",
                            "ranks_per_host", "clock_uncertainty_ns", "clock_offset_ns"}) {
      j.erase(key);
    }
    j["workload"] = "train";
    return j;
  }

  Timeline run(Job& job, Scenario scenario, int steps) override {
    TrainConfig c = config_;
    c.steps = steps;
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
    return train(c, job).timeline;
  }

 private:
  TrainConfig config_;
};

}  // namespace

std::unique_ptr<Workload> make_train_workload(const TrainConfig& config) {
  return std::make_unique<TrainWorkload>(config);
}

}  // namespace tandem
