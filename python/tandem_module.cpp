// _tandem: the Python binding of tandem's analysis and results reading (docs/PYTHON.md).
//
// It calls what the CLI calls: `tandem analyze`'s import_traces, analyze_imports and
// analyze_summary_body, and `tandem report`'s load_results and load_trace, so a DataFrame
// holds the numbers the CLI writes. It hands Python plain data only: summary.json's body
// as dicts and lists, and a timeline as columns (NumPy arrays); python/tandem/ makes the
// DataFrames. The GIL is released while traces are read and analyzed.
//
// Errors: tandem::UsageError becomes tandem.UsageError (a ValueError), RuntimeError a
// tandem.TandemRuntimeError; pybind11 turns any other std::exception into RuntimeError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/metric_catalogue.h"
#include "core/error.h"
#include "core/version.h"
#include "report/analyze_summary.h"
#include "report/html/results.h"
#include "trace_import/analyze_report.h"
#include "trace_import/trace_import.h"

namespace py = pybind11;

namespace tandem::python {

namespace {

// nlohmann::json -> Python objects (null -> None, as json.loads reads summary.json).
py::object to_python(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return py::none();
    case nlohmann::json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(j.get<double>());
    case nlohmann::json::value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::binary:
      return py::bytes(reinterpret_cast<const char*>(j.get_binary().data()), j.get_binary().size());
    case nlohmann::json::value_t::array: {
      py::list list(j.size());
      std::size_t i = 0;
      for (const nlohmann::json& item : j) list[i++] = to_python(item);
      return list;
    }
    case nlohmann::json::value_t::object: {
      py::dict dict;
      for (const auto& [key, value] : j.items()) dict[py::str(key)] = to_python(value);
      return dict;
    }
  }
  return py::none();
}

// A column of `n` values of T, filled by `value(i)`.
template <typename T, typename F>
py::array_t<T> column(std::size_t n, F value) {
  py::array_t<T> array(static_cast<py::ssize_t>(n));
  T* out = array.mutable_data();
  for (std::size_t i = 0; i < n; ++i) out[i] = value(i);
  return array;
}

// A string column as codes into unique categories (pandas.Categorical.from_codes): one
// Python string per distinct name, not per span.
class Categories {
 public:
  std::int32_t code(std::string_view name) {
    const auto [it, added] = codes_.try_emplace(std::string(name), 0);
    if (added) {
      it->second = static_cast<std::int32_t>(names_.size());
      names_.emplace_back(name);
    }
    return it->second;
  }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::unordered_map<std::string, std::int32_t> codes_;
  std::vector<std::string> names_;
};

py::dict categorical(py::array_t<std::int32_t> codes, const Categories& categories) {
  py::dict c;
  c["codes"] = std::move(codes);
  c["categories"] = categories.names();
  return c;
}

// A timeline as columns, a row per span in the timeline's order: rank, lane, kind, name
// (Timeline::name_of: the interned name, else the kind's), step, tag, micro, start_ns,
// end_ns, bytes, issue_ns, group (Span::group: the communicator), flops. `comm` (a Kineto import's)
// adds the collective of each communication span, its group size and dtype ("" and -1 where unknown
// or not comm).
py::dict timeline_columns(const Timeline& t, const std::vector<CommInfo>* comm) {
  const std::vector<Span>& s = t.spans;
  const std::size_t n = s.size();
  py::dict cols;
  cols["rank"] = column<std::int32_t>(n, [&](std::size_t i) { return s[i].rank; });

  // Names: the table's ids map to codes once; a span without a name takes its kind's.
  Categories names;
  std::vector<std::int32_t> name_code(t.names->size());
  for (std::size_t id = 1; id < name_code.size(); ++id) {
    name_code[id] = names.code(t.names->name(static_cast<NameId>(id)));
  }
  std::unordered_map<int, std::int32_t> kind_name_code;
  const auto name_of = [&](const Span& span) {
    if (span.name != kNoName && span.name < name_code.size()) return name_code[span.name];
    const int kind = static_cast<int>(span.kind);
    const auto it = kind_name_code.find(kind);
    if (it != kind_name_code.end()) return it->second;
    return kind_name_code[kind] = names.code(t.name_of(span));
  };
  py::array_t<std::int32_t> name_codes =
      column<std::int32_t>(n, [&](std::size_t i) { return name_of(s[i]); });

  Categories lanes, kinds;
  for (int l = 0; l < kLaneCount; ++l) lanes.code(to_string(static_cast<Lane>(l)));
  for (int k = 0; k <= static_cast<int>(SpanKind::kOther); ++k) {
    kinds.code(to_string(static_cast<SpanKind>(k)));
  }
  cols["lane"] = categorical(
      column<std::int32_t>(n, [&](std::size_t i) { return static_cast<std::int32_t>(s[i].lane); }),
      lanes);
  cols["kind"] = categorical(
      column<std::int32_t>(n, [&](std::size_t i) { return static_cast<std::int32_t>(s[i].kind); }),
      kinds);
  cols["name"] = categorical(std::move(name_codes), names);
  cols["step"] = column<std::int32_t>(n, [&](std::size_t i) { return s[i].step; });
  cols["tag"] = column<std::int32_t>(n, [&](std::size_t i) { return s[i].tag; });
  cols["micro"] = column<std::int32_t>(n, [&](std::size_t i) { return s[i].micro; });
  cols["start_ns"] = column<std::int64_t>(n, [&](std::size_t i) { return s[i].start_ns; });
  cols["end_ns"] = column<std::int64_t>(n, [&](std::size_t i) { return s[i].end_ns; });
  cols["bytes"] = column<std::int64_t>(n, [&](std::size_t i) { return s[i].bytes; });
  cols["issue_ns"] = column<std::int64_t>(n, [&](std::size_t i) { return s[i].issue_ns; });
  cols["group"] = column<std::uint32_t>(n, [&](std::size_t i) { return s[i].group; });
  cols["flops"] = column<double>(n, [&](std::size_t i) { return s[i].flops; });

  if (comm != nullptr) {
    // Code 0 is "" (not a communication span, or the collective is unknown).
    Categories collectives, dtypes;
    collectives.code("");
    dtypes.code("");
    std::vector<std::int32_t> collective(n, 0), dtype(n, 0), group(n, -1);
    for (const CommInfo& c : *comm) {
      if (c.span >= n) continue;
      collective[c.span] = collectives.code(to_string(c.type));
      group[c.span] = c.group_size;
      if (c.dtype != kNoName) dtype[c.span] = dtypes.code(t.names->name(c.dtype));
    }
    cols["collective"] = categorical(
        column<std::int32_t>(n, [&](std::size_t i) { return collective[i]; }), collectives);
    cols["group_size"] = column<std::int32_t>(n, [&](std::size_t i) { return group[i]; });
    cols["dtype"] =
        categorical(column<std::int32_t>(n, [&](std::size_t i) { return dtype[i]; }), dtypes);
  }
  return cols;
}

// ClassificationRules from Python's optional strings (None: the CLI's default).
ClassificationRules rules_from(const std::optional<std::string>& comm,
                               const std::optional<std::string>& memory,
                               const std::optional<std::string>& compute) {
  ClassificationRules rules;
  if (comm) rules.comm = *comm;
  if (memory) rules.memory = *memory;
  if (compute) rules.compute = *compute;
  return rules;
}

// `tandem analyze`'s work, kept whole so that Python reads its parts on demand.
class Analysis {
 public:
  Analysis(const std::vector<std::string>& inputs, const std::vector<std::string>& baseline,
           ClassificationRules rules, std::size_t warmup)
      : rules_(std::move(rules)) {
    // As run_analyze: the inputs expanded (errors name no flag for the traces, --baseline
    // for the baseline's), the run imported, then the baseline, then the analysis.
    const std::vector<std::string> files = expand_trace_inputs(inputs, "");
    const std::vector<std::string> baseline_files =
        baseline.empty() ? std::vector<std::string>{} : expand_trace_inputs(baseline, "--baseline");
    run_ = import_traces(files, rules_);
    if (!baseline_files.empty()) baseline_ = import_traces(baseline_files, rules_);
    result_ = analyze_imports(run_, baseline_ ? &*baseline_ : nullptr, warmup);
  }

  // summary.json's body, as `tandem analyze --out` writes it (without the header).
  py::object summary() const {
    return to_python(
        analyze_summary_body(result_, run_, baseline_ ? &*baseline_ : nullptr, rules_));
  }
  // What the CLI prints (every row of every table: `kernels` rows of slowed kernels).
  std::string text(std::size_t collective_rows, std::size_t kernel_rows) const {
    return format_iteration_table(result_) + format_analyze_summary(result_) +
           format_rank_table(result_) + format_collective_table(result_, collective_rows) +
           format_kernel_table(result_, kernel_rows) +
           "\nmetrics (as tandem characterize; the baseline is the compute-only scenario)\n" +
           format_metrics_table(result_.scenario);
  }
  py::dict spans() const { return timeline_columns(run_.timeline, &run_.comm); }
  py::object baseline_spans() const {
    if (!baseline_) return py::none();
    return timeline_columns(baseline_->timeline, &baseline_->comm);
  }
  bool has_baseline() const { return baseline_.has_value(); }

 private:
  ClassificationRules rules_;
  ImportResult run_;
  std::optional<ImportResult> baseline_;
  AnalyzeResult result_;
};

std::unique_ptr<Analysis> analyze(const std::vector<std::string>& inputs,
                                  const std::vector<std::string>& baseline, std::size_t warmup,
                                  const std::optional<std::string>& comm_regex,
                                  const std::optional<std::string>& memory_regex,
                                  const std::optional<std::string>& compute_regex) {
  ClassificationRules rules = rules_from(comm_regex, memory_regex, compute_regex);
  py::gil_scoped_release unlocked;
  return std::make_unique<Analysis>(inputs, baseline, std::move(rules), warmup);
}

// A results directory's summary.json (validated as `tandem report` does) and, for
// characterize, its points.
py::dict load_results(const std::string& dir) {
  std::optional<html::Results> results;
  {
    py::gil_scoped_release unlocked;
    results = html::load_results(dir);
  }
  py::dict out;
  out["command"] = std::string(to_string(results->command));
  out["summary"] = to_python(results->summary);
  py::list points;
  for (const html::PointResult& p : results->points) {
    py::dict point;
    point["id"] = p.id;
    point["label"] = p.label;
    point["result"] = to_python(p.json);
    points.append(std::move(point));
  }
  out["points"] = std::move(points);
  return out;
}

// A tandem trace.json as columns; None when the file does not exist.
py::object read_trace(const std::string& path) {
  std::optional<html::LoadedTrace> trace;
  {
    py::gil_scoped_release unlocked;
    trace = html::load_trace(path);
  }
  if (!trace) return py::none();
  return timeline_columns(trace->timeline, nullptr);
}

}  // namespace

}  // namespace tandem::python

PYBIND11_MODULE(_tandem, m) {
  using namespace tandem::python;
  m.doc() = "tandem's analysis and results in C++; use the `tandem` package (docs/PYTHON.md)";
  m.attr("__version__") = std::string(tandem::tandem_version());

  py::register_exception<tandem::UsageError>(m, "UsageError", PyExc_ValueError);
  py::register_exception<tandem::RuntimeError>(m, "TandemRuntimeError", PyExc_RuntimeError);

  py::class_<Analysis>(m, "Analysis")
      .def("summary", &Analysis::summary, "summary.json's body as `tandem analyze --out` writes it")
      .def("text", &Analysis::text, py::arg("collective_rows"), py::arg("kernel_rows"),
           "The tables `tandem analyze` prints")
      .def("spans", &Analysis::spans, "The imported run's spans, as columns")
      .def("baseline_spans", &Analysis::baseline_spans, "The baseline's spans, or None")
      .def_property_readonly("has_baseline", &Analysis::has_baseline);

  m.def("analyze", &analyze, py::arg("inputs"), py::arg("baseline"), py::arg("warmup"),
        py::arg("comm_regex"), py::arg("memory_regex"), py::arg("compute_regex"),
        "Imports and analyzes traces as `tandem analyze` does");
  m.def("load_results", &load_results, py::arg("dir"),
        "A results directory's summary.json and characterize points, validated");
  m.def("read_trace", &read_trace, py::arg("path"), "A tandem trace.json as columns, or None");
}
