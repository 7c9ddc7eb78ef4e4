// SPDX-License-Identifier: GPL-2.0-or-later
// An export: one block node served through one transport. The daemon owns exports by id; the
// control socket adds and removes them at run time.
#pragma once

#include <absl/status/status.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "block/block_node.h"
#include "fuse/queue_stats.h"

namespace bexd::exports {

class Export {
 public:
  // Called at most once, on one of the export's own threads, when the export has stopped serving
  // on its own (its transport went away, e.g. an outside umount) and released what it held;
  // never when Stop() ended it. Stop() joins that thread, so the callback must only pass the news
  // to another thread, which then calls Stop() and destroys the export.
  using EndedFn = std::function<void()>;

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
  // Passthrough opens do their I/O without bexd, so the queue counters miss it. nullopt for
  // transports without passthrough.
  struct PassthroughStats {
    bool active = false;      // OPEN may give passthrough (negotiated, node eligible)
    uint32_t open_files = 0;  // passthrough opens now
    uint64_t opens = 0;       // passthrough opens since the export started
  };
  virtual std::optional<PassthroughStats> passthrough_stats() const { return std::nullopt; }
  // A control command may have changed the node's size behind the client's back: drop what the
  // client caches of the file's attributes, where the transport can. Control thread only.
  virtual void DropCachedAttributes() {}
  // True once the export has ended on its own; `ended_reason()` then says why ("'/mnt' was
  // unmounted from outside").
  bool ended() const { return ended_.load(std::memory_order_acquire); }
  // True from the moment the export begins to end on its own: its clients' files can reach it no
  // more, though its final flush may still run before ended().
  virtual bool ending() const { return ended(); }
  const std::string& ended_reason() const { return ended_reason_; }
  // True once the flush of a stop has failed: what the export's clients wrote may not be durable.
  bool stop_flush_failed() const { return stop_flush_failed_.load(std::memory_order_acquire); }

 protected:
  Export(std::string id, bool writable, std::shared_ptr<block::BlockNode> node,
         EndedFn on_ended = nullptr)
      : id_(std::move(id)),
        writable_(writable),
        node_(std::move(node)),
        on_ended_(std::move(on_ended)) {}

  // For the transport's stop, once every reply has been sent and before the transport goes: makes
  // what a writable export wrote durable; a failure is logged (nobody is left to answer) and
  // kept for stop_flush_failed().
  void FlushAfterLastReply();

  // For the transport, once, after it released everything its end made useless.
  void ReportEnded(std::string reason) {
    ended_reason_ = std::move(reason);
    ended_.store(true, std::memory_order_release);
    if (on_ended_) on_ended_();
  }

 private:
  std::string id_;
  bool writable_;
  std::shared_ptr<block::BlockNode> node_;
  EndedFn on_ended_;
  std::string ended_reason_;  // written once, before `ended_` is set
  std::atomic<bool> ended_{false};
  std::atomic<bool> stop_flush_failed_{false};
};

}  // namespace bexd::exports
