// SPDX-License-Identifier: GPL-2.0-or-later
// UnixSocketListener, the listening socket of every vhost-user-fs export and QMP monitor: what it
// replaces, what it refuses and leaves alone, and which file it removes when it closes.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/scratch_dir.h"
#include "tests/support/unix_sockets.h"
#include "util/unix_socket_listener.h"

namespace bexd::exports {
namespace {

using bexd::testing::InodeAt;
using bexd::testing::LeaveStaleSocket;
using bexd::testing::ListenOnPath;
using bexd::testing::SocketAnswers;
using bexd::testing::UnixAddress;

std::string Content(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class UnixSocketListenerTest : public ::testing::Test {
 protected:
  bexd::testing::ScratchDir dir_{"listener"};
  const std::string path_ = dir_.path() + "/s.sock";
};

// QSD's --chardev socket,fd=N: the socket another process bound is served, made non-blocking,
// and its file left to that process.
TEST_F(UnixSocketListenerTest, AdoptsAPassedListeningSocketAndLeavesItsFile) {
  util::UniqueFd passed = ListenOnPath(path_);
  ASSERT_TRUE(passed);
  absl::StatusOr<UnixSocketListener> listener =
      UnixSocketListener::Adopt(std::move(passed), "fd=7");
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_NE(::fcntl(listener->fd(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(::fcntl(listener->fd(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_EQ(listener->Accept([](int) {}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(SocketAnswers(path_));
  EXPECT_TRUE(listener->Accept([](int) {}).ok());
  listener->Close();
  EXPECT_EQ(::access(path_.c_str(), F_OK), 0);
}

TEST_F(UnixSocketListenerTest, AdoptRefusesWhatIsNotAListeningUnixSocket) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  ::close(pair[1]);
  absl::StatusOr<UnixSocketListener> listener =
      UnixSocketListener::Adopt(util::UniqueFd(pair[0]), "fd=5");
  EXPECT_EQ(listener.status().message(),
            "socket fd=5: not a listening unix socket (bexd takes one that listen() was called "
            "on)");
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ::close(pipe_fds[1]);
  listener = UnixSocketListener::Adopt(util::UniqueFd(pipe_fds[0]), "fd=6");
  EXPECT_EQ(listener.status().message(),
            "socket fd=6: not a socket: Socket operation on non-socket");
}

TEST_F(UnixSocketListenerTest, ListensAndRemovesItsSocketOnClose) {
  absl::StatusOr<UnixSocketListener> listener = UnixSocketListener::Listen(path_, 4);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_TRUE(SocketAnswers(path_));
  listener->Close();
  EXPECT_EQ(::access(path_.c_str(), F_OK), -1);
}

TEST_F(UnixSocketListenerTest, RefusesASocketSomethingListensOnAndLeavesIt) {
  util::UniqueFd live = ListenOnPath(path_);
  const ino_t inode = InodeAt(path_);
  absl::StatusOr<UnixSocketListener> listener = UnixSocketListener::Listen(path_, 4);
  ASSERT_FALSE(listener.ok());
  EXPECT_EQ(listener.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(listener.status().message(),
            "socket '" + path_ +
                "': a server is listening on it (another bexd, or another export or monitor); "
                "stop it or choose another path");
  EXPECT_EQ(InodeAt(path_), inode);
  EXPECT_TRUE(SocketAnswers(path_));
}

// A listener whose backlog is full answers EAGAIN to a non-blocking connect: still a live server.
TEST_F(UnixSocketListenerTest, RefusesALiveSocketWithAFullBacklog) {
  util::UniqueFd live = ListenOnPath(path_);
  ASSERT_EQ(::listen(live.get(), 0), 0);  // again, with the smallest backlog
  const sockaddr_un address = UnixAddress(path_);
  std::vector<util::UniqueFd> waiting;
  for (int i = 0; i < 8; ++i) {
    util::UniqueFd client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (::connect(client.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) !=
        0) {
      break;
    }
    waiting.push_back(std::move(client));
  }
  absl::StatusOr<UnixSocketListener> listener = UnixSocketListener::Listen(path_, 4);
  ASSERT_FALSE(listener.ok());
  EXPECT_EQ(listener.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(UnixSocketListenerTest, ReplacesASocketNobodyListensOn) {
  LeaveStaleSocket(path_);
  ASSERT_FALSE(SocketAnswers(path_));
  absl::StatusOr<UnixSocketListener> listener = UnixSocketListener::Listen(path_, 4);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_TRUE(SocketAnswers(path_));
}

TEST_F(UnixSocketListenerTest, RefusesARegularFileAndLeavesItIntact) {
  std::ofstream(path_) << "someone's data\n";
  absl::StatusOr<UnixSocketListener> listener = UnixSocketListener::Listen(path_, 4);
  ASSERT_FALSE(listener.ok());
  EXPECT_EQ(listener.status().message(),
            "socket '" + path_ + "': the path exists and is not a socket");
  EXPECT_EQ(Content(path_), "someone's data\n");
}

// A symlink is not followed, even to a stale socket.
TEST_F(UnixSocketListenerTest, RefusesASymlinkAndADirectory) {
  const std::string target = dir_.path() + "/target.sock";
  LeaveStaleSocket(target);
  ASSERT_EQ(::symlink(target.c_str(), path_.c_str()), 0);
  EXPECT_FALSE(UnixSocketListener::Listen(path_, 4).ok());
  struct stat st;
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(::lstat(target.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));

  const std::string directory = dir_.path() + "/dir";
  ASSERT_EQ(::mkdir(directory.c_str(), 0700), 0);
  EXPECT_FALSE(UnixSocketListener::Listen(directory, 4).ok());
  EXPECT_EQ(::access(directory.c_str(), F_OK), 0);
}

// Another process removed the socket file and put its own there: closing must not remove it.
TEST_F(UnixSocketListenerTest, CloseLeavesASocketThatReplacedItsOwn) {
  absl::StatusOr<UnixSocketListener> listener = UnixSocketListener::Listen(path_, 4);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  util::UniqueFd other = ListenOnPath(path_);
  const ino_t inode = InodeAt(path_);
  listener->Close();
  EXPECT_EQ(InodeAt(path_), inode);
  EXPECT_TRUE(SocketAnswers(path_));
}

TEST_F(UnixSocketListenerTest, RefusesPathsThatCannotBeBound) {
  EXPECT_FALSE(UnixSocketListener::Listen("", 4).ok());
  EXPECT_FALSE(UnixSocketListener::Listen(dir_.path() + "/" + std::string(120, 'x'), 4).ok());
  absl::StatusOr<UnixSocketListener> missing =
      UnixSocketListener::Listen(dir_.path() + "/no/such/dir/s.sock", 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot bind"), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace bexd::exports
