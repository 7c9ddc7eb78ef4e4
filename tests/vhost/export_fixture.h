// SPDX-License-Identifier: GPL-2.0-or-later
// A vhost-user-fs export on a scratch image, started in-process, for the frontend tests.
#pragma once

#include <gtest/gtest.h>
#include <linux/fuse.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "export/export.h"
#include "vhost_frontend/frontend.h"

namespace bexd::test::vhost {

class VhostExportTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kImageSize = 4 << 20;

  void SetUp() override;
  void TearDown() override;

  // Starts the export (file node on a patterned image) with `request_queues` queues.
  // `poll_max_ns`: the export's poll-max-ns; nullopt keeps its default.
  void StartExport(uint32_t request_queues, bool writable = true,
                   std::optional<uint64_t> poll_max_ns = std::nullopt);
  FrontendOptions Options(uint32_t request_queues = 1) const;
  // Connects and runs INIT; fails the test on error.
  std::unique_ptr<Frontend> ConnectAndInit(const FrontendOptions& options);
  // LOOKUP of the image in the root directory; returns its node id.
  uint64_t LookupImage(Frontend& frontend, uint32_t ring = 1);
  // OPEN of the image; returns the file handle.
  uint64_t OpenImage(Frontend& frontend, uint64_t node_id, uint32_t ring = 1);

  std::vector<unsigned char> ReadBacking(uint64_t offset, size_t length) const;

  std::string dir_;
  std::string image_;
  std::string socket_;
  std::vector<unsigned char> pattern_;  // the image's initial content
  std::unique_ptr<exports::Export> export_;
};

}  // namespace bexd::test::vhost
