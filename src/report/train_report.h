// What `tandem train` reports: the summary of a run (from the timeline's metrics and
// the step records), as text, JSON, and the per-step CSV.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/metrics.h"
#include "analysis/waiting.h"
#include "engine/trainer.h"
#include "power/power.h"

namespace tandem {

struct TrainSummary {
  std::size_t measured_steps = 0;   // after warm-up
  Summary step_ms;                  // per step: the slowest rank's wall time
  double samples_per_s = 0;         // global samples per second at the median step time
  std::int64_t bytes_per_step = 0;  // all-reduced bytes per rank per step
  std::int64_t uncompressed_bytes_per_step = 0;  // the same without --compress
  // From the timeline (NaN-filled when --no-timeline): per step, mean over ranks.
  Summary compute_ms, comm_ms, wait_ms, overlap_ms, exposed_comm_ms;
  // --recompute: the compute spent running forward work again in backward (the spans
  // named "recompute"), per step, mean over ranks; empty (count 0) without it.
  Summary recompute_ms;
  // --compress: the compute of the gradient's casts or PowerSGD's products (spans named
  // "compress"), per step, mean over ranks; empty without it.
  Summary compress_ms;
  // zero2/fsdp: the training thread's time giving units' memory back (the spans named
  // "give back", on the idle lane: in no other figure), per step, mean over ranks; empty
  // for the other strategies.
  Summary give_back_ms;
  double hidden_share = 0;              // Σ T_ovl / Σ T_comm over measured steps (HTA)
  // The blocked waiting split into skew and transfer over the measured steps
  // (analysis/waiting.h), and how far the ranks' clocks agree for it.
  WaitingAnalysis waiting;
  float first_loss = 0, last_loss = 0;  // mean over ranks
  bool has_loss = false;  // some step computed a loss (not comm-only runs or simulations)
  // Transformers: tokens predicted per second (samples x seq) at the median step time; 0
  // for the MLPs.
  double tokens_per_s = 0;
  // --data: the held-out loss after the last step that measured it (rank 0's; every rank
  // evaluates the same tail); has_val_loss false without one.
  bool has_val_loss = false;
  float val_loss = 0;
  int val_step = 0;  // 1-based
  // Pipeline stages: per rank, the median over measured steps of its bubble
  // (analysis/pipeline_metrics.h; empty without stages or a timeline), and the textbook
  // value for equal stages.
  std::vector<double> stage_bubble;
  double textbook_bubble = 0;
  // Over the measured steps, per source sampled on rank 0's host (RAPL zones, NVML's GPUs);
  // empty where none was readable (docs/METRICS.md, "Power").
  std::vector<PowerSummary> power;
  double energy_per_step(const PowerSummary& p) const {
    return p.energy_joules / static_cast<double>(std::max<std::size_t>(1, measured_steps));
  }
  // fp16 on cuda: the dynamic loss scale after the last step and the steps it skipped
  // (rank 0's; 0 and 0 without one).
  float loss_scale = 0;
  int skipped_steps = 0;
};

// `power`, where given, sampled the whole run: its summaries cover the measured steps.
TrainSummary summarize_training(const TrainConfig& config, const TrainResult& result, int warmup,
                                const PowerSampler* power = nullptr);
std::string format_train_summary(const TrainConfig& config, const TrainResult& result,
                                 const TrainSummary& summary);
nlohmann::json train_config_json(const TrainConfig& config, const TrainResult& result);
// The configuration a summary's "config" (train_config_json, or a characterize point's
// train_workload_json) describes, as far as it shapes a step: model, ranks, batch,
// micro-batches, strategy and its options, pipeline stages and schedule, precision,
// device. Throws UsageError naming `what` (the file) when it is not one.
TrainConfig train_config_from_json(const nlohmann::json& config, const std::string& what);
// How far the ranks' clocks agree, for the skew of a run's waiting: one sentence.
std::string clocks_note(const TrainResult& result);
// The body of summary.json (ResultsWriter writes the header before it).
nlohmann::json train_summary_body(const TrainConfig& config, const TrainResult& result,
                                  const TrainSummary& summary);
// Header plus a row per rank per step.
std::string steps_csv(const TrainResult& result);
// summary.json's "memory": a row per rank (docs/SHARDING.md).
nlohmann::json memory_json(const TrainResult& result);

}  // namespace tandem
