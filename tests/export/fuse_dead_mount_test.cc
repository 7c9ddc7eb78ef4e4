// SPDX-License-Identifier: GPL-2.0-or-later
// A FUSE export started on a mountpoint that holds other FUSE mounts: dead bexd mounts (the
// connection answers ENOTCONN, as after a SIGKILL) are detached; a dead mount of another file
// system and a bexd mount whose server does not answer are left alone and refused.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "export/start.h"
#include "tests/export/export_fixture.h"
#include "util/unique_fd.h"

namespace bexd::exports::testing {
namespace {

class DeadMountTest : public FuseExportTest {
 protected:
  void TearDown() override {
    FuseExportTest::TearDown();
    // The base detaches one mount per mountpoint; a failed test may leave several stacked.
    for (const std::string& path : mountpoints_) {
      while (IsFuseMounted(path) && ::umount2(path.c_str(), MNT_DETACH) == 0) {
      }
    }
  }
};

// Mounts a FUSE file system of `type` on the regular file `path` over a connection the test
// holds and never serves. Closing the returned descriptor aborts the connection, as the kernel
// does when a server is killed.
util::UniqueFd MountUnserved(const std::string& path, const std::string& type) {
  util::UniqueFd fd(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  EXPECT_TRUE(fd) << std::strerror(errno);
  const std::string options =
      "fd=" + std::to_string(fd.get()) + ",rootmode=100000,user_id=0,group_id=0";
  EXPECT_EQ(
      ::mount("test-server", path.c_str(), type.c_str(), MS_NOSUID | MS_NODEV, options.c_str()), 0)
      << type << " on " << path << ": " << std::strerror(errno);
  return fd;
}

int StatErrno(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? 0 : errno;
}

// Starting an export on `mountpoint` is refused because of the FUSE mount of `type` there, which
// stays mounted.
void ExpectRefusedAndStillMounted(const std::string& mountpoint, const std::string& type) {
  absl::StatusOr<std::unique_ptr<Export>> refused =
      StartExport(FuseOptions(mountpoint, false), OpenNullNode(1 << 20));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "export 'export0': mountpoint '" + mountpoint +
                                            "' is already a FUSE mount (" + type +
                                            "); unmount it first");
  EXPECT_TRUE(IsFuseMounted(mountpoint));
}

TEST_F(DeadMountTest, DeadBexdMountsAreDetachedAndTheExportServes) {
  const std::string mountpoint = MakeMountpoint();
  MountUnserved(mountpoint, "fuse.bexd");  // closed at once: dead
  MountUnserved(mountpoint, "fuse.bexd");  // a second crash on top of the first
  ASSERT_TRUE(IsFuseMounted(mountpoint));
  ASSERT_EQ(StatErrno(mountpoint), ENOTCONN);

  Export* running = Start(FuseOptions(mountpoint, /*writable=*/false), OpenNullNode(3 << 20));
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(FileSize(mountpoint), uint64_t{3} << 20);
  running->Stop();
  EXPECT_FALSE(IsFuseMounted(mountpoint));
  EXPECT_EQ(FileSize(mountpoint), sizeof(kOriginalContent) - 1);
}

TEST_F(DeadMountTest, DeadMountOfAnotherFileSystemStaysRefused) {
  const std::string mountpoint = MakeMountpoint();
  MountUnserved(mountpoint, "fuse.other");
  ASSERT_EQ(StatErrno(mountpoint), ENOTCONN);

  ExpectRefusedAndStillMounted(mountpoint, "fuse.other");
  ASSERT_EQ(::umount2(mountpoint.c_str(), MNT_DETACH), 0);
}

// The server holds its connection but does not answer: the probe gives up (after 10 s) and the
// mount counts as alive; starting neither hangs nor detaches it.
TEST_F(DeadMountTest, BexdMountThatDoesNotAnswerStaysRefused) {
  const std::string mountpoint = MakeMountpoint();
  util::UniqueFd connection = MountUnserved(mountpoint, "fuse.bexd");

  ExpectRefusedAndStillMounted(mountpoint, "fuse.bexd");
  connection.Reset();
  ASSERT_EQ(::umount2(mountpoint.c_str(), MNT_DETACH), 0);
}

}  // namespace
}  // namespace bexd::exports::testing
