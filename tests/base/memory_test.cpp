// What the memory check reads of the cgroups: v1's memory controller and v2, each level up
// its hierarchy, the tightest, against a fixture laid out like /sys/fs/cgroup.
#include "core/memory.h"

#include <gtest/gtest.h>

#include <fstream>

#include "cli/cli_support.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text << "\n";
}

constexpr std::int64_t kMiB = 1 << 20;

TEST(CgroupHeadroomTest, CgroupV1IsReadUpItsHierarchy) {
  testing::TempDir root;
  // A batch job's 600 MiB limit one level up; the step's own level is unlimited (the
  // kernel's page-rounded LLONG_MAX), as container runtimes and Slurm set them.
  put(root.path() / "memory" / "job" / "memory.limit_in_bytes", std::to_string(600 * kMiB));
  put(root.path() / "memory" / "job" / "memory.usage_in_bytes", std::to_string(100 * kMiB));
  put(root.path() / "memory" / "job" / "step" / "memory.limit_in_bytes", "9223372036854771712");
  put(root.path() / "memory" / "job" / "step" / "memory.usage_in_bytes", std::to_string(40 * kMiB));
  put(root.path() / "memory" / "memory.limit_in_bytes", "9223372036854771712");
  put(root.path() / "memory" / "memory.usage_in_bytes", std::to_string(4000 * kMiB));
  const CgroupHeadroom h = cgroup_headroom("5:memory:/job/step\n3:cpu:/\n0::/\n", root.path());
  EXPECT_EQ(h.bytes, 500 * kMiB);
  EXPECT_STREQ(h.source, "cgroup v1 memory.limit_in_bytes");
  // The memory controller shares its hierarchy with others ("4:cpu,memory:/...").
  EXPECT_EQ(cgroup_headroom("4:cpuacct,memory:/job/step\n", root.path()).bytes, 500 * kMiB);
}

TEST(CgroupHeadroomTest, CgroupV2TakesTheTightestLevelAndBothVersionsTheLeast) {
  testing::TempDir root;
  put(root.path() / "a" / "memory.max", std::to_string(1024 * kMiB));
  put(root.path() / "a" / "memory.current", std::to_string(200 * kMiB));
  put(root.path() / "a" / "b" / "memory.max", "max");
  put(root.path() / "a" / "b" / "memory.current", std::to_string(100 * kMiB));
  const CgroupHeadroom v2 = cgroup_headroom("0::/a/b\n", root.path());
  EXPECT_EQ(v2.bytes, 824 * kMiB);
  EXPECT_STREQ(v2.source, "cgroup v2 memory.max");
  // A level over its limit leaves nothing.
  put(root.path() / "a" / "b" / "memory.max", std::to_string(50 * kMiB));
  EXPECT_EQ(cgroup_headroom("0::/a/b\n", root.path()).bytes, 0);
  // A hybrid system: v1's memory controller and v2 both; the least wins.
  put(root.path() / "memory" / "j" / "memory.limit_in_bytes", std::to_string(10 * kMiB));
  put(root.path() / "memory" / "j" / "memory.usage_in_bytes", std::to_string(4 * kMiB));
  EXPECT_EQ(cgroup_headroom("4:memory:/j\n0::/a/b\n", root.path()).bytes, 0);
  put(root.path() / "a" / "b" / "memory.max", "max");
  const CgroupHeadroom both = cgroup_headroom("4:memory:/j\n0::/a/b\n", root.path());
  EXPECT_EQ(both.bytes, 6 * kMiB);
  EXPECT_STREQ(both.source, "cgroup v1 memory.limit_in_bytes");
}

TEST(CgroupHeadroomTest, NothingReadableMeansNoLimit) {
  testing::TempDir root;
  EXPECT_EQ(cgroup_headroom("", root.path()).bytes, -1);
  EXPECT_EQ(cgroup_headroom("0::/\n4:memory:/x\n", root.path()).bytes, -1);
  EXPECT_EQ(cgroup_headroom("garbage\n::\n", root.path()).bytes, -1);
}

}  // namespace
}  // namespace tandem
