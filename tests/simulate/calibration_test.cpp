// The calibration's fits on samples generated from known parameters: each is recovered
// exactly; what cannot be fitted is refused; what is written is read back.
#include "simulate/calibration.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace tandem {
namespace {

constexpr double kRate = 1e11, kBf16 = 3e11, kBw = 1e10, kLink = 5e9, kAlpha = 20e-6;

std::vector<ComputeSample> compute_from_truth() {
  std::vector<ComputeSample> out;
  for (double flops : {1e7, 3e8, 2e9}) {
    for (double bytes : {1e5, 4e7}) {
      out.push_back({.precision = Precision::kFp32,
                     .flops = flops,
                     .bytes = bytes,
                     .seconds = flops / kRate + bytes / kBw,
                     .what = "fp32"});
      out.push_back({.precision = Precision::kBf16,
                     .flops = flops,
                     .bytes = bytes,
                     .seconds = flops / kBf16 + bytes / kBw,
                     .what = "bf16"});
    }
  }
  out.push_back({.bytes = 8e6, .seconds = 8e6 / kBw, .what = "loss"});  // no FLOPs
  return out;
}

std::vector<CommSample> comm_from_truth() {
  std::vector<CommSample> out;
  for (int ranks : {2, 4}) {
    for (double bytes : {6.4e4, 4e6, 1e8}) {
      for (SpanKind kind : {SpanKind::kAllreduce, SpanKind::kAllgather}) {
        const double share = kind == SpanKind::kAllreduce ? 2 : 1;
        out.push_back({.kind = kind,
                       .ranks = ranks,
                       .bytes = bytes,
                       .seconds = share * (ranks - 1.0) / ranks * bytes / kLink +
                                  share * (ranks - 1) * kAlpha,
                       .what = "ring"});
      }
    }
  }
  return out;
}

TEST(CalibrationTest, RecoversTheParametersItsSamplesWereMadeWith) {
  // Contention c = 0.1, m = 0.25 over 5 ms and 12 ms of overlap: an overlapped step's
  // compute grows by T_ovl c / (1 + c), its communication by T_ovl m / (1 + m). A third
  // configuration overlapped too little (under a fifth of either lane's time alone) to
  // count. A fourth's communication grew by more than its overlap (not the model's shape):
  // it counts for the compute alone.
  const auto contention = [](double overlap) {
    return ContentionSample{.comp_iso = 0.02,
                            .comp_ovl = 0.02 + overlap * 0.1 / 1.1,
                            .comp_beside = overlap,
                            .comm_iso = 0.01,
                            .comm_ovl = 0.01 + overlap * 0.25 / 1.25,
                            .comm_beside = overlap};
  };
  ContentionSample odd = contention(0.008);
  odd.comm_ovl = odd.comm_iso + 2 * 0.008;
  const Calibration c =
      fit_calibration(compute_from_truth(), comm_from_truth(),
                      {contention(0.005), contention(0.012), contention(0.001), odd});
  EXPECT_NEAR(c.gemm_flops_per_s[0] / kRate, 1, 1e-9);
  EXPECT_NEAR(c.gemm_flops_per_s[3] / kBf16, 1, 1e-9);
  EXPECT_EQ(c.gemm_flops_per_s[1], 0);  // no tf32 sample: no rate
  EXPECT_NEAR(c.memory_bytes_per_s / kBw, 1, 1e-9);
  EXPECT_NEAR(c.link.bandwidth_bytes_per_s / kLink, 1, 1e-9);
  EXPECT_NEAR(c.link.latency_s / kAlpha, 1, 1e-9);
  EXPECT_NEAR(c.overlap_compute_slowdown, 0.1, 1e-12);
  EXPECT_NEAR(c.overlap_comm_slowdown, 0.25, 1e-12);
  EXPECT_EQ(c.contention_samples, 3);
  EXPECT_EQ(c.contention_candidates, 4);
  // Each configuration's own factors, and why a lane was left out.
  ASSERT_EQ(c.contention_points.size(), 4u);
  EXPECT_NEAR(c.contention_points[0].compute, 0.1, 1e-9);
  EXPECT_NEAR(c.contention_points[1].comm, 0.25, 1e-9);
  EXPECT_TRUE(c.contention_points[0].compute_left_out.empty());
  EXPECT_NE(c.contention_points[2].compute_left_out.find("under a fifth"), std::string::npos)
      << c.contention_points[2].compute_left_out;
  EXPECT_NE(c.contention_points[3].comm_left_out.find("or more"), std::string::npos)
      << c.contention_points[3].comm_left_out;
  EXPECT_TRUE(c.contention_points[3].compute_left_out.empty());
  EXPECT_LT(c.compute.max, 1e-9);
  EXPECT_LT(c.comm.max, 1e-9);
  EXPECT_EQ(c.compute.samples, 13);
}

// Note [a GEMM's weights, fitted]: passes whose products read weights, made with a known
// rate for those reads (in quadrature with the products' FLOPs), beside passes without:
// the GEMM rates, the bandwidth and the weights' rate are recovered, and predict is
// pass_seconds at them.
TEST(CalibrationTest, RecoversTheRateProductsReadTheirWeightsAt) {
  constexpr double kWeights = 8e9;
  const PassRates fp32{.flop_s = 1 / kRate, .byte_s = 1 / kBw, .weight_byte_s = 1 / kWeights};
  const PassRates bf16{.flop_s = 1 / kBf16, .byte_s = 1 / kBw, .weight_byte_s = 1 / kWeights};
  std::vector<ComputeSample> compute;
  // A layer of 1024 x 1024 weights at 8 to 512 rows: forward (all products by weights)
  // and backward (half of them, the other half the weight gradient's).
  for (double rows : {8.0, 32.0, 128.0, 512.0}) {
    const double flops = 2 * rows * 1024 * 1024, weights = 4.0 * 1024 * 1024;
    const double activations = 8 * rows * 1024;
    for (const auto& [precision, rates] :
         {std::pair{Precision::kFp32, fp32}, std::pair{Precision::kBf16, bf16}}) {
      compute.push_back({.precision = precision,
                         .flops = flops,
                         .bytes = activations,
                         .weight_flops = flops,
                         .weight_bytes = weights,
                         .seconds = pass_seconds(rates, flops, activations, flops, weights),
                         .what = "forward"});
      compute.push_back(
          {.precision = precision,
           .flops = 2 * flops,
           .bytes = 2 * weights + 2 * activations,
           .weight_flops = flops,
           .weight_bytes = weights,
           .seconds = pass_seconds(rates, 2 * flops, 2 * weights + 2 * activations, flops, weights),
           .what = "backward"});
    }
  }
  compute.push_back({.bytes = 8e6, .seconds = 8e6 / kBw, .what = "loss"});
  const Calibration c = fit_calibration(compute, comm_from_truth(), {});
  EXPECT_NEAR(c.gemm_flops_per_s[0] / kRate, 1, 1e-6);
  EXPECT_NEAR(c.gemm_flops_per_s[3] / kBf16, 1, 1e-6);
  EXPECT_NEAR(c.memory_bytes_per_s / kBw, 1, 1e-6);
  EXPECT_NEAR(c.weight_bytes_per_s / kWeights, 1, 1e-6);
  EXPECT_LT(c.compute.max, 1e-6);
  // A batch of 8 is bound by its weights: the sum of the two terms would miss it.
  const ComputeSample& few = compute.front();
  EXPECT_GT(few.seconds, 2 * few.flops / kRate);
  // Without products that read weights, no rate for them: the device's memory bandwidth.
  const Calibration plain = fit_calibration(compute_from_truth(), comm_from_truth(), {});
  EXPECT_EQ(plain.weight_bytes_per_s, 0);
  EXPECT_EQ(calibrated_cluster(plain, 2, 1e10, "test").device.weight_rate(),
            plain.memory_bytes_per_s);
  EXPECT_EQ(calibrated_cluster(c, 2, 1e10, "test").device.weight_rate(), c.weight_bytes_per_s);
}

// Contention by what overlaps: the sharded configurations (reduce-scatters and
// all-gathers beside compute) fit their own factors, the others theirs; a family without
// samples takes the fit over all.
TEST(CalibrationTest, FitsContentionByWhatOverlaps) {
  const auto sample = [](double overlap, double c, double m, bool sharded) {
    return ContentionSample{.comp_iso = 0.02,
                            .comp_ovl = 0.02 + overlap * c / (1 + c),
                            .comp_beside = overlap,
                            .comm_iso = 0.01,
                            .comm_ovl = 0.01 + overlap * m / (1 + m),
                            .comm_beside = overlap,
                            .sharded = sharded,
                            .what = sharded ? "fsdp" : "layerwise"};
  };
  const ContentionSample allreduce = sample(0.006, 0.1, 0.25, false);
  const ContentionSample sharded = sample(0.008, 0.8, 0.4, true);
  Calibration c = fit_calibration(compute_from_truth(), comm_from_truth(), {allreduce, sharded});
  EXPECT_NEAR(c.overlap_compute_slowdown, 0.1, 1e-12);
  EXPECT_NEAR(c.overlap_comm_slowdown, 0.25, 1e-12);
  EXPECT_NEAR(c.sharded_compute_slowdown, 0.8, 1e-12);
  EXPECT_NEAR(c.sharded_comm_slowdown, 0.4, 1e-12);
  EXPECT_EQ(c.contention_samples, 2);
  EXPECT_EQ(c.sharded_contention_samples, 1);
  ASSERT_EQ(c.contention_points.size(), 2u);
  EXPECT_TRUE(c.contention_points[1].sharded);
  // The here cluster slows compute by the family in flight.
  const Cluster here = calibrated_cluster(c, 2, 1e10, "test");
  EXPECT_NEAR(here.device.compute_slowdown(SpanKind::kAllreduce), 0.1, 1e-12);
  EXPECT_NEAR(here.device.compute_slowdown(SpanKind::kAllgather), 0.8, 1e-12);
  EXPECT_NEAR(here.device.comm_slowdown(SpanKind::kReduceScatter), 0.4, 1e-12);
  EXPECT_NEAR(here.device.comm_slowdown(SpanKind::kSend), 0.25, 1e-12);

  // One family alone: the other takes its fit.
  c = fit_calibration(compute_from_truth(), comm_from_truth(), {allreduce});
  EXPECT_NEAR(c.sharded_compute_slowdown, 0.1, 1e-12);
  EXPECT_NEAR(c.sharded_comm_slowdown, 0.25, 1e-12);
  EXPECT_EQ(c.sharded_contention_samples, 0);
  c = fit_calibration(compute_from_truth(), comm_from_truth(), {sharded});
  EXPECT_NEAR(c.overlap_compute_slowdown, 0.8, 1e-12);
  EXPECT_NEAR(c.overlap_comm_slowdown, 0.4, 1e-12);
  // A sharded lane left out (it grew by more than its overlap) takes the fit over all
  // for that lane only.
  ContentionSample odd = sharded;
  odd.comm_ovl = odd.comm_iso + 2 * odd.comm_beside;
  c = fit_calibration(compute_from_truth(), comm_from_truth(), {allreduce, odd});
  EXPECT_NEAR(c.sharded_compute_slowdown, 0.8, 1e-12);
  EXPECT_NEAR(c.sharded_comm_slowdown, 0.25, 1e-12);
}

TEST(CalibrationTest, ReportsTheErrorOfWhatTheModelCannotFit) {
  std::vector<ComputeSample> compute = compute_from_truth();
  compute.push_back({.flops = 1e9, .bytes = 0, .seconds = 2 * 1e9 / kRate, .what = "slow one"});
  const Calibration c = fit_calibration(compute, comm_from_truth(), {});
  EXPECT_EQ(c.compute.worst, "slow one");
  EXPECT_GT(c.compute.max, 0.3);
  EXPECT_EQ(c.contention_samples, 0);  // nothing to fit it from: left at 0
  EXPECT_EQ(c.overlap_compute_slowdown, 0);
}

// Memory given back and touched again: its rate Z is a column of the collectives' fit
// where fsdp's gathers are among the samples; without them, of the compute's, from the
// backward passes that rewrite given-back gradients; without either, 0 (free).
TEST(CalibrationTest, FitsTheFirstTouchFromTheGathersElseFromThePasses) {
  constexpr double kTouch = 2e10;
  std::vector<CommSample> comm = comm_from_truth();
  for (double bytes : {2e6, 8e6}) {
    comm.push_back({.kind = SpanKind::kAllgather,
                    .ranks = 2,
                    .bytes = bytes,
                    .touched = bytes,
                    .seconds = 0.5 * bytes / kLink + kAlpha + bytes / kTouch,
                    .what = "fsdp gather"});
  }
  std::vector<ComputeSample> compute = compute_from_truth();
  // A backward pass rewriting 4 MB given back, at the same rate.
  compute.push_back({.flops = 3e8,
                     .bytes = 1e5,
                     .touched = 4e6,
                     .seconds = 3e8 / kRate + 1e5 / kBw + 4e6 / kTouch,
                     .what = "backward"});
  Calibration c = fit_calibration(compute, comm, {});
  EXPECT_NEAR(c.first_touch_bytes_per_s / kTouch, 1, 1e-9);
  EXPECT_NEAR(c.link.bandwidth_bytes_per_s / kLink, 1, 1e-9);
  EXPECT_NEAR(c.gemm_flops_per_s[0] / kRate, 1, 1e-9);
  EXPECT_LT(c.compute.max, 1e-9);
  EXPECT_LT(c.comm.max, 1e-9);
  // Touched again by the passes only.
  c = fit_calibration(compute, comm_from_truth(), {});
  EXPECT_NEAR(c.first_touch_bytes_per_s / kTouch, 1, 1e-9);
  EXPECT_NEAR(c.memory_bytes_per_s / kBw, 1, 1e-9);
  // By neither: free, and the fit as before.
  c = fit_calibration(compute_from_truth(), comm_from_truth(), {});
  EXPECT_EQ(c.first_touch_bytes_per_s, 0);
  const Cluster here = calibrated_cluster(fit_calibration(compute, comm, {}), 2, 1e10, "test");
  EXPECT_NEAR(here.device.first_touch_bytes_per_s / kTouch, 1, 1e-9);
}

// samples.csv: one row per sample with what the fit predicts for it; a name holding a
// comma or a quote stays one field.
TEST(CalibrationTest, SamplesCsvHoldsEverySampleAndItsPrediction) {
  std::vector<ComputeSample> compute = compute_from_truth();
  compute.push_back(
      {.flops = 1e9, .bytes = 0, .seconds = 2 * 1e9 / kRate, .what = "runs/a,\"b\": slow one"});
  const std::vector<CommSample> comm = comm_from_truth();
  const Calibration c = fit_calibration(compute, comm, {});
  const std::string csv = calibration_samples_csv(c, compute, comm);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "lane,what,type,ranks,flops,bytes,weight_flops,weight_bytes,touched_bytes,measured_s,"
            "predicted_s,error");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + compute.size() + comm.size());
  const std::size_t row =
      csv.find("compute,\"runs/a,\"\"b\"\": slow one\",fp32,1,1000000000,0,0,0,0,");
  ASSERT_NE(row, std::string::npos) << csv;
  // Its error column is predict / measured - 1, as the fit reports it.
  const std::string line = csv.substr(row, csv.find('\n', row) - row);
  const double error = std::stod(line.substr(line.rfind(',') + 1));
  EXPECT_NEAR(error, predict(c, compute.back()) / compute.back().seconds - 1, 1e-6);
  EXPECT_LT(error, -0.3);  // the slow one is predicted faster than it ran
  EXPECT_NE(csv.find("\ncomm,"), std::string::npos);
}

// Collectives whose time falls with their bytes (noise on alike buckets): the latency is
// dropped and a bandwidth fitted, never a negative one.
TEST(CalibrationTest, AFallingSlopeLeavesTheOtherTermOut) {
  const std::vector<CommSample> comm = {
      {.ranks = 2, .bytes = 1e5, .seconds = 2e-4, .what = "small, slow"},
      {.ranks = 2, .bytes = 2e5, .seconds = 1e-4, .what = "larger, faster"}};
  const Calibration c = fit_calibration(compute_from_truth(), comm, {});
  EXPECT_GT(c.link.bandwidth_bytes_per_s, 0);
  EXPECT_EQ(c.link.latency_s, 0);
  EXPECT_EQ(c.comm.samples, 2);
}

TEST(CalibrationTest, WhatCannotBeFittedIsRefusedNamingTheFlag) {
  std::vector<ComputeSample> bf16_only;
  for (const ComputeSample& s : compute_from_truth()) {
    if (s.precision == Precision::kBf16) bf16_only.push_back(s);
  }
  for (const auto& [compute, comm] : {std::pair{bf16_only, comm_from_truth()},
                                      std::pair{compute_from_truth(), std::vector<CommSample>{}}}) {
    try {
      (void)fit_calibration(compute, comm, {});
      FAIL();
    } catch (const UsageError& e) {
      EXPECT_TRUE(std::string(e.what()).starts_with("--calibrate")) << e.what();
    }
  }
}

// Note [ranks apart, fitted]: each step's variance of its ranks' compute, fitted as
// j_s^2 + (j m)^2 for the step's mean m.
TEST(CalibrationTest, RanksApartIsAPartOfEveryStepAndAPartInProportion) {
  const auto fitted = [](const std::vector<RankSpreadSample>& spread) {
    return fit_calibration(compute_from_truth(), comm_from_truth(), {}, {}, spread);
  };
  // Two ranks m -+ d apart have the variance 2 d^2: steps of 10 ms, 100 ms and 1 s drawn
  // from j = 2% and j_s = 0.5 ms exactly give them back.
  std::vector<RankSpreadSample> spread;
  for (const double m : {10e-3, 100e-3, 1.0}) {
    const double d = std::sqrt((0.5e-3 * 0.5e-3 + 0.02 * 0.02 * m * m) / 2);
    spread.push_back({{m - d, m + d}});
  }
  // One rank alone and a step of nothing say nothing.
  spread.push_back({{5e-3}});
  spread.push_back({{0, 0}});
  const Calibration c = fitted(spread);
  EXPECT_NEAR(c.compute_jitter, 0.02, 1e-9);
  EXPECT_NEAR(c.compute_jitter_s, 0.5e-3, 1e-9);
  EXPECT_EQ(c.jitter_samples, 6);  // three steps of two ranks
  EXPECT_EQ(calibrated_cluster(c, 2, 1e9, "test").device.compute_jitter, c.compute_jitter);
  EXPECT_EQ(calibrated_cluster(c, 2, 1e9, "test").device.compute_jitter_s, c.compute_jitter_s);
  // The same 1 ms apart at 10 ms and at 1 s: all of it every step's.
  const Calibration fixed = fitted({{{9.5e-3, 10.5e-3}}, {{0.9995, 1.0005}}});
  EXPECT_NEAR(fixed.compute_jitter_s, std::sqrt(0.5e-6), 1e-12);
  EXPECT_LT(fixed.compute_jitter, 1e-4);  // 0.5 ms in proportion would be 5% at 10 ms
  // One step length cannot tell the parts apart: all of it in proportion, as before the
  // fixed part was fitted (two ranks at 10 and 12 ms, each 1/11 from their mean).
  const Calibration one = fitted({{{10e-3, 12e-3}}});
  EXPECT_NEAR(one.compute_jitter, std::sqrt(2.0) / 11, 1e-12);
  EXPECT_EQ(one.compute_jitter_s, 0);
  // Nor can steps within half of each other's length (1 ms apart at 10 and at 14 ms: the
  // mean of v / m^2, (0.5 / 100 + 0.5 / 196) / 2 ms^2 / ms^2).
  const Calibration near = fitted({{{9.5e-3, 10.5e-3}}, {{13.5e-3, 14.5e-3}}});
  EXPECT_NEAR(near.compute_jitter, std::sqrt((0.5 / 100 + 0.5 / 196) / 2), 1e-12);
  EXPECT_EQ(near.compute_jitter_s, 0);
  EXPECT_EQ(fitted({}).compute_jitter, 0);
  EXPECT_EQ(fitted({}).compute_jitter_s, 0);
  // Alike ranks that took alike times: none.
  EXPECT_EQ(fitted({{{3e-3, 3e-3}}}).compute_jitter, 0);
  EXPECT_EQ(fitted({{{3e-3, 3e-3}}}).compute_jitter_s, 0);
}

TEST(CalibrationTest, WhatIsWrittenIsReadBackAndBecomesTheHereCluster) {
  // The give-back is the median of the measured ones.
  Calibration c =
      fit_calibration(compute_from_truth(), comm_from_truth(), {}, {40e-6, 90e-6, 30e-6});
  EXPECT_EQ(c.give_back_s, 40e-6);
  EXPECT_EQ(fit_calibration(compute_from_truth(), comm_from_truth(), {}).give_back_s, 0);
  c.first_touch_bytes_per_s = 3e10;
  c.overlap_compute_slowdown = 0.2;
  c.sharded_compute_slowdown = 0.7;
  c.sharded_comm_slowdown = 0.3;
  c.compute_jitter = 0.08;
  c.compute_jitter_s = 3e-4;
  c.jitter_samples = 40;
  c.issuer_held = 0.65;
  c.issuer_samples = 900;
  c.weight_bytes_per_s = 7.5e9;
  const auto dir =
      std::filesystem::temp_directory_path() / ("tandem_calibration_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / kCalibrationFile) << calibration_json(c, 8e9, "unit test").dump(); }
  double memory = 0;
  std::string source;
  const Calibration back =
      read_calibration((dir / kCalibrationFile).string(), "--calibration", &memory, &source);
  EXPECT_EQ(back.gemm_flops_per_s, c.gemm_flops_per_s);
  EXPECT_EQ(back.link.latency_s, c.link.latency_s);
  EXPECT_EQ(back.first_touch_bytes_per_s, 3e10);
  EXPECT_EQ(back.give_back_s, 40e-6);
  EXPECT_EQ(back.sharded_compute_slowdown, 0.7);
  EXPECT_EQ(back.sharded_comm_slowdown, 0.3);
  EXPECT_EQ(back.compute_jitter, 0.08);
  EXPECT_EQ(back.compute_jitter_s, 3e-4);
  EXPECT_EQ(back.jitter_samples, 40);
  EXPECT_EQ(back.issuer_held, 0.65);
  EXPECT_EQ(back.issuer_samples, 900);
  EXPECT_EQ(back.weight_bytes_per_s, 7.5e9);
  EXPECT_EQ(memory, 8e9);
  EXPECT_EQ(source, "unit test");
  const Cluster here = resolve_cluster("here", dir.string(), 4);
  EXPECT_EQ(here.devices(), 4);
  EXPECT_EQ(here.device.peak(Precision::kFp32), c.gemm_flops_per_s[0]);
  EXPECT_EQ(here.device.gemm_efficiency, 1);
  EXPECT_EQ(here.device.first_touch_bytes_per_s, 3e10);
  EXPECT_EQ(here.device.give_back_s, 40e-6);
  EXPECT_EQ(here.device.compute_jitter, 0.08);
  EXPECT_EQ(here.device.compute_jitter_s, 3e-4);
  EXPECT_EQ(here.device.issuer_held, 0.65);
  EXPECT_EQ(here.device.weight_rate(), 7.5e9);
  // The file is a cluster file too.
  const Cluster file = parse_cluster((dir / kCalibrationFile).string());
  EXPECT_NEAR(file.device.peak(Precision::kFp32) / c.gemm_flops_per_s[0], 1, 1e-12);
  EXPECT_NEAR(file.device.first_touch_bytes_per_s / 3e10, 1, 1e-12);
  EXPECT_NEAR(file.device.give_back_s / 40e-6, 1, 1e-12);
  EXPECT_EQ(file.device.compute_jitter, 0.08);
  EXPECT_NEAR(file.device.compute_jitter_s / 3e-4, 1, 1e-12);
  EXPECT_EQ(file.device.issuer_held, 0.65);
  EXPECT_NEAR(file.device.compute_slowdown(SpanKind::kAllgather), 0.7, 1e-12);
  EXPECT_NEAR(file.device.compute_slowdown(SpanKind::kAllreduce), 0.2, 1e-12);
  // Written before contention was fitted by what overlaps: one pair for all.
  {
    nlohmann::json old = calibration_json(c, 8e9, "unit test");
    old["calibration"].erase("sharded_compute_slowdown");
    old["calibration"].erase("sharded_comm_slowdown");
    old["calibration"].erase("compute_jitter");
    old["calibration"].erase("compute_jitter_s");
    std::ofstream(dir / kCalibrationFile) << old.dump();
  }
  const Calibration older =
      read_calibration((dir / kCalibrationFile).string(), "--calibration", nullptr, nullptr);
  EXPECT_EQ(older.compute_jitter, 0);  // written before the ranks' jitter was measured
  EXPECT_EQ(older.compute_jitter_s, 0);
  EXPECT_EQ(older.sharded_compute_slowdown, 0.2);
  EXPECT_EQ(older.sharded_comm_slowdown, c.overlap_comm_slowdown);
  EXPECT_THROW(resolve_cluster("here", "", 2), UsageError);
  EXPECT_THROW(resolve_cluster("2xh100", dir.string(), 2), UsageError);
  EXPECT_THROW(resolve_cluster("here", (dir / "nope").string(), 2), UsageError);
  std::ofstream(dir / kCalibrationFile) << R"({"calibration": {"gemm_flops_per_s": [1]}})";
  EXPECT_THROW(resolve_cluster("here", dir.string(), 2), UsageError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem
