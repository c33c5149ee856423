// Chrome trace writer and reader: structure, escaping, round trip, atomic writes, errors.
#include "timeline/chrome_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kEvilName = "<script>alert(1)</script>\"\\";

// A fresh directory per test, removed afterwards.
class ChromeTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tandem_trace_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

Span make(int rank, Lane lane, SpanKind kind, std::int64_t start, std::int64_t end, int step,
          int tag = -1) {
  Span s;
  s.rank = rank;
  s.lane = lane;
  s.kind = kind;
  s.start_ns = start;
  s.end_ns = end;
  s.step = step;
  s.tag = tag;
  return s;
}

// Two ranks at an absolute clock offset, with names, tags, bytes and flops.
Timeline sample_timeline() {
  constexpr std::int64_t base = 1'700'000'000'123'456'789;
  Timeline t;
  t.ranks = 2;
  Span fwd = make(0, Lane::kCompute, SpanKind::kForward, base, base + 1500, 0, 0);
  fwd.flops = 2.5e9;
  Span bwd = make(0, Lane::kCompute, SpanKind::kBackward, base + 1500, base + 4001, 0, 3);
  Span ar = make(0, Lane::kComm, SpanKind::kAllreduce, base + 2000, base + 5000, 0, 1);
  ar.bytes = 26'214'400;
  Span wt = make(0, Lane::kWait, SpanKind::kWait, base + 4001, base + 5000, 0);
  Span evil = make(1, Lane::kCompute, SpanKind::kOptimizer, base + 7, base + 9, 1);
  evil.name = t.names->intern(kEvilName);
  Span named = make(1, Lane::kComm, SpanKind::kBroadcast, base + 3, base + 3, -1, 0);
  named.name = t.names->intern("init broadcast");
  t.spans = {fwd, bwd, ar, wt, evil, named};
  return t;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TEST_F(ChromeTraceTest, EventNamesFollowTheDocumentedRule) {
  const Timeline t = sample_timeline();
  EXPECT_EQ(chrome_event_name(t, t.spans[0]), "forward L0");
  EXPECT_EQ(chrome_event_name(t, t.spans[1]), "backward L3");
  EXPECT_EQ(chrome_event_name(t, t.spans[2]), "allreduce B1");
  EXPECT_EQ(chrome_event_name(t, t.spans[3]), "wait");
  EXPECT_EQ(chrome_event_name(t, t.spans[4]), kEvilName);
  EXPECT_EQ(chrome_event_name(t, t.spans[5]), "init broadcast");  // own name: no tag suffix
}

TEST_F(ChromeTraceTest, WritesProcessesThreadsAndEvents) {
  const Timeline t = sample_timeline();
  ChromeTraceOptions options;
  options.other_data = {{"model", "mlp"}, {"buckets_mib", 25}};
  options.counters.push_back(
      {.name = "power cpu",
       .series = "watts",
       .pid = 0,
       .samples = {{t.spans[0].start_ns - 1000, 80.5}, {t.spans[0].start_ns + 1000, 120}}});
  const fs::path path = dir_ / "trace.json";
  write_chrome_trace(t, path.string(), options);
  const json trace = read_json(path);

  std::map<std::string, int> by_phase;
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, std::string> thread_names;
  for (const json& e : trace["traceEvents"]) {
    ++by_phase[e["ph"].get<std::string>()];
    if (e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    if (e["name"] == "thread_name") thread_names[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  EXPECT_EQ(by_phase["X"], 6);
  EXPECT_EQ(by_phase["C"], 2);
  // Per rank: process_name + process_sort_index; per used lane: thread name + sort index.
  // Rank 0 uses 3 lanes, rank 1 uses 2.
  EXPECT_EQ(by_phase["M"], 2 * 2 + 2 * (3 + 2));
  EXPECT_EQ(process_names, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  EXPECT_EQ(thread_names[std::make_pair(0, 0)], "compute");
  EXPECT_EQ(thread_names[std::make_pair(0, 1)], "comm");
  EXPECT_EQ(thread_names[std::make_pair(0, 2)], "wait");
  EXPECT_EQ(thread_names.count(std::make_pair(1, 2)), 0u);

  EXPECT_EQ(trace["otherData"]["model"], "mlp");
  EXPECT_EQ(trace["otherData"]["buckets_mib"], 25);

  // The earliest time is the first counter sample, 1 us before the first span.
  const json* fwd = nullptr;
  const json* ar = nullptr;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "forward L0") fwd = &e;
    if (e["ph"] == "X" && e["name"] == "allreduce B1") ar = &e;
  }
  ASSERT_NE(fwd, nullptr);
  ASSERT_NE(ar, nullptr);
  EXPECT_DOUBLE_EQ((*fwd)["ts"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ((*fwd)["dur"].get<double>(), 1.5);
  EXPECT_EQ((*fwd)["cat"], "forward");
  EXPECT_EQ((*fwd)["tid"], 0);
  EXPECT_EQ((*fwd)["args"]["layer"], 0);
  EXPECT_DOUBLE_EQ((*fwd)["args"]["flops"].get<double>(), 2.5e9);
  EXPECT_FALSE((*fwd)["args"].contains("bytes"));
  EXPECT_EQ((*ar)["args"]["bucket"], 1);
  EXPECT_EQ((*ar)["args"]["bytes"], 26'214'400);
  EXPECT_EQ((*ar)["args"]["step"], 0);
  EXPECT_EQ((*ar)["tid"], 1);

  // The in-memory document says the same as the file.
  EXPECT_EQ(to_chrome_trace(t, options), trace);
}

TEST_F(ChromeTraceTest, HostileNameSurvivesAsText) {
  const Timeline t = sample_timeline();
  const fs::path path = dir_ / "evil.json";
  write_chrome_trace(t, path.string());
  std::stringstream raw;
  raw << std::ifstream(path).rdbuf();
  // The quote and backslash must be escaped, or the file would not parse.
  EXPECT_EQ(raw.str().find(kEvilName), std::string::npos);
  const json trace = json::parse(raw.str());
  int found = 0;
  for (const json& e : trace["traceEvents"]) found += e.value("name", "") == kEvilName;
  EXPECT_EQ(found, 1);
}

TEST_F(ChromeTraceTest, ReadBackEqualsTheOriginal) {
  const Timeline t = sample_timeline();
  const fs::path path = dir_ / "round.json";
  write_chrome_trace(t, path.string());
  const Timeline back = read_chrome_trace(path.string());
  EXPECT_EQ(back.ranks, t.ranks);
  ASSERT_EQ(back.spans.size(), t.spans.size());
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    const Span& a = t.spans[i];
    const Span& b = back.spans[i];
    EXPECT_EQ(b.rank, a.rank) << i;
    EXPECT_EQ(b.lane, a.lane) << i;
    EXPECT_EQ(b.kind, a.kind) << i;
    EXPECT_EQ(b.step, a.step) << i;
    EXPECT_EQ(b.tag, a.tag) << i;
    EXPECT_EQ(b.start_ns, a.start_ns) << i;  // exact to the nanosecond, absolute clock
    EXPECT_EQ(b.end_ns, a.end_ns) << i;
    EXPECT_EQ(b.bytes, a.bytes) << i;
    EXPECT_EQ(b.flops, a.flops) << i;
    EXPECT_EQ(back.name_of(b), t.name_of(a)) << i;
    EXPECT_EQ(b.name == kNoName, a.name == kNoName) << i;
  }
}

TEST_F(ChromeTraceTest, EmptyTimelineWritesAValidTrace) {
  const fs::path path = dir_ / "empty.json";
  write_chrome_trace(Timeline{}, path.string());
  const json trace = read_json(path);
  EXPECT_TRUE(trace["traceEvents"].empty());
  EXPECT_TRUE(read_chrome_trace(path.string()).spans.empty());
}

TEST_F(ChromeTraceTest, UnwritableDirectoryIsAUsageErrorAndLeavesNothing) {
  const fs::path path = dir_ / "missing" / "trace.json";
  try {
    write_chrome_trace(sample_timeline(), path.string());
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("cannot write '" + path.string() + "': ", 0), 0u) << msg;
  }
  EXPECT_FALSE(fs::exists(dir_ / "missing"));
}

TEST_F(ChromeTraceTest, FailedRenameRemovesTheTemporaryFile) {
  // The target is a non-empty directory: the temporary file is written, the rename fails.
  const fs::path target = dir_ / "is_a_dir";
  fs::create_directories(target / "child");
  EXPECT_THROW(write_chrome_trace(sample_timeline(), target.string()), UsageError);
  std::vector<fs::path> left;
  for (const auto& entry : fs::directory_iterator(dir_)) left.push_back(entry.path());
  EXPECT_EQ(left, std::vector<fs::path>{target});
}

TEST_F(ChromeTraceTest, OverwriteReplacesTheWholeFile) {
  const fs::path path = dir_ / "trace.json";
  write_chrome_trace(sample_timeline(), path.string());
  write_chrome_trace(Timeline{}, path.string());
  EXPECT_TRUE(read_json(path)["traceEvents"].empty());
}

void expect_read_error(const fs::path& path, const std::string& content,
                       const std::string& fragment) {
  std::ofstream(path) << content;
  try {
    read_chrome_trace(path.string());
    FAIL() << "expected UsageError for " << content;
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST_F(ChromeTraceTest, MalformedInputNamesTheFile) {
  const fs::path p = dir_ / "bad.json";
  expect_read_error(p, "{\"traceEvents\": [", "not valid JSON");
  expect_read_error(p, "{\"events\": []}", "not a Chrome trace");
  expect_read_error(p, "[1]", "event 0: not an object");
  const std::string ok = R"("ph":"X","name":"x","cat":"forward","ts":1,"dur":2)";
  expect_read_error(p, "[{" + ok + R"(,"pid":0,"tid":9}])", "event 0: tid 9");
  expect_read_error(p, "[{" + ok + R"(,"tid":0}])", "\"pid\"");
  expect_read_error(p, R"([{"ph":"X","name":"x","cat":"fwd","ts":1,"dur":2,"pid":0,"tid":0}])",
                    "unknown span kind 'fwd'");
  expect_read_error(
      p, R"([{"ph":"X","name":"x","cat":"forward","ts":"1","dur":2,"pid":0,"tid":0}])", "\"ts\"");
  expect_read_error(p, "[{" + ok + R"(,"pid":0,"tid":0,"args":{"step":"one"}}])", "\"step\"");
  expect_read_error(dir_ / "absent.json", "", "");  // created empty: not valid JSON
  EXPECT_THROW(read_chrome_trace((dir_ / "really_absent.json").string()), UsageError);
}

TEST_F(ChromeTraceTest, ReadsTheBareArrayForm) {
  const fs::path p = dir_ / "array.json";
  std::ofstream(p) << R"([{"ph":"M","name":"process_name","pid":3,"args":{"name":"rank 3"}},
    {"ph":"X","name":"backward L2","cat":"backward","ts":1.5,"dur":0.25,"pid":3,"tid":0,
     "args":{"layer":2,"step":5}}])";
  const Timeline t = read_chrome_trace(p.string());
  ASSERT_EQ(t.spans.size(), 1u);
  EXPECT_EQ(t.ranks, 4);
  EXPECT_EQ(t.spans[0].rank, 3);
  EXPECT_EQ(t.spans[0].start_ns, 1500);
  EXPECT_EQ(t.spans[0].end_ns, 1750);
  EXPECT_EQ(t.spans[0].tag, 2);
  EXPECT_EQ(t.spans[0].step, 5);
  EXPECT_EQ(t.spans[0].name, kNoName);  // the generated label carries no own name
}

// Bucket-ready arrows: one s/f pair per collective that knows its issue time, leaving the
// compute slice that encloses the issue time (or that ended last before it).
TEST_F(ChromeTraceTest, FlowArrowsJoinBucketReadyToItsCollective) {
  Timeline t;
  t.ranks = 2;
  const Span bwd3 = make(0, Lane::kCompute, SpanKind::kBackward, 1000, 2000, 0, 3);
  const Span bwd2 = make(0, Lane::kCompute, SpanKind::kBackward, 2000, 3000, 0, 2);
  Span after_slice = make(0, Lane::kComm, SpanKind::kAllreduce, 3500, 4000, 0, 0);
  after_slice.issue_ns = 3100;  // between slices: the arrow leaves bwd2's last ns
  Span inside_slice = make(0, Lane::kComm, SpanKind::kAllreduce, 2600, 2900, 0, 1);
  inside_slice.issue_ns = 2500;  // enclosed by bwd2
  Span no_issue = make(0, Lane::kComm, SpanKind::kAllreduce, 4100, 4200, 0, 2);
  no_issue.group = 4000000000u;  // a split's communicator, above INT32_MAX
  Span before_compute = make(1, Lane::kComm, SpanKind::kBroadcast, 100, 200, -1);
  before_compute.issue_ns = 50;  // rank 1 has no compute at all: no arrow
  t.spans = {bwd3, bwd2, after_slice, inside_slice, no_issue, before_compute};
  const fs::path path = dir_ / "flows.json";
  write_chrome_trace(t, path.string());
  const json trace = read_json(path);

  std::map<std::int64_t, std::vector<json>> flows;  // id -> its events
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "s" || e["ph"] == "f") flows[e["id"].get<std::int64_t>()].push_back(e);
  }
  ASSERT_EQ(flows.size(), 2u);
  std::map<double, double> from_to_us;  // flow start ts -> flow end ts
  for (const auto& [id, events] : flows) {
    ASSERT_EQ(events.size(), 2u) << id;
    EXPECT_EQ(events[0]["ph"], "s");
    EXPECT_EQ(events[1]["ph"], "f");
    for (const json& e : events) {
      EXPECT_EQ(e["bp"], "e");
      EXPECT_EQ(e["pid"], 0);
      EXPECT_EQ(e["name"], "bucket ready");
    }
    EXPECT_EQ(events[0]["tid"], static_cast<int>(Lane::kCompute));
    EXPECT_EQ(events[1]["tid"], static_cast<int>(Lane::kComm));
    from_to_us[events[0]["ts"].get<double>()] = events[1]["ts"].get<double>();
  }
  // t0 = 100 ns (the earliest span); times below are (ns - 100) / 1000 us.
  EXPECT_EQ(from_to_us, (std::map<double, double>{{2.4, 2.5}, {2.899, 3.4}}));

  // The reader skips the flow events and restores each issue time from queued_ns, and
  // each group.
  const Timeline back = read_chrome_trace(path.string());
  ASSERT_EQ(back.spans.size(), t.spans.size());
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    EXPECT_EQ(back.spans[i].issue_ns, t.spans[i].issue_ns) << i;
    EXPECT_EQ(back.spans[i].group, t.spans[i].group) << i;
  }
}

// fsdp: an all-gather of unit 2 (no issue time: no "bucket ready" arrow) points at the
// first compute of unit 2 that starts after it ended, not at the one before it nor at
// another unit's; a gather whose unit never computes again has no arrow.
TEST_F(ChromeTraceTest, FlowArrowsJoinAGatherToTheComputeThatUsesIt) {
  Timeline t;
  const Span before = make(0, Lane::kCompute, SpanKind::kForward, 0, 900, 0, 2);
  const Span other = make(0, Lane::kCompute, SpanKind::kForward, 1000, 1500, 0, 1);
  const Span use = make(0, Lane::kCompute, SpanKind::kForward, 1600, 2000, 0, 2);
  const Span later = make(0, Lane::kCompute, SpanKind::kBackward, 3000, 3500, 0, 2);
  const Span gather = make(0, Lane::kComm, SpanKind::kAllgather, 950, 1200, 0, 2);
  const Span unused = make(0, Lane::kComm, SpanKind::kAllgather, 3600, 3700, 0, 2);
  t.spans = {before, other, use, later, gather, unused};
  const fs::path path = dir_ / "gathered.json";
  write_chrome_trace(t, path.string());
  const json trace = read_json(path);
  std::vector<json> flow;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "s" || e["ph"] == "f") flow.push_back(e);
  }
  ASSERT_EQ(flow.size(), 2u);
  EXPECT_EQ(flow[0]["name"], "gathered");
  EXPECT_EQ(flow[0]["tid"], static_cast<int>(Lane::kComm));
  EXPECT_EQ(flow[0]["ts"], 1.199);  // the gather's last ns (t0 = 0)
  EXPECT_EQ(flow[1]["tid"], static_cast<int>(Lane::kCompute));
  EXPECT_EQ(flow[1]["ts"], 1.6);  // the first use after it
}

}  // namespace
}  // namespace tandem
