// SPDX-License-Identifier: GPL-2.0-or-later
// `help` as the value of --object, --blockdev and --export: the real bexd prints what it supports
// in QEMU's form and exits 0 without starting anything; every driver and type it lists is one the
// options accept.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/config/blockdev_schema.h"
#include "cli/config/export_schema.h"
#include "cli/config/item_help.h"
#include "cli/config/keyval.h"
#include "tests/cli/bexd_process.h"

namespace bexd::cli {
namespace {

using bexd::testing::RunBexd;
using bexd::testing::RunResult;
using bexd::testing::TempDir;

constexpr char kObjects[] =
    "List of user creatable objects:\n  iothread\n  secret\n  tls-creds-psk\n  tls-creds-x509\n";
constexpr char kDrivers[] =
    "Available block drivers:\n  file\n  host_device\n  nbd\n  null-co\n  qcow2\n  raw\n  rbd\n";
constexpr char kExports[] = "Available export types:\n  fuse\n  vhost-user-fs\n";

// The names a listing prints, one per indented line.
std::vector<std::string> Listed(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("  ")) names.push_back(line.substr(2));
  }
  return names;
}

TEST(ItemHelpTest, AsksOnlyForHelp) {
  EXPECT_EQ(ItemHelp("object", "help"), kObjects);
  EXPECT_EQ(ItemHelp("object", "?"), kObjects);
  EXPECT_EQ(ItemHelp("object", "qom-type=help"), kObjects);
  EXPECT_EQ(ItemHelp("object", "help,id=x"), kObjects);
  // QEMU lists the types for a type it does not know.
  EXPECT_EQ(ItemHelp("object", "throttle-group,help"), kObjects);
  for (const char* asked : {"iothread,help", "iothread,id=t0,help", "qom-type=iothread,help"}) {
    const std::optional<std::string> iothread = ItemHelp("object", asked);
    ASSERT_TRUE(iothread.has_value()) << asked;
    EXPECT_TRUE(iothread->starts_with("iothread options:\n  aio-max-batch=<int>")) << *iothread;
    EXPECT_NE(iothread->find("\n  poll-max-ns=<int>"), std::string::npos) << *iothread;
  }
  const std::optional<std::string> secret = ItemHelp("object", "secret,help");
  ASSERT_TRUE(secret.has_value());
  EXPECT_TRUE(secret->starts_with("secret options:\n  data=<string>")) << *secret;
  EXPECT_EQ(Listed(*secret).size(), 3u) << *secret;
  EXPECT_EQ(ItemHelp("blockdev", "help"), kDrivers);
  EXPECT_EQ(ItemHelp("blockdev", "driver=help"), kDrivers);
  EXPECT_EQ(ItemHelp("export", "help"), kExports);
  EXPECT_EQ(ItemHelp("export", "type=?"), kExports);

  EXPECT_EQ(ItemHelp("object", "iothread,id=help"), std::nullopt);  // an id, not a request
  EXPECT_EQ(ItemHelp("object", "iothread,id=a,,help"), std::nullopt);
  EXPECT_EQ(ItemHelp("object", R"({"qom-type": "help"})"), std::nullopt);
  EXPECT_EQ(ItemHelp("blockdev", "null-co,node-name=help"), std::nullopt);
  EXPECT_EQ(ItemHelp("export", "fuse,id=e0"), std::nullopt);
}

TEST(ItemHelpTest, ListsOnlyWhatTheOptionsAccept) {
  for (const std::string& driver : Listed(kDrivers)) {
    absl::StatusOr<nlohmann::json> object = ParseKeyval("driver=" + driver + ",node-name=n0");
    ASSERT_TRUE(object.ok());
    absl::StatusOr<block::BlockdevOptions> options = ParseBlockdevOptions(*object, Syntax::kKeyval);
    // Required options are missing; the driver itself is known.
    if (!options.ok()) {
      EXPECT_EQ(options.status().message().find("not supported"), std::string::npos)
          << driver << ": " << options.status();
    }
  }
  for (const std::string& type : Listed(kExports)) {
    absl::StatusOr<nlohmann::json> object = ParseKeyval("type=" + type + ",id=e0,node-name=n0");
    ASSERT_TRUE(object.ok());
    absl::StatusOr<ExportSpec> spec = ParseExportOptions(*object, Syntax::kKeyval);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().message().find("not supported"), std::string::npos)
        << type << ": " << spec.status();
  }
}

TEST(ItemHelpBinaryTest, PrintsAndExitsZero) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--object", "help"}, kObjects},
      {{"--object=help"}, kObjects},
      {{"--blockdev", "help"}, kDrivers},
      {{"--export", "help"}, kExports},
  };
  for (const auto& [args, expected] : cases) {
    RunResult result = RunBexd(args);
    EXPECT_EQ(result.exit_status, 0) << args[0] << ": " << result.err;
    EXPECT_EQ(result.out, expected) << args[0];
    EXPECT_EQ(result.err, "") << args[0];
  }
}

// As QEMU, options are taken in order: an error before the help request still fails, and the
// help request ends the command line, so nothing before it is started.
TEST(ItemHelpBinaryTest, InOrderWithTheOtherOptions) {
  TempDir dir;
  const std::string image = dir.File("disk.img", 1 << 20);
  const std::string mountpoint = dir.File("mnt");
  RunResult result = RunBexd({"--blockdev", "file,node-name=d0,filename=" + image, "--export",
                              "fuse,id=e0,node-name=d0,mountpoint=" + mountpoint, "--blockdev",
                              "help", "--export", "bad"});
  EXPECT_EQ(result.exit_status, 0) << result.err;
  EXPECT_EQ(result.out, kDrivers);
  EXPECT_FALSE(bexd::testing::IsMounted(mountpoint));

  result = RunBexd({"--blockdev", "null-co,node-name=n0,bogus=1", "--object", "help"});
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_EQ(result.out, "");
  EXPECT_TRUE(result.err.starts_with("bexd: error: --blockdev: bogus: unknown option"))
      << result.err;
}

}  // namespace
}  // namespace bexd::cli
