// The process-backend registry and backend selection from the launcher's environment.
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

std::unique_ptr<ProcessCommunicator> no_communicator(const ProcessBackendOptions&) {
  return nullptr;
}

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
  if (find_process_backend("mpi") == nullptr) {
    EXPECT_THROW(resolve_backend("auto"), UsageError);
    register_process_backend("mpi", no_communicator);
  }
  EXPECT_EQ(resolve_backend("auto"), "mpi");
  EXPECT_EQ(resolve_backend("local"), "local");
  EXPECT_THROW(resolve_backend("nccl"), UsageError);
}

}  // namespace
}  // namespace tandem
