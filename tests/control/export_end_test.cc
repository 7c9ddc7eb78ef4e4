// SPDX-License-Identifier: GPL-2.0-or-later
// A FUSE export that ends by itself (an outside umount, an aborted connection) leaves the daemon
// as if block-export-del had removed it: one BLOCK_EXPORT_DELETED, its id, mountpoint and node are
// free again, and the daemon keeps running even when that was its only export.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tests/control/control_fixture.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

// `client` gets exactly one BLOCK_EXPORT_DELETED for `id`.
void ExpectDeletedOnce(QmpClient& client, const std::string& id) {
  std::optional<json> event = client.WaitEvent("BLOCK_EXPORT_DELETED");
  ASSERT_TRUE(event.has_value()) << "no BLOCK_EXPORT_DELETED for '" << id << "'";
  EXPECT_EQ((*event)["data"], json({{"id", id}}));
  // The daemon sends events in order with replies, and it announces an export in the same pass of
  // its loop that removes it: a second announcement would arrive before this reply.
  EXPECT_EQ(Success(client.Execute("query-version")), "");
  std::optional<json> again = client.WaitEvent("BLOCK_EXPORT_DELETED", std::chrono::seconds(0));
  EXPECT_FALSE(again.has_value()) << again->dump();
}

// The name of the FUSE connection mounted on `path` under a fusectl mount: the kernel's device
// number of the file system (20 minor bits), which stat() reports in the user-space encoding.
std::string ConnectionName(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return std::to_string(static_cast<uint64_t>(major(st.st_dev)) << 20 | minor(st.st_dev));
}

TEST_F(ControlTest, OutsideUnmountRemovesTheExportAndFreesItsIdAndNode) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  auto watcher = Connect();
  watcher->Negotiate();
  // Written before the end, read back through the export that takes over the id.
  int fd = ::open(mountpoint_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, "written before the end", 22, 4096), 22);
  ASSERT_EQ(::close(fd), 0);

  ASSERT_EQ(::umount2(mountpoint_.c_str(), 0), 0) << std::strerror(errno);
  ExpectDeletedOnce(*watcher, "exp0");
  ExpectDeletedOnce(*client, "exp0");
  EXPECT_EQ(client->Execute("query-block-exports")["return"], json::array());
  // Its only export is gone; like QSD, the daemon stays up and says why.
  EXPECT_TRUE(daemon_->running());
  const std::string messages = ReadFile(log_);
  EXPECT_NE(messages.find("export 'exp0' ended on its own ("), std::string::npos) << messages;
  EXPECT_NE(messages.find("was unmounted from outside); removed it"), std::string::npos)
      << messages;

  ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "disk0"}})), "");
  ASSERT_EQ(
      Success(client->Execute("blockdev-add",
                              {{"driver", "file"}, {"node-name", "disk0"}, {"filename", image_}})),
      "");
  ASSERT_EQ(Success(client->Execute("block-export-add", FuseExport("exp0", "disk0", mountpoint_))),
            "");
  EXPECT_TRUE(IsMounted(mountpoint_));
  EXPECT_EQ(ReadFile(mountpoint_).substr(4096, 22), "written before the end");
  json exports = client->Execute("query-block-exports")["return"];
  ASSERT_EQ(exports.size(), 1u);
  EXPECT_EQ(exports[0]["id"], "exp0");
  EXPECT_EQ(exports[0]["shutting-down"], false);
}

TEST_F(ControlTest, AbortedConnectionRemovesTheExport) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  const std::string connection = ConnectionName(mountpoint_);
  ASSERT_FALSE(connection.empty()) << std::strerror(errno);
  // A fusectl mount of the test's own: the host may not have one on /sys/fs/fuse/connections.
  const std::string control = Path("fusectl");
  ASSERT_TRUE(std::filesystem::create_directory(control));
  ASSERT_EQ(::mount("fusectl", control.c_str(), "fusectl", 0, nullptr), 0) << std::strerror(errno);
  const std::string abort_path = control + "/" + connection + "/abort";
  int fd = ::open(abort_path.c_str(), O_WRONLY);
  const bool aborted = fd >= 0 && ::write(fd, "1", 1) == 1;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  ::umount2(control.c_str(), 0);
  ASSERT_TRUE(aborted) << abort_path << ": " << std::strerror(error);

  ExpectDeletedOnce(*client, "exp0");
  EXPECT_EQ(client->Execute("query-block-exports")["return"], json::array());
  // The mount outlives an aborted connection; the export took it down before it was announced.
  EXPECT_FALSE(IsMounted(mountpoint_));
  const std::string messages = ReadFile(log_);
  EXPECT_NE(
      messages.find("export 'exp0' ended on its own (its FUSE connection was aborted or failed); "
                    "removed it"),
      std::string::npos)
      << messages;
  EXPECT_TRUE(daemon_->running());
  ASSERT_EQ(Success(client->Execute("block-export-add", FuseExport("exp0", "disk0", mountpoint_))),
            "");
  EXPECT_TRUE(IsMounted(mountpoint_));
}

// block-export-del racing the export's own end: whichever removes it announces it, once.
TEST_F(ControlTest, DeleteRacingTheEndAnnouncesItOnce) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  auto watcher = Connect();
  watcher->Negotiate();
  const std::string mountpoint = dir_.File("racing");
  ASSERT_EQ(Success(client->Execute("blockdev-add", NullNode("null0"))), "");
  for (int round = 0; round < 10; ++round) {
    ASSERT_EQ(
        Success(client->Execute("block-export-add", FuseExport("racer", "null0", mountpoint))), "");
    ASSERT_EQ(::umount2(mountpoint.c_str(), 0), 0) << std::strerror(errno);
    json reply = client->Execute("block-export-del", {{"id", "racer"}, {"mode", "hard"}});
    // If the end was handled first the id is gone already.
    if (!reply.contains("return")) {
      EXPECT_EQ(ErrorDesc(reply), "Export 'racer' is not found");
    }
    ExpectDeletedOnce(*watcher, "racer");
  }
  EXPECT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "null0"}})), "");
  EXPECT_EQ(client->Execute("query-block-exports")["return"].size(), 1u);
}

// Storage that never answers a flush (null-co with an hour of latency, in place of a hung NBD
// server) keeps an export that ends, or is deleted, in its final flush. The control thread must
// not wait for it: block_resize dropped every export's cached attributes under the lock that
// flush holds, and block-export-add stat()ed every export's mountpoint, whose queues no longer
// answer (outside audit: both held the QMP loop, and a stop signal, for as long as the flush).
TEST_F(ControlTest, AnExportStuckInItsFinalFlushHoldsNoControlCommand) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  const std::string ended = Path("ended.mnt");
  const std::string deleted = Path("deleted.mnt");
  for (const std::string& id : {std::string("ended"), std::string("deleted")}) {
    json hung = NullNode(id + "-node");
    hung["latency-ns"] = uint64_t{3600} * 1000000000;
    ASSERT_EQ(Success(client->Execute("blockdev-add", hung)), "");
    const std::string mountpoint = Path(id + ".mnt");
    ::close(::open(mountpoint.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_EQ(
        Success(client->Execute("block-export-add", FuseExport(id, id + "-node", mountpoint))), "");
  }
  ASSERT_EQ(::umount2(ended.c_str(), 0), 0) << std::strerror(errno);
  // The delete replies once it has waited a while, and the export stays listed.
  ASSERT_EQ(Success(client->Execute("block-export-del", {{"id", "deleted"}})), "");
  // Both are in their final flush, shown as shutting down.
  ASSERT_TRUE(WaitFor([&] {
    json exports = client->Execute("query-block-exports")["return"];
    int shutting_down = 0;
    for (const json& exported : exports) shutting_down += exported["shutting-down"] == true;
    return shutting_down == 2;
  })) << client->Execute("query-block-exports").dump();
  // Past the kernel's 1 s attribute cache, a stat of 'deleted.mnt' would wait for its export.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));

  EXPECT_EQ(Success(client->Execute("block_resize", {{"node-name", "disk0"}, {"size", 32 << 20}})),
            "");
  const std::string other = Path("other.mnt");
  ::close(::open(other.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  EXPECT_EQ(Success(client->Execute("block-export-add", FuseExport("other", "disk0", other))), "");
  EXPECT_EQ(Success(client->Execute("block-export-del", {{"id", "other"}})), "");

  // Nothing ends that flush: kill the daemon and clear what it leaves mounted.
  daemon_->Stop(SIGKILL);
  for (const std::string& path : {deleted, mountpoint_}) ::umount2(path.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace bexd::testing
