// SPDX-License-Identifier: GPL-2.0-or-later
// io-uring=on refuses to start with one line that names the kernel's switch; here against switch
// files of the test's own, since flipping the real one would change every other test's kernel.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "export/fuse_uring/kernel_support.h"
#include "tests/support/scratch_dir.h"

namespace bexd::exports {
namespace {

using bexd::testing::ScratchDir;

TEST(FuseUringSupportTest, SwitchOffIsReportedWithTheSwitchAndHowToTurnItOn) {
  ScratchDir scratch;
  const std::string path = scratch.path() + "/enable_uring";
  std::ofstream(path) << "N\n";
  const FuseUringSupport support = ReadFuseUringSupport(path);
  EXPECT_FALSE(support.enabled);
  EXPECT_EQ(support.why_not, "FUSE over io_uring is disabled: " + path + " is N");
  EXPECT_EQ(support.remedy, "enable it as root with 'echo Y > " + path + "'");
}

TEST(FuseUringSupportTest, MissingSwitchMeansTheKernelHasNoFuseOverIoUring) {
  ScratchDir scratch;
  const FuseUringSupport support = ReadFuseUringSupport(scratch.path() + "/missing");
  EXPECT_FALSE(support.enabled);
  EXPECT_NE(support.why_not.find("this kernel has no FUSE over io_uring"), std::string::npos);
  EXPECT_NE(support.remedy.find("CONFIG_FUSE_IO_URING"), std::string::npos);
}

TEST(FuseUringSupportTest, SwitchOnIsEnabled) {
  ScratchDir scratch;
  const std::string path = scratch.path() + "/enable_uring";
  std::ofstream(path) << "Y\n";
  EXPECT_TRUE(ReadFuseUringSupport(path).enabled);
}

TEST(FuseUringSupportTest, PossibleCpusCoverTheOnlineOnes) {
  absl::StatusOr<uint32_t> possible = PossibleCpuCount();
  ASSERT_TRUE(possible.ok()) << possible.status();
  EXPECT_GE(*possible, static_cast<uint32_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace
}  // namespace bexd::exports
