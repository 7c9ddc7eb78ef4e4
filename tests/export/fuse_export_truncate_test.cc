// SPDX-License-Identifier: GPL-2.0-or-later
// `cp`, `dd` and a shell's `>` into a mounted export open it with O_TRUNC: a fixed-size export
// keeps its size and the data past what they write, a growable one ends up exactly the source.
// Explicit size changes (`truncate -s`, `fallocate` past the end) resize a writable export. The
// real tools run against a real mount; the backing file is compared byte for byte afterwards.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tests/export/export_fixture.h"

extern char** environ;

namespace bexd::exports::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kImageSize = 8 * kMiB;
constexpr uint64_t kSourceSize = kMiB + 4097;  // not a multiple of any block size

std::vector<uint8_t> Pattern(uint64_t size, uint32_t seed) {
  std::vector<uint8_t> bytes(size);
  FillPattern(bytes.data(), bytes.size(), 0, seed);
  return bytes;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

// Runs a program (found on PATH) and returns its wait status.
int RunProgram(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  const int error = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  EXPECT_EQ(error, 0) << "cannot run " << args[0] << ": " << std::strerror(error);
  if (error != 0) return -1;
  int status = -1;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

struct stat StatOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return st;
}

enum class Writer { kCp, kDd, kShellRedirect };

std::vector<std::string> WriterCommand(Writer writer, const std::string& source,
                                       const std::string& target) {
  switch (writer) {
    case Writer::kCp:
      return {"cp", source, target};
    case Writer::kDd:  // without conv=notrunc: dd opens with O_TRUNC
      return {"dd", "if=" + source, "of=" + target, "bs=64k", "status=none"};
    case Writer::kShellRedirect:
      return {"/bin/sh", "-c", "cat '" + source + "' > '" + target + "'"};
  }
  return {};
}

// A writable export of an image full of pattern bytes, and a smaller source file.
class ImageExportTest : public FuseExportTest {
 protected:
  void SetUp() override {
    image_ = scratch_.path() + "/image";
    WriteFile(image_, original_);
    source_ = scratch_.path() + "/source";
    WriteFile(source_, source_bytes_);
    mountpoint_ = MakeMountpoint();
  }

  void StartExport(bool growable) {
    ASSERT_NE(Start(FuseOptions(mountpoint_, /*writable=*/true, 2, growable), OpenFileNode(image_)),
              nullptr);
  }

  // A fixed-size export: the source's bytes followed by the old tail. A growable one: the source.
  std::vector<uint8_t> Expected(bool growable) const {
    std::vector<uint8_t> expected = source_bytes_;
    if (!growable)
      expected.insert(expected.end(), original_.begin() + kSourceSize, original_.end());
    return expected;
  }

  const std::vector<uint8_t> original_ = Pattern(kImageSize, 1);
  const std::vector<uint8_t> source_bytes_ = Pattern(kSourceSize, 2);
  std::string image_;
  std::string source_;
  std::string mountpoint_;
};

class TruncatingWriterTest : public ImageExportTest,
                             public ::testing::WithParamInterface<std::tuple<Writer, bool>> {};

TEST_P(TruncatingWriterTest, WritesTheSourceOverTheImage) {
  const auto [writer, growable] = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartExport(growable));
  const int status = RunProgram(WriterCommand(writer, source_, mountpoint_));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;

  const std::vector<uint8_t> expected = Expected(growable);
  EXPECT_EQ(static_cast<uint64_t>(StatOf(mountpoint_).st_size), expected.size());
  EXPECT_TRUE(ReadWholeFile(mountpoint_) == expected) << "the mount shows other bytes";
  for (auto& running : exports_) running->Stop();
  const std::vector<uint8_t> backing = ReadWholeFile(image_);
  ASSERT_EQ(backing.size(), expected.size());
  EXPECT_TRUE(backing == expected) << "the backing file holds other bytes";
}

std::string WriterTestName(const ::testing::TestParamInfo<std::tuple<Writer, bool>>& info) {
  static const char* const kNames[] = {"Cp", "Dd", "ShellRedirect"};
  return std::string(kNames[static_cast<int>(std::get<0>(info.param))]) +
         (std::get<1>(info.param) ? "Growable" : "FixedSize");
}

INSTANTIATE_TEST_SUITE_P(Writers, TruncatingWriterTest,
                         ::testing::Combine(::testing::Values(Writer::kCp, Writer::kDd,
                                                              Writer::kShellRedirect),
                                            ::testing::Bool()),
                         WriterTestName);

// The kernel sets its cached size to 0 after an O_TRUNC open it left to the server
// (FUSE_ATOMIC_O_TRUNC) and marks the attributes stale: what stat shows then, and after the
// writes, must be the node's size.
class TruncatingOpenTest : public ImageExportTest, public ::testing::WithParamInterface<bool> {};

TEST_P(TruncatingOpenTest, SizeSeenThroughTheMountIsTheNodes) {
  const bool growable = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartExport(growable));
  int fd = ::open(mountpoint_.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const uint64_t after_open = growable ? 0 : kImageSize;
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), after_open);
  EXPECT_EQ(static_cast<uint64_t>(StatOf(mountpoint_).st_size), after_open);
  EXPECT_EQ(static_cast<uint64_t>(::lseek(fd, 0, SEEK_END)), after_open);

  ASSERT_EQ(::pwrite(fd, source_bytes_.data(), source_bytes_.size(), 0),
            static_cast<ssize_t>(source_bytes_.size()))
      << std::strerror(errno);
  const uint64_t after_writes = growable ? kSourceSize : kImageSize;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), after_writes);
  EXPECT_EQ(static_cast<uint64_t>(::lseek(fd, 0, SEEK_END)), after_writes);
  ::close(fd);
  EXPECT_EQ(static_cast<uint64_t>(StatOf(mountpoint_).st_size), after_writes);
  EXPECT_TRUE(ReadWholeFile(mountpoint_) == Expected(growable));
}

INSTANTIATE_TEST_SUITE_P(Exports, TruncatingOpenTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Growable" : "FixedSize"; });

using ExplicitResizeTest = ImageExportTest;

// QEMU iotest 308 ("Resize export"): fallocate past the end of a writable, non-growable export
// extends it, and the new range is allocated in the backing file.
TEST_F(ExplicitResizeTest, FallocatePastTheEndGrowsAFixedSizeExport) {
  ASSERT_NO_FATAL_FAILURE(StartExport(/*growable=*/false));
  const struct stat before = StatOf(image_);
  const int status =
      RunProgram({"fallocate", "-o", std::to_string(kImageSize), "-l", "64KiB", mountpoint_});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;

  const uint64_t size = kImageSize + 65536;
  const struct stat backing = StatOf(image_);
  EXPECT_EQ(static_cast<uint64_t>(backing.st_size), size);
  // 64 KiB more storage, 128 blocks of 512 bytes (at least: the file system may add metadata).
  EXPECT_GE(backing.st_blocks, before.st_blocks + 128);
  const struct stat mounted = StatOf(mountpoint_);
  EXPECT_EQ(static_cast<uint64_t>(mounted.st_size), size);
  EXPECT_EQ(mounted.st_blocks, backing.st_blocks) << "du differs through the mount";
  for (auto& running : exports_) running->Stop();
  std::vector<uint8_t> expected = original_;
  expected.resize(size, 0);
  EXPECT_TRUE(ReadWholeFile(image_) == expected);
}

TEST_F(ExplicitResizeTest, TruncateResizesAFixedSizeExport) {
  ASSERT_NO_FATAL_FAILURE(StartExport(/*growable=*/false));
  int status = RunProgram({"truncate", "-s", std::to_string(kImageSize + kMiB), mountpoint_});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_EQ(static_cast<uint64_t>(StatOf(mountpoint_).st_size), kImageSize + kMiB);
  status = RunProgram({"truncate", "-s", std::to_string(kMiB), mountpoint_});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_EQ(static_cast<uint64_t>(StatOf(mountpoint_).st_size), kMiB);
  for (auto& running : exports_) running->Stop();
  EXPECT_TRUE(ReadWholeFile(image_) ==
              std::vector<uint8_t>(original_.begin(), original_.begin() + kMiB));
}

}  // namespace
}  // namespace bexd::exports::testing
