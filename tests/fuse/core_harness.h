// SPDX-License-Identifier: GPL-2.0-or-later
// Drives a real fuse::Queue (over a real block node) with raw FUSE requests built as bytes, the
// way a transport would: scatter-gather in/out buffers, Dispatch, Poll until the completion.
#pragma once

#include <linux/fuse.h>
#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "block/block_node.h"
#include "block/options.h"
#include "fuse/queue.h"
#include "fuse/session.h"

namespace bexd::fuse::testing {

// A request's bytes: fuse_in_header (len filled in by Finish), the argument struct, a payload.
class RequestBytes {
 public:
  RequestBytes(uint32_t opcode, uint64_t node_id, uint64_t unique = 7);
  template <typename T>
  RequestBytes& Append(const T& value) {
    return AppendBytes(&value, sizeof(value));
  }
  RequestBytes& AppendBytes(const void* data, size_t n);
  RequestBytes& AppendString(const std::string& text);  // with its NUL
  // Sets header.len to the byte count (unless `len` overrides it) and returns the bytes.
  std::vector<uint8_t> Finish() const;
  std::vector<uint8_t> FinishWithLength(uint32_t len) const;

 private:
  std::vector<uint8_t> bytes_;
};

struct Reply {
  int completions = 0;
  int64_t result = 0;
  std::vector<uint8_t> bytes;  // the first `result` bytes of the out buffers, when result > 0

  // The reply header; only meaningful when result >= sizeof(fuse_out_header).
  struct fuse_out_header header() const;
  int error() const { return -header().error; }
  template <typename T>
  T payload() const {
    T value;
    std::memset(&value, 0, sizeof(value));
    if (bytes.size() >= sizeof(struct fuse_out_header) + sizeof(T)) {
      std::memcpy(&value, bytes.data() + sizeof(struct fuse_out_header), sizeof(T));
    }
    return value;
  }
  std::vector<uint8_t> data() const;  // everything after the header
};

// How to lay the buffers out.
struct Layout {
  size_t out_capacity = (1u << 20) + 4096;  // a maximal READ reply fits
  // Cut `in` and `out` into iovecs of at most this many bytes (0: one iovec each).
  size_t in_piece = 0;
  size_t out_piece = 0;
  // `out` is the same memory as `in` (as virtio-fs and a /dev/fuse buffer may have it).
  bool out_aliases_in = false;
};

class CoreHarness {
 public:
  // Opens a node with `blockdev` and serves it with a session of `options`.
  CoreHarness(const block::BlockdevOptions& blockdev, const SessionOptions& options);
  // Serves a node opened already.
  CoreHarness(std::shared_ptr<block::BlockNode> node, const SessionOptions& options);
  ~CoreHarness();

  Reply Run(const std::vector<uint8_t>& request, const Layout& layout = Layout());
  // Dispatches all requests before polling once, so that they are in flight together.
  std::vector<Reply> RunConcurrently(const std::vector<std::vector<uint8_t>>& requests,
                                     const Layout& layout = Layout());
  // INIT with protocol 7.38 and everything the kernel offers; expects success.
  void Init();

  Session& session() { return *session_; }
  Queue& queue() { return *queue_; }
  block::BlockNode& node() { return *node_; }

 private:
  static void OnComplete(Request* request, int64_t result, void* context);

  std::shared_ptr<block::BlockNode> node_;
  std::shared_ptr<Session> session_;
  std::unique_ptr<Queue> queue_;
  // Per dispatched slot (Request::transport points at its entry).
  struct Outcome {
    int completions = 0;
    int64_t result = 0;
  };
  void PollUntilDone(const std::vector<Outcome>& outcomes);
};

// A writable session; `resize_needs_growable` as the vhost-user-fs export sets it.
SessionOptions Writable(bool growable = false, bool resize_needs_growable = false);

// Requests for the common opcodes.
std::vector<uint8_t> InitRequest(uint32_t major = 7, uint32_t minor = 38,
                                 uint32_t flags = 0xffffffffu);
std::vector<uint8_t> ReadRequest(uint64_t node_id, uint64_t offset, uint32_t size);
std::vector<uint8_t> WriteRequest(uint64_t node_id, uint64_t offset,
                                  const std::vector<uint8_t>& data, uint32_t open_flags = 0);
std::vector<uint8_t> OpenRequest(uint64_t node_id, uint32_t open_flags);
std::vector<uint8_t> GetattrRequest(uint64_t node_id);
std::vector<uint8_t> SetattrSizeRequest(uint64_t node_id, uint64_t size);
std::vector<uint8_t> FallocateRequest(uint64_t node_id, uint64_t offset, uint64_t length,
                                      uint32_t mode);
std::vector<uint8_t> LseekRequest(uint64_t node_id, uint64_t offset, uint32_t whence);
std::vector<uint8_t> FsyncRequest(uint64_t node_id);

}  // namespace bexd::fuse::testing
