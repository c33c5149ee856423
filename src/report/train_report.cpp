#include "report/train_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "analysis/pipeline_metrics.h"
#include "core/parse.h"
#include "model/model_ops.h"

namespace tandem {

namespace {

std::string ms(const Summary& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%8.2f ms  (p10 %.2f, p90 %.2f)", s.median, s.p10, s.p90);
  return buf;
}

// The units of each model chunk of a pipelined run, as --split takes them.
std::vector<int> units_per_chunk(const TrainConfig& c) {
  std::vector<int> out;
  for (const auto& [first, last] : stage_plan(c).chunks) out.push_back(last - first + 1);
  return out;
}

std::string mib(std::int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// A row per rank (the first 8 and the last): persistent state, transient peaks, peak RSS,
// and on a device the driver's peak.
std::string format_memory(const TrainResult& result) {
  if (result.memory.empty()) return {};
  const bool device = std::any_of(result.memory.begin(), result.memory.end(),
                                  [](const RankMemory& m) { return m.device_peak_bytes >= 0; });
  std::string text =
      "  memory per rank  persistent (params + grads + optimizer) | transient peak (gathered "
      "units + unreduced grads) | process peak RSS in the steps (whole run)";
  // Ranks sharing one GPU (--device-comm shared) each read the whole GPU's.
  text += !device                      ? "\n"
          : result.backend == "shared" ? " | device memory in use at the steps' peak (driver: "
                                         "the one GPU, every rank's)\n"
                                       : " | device memory in use at the steps' peak (driver)\n";
  char line[320];
  for (std::size_t i = 0; i < result.memory.size(); ++i) {
    if (i == 8 && result.memory.size() > 9) {
      text += "                   ...\n";
      i = result.memory.size() - 1;
    }
    const RankMemory& m = result.memory[i];
    const auto rss = [&](std::int64_t bytes) {
      return bytes >= 0                            ? mib(bytes)
             : result.timing_source == "simulated" ? std::string("not simulated")
                                                   : std::string("unknown");
    };
    std::snprintf(line, sizeof line, "    rank %-4d %12s (%s + %s + %s) | %s + %s | %s (%s)",
                  m.rank, mib(m.state.persistent()).c_str(), mib(m.state.params).c_str(),
                  mib(m.state.grads).c_str(), mib(m.state.optimizer).c_str(),
                  mib(m.state.gathered_peak).c_str(), mib(m.state.grads_peak).c_str(),
                  rss(m.steps_peak_rss_bytes).c_str(), rss(m.peak_rss_bytes).c_str());
    text += line;
    if (device) text += " | " + (m.device_peak_bytes >= 0 ? mib(m.device_peak_bytes) : "none");
    text += "\n";
  }
  return text;
}

}  // namespace

nlohmann::json memory_json(const TrainResult& result) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMemory& m : result.memory) {
    ranks.push_back(
        {{"rank", m.rank},
         {"params_bytes", m.state.params},
         {"grads_bytes", m.state.grads},
         {"optimizer_bytes", m.state.optimizer},
         {"persistent_bytes", m.state.persistent()},
         {"gathered_peak_bytes", m.state.gathered_peak},
         {"grads_peak_bytes", m.state.grads_peak},
         {"activations_bytes", m.state.activations},
         {"micro_batches_in_flight", m.micro_batches_in_flight},
         {"peak_rss_bytes",
          m.peak_rss_bytes < 0 ? nlohmann::json(nullptr) : nlohmann::json(m.peak_rss_bytes)},
         {"steps_peak_rss_bytes", m.steps_peak_rss_bytes < 0
                                      ? nlohmann::json(nullptr)
                                      : nlohmann::json(m.steps_peak_rss_bytes)},
         {"device_peak_bytes", m.device_peak_bytes < 0 ? nlohmann::json(nullptr)
                                                       : nlohmann::json(m.device_peak_bytes)}});
  }
  return ranks;
}

TrainSummary summarize_training(const TrainConfig& config, const TrainResult& result, int warmup,
                                const PowerSampler* power) {
  TrainSummary out;
  const std::size_t skip = std::min<std::size_t>(warmup, config.steps - 1);

  // Step wall time: the slowest rank's, per step.
  std::map<int, double> step_ms;
  std::map<int, std::pair<double, int>> loss;
  for (const auto& r : result.steps) {
    double& slowest = step_ms[r.step];
    slowest = std::max(slowest, static_cast<double>(r.end_ns - r.start_ns) / 1e6);
    if (r.has_loss) {
      loss[r.step].first += r.loss;
      loss[r.step].second += 1;
    }
    if (r.rank == 0 && r.loss_scale > 0) {  // steps are sorted: the last one wins
      out.loss_scale = r.loss_scale;
      out.skipped_steps = r.skipped_steps;
    }
    if (r.has_val_loss && r.rank == 0 && r.step + 1 >= out.val_step) {
      out.has_val_loss = true;
      out.val_loss = r.val_loss;
      out.val_step = r.step + 1;
    }
  }
  std::vector<double> measured;
  for (const auto& [step, value] : step_ms) {
    if (step >= static_cast<int>(skip)) measured.push_back(value);
  }
  if (power != nullptr && power->available()) {
    // The measured steps' span, every rank's records on rank 0's clock.
    std::int64_t begin = std::numeric_limits<std::int64_t>::max(), end = 0;
    for (const auto& r : result.steps) {
      if (r.step < static_cast<int>(skip)) continue;
      begin = std::min(begin, r.start_ns);
      end = std::max(end, r.end_ns);
    }
    if (begin < end) out.power = power->summarize(begin, end);
  }
  out.measured_steps = measured.size();
  out.step_ms = summarize(measured);
  const double global_samples =
      static_cast<double>(global_batch(config));
  out.samples_per_s = global_samples / (out.step_ms.median / 1e3);
  if (config.model.is_transformer())
    out.tokens_per_s = out.samples_per_s * config.model.transformer.seq;
  out.has_loss = !loss.empty();
  if (!loss.empty()) {
    out.first_loss = static_cast<float>(loss.begin()->second.first / loss.begin()->second.second);
    out.last_loss = static_cast<float>(loss.rbegin()->second.first / loss.rbegin()->second.second);
  }

  const auto steps = drop_warmup(compute_step_metrics(result.timeline), skip);
  out.compute_ms = summarize_ms(steps, &StepMetrics::t_comp_ns);
  out.comm_ms = summarize_ms(steps, &StepMetrics::t_comm_ns);
  out.wait_ms = summarize_ms(steps, &StepMetrics::t_wait_ns);
  out.overlap_ms = summarize_ms(steps, &StepMetrics::t_ovl_ns);
  out.exposed_comm_ms = summarize_ms(steps, &StepMetrics::t_exposed_comm_ns);
  out.hidden_share = hidden_share(steps);
  out.waiting = explain_waiting(result.timeline, static_cast<std::int32_t>(skip));
  out.waiting.clocks = clocks_note(result);
  // Compute spans of one name (ModelOp), per measured step, mean over ranks.
  const auto named_ms = [&](SpanKind kind, ModelOp op) {
    std::map<int, double> ns;  // per measured step, over every rank
    for (const Span& span : result.timeline.spans) {
      if (span.kind == kind && span.name == op_name(op) && span.step >= static_cast<int>(skip)) {
        ns[span.step] += static_cast<double>(span.end_ns - span.start_ns);
      }
    }
    std::vector<double> per_step;
    for (const auto& [step, sum] : ns) per_step.push_back(sum / 1e6 / config.ranks);
    return summarize(per_step);
  };
  if (config.model.recompute != Recompute::kNone && config.record) {
    out.recompute_ms = named_ms(SpanKind::kBackward, ModelOp::kRecompute);
  }
  if (config.reducer.compress.enabled() && config.record && config.compute) {
    out.compress_ms = named_ms(SpanKind::kOther, ModelOp::kCompress);
  }
  if (config.record) out.give_back_ms = named_ms(SpanKind::kMemory, ModelOp::kGiveBack);
  out.bytes_per_step = config.ranks > 1 ? result.bytes_per_step : 0;
  out.uncompressed_bytes_per_step = config.ranks > 1 ? result.uncompressed_bytes_per_step : 0;

  if (config.pipeline.stages > 1 && config.record && !result.timeline.spans.empty()) {
    const StagePlan plan = stage_plan(config);
    out.textbook_bubble = textbook_bubble(plan.shape);
    std::map<int, std::vector<double>> per_rank;
    for (const StageBubble& b : pipeline_bubbles(result.timeline, plan.shape.stages)) {
      if (b.step >= static_cast<int>(skip)) per_rank[b.rank].push_back(b.bubble());
    }
    for (auto& [rank, values] : per_rank) {
      out.stage_bubble.resize(static_cast<std::size_t>(rank) + 1, std::nan(""));
      out.stage_bubble[static_cast<std::size_t>(rank)] = summarize(values).median;
    }
  }
  return out;
}

std::string format_train_summary(const TrainConfig& config, const TrainResult& result,
                                 const TrainSummary& s) {
  std::string text;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    text += line;
  };
  // The strategy as it ran ("bucketed, 4 buckets (...)", "fsdp, 26 units sharded over 8
  // ranks, prefetch 1").
  const std::string strategy =
      result.sync.empty() ? config.reducer.plan.strategy.to_string() : result.sync;
  add("\nsummary over %zu steps (after %d warm-up), %d ranks, strategy %s\n", s.measured_steps,
      config.steps - static_cast<int>(s.measured_steps), config.ranks, strategy.c_str());
  add("  step time        %s\n", ms(s.step_ms).c_str());
  add("  throughput       %10.1f samples/s (global batch %d)\n", s.samples_per_s,
      global_batch(config));
  if (s.tokens_per_s > 0) add("                   %10.0f tokens/s\n", s.tokens_per_s);
  add("  communicated     %s per rank per step%s\n",
      format_bytes(static_cast<double>(s.bytes_per_step)).c_str(),
      config.link.enabled() ? (" over an " + config.link.describe() + " link").c_str() : "");
  if (config.reducer.compress.enabled() && s.uncompressed_bytes_per_step > 0) {
    add("                   %.1f%% of %s uncompressed (--compress %s)\n",
        100.0 * static_cast<double>(s.bytes_per_step) /
            static_cast<double>(s.uncompressed_bytes_per_step),
        format_bytes(static_cast<double>(s.uncompressed_bytes_per_step)).c_str(),
        config.reducer.compress.to_string().c_str());
  }
  if (config.record) {
    add("  compute          %s\n", ms(s.compute_ms).c_str());
    add("  communication    %s\n", ms(s.comm_ms).c_str());
    add("  blocked waiting  %s\n", ms(s.wait_ms).c_str());
    text += format_waiting(s.waiting, "    ");
    add("  overlapped       %s\n", ms(s.overlap_ms).c_str());
    add("  hidden share of communication  %.1f%%  (T_ovl / T_comm)\n", 100 * s.hidden_share);
  } else {
    add("  (--no-timeline: no compute/communication breakdown)\n");
  }
  if (!s.stage_bubble.empty()) {
    std::string bubbles;
    for (std::size_t r = 0; r < s.stage_bubble.size() && r < 16; ++r) {
      std::snprintf(line, sizeof line, "%s%.1f%%", r == 0 ? "" : " ", 100 * s.stage_bubble[r]);
      bubbles += line;
    }
    if (s.stage_bubble.size() > 16) bubbles += " ...";
    add("  pipeline bubble  %s per rank (textbook for equal stages %.1f%%)\n", bubbles.c_str(),
        100 * s.textbook_bubble);
  }
  for (const PowerSummary& p : s.power) {
    add("  power            %s: average %.1f W, peak %.1f W, %.3f J per step", p.source.c_str(),
        p.average_watts, p.peak_watts, s.energy_per_step(p));
    if (p.resolution) add(" (+-%.0f%%: the counter's step)", 100 * *p.resolution);
    text += "\n";
  }
  if (s.recompute_ms.count > 0) {
    add("  recomputation    %s  (--recompute %s: forward work run again in backward, part of "
        "compute)\n",
        ms(s.recompute_ms).c_str(), std::string(to_string(config.model.recompute)).c_str());
  }
  if (s.compress_ms.count > 0) {
    add("  compression      %s  (--compress %s: the casts or factors of the gradient, part of "
        "compute)\n",
        ms(s.compress_ms).c_str(), config.reducer.compress.to_string().c_str());
  }
  if (s.give_back_ms.count > 0) {
    add("  giving back      %s  (%s: units' memory returned to the system between passes, in "
        "no figure above)\n",
        ms(s.give_back_ms).c_str(), config.reducer.plan.strategy.to_string().c_str());
  }
  text += format_memory(result);
  if (result.pipeline.empty() && !result.memory.empty()) {
    add("  activations      %s per rank, kept from forward to backward%s\n",
        mib(result.memory.front().state.activations).c_str(),
        config.model.recompute == Recompute::kNone
            ? ""
            : (" (--recompute " + std::string(to_string(config.model.recompute)) + ")").c_str());
  }
  if (!result.pipeline.empty()) {
    std::string slots;
    for (const RankMemory& m : result.memory) {
      slots += (slots.empty() ? "" : " ") + std::to_string(m.micro_batches_in_flight) + " (" +
               mib(m.state.activations) + ")";
      if (slots.size() > 200) {
        slots += " ...";
        break;
      }
    }
    add("  micro-batches in flight (activations) per rank: %s\n", slots.c_str());
  }
  if (s.has_loss) add("  loss             %.4f -> %.4f\n", s.first_loss, s.last_loss);
  if (s.loss_scale > 0) {
    add("  fp16 loss scale  %g after the last step; %d step(s) skipped (a gradient overflowed)\n",
        static_cast<double>(s.loss_scale), s.skipped_steps);
  }
  if (s.has_val_loss) {
    add("  validation loss  %.4f (held-out tail, after step %d)\n", s.val_loss, s.val_step);
  }
  if (!std::isfinite(s.last_loss)) {
    add("  warning: the loss is not finite: training diverged (try a lower --lr)\n");
  }
  if (result.spans_dropped > 0) {
    add("  warning: %zu spans dropped (span buffers full)\n", result.spans_dropped);
  }
  return text;
}

nlohmann::json train_config_json(const TrainConfig& c, const TrainResult& result) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& b : result.buckets) {
    buckets.push_back({{"index", b.index}, {"bytes", b.bytes()}, {"params", b.params.size()}});
  }
  return {
      {"backend", result.backend},
      {"backend_details", result.backend_details},
      {"binding", result.binding},
      {"ranks", c.ranks},
      {"hosts", result.hosts},
      {"ranks_per_host", result.ranks_per_host > 0 ? result.ranks_per_host : c.ranks},
      {"clock_uncertainty_ns", result.clock_uncertainty_ns},
      {"clock_offset_ns", result.clock_offset_ns},
      {"model", c.model.text},
      {"parameters", c.model.parameter_count()},
      {"batch_per_rank", c.batch},
      {"steps", c.steps},
      {"accumulate", c.accumulate},
      {"micro_batches", micro_batches(c)},
      {"pipeline_stages", c.pipeline.stages},
      {"schedule", c.pipeline.stages > 1 ? nlohmann::json(to_string(c.pipeline.schedule))
                                         : nlohmann::json(nullptr)},
      {"split",
       c.pipeline.stages > 1 ? nlohmann::json(units_per_chunk(c)) : nlohmann::json(nullptr)},
      {"lr", c.sgd.lr},
      {"momentum", c.sgd.momentum},
      {"weight_decay", c.sgd.weight_decay},
      {"strategy", c.reducer.plan.strategy.to_string()},
      {"strategy_details", result.sync},
      {"prefetch", c.reducer.plan.strategy.kind == StrategyKind::kFsdp
                       ? nlohmann::json(c.shard.prefetch)
                       : nlohmann::json(nullptr)},
      {"reshard_after_forward", c.reducer.plan.strategy.kind == StrategyKind::kFsdp
                                    ? nlohmann::json(c.shard.reshard_after_forward)
                                    : nlohmann::json(nullptr)},
      {"bucket_cap_bytes", c.reducer.plan.bucket_cap_bytes},
      {"first_bucket_cap_bytes", c.reducer.plan.first_bucket_cap_bytes},
      {"overlap_optimizer", c.reducer.overlap_optimizer},
      {"double_buffer", c.reducer.double_buffer},
      {"compress", c.reducer.compress.to_string()},
      {"layer_drop", c.model.layer_drop},
      {"find_unused", c.reducer.find_unused},
      {"recompute", std::string(to_string(c.model.recompute))},
      {"tensor", c.model.tensor},
      {"sequence_parallel", c.model.sequence_parallel},
      {"tp_overlap", c.model.tp_overlap},
      {"link", c.link.enabled() ? nlohmann::json(c.link.describe()) : nlohmann::json(nullptr)},
      {"link_emulated", c.link.enabled()},
      // The emulated link exactly, for a replay (experiment/replay.cpp).
      {"link_bytes_per_s", c.link.enabled() ? nlohmann::json(c.link.bandwidth_Bps) : nullptr},
      {"link_latency_ns", c.link.enabled() ? nlohmann::json(c.link.latency_ns) : nullptr},
      {"seed", c.seed},
      {"blas_threads_per_rank", c.blas_threads},
      {"blas", result.blas},
      {"gemm_library", std::string(to_string(c.gemm))},
      {"device", result.device.empty() ? std::string(to_string(c.device)) : result.device},
      {"precision", std::string(to_string(c.precision))},
      {"device_details", result.device_details},
      {"timing_source", result.timing_source},
      {"buckets", buckets},
  };
}

TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& what) {
  TrainConfig c;
  try {
    c.model = ModelSpec::parse(j.at("model").get<std::string>());
    c.model.recompute = parse_recompute(j.value("recompute", std::string("none")));
    c.model.tensor = j.value("tensor", 1);
    c.model.sequence_parallel = j.value("sequence_parallel", false);
    c.model.tp_overlap = j.value("tp_overlap", false);
    c.ranks = j.at("ranks").get<int>();
    c.batch = j.at("batch_per_rank").get<int>();
    c.accumulate = j.at("accumulate").get<int>();
    const int micro = j.at("micro_batches").get<int>();
    c.pipeline.stages = j.at("pipeline_stages").get<int>();
    if (c.pipeline.stages > 1) {
      c.pipeline.schedule = parse_schedule(j.at("schedule").get<std::string>());
      // The units per chunk the run used (written since --split auto; without it, as runs
      // before it did, they are balanced by FLOPs again).
      if (j.contains("split") && j.at("split").is_array()) {
        c.pipeline.split = j.at("split").get<std::vector<int>>();
      }
    }
    if (c.accumulate == 1 && micro > 1) c.pipeline.micro_batches = micro;
    c.reducer.plan.strategy = Strategy::parse(j.at("strategy").get<std::string>());
    if (c.reducer.plan.strategy.kind == StrategyKind::kFsdp) {
      c.shard.prefetch = j.at("prefetch").get<int>();
      c.shard.reshard_after_forward = j.at("reshard_after_forward").get<bool>();
    }
    // The techniques (absent before they existed: off).
    c.reducer.overlap_optimizer = j.value("overlap_optimizer", false);
    c.reducer.double_buffer = j.value("double_buffer", false);
    c.reducer.compress = Compression::parse(j.value("compress", std::string("none")));
    c.reducer.plan.bucket_cap_bytes = j.at("bucket_cap_bytes").get<std::int64_t>();
    c.reducer.plan.first_bucket_cap_bytes = j.at("first_bucket_cap_bytes").get<std::int64_t>();
    c.precision = parse_precision(j.at("precision").get<std::string>());
    const std::string device = j.at("device").get<std::string>();
    c.device = device == "simulated" ? Device::kCpu : parse_device(device);
    // The emulated link (written since replays divide its wire time; before: none known).
    if (j.value("link_emulated", false) && j.contains("link_bytes_per_s") &&
        j.at("link_bytes_per_s").is_number()) {
      c.link.bandwidth_Bps = j.at("link_bytes_per_s").get<double>();
      c.link.latency_ns = j.at("link_latency_ns").get<std::int64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(what + ": its \"config\" is not a training configuration (" + e.what() + ")");
  } catch (const UsageError& e) {
    throw UsageError(what + ": " + e.what());
  }
  return c;
}

nlohmann::json pipeline_json(const TrainConfig& config, const TrainResult& result,
                             const TrainSummary& s) {
  if (config.pipeline.stages == 1) return nullptr;
  const StagePlan plan = stage_plan(config);
  nlohmann::json chunks = nlohmann::json::array();
  for (const auto& [first, last] : plan.chunks) chunks.push_back({first, last});
  nlohmann::json bubble = nlohmann::json::array();
  for (double b : s.stage_bubble) bubble.push_back(number_or_null(b));
  nlohmann::json in_flight = nlohmann::json::array();
  for (const RankMemory& m : result.memory) in_flight.push_back(m.micro_batches_in_flight);
  return {{"stages", plan.shape.stages},
          {"replicas", plan.replicas},
          {"schedule", to_string(config.pipeline.schedule)},
          {"micro_batches", plan.shape.micro_batches},
          {"chunks", chunks},
          {"describe", result.pipeline},
          {"bubble", bubble},
          {"textbook_bubble", s.stage_bubble.empty() ? nlohmann::json(nullptr)
                                                     : nlohmann::json(s.textbook_bubble)},
          {"micro_batches_in_flight", in_flight}};
}

namespace {

// summary.json's "power": per source over the measured steps, or "unavailable".
nlohmann::json power_json(const TrainSummary& s) {
  if (s.power.empty()) return "unavailable";
  nlohmann::json out = nlohmann::json::array();
  for (const PowerSummary& p : s.power) {
    nlohmann::json j = p;
    j["energy_per_step_joules"] = s.energy_per_step(p);
    out.push_back(j);
  }
  return out;
}

}  // namespace

std::string clocks_note(const TrainResult& result) {
  return clocks_note(result.clock_uncertainty_ns, result.timing_source == "simulated");
}

nlohmann::json train_summary_body(const TrainConfig& config, const TrainResult& result,
                                  const TrainSummary& s) {
  return {
      {"config", train_config_json(config, result)},
      {"measured_steps", s.measured_steps},
      {"step_ms", s.step_ms},
      {"samples_per_s", number_or_null(s.samples_per_s)},
      {"bytes_per_step", s.bytes_per_step},
      {"uncompressed_bytes_per_step", s.uncompressed_bytes_per_step},
      {"compress_ms",
       s.compress_ms.count > 0 ? nlohmann::json(s.compress_ms) : nlohmann::json(nullptr)},
      {"compute_ms", s.compute_ms},
      {"comm_ms", s.comm_ms},
      {"wait_ms", s.wait_ms},
      {"overlap_ms", s.overlap_ms},
      {"exposed_comm_ms", s.exposed_comm_ms},
      {"recompute_ms",
       s.recompute_ms.count > 0 ? nlohmann::json(s.recompute_ms) : nlohmann::json(nullptr)},
      {"give_back_ms",
       s.give_back_ms.count > 0 ? nlohmann::json(s.give_back_ms) : nlohmann::json(nullptr)},
      {"hidden_share", number_or_null(s.hidden_share)},
      {"waiting", waiting_json(s.waiting)},
      {"first_loss", s.first_loss},
      {"last_loss", s.last_loss},
      {"tokens_per_s",
       s.tokens_per_s > 0 ? nlohmann::json(s.tokens_per_s) : nlohmann::json(nullptr)},
      {"val_loss", s.has_val_loss ? nlohmann::json(s.val_loss) : nlohmann::json(nullptr)},
      {"val_step", s.has_val_loss ? nlohmann::json(s.val_step) : nlohmann::json(nullptr)},
      {"spans_dropped", result.spans_dropped},
      {"memory", memory_json(result)},
      {"pipeline", pipeline_json(config, result, s)},
      {"power", power_json(s)},
      {"loss_scale", s.loss_scale > 0 ? nlohmann::json{{"final", s.loss_scale},
                                                       {"skipped_steps", s.skipped_steps}}
                                      : nlohmann::json(nullptr)},
  };
}

std::string steps_csv(const TrainResult& result) {
  // val_loss: empty where the step measured none (docs/MODELS.md).
  std::string csv = "step,rank,loss,start_ns,end_ns,step_ms,param_hash,val_loss\n";
  char row[224];
  for (const auto& r : result.steps) {
    // A pipeline stage without the loss (and a comm-only run) leaves it empty.
    std::snprintf(row, sizeof row, "%d,%d,", r.step, r.rank);
    csv += row;
    if (r.has_loss) {
      std::snprintf(row, sizeof row, "%.6f", r.loss);
      csv += row;
    }
    std::snprintf(row, sizeof row, ",%lld,%lld,%.4f,%016llx,", static_cast<long long>(r.start_ns),
                  static_cast<long long>(r.end_ns), static_cast<double>(r.end_ns - r.start_ns) / 1e6,
                  static_cast<unsigned long long>(r.param_hash));
    csv += row;
    if (r.has_val_loss) {
      std::snprintf(row, sizeof row, "%.6f", r.val_loss);
      csv += row;
    }
    csv += '\n';
  }
  return csv;
}

}  // namespace tandem
