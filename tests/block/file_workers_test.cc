// SPDX-License-Identifier: GPL-2.0-or-later
// A file queue starts its worker threads with the first request that needs one, not with the
// queue: a qcow2 chain has a file queue per image on every thread, and most never need one (101
// images took 406 threads with eager workers, 103 without).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "block/file_queue.h"
#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"

namespace bexd::block::testing {
namespace {

size_t ThreadCount() {
  size_t count = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  while (struct dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

TEST(FileWorkersTest, StartWithTheFirstRequestThatNeedsOne) {
  ScratchDir dir;
  const std::string image = dir.path() + "/image";
  close(open(image.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  WriteFile(image, Pattern(1 << 20, 5), 0);
  std::shared_ptr<BlockNode> node = OpenFileOrFail(image, AioMode::kNative, /*direct=*/true);
  ASSERT_NE(node, nullptr);
  const size_t before = ThreadCount();
  std::unique_ptr<IoQueue> queue = MakeQueue(*node);
  ASSERT_NE(queue, nullptr);
  EXPECT_EQ(ThreadCount(), before) << "the queue started threads of its own";
  // Aligned: libaio, no worker.
  void* aligned = std::aligned_alloc(4096, 8192);
  ASSERT_EQ(ReadAt(*queue, aligned, 4096, 4096), 4096);
  EXPECT_EQ(ThreadCount(), before);
  // Unaligned under O_DIRECT: a worker's bounce buffer.
  std::vector<unsigned char> unaligned(1000);
  ASSERT_EQ(ReadAt(*queue, unaligned.data(), unaligned.size(), 10), 1000);
  EXPECT_EQ(ThreadCount(), before + FileQueue::kHelperThreadsForAsync);
  const std::vector<unsigned char> pattern = Pattern(1 << 20, 5);
  EXPECT_EQ(unaligned, std::vector<unsigned char>(pattern.begin() + 10, pattern.begin() + 1010));
  queue.reset();
  EXPECT_EQ(ThreadCount(), before);
  std::free(aligned);
}

}  // namespace
}  // namespace bexd::block::testing
