// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/rbd/rbd_api.h"

namespace bexd::block {
namespace {

// The sonames of the ABI this driver is built against (Debian 12: Ceph 16).
constexpr char kLibrados[] = "librados.so.2";
constexpr char kLibrbd[] = "librbd.so.1";

RbdApi api;

absl::Status Load() {
  absl::StatusOr<void*> rados = OpenSharedLibrary(kLibrados, "rbd");
  if (!rados.ok()) return rados.status();
  absl::StatusOr<void*> rbd = OpenSharedLibrary(kLibrbd, "rbd");
  if (!rbd.ok()) return rbd.status();
  absl::Status status;
#define BEXD_RESOLVE_RADOS(name) \
  if (status.ok()) status = Resolve(*rados, kLibrados, #name, &api.name);
#define BEXD_RESOLVE_RBD(name) \
  if (status.ok()) status = Resolve(*rbd, kLibrbd, #name, &api.name);
  BEXD_LIBRADOS_FUNCTIONS(BEXD_RESOLVE_RADOS)
  BEXD_LIBRBD_FUNCTIONS(BEXD_RESOLVE_RBD)
#undef BEXD_RESOLVE_RADOS
#undef BEXD_RESOLVE_RBD
  return status;
}

}  // namespace

absl::Status LoadRbdApi() {
  static const absl::Status status = Load();
  return status;
}

const RbdApi& Rbd() { return api; }

}  // namespace bexd::block
