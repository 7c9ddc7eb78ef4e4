// SPDX-License-Identifier: GPL-2.0-or-later
// The session's passthrough bookkeeping against a fake transport: one backing id while any
// passthrough open lives, closed by the last release and on detach, and no passthrough at all
// once registering failed.
#include "fuse/passthrough.h"

#include <gtest/gtest.h>

#include <fcntl.h>

#include <set>

namespace bexd::fuse {
namespace {

class FakeBackingFiles final : public BackingFiles {
 public:
  absl::StatusOr<int32_t> Open(int fd) override {
    EXPECT_GE(fd, 0);
    if (refuse) return absl::PermissionDeniedError("refused");
    ++registrations;
    live.insert(next_id);
    return next_id++;
  }
  absl::Status Close(int32_t backing_id) override {
    EXPECT_EQ(live.erase(backing_id), 1u) << "closing unknown id " << backing_id;
    return absl::OkStatus();
  }

  bool refuse = false;
  int registrations = 0;
  int32_t next_id = 1;
  std::set<int32_t> live;
};

class PassthroughBookkeepingTest : public ::testing::Test {
 protected:
  PassthroughBookkeepingTest()
      : passthrough_(util::UniqueFd(::open("/dev/null", O_RDONLY)), "test") {
    passthrough_.Attach(&files_);
    passthrough_.SetNegotiated(true);
  }
  FakeBackingFiles files_;
  Passthrough passthrough_;
};

TEST_F(PassthroughBookkeepingTest, OneIdWhileOpensLiveClosedByTheLastRelease) {
  const int32_t first = passthrough_.Open();
  EXPECT_GT(first, 0);
  EXPECT_EQ(passthrough_.Open(), first);
  EXPECT_EQ(files_.registrations, 1);
  EXPECT_EQ(passthrough_.open_files(), 2u);
  passthrough_.Release();
  EXPECT_EQ(files_.live.size(), 1u);
  passthrough_.Release();
  EXPECT_TRUE(files_.live.empty());
  EXPECT_EQ(passthrough_.open_files(), 0u);
  EXPECT_EQ(passthrough_.opens(), 2u);
  // The next open registers again.
  EXPECT_GT(passthrough_.Open(), 0);
  EXPECT_EQ(files_.registrations, 2);
  passthrough_.Release();
  EXPECT_TRUE(files_.live.empty());
}

TEST_F(PassthroughBookkeepingTest, DetachClosesTheIdOfOpenFiles) {
  EXPECT_GT(passthrough_.Open(), 0);
  passthrough_.Detach();
  EXPECT_TRUE(files_.live.empty());
  EXPECT_EQ(passthrough_.open_files(), 0u);
  passthrough_.Release();  // a late RELEASE closes nothing more
  EXPECT_TRUE(files_.live.empty());
}

TEST_F(PassthroughBookkeepingTest, NoPassthroughWithoutNegotiation) {
  passthrough_.SetNegotiated(false);
  EXPECT_EQ(passthrough_.Open(), 0);
  EXPECT_EQ(files_.registrations, 0);
}

TEST_F(PassthroughBookkeepingTest, ARefusedRegistrationTurnsPassthroughOffForGood) {
  files_.refuse = true;
  EXPECT_EQ(passthrough_.Open(), 0);
  files_.refuse = false;
  EXPECT_EQ(passthrough_.Open(), 0);  // a queue-served open may still live
  EXPECT_EQ(files_.registrations, 0);
  EXPECT_EQ(passthrough_.opens(), 0u);
}

TEST_F(PassthroughBookkeepingTest, AReleaseWithoutOpenClosesNothing) {
  passthrough_.Release();
  EXPECT_EQ(passthrough_.open_files(), 0u);
  EXPECT_GT(passthrough_.Open(), 0);
  EXPECT_EQ(files_.live.size(), 1u);
}

}  // namespace
}  // namespace bexd::fuse
