// --pidfile: locked for the daemon's life, empty until the daemon serves, never a stale pid.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/pidfile.h"
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

}  // namespace
}  // namespace bexd::cli
