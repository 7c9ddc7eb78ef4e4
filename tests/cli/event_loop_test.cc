// SPDX-License-Identifier: GPL-2.0-or-later
// Tasks posted to the main loop from other threads run on the loop's thread, in order, and a task
// may post again.
#include "cli/daemon/event_loop.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace bexd::cli {
namespace {

TEST(EventLoopTest, PostedTasksRunOnTheLoopThreadInOrder) {
  EventLoop loop;
  ASSERT_TRUE(loop.status().ok()) << loop.status();
  std::vector<int> ran;
  std::vector<std::thread::id> threads;
  std::thread poster([&] {
    for (int i = 0; i < 3; ++i) {
      loop.Post([&, i] {
        ran.push_back(i);
        threads.push_back(std::this_thread::get_id());
      });
    }
  });
  poster.join();
  // Nothing runs before the loop does.
  EXPECT_TRUE(ran.empty());
  ASSERT_TRUE(loop.RunOnce(20000).ok());
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2}));
  for (std::thread::id id : threads) EXPECT_EQ(id, std::this_thread::get_id());
}

TEST(EventLoopTest, ATaskThatPostsRunsTheNewTaskOnALaterPass) {
  EventLoop loop;
  ASSERT_TRUE(loop.status().ok()) << loop.status();
  int first = 0, second = 0;
  loop.Post([&] {
    ++first;
    loop.Post([&] { ++second; });
  });
  ASSERT_TRUE(loop.RunOnce(20000).ok());
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 0);
  ASSERT_TRUE(loop.RunOnce(20000).ok());
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
}

}  // namespace
}  // namespace bexd::cli
