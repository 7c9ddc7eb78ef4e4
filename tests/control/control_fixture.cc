// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/control/control_fixture.h"

namespace bexd::testing {

void ControlTest::SetUp() {
  image_ = dir_.File("disk.img", kImageBytes);
  mountpoint_ = dir_.File("mnt");
  socket_ = Path("qmp.sock");
  log_ = Path("bexd.log");
}

void ControlTest::TearDown() {
  if (daemon_ != nullptr && daemon_->running()) {
    EXPECT_EQ(daemon_->Stop(), 0) << ReadFile(log_);
  }
  EXPECT_FALSE(IsMounted(mountpoint_));
}

void ControlTest::StartDaemon(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "--blockdev", "driver=file,node-name=disk0,filename=" + image_,
      "--export",   "type=fuse,id=exp0,node-name=disk0,writable=on,mountpoint=" + mountpoint_,
      "--monitor",  "path=" + socket_,
  };
  args.insert(args.end(), extra.begin(), extra.end());
  daemon_ = std::make_unique<BexdDaemon>(args, log_);
  ASSERT_TRUE(WaitFor([&] { return IsMounted(mountpoint_) || !daemon_->running(); }))
      << ReadFile(log_);
  ASSERT_TRUE(daemon_->running()) << ReadFile(log_);
}

bool ControlTest::WaitForPidfile(const std::string& pidfile) {
  const std::string expected = std::to_string(daemon_->pid()) + "\n";
  return WaitFor([&] { return ReadFile(pidfile) == expected; });
}

std::unique_ptr<QmpClient> ControlTest::Connect() {
  auto client = std::make_unique<QmpClient>(socket_);
  EXPECT_TRUE(client->connected()) << ReadFile(log_);
  return client;
}

std::string ErrorClass(const nlohmann::json& reply) {
  if (!reply.is_object() || !reply.contains("error")) return "";
  return reply["error"].value("class", "?");
}

std::string ErrorDesc(const nlohmann::json& reply) {
  if (!reply.is_object() || !reply.contains("error")) return "";
  return reply["error"].value("desc", "?");
}

std::string Success(const nlohmann::json& reply) {
  return reply.contains("return") ? "" : reply.dump();
}

std::string Pattern(size_t length, uint32_t seed) {
  std::string data(length, '\0');
  for (size_t i = 0; i < length; ++i) {
    data[i] = static_cast<char>((i * 131 + seed * 7 + i / 4096) & 0xff);
  }
  return data;
}

nlohmann::json FuseExport(const std::string& id, const std::string& node,
                          const std::string& mountpoint) {
  return {{"type", "fuse"},
          {"id", id},
          {"node-name", node},
          {"mountpoint", mountpoint},
          {"writable", true}};
}

nlohmann::json NullNode(const std::string& name, uint64_t size) {
  return {{"driver", "null-co"}, {"node-name", name}, {"size", size}, {"read-zeroes", true}};
}

}  // namespace bexd::testing
