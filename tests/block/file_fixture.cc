// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/block/file_fixture.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "block/open.h"

namespace bexd::block::testing {

std::string AioTestName(AioMode aio) { return AioModeName(aio); }

absl::StatusOr<std::shared_ptr<BlockNode>> OpenFile(const FileOptions& options, bool read_only,
                                                    const std::string& node_name,
                                                    bool auto_read_only) {
  BlockdevOptions blockdev;
  blockdev.node_name = node_name;
  blockdev.read_only = read_only;
  blockdev.auto_read_only = auto_read_only;
  blockdev.driver = options;
  return OpenBlockNode(blockdev);
}

std::shared_ptr<BlockNode> OpenFileOrFail(const std::string& path, AioMode aio, bool direct,
                                          DiscardMode discard) {
  FileOptions options;
  options.filename = path;
  options.aio = aio;
  options.cache_direct = direct;
  options.discard = discard;
  auto node = OpenFile(options);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : nullptr;
}

std::unique_ptr<IoQueue> MakeQueue(BlockNode& node) {
  auto queue = node.CreateQueue();
  EXPECT_TRUE(queue.ok()) << queue.status();
  return queue.ok() ? std::move(*queue) : nullptr;
}

std::vector<unsigned char> ReadFile(const std::string& path, uint64_t offset, uint64_t length) {
  std::vector<unsigned char> data(length);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  ssize_t n = pread(fd, data.data(), length, static_cast<off_t>(offset));
  EXPECT_GE(n, 0);
  data.resize(n < 0 ? 0 : static_cast<size_t>(n));
  close(fd);
  return data;
}

void WriteFile(const std::string& path, const std::vector<unsigned char>& data, uint64_t offset) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  EXPECT_EQ(pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(data.size()));
  close(fd);
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_size);
}

int Shell(const std::string& command) {
  int status = system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace bexd::block::testing
