// SPDX-License-Identifier: GPL-2.0-or-later
// QMP commands against a real bexd: nodes and exports come and go while fio keeps running on
// another export with no error, every error path returns the right class, events reach clients.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "tests/control/control_fixture.h"
#include "tests/support/nbd_server.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

TEST_F(ControlTest, AddAndRemoveNodesAndExportsWhileFioRuns) {
  StartDaemon();
  std::string fio_output;
  int fio_status = -1;
  std::thread fio([&] {
    std::string command =
        "timeout -k 10 240 fio --name=busy --filename=" + mountpoint_ +
        " --rw=randrw --bs=4k --size=8M --iodepth=8 --ioengine=libaio --direct=0 --fsync=32"
        " --verify=crc32c --verify_fatal=1 --verify_state_save=0 --loops=4"
        " --output-format=normal 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) fio_output.append(buffer, n);
    fio_status = ::pclose(pipe);
  });
  // A failed ASSERT returns early; the fio thread must still be joined, not destroyed running.
  struct JoinAtExit {
    std::thread& thread;
    ~JoinAtExit() {
      if (thread.joinable()) thread.join();
    }
  } join_fio{fio};

  auto client = Connect();
  client->Negotiate();
  auto watcher = Connect();
  watcher->Negotiate();
  std::string second_mountpoint = dir_.File("mnt-second");
  for (int round = 0; round < 5; ++round) {
    std::string node = "null" + std::to_string(round);
    std::string id = "second" + std::to_string(round);
    ASSERT_EQ(Success(client->Execute("blockdev-add", NullNode(node))), "");
    ASSERT_EQ(Success(client->Execute("block-export-add", FuseExport(id, node, second_mountpoint))),
              "");
    ASSERT_TRUE(IsMounted(second_mountpoint));
    // The new export serves the null node: 8 MiB of zeroes.
    std::vector<char> data = [&] {
      std::string bytes = ReadFile(second_mountpoint);
      return std::vector<char>(bytes.begin(), bytes.end());
    }();
    EXPECT_EQ(data.size(), 8u << 20);
    EXPECT_EQ(std::count(data.begin(), data.end(), 0), static_cast<long>(data.size()));

    json exports = client->Execute("query-block-exports")["return"];
    EXPECT_EQ(exports.size(), 2u);
    // The kernel sends RELEASE for the file ReadFile closed after close() returned; until it
    // arrives the export is in use and a safe delete is refused.
    json deleted;
    ASSERT_TRUE(WaitFor([&] {
      deleted = client->Execute("block-export-del", {{"id", id}});
      return ErrorDesc(deleted).find("is in use") == std::string::npos;
    }));
    ASSERT_EQ(Success(deleted), "");
    std::optional<json> event = watcher->WaitEvent("BLOCK_EXPORT_DELETED");
    ASSERT_TRUE(event.has_value());
    EXPECT_EQ((*event)["data"], json({{"id", id}}));
    EXPECT_TRUE((*event)["timestamp"]["seconds"].is_number());
    EXPECT_TRUE((*event)["timestamp"]["microseconds"].is_number());
    EXPECT_FALSE(IsMounted(second_mountpoint));
    ASSERT_EQ(Success(client->Execute("blockdev-del", {{"node-name", node}})), "");
  }
  json nodes = client->Execute("query-named-block-nodes")["return"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["node-name"], "disk0");
  EXPECT_EQ(nodes[0]["drv"], "file");
  EXPECT_EQ(nodes[0]["image"]["virtual-size"], kImageBytes);

  fio.join();
  EXPECT_EQ(fio_status, 0) << fio_output;
  EXPECT_NE(fio_output.find("err= 0"), std::string::npos) << fio_output;

  json stats = client->Execute("x-query-export-stats", {{"id", "exp0"}})["return"];
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_GT(stats[0]["total"]["bytes-written"].get<uint64_t>(), 0u);
  EXPECT_GT(stats[0]["total"]["write-requests"].get<uint64_t>(), 0u);
  EXPECT_EQ(stats[0]["total"]["in-flight"], 0);
  EXPECT_GE(stats[0]["queues"].size(), 1u);
  EXPECT_TRUE(stats[0]["total"]["latency-us"]["p99"].is_number());
}

TEST_F(ControlTest, ErrorPathsReturnGenericError) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  struct Case {
    std::string command;
    json arguments;
    std::string desc;
  } cases[] = {
      {"blockdev-add", NullNode("disk0"), "Duplicate nodes with node-name='disk0'"},
      {"blockdev-add",
       {{"driver", "null-co"}, {"node-name", "n"}, {"size", "1G"}},
       "size: expected a size in bytes (a non-negative integer), got \"1G\""},
      {"blockdev-add",
       {{"driver", "file"}, {"node-name", "f"}, {"filename", Path("none.img")}},
       "Could not open '" + Path("none.img") + "': No such file or directory"},
      {"blockdev-del", {{"node-name", "disk0"}}, "Node disk0 is in use"},
      {"blockdev-del", {{"node-name", "ghost"}}, "Failed to find node with node-name='ghost'"},
      {"blockdev-del", json::object(), "node-name: missing (required)"},
      {"block-export-add", FuseExport("exp0", "disk0", dir_.File("other")),
       "Block export id 'exp0' is already in use"},
      {"block-export-add", FuseExport("e1", "ghost", dir_.File("other2")),
       "Cannot find device='' nor node-name='ghost'"},
      {"block-export-add", FuseExport("e2", "disk0", mountpoint_),
       "There already is a FUSE export on '" + mountpoint_ + "'"},
      {"block-export-add", FuseExport("e3", "disk0", dir_.path()),
       "'" + dir_.path() + "' is not a regular file"},
      {"block-export-add", FuseExport("", "disk0", dir_.File("other3")), "Invalid block export id"},
      {"block-export-add", FuseExport("a b", "disk0", dir_.File("other3")),
       "Invalid block export id"},
      {"block-export-del", {{"id", "ghost"}}, "Export 'ghost' is not found"},
      {"block-export-del",
       {{"id", "exp0"}, {"mode", "brutal"}},
       "mode: expected one of safe, hard; got \"brutal\""},
      {"x-query-export-stats", {{"id", "ghost"}}, "export 'ghost' not found"},
      {"quit", {{"now", true}}, "now: unknown option"},
  };
  for (const Case& c : cases) {
    json reply = client->Execute(c.command, c.arguments);
    EXPECT_EQ(ErrorClass(reply), "GenericError") << c.command << " " << c.arguments;
    if (!c.desc.empty()) {
      EXPECT_EQ(ErrorDesc(reply), c.desc) << c.command << " " << c.arguments;
    }
  }
  // Nothing changed.
  EXPECT_EQ(client->Execute("query-named-block-nodes")["return"].size(), 1u);
  EXPECT_EQ(client->Execute("query-block-exports")["return"].size(), 1u);
}

TEST_F(ControlTest, SafeDeleteRefusesWhileOpenHardDeleteRemoves) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  int fd = ::open(mountpoint_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "bexd", 4, 0), 4);
  ASSERT_EQ(::fsync(fd), 0);

  json reply = client->Execute("block-export-del", {{"id", "exp0"}});
  EXPECT_EQ(ErrorClass(reply), "GenericError");
  EXPECT_EQ(ErrorDesc(reply), "export 'exp0' is in use; close it first or use mode=hard");
  EXPECT_TRUE(IsMounted(mountpoint_));

  reply = client->Execute("block-export-del", {{"id", "exp0"}, {"mode", "hard"}});
  EXPECT_EQ(Success(reply), "");
  EXPECT_TRUE(client->WaitEvent("BLOCK_EXPORT_DELETED").has_value());
  EXPECT_FALSE(IsMounted(mountpoint_));
  ::close(fd);
  EXPECT_EQ(ReadFile(image_).substr(0, 4), "bexd");
  EXPECT_EQ(client->Execute("query-block-exports")["return"], json::array());
  EXPECT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "disk0"}})), "");
}

// The kernel sends FUSE RELEASE in the background after close() has returned: a script that
// closes the file and then deletes the export (as it would with QSD, which never refuses) must
// not be refused for a release still on its way.
TEST_F(ControlTest, SafeDeleteRightAfterTheLastCloseSucceeds) {
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  ASSERT_EQ(Success(client->Execute("block-export-del", {{"id", "exp0"}})), "");
  ASSERT_TRUE(client->WaitEvent("BLOCK_EXPORT_DELETED").has_value());
  for (int round = 0; round < 30; ++round) {
    ASSERT_EQ(
        Success(client->Execute("block-export-add", FuseExport("exp0", "disk0", mountpoint_))), "");
    int fd = ::open(mountpoint_.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::pwrite(fd, "bexd", 4, 0), 4);
    ASSERT_EQ(::fsync(fd), 0);
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(Success(client->Execute("block-export-del", {{"id", "exp0"}})), "")
        << "round " << round;
    ASSERT_TRUE(client->WaitEvent("BLOCK_EXPORT_DELETED").has_value());
  }
}

// A stop that waits for storage (an NBD server that stopped answering, with a write in flight)
// does not hold the control socket, as in QEMU: block-export-del replies, the export is listed as
// shutting down, other commands are served, and once the storage answers the export is removed
// and announced.
TEST_F(ControlTest, DeletingAnExportWhoseStorageHangsDoesNotHoldTheControlSocket) {
  if (!HaveProgram("nbdkit")) GTEST_SKIP() << "nbdkit is missing";
  StartDaemon();
  auto client = Connect();
  client->Negotiate();
  const std::string image = Path("nbd.img");
  ASSERT_EQ(::close(::open(image.c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  ASSERT_EQ(::truncate(image.c_str(), 16 << 20), 0);
  NbdServer server({"nbdkit", "-f", "-U", Path("nbd.sock"), "-P", Path("nbd.pid"), "file", image},
                   Path("nbd.pid"), Path("nbd.log"), Path("nbd.sock"));
  ASSERT_TRUE(server.Start()) << server.why_not();
  ASSERT_EQ(Success(client->Execute("blockdev-add",
                                    {{"driver", "nbd"},
                                     {"node-name", "nbd0"},
                                     {"server", {{"type", "unix"}, {"path", Path("nbd.sock")}}}})),
            "");
  const std::string mountpoint = Path("nbd-mnt");
  ASSERT_EQ(::close(::open(mountpoint.c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  ASSERT_EQ(Success(client->Execute("block-export-add", FuseExport("exp1", "nbd0", mountpoint))),
            "");

  server.Signal(SIGSTOP);
  std::thread writer([&] {
    int fd = ::open(mountpoint.c_str(), O_WRONLY);
    if (fd < 0) return;
    // Fails (the export is removed under it) or succeeds; either way only once the server is back.
    [[maybe_unused]] ssize_t written = ::pwrite(fd, "hang", 4, 0);
    ::fsync(fd);
    ::close(fd);
  });
  // The write reaches the export, whose request to the server cannot be answered.
  ASSERT_TRUE(WaitFor([&] {
    json stats = client->Execute("x-query-export-stats", {{"id", "exp1"}})["return"];
    return !stats.empty() && stats[0]["total"]["in-flight"].get<uint64_t>() > 0;
  }));
  ASSERT_EQ(Success(client->Execute("block-export-del", {{"id", "exp1"}, {"mode", "hard"}})), "");
  json exports = client->Execute("query-block-exports")["return"];
  ASSERT_EQ(exports.size(), 2u) << exports;
  EXPECT_EQ(exports[0]["id"], "exp1");
  EXPECT_EQ(exports[0]["shutting-down"], true);
  EXPECT_EQ(ErrorDesc(client->Execute("block-export-del", {{"id", "exp1"}, {"mode", "hard"}})),
            "Export 'exp1' is already shutting down");
  EXPECT_EQ(ErrorDesc(client->Execute("blockdev-del", {{"node-name", "nbd0"}})),
            "Node nbd0 is in use");
  EXPECT_EQ(ErrorClass(client->Execute("query-version")), "");

  server.Signal(SIGCONT);
  std::optional<json> event = client->WaitEvent("BLOCK_EXPORT_DELETED");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ((*event)["data"]["id"], "exp1");
  writer.join();
  EXPECT_FALSE(IsMounted(mountpoint));
  EXPECT_EQ(client->Execute("query-block-exports")["return"].size(), 1u);
  EXPECT_EQ(Success(client->Execute("blockdev-del", {{"node-name", "nbd0"}})), "");
}

TEST_F(ControlTest, TwoClientsSeeEachOthersChanges) {
  StartDaemon();
  auto first = Connect();
  first->Negotiate();
  auto second = Connect();
  second->Negotiate();
  ASSERT_EQ(Success(first->Execute("blockdev-add", NullNode("shared"))), "");
  json nodes = second->Execute("query-named-block-nodes")["return"];
  ASSERT_EQ(nodes.size(), 2u);
  // Newest first, as QEMU lists them.
  EXPECT_EQ(nodes[0]["node-name"], "shared");
  EXPECT_EQ(nodes[0]["drv"], "null-co");
  EXPECT_EQ(nodes[1]["node-name"], "disk0");
  ASSERT_EQ(Success(second->Execute("blockdev-del", {{"node-name", "shared"}})), "");
  EXPECT_EQ(first->Execute("query-named-block-nodes")["return"].size(), 1u);
}

}  // namespace
}  // namespace bexd::testing
