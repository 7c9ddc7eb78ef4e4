// SPDX-License-Identifier: GPL-2.0-or-later
// A python client that frames and names its requests as QEMU's qemu.qmp library does (one JSON
// object per line, string ids, no newline after a command) drives a real bexd through a
// management script's calls; see qmp_python_client.py for what it checks.
#include <gtest/gtest.h>

#include "tests/control/control_fixture.h"
#include "tests/control/qsd_process.h"
#include "tests/support/run_command.h"

namespace bexd::testing {
namespace {

TEST_F(ControlTest, QemuQmpStyleClientWorks) {
  StartDaemon();
  const std::string second_mountpoint = dir_.File("pyexp");
  int status = -1;
  std::string output =
      RunCommand("python3 " BEXD_SOURCE_DIR "/tests/control/qmp_python_client.py '" + socket_ +
                     "' disk0 exp0 '" + second_mountpoint + "'",
                 &status);
  EXPECT_EQ(status, 0) << output << ReadFile(log_);
  EXPECT_EQ(output, "ok\n");
  EXPECT_FALSE(IsMounted(second_mountpoint));
}

// The same script against qemu-storage-daemon itself, so the client is known to expect what QSD
// sends and not only what bexd does.
TEST_F(ControlTest, QemuQmpStyleClientAgreesWithQsd) {
  const std::string second_mountpoint = dir_.File("pyexp");
  Qsd qsd({"--blockdev", "driver=file,node-name=disk0,filename=" + image_, "--export",
           "type=fuse,id=exp0,node-name=disk0,writable=on,mountpoint=" + mountpoint_},
          socket_);
  ASSERT_TRUE(qsd.started());
  ASSERT_TRUE(
      WaitFor([&] { return IsMounted(mountpoint_) && ::access(socket_.c_str(), F_OK) == 0; }));
  int status = -1;
  std::string output =
      RunCommand("python3 " BEXD_SOURCE_DIR "/tests/control/qmp_python_client.py '" + socket_ +
                     "' disk0 exp0 '" + second_mountpoint + "'",
                 &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "ok\n");
}

}  // namespace
}  // namespace bexd::testing
