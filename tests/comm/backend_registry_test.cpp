// The backend registry and backend selection from the launcher's environment.
#include "comm/backend_registry.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"

namespace tandem {
namespace {

// Sets launcher variables for one test and removes them afterwards.
class LauncherEnv : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_RANK",
                                          "PMI_SIZE",
                                          "PMI_RANK",
                                          "PMIX_SIZE",
                                          "PMIX_RANK",
                                          "SLURM_STEP_NUM_TASKS",
                                          "SLURM_PROCID",
                                          "SLURM_NTASKS"};
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override { SetUp(); }
};

std::unique_ptr<ProcessCommunicator> no_communicator(const BackendOptions&) { return nullptr; }

TEST_F(LauncherEnv, NoLauncherMeansOneProcessAndLocal) {
  EXPECT_EQ(launched_world().size, 1);
  EXPECT_EQ(resolve_backend("auto"), "local");
}

TEST_F(LauncherEnv, OpenMpiAndSlurmStepsAreRecognized) {
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  EXPECT_EQ(launched_world().size, 4);
  EXPECT_EQ(launched_world().rank, 3);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("SLURM_STEP_NUM_TASKS", "8", 1);
  setenv("SLURM_PROCID", "5", 1);
  EXPECT_EQ(launched_world().size, 8);
  EXPECT_EQ(launched_world().rank, 5);
}

TEST_F(LauncherEnv, SlurmNtasksAloneIsABatchScriptNotAJob) {
  setenv("SLURM_NTASKS", "8", 1);
  EXPECT_EQ(launched_world().size, 1);
  EXPECT_EQ(resolve_backend("auto"), "local");
}

TEST_F(LauncherEnv, AutoUnderALauncherNeedsTheMpiBackend) {
  setenv("PMI_SIZE", "2", 1);
  // This test program links no mpi backend unless one registered: then auto says so.
  if (find_backend("mpi") == nullptr) {
    EXPECT_THROW(resolve_backend("auto"), UsageError);
    register_backend({.name = "mpi", .make_job = &no_communicator});
  }
  EXPECT_EQ(resolve_backend("auto"), "mpi");
  EXPECT_EQ(resolve_backend("local"), "local");
  EXPECT_THROW(resolve_backend("nccl"), UsageError);
}

TEST(BackendRegistry, LocalIsRegisteredByItsTarget) {
  const Backend* local = find_backend("local");
  ASSERT_NE(local, nullptr);
  EXPECT_EQ(local->memory, MemoryKind::kHost);
  ASSERT_NE(local->make_world, nullptr);
  auto comms = local->make_world({.ranks = 3});
  ASSERT_EQ(comms.size(), 3u);
  EXPECT_EQ(comms[2]->rank(), 2);
  EXPECT_EQ(comms[2]->backend_name(), "local");
}

std::string unavailable_here() { return "no such device here"; }

TEST(BackendRegistry, RequireNamesTheFlagAndWhyNot) {
  register_backend({.name = "test-unavailable", .unavailable = &unavailable_here});
  try {
    require_backend("test-unavailable", "--device-comm");
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--device-comm test-unavailable: no such device here");
  }
  try {
    require_backend("nonesuch", "--backend");
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("local"), std::string::npos) << e.what();
  }
  EXPECT_EQ(&require_backend("local", "--backend"), find_backend("local"));
}

TEST(BackendRegistry, FailureLineNamesTheRankOnce) {
  EXPECT_EQ(failure_line(2, "boom\nagain"), "tandem: rank 2: boom again");
  EXPECT_EQ(failure_line(2, "rank 2: allreduce not complete"),
            "tandem: rank 2: allreduce not complete");
}

}  // namespace
}  // namespace tandem
