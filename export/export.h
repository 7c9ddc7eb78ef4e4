// An export: one block node served through one transport. The daemon owns exports by id; the
// control socket adds and removes them at run time.
#pragma once

#include <absl/status/status.h>

#include <memory>
#include <string>
#include <vector>

#include "block/block_node.h"
#include "fuse/queue_stats.h"

namespace bexd::exp {

class Export {
 public:
  virtual ~Export() = default;  // stops the export if still running
  const std::string& id() const { return id_; }
  const std::shared_ptr<block::BlockNode>& node() const { return node_; }
  virtual std::string type() const = 0;  // "fuse", "vhost-user-fs"
  // Stops taking requests, completes what is in flight, flushes the node, and releases the
  // transport (unmounts, closes the socket). Idempotent; blocks until done.
  virtual void Stop() = 0;
  // True while a client holds the export open (FUSE: an open file handle; vhost: a frontend).
  virtual bool in_use() const = 0;
  // One entry per queue thread.
  virtual std::vector<fuse::QueueStatsSnapshot> Stats() const = 0;

 protected:
  Export(std::string id, std::shared_ptr<block::BlockNode> node)
      : id_(std::move(id)), node_(std::move(node)) {}

 private:
  std::string id_;
  std::shared_ptr<block::BlockNode> node_;
};

}  // namespace bexd::exp
