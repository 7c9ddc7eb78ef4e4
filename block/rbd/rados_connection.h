// SPDX-License-Identifier: GPL-2.0-or-later
// A client connection to a Ceph cluster and an I/O context on one pool and namespace, set up as
// QEMU's rbd driver sets it up (qemu_rbd_connect): the user's id, the configuration file (Ceph's
// default files when none is given), the monitors from `server`, the cephx key from a secret
// object, auth-client-required. Unlike QEMU, librbd's cache is always off (a write completes once
// the OSDs have it), and bexd adds time limits (below) so that a cluster that does not answer
// makes requests fail instead of hang.
#pragma once

#include <absl/status/statusor.h>
#include <rados/librados.h>

#include <memory>
#include <string>

#include "block/options.h"

namespace bexd::block {

class RadosConnection {
 public:
  // Used unless the configuration sets another value (its 0, "wait forever", counts as unset):
  // an operation on an OSD that does not answer fails with ETIMEDOUT after this long, and so
  // does connecting to monitors that do not answer.
  static constexpr int kOsdOpTimeoutSeconds = 30;
  static constexpr int kMountTimeoutSeconds = 30;

  // Errors name the node and what failed.
  static absl::StatusOr<std::unique_ptr<RadosConnection>> Connect(const std::string& node_name,
                                                                  const RbdOptions& options);
  ~RadosConnection();
  RadosConnection(const RadosConnection&) = delete;
  RadosConnection& operator=(const RadosConnection&) = delete;

  rados_ioctx_t ioctx() const { return ioctx_; }

 private:
  RadosConnection() = default;

  rados_t cluster_ = nullptr;
  rados_ioctx_t ioctx_ = nullptr;
};

}  // namespace bexd::block
