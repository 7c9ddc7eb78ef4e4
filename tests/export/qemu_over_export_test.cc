// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's own format drivers on a bexd export of a plain file, as QEMU's iotests run with `-fuse`:
// bexd serves the bytes (file node, discard=unmap, growable), qemu-io and qemu-img interpret the
// qcow2 image through the mount, and must see what they see on the file itself.
#include <signal.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/export/export_fixture.h"

namespace bexd::exports::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

using QemuOverExportTest = FuseExportTest;

// iotest 250: QEMU tells a qcow2 image with preallocated metadata from a full one by comparing
// its clusters with the file's st_blocks, and only then asks the file (SEEK_DATA) which clusters
// hold data. Through the export, `qemu-img map` must list the same extents as on the file, and a
// shrink must free on the file (du through the mount) what it frees on the file itself.
TEST_F(QemuOverExportTest, PreallocatedQcow2MapsAndShrinksAsOnTheFile) {
  const std::string image = scratch_.path() + "/t.qcow2";
  RunOrFail("qemu-img create -f qcow2 -o cluster_size=1M,preallocation=metadata " + image +
            " 2100M");
  const std::string mountpoint = MakeMountpoint("fuse-t.qcow2");
  Daemon daemon({"--blockdev", "file,node-name=export-node,filename=" + image + ",discard=unmap",
                 "--export",
                 "fuse,id=fuse-export,node-name=export-node,mountpoint=" + mountpoint +
                     ",writable=on,growable=on,allow-other=off"});
  ASSERT_TRUE(daemon.WaitMounted(mountpoint));
  RunOrFail(
      "qemu-io -f qcow2 -c 'discard 0 10M' -c 'discard 2090M 10M' -c 'write 2090M 10M' "
      "-c 'write 0 10M' " +
      mountpoint);

  EXPECT_EQ(AllocatedBytes(mountpoint), AllocatedBytes(image)) << "du differs through the mount";
  const nlohmann::json through_mount =
      nlohmann::json::parse(RunOrFail("qemu-img map -f qcow2 --output=json " + mountpoint));
  const nlohmann::json on_file =
      nlohmann::json::parse(RunOrFail("qemu-img map -U -f qcow2 --output=json " + image));
  EXPECT_EQ(through_mount, on_file) << through_mount.dump(1);
  uint64_t data_bytes = 0;
  for (const nlohmann::json& extent : through_mount) {
    if (extent["data"].get<bool>() && !extent["zero"].get<bool>()) {
      data_bytes += extent["length"].get<uint64_t>();
    }
  }
  EXPECT_EQ(data_bytes, 20 * kMiB)
      << "only the two written 10 MiB ranges hold data, the rest reads as zeroes";

  const uint64_t before = AllocatedBytes(mountpoint);
  RunOrFail("qemu-img resize -f qcow2 --shrink " + mountpoint + " 5M");
  // The 10 MiB at 2090M and the 5 MiB past 5M are discarded in one request of over 2 GiB (the
  // preallocated clusters lie between them in the file).
  EXPECT_EQ(before - AllocatedBytes(mountpoint), 15 * kMiB);
  EXPECT_EQ(AllocatedBytes(mountpoint), AllocatedBytes(image));
  EXPECT_EQ(daemon.SignalAndWait(SIGTERM), 0);
  RunOrFail("qemu-img check -f qcow2 " + image);
}

}  // namespace
}  // namespace bexd::exports::testing
