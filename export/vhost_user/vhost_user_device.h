// SPDX-License-Identifier: GPL-2.0-or-later
// The vhost-user-fs device as one frontend connection sees it: negotiated features, the guest
// memory table and each vring's configuration. It turns the frontend's messages into ring starts
// and stops on the vring queues (queue 0 is the hiprio queue, 1..N the request queues). A ring
// runs while it is started (it has a kick fd), enabled, and memory and addresses are known; any
// change to a running ring's configuration stops it (draining requests in flight), applies the
// change and starts it again, so a queue thread never sees memory or fds go away under it.
// Runs on the export's socket thread only.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "export/vhost_user/guest_memory.h"
#include "export/vhost_user/vhost_user_channel.h"
#include "export/vhost_user/vring_queue.h"
#include "util/unique_fd.h"

namespace bexd::exports {

class VhostUserDevice {
 public:
  static constexpr uint64_t kFeatures = vhost::kFeatureVersion1 | vhost::kFeatureIndirectDesc |
                                        vhost::kFeatureEventIdx | vhost::kFeatureProtocolFeatures;
  static constexpr uint64_t kProtocolFeatures = vhost::kProtocolMq | vhost::kProtocolReplyAck;

  // `queues` outlive the device; queues[i] serves vring i. `on_reset` runs at the end of every
  // Reset() (a disconnect, RESET_OWNER), once no request is in flight: the guest's state above
  // the rings (its FUSE session) is gone with it.
  VhostUserDevice(std::string name, std::vector<VringQueue*> queues,
                  std::function<void()> on_reset);
  ~VhostUserDevice();  // Reset()
  VhostUserDevice(const VhostUserDevice&) = delete;
  VhostUserDevice& operator=(const VhostUserDevice&) = delete;

  // What goes back to the frontend for one message.
  struct Reply {
    bool send = false;
    vhost::Header header{};
    unsigned char payload[sizeof(uint64_t)] = {};  // a u64 or a VringState
  };
  // Handles one message. A failure means the message was malformed or could not be applied; the
  // caller closes the connection unless *reply carries the negative acknowledgement the frontend
  // asked for (REPLY_ACK), in which case the connection goes on.
  absl::Status Handle(vhost::Message& message, Reply* reply);

  // The frontend is gone: stops every ring (completing requests in flight), unmaps guest memory
  // and forgets all negotiated state, ready for the next connection.
  void Reset();

 private:
  struct Vring {
    uint32_t num = 0;
    bool have_addr = false;
    uint64_t desc_addr = 0, avail_addr = 0, used_addr = 0;
    uint16_t base = 0;
    bool enabled = false;
    util::UniqueFd kick, call, err;  // kick set: the ring is started
  };

  absl::Status Dispatch(vhost::Message& message, Reply* reply);
  absl::Status SetFeatures(uint64_t features);
  absl::Status SetMemTable(vhost::Message& message);
  // Fails for an index past the queue count.
  absl::Status CheckIndex(uint32_t index) const;
  // The payload of a vring message (VringState, VringAddr) if its size and index are right.
  template <typename T>
  absl::StatusOr<T> RingPayload(const vhost::Message& message) const;
  // Stops ring `index` if it runs, applies `change` to its configuration, and starts it again if
  // it is ready to run.
  absl::Status Reconfigure(uint32_t index, const std::function<void(Vring&)>& change);
  absl::Status SetVringFd(vhost::Message& message);
  // Stops ring i if it runs, keeping its position. True if it was running.
  bool StopRing(uint32_t index);
  // Starts ring i if everything it needs is there and it is not running yet.
  absl::Status StartRingIfReady(uint32_t index);
  // StartRingIfReady() for every ring; the first failure, after trying them all.
  absl::Status StartReadyRings();
  bool protocol_features_acked() const {
    return (features_ & vhost::kFeatureProtocolFeatures) != 0;
  }

  const std::string name_;
  const std::vector<VringQueue*> queues_;
  const std::function<void()> on_reset_;
  uint64_t features_ = 0;
  bool features_set_ = false;
  uint64_t protocol_features_ = 0;
  std::unique_ptr<GuestMemory> memory_;
  std::vector<Vring> vrings_;
};

}  // namespace bexd::exports
