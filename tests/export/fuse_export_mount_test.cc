// Mounting, unmounting and refusing bad mountpoints.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "export/fuse_export.h"
#include "export/start.h"
#include "tests/export/export_fixture.h"

namespace bexd::exp::testing {
namespace {

using MountTest = FuseExportTest;

TEST_F(MountTest, MountShowsTheNodeAndStopShowsTheFileAgain) {
  const std::string mountpoint = MakeMountpoint();
  Export* running = Start(FuseOptions(mountpoint, /*writable=*/false), OpenNullNode(64 << 20));
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->type(), "fuse");
  EXPECT_TRUE(IsFuseMounted(mountpoint));

  struct stat st;
  ASSERT_EQ(::stat(mountpoint.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 64 << 20);

  running->Stop();
  running->Stop();  // idempotent
  EXPECT_FALSE(IsFuseMounted(mountpoint));
  EXPECT_EQ(FileSize(mountpoint), sizeof(kOriginalContent) - 1);
}

}  // namespace
}  // namespace bexd::exp::testing
