// fio with crc32c verification against a multi-queue export: four jobs, each in its own region.
#include <stdio.h>
#include <sys/wait.h>

#include <string>

#include "tests/export/export_fixture.h"

namespace bexd::exp::testing {
namespace {

// Runs `command` through the shell with a time limit; its combined output and exit status.
std::string RunCommand(const std::string& command, int* exit_status) {
  std::string output;
  FILE* pipe = ::popen(("timeout -k 10 180 " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *exit_status = -1;
    return output;
  }
  char chunk[4096];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0) output.append(chunk, n);
  const int status = ::pclose(pipe);
  *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

using FioTest = FuseExportTest;

TEST_F(FioTest, FourJobsVerifyCrc32cOnFourQueues) {
  constexpr uint64_t kJobBytes = 16 << 20;
  const std::string image = scratch_.CreateFile("image", 4 * kJobBytes);
  const std::string mountpoint = MakeMountpoint();
  Export* running =
      Start(FuseOptions(mountpoint, true, 4), OpenFileNode(image, false, /*cache_direct=*/true));
  ASSERT_NE(running, nullptr);

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

}  // namespace
}  // namespace bexd::exp::testing
