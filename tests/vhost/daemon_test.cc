// SPDX-License-Identifier: GPL-2.0-or-later
// The bexd daemon itself (BEXD_BINARY) with a vhost-user-fs export: a hostile guest breaks one
// ring, the daemon keeps running and serves the next frontend, and stops cleanly on SIGTERM.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "export/vhost_user/virtqueue.h"
#include "tests/support/process_stats.h"
#include "tests/support/unix_sockets.h"
#include "tests/vhost/export_fixture.h"

extern char** environ;

namespace bexd::test::vhost {
namespace {

class DaemonTest : public VhostExportTest {
 protected:
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    VhostExportTest::TearDown();
  }

  // `tag` is the export's tag option with its comma, or empty to leave the option out.
  void StartDaemon(const std::string& tag = ",tag=images") {
    std::vector<std::string> args = {
        BEXD_BINARY,
        "--blockdev",
        "driver=file,node-name=disk0,filename=" + image_,
        "--export",
        "type=vhost-user-fs,id=vfs0,node-name=disk0,addr.type=unix,addr.path=" + socket_ + tag +
            ",writable=on,num-request-queues=2",
    };
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    ASSERT_EQ(posix_spawn(&pid_, BEXD_BINARY, nullptr, nullptr, argv.data(), environ), 0);
  }

  bool Running() { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

  // Opens the image through `frontend` and reads 4 KiB at `offset` on request queue 1: the
  // pattern the image holds there.
  void ExpectServedRead(Frontend& frontend, uint64_t offset) {
    uint64_t node = LookupImage(frontend);
    uint64_t fh = OpenImage(frontend, node);
    struct fuse_read_in in = {};
    in.fh = fh;
    in.offset = offset;
    in.size = 4096;
    absl::StatusOr<FuseReply> reply =
        frontend.Fuse(1, FUSE_READ, node, &in, sizeof(in), nullptr, 0, 16 + 4096);
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->payload.size(), 4096u);
    EXPECT_TRUE(
        std::equal(reply->payload.begin(), reply->payload.end(), pattern_.begin() + offset));
  }

  // SIGTERM, then waits (bounded) for a clean exit; returns the exit status or -1.
  int Terminate() {
    kill(pid_, SIGTERM);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  pid_t pid_ = -1;
};

TEST_F(DaemonTest, SurvivesHostileGuestAndServesNextFrontend) {
  StartDaemon();
  FrontendOptions options = Options(2);
  std::unique_ptr<Frontend> frontend = ConnectAndInit(options);
  ASSERT_NE(frontend, nullptr);
  ASSERT_EQ(LookupImage(*frontend), 2u);

  // A descriptor chain that loops, on request queue 1.
  namespace vring = exports::vring;
  frontend->WriteDesc(1, 100, {frontend->ScratchGpa(), 16, vring::kDescNext, 101});
  frontend->WriteDesc(1, 101, {frontend->ScratchGpa(), 16, vring::kDescNext, 100});
  frontend->PublishHead(1, 100);
  EXPECT_TRUE(frontend->WaitRingError(1));
  EXPECT_EQ(LookupImage(*frontend, 2), 2u);
  frontend->Drop();
  EXPECT_TRUE(Running());

  std::unique_ptr<Frontend> next = ConnectAndInit(options);
  ASSERT_NE(next, nullptr);
  ExpectServedRead(*next, 4096);
  next.reset();
  EXPECT_EQ(Terminate(), 0);
}

// The tag only labels logs (the guest's tag is QEMU's vhost-user-fs-pci tag=): an export without
// one starts and serves.
TEST_F(DaemonTest, ServesWithoutTag) {
  StartDaemon(/*tag=*/"");
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options(2));
  ASSERT_NE(frontend, nullptr);
  ExpectServedRead(*frontend, 8192);
  frontend.reset();
  EXPECT_EQ(Terminate(), 0);
}

// Out of descriptors, accept() kept failing and the listener stayed readable: the socket thread
// spun and the clients waited for ever. Now each is accepted into a reserve descriptor and closed.
TEST_F(DaemonTest, OutOfDescriptorsClosesNewClientsAndServesAgainLater) {
  StartDaemon();
  std::unique_ptr<Frontend> frontend = ConnectAndInit(Options(2));
  ASSERT_NE(frontend, nullptr);
  rlimit limit;
  ASSERT_EQ(::prlimit(pid_, RLIMIT_NOFILE, nullptr, &limit), 0);
  const rlimit saved = limit;
  limit.rlim_cur = testing::LowestFreeDescriptor(pid_);
  ASSERT_EQ(::prlimit(pid_, RLIMIT_NOFILE, &limit, nullptr), 0);

  std::vector<util::UniqueFd> clients;
  for (int i = 0; i < 3; ++i) {
    util::UniqueFd client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address = testing::UnixAddress(socket_);
    ASSERT_EQ(::connect(client.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    clients.push_back(std::move(client));
  }
  for (util::UniqueFd& client : clients) {
    struct pollfd p = {client.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 20000), 1) << "the daemon never closed a client it could not serve";
    char byte;
    EXPECT_EQ(::recv(client.get(), &byte, 1, 0), 0);
  }
  EXPECT_TRUE(Running());

  ASSERT_EQ(::prlimit(pid_, RLIMIT_NOFILE, &saved, nullptr), 0);
  frontend->Drop();
  std::unique_ptr<Frontend> next = ConnectAndInit(Options(2));
  ASSERT_NE(next, nullptr);
  ExpectServedRead(*next, 0);
  next.reset();
  EXPECT_EQ(Terminate(), 0);
}

}  // namespace
}  // namespace bexd::test::vhost
