// SPDX-License-Identifier: GPL-2.0-or-later
// bexd: parse and check every option, open the nodes, start the exports, then serve QMP and
// signals on the main thread until asked to stop; stop every export before exiting.
#include <absl/strings/str_join.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "cli/config/command_line.h"
#include "cli/daemon/daemon.h"
#include "cli/daemon/daemonize.h"
#include "cli/daemon/demo.h"
#include "cli/daemon/event_loop.h"
#include "cli/daemon/forced_exit.h"
#include "cli/daemon/pidfile.h"
#include "cli/daemon/qmp_commands.h"
#include "cli/daemon/qmp_server.h"
#include "cli/daemon/sd_notify.h"
#include "util/log.h"
#include "util/status.h"
#include "util/unique_fd.h"

namespace bexd::cli {
namespace {

// Blocks the stop signals in this thread and so in every thread it starts later, and returns a
// signalfd that reports them to the event loop.
absl::StatusOr<util::UniqueFd> StopSignalFd() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, signal);
  if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    return absl::InternalError("cannot block SIGINT/SIGTERM/SIGHUP");
  }
  util::UniqueFd fd(::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd) return util::ErrnoStatus(errno, "signalfd");
  return fd;
}

// Runs after the command line was checked (and the demo set up). Returns the exit status.
int Serve(const CommandLine& command_line, const DemoPaths* demo) {
  StartupReport report = command_line.daemonize ? StartupReport::Daemonize() : StartupReport();
  auto fail = [&](const absl::Status& status) {
    report.Failed(std::string(status.message()));
    return 1;
  };
  ::signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<util::UniqueFd> signal_fd = StopSignalFd();
  if (!signal_fd.ok()) return fail(signal_fd.status());

  std::unique_ptr<Pidfile> pidfile;
  if (!command_line.pidfile.empty()) {
    absl::StatusOr<std::unique_ptr<Pidfile>> acquired = Pidfile::Acquire(command_line.pidfile);
    if (!acquired.ok()) return fail(acquired.status());
    pidfile = *std::move(acquired);
  }

  const DaemonConfig& config = command_line.config;
  EventLoop loop;
  if (!loop.status().ok()) return fail(loop.status());
  Daemon daemon(config.iothreads);
  QmpCommands commands(&daemon);
  QmpServer server(&loop, &commands);
  auto announce_deleted = [&server](const std::string& id) {
    server.Broadcast(QmpEvent("BLOCK_EXPORT_DELETED", {{"id", id}}));
  };
  // After the reply of the block-export-del that removed it, as QEMU, which deletes the export in
  // a bottom half once the command has returned: iotest 308 waits for the reply, then for the
  // event, and misses an event sent before the reply.
  daemon.set_export_deleted_callback([&loop, announce_deleted](const std::string& id) {
    loop.Post([announce_deleted, id] { announce_deleted(id); });
  });
  // As QEMU: SHUTDOWN when the stop is decided, then every export goes with its
  // BLOCK_EXPORT_DELETED (for quit, before the command's reply).
  auto shut_down = [&server, &daemon, &loop, announce_deleted,
                    signals = signal_fd->get()](std::string_view reason) {
    // First what was posted before the stop (an export that ended or was deleted just before it
    // is forgotten, which posts its event), so that every event keeps its place before SHUTDOWN.
    while (loop.RunPosted()) {
    }
    NotifyServiceManager("STOPPING=1");
    server.Broadcast(QmpEvent("SHUTDOWN", {{"guest", false}, {"reason", reason}}));
    ForcedExit forced_exit(signals);
    daemon.StopAllExports(announce_deleted);
  };
  commands.set_quit_callback([&] { shut_down("host-qmp-quit"); });
  // Runs on a queue thread of the export, which Stop() joins: only hand over to the main loop.
  // The loop outlives the daemon, whose destructor joins every export thread.
  daemon.set_export_ended_callback(
      [&loop, &daemon] { loop.Post([&daemon] { daemon.RemoveEndedExports(); }); });

  // Before any node: drivers look up the secrets and credentials their options name when they
  // open.
  for (const SecretObject& secret : config.secrets) {
    absl::Status status = daemon.AddSecret(secret.id, secret.value);
    if (!status.ok()) return fail(status);
  }
  for (const TlsCredsObject& creds : config.tls_creds) {
    absl::Status status = daemon.AddTlsCredentials(creds.id, creds.credentials);
    if (!status.ok()) return fail(status);
  }
  for (const block::BlockdevOptions& options : config.blockdevs) {
    absl::Status status = daemon.AddBlockdev(options);
    if (!status.ok()) return fail(status);
  }
  // Monitors first, so that the export checks see their socket paths.
  for (const MonitorSpec& monitor : config.monitors) {
    if (monitor.path.empty()) continue;  // fd=N or stdio
    absl::Status status = daemon.AddMonitorPath(monitor.path);
    if (!status.ok()) return fail(status);
  }
  absl::Status status = daemon.CheckNewExports(config.exports);
  if (!status.ok()) return fail(status);
  for (const MonitorSpec& monitor : config.monitors) {
    if (monitor.stdio) {
      status = server.ServeStdio(monitor.pretty);
    } else if (monitor.fd >= 0) {
      status = server.ListenOnDescriptor(monitor.fd, monitor.pretty);
    } else {
      status = server.Listen(monitor.path, monitor.pretty);
    }
    if (!status.ok()) return fail(status);
  }
  // Exports come last: a failure here stops the ones already started (Daemon's destructor).
  for (const ExportSpec& spec : config.exports) {
    status = daemon.AddExport(spec);
    if (!status.ok()) return fail(status);
  }
  if (pidfile) {
    status = pidfile->WritePid();
    if (!status.ok()) return fail(status);
  }

  bool stop = false;
  status = loop.Add(signal_fd->get(), EPOLLIN, [&](uint32_t) {
    signalfd_siginfo info;
    while (::read(signal_fd->get(), &info, sizeof(info)) == sizeof(info)) {
      log::Info("received SIG{}; shutting down (another stop signal exits at once)",
                ::sigabbrev_np(info.ssi_signo));
      stop = true;
    }
  });
  if (!status.ok()) return fail(status);

  if (demo != nullptr) {
    std::string text = DemoInstructions(*demo);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  log::Info("ready: {} node(s), {} export(s)", config.blockdevs.size(), config.exports.size());
  report.Succeeded();
  NotifyServiceManager("READY=1");

  while (!stop && !commands.quit_requested()) {
    status = loop.RunOnce(-1);
    if (!status.ok()) {
      log::Error("event loop: {}", status.ToString());
      break;
    }
  }
  if (commands.quit_requested()) {
    log::Info("quit requested over QMP; shut down");
  } else {
    shut_down("host-signal");
  }
  server.FlushAll();
  loop.Remove(signal_fd->get());
  if (!daemon.stop_flush_failures().empty()) {
    log::Error(
        "exiting with status 1: the final flush of export(s) {} failed, so data written "
        "through them may not be durable",
        absl::StrJoin(daemon.stop_flush_failures(), ", "));
    return 1;
  }
  return status.ok() ? 0 : 1;
}

int Main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  absl::StatusOr<CommandLine> command_line = ParseCommandLine(args);
  if (!command_line.ok()) {
    log::Error("{}", std::string(command_line.status().message()));
    return 1;
  }
  if (command_line->help) {
    std::fputs(UsageText().c_str(), stdout);
    return 0;
  }
  if (!command_line->item_help.empty()) {
    std::fputs(command_line->item_help.c_str(), stdout);
    return 0;
  }
  if (command_line->version) {
    std::printf("bexd %s\n", BEXD_VERSION);
    return 0;
  }
  log::SetLevel(command_line->log_level);
  if (!command_line->demo) return Serve(*command_line, nullptr);
  absl::StatusOr<DemoPaths> demo = SetUpDemo(command_line->demo_dir, &*command_line);
  if (!demo.ok()) {
    log::Error("{}", std::string(demo.status().message()));
    return 1;
  }
  return Serve(*command_line, &*demo);
}

}  // namespace
}  // namespace bexd::cli

int main(int argc, char** argv) { return bexd::cli::Main(argc, argv); }
