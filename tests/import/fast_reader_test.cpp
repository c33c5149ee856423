// The fast reader (fast_trace_reader.h) against the reference reader: the same RawTrace
// for every input both accept, the same error for every input one refuses; and the
// cases where the fast reader must give up (the reference reader then reads the file).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "cli/cli_support.h"
#include "import/import_support.h"
#include "import/kineto_builder.h"
#include "trace_import/bounded_json.h"
#include "trace_import/fast_trace_reader.h"
#include "trace_import/trace_reader.h"

namespace tandem::testing {
namespace {

// Everything a RawTrace holds, names as text (the two readers intern in the same order,
// but the text is what matters).
std::string describe(const RawTrace& t, const NameTable& names) {
  std::ostringstream o;
  const auto name = [&](NameId id) { return "'" + names.name(id) + "'"; };
  for (const TraceCategory& c : t.categories) {
    o << "cat " << c.name << ' ' << c.gpu << c.memory << c.tandem_kind << static_cast<int>(c.kind)
      << '\n';
  }
  for (const RawEvent& e : t.events) {
    o << "event " << e.start_ns << ' ' << e.end_ns << ' ' << e.correlation << ' ' << e.bytes << ' '
      << e.queued_ns << ' ' << e.flops << ' ' << e.pid << ' ' << e.tid << ' ' << name(e.name) << ' '
      << e.step << ' ' << e.tag << ' ' << e.stream << ' ' << e.device << ' ' << e.args << ' '
      << static_cast<int>(e.category) << '\n';
  }
  for (const Launch& l : t.launches) o << "launch " << l.correlation << ' ' << l.start_ns << '\n';
  for (const StepWindow& s : t.steps) o << "step " << s.step << ' ' << s.start_ns << ' ' << s.end_ns << '\n';
  for (const StepWindow& s : t.step_marks) {
    o << "mark " << s.step << ' ' << s.start_ns << ' ' << s.end_ns << '\n';
  }
  for (NameId id : t.step_mark_names) o << "mark name " << name(id) << '\n';
  for (const CollectiveArgs& a : t.collective_args) {
    o << "args " << name(a.collective) << ' ' << name(a.dtype) << ' ' << a.in_elements << ' '
      << a.out_elements << ' ' << a.group_size << '\n';
  }
  for (const auto* list : {&t.collective_ops, &t.cpu_ops}) {
    for (const CpuInterval& c : *list) {
      o << "cpu " << c.start_ns << ' ' << c.end_ns << ' ' << c.tid << ' ' << name(c.name) << ' '
        << c.args << '\n';
    }
  }
  o << "cpu events " << t.cpu_events << '\n';
  o << "fractional " << t.fractional_ts << " rank " << t.distributed_rank.value_or(-7) << " base "
    << t.base_time_ns.value_or(-7) << " tandem " << t.tandem << ' ' << t.tandem_t0_ns << ' '
    << t.tandem_ranks << " events " << t.trace_events << " cut " << t.names_cut << " bytes "
    << t.bytes_read << '\n';
  return o.str();
}

// What read_raw_trace makes of `text` ("error: ..." if it throws), and the same from the
// reference reader.
struct Both {
  std::string fast, reference;
  bool fast_took_it = false;  // the fast reader read it without giving up
};

Both read_both(const std::string& text) {
  Both b;
  const auto run = [&](auto read) {
    NameTable names;
    TraceBytes bytes{std::string_view(text)};
    try {
      return describe(read(bytes, names), names);
    } catch (const UsageError& e) {
      return std::string("error: ") + e.what();
    }
  };
  b.fast = run([](TraceBytes& bytes, NameTable& names) {
    return read_raw_trace(bytes, "t.json", names);
  });
  b.reference = run([](TraceBytes& bytes, NameTable& names) {
    return read_raw_trace_reference(bytes, "t.json", names);
  });
  NameTable names;
  TraceBytes bytes{std::string_view(text)};
  RawTrace out;
  b.fast_took_it = read_raw_trace_fast(bytes, "t.json", names, out);
  return b;
}

std::string seed_trace() { return seed_kineto_trace(); }

TEST(FastReaderTest, TakesOrdinaryTracesAndAgrees) {
  for (const std::string& text :
       {seed_trace(), std::string(R"({"traceEvents":[]})"), std::string("[]"),
        std::string(R"([{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2}])")}) {
    const Both b = read_both(text);
    EXPECT_TRUE(b.fast_took_it) << text;
    EXPECT_EQ(b.fast, b.reference) << text;
  }
}

// Strings full of what the framer looks for (quotes, backslashes, brackets), escapes of
// every kind, duplicate keys, keys with escapes, exact decimal timestamps, PyTorch's
// collective args: many events, so that batches and window refills fall everywhere.
std::string tricky_trace(std::mt19937_64& rng, std::size_t events) {
  static const char* pieces[] = {"\\\"", "\\\\", "{", "}", "[", "]", "\\u00e9", "\\ud83d\\ude00",
                                 "\\/", "\\n", "x", "é", ",", ":", " "};
  const auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  const auto str = [&] {
    std::string s;
    const std::size_t n = pick(12);
    for (std::size_t i = 0; i < n; ++i) s += pieces[pick(std::size(pieces))];
    return s;
  };
  std::string t = R"({"schemaVersion": 1, "deviceProperties": [{"name": ")" + str() +
                  R"(", "x": [1, [2, {"y": null}]]}], "traceEvents": [)";
  for (std::size_t i = 0; i < events; ++i) {
    if (i > 0) t += pick(2) ? ",\n" : " , ";
    const std::string cat = pick(3) == 0 ? "cpu_op" : (pick(2) ? "kernel" : "cuda_runtime");
    t += R"({"ph": "X", "cat": ")" + cat + R"(", "name": "k)" + str() + R"(", "pid": )" +
         std::to_string(pick(3)) + R"(, "tid": )" + std::to_string(pick(4)) + R"(, "ts": )" +
         std::to_string(pick(1000000)) + "." + std::to_string(pick(10000)) + R"(, "dur": )" +
         std::to_string(pick(1000)) + (pick(2) ? ".5" : "") + R"(, "args": {"s": ")" + str() +
         R"(", "correlation": )" + std::to_string(pick(50)) + R"(, "grid": [1, 2, {"a": "]"}],)" +
         R"( "stream": )" + std::to_string(pick(20)) + R"(, "Collective name": "allreduce",)" +
         R"( "In msg nelems": )" + std::to_string(pick(1 << 20)) + R"(, "dtype": "Float"}, )" +
         R"("n\u0061me": "dup)" + str() + R"(", "ts": 1700000000123456.7895})";
  }
  t += R"(], "distributedInfo": {"rank": 3, "x": "]}"}, "baseTimeNanoseconds": 17, )"
       R"("otherData": {"s": ")" +
       str() + R"("}})";
  return t;
}

TEST(FastReaderTest, AgreesOnStringsThatLookLikeStructureAcrossWindowRefills) {
  std::mt19937_64 rng(7);
  const std::string text = tricky_trace(rng, 12000);  // several windows
  ASSERT_GT(text.size(), 3 * kWindowBytes);
  const Both b = read_both(text);
  EXPECT_TRUE(b.fast_took_it);
  EXPECT_EQ(b.fast, b.reference);
  EXPECT_EQ(b.fast.find("error"), std::string::npos) << b.fast.substr(0, 300);
}

TEST(FastReaderTest, LongEventsGoThroughTheSlowLaneAndTheFastLaneGoesOn) {
  // Events over 64 KiB (a long arg, a name cut at 64 KiB and counted, a long number in a
  // skipped string) first, among many short ones across window refills, and last.
  const std::string big = std::string(kMaxFastEventBytes, 'a');
  const std::string big_arg =
      R"({"ph":"X","cat":"kernel","name":"big","ts":1.5,"dur":2,"args":{"a":")" + big +
      R"(","b":[1,{"c":"]"}],"correlation":7}})";
  const std::string long_name =
      R"({"ph":"X","cat":"kernel","name":")" + big + big + R"(","ts":1,"dur":2})";
  const std::string digits_in_a_string =
      R"({"ph":"X","cat":"kernel","name":"d","ts":3,"dur":1,"args":{"s":")" +
      std::string(kMaxJsonNumberChars + 10, '1') + R"("}})";
  std::mt19937_64 rng(3);
  std::string many = tricky_trace(rng, 3000);
  const std::size_t events_at = many.find("\"traceEvents\": [") + 16;
  std::string middle = many;
  middle.insert(middle.find(", {\"ph\"", many.size() / 2) + 2, big_arg + ", " + long_name + ",\n");
  std::string first = many;
  first.insert(events_at, digits_in_a_string + ",");
  // Longer than the window: read while the window refills.
  const std::string huge =
      R"({"ph":"X","cat":"kernel","name":"huge","ts":4,"dur":1,"args":{"a":")" +
      std::string(3 * kWindowBytes, 'h') + R"("}})";
  const std::vector<std::string> texts = {
      R"({"traceEvents":[)" + big_arg + "]}",
      "[" + huge + ", " + big_arg + ",\n" + huge + "]",
      "[" + long_name + "," + big_arg + "]",
      middle,
      first,
  };
  for (const std::string& text : texts) {
    const Both b = read_both(text);
    EXPECT_TRUE(b.fast_took_it) << text.substr(0, 100);
    EXPECT_EQ(b.fast, b.reference) << text.substr(0, 100);
    EXPECT_EQ(b.fast.find("error"), std::string::npos) << b.fast.substr(0, 300);
  }
  EXPECT_NE(read_both(texts[2]).fast.find(" cut 1 "), std::string::npos);
}

TEST(FastReaderTest, GivesUpWhereItMustAndTheReferenceReads) {
  const std::string long_number = "0." + std::string(kMaxJsonNumberChars + 10, '1');
  const std::vector<std::string> texts = {
      // A key with an escape (it might be traceEvents), an integer beyond 64 bits.
      R"({"trace\u0045vents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2}]})",
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"a":123456789012345678901234567890}}]})",
      // A number longer than the reference reader's bound: an error there, so here too.
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"a":)" +
          long_number + "}}]}",
      // A top-level value over 64 KiB.
      R"({"x":")" + std::string(kMaxFastEventBytes, 'a') + R"(","traceEvents":[]})",
      // An invalid long event.
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"a":")" +
          std::string(kMaxFastEventBytes, 'a') + R"(\q"}}]})",
  };
  for (const std::string& text : texts) {
    const Both b = read_both(text);
    EXPECT_FALSE(b.fast_took_it) << text.substr(0, 100);
    EXPECT_EQ(b.fast, b.reference) << text.substr(0, 100);
  }
}

TEST(FastReaderTest, ErrorsAreTheReferenceReadersOnes) {
  const std::string good = seed_trace();
  const std::vector<std::string> texts = {
      "", "  ", "{", "[", "[1]", "[[]]", R"({"traceEvents":[{}],})", R"({"traceEvents":[{},]})",
      R"({"traceEvents":[{} {}]})", R"({"traceEvents":[{}] "x":1})", R"({"traceEvents":[{"a":tru}]})",
      R"({"traceEvents":[{"a":"\q"}]})", R"({"traceEvents":[], "x": [1,]})", good + " x",
      good.substr(0, good.size() - 1), std::string(1001, '[') + std::string(1001, ']'),
      R"({"traceEvents":[)" + std::string(998, '[') + std::string(998, ']') + "]}",
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":-1,"dur":-2}]})",
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1e400,"dur":2}]})",
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":NaN,"dur":2}]})",
      R"({"distributedInfo":{"rank":"x"},"traceEvents":[]})",
  };
  for (const std::string& text : texts) {
    const Both b = read_both(text);
    EXPECT_EQ(b.fast, b.reference) << text.substr(0, 100);
    EXPECT_TRUE(b.reference.starts_with("error: t.json: ")) << text.substr(0, 100) << b.reference;
  }
}

TEST(FastReaderTest, AgreesWithTheReferenceOnCorruptedTraces) {
  // Byte flips, truncations and JSON-significant bytes in a trace of several windows and
  // in a small one: whatever the outcome, both readers have the same.
  std::mt19937_64 rng(11);
  const std::vector<std::string> seeds = {seed_trace(), tricky_trace(rng, 40)};
  int took = 0;
  for (int i = 0; i < 1500; ++i) {
    const std::string s = mutate(seeds[i % seeds.size()], rng);
    const Both b = read_both(s);
    ASSERT_EQ(b.fast, b.reference) << "variant " << i << ": " << s.substr(0, 200);
    took += b.fast_took_it;
  }
  EXPECT_GT(took, 0);  // some variants stay valid and take the fast path
}

TEST(ParallelImportTest, SameResultAndFirstErrorInInputOrder) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int r = 0; r < 5; ++r) {
    const auto p = dir.path() / ("rank" + std::to_string(r) + ".json");
    std::ofstream(p) << KinetoBuilder(r)
                            .profiler_step(1, 0, 100)
                            .launch(5, 1)
                            .kernel("gemm" + std::to_string(r), 10, 20.5, 7, 1)
                            .kernel("ncclDevKernel_AllReduce_Sum_f32", 15, 30, 13)
                            .str();
    paths.push_back(p.string());
  }
  TraceImporter sequential;
  for (std::size_t i = 0; i < paths.size(); ++i) sequential.add_file(paths[i], static_cast<int>(i));
  const ImportResult a = sequential.finish();
  const ImportResult b = import_traces(paths);
  ASSERT_EQ(a.timeline.spans.size(), b.timeline.spans.size());
  for (std::size_t i = 0; i < a.timeline.spans.size(); ++i) {
    const Span& x = a.timeline.spans[i];
    const Span& y = b.timeline.spans[i];
    EXPECT_EQ(std::tie(x.rank, x.lane, x.kind, x.step, x.start_ns, x.end_ns),
              std::tie(y.rank, y.lane, y.kind, y.step, y.start_ns, y.end_ns));
    EXPECT_EQ(a.timeline.names->name(x.name), b.timeline.names->name(y.name));
  }
  ASSERT_EQ(a.files.size(), b.files.size());
  for (std::size_t i = 0; i < a.files.size(); ++i) EXPECT_EQ(a.files[i].rank, b.files[i].rank);

  // Two broken files: the one earlier in the input is the error, whichever thread ends first.
  std::ofstream(dir.path() / "bad1.json") << "{";
  std::ofstream(dir.path() / "bad3.json") << "[1]";
  std::vector<std::string> with_errors = paths;
  with_errors[1] = (dir.path() / "bad1.json").string();
  with_errors[3] = (dir.path() / "bad3.json").string();
  try {
    import_traces(with_errors);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(with_errors[1] + ": ")) << e.what();
  }
  // A rank claimed twice is found in input order too.
  const auto copy = dir.path() / "rank1-again.json";
  std::ofstream(copy) << KinetoBuilder(1).kernel("gemm", 10, 20.5).str();
  const std::vector<std::string> twice = {paths[0], paths[1], copy.string()};
  EXPECT_THROW(import_traces(twice), UsageError);
}

}  // namespace
}  // namespace tandem::testing
