// SPDX-License-Identifier: GPL-2.0-or-later
// --pidfile: locked for the daemon's life, empty until the daemon serves, never a stale pid.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/daemon/pidfile.h"
#include "tests/cli/bexd_process.h"

namespace bexd::cli {
namespace {

std::string Content(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A dead daemon's pid must not be read as the new daemon's while it starts.
TEST(PidfileTest, StalePidIsClearedOnAcquireAndThePidWrittenWhole) {
  bexd::testing::TempDir dir;
  const std::string path = dir.path() + "/bexd.pid";
  std::ofstream(path) << "999999\n";
  absl::StatusOr<std::unique_ptr<Pidfile>> pidfile = Pidfile::Acquire(path);
  ASSERT_TRUE(pidfile.ok()) << pidfile.status();
  EXPECT_EQ(Content(path), "");
  ASSERT_TRUE((*pidfile)->WritePid().ok());
  EXPECT_EQ(Content(path), std::to_string(::getpid()) + "\n");
  pidfile->reset();
  EXPECT_FALSE(std::filesystem::exists(path));
}

// flock belongs to the open file, so a second Acquire fails even from the same process.
TEST(PidfileTest, SecondAcquireFailsNamingTheHolderAndLeavesTheFile) {
  bexd::testing::TempDir dir;
  const std::string path = dir.path() + "/bexd.pid";
  absl::StatusOr<std::unique_ptr<Pidfile>> first = Pidfile::Acquire(path);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->WritePid().ok());
  absl::StatusOr<std::unique_ptr<Pidfile>> second = Pidfile::Acquire(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(), "--pidfile '" + path +
                                           "' is locked by a running bexd (pid " +
                                           std::to_string(::getpid()) + ")");
  EXPECT_EQ(Content(path), std::to_string(::getpid()) + "\n");
}

// A link planted at the path (in a world-writable directory, say) must not make bexd truncate
// or lock the file it points at.
TEST(PidfileTest, SymlinkIsRefusedAndItsTargetUntouched) {
  bexd::testing::TempDir dir;
  const std::string target = dir.path() + "/precious";
  std::ofstream(target) << "precious data\n";
  const std::string path = dir.path() + "/bexd.pid";
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0);
  absl::StatusOr<std::unique_ptr<Pidfile>> pidfile = Pidfile::Acquire(path);
  ASSERT_FALSE(pidfile.ok());
  EXPECT_EQ(pidfile.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pidfile.status().message(),
            "--pidfile '" + path + "': is a symbolic link; refusing to follow it");
  EXPECT_EQ(Content(target), "precious data\n");
  // Also a dangling link: following it would create the target.
  const std::string dangling = dir.path() + "/dangling.pid";
  ASSERT_EQ(::symlink((dir.path() + "/created").c_str(), dangling.c_str()), 0);
  EXPECT_FALSE(Pidfile::Acquire(dangling).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/created"));
}

TEST(PidfileTest, FifoAndDirectoryAreRefused) {
  bexd::testing::TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<std::unique_ptr<Pidfile>> pidfile = Pidfile::Acquire(fifo);
  ASSERT_FALSE(pidfile.ok());
  EXPECT_EQ(pidfile.status().message(), "--pidfile '" + fifo + "': is not a regular file");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));

  const std::string directory = dir.path() + "/dir";
  ASSERT_EQ(::mkdir(directory.c_str(), 0700), 0);
  pidfile = Pidfile::Acquire(directory);
  ASSERT_FALSE(pidfile.ok());
  EXPECT_EQ(pidfile.status().message(), "--pidfile '" + directory + "': is not a regular file");
  EXPECT_TRUE(std::filesystem::is_directory(directory));
}

// Only an empty file or a pid may be taken over; anything else is someone's file at the wrong
// path and is left as it is.
TEST(PidfileTest, FileHoldingSomethingElseIsRefusedAndUntouched) {
  bexd::testing::TempDir dir;
  for (const std::string& content : std::vector<std::string>{
           "not a pid\n", "12 34\n", "1234\nmore\n", "-1\n", std::string(4096, '7')}) {
    const std::string path = dir.path() + "/bexd.pid";
    std::ofstream(path) << content;
    absl::StatusOr<std::unique_ptr<Pidfile>> pidfile = Pidfile::Acquire(path);
    ASSERT_FALSE(pidfile.ok()) << content;
    EXPECT_EQ(
        pidfile.status().message(),
        "--pidfile '" + path + "': holds something other than a pid; refusing to overwrite it");
    EXPECT_EQ(Content(path), content);
  }
}

TEST(PidfileTest, EmptyFileOrAPidIsTakenOver) {
  bexd::testing::TempDir dir;
  for (const std::string& content : std::vector<std::string>{"", "4242", "4242\n"}) {
    const std::string path = dir.path() + "/bexd.pid";
    std::ofstream(path) << content;
    absl::StatusOr<std::unique_ptr<Pidfile>> pidfile = Pidfile::Acquire(path);
    ASSERT_TRUE(pidfile.ok()) << pidfile.status();
    EXPECT_EQ(Content(path), "");
  }
}

}  // namespace
}  // namespace bexd::cli
