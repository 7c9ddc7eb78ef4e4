// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/block/qcow2_fixture.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "block/graph.h"
#include "block/qcow2/node.h"
#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"
#include "tests/support/run_command.h"

namespace bexd::block::testing {

std::string RunCommand(const std::string& command, int expected_status) {
  int exit_status = -1;
  std::string output = bexd::testing::RunCommand(command, &exit_status);
  EXPECT_EQ(exit_status, expected_status) << command << "\n" << output;
  return output;
}

absl::StatusOr<std::shared_ptr<BlockNode>> OpenImage(const std::string& path, bool read_only,
                                                     const ImageOptions& options) {
  FileOptions file;
  file.filename = path;
  file.aio = options.aio;
  file.cache_direct = options.direct;
  file.discard = options.qcow2.discard;
  BlockdevOptions file_node;
  file_node.read_only = read_only;
  file_node.driver = file;
  BlockdevOptions image;
  image.node_name = "fmt";
  image.read_only = read_only;
  image.driver = options.qcow2;
  image.file = ChildRef{.kind = ChildRef::Kind::kInline,
                        .options = std::make_shared<BlockdevOptions>(file_node)};
  if (!options.open_backing) image.backing = ChildRef{.kind = ChildRef::Kind::kNull};
  // The node keeps its children open after the graph goes.
  BlockGraph graph;
  absl::Status added = graph.Add(image);
  if (!added.ok()) return added;
  return graph.Find(image.node_name)->node;
}

std::shared_ptr<BlockNode> OpenImageOrFail(const std::string& path, bool read_only,
                                           const ImageOptions& options) {
  auto node = OpenImage(path, read_only, options);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : nullptr;
}

std::vector<unsigned char> ReadAll(BlockNode& node, uint64_t chunk) {
  std::unique_ptr<IoQueue> queue = MakeQueue(node);
  std::vector<unsigned char> data(node.size());
  if (queue == nullptr) return data;
  for (uint64_t offset = 0; offset < data.size(); offset += chunk) {
    uint64_t length = std::min<uint64_t>(chunk, data.size() - offset);
    int64_t result = ReadAt(*queue, data.data() + offset, length, offset);
    EXPECT_EQ(result, static_cast<int64_t>(length)) << "read at " << offset;
    if (result != static_cast<int64_t>(length)) break;
  }
  return data;
}

std::vector<unsigned char> ReadWithDepth(BlockNode& node, uint64_t chunk, int depth) {
  std::unique_ptr<IoQueue> queue = MakeQueue(node);
  std::vector<unsigned char> data(node.size());
  if (queue == nullptr) return data;
  std::vector<IoRequest> requests(depth);
  std::vector<Outcome> outcomes(depth);
  std::vector<struct iovec> iovs(depth);
  std::vector<bool> busy(depth, false);
  uint64_t next = 0;
  int in_flight = 0;
  while (next < data.size() || in_flight > 0) {
    for (int slot = 0; slot < depth; ++slot) {
      if (busy[slot] && outcomes[slot].done) {
        EXPECT_EQ(outcomes[slot].result, static_cast<int64_t>(requests[slot].length))
            << "read at " << requests[slot].offset;
        busy[slot] = false;
        --in_flight;
      }
      if (!busy[slot] && next < data.size()) {
        uint64_t length = std::min<uint64_t>(chunk, data.size() - next);
        iovs[slot] = {data.data() + next, length};
        outcomes[slot] = Outcome();
        Prepare(&requests[slot], &outcomes[slot], IoOp::kRead, next, length, &iovs[slot], 1);
        busy[slot] = true;
        ++in_flight;
        next += length;
        queue->Submit(&requests[slot]);
      }
    }
    queue->Poll();
    if (queue->in_flight() > 0) {
      struct pollfd pfd = {queue->event_fd(), POLLIN, 0};
      poll(&pfd, 1, 100);
      queue->Poll();
    }
  }
  EXPECT_TRUE(WaitIdle(*queue));
  return data;
}

std::vector<unsigned char> QemuContents(const std::string& image, const ScratchDir& dir) {
  std::string raw = dir.path() + "/qemu-contents.raw";
  RunCommand("qemu-img convert -U -O raw '" + image + "' '" + raw + "'");
  std::vector<unsigned char> data = ReadFile(raw, 0, FileSize(raw));
  std::remove(raw.c_str());
  return data;
}

int64_t FirstDifference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

void WriteWithDepth(BlockNode& node, const std::vector<PlannedWrite>& writes, int depth) {
  auto queue = MakeQueue(node);
  ASSERT_NE(queue, nullptr);
  std::vector<IoRequest> requests(depth);
  std::vector<testing::Outcome> outcomes(depth);
  std::vector<struct iovec> iovs(depth);
  std::vector<bool> busy(depth, false);
  size_t next = 0;
  size_t finished = 0;
  while (finished < writes.size()) {
    for (int slot = 0; slot < depth; ++slot) {
      if (busy[slot] && outcomes[slot].done) {
        EXPECT_EQ(outcomes[slot].result, static_cast<int64_t>(requests[slot].length));
        busy[slot] = false;
        ++finished;
      }
      if (!busy[slot] && next < writes.size()) {
        const PlannedWrite& write = writes[next++];
        iovs[slot] = {const_cast<unsigned char*>(write.data.data()), write.data.size()};
        outcomes[slot] = testing::Outcome();
        testing::Prepare(&requests[slot], &outcomes[slot], IoOp::kWrite, write.offset,
                         write.data.size(), &iovs[slot], 1);
        busy[slot] = true;
        queue->Submit(&requests[slot]);
      }
    }
    queue->Poll();
    if (queue->in_flight() > 0) {
      struct pollfd pfd = {queue->event_fd(), POLLIN, 0};
      poll(&pfd, 1, 100);
      queue->Poll();
    }
  }
  ASSERT_TRUE(testing::WaitIdle(*queue));
}

void WriteFromThreads(BlockNode& node, const std::vector<std::vector<PlannedWrite>>& plans,
                      int depth) {
  std::vector<std::thread> threads;
  for (const std::vector<PlannedWrite>& plan : plans) {
    threads.emplace_back([&node, &plan, depth] { WriteWithDepth(node, plan, depth); });
  }
  for (std::thread& thread : threads) thread.join();
}

void ImageWithReference::ApplyToReference(
    const std::vector<std::vector<PlannedWrite>>& plans) const {
  for (const std::vector<PlannedWrite>& plan : plans) {
    for (const PlannedWrite& write : plan) WriteFile(reference, write.data, write.offset);
  }
}

void ImageWithReference::Write(IoQueue& queue, const std::vector<unsigned char>& data,
                               uint64_t offset) const {
  EXPECT_EQ(WriteAt(queue, data.data(), data.size(), offset), static_cast<int64_t>(data.size()))
      << "write at " << offset;
  WriteFile(reference, data, offset);
}

CheckResult ImageWithReference::Verify(bool leaks_allowed) const {
  CheckResult check = QemuCheck(image);
  EXPECT_EQ(check.corruptions, 0u) << check.output;
  if (!leaks_allowed) {
    EXPECT_EQ(check.exit_status, 0) << check.output;
    EXPECT_EQ(check.leaks, 0u) << check.output;
  }
  RunCommand("qemu-img compare -U -f qcow2 -F raw '" + image + "' '" + reference + "'");
  return check;
}

ImageWithReference WithReference(const std::string& image, const ScratchDir& dir) {
  ImageWithReference pair;
  pair.image = image;
  pair.reference = image + ".reference.raw";
  RunCommand("qemu-img convert -U -O raw '" + image + "' '" + pair.reference + "'");
  return pair;
}

}  // namespace bexd::block::testing
