// SPDX-License-Identifier: GPL-2.0-or-later
// AioEventRing against the kernel's own ring (events it wrote, taken across many wrap-arounds)
// and against a hand-made header (the wrap-around itself, and the fallback for layouts it does
// not know).
#include "block/aio_event_ring.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "tests/support/scratch_dir.h"

namespace bexd::block {
namespace {

// A fake context: a header followed by `nr` slots, in memory the test owns.
struct FakeRing {
  explicit FakeRing(uint32_t nr) : memory(sizeof(AioEventRing::Header) + nr * sizeof(io_event)) {
    header()->nr = nr;
    header()->magic = AioEventRing::kMagic;
    header()->header_length = sizeof(AioEventRing::Header);
  }
  AioEventRing::Header* header() { return reinterpret_cast<AioEventRing::Header*>(memory.data()); }
  io_event* slot(uint32_t i) { return reinterpret_cast<io_event*>(header() + 1) + i; }
  io_context_t context() { return reinterpret_cast<io_context_t>(memory.data()); }
  std::vector<unsigned char> memory;
};

TEST(AioEventRingTest, TakesEventsAcrossTheEndOfTheRing) {
  FakeRing fake(4);
  for (uint32_t i = 0; i < 4; ++i) fake.slot(i)->data = reinterpret_cast<void*>(uintptr_t{i + 10});
  fake.header()->head = 3;
  fake.header()->tail = 2;  // events in slots 3, 0, 1
  AioEventRing ring(fake.context());
  ASSERT_TRUE(ring.in_user_space());
  io_event events[8];
  ASSERT_EQ(ring.Take(events, 2), 2);  // capacity bounds the batch
  EXPECT_EQ(events[0].data, reinterpret_cast<void*>(uintptr_t{13}));
  EXPECT_EQ(events[1].data, reinterpret_cast<void*>(uintptr_t{10}));
  EXPECT_EQ(fake.header()->head, 1u);
  ASSERT_EQ(ring.Take(events, 8), 1);
  EXPECT_EQ(events[0].data, reinterpret_cast<void*>(uintptr_t{11}));
  EXPECT_EQ(fake.header()->head, 2u);
  EXPECT_EQ(ring.Take(events, 8), 0);
}

TEST(AioEventRingTest, UnknownLayoutsFallBackToTheSystemCall) {
  FakeRing wrong_magic(4);
  wrong_magic.header()->magic = 0x12345678;
  EXPECT_FALSE(AioEventRing(wrong_magic.context()).in_user_space());
  FakeRing incompatible(4);
  incompatible.header()->incompat_features = 1;
  EXPECT_FALSE(AioEventRing(incompatible.context()).in_user_space());
  FakeRing longer_header(4);
  longer_header.header()->header_length = 64;
  EXPECT_FALSE(AioEventRing(longer_header.context()).in_user_space());
}

TEST(AioEventRingTest, TakesWhatTheKernelCompleted) {
  bexd::testing::ScratchDir dir;
  constexpr size_t kBlock = 4096;
  std::vector<unsigned char> data(kBlock * 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7);
  const std::string path = dir.path() + "/image";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));

  io_context_t context = nullptr;
  ASSERT_EQ(io_setup(8, &context), 0);
  AioEventRing ring(context);
  ASSERT_TRUE(ring.in_user_space()) << "the kernel's aio ring layout is not the known one";
  const uint32_t nr = reinterpret_cast<AioEventRing::Header*>(context)->nr;

  // Rounds of 4 reads until head has gone round the ring several times.
  std::vector<unsigned char> buffers(kBlock * 4);
  struct iocb iocbs[4];
  struct iocb* batch[4];
  const int rounds = static_cast<int>(3 * nr / 4 + 5);
  for (int round = 0; round < rounds; ++round) {
    std::memset(buffers.data(), 0, buffers.size());
    for (int i = 0; i < 4; ++i) {
      io_prep_pread(&iocbs[i], fd, &buffers[i * kBlock], kBlock,
                    static_cast<long long>(i * kBlock));
      iocbs[i].data = &iocbs[i];
      batch[i] = &iocbs[i];
    }
    ASSERT_EQ(io_submit(context, 4, batch), 4);
    std::set<void*> seen;
    io_event events[8];
    for (int spins = 0; seen.size() < 4 && spins < 1000000; ++spins) {
      const int n = ring.Take(events, 8);
      ASSERT_GE(n, 0);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(events[i].res, kBlock);
        EXPECT_EQ(events[i].obj, events[i].data);
        seen.insert(events[i].data);
      }
      if (n == 0) usleep(10);
    }
    ASSERT_EQ(seen.size(), 4u) << "round " << round;
    ASSERT_EQ(std::memcmp(buffers.data(), data.data(), data.size()), 0);
  }
  // Nothing is left for the system call either: the kernel saw every head update.
  static const struct timespec kNoWait = {0, 0};
  io_event events[8];
  EXPECT_EQ(io_getevents(context, 0, 8, events, const_cast<struct timespec*>(&kNoWait)), 0);
  io_destroy(context);
  close(fd);
}

}  // namespace
}  // namespace bexd::block
