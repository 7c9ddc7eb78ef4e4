// SPDX-License-Identifier: GPL-2.0-or-later
// Size changes racing I/O on a qcow2 node (outside review, compared with QSD 7.2, which passed):
// a write that grows a growable export must not undo a larger block_resize that came in between.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "tests/control/control_fixture.h"
#include "tests/support/qemu_check.h"
#include "tests/support/run_command.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

constexpr size_t kBlock = 64 << 10;

struct FreeAligned {
  void operator()(void* memory) const { std::free(memory); }
};

std::unique_ptr<char, FreeAligned> AlignedCopy(const std::string& data) {
  std::unique_ptr<char, FreeAligned> buffer(
      static_cast<char*>(std::aligned_alloc(4096, data.size())));
  std::memcpy(buffer.get(), data.data(), data.size());
  return buffer;
}

class ResizeRaceTest : public ControlTest {
 protected:
  // A qcow2 image of `size` bytes as node "q", exported over FUSE at qcow2_mount_.
  void StartQcow2(uint64_t size, bool growable) {
    int status = 0;
    RunCommand("qemu-img create -q -f qcow2 " + qcow2_ + " " + std::to_string(size) + " 2>&1",
               &status);
    ASSERT_EQ(status, 0);
    ::close(::open(qcow2_mount_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    StartDaemon({"--blockdev", "driver=file,node-name=qfile,filename=" + qcow2_, "--blockdev",
                 "driver=qcow2,node-name=q,file=qfile", "--export",
                 "type=fuse,id=qexp,node-name=q,writable=on,num-queues=2,mountpoint=" +
                     qcow2_mount_ + (growable ? ",growable=on" : "")});
    ASSERT_TRUE(WaitFor([&] { return IsMounted(qcow2_mount_); })) << ReadFile(log_);
    client_ = Connect();
    client_->Negotiate();
  }
  uint64_t NodeSize() {
    const json reply = client_->Execute("query-named-block-nodes");
    for (const json& node : reply["return"]) {
      if (node["node-name"] == "q") return node["image"]["virtual-size"].get<uint64_t>();
    }
    ADD_FAILURE() << "no node 'q': " << reply;
    return 0;
  }
  void Resize(uint64_t size) {
    EXPECT_EQ(Success(client_->Execute("block_resize", {{"node-name", "q"}, {"size", size}})), "");
  }
  void StopAndCheck() {
    EXPECT_EQ(daemon_->Stop(), 0) << ReadFile(log_);
    CheckResult check = QemuCheck(qcow2_);
    EXPECT_EQ(check.exit_status, 0) << check.output;
  }

  std::string qcow2_ = Path("disk.qcow2");
  std::string qcow2_mount_ = Path("disk.mnt");
  std::unique_ptr<QmpClient> client_;
};

TEST_F(ResizeRaceTest, AWriteThatGrowsTheExportNeverUndoesALargerBlockResize) {
  StartQcow2(1 << 20, /*growable=*/true);
  const int fd = ::open(qcow2_mount_.c_str(), O_RDWR | O_DIRECT);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::mt19937 random(1);
  int undone = 0;
  for (int round = 0; round < 30; ++round) {
    const uint64_t start = NodeSize();
    auto block = AlignedCopy(Pattern(kBlock, round));
    const int delay_us = static_cast<int>(random() % 4000);
    std::thread writer([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      EXPECT_EQ(::pwrite(fd, block.get(), kBlock, static_cast<off_t>(start)),
                static_cast<ssize_t>(kBlock))
          << std::strerror(errno);
    });
    Resize(start + (4 << 20));
    writer.join();
    undone += NodeSize() < start + (4 << 20);
  }
  EXPECT_EQ(undone, 0) << "rounds whose block_resize a growing write undid";
  ASSERT_EQ(::close(fd), 0);
  StopAndCheck();
}

}  // namespace
}  // namespace bexd::testing
