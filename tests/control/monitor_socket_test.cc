// SPDX-License-Identifier: GPL-2.0-or-later
// The QMP socket is never taken over: not by a second bexd, not by an export of the same daemon
// added over QMP; and stopping removes only the socket the daemon bound.

#include <gtest/gtest.h>

#include "tests/control/control_fixture.h"
#include "tests/support/unix_sockets.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

// A fresh client gets through capabilities negotiation and answers a query.
void ExpectMonitorAnswers(const std::string& socket) {
  QmpClient client(socket);
  ASSERT_TRUE(client.connected());
  client.Negotiate();
  json reply = client.Execute("query-version");
  EXPECT_EQ(Success(reply), "");
}

TEST_F(ControlTest, SecondDaemonOnALiveMonitorSocketIsRefused) {
  StartDaemon();
  const ino_t inode = InodeAt(socket_);
  RunResult second = RunBexd(
      {"--blockdev", "driver=null-co,node-name=other,size=1M", "--monitor", "path=" + socket_},
      std::chrono::seconds(30));
  EXPECT_EQ(second.exit_status, 1) << second.err;
  EXPECT_EQ(second.err, "bexd: error: monitor socket '" + socket_ +
                            "': a server is listening on it (another bexd, or another export or "
                            "monitor); stop it or choose another path\n");
  EXPECT_EQ(InodeAt(socket_), inode);
  ExpectMonitorAnswers(socket_);
}

// Added at run time, an export on the monitor's path is refused naming both, and the monitor
// keeps answering new clients.
TEST_F(ControlTest, BlockExportAddOnTheMonitorPathIsRefused) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  ASSERT_EQ(Success(client->Execute("blockdev-add", NullNode("null0"))), "");
  json reply =
      client->Execute("block-export-add", {{"type", "vhost-user-fs"},
                                           {"id", "vfs1"},
                                           {"node-name", "null0"},
                                           {"tag", "t"},
                                           {"addr", {{"type", "unix"}, {"path", socket_}}}});
  EXPECT_EQ(ErrorClass(reply), "GenericError") << reply;
  EXPECT_EQ(ErrorDesc(reply), "export 'vfs1': '" + socket_ + "' is already used by a QMP monitor");
  ExpectMonitorAnswers(socket_);
}

}  // namespace
}  // namespace bexd::testing
