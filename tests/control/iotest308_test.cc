// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's iotest 308 ("Test FUSE exports") and its companion tests/fuse-allow-other, against a real
// bexd driven over QMP, with `raw` over `file` (or `file` alone) where the iotest uses its image
// format. What the iotest checks elsewhere in this suite, not repeated here:
// - mountpoint is a directory, double export on one mountpoint: qmp_commands_test.cc
//   ControlTest.ErrorPathsReturnGenericError (QSD's texts);
// - block-export-del while a file is open (refused in safe mode, hard mode removes it):
//   qmp_commands_test.cc ControlTest.SafeDeleteRefusesWhileOpenHardDeleteRemoves;
// - fallocate past the end of a fixed-size export grows it ("Resize export"):
//   tests/export/fuse_export_truncate_test.cc ExplicitResizeTest.*, tests/fuse/size_change_test.cc;
// - block_resize under both names: qmp_qemu_commands_test.cc BlockResizeUnderBothNames;
// - the multi-threading case (four iothreads): qmp_qemu_commands_test.cc
//   IothreadObjectsAreAddedAndDeletedAtRunTime;
// - tear-down events at quit and on signals: qmp_qemu_format_test.cc
//   QuitAnnouncesShutdownAndEveryExportBeforeItsReply, SignalsAnnounceShutdownAndEveryExport;
// - tests/fuse-truncate (O_TRUNC empties a growable export, keeps a fixed-size one):
//   tests/export/fuse_export_truncate_test.cc TruncatingOpenTest, TruncatingWriterTest.
#include <fcntl.h>
#include <grp.h>
#include <linux/falloc.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tests/control/control_fixture.h"
#include "tests/support/run_command.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

// Writes `data` as the whole file and makes it durable, so that its blocks are allocated on disk
// (not only reserved for delayed allocation) before a test compares allocation.
void WriteWholeFile(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

std::string ReadAt(const std::string& path, uint64_t offset, size_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "open failed: " + std::string(std::strerror(errno));
  std::string data(length, '\0');
  const ssize_t n = ::pread(fd, data.data(), length, static_cast<off_t>(offset));
  ::close(fd);
  if (n < 0) return "read failed: " + std::string(std::strerror(errno));
  data.resize(static_cast<size_t>(n));
  return data;
}

struct stat StatOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return st;
}

uint64_t SizeOf(const std::string& path) { return static_cast<uint64_t>(StatOf(path).st_size); }
mode_t ModeOf(const std::string& path) { return StatOf(path).st_mode & 07777; }

// 0, or the errno of the failed call.
int ChmodErrno(const std::string& path, mode_t mode) {
  return ::chmod(path.c_str(), mode) == 0 ? 0 : errno;
}

int OpenErrno(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

// Runs `probe` in a child process as the user nobody (what `sudo -n -u nobody` does in QEMU's
// fuse-allow-other) and returns what it returned: a value, or -errno. The probe runs between
// fork() and _exit(), so it makes system calls only.
int AsNobody(const passwd& nobody, const std::function<int()>& probe) {
  int result_pipe[2];
  if (::pipe2(result_pipe, O_CLOEXEC) != 0) return INT_MIN;
  const pid_t pid = ::fork();
  if (pid == 0) {
    int result = INT_MIN + 1;  // could not become nobody
    if (::setgroups(0, nullptr) == 0 &&
        ::setresgid(nobody.pw_gid, nobody.pw_gid, nobody.pw_gid) == 0 &&
        ::setresuid(nobody.pw_uid, nobody.pw_uid, nobody.pw_uid) == 0) {
      result = probe();
    }
    (void)!::write(result_pipe[1], &result, sizeof(result));
    ::_exit(0);
  }
  ::close(result_pipe[1]);
  int result = INT_MIN;
  if (::read(result_pipe[0], &result, sizeof(result)) != sizeof(result)) result = INT_MIN;
  ::close(result_pipe[0]);
  ::waitpid(pid, nullptr, 0);
  return result;
}

class Iotest308Test : public ControlTest {
 protected:
  void StartWithClient(const std::vector<std::string>& extra = {}) {
    ASSERT_NO_FATAL_FAILURE(StartDaemon(extra));
    client_ = Connect();
    client_->Negotiate();
  }

  // block-export-add of a read-only FUSE export; "" on success, else the reply.
  std::string AddReadOnlyExport(const std::string& id, const std::string& node,
                                const std::string& mountpoint) {
    json spec = FuseExport(id, node, mountpoint);
    spec["writable"] = false;
    return Success(client_->Execute("block-export-add", spec));
  }

  // block-export-del, then the event that says the export is gone (308's fuse_export_del). 308
  // reads up to the reply, then waits for the event: an event sent before the reply is lost to it.
  void DeleteExport(const std::string& id) {
    client_->SendRaw(json({{"execute", "block-export-del"}, {"arguments", {{"id", id}}}}).dump());
    std::optional<json> reply = client_->ReadMessage();
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(*reply, json({{"return", json::object()}}));
    std::optional<json> event = client_->ReadMessage();
    ASSERT_TRUE(event.has_value());
    EXPECT_EQ((*event)["event"], "BLOCK_EXPORT_DELETED");
    EXPECT_EQ((*event)["data"], json({{"id", id}}));
  }

  // The node's size as QMP reports it (query-named-block-nodes, image.virtual-size).
  uint64_t VirtualSize(const std::string& node_name) {
    const json nodes = client_->Execute("query-named-block-nodes")["return"];
    for (const json& node : nodes) {
      if (node["node-name"] == node_name) return node["image"]["virtual-size"].get<uint64_t>();
    }
    ADD_FAILURE() << "no node " << node_name;
    return 0;
  }

  std::unique_ptr<QmpClient> client_;
};

// 308 "Mountpoint not present", with QSD's text, which 308.out holds.
TEST_F(Iotest308Test, MountpointThatDoesNotExistIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const std::string missing = Path("t.raw.fuse");
  json reply = client_->Execute("block-export-add", FuseExport("export-err", "disk0", missing));
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply), "Failed to stat '" + missing + "': No such file or directory");
  EXPECT_NE(::access(missing.c_str(), F_OK), 0) << "the refused export created its mountpoint";
  EXPECT_EQ(client_->Execute("query-block-exports")["return"].size(), 1u);
}

// A mountpoint that is already another process's FUSE mount (here another bexd's). QSD would
// stat it (which the other server answers, or not) and mount on top; bexd refuses before any
// stat, which a server that does not answer would block, and leaves the other mount alone.
TEST_F(Iotest308Test, MountpointOfAnotherDaemonIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const std::string taken = dir_.File("other.fuse");
  const std::string other_log = Path("other.log");
  BexdDaemon other({"--blockdev", "driver=null-co,node-name=null0,size=1M,read-zeroes=on",
                    "--export", "type=fuse,id=other,node-name=null0,mountpoint=" + taken},
                   other_log);
  // SIGTERM, not the destructor's SIGKILL, whatever fails below: no dead mount stays behind.
  struct StopAtEnd {
    BexdDaemon& daemon;
    ~StopAtEnd() { daemon.Stop(); }
  } stop_at_end{other};
  ASSERT_TRUE(WaitFor([&] { return IsMounted(taken) || !other.running(); })) << ReadFile(other_log);
  ASSERT_TRUE(other.running()) << ReadFile(other_log);

  json reply = client_->Execute("block-export-add", FuseExport("export-err", "disk0", taken));
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply), "export 'export-err': mountpoint '" + taken +
                                  "' is already a FUSE mount (fuse.bexd); unmount it first");
  EXPECT_EQ(client_->Execute("query-block-exports")["return"].size(), 1u);
  EXPECT_EQ(SizeOf(taken), kMiB);  // still the other daemon's export
  EXPECT_EQ(other.Stop(), 0) << ReadFile(other_log);
  EXPECT_FALSE(IsMounted(taken));
}

// 308 "Mountpoint is a regular file", "Mount over existing file" and "Remove export": the file
// shows the node while exported (also the image's own path, which cp reads to its end), and its
// own (empty) content again once the export is deleted.
TEST_F(Iotest308Test, ExportCoversAFileAndTheImageItselfUntilDeleted) {
  const std::string data = Pattern(kImageBytes, 7);
  ASSERT_NO_FATAL_FAILURE(WriteWholeFile(image_, data));
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const std::string mountpoint = dir_.File("t.fuse");
  ASSERT_EQ(AddReadOnlyExport("export-mp", "disk0", mountpoint), "");
  EXPECT_EQ(SizeOf(mountpoint), kImageBytes);
  EXPECT_TRUE(ReadFile(mountpoint) == data);

  ASSERT_EQ(AddReadOnlyExport("export-img", "disk0", image_), "");
  EXPECT_TRUE(IsMounted(image_));
  EXPECT_TRUE(ReadFile(image_) == data);
  // cp expects a short read at the end of the file.
  const std::string copy = Path("t.copy");
  int status = 0;
  const std::string output = RunCommand("cp '" + image_ + "' '" + copy + "'", &status);
  ASSERT_EQ(status, 0) << output;
  EXPECT_TRUE(ReadFile(copy) == data);
  EXPECT_TRUE(ReadFile(mountpoint) == data);

  ASSERT_NO_FATAL_FAILURE(DeleteExport("export-mp"));
  EXPECT_FALSE(IsMounted(mountpoint));
  EXPECT_EQ(SizeOf(mountpoint), 0u);  // 308: "virtual size: 0 B (0 bytes)"
  ASSERT_NO_FATAL_FAILURE(DeleteExport("export-img"));
  EXPECT_FALSE(IsMounted(image_));
  EXPECT_TRUE(ReadFile(image_) == data);
}

// 308's chmod checks and "Writable export": a read-only export is mounted read-only, as QSD
// mounts it, so every change fails with EROFS, also for root (which permission bits would not
// stop), and its mode stays 0400.
TEST_F(Iotest308Test, ReadOnlyExportRefusesEveryChangeWithErofs) {
  const std::string data = Pattern(kImageBytes, 1);
  ASSERT_NO_FATAL_FAILURE(WriteWholeFile(image_, data));
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const std::string mountpoint = dir_.File("t.fuse");
  ASSERT_EQ(AddReadOnlyExport("export-mp", "disk0", mountpoint), "");

  EXPECT_EQ(ModeOf(mountpoint), 0400u);
  EXPECT_EQ(ChmodErrno(mountpoint, 0600), EROFS);  // chmod u+w
  EXPECT_EQ(ModeOf(mountpoint), 0400u);
  EXPECT_EQ(ChmodErrno(mountpoint, 0500), EROFS);  // chmod u+x
  EXPECT_EQ(ModeOf(mountpoint), 0400u);
  EXPECT_EQ(OpenErrno(mountpoint, O_RDWR), EROFS);  // "Could not open ...: Read-only file system"
  EXPECT_EQ(OpenErrno(mountpoint, O_WRONLY), EROFS);
  EXPECT_EQ(::access(mountpoint.c_str(), W_OK), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::truncate(mountpoint.c_str(), 0), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(::utimensat(AT_FDCWD, mountpoint.c_str(), nullptr, 0), -1);
  EXPECT_EQ(errno, EROFS);
  struct statvfs fs {};
  ASSERT_EQ(::statvfs(mountpoint.c_str(), &fs), 0) << std::strerror(errno);
  EXPECT_NE(fs.f_flag & ST_RDONLY, 0u);

  // "But here it should work": the writable export of the same node takes the write, and the
  // read-only one shows it.
  const std::string written = Pattern(65536, 42);
  const int fd = ::open(mountpoint_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::pwrite(fd, written.data(), written.size(), kMiB),
            static_cast<ssize_t>(written.size()));
  ::close(fd);
  EXPECT_TRUE(ReadAt(mountpoint, kMiB, written.size()) == written);
  EXPECT_TRUE(ReadAt(mountpoint, 0, 4096) == data.substr(0, 4096));
  EXPECT_EQ(SizeOf(image_), kImageBytes);
}

// A writable export of a read-only node is refused with QSD 7.2's text.
TEST_F(Iotest308Test, WritableExportOfAReadOnlyNodeIsRefused) {
  const std::string read_only = dir_.File("ro.img", kMiB);
  ASSERT_NO_FATAL_FAILURE(StartWithClient(
      {"--blockdev", "driver=file,node-name=ro0,read-only=on,filename=" + read_only}));
  const std::string mountpoint = dir_.File("ro-mnt");
  json reply = client_->Execute("block-export-add", FuseExport("export-rw", "ro0", mountpoint));
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply), "Cannot export read-only node as writable");
  EXPECT_FALSE(IsMounted(mountpoint));
  ASSERT_EQ(AddReadOnlyExport("export-rw", "ro0", mountpoint), "");
  EXPECT_EQ(SizeOf(mountpoint), kMiB);
  EXPECT_EQ(ModeOf(mountpoint), 0400u);
}

// tests/fuse-allow-other's run_permission_test: what chmod may change, and what the user nobody
// may do, for one allow-other value. Without allow_other the kernel keeps everyone but the
// mounting user out, so the export refuses to grant the group or others anything (EPERM).
class Iotest308AllowOtherTest : public Iotest308Test {
 protected:
  void SetUp() override {
    Iotest308Test::SetUp();
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as nobody";
    const passwd* entry = ::getpwnam("nobody");
    if (entry == nullptr) GTEST_SKIP() << "no user nobody";
    nobody_ = *entry;
  }

  void CheckPermissions(const std::string& allow_other, bool others_allowed) {
    ASSERT_NO_FATAL_FAILURE(WriteWholeFile(image_, Pattern(kImageBytes, 3)));
    ASSERT_NO_FATAL_FAILURE(StartWithClient());
    // nobody must get to the mountpoint (mkdtemp made the directory 0700).
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    const std::string mountpoint = dir_.File("fuse-export");
    json spec = FuseExport("export", "disk0", mountpoint);
    spec["allow-other"] = allow_other;
    ASSERT_EQ(Success(client_->Execute("block-export-add", spec)), "");

    EXPECT_EQ(ChmodErrno(mountpoint, 0), 0);  // removing every permission always works
    EXPECT_EQ(ModeOf(mountpoint), 0u);
    EXPECT_EQ(ChmodErrno(mountpoint, 0400), 0);  // u+r always works
    EXPECT_EQ(ModeOf(mountpoint), 0400u);
    EXPECT_EQ(ChmodErrno(mountpoint, 0444), others_allowed ? 0 : EPERM);
    EXPECT_EQ(ModeOf(mountpoint), others_allowed ? 0444u : 0400u);

    const std::string head = ReadAt(mountpoint, 0, 16);
    const char* path = mountpoint.c_str();
    auto stat_mode = [path] {
      struct stat st;
      return ::stat(path, &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -errno;
    };
    auto read_head = [path, &head] {
      const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) return -errno;
      char bytes[16];
      const ssize_t n = ::pread(fd, bytes, sizeof(bytes), 0);
      ::close(fd);
      return n == 16 && std::memcmp(bytes, head.data(), 16) == 0 ? 0 : -EIO;
    };
    if (!others_allowed) {
      EXPECT_EQ(AsNobody(nobody_, read_head), -EACCES);
      EXPECT_EQ(AsNobody(nobody_, stat_mode), -EACCES);
      return;
    }
    EXPECT_EQ(AsNobody(nobody_, read_head), 0);
    EXPECT_EQ(AsNobody(nobody_, stat_mode), 0444);
    EXPECT_EQ(ChmodErrno(mountpoint, 0440), 0);  // chmod o-r
    EXPECT_EQ(AsNobody(nobody_, read_head), -EACCES);
    EXPECT_EQ(AsNobody(nobody_, stat_mode), 0440);
  }

  passwd nobody_{};
};

TEST_F(Iotest308AllowOtherTest, OffKeepsOthersOutAndRefusesTheirPermissionBits) {
  CheckPermissions("off", /*others_allowed=*/false);
}

TEST_F(Iotest308AllowOtherTest, OnLetsOthersInAsTheModeSays) {
  CheckPermissions("on", /*others_allowed=*/true);
}

// fuse-allow-other: auto behaves as on where allow_other works (here: root).
TEST_F(Iotest308AllowOtherTest, AutoIsOnForRoot) {
  CheckPermissions("auto", /*others_allowed=*/true);
}

// 308 "Try growing non-growable export": dd past the end fails with EIO ("dd: error writing
// ...: Input/output error" in 308.out) and the size stays,
// in the mount, the image and QMP. A write across the end is cut short there, as in QSD.
TEST_F(Iotest308Test, FixedSizeExportStopsAtItsEnd) {
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const int fd = ::open(mountpoint_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const char zero = 0;
  EXPECT_EQ(::pwrite(fd, &zero, 1, kImageBytes), -1);
  EXPECT_EQ(errno, EIO);
  const std::string tail = Pattern(8192, 3);
  EXPECT_EQ(::pwrite(fd, tail.data(), tail.size(), kImageBytes - 4096), 4096);
  ::close(fd);
  EXPECT_EQ(SizeOf(mountpoint_), kImageBytes);
  EXPECT_EQ(SizeOf(image_), kImageBytes);
  EXPECT_EQ(VirtualSize("disk0"), kImageBytes);
  EXPECT_TRUE(ReadAt(image_, kImageBytes - 4096, 4096) == tail.substr(0, 4096));
}

// 308 "Try growing growable export" and "Shrink export": the export deleted and added again
// with growable=on takes a write past its end; truncate brings it back. The mount, the image and
// QMP agree on the size each time (QMP asked first: a passthrough write reaches the image
// without bexd seeing it).
TEST_F(Iotest308Test, GrowableExportGrowsAndTruncateShrinksItBack) {
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  ASSERT_NO_FATAL_FAILURE(DeleteExport("exp0"));
  json spec = FuseExport("exp0", "disk0", mountpoint_);
  spec["growable"] = true;
  ASSERT_EQ(Success(client_->Execute("block-export-add", spec)), "");

  const std::string data = Pattern(65536, 9);
  const int fd = ::open(mountpoint_.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::pwrite(fd, data.data(), data.size(), kImageBytes), static_cast<ssize_t>(data.size()));
  ::close(fd);
  const uint64_t grown = kImageBytes + data.size();
  EXPECT_EQ(VirtualSize("disk0"), grown);
  EXPECT_EQ(SizeOf(image_), grown);
  EXPECT_EQ(SizeOf(mountpoint_), grown);
  EXPECT_TRUE(ReadAt(mountpoint_, kImageBytes, data.size()) == data);

  ASSERT_EQ(::truncate(mountpoint_.c_str(), kImageBytes), 0) << std::strerror(errno);
  EXPECT_EQ(SizeOf(mountpoint_), kImageBytes);
  EXPECT_EQ(SizeOf(image_), kImageBytes);
  EXPECT_EQ(VirtualSize("disk0"), kImageBytes);
}

// A size change by QMP shows through the mount at once (QSD leaves the kernel's cached size for
// up to its 1 s attribute timeout), and one through the mount shows in QMP.
TEST_F(Iotest308Test, BlockResizeAndTruncateAgreeEverywhere) {
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  for (uint64_t size : {32 * kMiB, 2 * kMiB, 32 * kMiB}) {
    // The stat before caches the old size in the kernel.
    ASSERT_NE(SizeOf(mountpoint_), size);
    ASSERT_EQ(Success(client_->Execute("block_resize", {{"node-name", "disk0"}, {"size", size}})),
              "");
    EXPECT_EQ(SizeOf(mountpoint_), size);
  }
  EXPECT_EQ(SizeOf(image_), 32 * kMiB);
  EXPECT_EQ(VirtualSize("disk0"), 32 * kMiB);

  ASSERT_EQ(::truncate(mountpoint_.c_str(), 4 * kMiB), 0) << std::strerror(errno);
  EXPECT_EQ(VirtualSize("disk0"), 4 * kMiB);
  EXPECT_EQ(SizeOf(image_), 4 * kMiB);
  EXPECT_EQ(SizeOf(mountpoint_), 4 * kMiB);
}

// 308 "Writing zeroes while unmapping": qemu-io's `write -zu` over the whole export is
// fallocate(PUNCH_HOLE | KEEP_SIZE), on a raw node over an inline file child. It reads back as
// zeroes through the mount and, after quit, in the image. With discard=unmap on the raw node the
// image is a hole from end to end; without (QEMU's default, discard=ignore) it stays allocated.
class Iotest308PunchHoleTest : public Iotest308Test {
 protected:
  static constexpr uint64_t kSize = 4 * kMiB;

  void PunchTheWholeExport(bool unmap) {
    const std::string image = Path("t.raw");
    ASSERT_NO_FATAL_FAILURE(WriteWholeFile(image, Pattern(kSize, 11)));
    ASSERT_NO_FATAL_FAILURE(StartWithClient());
    json node = {{"driver", "raw"},
                 {"node-name", "node-format"},
                 {"file", {{"driver", "file"}, {"filename", image}}}};
    if (unmap) node["discard"] = "unmap";
    ASSERT_EQ(Success(client_->Execute("blockdev-add", node)), "");
    const std::string mountpoint = dir_.File("t.fuse");
    ASSERT_EQ(Success(client_->Execute("block-export-add",
                                       FuseExport("export", "node-format", mountpoint))),
              "");
    const blkcnt_t blocks_before = StatOf(image).st_blocks;

    const int fd = ::open(mountpoint.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kSize), 0)
        << std::strerror(errno);
    ::close(fd);
    const std::string zeroes(kSize, '\0');
    EXPECT_TRUE(ReadAt(mountpoint, 0, kSize) == zeroes) << "the mount shows other bytes";
    EXPECT_EQ(SizeOf(mountpoint), kSize);

    ASSERT_EQ(Success(client_->Execute("quit")), "");
    EXPECT_EQ(daemon_->Wait(), 0) << ReadFile(log_);
    EXPECT_FALSE(IsMounted(mountpoint));
    EXPECT_TRUE(ReadFile(image) == zeroes) << "the image holds other bytes";
    EXPECT_EQ(SizeOf(image), kSize);
    const struct stat after = StatOf(image);
    if (unmap) {
      // A punched hole is a hole to SEEK_DATA on every file system (unlike zeroed extents,
      // which ext4 may report either way).
      EXPECT_LE(after.st_blocks * 512, blocks_before * 512 - static_cast<blkcnt_t>(kSize));
      const int image_fd = ::open(image.c_str(), O_RDONLY | O_CLOEXEC);
      ASSERT_GE(image_fd, 0);
      EXPECT_EQ(::lseek(image_fd, 0, SEEK_DATA), -1);
      EXPECT_EQ(errno, ENXIO);
      ::close(image_fd);
    } else {
      EXPECT_GE(after.st_blocks, blocks_before);
    }
  }
};

TEST_F(Iotest308PunchHoleTest, WithoutUnmapTheRangeReadsZeroesAndStaysAllocated) {
  PunchTheWholeExport(/*unmap=*/false);
}

TEST_F(Iotest308PunchHoleTest, WithDiscardUnmapTheImageBecomesAHole) {
  PunchTheWholeExport(/*unmap=*/true);
}

// fallocate(ZERO_RANGE) through the mount: the range reads back as zeroes, the rest is kept.
TEST_F(Iotest308Test, ZeroRangeReadsBackZeroesAndKeepsTheRest) {
  std::string expected = Pattern(kImageBytes, 5);
  ASSERT_NO_FATAL_FAILURE(WriteWholeFile(image_, expected));
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const int fd = ::open(mountpoint_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(::fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, kMiB, 2 * kMiB), 0)
      << std::strerror(errno);
  ::close(fd);
  std::fill(expected.begin() + kMiB, expected.begin() + 3 * kMiB, '\0');
  EXPECT_TRUE(ReadAt(mountpoint_, 0, kImageBytes) == expected) << "the mount shows other bytes";
  EXPECT_EQ(SizeOf(mountpoint_), kImageBytes);
  EXPECT_TRUE(ReadFile(image_) == expected) << "the image holds other bytes";
}

// "Remove export" with a file open: QSD removes a FUSE export whatever is open; bexd's safe mode
// waits for the last close (docs/control.md), then removes it and announces it as QSD does.
TEST_F(Iotest308Test, DeleteAfterTheLastCloseAnnouncesTheExport) {
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const int fd = ::open(mountpoint_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  json reply = client_->Execute("block-export-del", {{"id", "exp0"}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply), "export 'exp0' is in use; close it first or use mode=hard");
  ::close(fd);
  // The kernel sends RELEASE after close() has returned.
  EXPECT_TRUE(WaitFor([&] {
    reply = client_->Execute("block-export-del", {{"id", "exp0"}});
    return Success(reply).empty();
  })) << reply.dump();
  std::optional<json> event = client_->WaitEvent("BLOCK_EXPORT_DELETED");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ((*event)["data"], json({{"id", "exp0"}}));
  EXPECT_FALSE(IsMounted(mountpoint_));
  EXPECT_EQ(SizeOf(mountpoint_), 0u);
  EXPECT_EQ(client_->Execute("query-block-exports")["return"], json::array());
}

// 308 "Tear down" with a file still open on an export: quit announces SHUTDOWN and every export
// before its reply, the daemon exits 0 with nothing mounted, what was written is in the image,
// and the open descriptor no longer reaches anything.
// tests/fuse-mmap-shared: a writable export mapped MAP_SHARED shows the image and writes back
// what is stored into the mapping (the kernel allows shared maps of a direct-I/O file only when
// INIT negotiated FUSE_DIRECT_IO_ALLOW_MMAP).
TEST_F(Iotest308Test, SharedMappingReadsAndWritesTheImage) {
  const std::string before = Pattern(kImageBytes, 23);
  ASSERT_NO_FATAL_FAILURE(WriteWholeFile(image_, before));
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const int fd = ::open(mountpoint_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  void* map = ::mmap(nullptr, kImageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  auto* bytes = static_cast<char*>(map);
  EXPECT_TRUE(std::string(bytes, kImageBytes) == before);
  const std::string after = Pattern(kImageBytes, 42);
  std::memcpy(bytes, after.data(), kImageBytes);
  EXPECT_EQ(::msync(map, kImageBytes, MS_SYNC), 0) << std::strerror(errno);
  ::munmap(map, kImageBytes);
  EXPECT_TRUE(ReadAt(image_, 0, kImageBytes) == after);
  EXPECT_TRUE(ReadAt(mountpoint_, 0, kImageBytes) == after);
}

TEST_F(Iotest308Test, QuitWithAFileOpenRemovesEveryExport) {
  ASSERT_NO_FATAL_FAILURE(StartWithClient());
  const std::string second = dir_.File("t.fuse");
  ASSERT_EQ(AddReadOnlyExport("export-mp", "disk0", second), "");
  const int fd = ::open(mountpoint_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, "bexd", 4, 0), 4);

  client_->SendRaw(R"({"execute": "quit"})");
  std::optional<json> shutdown = client_->ReadMessage();
  ASSERT_TRUE(shutdown.has_value());
  EXPECT_EQ((*shutdown)["event"], "SHUTDOWN");
  std::set<std::string> deleted;
  for (int i = 0; i < 2; ++i) {
    std::optional<json> event = client_->ReadMessage();
    ASSERT_TRUE(event.has_value()) << i;
    EXPECT_EQ((*event)["event"], "BLOCK_EXPORT_DELETED");
    deleted.insert((*event)["data"]["id"].get<std::string>());
  }
  EXPECT_EQ(deleted, std::set<std::string>({"exp0", "export-mp"}));
  std::optional<json> reply = client_->ReadMessage();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(*reply, json({{"return", json::object()}}));
  EXPECT_EQ(daemon_->Wait(), 0) << ReadFile(log_);
  EXPECT_FALSE(IsMounted(mountpoint_));
  EXPECT_FALSE(IsMounted(second));

  char byte = 0;
  EXPECT_EQ(::pread(fd, &byte, 1, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  ::close(fd);
  EXPECT_EQ(ReadAt(image_, 0, 4), "bexd");
}

}  // namespace
}  // namespace bexd::testing
