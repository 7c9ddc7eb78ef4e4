// SPDX-License-Identifier: GPL-2.0-or-later
// A daemon at its thread limit (RLIMIT_NPROC, a pids cgroup), made so by a preloaded library
// whose pthread_create fails while a trigger file exists: a command that needs a new thread fails
// with an error, and a stop still drains and flushes. An outside audit had quit and SIGTERM end
// in std::terminate there (the watch for a second stop signal could not start), losing 16 MiB of
// acknowledged qcow2 writes, and blockdev-add of a qcow2 node and a vhost-user-fs export abort.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/control/control_fixture.h"
#include "tests/support/qemu_check.h"
#include "tests/support/run_command.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

class ThreadLimitTest : public ControlTest,
                        public ::testing::WithParamInterface<std::string /* quit or SIGTERM */> {};

TEST_P(ThreadLimitTest, CommandsFailAndTheStopStillFlushes) {
  int status = 0;
  const std::string qcow2 = Path("disk.qcow2");
  const std::string qcow2_mount = Path("disk.mnt");
  const std::string trigger = Path("no-more-threads");
  RunCommand("qemu-img create -q -f qcow2 " + qcow2 + " 64M 2>&1", &status);
  ASSERT_EQ(status, 0);
  ::close(::open(qcow2_mount.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  // Only the daemon gets the library: the variables are set around its fork.
  ::setenv("LD_PRELOAD", BEXD_NO_THREADS_PRELOAD, 1);
  ::setenv("BEXD_NO_THREADS_TRIGGER", trigger.c_str(), 1);
  StartDaemon({"--blockdev", "driver=file,node-name=qfile,filename=" + qcow2, "--blockdev",
               "driver=qcow2,node-name=q,file=qfile", "--export",
               "type=fuse,id=qexp,node-name=q,writable=on,mountpoint=" + qcow2_mount});
  ::unsetenv("LD_PRELOAD");
  ::unsetenv("BEXD_NO_THREADS_TRIGGER");
  ASSERT_TRUE(WaitFor([&] { return IsMounted(qcow2_mount); })) << ReadFile(log_);
  auto client = Connect();
  client->Negotiate();
  // Acknowledged writes whose allocations the qcow2 node still caches: only the stop's flush
  // writes them back.
  const std::string data = Pattern(16 << 20, 3);
  int fd = ::open(qcow2_mount.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(::close(fd), 0);

  ::close(::open(trigger.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  const std::string other = Path("other.qcow2");
  RunCommand("qemu-img create -q -f qcow2 " + other + " 1M 2>&1", &status);
  ASSERT_EQ(status, 0);
  json reply = client->Execute(
      "blockdev-add", {{"driver", "qcow2"},
                       {"node-name", "q2"},
                       {"file", {{"driver", "file"}, {"filename", other}, {"aio", "native"}}}});
  EXPECT_EQ(ErrorClass(reply), "GenericError") << reply;
  ASSERT_EQ(Success(client->Execute("blockdev-add", NullNode("null0"))), "");
  reply = client->Execute("block-export-add",
                          {{"type", "vhost-user-fs"},
                           {"id", "vfs"},
                           {"node-name", "null0"},
                           {"tag", "t"},
                           {"addr", {{"type", "unix"}, {"path", Path("vfs.sock")}}}});
  EXPECT_EQ(ErrorClass(reply), "GenericError") << reply;
  ASSERT_TRUE(daemon_->running()) << ReadFile(log_);

  if (GetParam() == "quit") {
    EXPECT_EQ(Success(client->Execute("quit")), "");
    EXPECT_EQ(daemon_->Wait(), 0) << ReadFile(log_);
  } else {
    EXPECT_EQ(daemon_->Stop(SIGTERM), 0) << ReadFile(log_);
  }
  EXPECT_FALSE(IsMounted(qcow2_mount));
  EXPECT_EQ(QemuCheck(qcow2).exit_status, 0) << QemuCheck(qcow2).output;
  const std::string raw = Path("read-back.raw");
  RunCommand("qemu-img convert -O raw " + qcow2 + " " + raw + " 2>&1", &status);
  ASSERT_EQ(status, 0);
  EXPECT_TRUE(ReadFile(raw).substr(0, data.size()) == data) << "acknowledged writes were lost";
}

INSTANTIATE_TEST_SUITE_P(Stops, ThreadLimitTest, ::testing::Values("quit", "SIGTERM"));

}  // namespace
}  // namespace bexd::testing
