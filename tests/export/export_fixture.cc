// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/export/export_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "block/open.h"
#include "export/fuse_dev/fuse_mountpoint.h"
#include "export/fuse_uring/kernel_support.h"
#include "export/start.h"

extern char** environ;

namespace bexd::exports::testing {
uint8_t PatternByte(uint64_t offset, uint32_t seed) {
  uint64_t x = (offset / 8) * 0x9E3779B97F4A7C15ull ^ (uint64_t{seed} << 32 | seed);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<uint8_t>(x >> (8 * (offset % 8)));
}

void FillPattern(uint8_t* data, size_t length, uint64_t offset, uint32_t seed) {
  for (size_t i = 0; i < length; ++i) data[i] = PatternByte(offset + i, seed);
}

AlignedBuffer::AlignedBuffer(size_t length) : data(nullptr), length(length) {
  void* memory = nullptr;
  if (::posix_memalign(&memory, 4096, length == 0 ? 4096 : length) != 0) std::abort();
  data = static_cast<uint8_t*>(memory);
}

AlignedBuffer::~AlignedBuffer() { ::free(data); }

std::vector<uint8_t> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> WritePatternFile(const std::string& path, uint64_t size, uint32_t seed) {
  std::vector<uint8_t> bytes(size);
  FillPattern(bytes.data(), bytes.size(), 0, seed);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  if (fd < 0) return bytes;
  EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  EXPECT_EQ(::fsync(fd), 0) << path << ": " << std::strerror(errno);
  ::close(fd);
  return bytes;
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return static_cast<uint64_t>(st.st_size);
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

std::string RunOrFail(const std::string& command) {
  int status = 0;
  std::string output = RunCommand(command, &status);
  EXPECT_EQ(status, 0) << command << "\n" << output;
  return output;
}

bool IsFuseMounted(const std::string& path) {
  absl::StatusOr<std::optional<MountEntry>> top = TopMountAt(path);
  EXPECT_TRUE(top.ok()) << top.status();
  return top.ok() && top->has_value() && (*top)->fs_type.rfind("fuse", 0) == 0;
}

std::shared_ptr<block::BlockNode> OpenFileNode(const std::string& filename, bool read_only,
                                               bool cache_direct, block::AioMode aio) {
  block::BlockdevOptions options;
  options.node_name = "disk0";
  options.read_only = read_only;
  block::FileOptions file;
  file.filename = filename;
  file.cache_direct = cache_direct;
  file.aio = aio;
  options.driver = file;
  absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(options);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : nullptr;
}

void ExpectFioVerifies(Export* running, const std::string& mountpoint, uint64_t job_bytes,
                       bool through_queues) {
  int status = 0;
  const std::string output =
      RunCommand("fio --name=fusejob --filename=" + mountpoint +
                     " --ioengine=libaio --direct=1 --iodepth=16 --rw=randwrite --bs=4k"
                     " --size=" +
                     std::to_string(job_bytes) +
                     " --numjobs=4 --offset_increment=" + std::to_string(job_bytes) +
                     " --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0"
                     " --group_reporting",
                 &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output.find("verify:"), std::string::npos) << output;
  EXPECT_EQ(output.find("verify failed"), std::string::npos) << output;
  EXPECT_NE(output.find("err= 0"), std::string::npos) << output;
  EXPECT_NE(output.find("Run status group"), std::string::npos) << output;
  if (!through_queues) return;

  uint64_t writes = 0, reads = 0;
  for (const auto& queue : running->Stats()) {
    writes += queue.write_requests;
    reads += queue.read_requests;
  }
  EXPECT_GE(writes, 4 * job_bytes / 4096);  // every block written once...
  EXPECT_GE(reads, 4 * job_bytes / 4096);   // ...and read back for verification
}

std::shared_ptr<block::BlockNode> OpenNullNode(uint64_t size) {
  block::BlockdevOptions options;
  options.node_name = "null0";
  block::NullOptions null;
  null.size = size;
  null.read_zeroes = true;
  options.driver = null;
  absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(options);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : nullptr;
}

IoUringMode TestIoUringMode() {
  static const bool io_uring = std::getenv("BEXD_TEST_FUSE_IO_URING") != nullptr;
  return io_uring ? IoUringMode::kOn : IoUringMode::kOff;
}

std::string TestIoUringOption() {
  return TestIoUringMode() == IoUringMode::kOn ? ",io-uring=on" : "";
}

size_t ExpectedFuseQueues(uint32_t num_queues) {
  if (TestIoUringMode() != IoUringMode::kOn) return num_queues;
  absl::StatusOr<uint32_t> cpus = PossibleCpuCount();
  EXPECT_TRUE(cpus.ok()) << cpus.status();
  return cpus.ok() ? *cpus + 1 : 0;
}

namespace {

// Skips every test of the io_uring run when the kernel cannot serve it, saying why once.
class IoUringEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (TestIoUringMode() != IoUringMode::kOn) return;
    const FuseUringSupport support = ReadFuseUringSupport();
    if (!support.enabled) GTEST_SKIP() << support.why_not << " (" << support.remedy << ")";
  }
};

[[maybe_unused]] ::testing::Environment* const kIoUringEnvironment =
    ::testing::AddGlobalTestEnvironment(new IoUringEnvironment);

}  // namespace

ExportOptions FuseOptions(const std::string& mountpoint, bool writable, uint32_t num_queues,
                          bool growable) {
  ExportOptions options;
  options.id = "export0";
  options.writable = writable;
  FuseExportOptions fuse;
  fuse.mountpoint = mountpoint;
  fuse.num_queues = num_queues;
  fuse.growable = growable;
  fuse.io_uring = TestIoUringMode();
  options.transport = fuse;
  return options;
}

Daemon::Daemon(const std::vector<std::string>& args, const std::vector<std::string>& launcher) {
  std::vector<char*> argv;
  for (const std::string& arg : launcher) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(const_cast<char*>(BEXD_BINARY));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const int error = ::posix_spawnp(&pid_, argv[0], nullptr, nullptr, argv.data(), environ);
  EXPECT_EQ(error, 0) << "cannot run " << argv[0] << ": " << std::strerror(error);
  if (error != 0) pid_ = -1;
}

Daemon::~Daemon() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

bool Daemon::WaitMounted(const std::string& path) const {
  for (int i = 0; i < 2000 && pid_ >= 0; ++i) {
    if (IsFuseMounted(path)) return true;
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return false;  // exited (it logged why)
    ::usleep(10000);
  }
  return false;
}

void Daemon::Signal(int signal) const {
  if (pid_ >= 0) {
    EXPECT_EQ(::kill(pid_, signal), 0) << std::strerror(errno);
  }
}

int Daemon::SignalAndWait(int signal) {
  if (pid_ < 0) return -1;
  EXPECT_EQ(::kill(pid_, signal), 0) << std::strerror(errno);
  int status = 0;
  for (int i = 0; i < 3000; ++i) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    ::usleep(10000);
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return -1;
}

Watchdog::Watchdog(std::chrono::seconds limit) {
  thread_ = std::thread([this, limit] {
    std::unique_lock lock(mutex_);
    if (done_cv_.wait_for(lock, limit, [this] { return done_; })) return;
    std::fprintf(stderr, "watchdog: the test ran longer than %lld s; aborting\n",
                 static_cast<long long>(limit.count()));
    std::abort();
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_cv_.notify_all();
  thread_.join();
}

void FuseExportTest::TearDown() {
  for (auto& running : exports_) running->Stop();
  exports_.clear();
  for (const std::string& path : mountpoints_) {
    if (IsFuseMounted(path)) {
      ADD_FAILURE() << path << " is still mounted after Stop()";
      ::umount2(path.c_str(), MNT_DETACH);
    }
  }
}

Export* FuseExportTest::Start(const ExportOptions& options, std::shared_ptr<block::BlockNode> node,
                              Export::EndedFn on_ended) {
  absl::StatusOr<std::unique_ptr<Export>> started =
      StartExport(options, std::move(node), std::move(on_ended));
  EXPECT_TRUE(started.ok()) << started.status();
  if (!started.ok()) return nullptr;
  exports_.push_back(std::move(*started));
  return exports_.back().get();
}

std::string FuseExportTest::MakeMountpoint(const std::string& name) {
  const std::string path = scratch_.path() + "/" + name;
  std::ofstream(path) << kOriginalContent;
  mountpoints_.push_back(path);
  return path;
}

}  // namespace bexd::exports::testing
