// SPDX-License-Identifier: GPL-2.0-or-later
// The adaptive spin window of queue threads: it opens only after gaps a spin could have caught,
// doubles up to the maximum while gaps stay under it, holds while spinning catches the work, and
// closes again while gaps are longer than any window allowed.
#include "export/queue/poll_window.h"

#include <gtest/gtest.h>

namespace bexd::exports {
namespace {

TEST(PollWindowTest, ZeroMaximumNeverSpins) {
  PollWindow window(0);
  for (uint64_t gap : {1, 100, 1000, 5000}) window.Record(gap);
  EXPECT_EQ(window.ns(), 0u);
}

TEST(PollWindowTest, StartsClosedAndOpensAfterAShortGap) {
  PollWindow window(32768);
  EXPECT_EQ(window.ns(), 0u);
  window.Record(40000);  // longer than the maximum: stays closed
  EXPECT_EQ(window.ns(), 0u);
  window.Record(20000);
  EXPECT_EQ(window.ns(), PollWindow::kFirstNs);
}

TEST(PollWindowTest, DoublesUpToTheMaximumWhileGapsAreLongerThanTheWindow) {
  PollWindow window(32768);
  window.Record(30000);
  EXPECT_EQ(window.ns(), 4000u);
  window.Record(30000);
  EXPECT_EQ(window.ns(), 8000u);
  window.Record(30000);
  EXPECT_EQ(window.ns(), 16000u);
  window.Record(30000);
  EXPECT_EQ(window.ns(), 32000u);
  window.Record(30000);  // caught by the 32 µs window: kept
  EXPECT_EQ(window.ns(), 32000u);
  window.Record(32500);
  EXPECT_EQ(window.ns(), 32768u);  // never past the maximum
  window.Record(32768);
  EXPECT_EQ(window.ns(), 32768u);
}

TEST(PollWindowTest, HoldsWhileSpinningCatchesTheWork) {
  PollWindow window(32768);
  window.Record(10000);
  window.Record(10000);
  ASSERT_EQ(window.ns(), 8000u);
  for (int i = 0; i < 100; ++i) window.Record(3000);
  EXPECT_EQ(window.ns(), 8000u);
}

TEST(PollWindowTest, HalvesWhileGapsExceedTheMaximumAndThenCloses) {
  PollWindow window(32768);
  for (int i = 0; i < 5; ++i) window.Record(30000);
  ASSERT_EQ(window.ns(), 32000u);
  window.Record(1000000);
  EXPECT_EQ(window.ns(), 16000u);
  window.Record(1000000);
  EXPECT_EQ(window.ns(), 8000u);
  window.Record(1000000);
  EXPECT_EQ(window.ns(), 4000u);
  window.Record(1000000);
  EXPECT_EQ(window.ns(), 0u);  // below the first window: not worth spinning
  window.Record(1000000);
  EXPECT_EQ(window.ns(), 0u);
}

TEST(PollWindowTest, AMaximumBelowTheFirstWindowIsTheWindow) {
  PollWindow window(1000);
  window.Record(500);
  EXPECT_EQ(window.ns(), 1000u);
  window.Record(5000);
  EXPECT_EQ(window.ns(), 0u);
}

}  // namespace
}  // namespace bexd::exports
