// BoundedJson (bounded_json.h): strings cut at 64 KiB on a character boundary and the cut
// reported; offsets after a cut are offsets in the input; the dropped rest still checked
// as JSON; numbers and nesting bounded. Through the importer: a long name is kept cut
// and counted, a long skipped string costs nothing, errors name the file and the offset.
#include "trace_import/bounded_json.h"

#include <gtest/gtest.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "import/import_support.h"
#include "trace_import/trace_bytes.h"

namespace tandem::testing {
namespace {

constexpr std::size_t kMax = kMaxJsonStringBytes;

// What the parser would be given for `text`, and which strings (by ordinal) were cut.
struct Passed {
  std::string text;
  std::vector<bool> cut;
};

Passed pass(const std::string& text, std::size_t strings) {
  TraceBytes raw{std::string_view(text)};
  BoundedJson json(raw, "t.json", false);
  Passed p;
  p.text.assign(std::istreambuf_iterator<char>(&json), std::istreambuf_iterator<char>());
  for (std::size_t i = 0; i < strings; ++i) p.cut.push_back(json.was_cut(i));
  return p;
}

// The message of the UsageError that importing `text` throws ("" if none).
std::string error_of(const std::string& text) {
  try {
    import_text(text, {}, "bad.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::uint64_t offset_in(const std::string& message) {
  const auto at = message.find("at byte ");
  EXPECT_NE(at, std::string::npos) << message;
  return at == std::string::npos ? 0 : std::stoull(message.substr(at + 8));
}

TEST(BoundedJsonTest, ShortStringsAndStructurePassUnchanged) {
  const std::string text =
      R"({"a":"x\"y\\z\u00e9\ud83d\ude00","b":[1,-2.5e3,true,null,{}],"c":"€ ok"})";
  const Passed p = pass(text, 4);
  EXPECT_EQ(p.text, text);
  EXPECT_EQ(p.cut, (std::vector<bool>{false, false, false, false}));
}

TEST(BoundedJsonTest, ALongStringIsCutAtACharacterBoundaryAndSaysSo) {
  // kMax - 1 ASCII bytes, then a 3-byte character across the bound: it is kept whole.
  const std::string euro = "\xE2\x82\xAC";
  const std::string long_utf8 = std::string(kMax - 1, 'a') + euro + std::string(1000, 'b');
  // The bound inside a surrogate pair written as escapes: the pair is kept whole.
  const std::string pair = "\\ud83d\\ude00";
  const std::string long_pair = std::string(kMax - 3, 'c') + pair + std::string(1000, 'd');
  const std::string text =
      R"({"k":")" + long_utf8 + R"(","short":")" + long_pair + R"(","after":1})";
  const Passed p = pass(text, 5);
  EXPECT_EQ(p.cut, (std::vector<bool>{false, true, false, true, false}));
  // Still JSON, with both strings cut just past the bound.
  const auto doc = nlohmann::json::parse(p.text);
  EXPECT_EQ(doc["k"].get<std::string>(), std::string(kMax - 1, 'a') + euro);
  EXPECT_EQ(doc["short"].get<std::string>(),
            std::string(kMax - 3, 'c') + "\xF0\x9F\x98\x80");  // U+1F600
  EXPECT_EQ(doc["after"], 1);
}

TEST(BoundedJsonTest, OffsetsAfterACutAreOffsetsInTheInput) {
  // A 1 MiB string in a skipped field, then a bad "ts": the offset is where it is in the
  // file, not in the 64 KiB the parser was given.
  const std::string text = R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","args":{"x":")" +
                           std::string(1 << 20, 'x') + R"("},"ts":true,"dur":1}]})";
  const std::string message = error_of(text);
  EXPECT_NE(message.find("\"ts\" is not a number"), std::string::npos) << message;
  const std::uint64_t bad = text.find("true");
  EXPECT_GE(offset_in(message), bad) << message;
  EXPECT_LE(offset_in(message), bad + 5) << message;

  // Many cuts over several buffers, of strings and of whitespace runs: the same.
  std::string many = R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","args":{)";
  for (int i = 0; i < 40; ++i) {
    many += "\"k" + std::to_string(i) + "\":\"" + std::string(100'000, 'y') + "\"," +
            std::string(5000, ' ');
  }
  many += R"("z":0},"ts":true,"dur":1}]})";
  const std::string message2 = error_of(many);
  const std::uint64_t bad2 = many.find("true");
  EXPECT_GE(offset_in(message2), bad2) << message2;
  EXPECT_LE(offset_in(message2), bad2 + 5) << message2;
}

TEST(BoundedJsonTest, TheDroppedRestIsStillCheckedAsJson) {
  const std::string head = R"({"traceEvents":[],"x":")" + std::string(kMax + 10, 'a');
  struct Case {
    std::string bad;  // follows the first kMax + 10 bytes of the string
    const char* expected;
  };
  for (const Case& c : {Case{"\xFF", "invalid UTF-8 in a string"},
                        Case{"\xE2\x82", "invalid UTF-8 in a string"},      // cut short by "
                        Case{"\xED\xA0\x80", "invalid UTF-8 in a string"},  // a surrogate
                        Case{std::string(1, '\x01'), "control character in a string"},
                        Case{"\\q", "invalid escape in a string"},
                        Case{"\\u12G4", "invalid \\u escape in a string"}}) {
    const std::string text = head + c.bad + R"("})";
    const std::string message = error_of(text);
    EXPECT_TRUE(message.starts_with("bad.json: not valid JSON: ")) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    // The offset of the offending byte (or the one after it), in the input.
    EXPECT_GE(offset_in(message), head.size()) << message;
    EXPECT_LE(offset_in(message), head.size() + c.bad.size()) << message;
  }
  // Valid content of every kind in the dropped rest is accepted.
  EXPECT_EQ(error_of(head + "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\\n\\\"\\u00e9" + R"("})"), "");
}

TEST(BoundedJsonTest, NumbersAndNestingAreBounded) {
  const std::string number = R"({"traceEvents":[],"x":)" + std::string(5000, '1') + "}";
  std::string message = error_of(number);
  EXPECT_NE(message.find("bad.json: a number longer than 4096 characters at byte "),
            std::string::npos)
      << message;
  // 4096 characters are still a number (zero, so that it does not overflow a double).
  EXPECT_EQ(error_of(R"({"traceEvents":[],"x":0.)" + std::string(4094, '0') + "}"), "");

  // The document is one level: 999 more make 1000, the most allowed.
  const auto nested = [](int levels) {
    return R"({"traceEvents":[],"x":)" + std::string(static_cast<std::size_t>(levels), '[') +
           std::string(static_cast<std::size_t>(levels), ']') + "}";
  };
  EXPECT_EQ(error_of(nested(999)), "");
  message = error_of(nested(1000));
  EXPECT_NE(message.find("bad.json: nested deeper than 1000 levels at byte "), std::string::npos)
      << message;
}

TEST(BoundedJsonTest, ALongKernelNameIsKeptCutAndCounted) {
  const std::string name = "gemm_" + std::string(kMax * 3, 'n');
  const std::string text =
      R"({"traceEvents":[{"ph":"X","cat":"kernel","name":")" + name +
      R"(","pid":0,"tid":7,"ts":0,"dur":10,"args":{"junk":")" + std::string(kMax * 3, 'j') +
      R"("}},{"ph":"X","cat":"kernel","name":"short","pid":0,"tid":7,"ts":20,"dur":10}]})";
  const ImportResult r = import_text(text);
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].names_cut, 1u);
  EXPECT_EQ(r.files[0].compute, 2u);
  EXPECT_EQ(r.files[0].bytes, text.size());
  ASSERT_EQ(r.timeline.spans.size(), 2u);
  const std::string kept(r.timeline.names->name(r.timeline.spans[0].name));
  EXPECT_EQ(kept, name.substr(0, kMax));
  EXPECT_EQ(r.timeline.names->name(r.timeline.spans[1].name), "short");
}

}  // namespace
}  // namespace tandem::testing
