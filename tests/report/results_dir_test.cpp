// ResultsWriter: the one policy for a directory that already holds results, atomic files,
// and characterize's points committed one at a time.
#include "report/results_dir.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_support.h"
#include "core/error.h"
#include "core/files.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<std::string> kArgv = {"tandem", "test"};

void expect_no_temporaries(const fs::path& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST(ResultsWriterTest, CharacterizeRefusesResultsUnlessResumed) {
  TempDir dir;
  {
    ResultsWriter first(dir.path(), ResultsCommand::kCharacterize, kArgv);
    first.commit_point("a", {{"id", "a"}});
  }
  try {
    ResultsWriter again(dir.path(), ResultsCommand::kCharacterize, kArgv);
    ADD_FAILURE() << "a directory with a finished point was accepted without resume";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
  }
  const ResultsWriter resumed(dir.path(), ResultsCommand::kCharacterize, kArgv, true);
  EXPECT_EQ(resumed.finished_points(), (std::set<std::string>{"a"}));

  TempDir with_summary;
  ResultsWriter(with_summary.path(), ResultsCommand::kCharacterize, kArgv).write_summary({});
  EXPECT_THROW(ResultsWriter(with_summary.path(), ResultsCommand::kCharacterize, kArgv),
               UsageError);
}

TEST(ResultsWriterTest, TrainAndAnalyzeOverwrite) {
  for (ResultsCommand command : {ResultsCommand::kTrain, ResultsCommand::kAnalyze}) {
    TempDir dir;
    ResultsWriter(dir.path(), command, kArgv).write_summary({{"run", 1}});
    const ResultsWriter second(dir.path(), command, kArgv);
    second.write_summary({{"run", 2}});
    EXPECT_EQ(json::parse(read_file(dir.path() / "summary.json"))["run"], 2);
    expect_no_temporaries(dir.path());
  }
}

TEST(ResultsWriterTest, UnwritableDirectoryNamesOut) {
  try {
    ResultsWriter writer("/etc/passwd/run", ResultsCommand::kTrain, kArgv);
    ADD_FAILURE() << "a directory under a file was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--out: ", 0), 0u) << e.what();
  }
}

TEST(ResultsWriterTest, PointsAreFinishedWhenCommittedAndLoadInGridOrder) {
  TempDir dir;
  ResultsWriter writer(dir.path(), ResultsCommand::kCharacterize, kArgv);
  writer.write("points/b/overlapped.trace.json", "{}");  // traces first ...
  EXPECT_TRUE(writer.finished_points().empty());         // ... a point without result.json
  writer.commit_point("b", {{"id", "b"}});
  writer.commit_point("a", {{"id", "a"}});
  const std::vector<json> points = writer.load_points({"b", "missing", "a"});
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0]["id"], "b");
  EXPECT_EQ(points[1]["id"], "a");
  expect_no_temporaries(dir.path());

  write_file_atomic(dir.path() / "points" / "a" / "result.json", "{broken");
  EXPECT_THROW(writer.load_points({"a"}), UsageError);
}

}  // namespace
}  // namespace tandem::testing
