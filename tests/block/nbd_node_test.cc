// SPDX-License-Identifier: GPL-2.0-or-later
// The nbd driver against real servers (nbdkit with its memory and file plugins and its error,
// multi-conn, nozero, log and blocksize-policy filters; qemu-nbd), through its IoQueues: data
// checked in the server's file, what the server offers, block status, the server's errors, and
// the reconnect rules (a server killed with SIGKILL and started again) on both kinds of node:
// one connection per queue (the server advertises multi-conn) and one shared connection.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "block/nbd/nbd_node.h"
#include "block/open.h"
#include "tests/block/queue_runner.h"
#include "tests/support/nbd_server.h"
#include "tests/support/scratch_dir.h"

namespace bexd::block::testing {
namespace {

using bexd::testing::HaveProgram;
using bexd::testing::NbdServer;
using bexd::testing::ScratchDir;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kSize = 16 * kMiB;

enum class Connections { kPerQueue, kShared };

std::string ModeName(Connections mode) {
  return mode == Connections::kPerQueue ? "PerQueue" : "Shared";
}

std::vector<unsigned char> ReadFileRange(const std::string& path, uint64_t offset, size_t length) {
  std::vector<unsigned char> bytes(length);
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  EXPECT_EQ(::pread(fd, bytes.data(), length, offset), static_cast<ssize_t>(length));
  ::close(fd);
  return bytes;
}

void WriteFileRange(const std::string& path, uint64_t offset,
                    const std::vector<unsigned char>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  EXPECT_EQ(::pwrite(fd, bytes.data(), bytes.size(), offset), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

// Runs `body` on `threads` threads at once, each with a queue of its own (the thread's index is
// its second argument); the failures they count, one for a queue that cannot be made.
int OnQueueThreads(BlockNode& node, int threads, const std::function<int(IoQueue&, int)>& body) {
  std::atomic<int> failures{0};
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      absl::StatusOr<std::unique_ptr<IoQueue>> queue = node.CreateQueue();
      failures += queue.ok() ? body(**queue, t) : 1;
    });
  }
  for (std::thread& thread : running) thread.join();
  return failures.load();
}

// Writes `length` bytes from each write's source at its offset, 16 requests in flight at a time;
// the requests that failed or did not finish.
int WriteInBatches(IoQueue& queue,
                   const std::vector<std::pair<uint64_t, const unsigned char*>>& writes,
                   uint64_t length) {
  int failures = 0;
  for (size_t first = 0; first < writes.size(); first += 16) {
    IoRequest requests[16];
    Outcome outcomes[16];
    struct iovec iov[16];
    const size_t count = std::min<size_t>(16, writes.size() - first);
    for (size_t i = 0; i < count; ++i) {
      const auto& [offset, source] = writes[first + i];
      iov[i] = {const_cast<unsigned char*>(source), length};
      Prepare(&requests[i], &outcomes[i], IoOp::kWrite, offset, length, &iov[i], 1);
      queue.Submit(&requests[i]);
    }
    if (!WaitIdle(queue)) ++failures;
    for (size_t i = 0; i < count; ++i) {
      failures += outcomes[i].result != static_cast<int64_t>(length);
    }
  }
  return failures;
}

int CountConnections(const std::string& log_path) {
  std::ifstream log(log_path);
  std::string line;
  int count = 0;
  while (std::getline(log, line)) count += line.find(" Connect export=") != std::string::npos;
  return count;
}

class NbdNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveProgram("nbdkit") || !HaveProgram("qemu-nbd")) {
      GTEST_SKIP() << "nbdkit or qemu-nbd is missing";
    }
    socket_ = scratch_.path() + "/nbd.sock";
    image_ = scratch_.CreateFile("disk.img", kSize);
  }

  // Starts nbdkit on the socket with `args` (filters, plugin, plugin arguments).
  NbdServer* StartNbdkit(const std::vector<std::string>& args) {
    std::vector<std::string> command = {"nbdkit", "-f", "-U", socket_, "-P", PidFile()};
    command.insert(command.end(), args.begin(), args.end());
    return StartServer(command);
  }

  // nbdkit's file plugin on the image; `mode` decides whether it advertises multi-conn.
  // `filters` come before the plugin, `parameters` (the filters' too) after it.
  NbdServer* StartFileServer(Connections mode, const std::vector<std::string>& filters = {},
                             const std::vector<std::string>& parameters = {}) {
    std::vector<std::string> args = filters;
    if (mode == Connections::kShared) args.push_back("--filter=multi-conn");
    args.insert(args.end(), {"file", image_});
    if (mode == Connections::kShared) args.push_back("multi-conn-mode=disable");
    args.insert(args.end(), parameters.begin(), parameters.end());
    return StartNbdkit(args);
  }

  NbdServer* StartServer(const std::vector<std::string>& command) {
    server_ =
        std::make_unique<NbdServer>(command, PidFile(), scratch_.path() + "/server.log", socket_);
    if (!server_->Start()) {
      ADD_FAILURE() << server_->why_not();
      return nullptr;
    }
    return server_.get();
  }

  NbdOptions Options(uint32_t reconnect_delay = 0,
                     DiscardMode discard = DiscardMode::kIgnore) const {
    NbdOptions options;
    options.transport = NbdOptions::Transport::kUnix;
    options.path = socket_;
    options.reconnect_delay = reconnect_delay;
    options.discard = discard;
    return options;
  }

  absl::StatusOr<std::shared_ptr<BlockNode>> Open(const NbdOptions& options,
                                                  bool read_only = false) {
    BlockdevOptions blockdev;
    blockdev.node_name = "nbd0";
    blockdev.read_only = read_only;
    blockdev.driver = options;
    return OpenBlockNode(blockdev);
  }

  std::shared_ptr<BlockNode> OpenOrFail(const NbdOptions& options) {
    absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(options);
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *node : nullptr;
  }

  std::unique_ptr<IoQueue> Queue(BlockNode& node) {
    absl::StatusOr<std::unique_ptr<IoQueue>> queue = node.CreateQueue();
    EXPECT_TRUE(queue.ok()) << queue.status();
    return queue.ok() ? *std::move(queue) : nullptr;
  }

  std::string PidFile() const { return scratch_.path() + "/server.pid"; }

  ScratchDir scratch_{"nbd"};
  std::string socket_;
  std::string image_;
  std::unique_ptr<NbdServer> server_;
};

TEST_F(NbdNodeTest, ReportsWhatTheServerOffers) {
  ASSERT_NE(StartNbdkit({"memory", std::to_string(kSize)}), nullptr);
  auto node = OpenOrFail(Options());
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->driver_name(), "nbd");
  EXPECT_EQ(node->size(), kSize);
  EXPECT_FALSE(node->read_only());
  EXPECT_EQ(node->request_alignment(), 1u);
  EXPECT_EQ(node->filename(), "nbd+unix://?socket=" + socket_);
  EXPECT_TRUE(std::static_pointer_cast<NbdNode>(node)->multi_conn());
  // nbdkit's memory plugin trims, flushes and reports block status; trims are sent only with
  // discard=unmap (QEMU's default is ignore).
  const Capabilities capabilities = node->capabilities();
  EXPECT_FALSE(capabilities.discard);
  EXPECT_TRUE(OpenOrFail(Options(0, DiscardMode::kUnmap))->capabilities().discard);
  EXPECT_TRUE(capabilities.write_zeroes);
  EXPECT_TRUE(capabilities.block_status);
  EXPECT_TRUE(capabilities.flush);
  EXPECT_TRUE(capabilities.fua);
  EXPECT_FALSE(capabilities.resize);
  // An NBD export's size is the server's.
  EXPECT_TRUE(node->Truncate(kSize).ok());
  absl::Status grown = node->Truncate(2 * kSize);
  EXPECT_EQ(grown.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(grown.message(),
            "node 'nbd0': cannot resize an NBD export (its size, 16777216 "
            "bytes, is the server's)");
}

TEST_F(NbdNodeTest, OpenErrorsNameTheNodeAndTheServer) {
  absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(Options());
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(node.status().message())
                .rfind("node 'nbd0': cannot connect to NBD server unix:" + socket_ + ": ", 0),
            0u)
      << node.status();

  // A read-only export needs a read-only node, as in QEMU.
  ASSERT_NE(StartNbdkit({"-r", "memory", std::to_string(kSize)}), nullptr);
  node = Open(Options());
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().message(), "node 'nbd0': NBD server unix:" + socket_ +
                                         " exports '' read-only; open the node with read-only=on");
  node = Open(Options(), /*read_only=*/true);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE((*node)->read_only());
  server_.reset();

  // An export the server does not have.
  ASSERT_NE(StartServer({"qemu-nbd", "-t", "-k", socket_, "--pid-file", PidFile(), "-x", "disk",
                         "-f", "raw", image_}),
            nullptr);
  NbdOptions other = Options();
  other.export_name = "other";
  node = Open(other);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(
      std::string(node.status().message()).rfind("node 'nbd0': cannot connect to NBD server", 0),
      0u)
      << node.status();
  NbdOptions disk = Options();
  disk.export_name = "disk";
  node = Open(disk);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->filename(), "nbd+unix:///disk?socket=" + socket_);
  // qemu-nbd allows one client unless told otherwise (-e): one shared connection.
  EXPECT_FALSE(std::static_pointer_cast<NbdNode>(*node)->multi_conn());
}

class NbdDataTest : public NbdNodeTest, public ::testing::WithParamInterface<Connections> {};

TEST_P(NbdDataTest, DataLandsInTheServersFile) {
  // The server takes at most 64 KiB per command and fails larger ones, so a 1 MiB request must
  // go as 16 of them.
  ASSERT_NE(StartFileServer(GetParam(), {"--filter=blocksize-policy"},
                            {"blocksize-maximum=65536", "blocksize-error-policy=error"}),
            nullptr);

  auto node = OpenOrFail(Options());
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(std::static_pointer_cast<NbdNode>(node)->multi_conn(),
            GetParam() == Connections::kPerQueue);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);

  // One request in three pieces of memory, one of them larger than the server's limit.
  std::vector<unsigned char> data = Pattern(kMiB + 4097, 1);
  struct iovec iov[3] = {
      {data.data(), 4097}, {data.data() + 4097, 100000}, {data.data() + 104097, kMiB - 100000}};
  EXPECT_EQ(RunOne(*queue, IoOp::kWrite, 3 * kMiB + 1, data.size(), iov, 3),
            static_cast<int64_t>(data.size()));
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(ReadFileRange(image_, 3 * kMiB + 1, data.size()), data);

  std::vector<unsigned char> fua = Pattern(8192, 2);
  EXPECT_EQ(WriteAt(*queue, fua.data(), fua.size(), kSize - 8192, kIoFua), 8192);
  EXPECT_EQ(ReadFileRange(image_, kSize - 8192, 8192), fua);

  std::vector<unsigned char> back(data.size());
  EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 3 * kMiB + 1),
            static_cast<int64_t>(back.size()));
  EXPECT_EQ(back, data);

  // Checked like every driver's requests.
  EXPECT_EQ(ReadAt(*queue, back.data(), 4096, kSize - 4095), -EINVAL);
  EXPECT_EQ(RunOne(*queue, IoOp::kAllocate, 0, 4096), -EOPNOTSUPP);
}

// Several queue threads at once: one connection each, or all through the shared connection's
// thread and back.
TEST_P(NbdDataTest, QueuesOnSeveralThreads) {
  const std::string log = scratch_.path() + "/connections.log";
  ASSERT_NE(StartFileServer(GetParam(), {"--filter=log"}, {"logfile=" + log}), nullptr);
  auto node = OpenOrFail(Options());
  ASSERT_NE(node, nullptr);
  constexpr int kThreads = 3;
  constexpr int kRounds = 4;
  EXPECT_EQ(OnQueueThreads(*node, kThreads,
                           [](IoQueue& queue, int t) {
                             // Each round writes the 16 blocks of 64 KiB of this thread's MiB.
                             const std::vector<unsigned char> data = Pattern(kMiB, 10 + t);
                             std::vector<std::pair<uint64_t, const unsigned char*>> writes;
                             for (int round = 0; round < kRounds; ++round) {
                               for (uint64_t at = 0; at < kMiB; at += 65536) {
                                 writes.emplace_back(t * kMiB + at, data.data() + at);
                               }
                             }
                             return WriteInBatches(queue, writes, 65536) +
                                    (RunOne(queue, IoOp::kFlush, 0, 0) != 0);
                           }),
            0);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(ReadFileRange(image_, t * kMiB, kMiB), Pattern(kMiB, 10 + t)) << "thread " << t;
  }
  // Per queue: the connection made at open serves the first queue. Shared: that one only.
  EXPECT_EQ(CountConnections(log), GetParam() == Connections::kPerQueue ? kThreads : 1);
}

// open-timeout (QEMU's): opening keeps trying until a server that starts late is up, to the end of
// the timeout (its attempts come 1, 2, 4... s apart, and the last one at the deadline); once it is
// over the open fails with the connection's error.
TEST_F(NbdNodeTest, OpenTimeoutKeepsTryingUntilTheServerIsUp) {
  NbdOptions options = Options();
  options.open_timeout = 1;
  absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(options);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kUnavailable) << node.status();

  // Attempts at 0 and 1 s, then the last one at the deadline, 3 s: the server is up by then.
  options.open_timeout = 3;
  // The open waits in a helper thread and the server starts from this one: nbdkit ends with the
  // thread that started it (NbdServer::Start).
  std::thread opener([&] { node = Open(options); });
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  NbdServer late({"nbdkit", "-f", "-U", socket_, "-P", PidFile(), "memory", std::to_string(kSize)},
                 PidFile(), scratch_.path() + "/server.log", socket_);
  const bool started = late.Start();
  opener.join();
  ASSERT_TRUE(started) << late.why_not();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->size(), kSize);
}

// A minimum block size that does not divide the export's size leaves a last block that cannot be
// read whole; QEMU refuses such a server at connection time, and so does bexd (QSD 7.2 aborts on
// an assertion at its first read there).
TEST_F(NbdNodeTest, AnExportSizeThatIsNotAMultipleOfTheMinimumBlockSizeIsRefused) {
  const std::string odd = scratch_.CreateFile("odd.img", kSize + 512);
  ASSERT_NE(StartNbdkit({"--filter=blocksize-policy", "file", odd, "blocksize-minimum=4096"}),
            nullptr);
  absl::StatusOr<std::shared_ptr<BlockNode>> node = Open(Options());
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(node.status().message()),
            "node 'nbd0': NBD server unix:" + socket_ +
                " export '': the export's size 16777728 is not a multiple of the server's minimum "
                "block size 4096")
      << node.status();
}

// A server with a minimum block size of 4 KiB that refuses anything else (libnbd would not send
// it either): reads, writes and write-zeroes at any offset and length still work, as in QEMU,
// through whole blocks; discards shrink to the whole blocks they cover.
TEST_P(NbdDataTest, RequestsNotAlignedToTheServersMinimumBlockSize) {
  std::vector<unsigned char> expected = Pattern(kMiB, 30);
  WriteFileRange(image_, 0, expected);
  ASSERT_NE(StartFileServer(GetParam(), {"--filter=blocksize-policy"},
                            {"blocksize-minimum=4096", "blocksize-error-policy=error"}),
            nullptr);
  auto node = OpenOrFail(Options(0, DiscardMode::kUnmap));
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->request_alignment(), 4096u);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);

  // Within one block, across one boundary, partial head and tail around whole blocks, an aligned
  // start with a partial tail.
  const std::pair<uint64_t, uint64_t> shapes[] = {
      {5000, 100}, {4000, 200}, {3 * 4096 + 100, 5 * 4096}, {8192, 4097}};
  for (auto [offset, length] : shapes) {
    std::vector<unsigned char> got(length);
    EXPECT_EQ(ReadAt(*queue, got.data(), length, offset), static_cast<int64_t>(length));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin() + offset))
        << "read " << length << " at " << offset;
  }
  uint32_t seed = 40;
  for (auto [offset, length] : shapes) {
    offset += 65536;
    std::vector<unsigned char> data = Pattern(length, seed++);
    struct iovec iov[2] = {{data.data(), length / 3},
                           {data.data() + length / 3, length - length / 3}};
    EXPECT_EQ(RunOne(*queue, IoOp::kWrite, offset, length, iov, 2), static_cast<int64_t>(length))
        << "write " << length << " at " << offset;
    std::copy(data.begin(), data.end(), expected.begin() + offset);
  }
  // Whole blocks in memory pieces that end inside a block (a guest's descriptors may): each
  // piece would be a command of its own, so they are bounced too.
  std::vector<unsigned char> pieces = Pattern(8192, seed++);
  struct iovec split[2] = {{pieces.data(), 1000}, {pieces.data() + 1000, 7192}};
  EXPECT_EQ(RunOne(*queue, IoOp::kWrite, 131072, 8192, split, 2), 8192);
  std::copy(pieces.begin(), pieces.end(), expected.begin() + 131072);
  std::vector<unsigned char> back(8192);
  struct iovec split_back[2] = {{back.data(), 3000}, {back.data() + 3000, 5192}};
  EXPECT_EQ(RunOne(*queue, IoOp::kRead, 131072, 8192, split_back, 2), 8192);
  EXPECT_EQ(back, pieces);

  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 200003, 3 * 4096), 3 * 4096);
  std::fill_n(expected.begin() + 200003, 3 * 4096, 0);
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 300003, 100), 100);
  std::fill_n(expected.begin() + 300003, 100, 0);
  // [400005, 412293) covers the whole blocks [401408, 409600); the file plugin punches them out.
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, 400005, 3 * 4096), 3 * 4096);
  std::fill(expected.begin() + 401408, expected.begin() + 409600, 0);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  const std::vector<unsigned char> file = ReadFileRange(image_, 0, kMiB);
  const auto differ = std::mismatch(file.begin(), file.end(), expected.begin());
  EXPECT_EQ(differ.first, file.end()) << "first difference at " << differ.first - file.begin();

  // Block status from inside a block: the extent of the block that holds the offset.
  bool data = false;
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 401508, 65536, nullptr, 0, 0, &data), 8092);
  EXPECT_FALSE(data);
  EXPECT_GT(RunOne(*queue, IoOp::kBlockStatus, 5000, 65536, nullptr, 0, 0, &data), 0);
  EXPECT_TRUE(data);
}

// Writes of 256 bytes from three queue threads, interleaved so that every 4 KiB block takes
// writes from all three at once: each is a read-modify-write of its block, and the node's block
// lock runs those of one block one after the other, so every write lands.
TEST_P(NbdDataTest, UnalignedWritesIntoTheSameBlocksFromSeveralThreadsAllLand) {
  ASSERT_NE(StartFileServer(GetParam(), {"--filter=blocksize-policy"},
                            {"blocksize-minimum=4096", "blocksize-error-policy=error"}),
            nullptr);
  auto node = OpenOrFail(Options());
  ASSERT_NE(node, nullptr);
  constexpr int kThreads = 3;
  constexpr uint64_t kStripe = 256;
  constexpr uint64_t kSpan = 512 * 1024;
  const std::vector<unsigned char> expected = Pattern(kSpan, 50);
  EXPECT_EQ(OnQueueThreads(*node, kThreads,
                           [&](IoQueue& queue, int t) {
                             std::vector<std::pair<uint64_t, const unsigned char*>> writes;
                             for (uint64_t at = t * kStripe; at < kSpan; at += kThreads * kStripe) {
                               writes.emplace_back(at, expected.data() + at);
                             }
                             return WriteInBatches(queue, writes, kStripe);
                           }),
            0);
  EXPECT_TRUE(ReadFileRange(image_, 0, kSpan) == expected);
}

INSTANTIATE_TEST_SUITE_P(Connections, NbdDataTest,
                         ::testing::Values(Connections::kPerQueue, Connections::kShared),
                         [](const auto& info) { return ModeName(info.param); });

// A server with a 4 KiB minimum block size that describes finer extents (nbdkit's file plugin does
// over a file system of 1 KiB blocks; here its extentlist filter): data at 69900..70200 sits in
// the block at 69632. Block status answers at block granularity, as QEMU's does: no EIO for a
// query inside that block, and the block is data.
TEST_F(NbdNodeTest, ExtentsFinerThanTheMinimumBlockSizeAnswerInWholeBlocks) {
  const std::string list = scratch_.path() + "/extents";
  {
    std::ofstream out(list);
    out << "0 69900 hole,zero\n69900 300\n70200 " << kSize - 70200 << " hole,zero\n";
  }
  ASSERT_NE(
      StartNbdkit({"--filter=blocksize-policy", "--filter=extentlist", "file", image_,
                   "extentlist=" + list, "blocksize-minimum=4096", "blocksize-error-policy=error"}),
      nullptr);
  auto node = OpenOrFail(Options());
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  bool data = true;
  // The hole up to the block of the data, cut back to whole blocks.
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 0, kSize, nullptr, 0, 0, &data), 69632);
  EXPECT_FALSE(data);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 65536, kSize, nullptr, 0, 0, &data), 4096);
  EXPECT_FALSE(data);
  // The block holding the data is data as a whole, from wherever in it the query starts.
  for (uint64_t offset : {uint64_t{69632}, uint64_t{69900}, uint64_t{70000}}) {
    SCOPED_TRACE(offset);
    EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, offset, kSize, nullptr, 0, 0, &data),
              int64_t(73728 - offset));
    EXPECT_TRUE(data);
  }
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 73728, kSize, nullptr, 0, 0, &data),
            int64_t(kSize - 73728));
  EXPECT_FALSE(data);
}

// nbdkit's file plugin answers block status from SEEK_DATA/SEEK_HOLE in the (sparse) image,
// trims by punching holes and writes zeroes with fallocate.
TEST_F(NbdNodeTest, TrimWriteZeroesAndBlockStatus) {
  ASSERT_NE(StartFileServer(Connections::kPerQueue), nullptr);
  auto node = OpenOrFail(Options(0, DiscardMode::kUnmap));
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  bool data = true;
  // The image starts as one hole.
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 0, kSize, nullptr, 0, 0, &data),
            static_cast<int64_t>(kSize));
  EXPECT_FALSE(data);
  std::vector<unsigned char> pattern = Pattern(2 * kMiB, 3);
  ASSERT_EQ(WriteAt(*queue, pattern.data(), pattern.size(), kMiB), int64_t(2 * kMiB));
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 0, kSize, nullptr, 0, 0, &data), int64_t(kMiB));
  EXPECT_FALSE(data);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, kMiB, kSize - kMiB, nullptr, 0, 0, &data),
            int64_t(2 * kMiB));
  EXPECT_TRUE(data);
  // Past the end: nothing; the extent is capped at the request.
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, kSize, 4096, nullptr, 0, 0, &data), 0);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, kMiB, 4096, nullptr, 0, 0, &data), 4096);

  // Trim gives the first MiB of the data back to the server.
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, kMiB, kMiB), int64_t(kMiB));
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, kMiB, kMiB, nullptr, 0, 0, &data), int64_t(kMiB));
  EXPECT_FALSE(data);
  // Write-zeroes that may unmap leaves a hole; one that may not (NO_HOLE) stays allocated.
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 2 * kMiB, 65536, nullptr, 0, kIoMayUnmap), 65536);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 2 * kMiB, 65536, nullptr, 0, 0, &data), 65536);
  EXPECT_FALSE(data);
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 2 * kMiB + 65536, 65536), 65536);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 2 * kMiB + 65536, 65536, nullptr, 0, 0, &data),
            65536);
  EXPECT_TRUE(data);
  std::vector<unsigned char> back(3 * 65536);
  ASSERT_EQ(ReadAt(*queue, back.data(), back.size(), 2 * kMiB), int64_t(back.size()));
  EXPECT_EQ(std::vector<unsigned char>(back.begin(), back.begin() + 2 * 65536),
            std::vector<unsigned char>(2 * 65536, 0));
  EXPECT_EQ(std::vector<unsigned char>(back.begin() + 2 * 65536, back.end()),
            std::vector<unsigned char>(pattern.begin() + kMiB + 2 * 65536,
                                       pattern.begin() + kMiB + 3 * 65536));
}

// discard=ignore (QEMU's default): a discard completes without reaching the server, and a
// write-zeroes that may unmap is sent with NO_HOLE, so the server keeps the range allocated.
TEST_F(NbdNodeTest, DiscardIgnoreSendsNoTrimAndNoUnmap) {
  ASSERT_NE(StartFileServer(Connections::kPerQueue), nullptr);
  auto node = OpenOrFail(Options());
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  std::vector<unsigned char> pattern = Pattern(2 * kMiB, 5);
  ASSERT_EQ(WriteAt(*queue, pattern.data(), pattern.size(), kMiB), int64_t(2 * kMiB));
  bool data = false;
  EXPECT_EQ(RunOne(*queue, IoOp::kDiscard, kMiB, kMiB), int64_t(kMiB));
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, kMiB, kMiB, nullptr, 0, 0, &data), int64_t(kMiB));
  EXPECT_TRUE(data);
  std::vector<unsigned char> back(kMiB);
  ASSERT_EQ(ReadAt(*queue, back.data(), back.size(), kMiB), int64_t(kMiB));
  EXPECT_TRUE(std::equal(back.begin(), back.end(), pattern.begin())) << "the discard was sent";
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 2 * kMiB, 65536, nullptr, 0, kIoMayUnmap), 65536);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 2 * kMiB, 65536, nullptr, 0, 0, &data), 65536);
  EXPECT_TRUE(data);
  ASSERT_EQ(ReadAt(*queue, back.data(), 65536, 2 * kMiB), 65536);
  EXPECT_EQ(std::vector<unsigned char>(back.begin(), back.begin() + 65536),
            std::vector<unsigned char>(65536, 0));
}

// Servers without WRITE_ZEROES get zeroes written; without block status, everything is data.
TEST_F(NbdNodeTest, WithoutZeroesOrBlockStatus) {
  ASSERT_NE(StartFileServer(Connections::kPerQueue, {"--no-sr", "--filter=nozero"}), nullptr);
  std::vector<unsigned char> pattern = Pattern(3 * kMiB, 4);
  {
    std::fstream file(image_, std::ios::in | std::ios::out | std::ios::binary);
    file.write(reinterpret_cast<const char*>(pattern.data()), pattern.size());
  }
  auto node = OpenOrFail(Options());
  ASSERT_NE(node, nullptr);
  // Zeroes are written instead; without block status, asking would tell nothing.
  EXPECT_TRUE(node->capabilities().write_zeroes);
  EXPECT_FALSE(node->capabilities().block_status);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  // 2.5 MiB: more than one write from the 1 MiB zero buffer.
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 1, 5 * kMiB / 2), int64_t(5 * kMiB / 2));
  std::vector<unsigned char> expected = pattern;
  std::fill(expected.begin() + 1, expected.begin() + 1 + 5 * kMiB / 2, 0);
  EXPECT_EQ(ReadFileRange(image_, 0, expected.size()), expected);
  bool data = false;
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 4 * kMiB, kSize, nullptr, 0, 0, &data),
            int64_t(kSize - 4 * kMiB));
  EXPECT_TRUE(data);
}

TEST_F(NbdNodeTest, ServerErrorsReachTheRequest) {
  const std::string trigger = scratch_.path() + "/fail";
  ASSERT_NE(StartNbdkit({"--filter=error", "memory", std::to_string(kSize), "error-rate=100%",
                         "error-file=" + trigger, "error-pwrite=ENOSPC", "error-pwrite-rate=100%",
                         "error-pwrite-file=" + trigger}),
            nullptr);
  auto node = OpenOrFail(Options());
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  std::vector<unsigned char> data = Pattern(65536, 5);
  ASSERT_EQ(WriteAt(*queue, data.data(), data.size(), 0), 65536);
  std::ofstream(trigger).close();
  std::vector<unsigned char> back(65536);
  EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), -EIO);
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 65536), -ENOSPC);
  EXPECT_EQ(RunOne(*queue, IoOp::kWriteZeroes, 65536, 65536), -EIO);
  EXPECT_EQ(RunOne(*queue, IoOp::kBlockStatus, 0, kSize), -EIO);
  ::unlink(trigger.c_str());
  // The same connection serves on.
  EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), 65536);
  EXPECT_EQ(back, data);
}

using NbdReconnectTest = NbdDataTest;

TEST_P(NbdReconnectTest, WithoutDelayRequestsFailUntilTheServerIsBack) {
  NbdServer* server = StartFileServer(GetParam());
  ASSERT_NE(server, nullptr);
  auto node = OpenOrFail(Options(/*reconnect_delay=*/0));
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  std::vector<unsigned char> data = Pattern(kMiB, 6);
  ASSERT_EQ(WriteAt(*queue, data.data(), data.size(), 0), int64_t(kMiB));
  ASSERT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);

  server->Kill();
  std::vector<unsigned char> back(kMiB);
  EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), -EIO);
  EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), -EIO);

  ASSERT_TRUE(server->Start()) << server->why_not();
  // The reconnect loop finds the server again (its next attempt is at most 16 s away).
  int64_t result = -EIO;
  for (int i = 0; i < 300 && result == -EIO; ++i) {
    result = ReadAt(*queue, back.data(), back.size(), 0);
    if (result == -EIO) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(result, int64_t(kMiB));
  EXPECT_EQ(back, data);
}

TEST_P(NbdReconnectTest, WithinTheDelayRequestsWaitForTheServer) {
  NbdServer* server = StartFileServer(GetParam());
  ASSERT_NE(server, nullptr);
  auto node = OpenOrFail(Options(/*reconnect_delay=*/300));
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  std::vector<unsigned char> data = Pattern(kMiB, 7);
  ASSERT_EQ(WriteAt(*queue, data.data(), data.size(), 0), int64_t(kMiB));
  // Flushed, so that the loss of the server cannot have taken it (the flush at the end would
  // fail).
  ASSERT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);

  server->Kill();
  std::vector<unsigned char> more = Pattern(kMiB, 8);
  std::vector<unsigned char> back(kMiB);
  struct iovec write_iov = {more.data(), more.size()};
  struct iovec read_iov = {back.data(), back.size()};
  IoRequest write, read;
  Outcome written, was_read;
  Prepare(&write, &written, IoOp::kWrite, kMiB, kMiB, &write_iov, 1);
  Prepare(&read, &was_read, IoOp::kRead, 0, kMiB, &read_iov, 1);
  queue->Submit(&write);
  queue->Submit(&read);
  // Nothing can answer them while the server is away; they wait rather than fail.
  WaitIdle(*queue, 1500);
  EXPECT_FALSE(written.done);
  EXPECT_FALSE(was_read.done);

  ASSERT_TRUE(server->Start()) << server->why_not();
  ASSERT_TRUE(WaitIdle(*queue, 60000));
  EXPECT_EQ(written.result, int64_t(kMiB));
  EXPECT_EQ(was_read.result, int64_t(kMiB));
  EXPECT_EQ(back, data);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(ReadFileRange(image_, kMiB, kMiB), more);
}

TEST_P(NbdReconnectTest, HeldRequestsFailWhenTheDelayIsOver) {
  NbdServer* server = StartFileServer(GetParam());
  ASSERT_NE(server, nullptr);
  auto node = OpenOrFail(Options(/*reconnect_delay=*/1));
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  std::vector<unsigned char> back(4096);
  ASSERT_EQ(ReadAt(*queue, back.data(), back.size(), 0), 4096);
  server->Kill();
  EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), -EIO);
  // Once the delay is over, new requests fail at once too.
  EXPECT_EQ(ReadAt(*queue, back.data(), back.size(), 0), -EIO);
}

// Read-modify-writes of one block (the server's minimum block size is 4 KiB) while the server is
// away: the first waits for the server, holding the block, the second for the first; both land
// once the server is back.
TEST_P(NbdReconnectTest, UnalignedWritesWaitingForTheServerLandWhenItIsBack) {
  std::vector<unsigned char> expected = Pattern(65536, 60);
  WriteFileRange(image_, 0, expected);
  NbdServer* server = StartFileServer(GetParam(), {"--filter=blocksize-policy"},
                                      {"blocksize-minimum=4096", "blocksize-error-policy=error"});
  ASSERT_NE(server, nullptr);
  auto node = OpenOrFail(Options(/*reconnect_delay=*/300));
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);

  server->Kill();
  std::vector<unsigned char> first = Pattern(100, 61);
  std::vector<unsigned char> second = Pattern(100, 62);
  std::vector<unsigned char> back(300);
  struct iovec iov[3] = {
      {first.data(), first.size()}, {second.data(), second.size()}, {back.data(), back.size()}};
  IoRequest requests[3];
  Outcome outcomes[3];
  Prepare(&requests[0], &outcomes[0], IoOp::kWrite, 1000, 100, &iov[0], 1);
  Prepare(&requests[1], &outcomes[1], IoOp::kWrite, 2000, 100, &iov[1], 1);
  Prepare(&requests[2], &outcomes[2], IoOp::kRead, 5000, 300, &iov[2], 1);
  for (IoRequest& request : requests) queue->Submit(&request);
  WaitIdle(*queue, 1500);
  for (const Outcome& outcome : outcomes) EXPECT_FALSE(outcome.done);

  ASSERT_TRUE(server->Start()) << server->why_not();
  ASSERT_TRUE(WaitIdle(*queue, 60000));
  EXPECT_EQ(outcomes[0].result, 100);
  EXPECT_EQ(outcomes[1].result, 100);
  EXPECT_EQ(outcomes[2].result, 300);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), expected.begin() + 5000));
  std::copy(first.begin(), first.end(), expected.begin() + 1000);
  std::copy(second.begin(), second.end(), expected.begin() + 2000);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(ReadFileRange(image_, 0, 65536), expected);
}

// A read-modify-write that fails because the server stayed away gives its block up: the next
// one into that block is served once the server is back.
TEST_P(NbdReconnectTest, AFailedUnalignedWriteReleasesItsBlock) {
  NbdServer* server = StartFileServer(GetParam(), {"--filter=blocksize-policy"},
                                      {"blocksize-minimum=4096", "blocksize-error-policy=error"});
  ASSERT_NE(server, nullptr);
  auto node = OpenOrFail(Options(/*reconnect_delay=*/1));
  ASSERT_NE(node, nullptr);
  auto queue = Queue(*node);
  ASSERT_NE(queue, nullptr);
  std::vector<unsigned char> data = Pattern(100, 63);
  server->Kill();
  EXPECT_EQ(WriteAt(*queue, data.data(), data.size(), 1000), -EIO);

  ASSERT_TRUE(server->Start()) << server->why_not();
  int64_t result = -EIO;
  for (int i = 0; i < 300 && result == -EIO; ++i) {
    result = WriteAt(*queue, data.data(), data.size(), 1050);
    if (result == -EIO) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(result, 100);
  EXPECT_EQ(RunOne(*queue, IoOp::kFlush, 0, 0), 0);
  EXPECT_EQ(ReadFileRange(image_, 1050, 100), data);
}

INSTANTIATE_TEST_SUITE_P(Connections, NbdReconnectTest,
                         ::testing::Values(Connections::kPerQueue, Connections::kShared),
                         [](const auto& info) { return ModeName(info.param); });

}  // namespace
}  // namespace bexd::block::testing
