// SPDX-License-Identifier: GPL-2.0-or-later
// Several hosts, one store: three network namespaces of the test's own (tests/support/
// net_namespaces.h). qemu-nbd serves an image in the hub (the store); a bexd in each of the two
// other namespaces imports it with driver=nbd over TCP and exports it over FUSE. What host A
// writes and flushes, host B's read-only export reads. Every process goes before the namespaces,
// which go at the end of the test, also when it fails.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/export/export_fixture.h"
#include "tests/support/nbd_server.h"
#include "tests/support/net_namespaces.h"

namespace bexd::exports::testing {
namespace {

using bexd::testing::HaveProgram;
using bexd::testing::NbdServer;
using bexd::testing::NetNamespaces;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kImageBytes = 16 * kMiB;
constexpr char kPort[] = "10809";

std::vector<uint8_t> Pattern(size_t length, uint64_t offset, uint32_t seed) {
  std::vector<uint8_t> bytes(length);
  FillPattern(bytes.data(), length, offset, seed);
  return bytes;
}

// Reads with O_DIRECT, past the reader's page cache: what the node fetches from the server now.
std::vector<uint8_t> ReadDirect(const std::string& path, uint64_t offset, size_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  if (fd < 0) return {};
  AlignedBuffer buffer(length);
  const ssize_t n = ::pread(fd, buffer.data, length, offset);
  EXPECT_EQ(n, ssize_t(length)) << path << ": " << std::strerror(errno);
  ::close(fd);
  return std::vector<uint8_t>(buffer.data, buffer.data + std::max<ssize_t>(n, 0));
}

class NbdHostsTest : public FuseExportTest {
 protected:
  void SetUp() override {
    const std::string reason = NetNamespaces::SkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    if (!HaveProgram("qemu-nbd")) GTEST_SKIP() << "qemu-nbd is missing";
    hosts_ = std::make_unique<NetNamespaces>(2);
    ASSERT_TRUE(hosts_->ok()) << hosts_->error();
  }

  // bexd on spoke `host`, importing the store's export over TCP and exporting it on `mountpoint`.
  std::unique_ptr<Daemon> StartHost(int host, const std::string& mountpoint, bool writable) {
    const std::string read_only = writable ? "" : ",read-only=on";
    return std::make_unique<Daemon>(
        std::vector<std::string>{"--blockdev",
                                 "driver=nbd,node-name=store,server.type=inet,server.host=" +
                                     hosts_->HubAddress(host) + ",server.port=" + kPort + read_only,
                                 "--export",
                                 "fuse,id=e0,node-name=store,num-queues=2,mountpoint=" +
                                     mountpoint + (writable ? ",writable=on" : ",writable=off")},
        hosts_->InSpoke(host));
  }

  // Goes after the test body's servers and daemons, which run inside it.
  std::unique_ptr<NetNamespaces> hosts_;
};

TEST_F(NbdHostsTest, WhatHostAWritesAndFlushesHostBReads) {
  const std::string image = scratch_.CreateFile("store.img", kImageBytes);
  {
    const std::vector<uint8_t> original = Pattern(kImageBytes, 0, 1);
    const int fd = ::open(image.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::pwrite(fd, original.data(), kImageBytes, 0), ssize_t(kImageBytes));
    ::close(fd);
  }
  // Listening on every address of the hub, which has one per link and nothing else.
  std::vector<std::string> command = hosts_->InHub();
  for (const char* arg :
       {"qemu-nbd", "-t", "-e", "16", "-b", "0.0.0.0", "-p", kPort, "-f", "raw", "--pid-file"}) {
    command.push_back(arg);
  }
  command.push_back(scratch_.path() + "/qemu-nbd.pid");
  command.push_back(image);
  NbdServer store(command, scratch_.path() + "/qemu-nbd.pid", scratch_.path() + "/qemu-nbd.log");
  ASSERT_TRUE(store.Start()) << store.why_not();

  const std::string mount_a = MakeMountpoint("host-a");
  const std::string mount_b = MakeMountpoint("host-b");
  std::unique_ptr<Daemon> host_a = StartHost(0, mount_a, /*writable=*/true);
  std::unique_ptr<Daemon> host_b = StartHost(1, mount_b, /*writable=*/false);
  ASSERT_TRUE(host_a->WaitMounted(mount_a));
  ASSERT_TRUE(host_b->WaitMounted(mount_b));

  // B sees the store's data before A writes.
  constexpr uint64_t kOffset = 3 * kMiB + 4096;
  constexpr size_t kLength = kMiB;
  EXPECT_EQ(ReadDirect(mount_b, kOffset, kLength), Pattern(kLength, kOffset, 1));

  // A writes and flushes; B reads the new data, and so does the store's file.
  const std::vector<uint8_t> written = Pattern(kLength, kOffset, 2);
  {
    const int fd = ::open(mount_a.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::pwrite(fd, written.data(), kLength, kOffset), ssize_t(kLength))
        << std::strerror(errno);
    EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
    ::close(fd);
  }
  EXPECT_EQ(ReadDirect(mount_b, kOffset, kLength), written);
  const std::vector<uint8_t> stored = ReadWholeFile(image);
  ASSERT_EQ(stored.size(), kImageBytes);
  EXPECT_TRUE(std::equal(written.begin(), written.end(), stored.begin() + kOffset));

  // B's export is read-only.
  EXPECT_EQ(::open(mount_b.c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EROFS);

  EXPECT_EQ(host_b->SignalAndWait(SIGTERM), 0);
  EXPECT_EQ(host_a->SignalAndWait(SIGTERM), 0);
}

}  // namespace
}  // namespace bexd::exports::testing
