// ResultsWriter: the one output policy (refuse unless --force or --resume, a lock per
// directory, a directory that appears whole or not at all), atomic files, and
// characterize's points committed one at a time.
#include "report/results_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

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
    const std::string name = entry.path().filename().string();
    for (const char* leftover : {".tmp", ".partial", ".lock", ".old"}) {
      EXPECT_EQ(name.find(leftover), std::string::npos) << entry.path();
    }
  }
}

TEST(ResultsWriterTest, CharacterizeRefusesResultsUnlessResumedOrForced) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "out";
  {
    ResultsWriter first(dir, ResultsCommand::kCharacterize, kArgv);
    first.commit_point("a", {{"id", "a"}});
    first.commit();
  }
  const std::string refused =
      usage_error([&] { ResultsWriter again(dir, ResultsCommand::kCharacterize, kArgv); });
  EXPECT_NE(refused.find("--resume"), std::string::npos) << refused;
  EXPECT_NE(refused.find(dir.string()), std::string::npos) << refused;
  // What a run killed mid-write left: AtomicFile's temporaries go on resume; a file that
  // merely has ".tmp." in its name stays.
  write_file_atomic(dir / "points" / "a" / "overlapped.trace.json.tmp.4242", "{half");
  write_file_atomic(dir / "notes.tmp.txt", "mine");
  {
    const ResultsWriter resumed(dir, ResultsCommand::kCharacterize, kArgv, {.resume = true});
    EXPECT_EQ(resumed.finished_points(), (std::set<std::string>{"a"}));
    EXPECT_EQ(resumed.working_path(), dir);  // in place
  }
  EXPECT_FALSE(fs::exists(dir / "points" / "a" / "overlapped.trace.json.tmp.4242"));
  EXPECT_TRUE(fs::exists(dir / "notes.tmp.txt"));
  ResultsWriter forced(dir, ResultsCommand::kCharacterize, kArgv, {.force = true});
  EXPECT_TRUE(forced.finished_points().empty());
  EXPECT_NE(usage_error([&] {
              ResultsWriter both(tmp.path() / "x", ResultsCommand::kCharacterize, kArgv,
                                 {.resume = true, .force = true});
            }),
            "");
}

TEST(ResultsWriterTest, TrainAndAnalyzeRefuseResultsUnlessForced) {
  for (ResultsCommand command : {ResultsCommand::kTrain, ResultsCommand::kAnalyze}) {
    TempDir tmp;
    const fs::path dir = tmp.path() / "out";
    {
      ResultsWriter first(dir, command, kArgv);
      first.write_summary({{"run", 1}});
      first.commit();
    }
    const std::string refused = usage_error([&] { ResultsWriter again(dir, command, kArgv); });
    EXPECT_NE(refused.find("--force"), std::string::npos) << refused;
    {
      // Until the forced run commits, the old results are what DIR holds; if it never
      // commits, they stay.
      ResultsWriter failed(dir, command, kArgv, {.force = true});
      failed.write_summary({{"run", 2}});
      EXPECT_EQ(json::parse(read_file(dir / "summary.json"))["run"], 1);
    }
    EXPECT_EQ(json::parse(read_file(dir / "summary.json"))["run"], 1);
    {
      ResultsWriter second(dir, command, kArgv, {.force = true});
      second.write_summary({{"run", 3}});
      second.commit();
    }
    EXPECT_EQ(json::parse(read_file(dir / "summary.json"))["run"], 3);
    expect_no_temporaries(tmp.path());
  }
}

// --force replaces a results directory, never one of other files named by mistake.
TEST(ResultsWriterTest, ForceLeavesOtherFilesAlone) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "home");
  write_file_atomic(tmp.path() / "home" / "notes.txt", "mine");
  const std::string refused = usage_error([&] {
    ResultsWriter w(tmp.path() / "home", ResultsCommand::kTrain, kArgv, {.force = true});
  });
  EXPECT_NE(refused.find("not tandem results"), std::string::npos) << refused;
  EXPECT_EQ(read_file(tmp.path() / "home" / "notes.txt"), "mine");
}

// A run's directory appears whole at commit() or not at all: a fresh run writes into
// DIR.partial, and one that ends without commit() leaves nothing behind.
TEST(ResultsWriterTest, AFreshRunAppearsOnlyWhenCommitted) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "out";
  {
    ResultsWriter writer(dir, ResultsCommand::kTrain, kArgv);
    writer.write("steps.csv", "x\n");
    EXPECT_EQ(writer.working_path(), tmp.path() / "out.partial");
    EXPECT_FALSE(fs::exists(dir));
  }
  EXPECT_TRUE(fs::is_empty(tmp.path())) << "a failed run left something";

  fs::create_directories(dir);  // an empty DIR is used, and stays until the commit
  ResultsWriter writer(dir, ResultsCommand::kAnalyze, kArgv);
  writer.write("iterations.csv", "y\n");
  EXPECT_TRUE(fs::is_empty(dir));
  writer.commit();
  EXPECT_EQ(read_file(dir / "iterations.csv"), "y\n");
  EXPECT_FALSE(fs::exists(tmp.path() / "out.partial"));
}

// --out DIR that is a symbolic link to a directory: the results go where it points and the
// link stays a link (the commit renames onto the target, never over the link).
TEST(ResultsWriterTest, AnOutThatIsALinkToADirectoryWritesThroughIt) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "real");
  fs::create_directory_symlink("real", tmp.path() / "link");
  {
    ResultsWriter writer(tmp.path() / "link", ResultsCommand::kTrain, kArgv);
    writer.write("steps.csv", "z\n");
    writer.commit();
  }
  EXPECT_TRUE(fs::is_symlink(tmp.path() / "link"));
  EXPECT_EQ(read_file(tmp.path() / "real" / "steps.csv"), "z\n");
  EXPECT_FALSE(fs::exists(tmp.path() / "link.partial"));
  EXPECT_FALSE(fs::exists(tmp.path() / "real.partial"));
}

// A sweep that fails keeps its finished points in DIR.partial; a new run is refused
// there (--resume continues it, --force starts over).
TEST(ResultsWriterTest, AnInterruptedSweepIsKeptForResume) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "out";
  {
    ResultsWriter writer(dir, ResultsCommand::kCharacterize, kArgv);
    writer.commit_point("a", {{"id", "a"}});
  }  // no commit: the sweep failed after one point
  EXPECT_FALSE(fs::exists(dir));
  const std::string refused =
      usage_error([&] { ResultsWriter again(dir, ResultsCommand::kCharacterize, kArgv); });
  EXPECT_NE(refused.find("1 finished point(s); add --resume"), std::string::npos) << refused;
  ResultsWriter resumed(dir, ResultsCommand::kCharacterize, kArgv, {.resume = true});
  EXPECT_EQ(resumed.finished_points(), (std::set<std::string>{"a"}));
  resumed.commit_point("b", {{"id", "b"}});
  resumed.commit();
  EXPECT_TRUE(fs::exists(dir / "points" / "a" / "result.json"));
  EXPECT_TRUE(fs::exists(dir / "points" / "b" / "result.json"));
  EXPECT_FALSE(fs::exists(tmp.path() / "out.partial"));
}

// While a writer holds DIR, a second one (another run) is refused with one line; once it
// is gone, DIR is free again and no lock file is left.
TEST(ResultsWriterTest, ASecondWriterIsRefusedWhileTheFirstHoldsTheDirectory) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "out";
  {
    ResultsWriter first(dir, ResultsCommand::kTrain, kArgv);
    const std::string refused =
        usage_error([&] { ResultsWriter second(dir, ResultsCommand::kTrain, kArgv); });
    EXPECT_NE(refused.find("is in use by another tandem run (pid "), std::string::npos) << refused;
    EXPECT_EQ(refused.find('\n'), std::string::npos) << refused;
    EXPECT_TRUE(fs::exists(tmp.path() / ".out.lock"));
    first.commit();
  }
  EXPECT_FALSE(fs::exists(tmp.path() / ".out.lock"));
  ResultsWriter third(dir, ResultsCommand::kTrain, kArgv, {.force = true});
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
  TempDir tmp;
  const fs::path dir = tmp.path() / "out";
  ResultsWriter writer(dir, ResultsCommand::kCharacterize, kArgv);
  writer.write("points/b/overlapped.trace.json", "{}");  // traces first ...
  EXPECT_TRUE(writer.finished_points().empty());         // ... a point without result.json
  writer.commit_point("b", {{"id", "b"}});
  writer.commit_point("a", {{"id", "a"}});
  const std::vector<json> points = writer.load_points({"b", "missing", "a"});
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0]["id"], "b");
  EXPECT_EQ(points[1]["id"], "a");
  writer.commit();
  expect_no_temporaries(dir);

  write_file_atomic(dir / "points" / "a" / "result.json", "{broken");
  EXPECT_THROW(writer.load_points({"a"}), UsageError);
}


// An atomic write goes through a symbolic link (the link stays) and refuses, without
// touching it, anything that is not a regular file: a directory, a FIFO (and the same
// for device nodes such as /dev/full and sockets).
TEST(AtomicFileTest, FollowsLinksAndNeverReplacesWhatIsNotARegularFile) {
  TempDir tmp;
  const fs::path real = tmp.path() / "real.txt";
  write_file_atomic(real, "old");
  const fs::path link = tmp.path() / "link.txt";
  fs::create_symlink("real.txt", link);
  write_file_atomic(link, "new");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_file(real), "new");
  // A dangling link: the file it names is created.
  const fs::path dangling = tmp.path() / "dangling.txt";
  fs::create_symlink("later.txt", dangling);
  write_file_atomic(dangling, "made");
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_EQ(read_file(tmp.path() / "later.txt"), "made");

  const fs::path fifo = tmp.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string refused = usage_error([&] { write_file_atomic(fifo, "x"); });
  EXPECT_EQ(refused.rfind("cannot write '" + fifo.string() + "': it is a FIFO", 0), 0u)
      << refused;
  EXPECT_TRUE(fs::is_fifo(fifo));
  const fs::path fifo_link = tmp.path() / "fifo-link";
  fs::create_symlink(fifo, fifo_link);
  EXPECT_NE(usage_error([&] { write_file_atomic(fifo_link, "x"); }).find("a FIFO"),
            std::string::npos);
  EXPECT_TRUE(fs::is_fifo(fifo));
  fs::create_directory(tmp.path() / "dir");
  EXPECT_NE(usage_error([&] { write_file_atomic(tmp.path() / "dir", "x"); }).find("a directory"),
            std::string::npos);
  // Nothing but what was asked for is left: no temporaries.
  for (const auto& entry : fs::directory_iterator(tmp.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

}  // namespace
}  // namespace tandem::testing
