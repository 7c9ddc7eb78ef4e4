// SPDX-License-Identifier: GPL-2.0-or-later
// limit_responder: a FUSE server that answers every request at once without touching data, on one
// or more cloned /dev/fuse queues. Benchmarks against it give the FUSE round-trip ceiling that any
// export on this machine can at best reach. libfuse3 is used only to mount and unmount.
#define FUSE_USE_VERSION 34
#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "perf/responder.h"
#include "perf/responder_options.h"
#include "perf/responder_queue.h"
#include "util/eventfd.h"
#include "util/log.h"
#include "util/unique_fd.h"

namespace bexd::perf {
namespace {

struct SessionDeleter {
  void operator()(fuse_session* session) const { fuse_session_destroy(session); }
};
using Session = std::unique_ptr<fuse_session, SessionDeleter>;

// Creates the libfuse session and mounts it on `mountpoint`; null (already logged) on failure.
Session Mount(const std::string& mountpoint) {
  // allow_other lets benchmarks run as any user; only root may set it without fuse.conf changes.
  std::string mount_options = "default_permissions,fsname=limit_responder,subtype=limit_responder";
  if (geteuid() == 0) mount_options += ",allow_other";
  std::vector<std::string> argv_storage = {"limit_responder", "-o", mount_options};
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  // No operations: libfuse never sees a request, the queues read /dev/fuse themselves.
  const fuse_lowlevel_ops no_ops{};
  Session session(fuse_session_new(&args, &no_ops, sizeof(no_ops), nullptr));
  if (!session) {
    log::Error("cannot create a FUSE session (options '{}')", mount_options);
    return nullptr;
  }
  if (fuse_session_mount(session.get(), mountpoint.c_str()) != 0) {
    log::Error("cannot mount on '{}' (libfuse printed why above)", mountpoint);
    return nullptr;
  }
  return session;
}

// A new /dev/fuse fd attached to the same connection as `session_fd`; -1 (logged) on failure.
int CloneQueue(int session_fd) {
  const int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    log::Error("cannot open /dev/fuse for a cloned queue: {}", std::strerror(errno));
    return -1;
  }
  uint32_t source = static_cast<uint32_t>(session_fd);
  if (ioctl(fd, FUSE_DEV_IOC_CLONE, &source) != 0) {
    log::Error("FUSE_DEV_IOC_CLONE failed: {}", std::strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

// Waits until a stop signal arrives or a queue ends on its own. Returns false if polling failed.
bool WaitForStop(int signal_fd, int done_fd) {
  pollfd fds[2] = {{signal_fd, POLLIN, 0}, {done_fd, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log::Error("poll failed: {}", std::strerror(errno));
      return false;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      if (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
        log::Info("signal {} received, unmounting", info.ssi_signo);
      }
      return true;
    }
    if (fds[1].revents & POLLIN) {
      log::Warn("a queue ended before any stop signal (unmounted from outside?)");
      return true;
    }
  }
}

// Waits for all `queues` queue threads to report their end. The file may still be open, in which
// case the detached mount lives on until it is closed; a second signal ends the process at once.
void WaitForQueues(int signal_fd, int done_fd, size_t queues) {
  uint64_t ended = 0;
  pollfd fds[2] = {{signal_fd, POLLIN, 0}, {done_fd, POLLIN, 0}};
  while (ended < queues) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log::Error("poll failed while waiting for queues: {}", std::strerror(errno));
      _exit(1);
    }
    if (fds[0].revents & POLLIN) {
      log::Error("second signal while the file is still in use; exiting without waiting");
      _exit(1);
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count = 0;
      if (read(done_fd, &count, sizeof(count)) == sizeof(count)) ended += count;
    }
  }
}

int Run(const ResponderOptions& options) {
  log::SetLevel(options.log_level);
  // Stop signals are taken through a signalfd; block them before any thread starts so that no
  // queue thread is interrupted by one.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  if (pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr) != 0) {
    log::Error("cannot block stop signals");
    return 1;
  }
  const util::UniqueFd signal_fd(signalfd(-1, &stop_signals, SFD_CLOEXEC));
  if (signal_fd.get() < 0) {
    log::Error("cannot create the signalfd: {}", std::strerror(errno));
    return 1;
  }
  // Each queue thread adds 1 as it ends; a read returns how many ended since the last one.
  absl::StatusOr<util::UniqueFd> done_fd = util::CreateEventFd();
  if (!done_fd.ok()) {
    log::Error("cannot create the eventfd: {}", done_fd.status().ToString());
    return 1;
  }

  Session session = Mount(options.mountpoint);
  if (!session) return 1;
  const int session_fd = fuse_session_fd(session.get());
  std::vector<util::UniqueFd> clones;
  for (uint32_t i = 1; i < options.queues; ++i) {
    const int fd = CloneQueue(session_fd);
    if (fd < 0) {
      fuse_session_unmount(session.get());
      return 1;
    }
    clones.emplace_back(fd);
  }

  const Responder responder(options.config);
  std::vector<std::unique_ptr<ResponderQueue>> queues;
  queues.push_back(std::make_unique<ResponderQueue>(responder, session_fd, 0, done_fd->get()));
  for (uint32_t i = 1; i < options.queues; ++i) {
    queues.push_back(
        std::make_unique<ResponderQueue>(responder, clones[i - 1].get(), i, done_fd->get()));
  }
  log::Info("serving '{}' ({} bytes) on {} queue(s)", options.mountpoint, options.config.file_size,
            options.queues);

  const bool waited = WaitForStop(signal_fd.get(), done_fd->get());
  fuse_session_unmount(session.get());
  WaitForQueues(signal_fd.get(), done_fd->get(), queues.size());
  bool failed = !waited;
  for (size_t i = 0; i < queues.size(); ++i) {
    queues[i]->Join();
    failed = failed || queues[i]->failed();
    log::Info("queue {} answered {} requests", i, queues[i]->answered());
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace bexd::perf

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(bexd::perf::ResponderUsage(), stdout);
      return 0;
    }
  }
  absl::StatusOr<bexd::perf::ResponderOptions> options =
      bexd::perf::ParseResponderOptions({argv + 1, static_cast<size_t>(argc - 1)});
  if (!options.ok()) {
    std::fprintf(stderr, "limit_responder: %s\n%s", std::string(options.status().message()).c_str(),
                 bexd::perf::ResponderUsage());
    return 2;
  }
  return bexd::perf::Run(*options);
}
