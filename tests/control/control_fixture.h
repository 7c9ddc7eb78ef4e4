// SPDX-License-Identifier: GPL-2.0-or-later
// A real bexd with a QMP socket, a file node "disk0" (16 MiB) exported over FUSE as "exp0", in a
// directory of its own.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/cli/bexd_process.h"
#include "tests/control/qmp_client.h"

namespace bexd::testing {

class ControlTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kImageBytes = 16 << 20;

  void SetUp() override;
  void TearDown() override;
  // Starts bexd with the standard node and export plus `extra` options.
  void StartDaemon(const std::vector<std::string>& extra = {});
  std::unique_ptr<QmpClient> Connect();
  // Waits until `pidfile` holds the daemon's pid: bexd writes it once every export is up, just
  // after the mount appears, so it is the readiness signal for tests that use the pidfile.
  bool WaitForPidfile(const std::string& pidfile);

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  TempDir dir_;
  std::string image_;
  std::string mountpoint_;
  std::string socket_;
  std::string log_;
  std::unique_ptr<BexdDaemon> daemon_;
};

// {"error":{"class":...}} of a reply, or "" for a success.
std::string ErrorClass(const nlohmann::json& reply);
std::string ErrorDesc(const nlohmann::json& reply);
// "" for a successful reply, else the whole reply (to show in the failure message).
std::string Success(const nlohmann::json& reply);

// `length` bytes of pattern `seed`: neighbouring positions and seeds differ, so misplaced or stale
// data shows.
std::string Pattern(size_t length, uint32_t seed);

// block-export-add arguments: a writable FUSE export.
nlohmann::json FuseExport(const std::string& id, const std::string& node,
                          const std::string& mountpoint);
// blockdev-add arguments: a null-co node that reads zeroes.
nlohmann::json NullNode(const std::string& name, uint64_t size = 8 << 20);

}  // namespace bexd::testing
