// summary.json's header: what ResultsWriter writes for each command, and what the report
// refuses to read (one line naming the file).
#include "report/summary_header.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_support.h"
#include "core/error.h"
#include "core/files.h"
#include "core/version.h"
#include "report/results_dir.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr ResultsCommand kCommands[] = {ResultsCommand::kTrain, ResultsCommand::kCharacterize,
                                        ResultsCommand::kAnalyze};

TEST(SummaryHeaderTest, EveryCommandWritesTheSameHeaderBeforeItsBody) {
  for (ResultsCommand command : kCommands) {
    TempDir dir;
    const std::vector<std::string> argv = {"tandem", std::string(to_string(command)), "--out",
                                           "x y"};
    ResultsWriter writer(dir.path() / "out", command, argv);
    writer.write_summary({{"body_key", 42}, {"another", "value"}});
    writer.commit();
    const std::string text = read_file(dir.path() / "out" / "summary.json");
    const json s = json::parse(text);
    EXPECT_EQ(s["schema"], kSummarySchema);
    EXPECT_EQ(s["schema"], 2);
    EXPECT_EQ(s["tool"], "tandem");
    EXPECT_EQ(s["version"], std::string(tandem_version()));
    EXPECT_EQ(s["command"], std::string(to_string(command)));
    EXPECT_EQ(s["argv"], argv);
    ASSERT_TRUE(s["created"].is_string());
    EXPECT_EQ(s["created"].get<std::string>().size(), std::string("2026-11-22T06:00:00Z").size());
    EXPECT_TRUE(s["machine"].is_object());
    EXPECT_TRUE(s["machine"].contains("cpu"));
    EXPECT_EQ(s["body_key"], 42);
    // The header comes first in the file, the body after it.
    EXPECT_EQ(text.rfind("{\n \"schema\": 2,", 0), 0u) << text.substr(0, 40);
    EXPECT_LT(text.find("\"machine\""), text.find("\"another\""));
    EXPECT_EQ(read_summary_header(s, dir.path() / "summary.json"), command);
  }
}

// Each bad header: the one-line error names the file and says what is wrong.
TEST(SummaryHeaderTest, RefusesSummariesWithoutAKnownHeader) {
  const fs::path file = "/results/x/summary.json";
  const json good = {{"schema", 2}, {"tool", "tandem"}, {"command", "train"}};
  struct Case {
    const char* what;
    json summary;
    const char* fragment;
  };
  auto with = [&](const char* key, json value) {
    json s = good;
    if (value.is_discarded()) {
      s.erase(key);
    } else {
      s[key] = std::move(value);
    }
    return s;
  };
  const json erased(json::value_t::discarded);
  const std::vector<Case> cases = {
      {"not an object", json::array(), "not a JSON object"},
      {"no header", json{{"config", json::object()}}, "no \"schema\" header"},
      {"schema 1", json{{"version", 1}, {"points", json::array()}}, "schema 1"},
      {"future schema", with("schema", 3), "schema 3 is not supported"},
      {"schema as text", with("schema", "2"), "schema \"2\" is not supported"},
      {"another tool", with("tool", "other"), "\"tool\" is not \"tandem\""},
      {"no tool", with("tool", erased), "\"tool\" is not \"tandem\""},
      {"unknown command", with("command", "fly"), "unknown command \"fly\""},
      {"no command", with("command", erased), "unknown command (none)"},
      {"command not text", with("command", 3), "unknown command 3"},
  };
  for (const Case& c : cases) {
    try {
      read_summary_header(c.summary, file);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const UsageError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(file.string() + ": ", 0), 0u) << c.what << ": " << message;
      EXPECT_NE(message.find(c.fragment), std::string::npos) << c.what << ": " << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << c.what << ": " << message;
    }
  }
}

}  // namespace
}  // namespace tandem::testing
