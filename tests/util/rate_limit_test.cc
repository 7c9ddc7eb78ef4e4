// SPDX-License-Identifier: GPL-2.0-or-later
#include "util/rate_limit.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace bexd::log {
namespace {

TEST(RateLimitTest, AdmitsABurstPerInterval) {
  RateLimit limit(3, std::chrono::hours(1));
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    uint64_t suppressed = 0;
    if (limit.Admit(&suppressed)) {
      ++admitted;
      EXPECT_EQ(suppressed, 0u);
    }
  }
  EXPECT_EQ(admitted, 3);
}

TEST(RateLimitTest, NextWindowReportsWhatWasDropped) {
  RateLimit limit(2, std::chrono::milliseconds(50));
  uint64_t suppressed = 0;
  for (int i = 0; i < 7; ++i) limit.Admit(&suppressed);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  ASSERT_TRUE(limit.Admit(&suppressed));
  EXPECT_EQ(suppressed, 5u);
  ASSERT_TRUE(limit.Admit(&suppressed));
  EXPECT_EQ(suppressed, 0u);
}

TEST(RateLimitTest, ThreadsSharingASiteStayWithinTheBurst) {
  RateLimit limit(5, std::chrono::hours(1));
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        uint64_t suppressed;
        if (limit.Admit(&suppressed)) admitted.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(admitted.load(), 5);
}

}  // namespace
}  // namespace bexd::log
