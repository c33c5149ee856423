// The calibration's least-squares fits (calibration.h).
#include "simulate/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/error.h"
#include "core/parse.h"

namespace tandem {

namespace {

// min over x >= 0 of sum_i (rows_i . x / t_i - 1)^2: normal equations over columns
// scaled to 1, a column whose solution is negative dropped (set to 0) and the rest
// solved again. Columns that are all 0 stay 0.
std::vector<double> fit_relative(const std::vector<std::vector<double>>& rows,
                                 const std::vector<double>& t) {
  const std::size_t n = rows.empty() ? 0 : rows.front().size();
  std::vector<double> scale(n, 0);
  for (const auto& r : rows) {
    for (std::size_t j = 0; j < n; ++j) scale[j] = std::max(scale[j], std::abs(r[j]));
  }
  std::vector<bool> active(n);
  for (std::size_t j = 0; j < n; ++j) active[j] = scale[j] > 0;
  std::vector<double> x(n, 0);
  for (;;) {
    std::vector<std::size_t> cols;
    for (std::size_t j = 0; j < n; ++j) {
      if (active[j]) cols.push_back(j);
    }
    const std::size_t k = cols.size();
    if (k == 0) return std::vector<double>(n, 0);
    // Normal equations M z = b over the active columns, each scaled by 1/scale.
    std::vector<std::vector<double>> m(k, std::vector<double>(k + 1, 0));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      for (std::size_t a = 0; a < k; ++a) {
        const double va = rows[i][cols[a]] / scale[cols[a]] / t[i];
        for (std::size_t b = 0; b < k; ++b)
          m[a][b] += va * rows[i][cols[b]] / scale[cols[b]] / t[i];
        m[a][k] += va;
      }
    }
    // Gaussian elimination with partial pivoting; a (near) singular column is dropped.
    std::vector<std::size_t> order(k);
    bool singular = false;
    for (std::size_t c = 0; c < k && !singular; ++c) {
      std::size_t p = c;
      for (std::size_t r = c + 1; r < k; ++r) {
        if (std::abs(m[r][c]) > std::abs(m[p][c])) p = r;
      }
      if (std::abs(m[p][c]) < 1e-12 * static_cast<double>(rows.size())) {
        active[cols[c]] = false;
        singular = true;
        break;
      }
      std::swap(m[p], m[c]);
      for (std::size_t r = 0; r < k; ++r) {
        if (r == c) continue;
        const double f = m[r][c] / m[c][c];
        for (std::size_t q = c; q <= k; ++q) m[r][q] -= f * m[c][q];
      }
    }
    if (singular) continue;
    std::size_t worst = k;
    for (std::size_t c = 0; c < k; ++c) {
      x[cols[c]] = m[c][k] / m[c][c] / scale[cols[c]];
      if (x[cols[c]] < 0 && (worst == k || x[cols[c]] < x[cols[worst]])) worst = c;
    }
    if (worst == k) return x;
    active[cols[worst]] = false;
    x.assign(n, 0);
  }
}

// fit_relative, where column `slope` must come out positive: if noise made it fall (passes
// or buckets too small or too alike: time falling as FLOPs or bytes grow), column `other`
// is left out and the fit's error says how well the slope alone does.
std::vector<double> fit_keeping(std::vector<std::vector<double>> rows, const std::vector<double>& t,
                                std::size_t slope, std::size_t other) {
  std::vector<double> x = fit_relative(rows, t);
  if (x[slope] > 0) return x;
  for (auto& row : rows) row[other] = 0;
  return fit_relative(rows, t);
}

// The middle value (the upper of the two middle ones for an even count); 0 for none.
double middle_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

template <typename Sample>
FitError fit_error(const Calibration& c, const std::vector<Sample>& samples) {
  FitError e;
  std::vector<double> errors;
  for (const Sample& s : samples) {
    const double err = std::abs(predict(c, s) / s.seconds - 1);
    if (errors.empty() || err > e.max) {
      e.max = err;
      e.worst = s.what;
    }
    errors.push_back(err);
  }
  e.samples = static_cast<int>(errors.size());
  e.median = middle_of(std::move(errors));
  return e;
}

double share_of(SpanKind kind) { return kind == SpanKind::kAllreduce ? 2.0 : 1.0; }

constexpr const char* kPrecisionNames[] = {"fp32", "tf32", "fp16", "bf16"};

// Note [ranks apart, fitted]: v = a + b m^2 over steps (m^2, v), a and b never below 0.
// A step's variance from a few ranks scatters in proportion to its expectation (for two
// ranks it is one squared normal draw), so each step weighs 1 / p^2 for its fitted p:
// least squares on v / p, reweighted until the fit settles. It starts from b alone, the
// mean of v / m^2 (the pooled relative variance), and stays there when the steps' lengths
// are within half of each other (one configuration's steps cannot tell a part of every
// step from a part in proportion: both price them alike). Where both columns cannot stand
// (one coming out negative) the better of either alone.
std::pair<double, double> fit_spread(const std::vector<std::pair<double, double>>& steps) {
  if (steps.empty()) return {0, 0};
  double a = 0, b = 0;
  for (const auto& [m2, v] : steps) b += v / m2 / static_cast<double>(steps.size());
  const auto [shortest, longest] = std::minmax_element(
      steps.begin(), steps.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  if (longest->first < 1.5 * 1.5 * shortest->first) return {0, b};
  for (int round = 0; round < 50; ++round) {
    double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
    for (const auto& [m2, v] : steps) {
      const double p = a + b * m2;
      if (!(p > 0)) continue;
      const double w = 1 / (p * p);
      s11 += w;
      s12 += w * m2;
      s22 += w * m2 * m2;
      r1 += w * v;
      r2 += w * v * m2;
    }
    if (!(s11 > 0)) break;
    const double det = s11 * s22 - s12 * s12;
    double na = (s22 * r1 - s12 * r2) / det, nb = (s11 * r2 - s12 * r1) / det;
    if (!(det > 1e-9 * s11 * s22) || na < 0 || nb < 0) {
      // One column: the residual sum of squares of each alone.
      const double fixed = r1 / s11, relative = r2 / s22;
      double rf = 0, rr = 0;
      for (const auto& [m2, v] : steps) {
        const double p = a + b * m2;
        if (!(p > 0)) continue;
        rf += (v - fixed) * (v - fixed) / (p * p);
        rr += (v - relative * m2) * (v - relative * m2) / (p * p);
      }
      na = rf < rr ? fixed : 0;
      nb = rf < rr ? 0 : relative;
    }
    const bool settled = std::abs(na - a) <= 1e-9 * (a + na) && std::abs(nb - b) <= 1e-9 * (b + nb);
    a = na;
    b = nb;
    if (settled) break;
  }
  return {a, b};
}

// Memory given back and written again: its bytes at the fitted first-touch rate.
double touch_seconds(const Calibration& c, double touched) {
  return c.first_touch_bytes_per_s > 0 ? touched / c.first_touch_bytes_per_s : 0;
}

// Note [a GEMM's weights, fitted]
// The compute model (Note [a GEMM's weights] in cluster.cpp) is linear in the GEMM rates'
// and the bandwidth's reciprocals but for the products by weights, sqrt((a F_w)^2 +
// (c W)^2) with a = 1/R and c = 1/BWw. For one c, that is a F_w g with g = sqrt(1 + (c W /
// (a F_w))^2): held at the last rates while columns 0..3 (each precision's FLOPs, the
// products' counted g times), 4 (the bytes) and 5 (the bytes touched again, where the
// collectives did not fit Z: else their time is taken off) are solved by relative least
// squares, then renewed until the rates settle. c is chosen by the fit's relative squared
// error: a grid from 10 MB/s to 10 TB/s, then golden sections around its best. Samples
// whose products read no weights leave c out (it is 0, and the device reads weights at its
// memory bandwidth).
struct ComputeFit {
  std::vector<double> x = std::vector<double>(6, 0);
  double squares = 0;
};

ComputeFit fit_compute_at(const std::vector<ComputeSample>& compute, double z, double c) {
  ComputeFit fit;
  for (int iteration = 0; iteration < 100; ++iteration) {
    std::vector<std::vector<double>> rows;
    std::vector<double> t;
    for (const ComputeSample& s : compute) {
      double seconds = s.seconds - (z > 0 ? s.touched / z : 0);
      const auto p = static_cast<std::size_t>(s.precision);
      const double a = fit.x[p];
      double products = s.weight_flops;
      if (s.weight_flops > 0 && a > 0) {
        products *= std::hypot(1.0, c * s.weight_bytes / (a * s.weight_flops));
      } else if (s.weight_flops <= 0) {
        seconds -= c * s.weight_bytes;
      }
      if (!(s.seconds > 0) || !(seconds > 0)) continue;
      std::vector<double> row(6, 0);
      row[p] = s.flops - s.weight_flops + products;
      row[4] = s.bytes;
      if (z == 0) row[5] = s.touched;
      rows.push_back(std::move(row));
      t.push_back(seconds);
    }
    const std::vector<double> x = fit_keeping(rows, t, /*slope=*/0, /*other=*/4);
    double moved = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      if (x[j] > 0) moved = std::max(moved, std::abs(x[j] / fit.x[j] - 1));
    }
    fit.x = x;
    if (c == 0 || moved < 1e-12) break;
  }
  Calibration trial;
  for (std::size_t p = 0; p < 4; ++p) trial.gemm_flops_per_s[p] = fit.x[p] > 0 ? 1 / fit.x[p] : 0;
  trial.memory_bytes_per_s = fit.x[4] > 0 ? 1 / fit.x[4] : 0;
  trial.weight_bytes_per_s = c > 0 ? 1 / c : 0;
  trial.first_touch_bytes_per_s = z > 0 ? z : (fit.x[5] > 0 ? 1 / fit.x[5] : 0);
  for (const ComputeSample& s : compute) {
    if (!(s.seconds > 0)) continue;
    const double e = predict(trial, s) / s.seconds - 1;
    fit.squares += e * e;
  }
  return fit;
}

void fit_compute(const std::vector<ComputeSample>& compute, Calibration& c) {
  const double z = c.first_touch_bytes_per_s;
  bool weights = false;
  for (const ComputeSample& s : compute) weights = weights || s.weight_bytes > 0;
  double best_c = 0;
  ComputeFit best;
  if (!weights) {
    best = fit_compute_at(compute, z, 0);
  } else {
    // log10 of the weights' rate in bytes per second.
    const auto at = [&](double log_rate) {
      return fit_compute_at(compute, z, std::pow(10.0, -log_rate));
    };
    constexpr double kLow = 7, kHigh = 13, kStep = 0.125;
    double best_log = kLow;
    best = at(kLow);
    for (double l = kLow + kStep; l <= kHigh + 1e-9; l += kStep) {
      ComputeFit f = at(l);
      if (f.squares < best.squares) {
        best = std::move(f);
        best_log = l;
      }
    }
    // Golden sections over the neighbouring steps.
    const double golden = (std::sqrt(5.0) - 1) / 2;
    double lo = std::max(kLow, best_log - kStep), hi = std::min(kHigh, best_log + kStep);
    double m1 = hi - golden * (hi - lo), m2 = lo + golden * (hi - lo);
    ComputeFit f1 = at(m1), f2 = at(m2);
    for (int i = 0; i < 60 && hi - lo > 1e-12; ++i) {
      if (f1.squares < f2.squares) {
        hi = m2;
        m2 = m1;
        f2 = std::move(f1);
        m1 = hi - golden * (hi - lo);
        f1 = at(m1);
      } else {
        lo = m1;
        m1 = m2;
        f1 = std::move(f2);
        m2 = lo + golden * (hi - lo);
        f2 = at(m2);
      }
    }
    for (auto* f : {&f1, &f2}) {
      if (f->squares < best.squares) {
        best_log = f == &f1 ? m1 : m2;
        best = *f;
      }
    }
    best_c = std::pow(10.0, -best_log);
  }
  for (std::size_t p = 0; p < 4; ++p) c.gemm_flops_per_s[p] = best.x[p] > 0 ? 1 / best.x[p] : 0;
  c.memory_bytes_per_s = best.x[4] > 0 ? 1 / best.x[4] : 0;
  c.weight_bytes_per_s = best_c > 0 ? 1 / best_c : 0;
  if (z == 0 && best.x[5] > 0) c.first_touch_bytes_per_s = 1 / best.x[5];
}

}  // namespace

double predict(const Calibration& c, const ComputeSample& s) {
  const double rate = c.gemm_flops_per_s[static_cast<std::size_t>(s.precision)];
  const double weights = c.weight_bytes_per_s > 0 ? c.weight_bytes_per_s : c.memory_bytes_per_s;
  const PassRates rates{.flop_s = rate > 0 ? 1 / rate : 0,
                        .byte_s = c.memory_bytes_per_s > 0 ? 1 / c.memory_bytes_per_s : 0,
                        .weight_byte_s = weights > 0 ? 1 / weights : 0};
  return pass_seconds(rates, s.flops, s.bytes, s.weight_flops, s.weight_bytes) +
         touch_seconds(c, s.touched);
}

double predict(const Calibration& c, const CommSample& s) {
  const double share = share_of(s.kind);
  const double k = s.ranks;
  return share * (k - 1) / k * s.bytes / c.link.bandwidth_bytes_per_s +
         share * (k - 1) * c.link.latency_s + (s.handoff ? c.link.overhead_s : 0) +
         touch_seconds(c, s.touched);
}

std::string calibration_samples_csv(const Calibration& c, const std::vector<ComputeSample>& compute,
                                    const std::vector<CommSample>& comm) {
  std::string csv =
      "lane,what,type,ranks,flops,bytes,weight_flops,weight_bytes,touched_bytes,measured_s,"
      "predicted_s,error\n";
  const auto row = [&csv](const char* lane, const std::string& what, std::string_view type,
                          int ranks, double flops, double bytes, double weight_flops,
                          double weight_bytes, double touched, double measured, double predicted) {
    // `what` names a run directory: quoted, its quotes doubled (RFC 4180).
    std::string quoted = "\"";
    for (const char ch : what) {
      quoted += ch;
      if (ch == '"') quoted += '"';
    }
    quoted += '"';
    char numbers[256];
    std::snprintf(numbers, sizeof numbers, ",%d,%.0f,%.0f,%.0f,%.0f,%.0f,%.9g,%.9g,%.6f\n", ranks,
                  flops, bytes, weight_flops, weight_bytes, touched, measured, predicted,
                  measured > 0 ? predicted / measured - 1 : 0.0);
    csv += std::string(lane) + "," + quoted + "," + std::string(type) + numbers;
  };
  for (const ComputeSample& s : compute) {
    row("compute", s.what, kPrecisionNames[static_cast<std::size_t>(s.precision)], 1, s.flops,
        s.bytes, s.weight_flops, s.weight_bytes, s.touched, s.seconds, predict(c, s));
  }
  for (const CommSample& s : comm) {
    row("comm", s.what, to_string(s.kind), s.ranks, 0, s.bytes, 0, 0, s.touched, s.seconds,
        predict(c, s));
  }
  return csv;
}

Calibration fit_calibration(const std::vector<ComputeSample>& compute,
                            const std::vector<CommSample>& comm,
                            const std::vector<ContentionSample>& contention,
                            const std::vector<double>& give_backs,
                            const std::vector<RankSpreadSample>& spread,
                            const std::vector<IssuerSample>& issuers) {
  Calibration c;
  c.give_back_s = middle_of(give_backs);
  // The last issuer's hold, weighted by the transfers' times (a 2 ms transfer held through
  // shows more than a 50 us one).
  double held = 0, moving = 0;
  for (const IssuerSample& s : issuers) {
    if (!(s.moving_s > 0)) continue;
    held += std::clamp(s.held_s, 0.0, s.moving_s);
    moving += s.moving_s;
    ++c.issuer_samples;
  }
  c.issuer_held = moving > 0 ? held / moving : 0;
  // Ranks apart: per measured step of n alike ranks, the variance of their compute,
  // s^2 = sum (x - m)^2 / (n - 1) (a step of two that ran 10 and 12 ms: 2 ms^2), fitted
  // as j_s^2 + (j m)^2 for the step's mean m. Short steps stand further apart for their
  // length than long ones (on the 2-core Zen 4 VM 2-9% at 9-32 ms, 0.5-3% at 470-520 ms),
  // which one share of m does not say.
  std::vector<std::pair<double, double>> steps;  // (m^2, s^2)
  for (const RankSpreadSample& s : spread) {
    const auto n = static_cast<double>(s.seconds.size());
    double mean = 0;
    for (const double x : s.seconds) mean += x / n;
    if (n < 2 || !(mean > 0)) continue;
    double squares = 0;
    for (const double x : s.seconds) squares += (x - mean) * (x - mean);
    steps.emplace_back(mean * mean, squares / (n - 1));
    c.jitter_samples += static_cast<int>(n);
  }
  const auto [fixed, relative] = fit_spread(steps);
  // Under 1, as a cluster file must have it (a rank twice its peers' mean every step is
  // no jitter).
  c.compute_jitter = std::min(0.99, std::sqrt(relative));
  c.compute_jitter_s = std::sqrt(fixed);
  // Collectives: columns 1/B, alpha and 1/Z (fsdp's gathers write into units given back),
  // from the transfers; then the hand-off, the mean over the samples that hold it of what
  // the ring leaves: a step pays the sum of its hand-offs, and their blocked times vary
  // with the scheduler more than with their sizes (a least-squares compromise with the
  // transfers, or a median, misses the late wake-ups that make most of the sum).
  std::vector<std::vector<double>> rows;
  std::vector<double> t;
  for (const CommSample& s : comm) {
    if (!(s.seconds > 0) || s.ranks < 2 || s.handoff) continue;
    const double share = share_of(s.kind);
    rows.push_back(
        {share * (s.ranks - 1.0) / s.ranks * s.bytes, share * (s.ranks - 1.0), s.touched});
    t.push_back(s.seconds);
  }
  if (rows.empty()) {
    throw UsageError(
        "--calibrate: no data-parallel collective measured in these runs (calibrate from "
        "runs with two or more replicas: --ranks at least 2 x --tensor x --pipeline)");
  }
  const std::vector<double> y = fit_keeping(rows, t, /*slope=*/0, /*other=*/1);
  c.link.bandwidth_bytes_per_s = 1 / y[0];
  c.link.latency_s = y[1];
  c.first_touch_bytes_per_s = y[2] > 0 ? 1 / y[2] : 0;
  std::vector<double> left;
  for (const CommSample& s : comm) {
    if (s.handoff && s.seconds > 0 && s.ranks >= 2) left.push_back(s.seconds - predict(c, s));
  }
  if (!left.empty()) {
    double sum = 0;
    for (double h : left) sum += h;
    c.link.overhead_s = std::max(0.0, sum / static_cast<double>(left.size()));
  }

  // Compute (Note [a GEMM's weights, fitted]): an fp32 sample with time left once the
  // memory it touched again is taken off.
  const double z = c.first_touch_bytes_per_s;
  bool fp32 = false;
  for (const ComputeSample& s : compute) {
    fp32 = fp32 || (s.precision == Precision::kFp32 && s.flops > 0 &&
                    s.seconds - (z > 0 ? s.touched / z : 0) > 0);
  }
  if (!fp32) {
    throw UsageError(
        "--calibrate: no fp32 compute measured in these runs (calibrate from "
        "train or characterize runs with --precision fp32, and others besides)");
  }
  fit_compute(compute, c);

  // Contention, each lane on its own: c = sum dC / sum (B - dC), likewise m.
  struct LaneFit {
    double grew = 0, rest = 0;
    // Scenarios are separate runs, which differ by a few percent from noise alone: a lane
    // beside the other for under a fifth of its time alone cannot show the effect; one
    // that grew by all that time or more is not this model's shape. Returns why the lane
    // is left out (empty: fitted), and its own factor in `factor`.
    std::string add(double alone, double overlapped, double beside, double& factor) {
      const double grow = std::max(0.0, overlapped - alone);
      const auto ms = [](double s) { return format_duration_ns(s * 1e9); };
      if (!(beside > 0)) return "nothing ran beside it";
      if (beside < 0.2 * alone) {
        return "beside the other lane " + ms(beside) + ", under a fifth of its " + ms(alone) +
               " alone";
      }
      if (grow >= beside) {
        return "grew by " + ms(grow) + ", as much as the " + ms(beside) +
               " beside the other lane or more";
      }
      grew += grow;
      rest += beside - grow;
      factor = grow / (beside - grow);
      return {};
    }
    double factor() const { return rest > 0 ? grew / rest : 0; }
    void add(const LaneFit& other) {
      grew += other.grew;
      rest += other.rest;
    }
  };
  // By what overlaps: [0] beside all-reduces (and point to point), [1] beside a sharded
  // strategy's reduce-scatters and all-gathers.
  std::array<LaneFit, 2> compute_fit, comm_fit;
  c.contention_candidates = static_cast<int>(contention.size());
  for (const ContentionSample& s : contention) {
    ContentionPoint p{.what = s.what, .sharded = s.sharded};
    const std::size_t family = s.sharded ? 1 : 0;
    p.compute_left_out = compute_fit[family].add(s.comp_iso, s.comp_ovl, s.comp_beside, p.compute);
    p.comm_left_out = comm_fit[family].add(s.comm_iso, s.comm_ovl, s.comm_beside, p.comm);
    if (p.compute_left_out.empty() || p.comm_left_out.empty()) {
      ++c.contention_samples;
      c.sharded_contention_samples += s.sharded ? 1 : 0;
    }
    c.contention_points.push_back(std::move(p));
  }
  // A family with nothing fitted in a lane takes that lane's fit over all configurations.
  const auto factors = [](const std::array<LaneFit, 2>& fit) {
    LaneFit all = fit[0];
    all.add(fit[1]);
    const auto own = [&](const LaneFit& f) { return f.rest > 0 ? f.factor() : all.factor(); };
    return std::pair{own(fit[0]), own(fit[1])};
  };
  std::tie(c.overlap_compute_slowdown, c.sharded_compute_slowdown) = factors(compute_fit);
  std::tie(c.overlap_comm_slowdown, c.sharded_comm_slowdown) = factors(comm_fit);
  c.compute = fit_error(c, compute);
  c.comm = fit_error(c, comm);
  return c;
}

Cluster calibrated_cluster(const Calibration& c, int ranks, double memory_bytes,
                           const std::string& source) {
  Cluster out;
  out.name = "here";
  out.nodes = 1;
  out.devices_per_node = std::max(1, ranks);
  out.device.name = "here";
  out.device.peak_flops = c.gemm_flops_per_s;
  out.device.memory_bytes_per_s = c.memory_bytes_per_s > 0 ? c.memory_bytes_per_s : 1e30;
  out.device.weight_bytes_per_s = c.weight_bytes_per_s;
  out.device.memory_bytes = memory_bytes;
  out.device.gemm_efficiency = 1;
  out.device.overlap_compute_slowdown = c.overlap_compute_slowdown;
  out.device.overlap_comm_slowdown = c.overlap_comm_slowdown;
  out.device.sharded_compute_slowdown = c.sharded_compute_slowdown;
  out.device.sharded_comm_slowdown = c.sharded_comm_slowdown;
  out.device.first_touch_bytes_per_s = c.first_touch_bytes_per_s;
  out.device.give_back_s = c.give_back_s;
  out.device.compute_jitter = c.compute_jitter;
  out.device.compute_jitter_s = c.compute_jitter_s;
  out.device.issuer_held = c.issuer_held;
  out.device.source = source;
  out.intra = c.link;
  out.inter = c.link;
  out.nics_per_node = 1;
  return out;
}

nlohmann::json calibration_json(const Calibration& c, double memory_bytes,
                                const std::string& source) {
  nlohmann::json peak = nlohmann::json::object();
  nlohmann::json rates = nlohmann::json::array();
  for (std::size_t p = 0; p < 4; ++p) {
    if (c.gemm_flops_per_s[p] > 0) peak[kPrecisionNames[p]] = c.gemm_flops_per_s[p] / 1e12;
    rates.push_back(c.gemm_flops_per_s[p]);
  }
  nlohmann::json points = nlohmann::json::array();
  for (const ContentionPoint& p : c.contention_points) {
    const auto lane = [](double factor, const std::string& left_out) {
      return left_out.empty() ? nlohmann::json{{"factor", factor}}
                              : nlohmann::json{{"left_out", left_out}};
    };
    points.push_back({{"what", p.what},
                      {"sharded", p.sharded},
                      {"compute", lane(p.compute, p.compute_left_out)},
                      {"comm", lane(p.comm, p.comm_left_out)}});
  }
  const auto error = [](const FitError& e) {
    return nlohmann::json{
        {"samples", e.samples}, {"median", e.median}, {"max", e.max}, {"worst", e.worst}};
  };
  return {
      {"nodes", 1},
      {"devices_per_node", 1},
      {"device",
       {{"name", "here"},
        {"peak_tflops", peak},
        {"memory_gbps", c.memory_bytes_per_s / 1e9},
        {"gemm_weights_gbps", c.weight_bytes_per_s / 1e9},
        {"memory_gb", memory_bytes / 1e9},
        {"gemm_efficiency", 1},
        {"overlap_compute_slowdown", c.overlap_compute_slowdown},
        {"overlap_comm_slowdown", c.overlap_comm_slowdown},
        {"sharded_compute_slowdown", c.sharded_compute_slowdown},
        {"sharded_comm_slowdown", c.sharded_comm_slowdown},
        {"first_touch_gbps", c.first_touch_bytes_per_s / 1e9},
        {"give_back_us", c.give_back_s * 1e6},
        {"compute_jitter", c.compute_jitter},
        {"compute_jitter_ms", c.compute_jitter_s * 1e3},
        {"issuer_held", c.issuer_held},
        {"source", source}}},
      {"intra",
       {{"gbps", c.link.bandwidth_bytes_per_s / 1e9},
        {"latency_us", c.link.latency_s * 1e6},
        {"overhead_us", c.link.overhead_s * 1e6}}},
      {"calibration",
       {{"gemm_flops_per_s", rates},
        {"memory_bytes_per_s", c.memory_bytes_per_s},
        {"weight_bytes_per_s", c.weight_bytes_per_s},
        {"first_touch_bytes_per_s", c.first_touch_bytes_per_s},
        {"give_back_s", c.give_back_s},
        {"compute_jitter", c.compute_jitter},
        {"compute_jitter_s", c.compute_jitter_s},
        {"jitter_samples", c.jitter_samples},
        {"issuer_held", c.issuer_held},
        {"issuer_samples", c.issuer_samples},
        {"memory_bytes", memory_bytes},
        {"link_bytes_per_s", c.link.bandwidth_bytes_per_s},
        {"link_latency_s", c.link.latency_s},
        {"link_overhead_s", c.link.overhead_s},
        {"overlap_compute_slowdown", c.overlap_compute_slowdown},
        {"overlap_comm_slowdown", c.overlap_comm_slowdown},
        {"sharded_compute_slowdown", c.sharded_compute_slowdown},
        {"sharded_comm_slowdown", c.sharded_comm_slowdown},
        {"contention_samples", c.contention_samples},
        {"sharded_contention_samples", c.sharded_contention_samples},
        {"contention_candidates", c.contention_candidates},
        {"contention_points", points},
        {"compute_error", error(c.compute)},
        {"comm_error", error(c.comm)},
        {"source", source}}},
  };
}

Calibration read_calibration(const std::string& path, const std::string& flag, double* memory_bytes,
                             std::string* source) {
  std::ifstream in(path);
  if (!in) throw UsageError(flag + " " + path + ": cannot read the file");
  Calibration c;
  try {
    const nlohmann::json j = nlohmann::json::parse(in).at("calibration");
    const auto number = [&](const char* key) {
      const double v = j.at(key).get<double>();
      if (!std::isfinite(v) || v < 0) {
        throw UsageError(flag + " " + path + ": \"" + key + "\" must be a number >= 0");
      }
      return v;
    };
    const auto& rates = j.at("gemm_flops_per_s");
    if (!rates.is_array() || rates.size() != 4) {
      throw UsageError(flag + " " + path + ": \"gemm_flops_per_s\" must hold 4 rates");
    }
    for (std::size_t p = 0; p < 4; ++p) {
      c.gemm_flops_per_s[p] = rates[p].get<double>();
      if (!std::isfinite(c.gemm_flops_per_s[p]) || c.gemm_flops_per_s[p] < 0) {
        throw UsageError(flag + " " + path + ": \"gemm_flops_per_s\" must be numbers >= 0");
      }
    }
    c.memory_bytes_per_s = number("memory_bytes_per_s");
    // Calibrations written before products were priced by their weights have none: the
    // memory bandwidth.
    if (j.contains("weight_bytes_per_s")) c.weight_bytes_per_s = number("weight_bytes_per_s");
    c.link.bandwidth_bytes_per_s = number("link_bytes_per_s");
    c.link.latency_s = number("link_latency_s");
    // Calibrations written before the hand-off was fitted have none: 0.
    if (j.contains("link_overhead_s")) c.link.overhead_s = number("link_overhead_s");
    // Nor the first touch: free.
    if (j.contains("first_touch_bytes_per_s")) {
      c.first_touch_bytes_per_s = number("first_touch_bytes_per_s");
    }
    // Nor the give-back: none.
    if (j.contains("give_back_s")) c.give_back_s = number("give_back_s");
    // Nor the ranks' jitter: ranks alike.
    if (j.contains("compute_jitter")) {
      c.compute_jitter = number("compute_jitter");
      if (c.compute_jitter >= 1) {
        throw UsageError(flag + " " + path + ": \"compute_jitter\" must be under 1");
      }
      c.jitter_samples = j.value("jitter_samples", 0);
    }
    // Nor its part of every step (fitted since the fifteenth session): all in proportion.
    if (j.contains("compute_jitter_s")) c.compute_jitter_s = number("compute_jitter_s");
    // Nor the last issuer's hold: none.
    if (j.contains("issuer_held")) {
      c.issuer_held = number("issuer_held");
      if (c.issuer_held > 1) {
        throw UsageError(flag + " " + path + ": \"issuer_held\" must be at most 1");
      }
      c.issuer_samples = j.value("issuer_samples", 0);
    }
    c.overlap_compute_slowdown = number("overlap_compute_slowdown");
    c.overlap_comm_slowdown = number("overlap_comm_slowdown");
    c.contention_samples = j.at("contention_samples").get<int>();
    // Calibrations written before contention was fitted by what overlaps: one pair for all.
    c.sharded_compute_slowdown = j.contains("sharded_compute_slowdown")
                                     ? number("sharded_compute_slowdown")
                                     : c.overlap_compute_slowdown;
    c.sharded_comm_slowdown = j.contains("sharded_comm_slowdown") ? number("sharded_comm_slowdown")
                                                                  : c.overlap_comm_slowdown;
    c.sharded_contention_samples = j.value("sharded_contention_samples", 0);
    if (memory_bytes != nullptr) *memory_bytes = number("memory_bytes");
    if (source != nullptr) *source = j.at("source").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(flag + " " + path + ": not a calibration tandem wrote (" + e.what() + ")");
  }
  if (c.gemm_flops_per_s[0] <= 0 || c.link.bandwidth_bytes_per_s <= 0) {
    throw UsageError(flag + " " + path + ": needs an fp32 rate and a link bandwidth above 0");
  }
  return c;
}

Cluster resolve_cluster(const std::string& text, const std::string& calibration_dir, int ranks) {
  if (text != "here") {
    if (!calibration_dir.empty()) {
      throw UsageError("--calibration " + calibration_dir +
                       ": describes the machine its runs measured; use it with --cluster here");
    }
    return parse_cluster(text);
  }
  if (calibration_dir.empty()) {
    throw UsageError(
        "--cluster here: needs --calibration DIR (from tandem simulate --calibrate "
        "RUNS... --out DIR)");
  }
  double memory = 0;
  std::string source;
  const Calibration c =
      read_calibration((std::filesystem::path(calibration_dir) / kCalibrationFile).string(),
                       "--calibration", &memory, &source);
  return calibrated_cluster(c, ranks, memory, source);
}

}  // namespace tandem
