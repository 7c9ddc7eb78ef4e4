// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/file_node.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <libaio.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "block/file_lock.h"
#include "block/file_queue.h"
#include "block/uring_ring.h"
#include "util/log.h"

namespace bexd::block {
namespace {

// The DIO alignment when neither statx nor the device tells: valid on every filesystem whose
// block size is at most a page.
constexpr uint32_t kFallbackDirectAlign = 4096;

}  // namespace

const char* AioModeName(AioMode aio) {
  switch (aio) {
    case AioMode::kNative:
      return "native";
    case AioMode::kThreads:
      return "threads";
    case AioMode::kIoUring:
      return "io_uring";
  }
  return "?";
}

absl::StatusOr<std::shared_ptr<FileNode>> FileNode::Open(std::string node_name,
                                                         const FileOptions& options, bool read_only,
                                                         bool auto_read_only) {
  if (options.filename.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("node '{}': the file driver needs a filename", node_name));
  }
  std::shared_ptr<FileNode> node(new FileNode(std::move(node_name), options, read_only));
  absl::Status status = node->Init(auto_read_only);
  if (!status.ok()) return status;
  return node;
}

FileNode::~FileNode() {
  if (fd_ >= 0) close(fd_);
}

absl::Status FileNode::Init(bool auto_read_only) {
  const std::string& filename = options_.filename;
  const int flags = O_CLOEXEC | (direct() ? O_DIRECT : 0);
  fd_ = open(filename.c_str(), flags | (read_only_ ? O_RDONLY : O_RDWR));
  if (fd_ < 0 && !read_only_ && auto_read_only &&
      (errno == EACCES || errno == EROFS || errno == EPERM)) {
    log::Info(
        "node '{}': '{}' cannot be opened for writing ({}); opening it read-only "
        "(auto-read-only)",
        node_name(), filename, std::strerror(errno));
    read_only_ = true;
    fd_ = open(filename.c_str(), flags | O_RDONLY);
  }
  if (fd_ < 0) {
    int error = errno;
    // QEMU's words, which scripts match; the file names the node.
    std::string message = fmt::format("Could not open '{}'", filename);
    if (error == EINVAL && direct()) {
      message += " (its filesystem may not support O_DIRECT; try cache.direct=off)";
    }
    return absl::ErrnoToStatus(error, message);
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) {
    return absl::ErrnoToStatus(errno,
                               fmt::format("node '{}': cannot stat '{}'", node_name(), filename));
  }
  if (options_.host_device && !S_ISBLK(st.st_mode) && !S_ISCHR(st.st_mode)) {
    // QEMU's text (hdev_open), which scripts may match.
    return absl::InvalidArgumentError(fmt::format(
        "node '{}': 'host_device' driver requires '{}' to be either a character or block device",
        node_name(), filename));
  }
  if (S_ISBLK(st.st_mode)) {
    is_block_device_ = true;
    uint64_t bytes = 0;
    if (ioctl(fd_, BLKGETSIZE64, &bytes) != 0) {
      return absl::ErrnoToStatus(
          errno, fmt::format("node '{}': cannot read the size of '{}'", node_name(), filename));
    }
    size_.store(bytes);
    int sector = 0;
    if (ioctl(fd_, BLKSSZGET, &sector) != 0 || sector <= 0) {
      return absl::ErrnoToStatus(
          errno,
          fmt::format("node '{}': cannot read the sector size of '{}'", node_name(), filename));
    }
    logical_block_size_ = static_cast<uint32_t>(sector);
  } else if (S_ISREG(st.st_mode)) {
    size_.store(static_cast<uint64_t>(st.st_size));
  } else {
    return absl::InvalidArgumentError(
        fmt::format("node '{}': '{}' is {}, not a regular file or block device", node_name(),
                    filename, S_ISDIR(st.st_mode) ? "a directory" : "a special file"));
  }
  absl::Status status =
      LockImage(fd_, node_name(), filename, !read_only_, options_.force_share, options_.locking);
  if (!status.ok()) return status;
  if (direct()) {
    status = DetectAlignment();
    if (!status.ok()) return status;
  }
  if (options_.aio == AioMode::kIoUring) {
    // Refused at open rather than when an export starts its first queue.
    auto ring = UringRing::Create(1, -1);
    if (!ring.ok()) {
      return absl::Status(ring.status().code(), fmt::format("node '{}': {}", node_name(),
                                                            std::string(ring.status().message())));
    }
  }
  log::Debug("node '{}': {}, {} bytes, direct I/O alignment: offset {}, memory {}", node_name(),
             description(), size(), offset_align_, memory_align_);
  return absl::OkStatus();
}

absl::Status FileNode::DetectAlignment() {
  struct statx sx = {};
  if (statx(fd_, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
    if (sx.stx_dio_offset_align == 0) {
      return absl::InvalidArgumentError(
          fmt::format("node '{}': '{}' does not support O_DIRECT; use cache.direct=off",
                      node_name(), options_.filename));
    }
    offset_align_ = sx.stx_dio_offset_align;
    memory_align_ = sx.stx_dio_mem_align;
  } else if (is_block_device_) {
    offset_align_ = memory_align_ = logical_block_size_;
  } else {
    offset_align_ = memory_align_ = kFallbackDirectAlign;
  }
  if (!std::has_single_bit(offset_align_) || !std::has_single_bit(memory_align_)) {
    return absl::InternalError(fmt::format(
        "node '{}': '{}' reports a direct I/O alignment that is not a power of two ({}, {})",
        node_name(), options_.filename, offset_align_, memory_align_));
  }
  return absl::OkStatus();
}

// Kernels and filesystems without asynchronous fdatasync refuse the iocb at io_submit with EINVAL;
// flushes then run on a worker thread. Learnt from the first flush rather than probed at open,
// which would cost every open an fdatasync of its own.
void FileNode::NoteAioFdsyncRefused() {
  if (aio_fdsync_.exchange(false, std::memory_order_relaxed)) {
    log::Debug("node '{}': asynchronous fdatasync not supported; flushes run on worker threads",
               node_name());
  }
}

// fsyncgate: when writeback fails, Linux marks the pages it could not write clean and reports the
// error once per open file. The page cache then holds data the disk does not, and the next
// fdatasync succeeds without writing it again. The same holds for a RWF_DSYNC write, whose sync
// consumes the error. QEMU's file-posix therefore fails every later flush of such a node
// (page_cache_inconsistent); so does bexd, with EIO. The flush still runs, so data written since
// reaches the disk if it can. O_DIRECT bypasses the page cache (unless a client writes through it
// itself: SharePageCache), and cache.no-flush has given up durability, so neither needs this.
int64_t FileNode::SettleDurable(bool flush, int64_t result) {
  if ((direct() && !page_cache_shared_.load(std::memory_order_acquire)) ||
      options_.cache_no_flush) {
    return result;
  }
  if (result < 0) {
    int none = 0;
    if (flush_error_.compare_exchange_strong(none, static_cast<int>(-result),
                                             std::memory_order_acq_rel)) {
      log::Error(
          "node '{}': {} '{}' failed: {}; the page cache may hold data the disk does not, so every "
          "later flush of this node fails with EIO until the node is reopened",
          node_name(), flush ? "flushing" : "a FUA write to", options_.filename,
          std::strerror(static_cast<int>(-result)));
    }
    return result;
  }
  return flush && flush_error() != 0 ? -EIO : result;
}

uint32_t FileNode::request_alignment() const {
  return offset_align_ > memory_align_ ? offset_align_ : memory_align_;
}

Capabilities FileNode::capabilities() const {
  Capabilities capabilities;
  capabilities.discard = options_.discard == DiscardMode::kUnmap;
  // A block device reports data everywhere (file_worker.cc BlockStatus).
  capabilities.block_status = !is_block_device_;
  capabilities.flush = !read_only_ && !options_.cache_no_flush;
  // ftruncate works on files only.
  capabilities.resize = !read_only_ && !is_block_device_;
  return capabilities;
}

bool FileNode::IsAligned(uint64_t offset, uint64_t length, const struct iovec* iov,
                         int iovcnt) const {
  if (!direct()) return true;
  uint64_t offset_mask = offset_align_ - 1;
  uintptr_t memory_mask = memory_align_ - 1;
  if (((offset | length) & offset_mask) != 0) return false;
  for (int i = 0; i < iovcnt; ++i) {
    if ((reinterpret_cast<uintptr_t>(iov[i].iov_base) & memory_mask) != 0) return false;
    if ((iov[i].iov_len & offset_mask) != 0) return false;
  }
  return true;
}

absl::Status FileNode::Truncate(uint64_t new_size) {
  if (read_only_) {
    return absl::PermissionDeniedError(fmt::format(
        "node '{}': cannot resize '{}': the node is read-only", node_name(), options_.filename));
  }
  if (is_block_device_) {
    return absl::PermissionDeniedError(fmt::format(
        "node '{}': cannot resize '{}': it is a block device", node_name(), options_.filename));
  }
  if (new_size > static_cast<uint64_t>(INT64_MAX)) {
    return absl::OutOfRangeError(
        fmt::format("node '{}': size {} is too large", node_name(), new_size));
  }
  // Keeps partial-block writes near the end from re-extending or cutting the file meanwhile.
  uint64_t old_size = size();
  uint64_t from = (old_size < new_size ? old_size : new_size) & ~uint64_t{offset_align_ - 1};
  RangeGuard guard(rmw_lock_, from, UINT64_MAX);
  if (ftruncate(fd_, static_cast<off_t>(new_size)) != 0) {
    return absl::ErrnoToStatus(errno, fmt::format("node '{}': cannot resize '{}' to {} bytes",
                                                  node_name(), options_.filename, new_size));
  }
  size_.store(new_size, std::memory_order_release);
  return absl::OkStatus();
}

void FileNode::TrimPastEnd(uint64_t end) {
  // A client that does its own I/O on the file (SharePageCache) owns its size.
  if (is_block_device_ || page_cache_shared_.load(std::memory_order_acquire)) return;
  const uint64_t size = size_.load(std::memory_order_acquire);
  if (end <= size) return;
  RangeGuard guard(rmw_lock_, size & ~uint64_t{offset_align_ - 1}, UINT64_MAX);
  // A Truncate may have run meanwhile: the size it left is the one to keep.
  const uint64_t kept = size_.load(std::memory_order_acquire);
  struct stat st;
  if (end <= kept || fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) <= kept) return;
  if (ftruncate(fd_, static_cast<off_t>(kept)) != 0) {
    log::Error(
        "node '{}': a write that completed after a shrink extended '{}' to {} bytes, and "
        "cutting it back to {} failed: {}",
        node_name(), options_.filename, st.st_size, kept, std::strerror(errno));
  }
}

absl::StatusOr<std::unique_ptr<IoQueue>> FileNode::CreateDriverQueue() {
  auto queue = FileQueue::Create(shared_from_this());
  if (!queue.ok()) {
    return absl::Status(queue.status().code(), fmt::format("node '{}': {}", node_name(),
                                                           std::string(queue.status().message())));
  }
  return std::unique_ptr<IoQueue>(std::move(*queue));
}

void FileNode::RefreshSize() {
  // Only a client doing its own I/O on the file (SharePageCache) changes its size behind the
  // node; otherwise size_ is the truth, and re-reading it could undo a concurrent Truncate.
  if (!page_cache_shared_.load(std::memory_order_acquire)) return;
  struct stat st;
  // A block device cannot be grown by writing; its size is read at open.
  if (is_block_device_ || fstat(fd_, &st) != 0) return;
  size_.store(static_cast<uint64_t>(st.st_size), std::memory_order_release);
}

std::optional<uint64_t> FileNode::AllocatedBytes() const {
  struct stat st;
  // st_blocks means nothing for a block device; QEMU leaves actual-size out for those too.
  if (is_block_device_ || fstat(fd_, &st) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

std::string FileNode::description() const {
  return fmt::format("file '{}' ({}, aio={}, cache.direct={}{})", options_.filename,
                     read_only_ ? "read-only" : "writable", AioModeName(options_.aio),
                     direct() ? "on" : "off", options_.cache_no_flush ? ", cache.no-flush=on" : "");
}

}  // namespace bexd::block
