// SPDX-License-Identifier: GPL-2.0-or-later
// The real bexd with bad options: exit status 1, exactly one error line naming the option, and
// nothing mounted, not even the exports whose own options were fine.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <utility>

#include "tests/cli/bexd_process.h"

namespace bexd::testing {
namespace {

class BinaryErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    image_ = dir_.File("disk.img", 1 << 20);
    mountpoint_ = dir_.File("mnt");
    second_mountpoint_ = dir_.File("mnt2");
  }

  // Runs bexd and checks the common contract; returns the error line.
  std::string ExpectOneError(const std::vector<std::string>& args) {
    RunResult result = RunBexd(args);
    EXPECT_EQ(result.exit_status, 1) << result.err;
    EXPECT_EQ(CountLines(result.err), 1) << result.err;
    EXPECT_TRUE(result.err.starts_with("bexd: error: ")) << result.err;
    EXPECT_EQ(result.out, "");
    EXPECT_FALSE(IsMounted(mountpoint_));
    EXPECT_FALSE(IsMounted(second_mountpoint_));
    std::string line = result.err;
    if (line.starts_with("bexd: error: ")) line.erase(0, 13);
    if (line.ends_with("\n")) line.pop_back();
    return line;
  }

  std::string GoodBlockdev() const { return "driver=file,node-name=disk0,filename=" + image_; }
  std::string GoodExport() const {
    return "type=fuse,id=exp0,node-name=disk0,writable=on,mountpoint=" + mountpoint_;
  }

  TempDir dir_;
  std::string image_;
  std::string mountpoint_;
  std::string second_mountpoint_;
};

TEST_F(BinaryErrorsTest, HelpAndVersion) {
  RunResult help = RunBexd({"--help"});
  EXPECT_EQ(help.exit_status, 0);
  EXPECT_TRUE(help.out.starts_with("Usage: bexd")) << help.out;
  RunResult version = RunBexd({"--version"});
  EXPECT_EQ(version.exit_status, 0);
  EXPECT_EQ(version.out, "bexd " BEXD_VERSION "\n");
}

TEST_F(BinaryErrorsTest, BadValue) {
  EXPECT_EQ(ExpectOneError(
                {"--blockdev", GoodBlockdev() + ",cache.direct=maybe", "--export", GoodExport()}),
            "--blockdev: cache.direct: expected on or off, got \"maybe\"");
}

TEST_F(BinaryErrorsTest, UnknownKey) {
  EXPECT_EQ(
      ExpectOneError({"--blockdev", GoodBlockdev(), "--export", GoodExport() + ",colour=red"}),
      "--export: colour: unknown option (known here: allow-other, fixed-iothread, growable, "
      "id, io-uring, io-uring-queue-depth, iothread, mountpoint, node-name, num-queues, "
      "passthrough, queue-cpus, type, writable, writethrough)");
}

TEST_F(BinaryErrorsTest, MissingRequiredKey) {
  EXPECT_EQ(ExpectOneError({"--blockdev", "driver=file,node-name=disk0", "--export", GoodExport()}),
            "--blockdev: filename: missing (required)");
}

TEST_F(BinaryErrorsTest, WrongJsonType) {
  EXPECT_EQ(ExpectOneError({"--blockdev", GoodBlockdev(), "--export",
                            R"({"type":"fuse","id":"e","node-name":"disk0","mountpoint":")" +
                                mountpoint_ + R"(","writable":"on"})"}),
            "--export: writable: expected true or false, got \"on\"");
}

TEST_F(BinaryErrorsTest, UnparsableJson) {
  std::string line = ExpectOneError({"--blockdev", R"({"driver": "file", "node-name": )"});
  EXPECT_TRUE(line.starts_with("--blockdev: invalid JSON: line 1, column 33")) << line;
}

TEST_F(BinaryErrorsTest, MissingImageFile) {
  std::string line =
      ExpectOneError({"--blockdev", GoodBlockdev() + ".missing", "--export", GoodExport()});
  EXPECT_EQ(line, "Could not open '" + image_ + ".missing': No such file or directory");
}

TEST_F(BinaryErrorsTest, MountpointNotARegularFile) {
  EXPECT_EQ(ExpectOneError({"--blockdev", GoodBlockdev(), "--export",
                            "type=fuse,id=e,node-name=disk0,mountpoint=" + dir_.path()}),
            "--export: '" + dir_.path() + "' is not a regular file");
}

TEST_F(BinaryErrorsTest, UnknownNodeName) {
  EXPECT_EQ(ExpectOneError({"--blockdev", GoodBlockdev(), "--export", GoodExport(), "--export",
                            "type=fuse,id=exp1,node-name=nope,mountpoint=" + second_mountpoint_}),
            "Cannot find device='' nor node-name='nope'");
}

TEST_F(BinaryErrorsTest, DuplicateNodeName) {
  EXPECT_EQ(ExpectOneError({"--blockdev", GoodBlockdev(), "--blockdev",
                            "driver=null-co,node-name=disk0", "--export", GoodExport()}),
            "Duplicate nodes with node-name='disk0'");
}

TEST_F(BinaryErrorsTest, DuplicateExportIdMountsNothing) {
  EXPECT_EQ(ExpectOneError({"--blockdev", GoodBlockdev(), "--export", GoodExport(), "--export",
                            "type=fuse,id=exp0,node-name=disk0,mountpoint=" + second_mountpoint_}),
            "Block export id 'exp0' is already in use");
}

TEST_F(BinaryErrorsTest, SameMountpointTwice) {
  EXPECT_EQ(ExpectOneError({"--blockdev", GoodBlockdev(), "--export", GoodExport(), "--export",
                            "type=fuse,id=exp1,node-name=disk0,mountpoint=" + mountpoint_}),
            "There already is a FUSE export on '" + mountpoint_ + "'");
}

TEST_F(BinaryErrorsTest, WritableExportOfReadOnlyNode) {
  EXPECT_EQ(
      ExpectOneError({"--blockdev", GoodBlockdev() + ",read-only=on", "--export", GoodExport()}),
      "Cannot export read-only node as writable");
}

TEST_F(BinaryErrorsTest, UnknownIothread) {
  EXPECT_EQ(ExpectOneError({"--object", "iothread,id=t0", "--blockdev", GoodBlockdev(), "--export",
                            GoodExport() + ",iothread=t1"}),
            "export 'exp0': iothread 't1' does not name an --object iothread");
}

TEST_F(BinaryErrorsTest, BadConfigFile) {
  std::string config = dir_.path() + "/bexd.json";
  std::ofstream(config) << R"({"blockdev": [{"driver": "file", "node-name": "disk0", "filename": ")"
                        << image_ << R"("}], "export": [{"type": "fuse", "id": "e", )"
                        << R"("node-name": "disk0", "mountpoint": ")" << mountpoint_
                        << R"(", "num-queues": "two"}]})";
  EXPECT_EQ(
      ExpectOneError({"--config", config}),
      "--config " + config + ": export[0].num-queues: expected a positive integer, got \"two\"");
}

// Deep nesting is refused before anything recurses through it (60,000 levels crashed bexd).
TEST_F(BinaryErrorsTest, DeeplyNestedJson) {
  const std::string deep = std::string(60000, '[') + std::string(60000, ']');
  const std::string error = "JSON nesting depth limit exceeded (at most 1024 levels)";
  std::string config = dir_.path() + "/bexd.json";
  std::ofstream(config) << R"({"monitor": {"path": )" << deep << "}}";
  EXPECT_EQ(ExpectOneError({"--config", config}), "--config " + config + ": " + error);
  EXPECT_EQ(ExpectOneError({"--blockdev", R"({"driver": )" + deep + "}"}), "--blockdev: " + error);
}

TEST_F(BinaryErrorsTest, FailedExportStartStopsTheExportsAlreadyStarted) {
  // The second export passes every check but cannot listen: its socket's directory is missing.
  std::string line = ExpectOneError(
      {"--blockdev", GoodBlockdev(), "--export", GoodExport(), "--export",
       "type=vhost-user-fs,id=vhost0,node-name=disk0,addr.type=unix,tag=t,addr.path=" +
           dir_.path() + "/missing/vhost.sock"});
  EXPECT_NE(line.find("vhost0"), std::string::npos) << line;
}

TEST_F(BinaryErrorsTest, MonitorSocketPathTakenByAFile) {
  std::string taken = dir_.File("qmp.sock");
  EXPECT_EQ(ExpectOneError({"--blockdev", GoodBlockdev(), "--export", GoodExport(), "--monitor",
                            "path=" + taken}),
            "monitor socket '" + taken + "': the path exists and is not a socket");
}

// --pidfile never follows a link, opens a FIFO or directory, or overwrites a file that holds
// something other than a pid. A bexd that took such a path would keep running: the wait is bounded.
TEST_F(BinaryErrorsTest, PidfilePathsThatAreNotAPidfileAreRefusedAndLeftAsTheyWere) {
  const std::string target = dir_.path() + "/precious";
  std::ofstream(target) << "precious data\n";
  const std::string link = dir_.path() + "/link.pid";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  const std::string fifo = dir_.path() + "/fifo.pid";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string other = dir_.path() + "/other.pid";
  std::ofstream(other) << "# not a pid\n";
  const std::pair<std::string, std::string> cases[] = {
      {link, "is a symbolic link; refusing to follow it"},
      {fifo, "is not a regular file"},
      {dir_.path(), "is not a regular file"},
      {other, "holds something other than a pid; refusing to overwrite it"},
  };
  for (const auto& [pidfile, why] : cases) {
    RunResult result =
        RunBexd({"--blockdev", "driver=null-co,node-name=n,size=1M", "--pidfile", pidfile},
                std::chrono::seconds(30));
    EXPECT_EQ(result.exit_status, 1) << pidfile;
    EXPECT_EQ(result.err, "bexd: error: --pidfile '" + pidfile + "': " + why + "\n");
  }
  EXPECT_EQ(ReadFile(target), "precious data\n");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_EQ(ReadFile(other), "# not a pid\n");
}

}  // namespace
}  // namespace bexd::testing
