// SPDX-License-Identifier: GPL-2.0-or-later
// Requests a client can repeat at will must not flood the log: each path that logs a refused or
// failed request is flooded with 100,000 requests and the lines it wrote are counted.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuse/core_harness.h"
#include "tests/fuse/image_file.h"
#include "util/log.h"
#include "util/rate_limit.h"

namespace bexd::fuse::testing {
namespace {

constexpr int kFlood = 100000;
constexpr uint64_t kNullSize = 8 << 20;
constexpr uint64_t kHuge = uint64_t{1} << 50;

// The null driver cannot be resized: the core refuses every size change up front (EPERM).
block::BlockdevOptions NullNode() {
  block::BlockdevOptions options;
  options.node_name = "null0";
  options.driver = block::NullOptions{kNullSize, /*read_zeroes=*/true, 0};
  return options;
}

size_t CountLines(const std::string& log, const std::string& text) {
  size_t lines = 0;
  for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++lines;
  return lines;
}

class LogFloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_level_ = log::GetLevel();
    log::SetLevel(log::Level::kWarn);
  }
  void TearDown() override { log::SetLevel(saved_level_); }

  // Sends `request` kFlood times, each answered with `error`, and returns how many log lines
  // contain `text`. A site writes at most a burst of lines per interval; the flood may straddle
  // interval boundaries (another test in this binary may have opened the site's interval), so
  // the bound allows one burst per interval the flood touched. Before rate limiting, every
  // request wrote a line.
  void ExpectFloodBounded(CoreHarness& harness, const std::vector<uint8_t>& request, int error,
                          const std::string& text) {
    const Layout small{.out_capacity = 4096};  // no 1 MiB reply buffer per request
    int wrong_answers = 0;
    const auto start = std::chrono::steady_clock::now();
    ::testing::internal::CaptureStderr();
    for (int i = 0; i < kFlood; ++i) {
      if (harness.Run(request, small).error() != error) ++wrong_answers;
    }
    const std::string log = ::testing::internal::GetCapturedStderr();
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(wrong_answers, 0);
    const int64_t intervals = 2 + elapsed / log::RateLimit::kDefaultInterval;
    const size_t lines = CountLines(log, text);
    RecordProperty("log_lines", static_cast<int>(lines));
    EXPECT_LE(lines, static_cast<size_t>(log::RateLimit::kDefaultBurst * intervals))
        << log.substr(0, 2000);
  }

  log::Level saved_level_ = log::Level::kWarn;
};

// A file the kernel refuses to resize: the core tries, and every size change fails with EPERM.
class FailedResizeFloodTest : public LogFloodTest {
 protected:
  FailedResizeFloodTest() : file_(kNullSize), harness_(FileNode(file_.path()), Writable(true)) {
    harness_.Init();
  }

  SealedFile file_;
  CoreHarness harness_;
};

TEST_F(FailedResizeFloodTest, FailedSetattrSizeChanges) {
  ExpectFloodBounded(harness_, SetattrSizeRequest(1, kHuge), EPERM,
                     "FUSE SETATTR: resizing node 'file0'");
}

TEST_F(FailedResizeFloodTest, FailedGrowingWrites) {
  ExpectFloodBounded(harness_, WriteRequest(1, kNullSize, std::vector<uint8_t>(512, 1)), EPERM,
                     "FUSE WRITE: resizing node 'file0'");
}

TEST_F(FailedResizeFloodTest, FailedGrowingFallocates) {
  ExpectFloodBounded(harness_, FallocateRequest(1, kHuge, 4096, 0), EPERM,
                     "FUSE FALLOCATE: resizing node 'file0'");
}

TEST_F(FailedResizeFloodTest, FailedTruncatingOpens) {
  ExpectFloodBounded(harness_, OpenRequest(1, O_WRONLY | O_TRUNC), EPERM,
                     "FUSE OPEN: resizing node 'file0' to 0 bytes failed");
}

TEST_F(LogFloodTest, RefusedSetattrSizeChanges) {
  CoreHarness harness(NullNode(), Writable(/*growable=*/false, /*resize_needs_growable=*/true));
  harness.Init();
  ExpectFloodBounded(harness, SetattrSizeRequest(1, kHuge), EPERM,
                     "FUSE SETATTR: refused to resize node 'null0'");
}

TEST_F(LogFloodTest, SetattrSizeChangesOfANodeThatCannotResize) {
  CoreHarness harness(NullNode(), Writable(/*growable=*/false));
  harness.Init();
  ExpectFloodBounded(harness, SetattrSizeRequest(1, kHuge), EPERM,
                     "FUSE SETATTR: refused to resize node 'null0' from 8388608 to "
                     "1125899906842624 bytes: the node cannot be resized");
}

TEST_F(LogFloodTest, RefusedInits) {
  CoreHarness harness(NullNode(), Writable(/*growable=*/false));
  ExpectFloodBounded(harness, InitRequest(7, 22), EPROTO, "FUSE INIT: kernel protocol 7.22");
}

}  // namespace
}  // namespace bexd::fuse::testing
