// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/vhost_user/guest_memory_faults.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

namespace bexd::exports {
namespace {

// 8 regions per memory table; a table is replaced only after its successor is mapped.
constexpr int kSlots = 256;

// Read by the signal handler, so lock-free: `start` is published last and cleared first.
struct Slot {
  std::atomic<uintptr_t> start{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<size_t> page{0};
  std::atomic<std::atomic<uint32_t>*> faults{nullptr};
};

Slot slots[kSlots];
std::mutex slots_mutex;  // Watch and Unwatch only

void OnSigbus(int, siginfo_t* info, void*) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : slots) {
    const uintptr_t start = slot.start.load(std::memory_order_acquire);
    if (start == 0 || address < start || address >= slot.end.load(std::memory_order_relaxed)) {
      continue;
    }
    const size_t page = slot.page.load(std::memory_order_relaxed);
    void* at = reinterpret_cast<void*>(address & ~(uintptr_t{page} - 1));
    // mmap is a plain system call, safe here; the faulting access is retried on the new page.
    if (mmap(at, page, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) !=
        MAP_FAILED) {
      slot.faults.load(std::memory_order_relaxed)->fetch_add(1, std::memory_order_release);
      return;
    }
    break;
  }
  // Not guest memory, or no page to put there: die of it as without a handler (the access is
  // retried with the default action).
  struct sigaction fatal = {};
  fatal.sa_handler = SIG_DFL;
  sigaction(SIGBUS, &fatal, nullptr);
}

}  // namespace

absl::Status InstallGuestMemoryFaultHandler() {
  static const absl::Status installed = [] {
    struct sigaction action = {};
    action.sa_sigaction = &OnSigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO;
    if (sigaction(SIGBUS, &action, nullptr) != 0) {
      return absl::InternalError(
          std::string("cannot install the SIGBUS handler for guest memory: ") +
          std::strerror(errno));
    }
    return absl::OkStatus();
  }();
  return installed;
}

absl::StatusOr<int> WatchMapping(void* start, size_t length, size_t page,
                                 std::atomic<uint32_t>* faults) {
  std::lock_guard lock(slots_mutex);
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = slots[i];
    if (slot.start.load(std::memory_order_relaxed) != 0) continue;
    const auto begin = reinterpret_cast<uintptr_t>(start);
    slot.end.store(begin + length, std::memory_order_relaxed);
    slot.page.store(page, std::memory_order_relaxed);
    slot.faults.store(faults, std::memory_order_relaxed);
    slot.start.store(begin, std::memory_order_release);
    return i;
  }
  return absl::ResourceExhaustedError(
      fmt::format("more than {} guest memory regions are mapped at once", kSlots));
}

void UnwatchMapping(int slot) {
  std::lock_guard lock(slots_mutex);
  slots[slot].start.store(0, std::memory_order_release);
}

}  // namespace bexd::exports
