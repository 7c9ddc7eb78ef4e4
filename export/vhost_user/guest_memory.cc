// SPDX-License-Identifier: GPL-2.0-or-later
#include "export/vhost_user/guest_memory.h"

#include <fmt/format.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "export/vhost_user/guest_memory_faults.h"

namespace bexd::exports {
namespace {

bool RangeEnd(uint64_t start, uint64_t length, uint64_t* end) {
  return !__builtin_add_overflow(start, length, end);
}

bool Overlaps(uint64_t a_start, uint64_t a_end, uint64_t b_start, uint64_t b_end) {
  return a_start < b_end && b_start < a_end;
}

bool OnHugetlbfs(int fd) {
  struct statfs fs;
  return fstatfs(fd, &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC;
}

// The alignment mmap() offsets need for this file: huge pages for hugetlbfs (reported as its
// st_blksize), else the base page size.
uint64_t MapAlignment(const struct stat& st) {
  uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t block = static_cast<uint64_t>(st.st_blksize);
  if (block > page && std::has_single_bit(block)) return block;
  return page;
}

const char* KindOf(mode_t mode) {
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "a special file";
}

// How many bytes `fd` can back: a regular file's size (memfd and hugetlbfs files included) or a
// block device's capacity. A mapping faults (SIGBUS) on any access past that, so anything whose
// size cannot be known (a pipe, a socket, a character device) is refused.
absl::StatusOr<uint64_t> BackingSize(int fd, const struct stat& st) {
  if (S_ISREG(st.st_mode)) return static_cast<uint64_t>(st.st_size);
  if (S_ISBLK(st.st_mode)) {
    uint64_t bytes = 0;
    if (ioctl(fd, BLKGETSIZE64, &bytes) != 0) {
      return absl::InvalidArgumentError(
          fmt::format("cannot read the block device's size: {}", strerror(errno)));
    }
    return bytes;
  }
  return absl::InvalidArgumentError(fmt::format(
      "the fd is {}, not a regular file, memfd or block device, so its size cannot be checked",
      KindOf(st.st_mode)));
}

}  // namespace

absl::Status GuestMemory::CheckLayout(const std::vector<GuestMemoryRegionSpec>& regions) {
  if (regions.empty()) return absl::InvalidArgumentError("memory table has no regions");
  if (regions.size() > static_cast<size_t>(kMaxRegions)) {
    return absl::InvalidArgumentError(fmt::format(
        "memory table has {} regions, at most {} are supported", regions.size(), kMaxRegions));
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    const GuestMemoryRegionSpec& r = regions[i];
    uint64_t gpa_end, frontend_end, offset_end;
    if (r.size == 0 || !RangeEnd(r.guest_phys_addr, r.size, &gpa_end) ||
        !RangeEnd(r.frontend_addr, r.size, &frontend_end) ||
        !RangeEnd(r.mmap_offset, r.size, &offset_end) || r.size > SIZE_MAX / 2) {
      return absl::InvalidArgumentError(fmt::format(
          "memory region {} (guest 0x{:x}, size 0x{:x}, offset 0x{:x}) is empty or overflows", i,
          r.guest_phys_addr, r.size, r.mmap_offset));
    }
    for (size_t j = 0; j < i; ++j) {
      const GuestMemoryRegionSpec& o = regions[j];
      if (Overlaps(r.guest_phys_addr, gpa_end, o.guest_phys_addr, o.guest_phys_addr + o.size) ||
          Overlaps(r.frontend_addr, frontend_end, o.frontend_addr, o.frontend_addr + o.size)) {
        return absl::InvalidArgumentError(fmt::format("memory regions {} and {} overlap", j, i));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GuestMemory>> GuestMemory::Map(
    const std::vector<GuestMemoryRegionSpec>& regions, const std::vector<int>& fds) {
  if (absl::Status status = CheckLayout(regions); !status.ok()) return status;
  if (fds.size() != regions.size()) {
    return absl::InvalidArgumentError(fmt::format(
        "memory table has {} regions but {} file descriptors", regions.size(), fds.size()));
  }
  if (absl::Status status = InstallGuestMemoryFaultHandler(); !status.ok()) return status;
  std::unique_ptr<GuestMemory> memory(new GuestMemory());
  for (size_t i = 0; i < regions.size(); ++i) {
    const GuestMemoryRegionSpec& spec = regions[i];
    struct stat st;
    if (fstat(fds[i], &st) != 0) {
      return absl::InvalidArgumentError(
          fmt::format("memory region {}: fstat: {}", i, strerror(errno)));
    }
    absl::StatusOr<uint64_t> backing = BackingSize(fds[i], st);
    if (!backing.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("memory region {}: {}", i, std::string(backing.status().message())));
    }
    // CheckLayout() made sure that mmap_offset + size does not overflow.
    if (*backing < spec.mmap_offset + spec.size) {
      return absl::InvalidArgumentError(fmt::format(
          "memory region {}: its fd backs 0x{:x} bytes, the region needs 0x{:x} (offset 0x{:x} + "
          "size 0x{:x})",
          i, *backing, spec.mmap_offset + spec.size, spec.mmap_offset, spec.size));
    }
    uint64_t align = MapAlignment(st);
    uint64_t map_offset = spec.mmap_offset & ~(align - 1);
    uint64_t lead = spec.mmap_offset - map_offset;
    size_t length = static_cast<size_t>(lead + spec.size);
    // On hugetlbfs the kernel then reserves the huge pages now (those the frontend's own mapping
    // holds count), so a file the machine has no huge pages for fails here instead of faulting
    // at the first access.
    const int reserve = OnHugetlbfs(fds[i]) ? 0 : MAP_NORESERVE;
    void* mapping = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | reserve, fds[i],
                         static_cast<off_t>(map_offset));
    if (mapping == MAP_FAILED) {
      return absl::InvalidArgumentError(
          fmt::format("memory region {}: mmap of 0x{:x} bytes at offset 0x{:x}: {}", i, length,
                      map_offset, strerror(errno)));
    }
    memory->regions_.push_back(
        Region{spec, static_cast<unsigned char*>(mapping) + lead, mapping, length});
    absl::StatusOr<int> slot = WatchMapping(mapping, length, align, &memory->faults_);
    if (!slot.ok()) return slot.status();  // the destructor unmaps what is mapped
    memory->regions_.back().watch_slot = *slot;
  }
  std::sort(memory->regions_.begin(), memory->regions_.end(), [](const Region& a, const Region& b) {
    return a.spec.guest_phys_addr < b.spec.guest_phys_addr;
  });
  return memory;
}

absl::StatusOr<std::unique_ptr<GuestMemory>> GuestMemory::Borrow(
    const std::vector<BorrowedRegion>& regions) {
  std::vector<GuestMemoryRegionSpec> specs;
  for (const BorrowedRegion& r : regions) specs.push_back(r.spec);
  if (absl::Status status = CheckLayout(specs); !status.ok()) return status;
  std::unique_ptr<GuestMemory> memory(new GuestMemory());
  for (const BorrowedRegion& r : regions) {
    if (r.host == nullptr) return absl::InvalidArgumentError("borrowed region without memory");
    memory->regions_.push_back(Region{r.spec, static_cast<unsigned char*>(r.host), nullptr, 0});
  }
  std::sort(memory->regions_.begin(), memory->regions_.end(), [](const Region& a, const Region& b) {
    return a.spec.guest_phys_addr < b.spec.guest_phys_addr;
  });
  return memory;
}

GuestMemory::~GuestMemory() {
  for (const Region& region : regions_) {
    if (region.watch_slot >= 0) UnwatchMapping(region.watch_slot);
    if (region.mapping != nullptr) munmap(region.mapping, region.mapping_length);
  }
}

const GuestMemory::Region* GuestMemory::RegionOf(uint64_t gpa) const {
  for (const Region& region : regions_) {
    if (gpa >= region.spec.guest_phys_addr &&
        gpa - region.spec.guest_phys_addr < region.spec.size) {
      return &region;
    }
  }
  return nullptr;
}

int GuestMemory::TranslateGuest(uint64_t gpa, uint64_t length, struct iovec* iov,
                                int capacity) const {
  uint64_t end;
  if (!RangeEnd(gpa, length, &end)) return -1;
  int count = 0;
  while (length > 0) {
    const Region* region = RegionOf(gpa);
    if (region == nullptr || count == capacity) return -1;
    uint64_t within = gpa - region->spec.guest_phys_addr;
    uint64_t piece = std::min(length, region->spec.size - within);
    iov[count].iov_base = region->host + within;
    iov[count].iov_len = static_cast<size_t>(piece);
    ++count;
    gpa += piece;
    length -= piece;
  }
  return count;
}

void* GuestMemory::GuestToHost(uint64_t gpa, uint64_t length) const {
  const Region* region = RegionOf(gpa);
  if (region == nullptr) return nullptr;
  uint64_t within = gpa - region->spec.guest_phys_addr;
  if (length > region->spec.size - within) return nullptr;
  return region->host + within;
}

void* GuestMemory::FrontendToHost(uint64_t addr, uint64_t length) const {
  for (const Region& region : regions_) {
    if (addr < region.spec.frontend_addr) continue;
    uint64_t within = addr - region.spec.frontend_addr;
    if (within >= region.spec.size) continue;
    if (length > region.spec.size - within) return nullptr;
    return region.host + within;
  }
  return nullptr;
}

}  // namespace bexd::exports
