// A backing-file I/O error reaches the client with its errno, and the export keeps serving.
//
// The backing file is an nbdfuse mount of an nbdkit memory disk behind the error filter: while
// the trigger file exists every read and write of the disk fails with EIO, a real error from the
// kernel's read()/write() on the backing file.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "tests/export/export_fixture.h"

extern char** environ;

namespace bexd::exp::testing {
namespace {

constexpr uint64_t kDiskBytes = 16 << 20;

class FailingDisk {
 public:
  explicit FailingDisk(const std::string& directory)
      : path_(directory + "/nbd"), trigger_(directory + "/fail-now") {
    std::ofstream(path_).flush();
    const std::string size = std::to_string(kDiskBytes);
    const std::string error_file = "error-file=" + trigger_;
    const char* argv[] = {"nbdfuse",   path_.c_str(),     "--command",        "nbdkit",
                          "-s",        "--filter=error",  "memory",           size.c_str(),
                          "error=EIO", "error-rate=100%", error_file.c_str(), nullptr};
    if (::posix_spawnp(&pid_, "nbdfuse", nullptr, nullptr, const_cast<char**>(argv), environ) !=
        0) {
      pid_ = -1;
      ADD_FAILURE() << "cannot run nbdfuse";
      return;
    }
    for (int i = 0; i < 2000 && !ready(); ++i) ::usleep(10000);
    EXPECT_TRUE(ready()) << "nbdfuse did not mount " << path_;
  }
  ~FailingDisk() {
    if (pid_ < 0) return;
    std::remove(trigger_.c_str());
    if (std::system(("fusermount3 -u " + path_).c_str()) != 0) {
      ADD_FAILURE() << "cannot unmount " << path_ << " (still open?); detaching it";
      std::system(("fusermount3 -u -z " + path_).c_str());
    }
    int status;
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return;
      ::usleep(10000);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }

  const std::string& path() const { return path_; }
  bool ready() const { return IsFuseMounted(path_) && FileSize(path_) == kDiskBytes; }
  void StartFailing() const { std::ofstream(trigger_).flush(); }
  void StopFailing() const { std::remove(trigger_.c_str()); }

 private:
  std::string path_;
  std::string trigger_;
  pid_t pid_ = -1;
};

using IoErrorTest = FuseExportTest;

TEST_F(IoErrorTest, BackingFileErrorReachesTheClientAsEio) {
  FailingDisk disk(scratch_.path());
  ASSERT_TRUE(disk.ready());
  const std::string mountpoint = MakeMountpoint();
  // No O_DIRECT on the nbdfuse file; aio=threads because libaio would block on it anyway.
  Export* running = Start(FuseOptions(mountpoint, true, 2),
                          OpenFileNode(disk.path(), false, false, block::AioMode::kThreads));
  ASSERT_NE(running, nullptr);
  int fd = ::open(mountpoint.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  AlignedBuffer buffer(4096);

  disk.StartFailing();
  EXPECT_EQ(::pread(fd, buffer.data, 4096, 1 << 20), -1);
  EXPECT_EQ(errno, EIO);
  FillPattern(buffer.data, 4096, 0, 1);
  EXPECT_EQ(::pwrite(fd, buffer.data, 4096, 0), -1);
  EXPECT_EQ(errno, EIO);

  // The export still serves once the disk works again, on every queue.
  disk.StopFailing();
  for (int i = 0; i < 16; ++i) {
    FillPattern(buffer.data, 4096, i * 4096, 2);
    ASSERT_EQ(::pwrite(fd, buffer.data, 4096, i * 4096), 4096) << std::strerror(errno);
  }
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(::pread(fd, buffer.data, 4096, i * 4096), 4096) << std::strerror(errno);
    for (int b = 0; b < 4096; ++b) ASSERT_EQ(buffer.data[b], PatternByte(i * 4096 + b, 2));
  }
  ASSERT_EQ(::pread(fd, buffer.data, 4096, 1 << 20), 4096) << std::strerror(errno);
  ::close(fd);
  uint64_t errors = 0;
  for (const auto& queue : running->Stats()) errors += queue.errors;
  EXPECT_EQ(errors, 2u);
  exports_.clear();  // closes the backing file, so that the disk can unmount
}

}  // namespace
}  // namespace bexd::exp::testing
