// SPDX-License-Identifier: GPL-2.0-or-later
// Size changes from a guest over vhost-user-fs, sent the way Linux's virtio-fs driver sends them
// (FUSE_ATOMIC_O_TRUNC negotiated, so `cp`'s O_TRUNC arrives in OPEN): a fixed-size export keeps
// its size and data past what is written and refuses explicit size changes; a growable one is
// emptied by O_TRUNC and may be resized. The exports are started from the options a user gives.
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fuse.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "block/open.h"
#include "cli/config/blockdev_schema.h"
#include "cli/config/export_schema.h"
#include "cli/config/keyval.h"
#include "export/start.h"
#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

constexpr uint64_t kTiB = uint64_t{1} << 40;
constexpr uint32_t kTruncatingOpen = O_WRONLY | O_TRUNC | O_LARGEFILE;
constexpr size_t kWriteChunk = 128 * 1024;

class VhostSizeChangeTest : public VhostExportTest {
 protected:
  // --blockdev driver=file,... --export type=vhost-user-fs,...,writable=on<extra>
  void StartWith(const std::string& extra) {
    absl::StatusOr<nlohmann::json> blockdev =
        cli::ParseKeyval("driver=file,node-name=disk0,filename=" + image_);
    ASSERT_TRUE(blockdev.ok()) << blockdev.status();
    absl::StatusOr<block::BlockdevOptions> node_options =
        cli::ParseBlockdevOptions(*blockdev, cli::Syntax::kKeyval);
    ASSERT_TRUE(node_options.ok()) << node_options.status();
    absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(*node_options);
    ASSERT_TRUE(node.ok()) << node.status();
    absl::StatusOr<nlohmann::json> keyval = cli::ParseKeyval(
        "type=vhost-user-fs,id=vfs0,node-name=disk0,addr.type=unix,addr.path=" + socket_ +
        ",tag=images,writable=on" + extra);
    ASSERT_TRUE(keyval.ok()) << keyval.status();
    absl::StatusOr<cli::ExportSpec> spec = cli::ParseExportOptions(*keyval, cli::Syntax::kKeyval);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<std::unique_ptr<exports::Export>> started =
        exports::StartExport(spec->options, *node);
    ASSERT_TRUE(started.ok()) << started.status();
    export_ = std::move(*started);
  }

  // Connects and negotiates INIT with the flags Linux offers that matter here.
  void ConnectAsLinux() {
    absl::StatusOr<std::unique_ptr<Frontend>> frontend = Frontend::Connect(Options());
    ASSERT_TRUE(frontend.ok()) << frontend.status();
    frontend_ = std::move(*frontend);
    struct fuse_init_in in = {};
    in.major = FUSE_KERNEL_VERSION;
    in.minor = FUSE_KERNEL_MINOR_VERSION;
    in.max_readahead = 128 * 1024;
    in.flags = FUSE_ASYNC_READ | FUSE_ATOMIC_O_TRUNC | FUSE_BIG_WRITES | FUSE_ASYNC_DIO |
               FUSE_MAX_PAGES | FUSE_INIT_EXT;
    absl::StatusOr<FuseReply> reply = frontend_->Fuse(1, FUSE_INIT, 0, &in, sizeof(in));
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->header.error, 0);
    struct fuse_init_out out = {};
    std::memcpy(&out, reply->payload.data(), std::min(sizeof(out), reply->payload.size()));
    ASSERT_TRUE(out.flags & FUSE_ATOMIC_O_TRUNC) << "the export must take O_TRUNC in OPEN";
    node_ = LookupImage(*frontend_);
    ASSERT_EQ(node_, 2u);
  }

  FuseReply Request(uint32_t opcode, const void* args, size_t size, const void* data = nullptr,
                    size_t data_size = 0) {
    absl::StatusOr<FuseReply> reply =
        frontend_->Fuse(1, opcode, node_, args, size, data, data_size);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : FuseReply{};
  }

  uint64_t PresentedSize() {
    struct fuse_getattr_in in = {};
    FuseReply reply = Request(FUSE_GETATTR, &in, sizeof(in));
    EXPECT_EQ(reply.header.error, 0);
    struct fuse_attr_out out = {};
    std::memcpy(&out, reply.payload.data(), std::min(sizeof(out), reply.payload.size()));
    return out.attr.size;
  }

  int Setattr(uint64_t size) {
    struct fuse_setattr_in in = {};
    in.valid = FATTR_SIZE;
    in.size = size;
    return -Request(FUSE_SETATTR, &in, sizeof(in)).header.error;
  }

  int Fallocate(uint64_t offset, uint64_t length, uint32_t mode) {
    struct fuse_fallocate_in in = {};
    in.fh = fh_;
    in.offset = offset;
    in.length = length;
    in.mode = mode;
    return -Request(FUSE_FALLOCATE, &in, sizeof(in)).header.error;
  }

  // `cp source /mnt/disk0` in the guest: OPEN with O_TRUNC, then WRITEs from offset 0, RELEASE.
  void CopyIn(const std::vector<unsigned char>& source, uint64_t size_after_open) {
    struct fuse_open_in open = {};
    open.flags = kTruncatingOpen;
    FuseReply opened = Request(FUSE_OPEN, &open, sizeof(open));
    ASSERT_EQ(opened.header.error, 0);
    struct fuse_open_out open_out = {};
    std::memcpy(&open_out, opened.payload.data(),
                std::min(sizeof(open_out), opened.payload.size()));
    EXPECT_EQ(PresentedSize(), size_after_open);
    for (size_t at = 0; at < source.size(); at += kWriteChunk) {
      const size_t n = std::min(kWriteChunk, source.size() - at);
      struct fuse_write_in write = {};
      write.fh = open_out.fh;
      write.offset = at;
      write.size = static_cast<uint32_t>(n);
      write.flags = kTruncatingOpen;
      FuseReply written = Request(FUSE_WRITE, &write, sizeof(write), source.data() + at, n);
      ASSERT_EQ(written.header.error, 0) << "at " << at;
      struct fuse_write_out write_out = {};
      std::memcpy(&write_out, written.payload.data(),
                  std::min(sizeof(write_out), written.payload.size()));
      ASSERT_EQ(write_out.size, n) << "at " << at;
    }
    struct fuse_release_in release = {};
    release.fh = open_out.fh;
    EXPECT_EQ(Request(FUSE_RELEASE, &release, sizeof(release)).header.error, 0);
  }

  uint64_t BackingSize() const {
    struct stat st = {};
    EXPECT_EQ(stat(image_.c_str(), &st), 0);
    return static_cast<uint64_t>(st.st_size);
  }

  std::vector<unsigned char> Source() const {
    std::vector<unsigned char> source((1 << 20) + 4097);
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 7 + 1);
    return source;
  }

  std::unique_ptr<Frontend> frontend_;
  uint64_t node_ = 0;
  uint64_t fh_ = 1;
};

TEST_F(VhostSizeChangeTest, CopyIntoAFixedSizeExportKeepsItsSizeAndTail) {
  ASSERT_NO_FATAL_FAILURE(StartWith(""));
  ASSERT_NO_FATAL_FAILURE(ConnectAsLinux());
  const std::vector<unsigned char> source = Source();
  ASSERT_NO_FATAL_FAILURE(CopyIn(source, kImageSize));
  EXPECT_EQ(PresentedSize(), kImageSize);
  frontend_.reset();
  export_->Stop();
  std::vector<unsigned char> expected = source;
  expected.insert(expected.end(), pattern_.begin() + source.size(), pattern_.end());
  ASSERT_EQ(BackingSize(), kImageSize);
  EXPECT_TRUE(ReadBacking(0, kImageSize) == expected) << "the backing file holds other bytes";
}

TEST_F(VhostSizeChangeTest, CopyIntoAGrowableExportLeavesExactlyTheSource) {
  ASSERT_NO_FATAL_FAILURE(StartWith(",growable=on"));
  ASSERT_NO_FATAL_FAILURE(ConnectAsLinux());
  const std::vector<unsigned char> source = Source();
  ASSERT_NO_FATAL_FAILURE(CopyIn(source, 0));
  EXPECT_EQ(PresentedSize(), source.size());
  frontend_.reset();
  export_->Stop();
  ASSERT_EQ(BackingSize(), source.size());
  EXPECT_TRUE(ReadBacking(0, source.size()) == source) << "the backing file holds other bytes";
}

// A guest on a writable, fixed-size export cannot set the image to any size it likes.
TEST_F(VhostSizeChangeTest, FixedSizeExportRefusesSizeChanges) {
  ASSERT_NO_FATAL_FAILURE(StartWith(""));
  ASSERT_NO_FATAL_FAILURE(ConnectAsLinux());
  EXPECT_EQ(Setattr(kTiB), EPERM);
  EXPECT_EQ(Setattr(0), EPERM);
  EXPECT_EQ(Setattr(kImageSize - 4096), EPERM);
  EXPECT_EQ(Setattr(kImageSize), 0);  // the size it has: no change
  EXPECT_EQ(Fallocate(kImageSize, 65536, 0), ENOSPC);
  EXPECT_EQ(Fallocate(kImageSize - 4096, 8192, FALLOC_FL_ZERO_RANGE), ENOSPC);
  EXPECT_EQ(PresentedSize(), kImageSize);
  EXPECT_EQ(BackingSize(), kImageSize);
  EXPECT_TRUE(ReadBacking(0, kImageSize) == pattern_);
}

TEST_F(VhostSizeChangeTest, GrowableExportMayBeResized) {
  ASSERT_NO_FATAL_FAILURE(StartWith(",growable=on"));
  ASSERT_NO_FATAL_FAILURE(ConnectAsLinux());
  EXPECT_EQ(Setattr(1 << 20), 0);
  EXPECT_EQ(BackingSize(), 1u << 20);
  EXPECT_EQ(Fallocate(1 << 20, 65536, 0), 0);
  EXPECT_EQ(BackingSize(), (1u << 20) + 65536);
  EXPECT_EQ(PresentedSize(), (1u << 20) + 65536);
  EXPECT_TRUE(ReadBacking(0, 1 << 20) ==
              std::vector<unsigned char>(pattern_.begin(), pattern_.begin() + (1 << 20)));
}

}  // namespace
}  // namespace bexd::test::vhost
