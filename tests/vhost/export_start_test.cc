// SPDX-License-Identifier: GPL-2.0-or-later
// Starting and stopping the vhost-user-fs export: refusals with clear errors, stale sockets.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "block/open.h"
#include "export/start.h"
#include "tests/support/threads.h"
#include "tests/vhost/export_fixture.h"

namespace bexd::test::vhost {
namespace {

class ExportStartTest : public VhostExportTest {
 protected:
  absl::StatusOr<std::unique_ptr<exports::Export>> Start(const std::string& socket_path,
                                                         uint32_t queues,
                                                         std::vector<int> queue_cpus = {}) {
    block::BlockdevOptions blockdev;
    blockdev.node_name = "disk0";
    blockdev.driver = block::FileOptions{image_};
    absl::StatusOr<std::shared_ptr<block::BlockNode>> node = block::OpenBlockNode(blockdev);
    if (!node.ok()) return node.status();
    exports::ExportOptions options;
    options.id = "vfs0";
    options.node_name = "disk0";
    exports::VhostUserFsExportOptions vhost;
    vhost.socket_path = socket_path;
    vhost.num_request_queues = queues;
    vhost.queue_cpus = std::move(queue_cpus);
    options.transport = vhost;
    return exports::StartExport(options, *node);
  }
};

TEST_F(ExportStartTest, RefusesAPathThatIsNotASocket) {
  int fd = open(socket_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  absl::StatusOr<std::unique_ptr<exports::Export>> started = Start(socket_, 1);
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.status().message().find("not a socket"), std::string::npos) << started.status();
  struct stat st;
  EXPECT_EQ(stat(socket_.c_str(), &st), 0);  // left alone
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST_F(ExportStartTest, RefusesBadQueueCountsAndPaths) {
  EXPECT_FALSE(Start(socket_, 0).ok());
  EXPECT_FALSE(Start(socket_, 65).ok());
  EXPECT_FALSE(Start(dir_ + "/" + std::string(120, 'x'), 1).ok());
  EXPECT_FALSE(Start(dir_ + "/no/such/dir/sock", 1).ok());
}

TEST_F(ExportStartTest, ReplacesAStaleSocketAndRemovesItOnStop) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  memcpy(address.sun_path, socket_.data(), socket_.size());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(fd);  // a socket file nobody listens on, as a crashed daemon leaves it

  absl::StatusOr<std::unique_ptr<exports::Export>> started = Start(socket_, 1);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ((*started)->type(), "vhost-user-fs");
  EXPECT_FALSE((*started)->in_use());
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options());
  ASSERT_NE(frontend, nullptr);
  EXPECT_TRUE((*started)->in_use());
  EXPECT_EQ(LookupImage(*frontend), 2u);
  (*started)->Stop();
  EXPECT_NE(access(socket_.c_str(), F_OK), 0);
}

// Request queue i runs on the ((i - 1) mod n)-th listed CPU; the hiprio queue is not pinned. A
// pinned export still answers requests.
TEST_F(ExportStartTest, PinsRequestQueueThreads) {
  const std::vector<int> cpus = bexd::testing::ProcessCpus();
  ASSERT_FALSE(cpus.empty());
  absl::StatusOr<std::unique_ptr<exports::Export>> started = Start(socket_, 3, {cpus.back()});
  ASSERT_TRUE(started.ok()) << started.status();
  for (int queue = 1; queue <= 3; ++queue) {
    const std::vector<pid_t> thread =
        bexd::testing::ThreadIdsNamed("bexd-vhost-q" + std::to_string(queue));
    ASSERT_EQ(thread.size(), 1u) << "request queue " << queue;
    EXPECT_EQ(bexd::testing::ThreadCpus(thread[0]), std::vector<int>{cpus.back()});
  }
  const std::vector<pid_t> hiprio = bexd::testing::ThreadIdsNamed("bexd-vhost-q0");
  ASSERT_EQ(hiprio.size(), 1u);
  EXPECT_EQ(bexd::testing::ThreadCpus(hiprio[0]), cpus);
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options());
  ASSERT_NE(frontend, nullptr);
  EXPECT_EQ(LookupImage(*frontend), 2u);
  (*started)->Stop();
}

TEST_F(ExportStartTest, RefusesAQueueCpuOutsideTheAffinityMask) {
  const int forbidden = bexd::testing::ForbiddenCpu();
  absl::StatusOr<std::unique_ptr<exports::Export>> started = Start(socket_, 1, {forbidden});
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(started.status().message().find("queue-cpus: CPU " + std::to_string(forbidden) +
                                            " is not one bexd may run on"),
            std::string::npos)
      << started.status();
  EXPECT_NE(access(socket_.c_str(), F_OK), 0);  // nothing listens
}

}  // namespace
}  // namespace bexd::test::vhost
