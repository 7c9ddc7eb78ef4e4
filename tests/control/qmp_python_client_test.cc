// SPDX-License-Identifier: GPL-2.0-or-later
// A python client that frames and names its requests as QEMU's qemu.qmp library does (one JSON
// object per line, string ids, no newline after a command) drives a real bexd through a
// management script's calls; see qmp_python_client.py for what it checks.
#include <gtest/gtest.h>

#include "tests/control/control_fixture.h"
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

}  // namespace
}  // namespace bexd::testing
