// The file driver on real block devices and real failures: a loop device, an image whose
// reads and writes fail with EIO (nbdkit's error filter behind nbdfuse), and a full filesystem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"
#include "tests/support/loop_device.h"

extern char** environ;

namespace bexd::block {
namespace {

using testing::Pattern;
using testing::ReadAt;
using testing::RunOne;
using testing::WriteAt;

bool WaitFor(const std::function<bool()>& ready, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

TEST(FileDevice, LoopDevice) {
  testing::ScratchDir dir;
  constexpr uint64_t kSize = 16 << 20;
  std::string backing = dir.CreateFile("backing", kSize);
  bexd::testing::LoopDevice loop(backing);
  if (loop.path().empty()) GTEST_SKIP() << "losetup is not available (needs root and loop)";
  for (AioMode aio : {AioMode::kNative, AioMode::kThreads}) {
    auto node = testing::OpenFileOrFail(loop.path(), aio, true, DiscardMode::kUnmap);
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(node->size(), kSize);
    EXPECT_GE(node->request_alignment(), 512u);
    auto queue = testing::MakeQueue(*node);
    std::vector<unsigned char> aligned = Pattern(65536, 1);
    std::vector<unsigned char> odd = Pattern(1001, 2);
    EXPECT_EQ(WriteAt(*queue, aligned.data(), aligned.size(), 1 << 20), 65536);
    EXPECT_EQ(WriteAt(*queue, odd.data(), odd.size(), (2 << 20) + 77), 1001);
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
    std::vector<unsigned char> back(65536);
    EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 1 << 20), 65536);
    EXPECT_EQ(back, aligned);
    back.resize(1001);
    EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), (2 << 20) + 77), 1001);
    EXPECT_EQ(back, odd);
    EXPECT_EQ(testing::ReadFile(backing, 1 << 20, 65536), aligned);
    EXPECT_EQ(testing::ReadFile(backing, (2 << 20) + 77, 1001), odd);
    std::vector<unsigned char> past(512);
    EXPECT_EQ(ReadAt(*queue, past.data(), past.size(), kSize), -EINVAL);

    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, (1 << 20) + 4096, 8192), 8192);
    EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, (2 << 20) + 100, 10), 10);
    EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 4 << 20, 1 << 20), 1 << 20);
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
    std::vector<unsigned char> expected = aligned;
    std::memset(expected.data() + 4096, 0, 8192);
    EXPECT_EQ(testing::ReadFile(backing, 1 << 20, 65536), expected);
    expected = odd;
    std::memset(expected.data() + 23, 0, 10);
    EXPECT_EQ(testing::ReadFile(backing, (2 << 20) + 77, 1001), expected);

    bool data = false;
    EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 0, kSize, nullptr, 0, 0, &data), kSize);
    EXPECT_TRUE(data);
    absl::Status resize = node->Truncate(kSize * 2);
    EXPECT_EQ(resize.code(), absl::StatusCode::kInvalidArgument) << resize;
    EXPECT_EQ(node->size(), kSize);
  }
}

// nbdfuse serves an nbdkit memory disk as a file; nbdkit's error filter fails every read and
// write with EIO while the trigger file exists.
class FailingImage {
 public:
  explicit FailingImage(const std::string& dir)
      : mountpoint_(dir + "/mnt"), trigger_(dir + "/fail") {
    if (testing::Shell("command -v nbdfuse >/dev/null && command -v nbdkit >/dev/null") != 0 ||
        access("/dev/fuse", R_OK | W_OK) != 0 || mkdir(mountpoint_.c_str(), 0755) != 0) {
      return;
    }
    std::string error_file = "error-file=" + trigger_;
    std::vector<std::string> args = {"nbdfuse",   mountpoint_,       "--command", "nbdkit",
                                     "-s",        "--filter=error",  "memory",    "16M",
                                     "error=EIO", "error-rate=100%", error_file};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    // nbdkit logs every injected error; keep the test output readable.
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pid_, "nbdfuse", &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    std::string file = path();
    if (pid_ > 0 && !WaitFor([&] { return access(file.c_str(), F_OK) == 0; }, 10000)) Stop();
  }
  ~FailingImage() { Stop(); }

  bool ok() const { return pid_ > 0; }
  std::string path() const { return mountpoint_ + "/nbd"; }
  void SetFailing(bool failing) {
    if (failing) {
      testing::Shell("touch '" + trigger_ + "'");
    } else {
      unlink(trigger_.c_str());
    }
  }

 private:
  void Stop() {
    if (pid_ <= 0) return;
    testing::Shell("fusermount3 -u '" + mountpoint_ + "' 2>/dev/null");
    int status;
    if (!WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, 10000)) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }

  std::string mountpoint_;
  std::string trigger_;
  pid_t pid_ = -1;
};

TEST(FileDevice, IoErrorsAreReportedAndTheQueueKeepsWorking) {
  testing::ScratchDir dir;
  FailingImage image(dir.path());
  if (!image.ok()) GTEST_SKIP() << "nbdfuse, nbdkit or /dev/fuse is not available";
  for (AioMode aio : {AioMode::kNative, AioMode::kThreads}) {
    auto node = testing::OpenFileOrFail(image.path(), aio, /*direct=*/true);
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(node->size(), 16u << 20);
    auto queue = testing::MakeQueue(*node);
    std::vector<unsigned char> data = Pattern(4096, 3);
    void* memory = nullptr;
    ASSERT_EQ(posix_memalign(&memory, 4096, 8192), 0);
    std::unique_ptr<void, decltype(&free)> buffer(memory, free);
    auto* bytes = static_cast<unsigned char*>(memory);
    std::memcpy(bytes, data.data(), 4096);
    EXPECT_EQ(WriteAt(*queue, bytes, 4096, 8192), 4096);

    image.SetFailing(true);
    EXPECT_EQ(ReadAt(*queue, bytes, 4096, 8192), -EIO);
    EXPECT_EQ(WriteAt(*queue, bytes, 4096, 8192), -EIO);
    // The bounce path (unaligned) reports the error the same way.
    EXPECT_EQ(ReadAt(*queue, bytes + 1, 100, 8193), -EIO);
    EXPECT_EQ(WriteAt(*queue, bytes + 1, 100, 8193), -EIO);
    image.SetFailing(false);

    std::memset(bytes, 0, 4096);
    EXPECT_EQ(ReadAt(*queue, bytes, 4096, 8192), 4096);
    EXPECT_EQ(std::vector<unsigned char>(bytes, bytes + 4096), data);
    EXPECT_EQ(queue->in_flight(), 0u);
  }
}

TEST(FileDevice, FullFilesystemReportsNoSpace) {
  testing::ScratchDir dir;
  std::string mountpoint = dir.path() + "/small";
  ASSERT_EQ(mkdir(mountpoint.c_str(), 0755), 0);
  if (mount("tmpfs", mountpoint.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs: " << strerror(errno);
  }
  {
    std::string path = mountpoint + "/image";
    ASSERT_EQ(testing::Shell("truncate -s 8M '" + path + "'"), 0);
    for (AioMode aio : {AioMode::kNative, AioMode::kThreads}) {
      auto node = testing::OpenFileOrFail(path, aio, /*direct=*/false);
      ASSERT_NE(node, nullptr);
      auto queue = testing::MakeQueue(*node);
      std::vector<unsigned char> data = Pattern(65536, 4);
      int64_t result = 0;
      uint64_t offset = 0;
      for (; offset < (8u << 20) && result >= 0; offset += data.size()) {
        result = WriteAt(*queue, data.data(), data.size(), offset);
      }
      EXPECT_EQ(result, -ENOSPC) << "after " << offset << " bytes";
      std::vector<unsigned char> back(65536);
      EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), 65536);
      EXPECT_EQ(back, data);
      EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 0, 8 << 20), 8 << 20);
    }
  }
  EXPECT_EQ(umount(mountpoint.c_str()), 0);
}

}  // namespace
}  // namespace bexd::block
