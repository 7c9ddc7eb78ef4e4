// SPDX-License-Identifier: GPL-2.0-or-later
// QSD's other ways to reach the monitor: QMP over the daemon's stdin and stdout (--chardev stdio,
// as QEMU's iotests drive QSD), a listening socket passed as a descriptor (--chardev socket,fd=N,
// the QSD manual's Python example), and the short boolean forms QEMU still accepts.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

TEST_F(ControlTest, StdioMonitorServesQmpOverStdinAndStdout) {
  int to_bexd[2], from_bexd[2];
  ASSERT_EQ(::pipe2(to_bexd, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(from_bexd, O_CLOEXEC), 0);
  daemon_ = std::make_unique<BexdDaemon>(
      std::vector<std::string>{
          "--blockdev", "driver=file,node-name=disk0,filename=" + image_, "--export",
          "type=fuse,id=exp0,node-name=disk0,writable=on,mountpoint=" + mountpoint_, "--chardev",
          "stdio,id=m0", "--monitor", "id=mon0,chardev=m0"},
      log_, to_bexd[0], from_bexd[1]);
  ::close(to_bexd[0]);
  ::close(from_bexd[1]);
  QmpClient client(from_bexd[0], to_bexd[1]);
  json greeting = client.Negotiate();
  ASSERT_TRUE(greeting.contains("QMP")) << greeting << ReadFile(log_);
  EXPECT_EQ(client.Execute("query-block-exports")["return"][0]["id"], "exp0");
  ASSERT_TRUE(IsMounted(mountpoint_));
  client.SendRaw(R"({"execute": "quit"})");
  EXPECT_TRUE(client.WaitEvent("SHUTDOWN").has_value());
  std::optional<json> deleted = client.WaitEvent("BLOCK_EXPORT_DELETED");
  ASSERT_TRUE(deleted.has_value());
  EXPECT_EQ((*deleted)["data"], json({{"id", "exp0"}}));
  EXPECT_EQ(client.ReadReply(), json({{"return", json::object()}}));
  EXPECT_EQ(daemon_->Wait(), 0) << ReadFile(log_);
  // Nothing but QMP went to stdout: the log lines are on stderr.
  EXPECT_TRUE(client.WaitClosed());
}

// As QSD: the end of stdin closes that monitor, not the daemon.
TEST_F(ControlTest, EndOfStdinLeavesTheDaemonRunning) {
  int to_bexd[2], from_bexd[2];
  ASSERT_EQ(::pipe2(to_bexd, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(from_bexd, O_CLOEXEC), 0);
  daemon_ = std::make_unique<BexdDaemon>(
      std::vector<std::string>{"--blockdev", "driver=file,node-name=disk0,filename=" + image_,
                               "--chardev", "stdio,id=m0", "--monitor", "chardev=m0", "--monitor",
                               "path=" + socket_},
      log_, to_bexd[0], from_bexd[1]);
  ::close(to_bexd[0]);
  ::close(from_bexd[1]);
  {
    QmpClient stdio(from_bexd[0], to_bexd[1]);
    ASSERT_TRUE(stdio.Negotiate().contains("QMP")) << ReadFile(log_);
  }  // closes both pipe ends: stdin reaches its end
  auto client = Connect();
  client->Negotiate();
  EXPECT_EQ(client->Execute("query-named-block-nodes")["return"][0]["node-name"], "disk0");
  EXPECT_TRUE(daemon_->running());
}

// A listening socket the caller made and passed (not close-on-exec), as the QSD manual does.
TEST_F(ControlTest, PassedListeningSocketServesQmp) {
  const std::string path = Path("passed.sock");
  int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);  // inherited by bexd
  ASSERT_GE(listener, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  StartDaemon({"--chardev", "socket,fd=" + std::to_string(listener) + ",server=on,id=m1",
               "--monitor", "chardev=m1"});
  ::close(listener);
  QmpClient client(path);
  ASSERT_TRUE(client.connected());
  client.Negotiate();
  EXPECT_EQ(client.Execute("query-block-exports")["return"][0]["id"], "exp0");
  // The daemon did not bind the path, so it leaves the file to its owner.
  EXPECT_EQ(daemon_->Stop(), 0) << ReadFile(log_);
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
}

TEST_F(ControlTest, PassedDescriptorMustBeAListeningUnixSocket) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);  // inherited by bexd
  RunResult result =
      RunBexd({"--chardev", "socket,fd=" + std::to_string(pipe_fds[0]) + ",server=on,id=m1",
               "--monitor", "chardev=m1"});
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_NE(result.err.find("monitor socket fd=" + std::to_string(pipe_fds[0]) + ": not a socket"),
            std::string::npos)
      << result.err;
  EXPECT_EQ(CountLines(result.err), 1) << result.err;
}

TEST_F(ControlTest, ShortBooleansWorkWithQemusWarning) {
  const std::string path = Path("short.sock");
  StartDaemon(
      {"--chardev", "socket,id=m2,path=" + path + ",server,nowait", "--monitor", "chardev=m2"});
  QmpClient client(path);
  ASSERT_TRUE(client.connected()) << ReadFile(log_);
  client.Negotiate();
  EXPECT_EQ(Success(client.Execute("query-version")), "");
  const std::string log = ReadFile(log_);
  EXPECT_NE(log.find("short-form boolean option 'server' deprecated"), std::string::npos) << log;
  EXPECT_NE(log.find("Please use wait=off instead"), std::string::npos) << log;
}

}  // namespace
}  // namespace bexd::testing
