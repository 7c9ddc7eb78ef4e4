// SPDX-License-Identifier: GPL-2.0-or-later
// Synchronous execution of file requests on a worker thread: everything aio=threads does, and
// what libaio cannot do for aio=native (unaligned I/O under O_DIRECT, discard, write-zeroes,
// block status, fdatasync without IOCB_CMD_FDSYNC, the rest of a partial completion).
//
// Under O_DIRECT a request whose offset, length or buffers are not aligned goes through this
// worker's bounce buffer. Reads read the covering aligned blocks and copy out. Writes read the
// partial head and tail blocks, merge, and write whole blocks while holding the node's range lock
// on the request's aligned span, so two such writes sharing a block cannot undo each other.
#pragma once

#include <libaio.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "block/file_node.h"
#include "block/iov_util.h"
#include "block/request_list.h"
#include "block/worker_pool.h"

namespace bexd::block {

class FileQueue;

// The file driver's per-request state, in IoRequest::driver_state.
struct FileRequestState : RequestLink {
  struct iocb iocb;
  // The queue it was submitted to: a thread's queues share one libaio ring (aio_context.h).
  FileQueue* queue;
  // Bytes a partial libaio completion already transferred; a worker does the rest.
  uint64_t done;
  int64_t result;
};

// Whether fallocate failed with `error` because the filesystem or device lacks the mode (writing
// zeroes works everywhere).
bool FallocateNotSupported(int error);

class FileWorker final : public Worker {
 public:
  explicit FileWorker(std::shared_ptr<FileNode> node);
  ~FileWorker() override;

  void Run(IoRequest* request) override;

 private:
  // Where the bytes of a bounced write come from.
  struct Source {
    IovCursor* cursor;  // nullptr: zeroes
  };

  int64_t Execute(IoRequest* request, uint64_t done);
  int64_t Read(IoRequest* request, uint64_t done);
  int64_t Write(IoRequest* request, uint64_t done);
  int64_t Allocate(const IoRequest& request);
  int64_t Discard(const IoRequest& request);
  int64_t WriteZeroes(const IoRequest& request);
  int64_t BlockStatus(IoRequest* request);
  int BounceRead(uint64_t offset, uint64_t length, IovCursor cursor);
  int BounceWrite(uint64_t offset, uint64_t length, Source source, int rw_flags);
  int WriteZeroesByWriting(uint64_t offset, uint64_t length);
  // Reads [offset, offset+length) into buffer, zero-filling whatever lies past the end of file.
  int ReadFully(char* buffer, uint64_t offset, uint64_t length);
  int WriteFully(const char* buffer, uint64_t offset, uint64_t length, int rw_flags);
  char* Bounce();

  std::shared_ptr<FileNode> node_;
  std::vector<struct iovec> slice_;
  char* bounce_ = nullptr;
  size_t bounce_size_ = 0;
};

}  // namespace bexd::block
