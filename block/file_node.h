// SPDX-License-Identifier: GPL-2.0-or-later
// The `file` driver's node: one open regular file or block device, shared by every queue thread.
// Queues (file_queue.h) send aligned reads, writes and flushes through libaio (aio=native) and
// everything else, or everything with aio=threads, to a per-queue worker pool (file_worker.h).
#pragma once

#include <absl/status/statusor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "block/block_node.h"
#include "block/io_request.h"
#include "block/options.h"
#include "block/range_lock.h"

namespace bexd::block {

class FileNode final : public BlockNode, public std::enable_shared_from_this<FileNode> {
 public:
  static absl::StatusOr<std::shared_ptr<FileNode>> Open(std::string node_name,
                                                        const FileOptions& options, bool read_only,
                                                        bool auto_read_only = false);
  ~FileNode() override;

  std::string driver_name() const override { return options_.host_device ? "host_device" : "file"; }
  uint64_t size() const override { return size_.load(std::memory_order_acquire); }
  bool read_only() const override { return read_only_; }
  uint32_t request_alignment() const override;
  Capabilities capabilities() const override;
  absl::Status Truncate(uint64_t new_size) override;
  std::string description() const override;
  int flush_error() const override { return flush_error_.load(std::memory_order_acquire); }
  std::string filename() const override { return options_.filename; }
  std::optional<uint64_t> AllocatedBytes() const override;
  std::optional<HostFile> host_file() const override {
    return HostFile{.fd = fd_, .block_device = is_block_device_};
  }
  void SharePageCache() override { page_cache_shared_.store(true, std::memory_order_release); }
  void RefreshSize() override;

  int fd() const { return fd_; }
  const FileOptions& options() const { return options_; }
  bool direct() const { return options_.cache_direct; }
  bool is_block_device() const { return is_block_device_; }
  // O_DIRECT constraints: file offsets and lengths are multiples of offset_align, buffer
  // addresses of memory_align (both 1 without O_DIRECT).
  uint32_t offset_align() const { return offset_align_; }
  uint32_t memory_align() const { return memory_align_; }
  // A block device's logical block size (the granularity of BLKDISCARD); 1 for files.
  uint32_t logical_block_size() const { return logical_block_size_; }
  // Whether libaio accepts IOCB_CMD_FDSYNC for this file: assumed until io_submit refuses one.
  bool aio_fdsync() const { return aio_fdsync_.load(std::memory_order_relaxed); }
  void NoteAioFdsyncRefused();
  // Serializes read-modify-write of partial blocks, and resizing, under O_DIRECT.
  RangeLock& rmw_lock() { return rmw_lock_; }
  // On the queue thread, as a write, write-zeroes or allocation that ended at `end` completes
  // past the node's size: it was accepted before a shrink and landed after it, extending the
  // file again (QEMU drains a node before truncating it; bexd's queues take no lock that would
  // allow that). Cuts the file back to the node's size, so a reopen or a later grow does not
  // bring that data back.
  void TrimPastEnd(uint64_t end);

  // Whether a read or write of the iovec at `offset` can go to the kernel without a bounce
  // buffer.
  bool IsAligned(uint64_t offset, uint64_t length, const struct iovec* iov, int iovcnt) const;

  // What a request reports, given the result the kernel gave for it. Both I/O engines (libaio
  // completions and workers) pass every result through here, from whichever thread saw it. Only
  // flushes and FUA writes are affected: see SettleDurable.
  int64_t KernelResult(const IoRequest& request, int64_t result) {
    const bool flush = request.op == IoOp::kFlush;
    if (!flush && !(request.op == IoOp::kWrite && (request.flags & kIoFua))) return result;
    return SettleDurable(flush, result);
  }

 protected:
  absl::StatusOr<std::unique_ptr<IoQueue>> CreateDriverQueue() override;

 private:
  FileNode(std::string node_name, const FileOptions& options, bool read_only)
      : BlockNode(std::move(node_name)), options_(options), read_only_(read_only) {}
  absl::Status Init(bool auto_read_only);
  absl::Status DetectAlignment();
  int64_t SettleDurable(bool flush, int64_t result);

  const FileOptions options_;
  bool read_only_;  // set before Init() returns, fixed after
  int fd_ = -1;
  bool is_block_device_ = false;
  std::atomic<uint64_t> size_{0};
  uint32_t offset_align_ = 1;
  uint32_t memory_align_ = 1;
  uint32_t logical_block_size_ = 1;
  std::atomic<bool> aio_fdsync_{true};
  RangeLock rmw_lock_;
  // errno of the first failed flush or FUA write without O_DIRECT; never reset (a node is reopened
  // as a new FileNode). Shared by every queue and worker thread.
  std::atomic<int> flush_error_{0};
  // A client writes through the page cache itself (SharePageCache), so O_DIRECT no longer keeps
  // it out of the picture.
  std::atomic<bool> page_cache_shared_{false};
};

}  // namespace bexd::block
