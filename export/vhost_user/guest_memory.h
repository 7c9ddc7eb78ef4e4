// SPDX-License-Identifier: GPL-2.0-or-later
// A vhost-user frontend's guest RAM as this process sees it: the regions of SET_MEM_TABLE, each
// a shared mapping of a file descriptor the frontend passed. Every guest address the guest hands
// us (descriptor buffers) and every frontend address the frontend hands us (ring locations) goes
// through this table, which checks that the whole range lies inside mapped memory. The table is
// immutable once built; a new SET_MEM_TABLE builds a new one after the rings have stopped.
#pragma once

#include <absl/status/statusor.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace bexd::exports {

// One region as SET_MEM_TABLE describes it.
struct GuestMemoryRegionSpec {
  uint64_t guest_phys_addr = 0;
  uint64_t size = 0;
  uint64_t frontend_addr = 0;  // the region's address in the frontend's address space
  uint64_t mmap_offset = 0;    // where the region starts in the file descriptor
};

class GuestMemory {
 public:
  // The vhost-user baseline: SET_MEM_TABLE carries at most this many regions.
  static constexpr int kMaxRegions = 8;

  // Maps regions[i] from fds[i] (shared, read-write). Takes no ownership of the fds (the caller
  // closes them; the mappings stay valid). Fails for an empty or oversized table, zero-sized or
  // overflowing regions, regions that overlap in guest or frontend address space, fds that are
  // neither a regular file (memfd included) nor a block device, and fds too short for
  // mmap_offset + size. Nothing is kept mapped on failure.
  static absl::StatusOr<std::unique_ptr<GuestMemory>> Map(
      const std::vector<GuestMemoryRegionSpec>& regions, const std::vector<int>& fds);
  // Regions that are already mapped in this process at `host` addresses the caller keeps alive
  // (the test frontend and the fuzzer). Same checks as Map() except the file size.
  struct BorrowedRegion {
    GuestMemoryRegionSpec spec;
    void* host = nullptr;
  };
  static absl::StatusOr<std::unique_ptr<GuestMemory>> Borrow(
      const std::vector<BorrowedRegion>& regions);

  ~GuestMemory();  // unmaps what Map() mapped
  GuestMemory(const GuestMemory&) = delete;
  GuestMemory& operator=(const GuestMemory&) = delete;

  // Describes guest bytes [gpa, gpa+length) as host iovecs, one per region the range crosses,
  // appended at iov[0..]. Returns the number of iovecs written, 0 for length 0, or -1 if any byte
  // is unmapped, the range overflows, or more than `capacity` iovecs would be needed.
  int TranslateGuest(uint64_t gpa, uint64_t length, struct iovec* iov, int capacity) const;
  // Host address of guest bytes [gpa, gpa+length) if they lie within one region, else nullptr.
  void* GuestToHost(uint64_t gpa, uint64_t length) const;
  // Host address of frontend bytes [addr, addr+length) if they lie within one region, else
  // nullptr (rings are given as frontend virtual addresses).
  void* FrontendToHost(uint64_t addr, uint64_t length) const;

  int region_count() const { return static_cast<int>(regions_.size()); }
  // Whether an access to a mapped region raised SIGBUS (the frontend made a page unbackable; see
  // guest_memory_faults.h). What was read from that page since is zeroes, not the guest's.
  bool faulted() const { return faults_.load(std::memory_order_acquire) != 0; }

 private:
  struct Region {
    GuestMemoryRegionSpec spec;
    unsigned char* host = nullptr;  // guest_phys_addr maps here
    void* mapping = nullptr;        // what munmap() gets, or nullptr if borrowed
    size_t mapping_length = 0;
    int watch_slot = -1;  // WatchMapping()'s, for a mapping
  };
  GuestMemory() = default;
  static absl::Status CheckLayout(const std::vector<GuestMemoryRegionSpec>& regions);
  // The region holding guest address `gpa`, or nullptr.
  const Region* RegionOf(uint64_t gpa) const;

  std::vector<Region> regions_;  // sorted by guest_phys_addr
  std::atomic<uint32_t> faults_{0};
};

}  // namespace bexd::exports
