// SPDX-License-Identifier: GPL-2.0-or-later
// ParseCommandLine and config files: everything is checked before anything starts, and errors
// name the option (command line) or the JSON path (config file).
#include "cli/config/command_line.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/cli/bexd_process.h"

namespace bexd::cli {
namespace {

class CommandLineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir_.path();
    mountpoint_ = temp_dir_.File("mnt", 1);
  }

  absl::StatusOr<CommandLine> Parse(std::vector<std::string> args) {
    std::vector<std::string_view> views(args.begin(), args.end());
    return ParseCommandLine(views);
  }
  std::string Error(std::vector<std::string> args) {
    absl::StatusOr<CommandLine> result = Parse(std::move(args));
    EXPECT_FALSE(result.ok());
    return result.ok() ? "" : std::string(result.status().message());
  }
  std::string WriteConfig(std::string_view text) {
    std::string path = dir_ + "/bexd.json";
    std::ofstream(path) << text;
    return path;
  }

  bexd::testing::TempDir temp_dir_;
  std::string dir_;
  std::string mountpoint_;
};

TEST_F(CommandLineTest, QsdFuseCommandLine) {
  absl::StatusOr<CommandLine> result = Parse({
      "--object",
      "iothread,id=iothread0",
      "--blockdev",
      "driver=file,node-name=disk0,filename=disk.img,cache.direct=on,aio=native",
      "--blockdev",
      "null-co,node-name=null0,size=1G",
      "--export",
      "type=fuse,id=exp0,node-name=disk0,mountpoint=" + mountpoint_ +
          ",writable=on,iothread=iothread0",
      "--chardev",
      "socket,id=m0,path=" + dir_ + "/qmp.sock,server=on,wait=off",
      "--monitor",
      "chardev=m0",
      "--pidfile",
      dir_ + "/bexd.pid",
      "--log-level=debug",
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->demo);
  ASSERT_EQ(result->config.iothreads.size(), 1u);
  EXPECT_EQ(result->config.iothreads[0].id, "iothread0");
  ASSERT_EQ(result->config.blockdevs.size(), 2u);
  EXPECT_EQ(result->config.blockdevs[1].node_name, "null0");
  ASSERT_EQ(result->config.exports.size(), 1u);
  EXPECT_EQ(result->config.exports[0].options.id, "exp0");
  ASSERT_EQ(result->config.monitors.size(), 1u);
  EXPECT_EQ(result->config.monitors[0].path, dir_ + "/qmp.sock");
  EXPECT_EQ(result->pidfile, dir_ + "/bexd.pid");
  EXPECT_EQ(result->log_level, log::Level::kDebug);
}

TEST_F(CommandLineTest, JsonArguments) {
  absl::StatusOr<CommandLine> result = Parse({
      "--blockdev",
      R"({"driver":"file","node-name":"disk0","filename":"/d.img","cache":{"direct":true}})",
      "--export",
      R"({"type":"fuse","id":"e0","node-name":"disk0","mountpoint":")" + mountpoint_ +
          R"(","num-queues":2})",
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(std::get<block::FileOptions>(result->config.blockdevs[0].driver).cache_direct);
  EXPECT_EQ(
      std::get<exports::FuseExportOptions>(result->config.exports[0].options.transport).num_queues,
      2u);
}

TEST_F(CommandLineTest, NoArgumentsMeansDemo) {
  absl::StatusOr<CommandLine> result = Parse({});
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->demo);
  result = Parse({"--demo-dir", "rel"});
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->demo);
  EXPECT_EQ(result->demo_dir, std::filesystem::current_path() / "rel");
  EXPECT_EQ(Error({"--demo", "--blockdev", "null-co,node-name=n"}),
            "--demo sets up its own node and export; it cannot be combined with --blockdev or "
            "--export");
}

TEST_F(CommandLineTest, OptionErrors) {
  EXPECT_EQ(Error({"--frobnicate"}), "unknown option '--frobnicate' (see --help)");
  EXPECT_EQ(Error({"blockdev"}),
            "unexpected argument 'blockdev' (options start with --; see --help)");
  EXPECT_EQ(Error({"--blockdev"}), "--blockdev needs a value (see --help)");
  EXPECT_EQ(Error({"--daemonize=yes"}), "--daemonize takes no value");
  EXPECT_EQ(Error({"--log-level", "loud"}),
            "--log-level: expected one of error, warn, info, debug; got 'loud'");
  EXPECT_EQ(Error({"--blockdev", "driver=file,node-name=d,filename=x,cache.direct=maybe"}),
            "--blockdev: cache.direct: expected on or off, got \"maybe\"");
  EXPECT_EQ(Error({"--blockdev", "null-co,node-name=a", "--blockdev", "null-co,node-name=b,x=1"}),
            "--blockdev #2: x: unknown option (known here: auto-read-only, cache, detect-zeroes, "
            "discard, driver, force-share, latency-ns, node-name, read-only, read-zeroes, size)");
  EXPECT_EQ(Error({"--blockdev", R"({"driver":"file",)"}),
            "--blockdev: invalid JSON: line 1, column 18: syntax error while parsing object key - "
            "unexpected end of input; expected string literal");
  EXPECT_EQ(Error({"--monitor", "chardev=nope"}),
            "--monitor: chardev: 'nope' does not name a --chardev");
  EXPECT_EQ(Error({"--object", "iothread,id=t", "--object", "iothread,id=t"}),
            "--object #2: id: 't' is already used by another item of this kind");
  EXPECT_EQ(Error({"--config", dir_ + "/missing.json"}),
            "--config: cannot read '" + dir_ + "/missing.json': No such file or directory");
  EXPECT_EQ(Error({"--config", "/dev/zero"}),
            "--config: '/dev/zero' is longer than 16777216 bytes");
  // The JSON parser would stop at the NUL and take the text before it.
  const std::string with_nul = dir_ + "/nul.json";
  {
    std::ofstream file(with_nul, std::ios::binary);
    file << std::string("{}\0{\"blockdev\": 5}", 18);
  }
  EXPECT_EQ(Error({"--config", with_nul}),
            "--config " + with_nul + ": a NUL byte at offset 2; a config file is JSON text");
}

TEST_F(CommandLineTest, ConfigFileCombinesWithCommandLine) {
  std::string config = WriteConfig(R"({
    "object": [{"qom-type": "iothread", "id": "t0"}],
    "blockdev": [{"driver": "null-co", "node-name": "n0", "size": 1048576}],
    "export": [{"type": "fuse", "id": "e0", "node-name": "n0", "mountpoint": ")" +
                                   mountpoint_ + R"(", "iothread": "t0"}],
    "monitor": {"path": "qmp.sock"}
  })");
  absl::StatusOr<CommandLine> result =
      Parse({"--blockdev", "null-co,node-name=n1", "--config", config});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->config.blockdevs.size(), 2u);
  EXPECT_EQ(result->config.blockdevs[0].node_name, "n1");
  EXPECT_EQ(result->config.blockdevs[1].node_name, "n0");
  EXPECT_EQ(std::get<block::NullOptions>(result->config.blockdevs[1].driver).size, 1048576u);
  ASSERT_EQ(result->config.monitors.size(), 1u);
  EXPECT_EQ(result->config.monitors[0].path, std::filesystem::current_path() / "qmp.sock");
}

TEST_F(CommandLineTest, ConfigFileErrorsNameTheJsonPath) {
  struct Case {
    std::string text;
    std::string message;
  } cases[] = {
      {R"({"export": [{"type": "fuse", "id": "e", "node-name": "n", "mountpoint": ")" +
           mountpoint_ + R"(", "num-queues": "two"}]})",
       "export[0].num-queues: expected a positive integer, got \"two\""},
      {R"({"blockdev": [{"driver": "null-co", "node-name": "a"},
                        {"driver": "file", "node-name": "b", "cache": {"direct": "on"}}]})",
       "blockdev[1].cache.direct: expected true or false, got \"on\""},
      {R"({"blockdev": [{"driver": "null-co", "node-name": "a"}, 7]})",
       "blockdev[1]: expected a JSON object, got 7"},
      {R"({"blockdev": {"driver": "null-co"}})",
       "blockdev: expected a list of objects, got {\"driver\":\"null-co\"}"},
      {R"({"blockdevs": []})",
       "blockdevs: unknown section (known: object, blockdev, export, monitor)"},
      {R"({"monitor": {"path": "/s", "wait": false}})",
       "monitor.wait: unknown option (known here: mode, path, pretty)"},
      {R"([1, 2])", "expected a JSON object at the top, got [1,2]"},
      {R"({"blockdev": [}")",
       "invalid JSON: line 1, column 15: syntax error while parsing value - "
       "unexpected '}'; expected '[', '{', or a literal"},
  };
  for (const Case& c : cases) {
    std::string path = WriteConfig(c.text);
    EXPECT_EQ(Error({"--config", path}), "--config " + path + ": " + c.message) << c.text;
  }
}

TEST_F(CommandLineTest, InvalidUtf8InConfigIsAnError) {
  std::string path = WriteConfig("{\"blockdev\": [{\"driver\": \"\xff\"}]}");
  std::string message = Error({"--config", path});
  EXPECT_NE(message.find("invalid JSON"), std::string::npos) << message;
}

}  // namespace
}  // namespace bexd::cli
