// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/queue/poll_window.h"

#include <algorithm>

namespace bexd::exports {

void PollWindow::Record(uint64_t gap_ns) {
  if (max_ns_ == 0 || (ns_ > 0 && gap_ns <= ns_)) return;  // spinning caught it: keep the window
  if (gap_ns > max_ns_) {
    // No window we may use would have caught it: spinning only burns the CPU.
    ns_ = ns_ / 2 < kFirstNs ? 0 : ns_ / 2;
    return;
  }
  // A wider window would have caught it.
  ns_ = std::min(max_ns_, ns_ == 0 ? std::min(kFirstNs, max_ns_) : ns_ * 2);
}

}  // namespace bexd::exports
