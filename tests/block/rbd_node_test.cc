// SPDX-License-Identifier: GPL-2.0-or-later
// The rbd driver against a real single-node Ceph cluster (tests/support/ceph-cluster.sh): open
// errors, every operation checked in the image through `rbd export`, resizing, the exclusive-lock
// rule against a second bexd node and against qemu-storage-daemon, a cephx key from a secret,
// monitors from `server`, and requests failing with EIO while the OSD does not answer.
#include <absl/strings/escaping.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "block/open.h"
#include "block/objects.h"
#include "tests/block/file_fixture.h"
#include "tests/block/queue_runner.h"
#include "tests/support/ceph_cluster.h"
#include "tests/support/run_command.h"

namespace bexd::block {
namespace {

using bexd::testing::CephCluster;
using bexd::testing::RunCommand;
using testing::MakeQueue;
using testing::Pattern;
using testing::ReadAt;
using testing::RunOne;
using testing::WriteAt;

constexpr uint64_t kMiB = 1 << 20;

class RbdNodeTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCluster(CephCluster::Store::kMemstore); }

  void StartCluster(CephCluster::Store store) {
    std::string reason = CephCluster::SkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    cluster_ = std::make_unique<CephCluster>(store);
    ASSERT_TRUE(cluster_->ok()) << cluster_->error();
  }

  RbdOptions Options(const std::string& image) const {
    RbdOptions options;
    options.pool = "rbd";
    options.image = image;
    options.conf = cluster_->conf();
    return options;
  }

  static absl::StatusOr<std::shared_ptr<BlockNode>> Open(const RbdOptions& options,
                                                         bool read_only = false,
                                                         const std::string& name = "rbd0") {
    BlockdevOptions blockdev;
    blockdev.node_name = name;
    blockdev.read_only = read_only;
    blockdev.driver = options;
    return OpenBlockNode(blockdev);
  }

  static std::shared_ptr<BlockNode> OpenOrFail(const RbdOptions& options, bool read_only = false,
                                               const std::string& name = "rbd0") {
    absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(options, read_only, name);
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *node : nullptr;
  }

  std::string Image(const std::string& spec) const { return cluster_->ExportImage(spec); }

  std::unique_ptr<CephCluster> cluster_;
};

std::string Message(const absl::StatusOr<std::shared_ptr<BlockNode>>& node) {
  return node.ok() ? "(opened)" : std::string(node.status().message());
}

std::string Bytes(const std::vector<unsigned char>& data) {
  return std::string(data.begin(), data.end());
}

TEST_F(RbdNodeTest, OpenErrorsNameTheNodeAndTheCause) {
  ASSERT_TRUE(cluster_->CreateImage("img", 4 * kMiB));
  RbdOptions options = Options("img");

  RbdOptions no_pool = options;
  no_pool.pool = "nopool";
  EXPECT_EQ(Message(Open(no_pool)), "node 'rbd0': pool 'nopool' does not exist");

  RbdOptions no_image = options;
  no_image.image = "nope";
  EXPECT_EQ(Message(Open(no_image)), "node 'rbd0': image 'rbd/nope' does not exist");

  RbdOptions snapshot = options;
  snapshot.snapshot = "nosnap";
  EXPECT_EQ(Message(Open(snapshot)),
            "node 'rbd0': rbd snapshots are read-only (give read-only=on)");
  EXPECT_EQ(Message(Open(snapshot, /*read_only=*/true)),
            "node 'rbd0': image 'rbd/img@nosnap' or its snapshot does not exist");

  RbdOptions no_namespace = options;
  no_namespace.name_space = "ns1";
  EXPECT_EQ(Message(Open(no_namespace)),
            "node 'rbd0': namespace 'ns1' does not exist in pool 'rbd'");

  RbdOptions no_secret = options;
  no_secret.key_secret = "nosecret";
  EXPECT_EQ(Message(Open(no_secret)), "node 'rbd0': key-secret: No secret with id 'nosecret'");

  RbdOptions no_conf = options;
  no_conf.conf = cluster_->dir() + "/missing.conf";
  EXPECT_EQ(Message(Open(no_conf)), "node 'rbd0': cannot read the Ceph configuration '" +
                                        cluster_->dir() +
                                        "/missing.conf': No such file or directory");
}

TEST_F(RbdNodeTest, ImagesInANamespaceOpen) {
  int status = -1;
  std::string output = cluster_->Rbd("namespace create rbd/ns1", &status);
  ASSERT_EQ(status, 0) << output;
  output = cluster_->Rbd("create --size 1M rbd/ns1/img", &status);
  ASSERT_EQ(status, 0) << output;
  RbdOptions options = Options("img");
  options.name_space = "ns1";
  std::shared_ptr<BlockNode> node = OpenOrFail(options);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->size(), kMiB);
  EXPECT_EQ(node->filename(), "rbd:rbd/ns1/img");
  auto queue = MakeQueue(*node);
  std::vector<unsigned char> data = Pattern(4096, 7);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 8192), 4096);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  queue.reset();
  node.reset();
  EXPECT_EQ(Image("rbd/ns1/img").substr(8192, 4096), Bytes(data));
}

// Every operation, checked in the image itself.
TEST_F(RbdNodeTest, EveryOperationReachesTheImage) {
  const std::string name = "img";
  ASSERT_TRUE(cluster_->CreateImage(name, 16 * kMiB));
  RbdOptions options = Options(name);
  options.discard = DiscardMode::kUnmap;
  std::shared_ptr<BlockNode> node = OpenOrFail(options);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->size(), 16 * kMiB);
  EXPECT_EQ(node->driver_name(), "rbd");
  EXPECT_EQ(node->filename(), "rbd:rbd/" + name);
  auto queue = MakeQueue(*node);
  std::vector<unsigned char> model(16 * kMiB, 0);

  // A 1 MiB write in three pieces at an odd offset, a FUA write, a write across objects.
  std::vector<unsigned char> data = Pattern(kMiB, 1);
  struct iovec pieces[3] = {
      {data.data(), 1000}, {data.data() + 1000, 300000}, {data.data() + 301000, kMiB - 301000}};
  EXPECT_EQ(RunOne(*queue, IoOp::kWrite, 12345, kMiB, pieces, 3), int64_t(kMiB));
  std::copy(data.begin(), data.end(), model.begin() + 12345);
  std::vector<unsigned char> fua = Pattern(65536, 2);
  EXPECT_EQ(WriteAt(*queue, fua.data(), fua.size(), 6 * kMiB, kIoFua), 65536);
  std::copy(fua.begin(), fua.end(), model.begin() + 6 * kMiB);
  std::vector<unsigned char> across = Pattern(2 * kMiB, 3);
  EXPECT_EQ(WriteAt(*queue, across.data(), across.size(), 3 * kMiB), int64_t(2 * kMiB));
  std::copy(across.begin(), across.end(), model.begin() + 3 * kMiB);

  // Write-zeroes, allocated and unmapped, over written data.
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 4000, 8192), 8192);
  std::fill(model.begin() + 4000, model.begin() + 4000 + 8192, 0);
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 3 * kMiB + 100, 70000, nullptr, 0, kIoMayUnmap),
            70000);
  std::fill(model.begin() + 3 * kMiB + 100, model.begin() + 3 * kMiB + 70100, 0);
  // A discard of a whole 4 MiB object, which then reads as zeroes.
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 8 * kMiB, 4 * kMiB), int64_t(4 * kMiB));

  // Reads see all of it, also across pieces and past what was written.
  std::vector<unsigned char> read(16 * kMiB);
  EXPECT_EQ(ReadAt(*queue, read.data(), read.size(), 0), int64_t(16 * kMiB));
  EXPECT_TRUE(read == model) << "read back differs";
  bool data_flag = false;
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 15 * kMiB, 4 * kMiB, nullptr, 0, 0, &data_flag),
            int64_t(kMiB));
  EXPECT_TRUE(data_flag);
  EXPECT_EQ(RunOne(*queue, IoOp::kAllocate, 0, kMiB), int64_t(kMiB));
  EXPECT_EQ(ReadAt(*queue, read.data(), 1024, 16 * kMiB - 512), -EINVAL);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(node->flush_error(), 0);

  // What another client reads, while this node still has the image open.
  EXPECT_EQ(Image("rbd/" + name), Bytes(model));
}

TEST_F(RbdNodeTest, TruncateResizesTheImage) {
  ASSERT_TRUE(cluster_->CreateImage("img", 4 * kMiB));
  std::shared_ptr<BlockNode> node = OpenOrFail(Options("img"));
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->capabilities().resize);
  EXPECT_TRUE(node->capabilities().flush);
  EXPECT_FALSE(node->capabilities().block_status);  // librbd is not asked: all data
  auto queue = MakeQueue(*node);
  std::vector<unsigned char> data = Pattern(4096, 4);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 4 * kMiB), -EINVAL);

  ASSERT_TRUE(node->Truncate(8 * kMiB).ok());
  EXPECT_EQ(node->size(), 8 * kMiB);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 8 * kMiB - 4096), 4096);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  std::string image = Image("rbd/img");
  ASSERT_EQ(image.size(), 8 * kMiB);
  EXPECT_EQ(image.substr(8 * kMiB - 4096), Bytes(data));

  ASSERT_TRUE(node->Truncate(kMiB).ok());
  EXPECT_EQ(node->size(), kMiB);
  EXPECT_EQ(Image("rbd/img").size(), kMiB);

  queue.reset();
  node.reset();
  std::shared_ptr<BlockNode> reader = OpenOrFail(Options("img"), /*read_only=*/true);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->size(), kMiB);
  EXPECT_FALSE(reader->capabilities().resize);
  EXPECT_FALSE(reader->capabilities().flush);
  absl::Status refused = reader->Truncate(2 * kMiB);
  EXPECT_EQ(refused.message(), "node 'rbd0': cannot resize: the node is read-only");
}

TEST_F(RbdNodeTest, OneWriterKeepsTheLockAndReadersShare) {
  ASSERT_TRUE(cluster_->CreateImage("img", 4 * kMiB));
  std::shared_ptr<BlockNode> writer = OpenOrFail(Options("img"), false, "writer");
  ASSERT_NE(writer, nullptr);
  auto queue = MakeQueue(*writer);
  std::vector<unsigned char> data = Pattern(8192, 5);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 0), 8192);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);

  // A second writer (its own cluster connection, as another bexd has) is refused.
  absl::StatusOr<std::shared_ptr<BlockNode>> second = Open(Options("img"), false, "second");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Message(second).find("node 'second': image 'rbd/img': locked for writing by another "
                                 "client ("),
            std::string::npos)
      << Message(second);

  // A reader opens next to it and reads what was flushed; the writer keeps writing.
  std::shared_ptr<BlockNode> reader = OpenOrFail(Options("img"), true, "reader");
  ASSERT_NE(reader, nullptr);
  auto reader_queue = MakeQueue(*reader);
  std::vector<unsigned char> read(8192);
  EXPECT_EQ(ReadAt(*reader_queue, read.data(), read.size(), 0), 8192);
  EXPECT_TRUE(read == data);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 65536), 8192);
  EXPECT_EQ(WriteAt(*reader_queue, data.data(), data.size(), 0), -EROFS);
  // What the writer overwrites and flushes, the reader reads at once, though it read the old
  // bytes before.
  std::vector<unsigned char> newer = Pattern(8192, 6);
  EXPECT_EQ(WriteAt(*queue, newer.data(), newer.size(), 0), 8192);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(ReadAt(*reader_queue, read.data(), read.size(), 0), 8192);
  EXPECT_TRUE(read == newer);

  // Other clients cannot write while bexd holds the lock...
  int status = -1;
  std::string output =
      cluster_->Rbd("bench --io-type write --io-size 4K --io-total 8K rbd/img", &status);
  EXPECT_NE(status, 0) << output;
  EXPECT_EQ(ReadAt(*queue, read.data(), read.size(), 0), 8192);
  EXPECT_TRUE(read == newer);
  // ...but maintenance goes through the lock owner: `rbd resize` asks bexd to resize, and the
  // node follows.
  output = cluster_->Rbd("resize --size 8M rbd/img", &status);
  EXPECT_EQ(status, 0) << output;
  for (int i = 0; i < 200 && writer->size() != 8 * kMiB; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(writer->size(), 8 * kMiB);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 8 * kMiB - 8192), 8192);

  // Once the writer closes, the next one gets the lock.
  queue.reset();
  writer.reset();
  EXPECT_NE(OpenOrFail(Options("img"), false, "second"), nullptr);
}

// A librbd client without an explicit lock (QEMU) that is writing keeps its image: bexd's open
// is refused rather than taking the lock away from it. Once bexd holds the lock, QEMU's writes
// fail.
TEST_F(RbdNodeTest, QemuWriterKeepsItsImageAndBexdKeepsItsOwn) {
  if (::access("/usr/lib/x86_64-linux-gnu/qemu/block-rbd.so", R_OK) != 0) {
    GTEST_SKIP() << "qemu-block-extra (QEMU's rbd driver) is missing";
  }
  ASSERT_TRUE(cluster_->CreateImage("img", 4 * kMiB));
  const std::string socket = cluster_->dir() + "/qsd.sock";
  const std::string qsd_args =
      "--blockdev driver=rbd,node-name=r0,pool=rbd,image=img,conf=" + cluster_->conf() +
      " --nbd-server addr.type=unix,addr.path=" + socket +
      " --export nbd,id=e0,node-name=r0,writable=on";
  pid_t qsd = ::fork();
  if (qsd == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec qemu-storage-daemon " + qsd_args).c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_GT(qsd, 0);
  int status = -1;
  std::string output;
  for (int i = 0; i < 200 && ::access(socket.c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // QEMU takes the lock with its first write.
  output = RunCommand(
      "qemu-io -f raw -c 'write -P 0x51 0 64k' 'nbd+unix:///r0?socket=" + socket + "'", &status);
  EXPECT_EQ(status, 0) << output;

  absl::StatusOr<std::shared_ptr<BlockNode>> refused = Open(Options("img"));
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(Message(refused).find("locked for writing by another client"), std::string::npos)
      << Message(refused);
  // QEMU carries on writing.
  output = RunCommand(
      "qemu-io -f raw -c 'write -P 0x52 64k 64k' 'nbd+unix:///r0?socket=" + socket + "'", &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output.find("error"), std::string::npos) << output;

  ::kill(qsd, SIGTERM);
  ::waitpid(qsd, nullptr, 0);

  // Now bexd holds it, and a QEMU that opens the image later cannot write.
  std::shared_ptr<BlockNode> node = OpenOrFail(Options("img"));
  ASSERT_NE(node, nullptr);
  output = RunCommand(
      "qemu-io --image-opts -c 'write -P 0x53 0 4k' driver=raw,file.driver=rbd,"
      "file.pool=rbd,file.image=img,file.conf=" +
          cluster_->conf(),
      &status);
  EXPECT_NE(output.find("Read-only file system"), std::string::npos) << output;
  std::string image = Image("rbd/img");
  EXPECT_EQ(image.substr(0, 65536), std::string(65536, '\x51'));
  EXPECT_EQ(image.substr(65536, 65536), std::string(65536, '\x52'));
}

TEST_F(RbdNodeTest, CephxKeyComesFromASecret) {
  ASSERT_TRUE(cluster_->CreateImage("img", 4 * kMiB));
  std::string key = cluster_->CreateUser("bexd", "mon 'profile rbd' osd 'profile rbd pool=rbd'");
  std::string key_bytes;
  ASSERT_TRUE(absl::Base64Unescape(key, &key_bytes)) << key;
  // The monitors only: no keyring, so no key but the secret's.
  const std::string conf = cluster_->WriteClientConf("client.conf", /*mon_host=*/true);
  RbdOptions options = Options("img");
  options.conf = conf;
  options.user = "bexd";

  absl::StatusOr<std::shared_ptr<BlockNode>> keyless = Open(options);
  EXPECT_FALSE(keyless.ok());
  EXPECT_NE(Message(keyless).find("node 'rbd0': cannot connect to the Ceph cluster"),
            std::string::npos)
      << Message(keyless);

  ASSERT_TRUE(AddSecret("bexd-key", key_bytes).ok());
  ASSERT_TRUE(AddSecret("bexd-key-text", key).ok());
  options.key_secret = "bexd-key-text";
  absl::StatusOr<std::shared_ptr<BlockNode>> text = Open(options);
  EXPECT_FALSE(text.ok());
  EXPECT_NE(Message(text).find("the secret 'bexd-key-text' holds the key's base64 text; give it "
                               "with format=base64"),
            std::string::npos)
      << Message(text);

  options.key_secret = "bexd-key";
  std::shared_ptr<BlockNode> node = OpenOrFail(options);
  EXPECT_NE(node, nullptr);
  if (node != nullptr) {
    auto queue = MakeQueue(*node);
    std::vector<unsigned char> data = Pattern(4096, 6);
    EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 0), 4096);
    EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  }
  RemoveObject("bexd-key");
  RemoveObject("bexd-key-text");
}

// An OSD that stops answering: requests fail with EIO after rados_osd_op_timeout (5 s here) and
// work again once it answers. A write is not acknowledged before the OSD has it (librbd's cache
// would acknowledge it at once after a first flush), so the writer learns of the failure from
// the write itself and later flushes hide nothing; a read is not served from a stale cache.
TEST_F(RbdNodeTest, RequestsFailWithEioWhileTheOsdDoesNotAnswer) {
  const std::string name = "img";
  ASSERT_TRUE(cluster_->CreateImage(name, 4 * kMiB));
  RbdOptions options = Options(name);
  std::shared_ptr<BlockNode> node = OpenOrFail(options);
  ASSERT_NE(node, nullptr);
  auto queue = MakeQueue(*node);
  std::vector<unsigned char> before = Pattern(4096, 8), during = Pattern(4096, 9);
  ASSERT_EQ(WriteAt(*queue, before.data(), 4096, 0), 4096);
  ASSERT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);

  ASSERT_TRUE(cluster_->PauseOsd());
  const int64_t written = WriteAt(*queue, during.data(), 4096, 4096);
  std::vector<unsigned char> read(4096);
  const int64_t read_result = ReadAt(*queue, read.data(), 4096, 8192);
  ASSERT_TRUE(cluster_->ResumeOsd());
  EXPECT_EQ(written, -EIO);
  EXPECT_EQ(read_result, -EIO);

  std::vector<unsigned char> after = Pattern(4096, 10);
  EXPECT_EQ(WriteAt(*queue, after.data(), 4096, 8192, kIoFua), 4096);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(ReadAt(*queue, read.data(), 4096, 0), 4096);
  EXPECT_TRUE(read == before);
  EXPECT_EQ(ReadAt(*queue, read.data(), 4096, 8192), 4096);
  EXPECT_TRUE(read == after);
  queue.reset();
  node.reset();
  EXPECT_EQ(Image("rbd/" + name).substr(8192, 4096), Bytes(after));
}

TEST_F(RbdNodeTest, ServerListNamesTheMonitors) {
  ASSERT_TRUE(cluster_->CreateImage("img", kMiB));
  // A configuration without `mon host` (nor keyring; the admin key comes from a secret), and
  // the monitor's address from server=.
  const std::string conf = cluster_->WriteClientConf("no-mon.conf", /*mon_host=*/false);
  std::string admin_key = cluster_->Key("admin");
  std::string admin_bytes;
  ASSERT_TRUE(absl::Base64Unescape(admin_key, &admin_bytes));
  ASSERT_TRUE(AddSecret("admin-key", admin_bytes).ok());
  RbdOptions options = Options("img");
  options.conf = conf;
  options.server = {InetAddress{"127.0.0.1", cluster_->MonPort()}};
  options.key_secret = "admin-key";
  std::shared_ptr<BlockNode> node = OpenOrFail(options, true);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->size(), kMiB);
  RemoveObject("admin-key");
}

}  // namespace
}  // namespace bexd::block
