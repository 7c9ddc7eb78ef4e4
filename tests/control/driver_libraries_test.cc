// SPDX-License-Identifier: GPL-2.0-or-later
// The rbd and nbd drivers' client libraries are loaded by the first node of their driver, not at
// start-up (block/shared_library.h): a daemon without such nodes maps none of them.
#include <gtest/gtest.h>

#include <string>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

bool Maps(pid_t pid, const std::string& library) {
  return ReadFile("/proc/" + std::to_string(pid) + "/maps").find("/" + library) !=
         std::string::npos;
}

TEST_F(ControlTest, RemoteDriverLibrariesLoadWithTheirFirstNode) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  const pid_t pid = daemon_->pid();
  for (const char* library : {"librbd.so", "librados.so", "libceph-common.so", "libnbd.so"}) {
    EXPECT_FALSE(Maps(pid, library)) << library << " is mapped by a daemon with a file node";
  }

  // Both opens fail after their library is loaded: Ceph's configuration file and the NBD
  // server's socket do not exist.
  json reply = client->Execute("blockdev-add", {{"driver", "rbd"},
                                                {"node-name", "rbd0"},
                                                {"pool", "rbd"},
                                                {"image", "disk"},
                                                {"conf", Path("missing.conf")}});
  EXPECT_EQ(ErrorClass(reply), "GenericError") << reply.dump();
  EXPECT_NE(ErrorDesc(reply).find("rbd0"), std::string::npos) << reply.dump();
  EXPECT_TRUE(Maps(pid, "librbd.so.1"));
  EXPECT_TRUE(Maps(pid, "librados.so.2"));
  EXPECT_FALSE(Maps(pid, "libnbd.so"));

  reply = client->Execute("blockdev-add",
                          {{"driver", "nbd"},
                           {"node-name", "nbd0"},
                           {"server", {{"type", "unix"}, {"path", Path("missing.sock")}}}});
  EXPECT_EQ(ErrorClass(reply), "GenericError") << reply.dump();
  EXPECT_NE(ErrorDesc(reply).find("nbd0"), std::string::npos) << reply.dump();
  EXPECT_TRUE(Maps(pid, "libnbd.so.0"));

  // The daemon still serves: its file node and export are untouched.
  EXPECT_EQ(Success(client->Execute("query-block-exports")), "");
  EXPECT_TRUE(daemon_->running());
}

}  // namespace
}  // namespace bexd::testing
