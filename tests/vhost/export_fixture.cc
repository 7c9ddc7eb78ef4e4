// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/vhost/export_fixture.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "block/open.h"
#include "block/options.h"
#include "export/options.h"
#include "export/start.h"

namespace bexd::test::vhost {

void VhostExportTest::SetUp() {
  char templ[] = "/tmp/bexd-vhost-test-XXXXXX";
  ASSERT_NE(mkdtemp(templ), nullptr);
  dir_ = templ;
  image_ = dir_ + "/disk.img";
  socket_ = dir_ + "/vfs.sock";
  pattern_.resize(kImageSize);
  for (size_t i = 0; i < pattern_.size(); ++i) {
    pattern_[i] = static_cast<unsigned char>((i * 131 + i / 4096) & 0xff);
  }
  int fd = open(image_.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, pattern_.data(), pattern_.size(), 0), static_cast<ssize_t>(pattern_.size()));
  close(fd);
}

void VhostExportTest::TearDown() {
  if (export_) export_->Stop();
  export_.reset();
  std::filesystem::remove_all(dir_);
}

void VhostExportTest::StartExport(uint32_t request_queues, bool writable,
                                  std::optional<uint64_t> poll_max_ns) {
  block::BlockdevOptions blockdev;
  blockdev.node_name = "disk0";
  blockdev.read_only = !writable;
  block::FileOptions file;
  file.filename = image_;
  file.aio = block::AioMode::kNative;
  blockdev.driver = file;
  absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(blockdev);
  ASSERT_TRUE(node.ok()) << node.status();

  exports::ExportOptions options;
  options.id = "vfs0";
  options.node_name = "disk0";
  options.writable = writable;
  exports::VhostUserFsExportOptions vhost;
  vhost.socket_path = socket_;
  vhost.tag = "images";
  vhost.num_request_queues = request_queues;
  if (poll_max_ns.has_value()) vhost.poll_max_ns = *poll_max_ns;
  options.transport = vhost;
  absl::StatusOr<std::unique_ptr<exports::Export>> started = exports::StartExport(options, *node);
  ASSERT_TRUE(started.ok()) << started.status();
  export_ = std::move(*started);
}

FrontendOptions VhostExportTest::Options(uint32_t request_queues) const {
  FrontendOptions options;
  options.socket_path = socket_;
  options.request_queues = request_queues;
  return options;
}

std::unique_ptr<Frontend> VhostExportTest::ConnectAndInit(const FrontendOptions& options) {
  absl::StatusOr<std::unique_ptr<Frontend>> frontend = Frontend::Connect(options);
  EXPECT_TRUE(frontend.ok()) << frontend.status();
  if (!frontend.ok()) return nullptr;
  absl::StatusOr<struct fuse_init_out> init = (*frontend)->Init();
  EXPECT_TRUE(init.ok()) << init.status();
  if (!init.ok()) return nullptr;
  EXPECT_EQ(init->major, FUSE_KERNEL_VERSION);
  return std::move(*frontend);
}

uint64_t VhostExportTest::LookupImage(Frontend& frontend, uint32_t ring) {
  const char name[] = "disk0";  // the node name: no file-name option given
  absl::StatusOr<FuseReply> reply =
      frontend.Fuse(ring, FUSE_LOOKUP, FUSE_ROOT_ID, name, sizeof(name));
  EXPECT_TRUE(reply.ok()) << reply.status();
  if (!reply.ok()) return 0;
  EXPECT_EQ(reply->header.error, 0);
  struct fuse_entry_out entry = {};
  EXPECT_GE(reply->payload.size(), sizeof(entry));
  memcpy(&entry, reply->payload.data(), std::min(sizeof(entry), reply->payload.size()));
  EXPECT_EQ(entry.attr.size, kImageSize);
  return entry.nodeid;
}

uint64_t VhostExportTest::OpenImage(Frontend& frontend, uint64_t node_id, uint32_t ring) {
  struct fuse_open_in in = {};
  in.flags = O_RDWR;
  absl::StatusOr<FuseReply> reply = frontend.Fuse(ring, FUSE_OPEN, node_id, &in, sizeof(in));
  EXPECT_TRUE(reply.ok()) << reply.status();
  if (!reply.ok()) return 0;
  EXPECT_EQ(reply->header.error, 0);
  struct fuse_open_out out = {};
  memcpy(&out, reply->payload.data(), std::min(sizeof(out), reply->payload.size()));
  return out.fh;
}

std::vector<unsigned char> VhostExportTest::ReadBacking(uint64_t offset, size_t length) const {
  std::vector<unsigned char> data(length);
  int fd = open(image_.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(pread(fd, data.data(), length, static_cast<off_t>(offset)),
            static_cast<ssize_t>(length));
  close(fd);
  return data;
}

}  // namespace bexd::test::vhost
