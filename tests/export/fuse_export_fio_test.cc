// fio with crc32c verification against a multi-queue export: four jobs, each in its own region.
#include <algorithm>
#include <string>
#include <vector>

#include "block/raw_node.h"

#include "tests/export/export_fixture.h"

namespace bexd::exp::testing {
namespace {

using FioTest = FuseExportTest;

constexpr uint64_t kJobBytes = 16 << 20;

// Four fio jobs, each writing its own quarter of the export at random and verifying it.
void ExpectFioVerifies(Export* running, const std::string& mountpoint) {
  int status = 0;
  const std::string output =
      RunCommand("fio --name=fusejob --filename=" + mountpoint +
                     " --ioengine=libaio --direct=1 --iodepth=16 --rw=randwrite --bs=4k"
                     " --size=" +
                     std::to_string(kJobBytes) +
                     " --numjobs=4 --offset_increment=" + std::to_string(kJobBytes) +
                     " --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0"
                     " --group_reporting",
                 &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output.find("verify:"), std::string::npos) << output;
  EXPECT_EQ(output.find("verify failed"), std::string::npos) << output;
  EXPECT_NE(output.find("err= 0"), std::string::npos) << output;
  EXPECT_NE(output.find("Run status group"), std::string::npos) << output;

  uint64_t writes = 0, reads = 0;
  for (const auto& queue : running->Stats()) {
    writes += queue.write_requests;
    reads += queue.read_requests;
  }
  EXPECT_GE(writes, 4 * kJobBytes / 4096);  // every block written once...
  EXPECT_GE(reads, 4 * kJobBytes / 4096);   // ...and read back for verification
}

TEST_F(FioTest, FourJobsVerifyCrc32cOnFourQueues) {
  const std::string image = scratch_.CreateFile("image", 4 * kJobBytes);
  const std::string mountpoint = MakeMountpoint();
  Export* running =
      Start(FuseOptions(mountpoint, true, 4), OpenFileNode(image, false, /*cache_direct=*/true));
  ASSERT_NE(running, nullptr);
  ExpectFioVerifies(running, mountpoint);
}

// The same through a raw node that starts 1 MiB into the image: every queue's requests go
// through the raw queue to its own file queue on the same thread.
TEST_F(FioTest, FourJobsVerifyCrc32cThroughRawOnFourQueues) {
  constexpr uint64_t kOffset = 1 << 20;
  const std::string image = scratch_.CreateFile("image", kOffset + 4 * kJobBytes + kOffset);
  const std::string mountpoint = MakeMountpoint();
  auto raw =
      block::RawNode::Open("raw0", block::RawOptions{.offset = kOffset, .size = 4 * kJobBytes},
                           false, OpenFileNode(image, false, /*cache_direct=*/true));
  ASSERT_TRUE(raw.ok()) << raw.status();
  Export* running = Start(FuseOptions(mountpoint, true, 4), *raw);
  ASSERT_NE(running, nullptr);
  ExpectFioVerifies(running, mountpoint);
  // Nothing landed outside the window.
  std::vector<uint8_t> bytes = ReadWholeFile(image);
  ASSERT_EQ(bytes.size(), 4 * kJobBytes + 2 * kOffset);
  EXPECT_EQ(std::count(bytes.begin(), bytes.begin() + kOffset, 0), long(kOffset));
  EXPECT_EQ(std::count(bytes.end() - kOffset, bytes.end(), 0), long(kOffset));
}

}  // namespace
}  // namespace bexd::exp::testing
