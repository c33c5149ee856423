// Start-up: the program maps no CUDA library until a GPU is asked for (core/plugin.h,
// src/CMakeLists.txt Note [libtandem and the GPU plug-in]), and a plug-in that cannot be
// loaded is one line naming the flag.
#include <gtest/gtest.h>

#include "cli/cli_support.h"

namespace tandem::testing {
namespace {

// The dynamic loader's own account (LD_DEBUG=libs) of what it loaded.
std::string loaded_libraries(const std::string& args) {
  const CliResult r = run_shell("LD_DEBUG=libs " + std::string(TANDEM_BINARY) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.err;
}

TEST(StartupTest, VersionHelpAndACpuRunLoadNoCudaLibrary) {
  for (const std::string args : {"--version", "--help", "train --help",
                                 "train --ranks 2 --model mlp:2x16 --batch 4 --steps 2 --quiet"}) {
    const std::string loaded = loaded_libraries(args);
    EXPECT_NE(loaded.find("libtandem.so"), std::string::npos) << args << "\n" << loaded;
    for (const char* cuda : {"libcudart", "libcublas", "libnccl", "libcupti", "libtandem_gpu"}) {
      EXPECT_EQ(loaded.find(cuda), std::string::npos) << args << " loaded " << cuda;
    }
  }
}

TEST(StartupTest, AGpuRunLoadsThePluginOrSaysWhyNotInOneLine) {
  const CliResult r =
      run_shell("LD_DEBUG=libs " + std::string(TANDEM_BINARY) +
                " train --device cuda --ranks 1 --model mlp:2x16 --batch 4 --steps 1 --quiet");
  // This build has GPU parts exactly when the plug-in is beside libtandem.so.
  const bool built_with_cuda = r.err.find("libtandem_gpu.so") != std::string::npos;
  if (!built_with_cuda) {
    EXPECT_NE(r.err.find("built without the CUDA toolkit"), std::string::npos) << r.err;
    return;
  }
  EXPECT_NE(r.err.find("libcudart"), std::string::npos) << "the plug-in brings the runtime";
}

TEST(StartupTest, AMissingPluginIsOneLineNamingTheFlag) {
  for (const std::string args :
       {"train --device cuda --ranks 1 --model mlp:2x16 --steps 1",
        "characterize --device cuda --microbench gemm=64,allreduce=64KiB --ranks 1"}) {
    const CliResult r = run_shell("TANDEM_GPU_PLUGIN=/nonexistent/libtandem_gpu.so " +
                                  std::string(TANDEM_BINARY) + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
    // A build with GPU parts names the file it could not load; one without says so.
    EXPECT_TRUE(r.err.find("/nonexistent/libtandem_gpu.so") != std::string::npos ||
                r.err.find("built without") != std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace tandem::testing
