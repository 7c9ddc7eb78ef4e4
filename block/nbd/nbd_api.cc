// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/nbd/nbd_api.h"

namespace bexd::block {
namespace {

// The soname of the ABI this driver is built against.
constexpr char kLibnbd[] = "libnbd.so.0";

NbdApi api;

absl::Status Load() {
  absl::StatusOr<void*> nbd = OpenSharedLibrary(kLibnbd, "nbd");
  if (!nbd.ok()) return nbd.status();
  absl::Status status;
#define BEXD_RESOLVE_NBD(name) \
  if (status.ok()) status = Resolve(*nbd, kLibnbd, #name, &api.name);
  BEXD_LIBNBD_FUNCTIONS(BEXD_RESOLVE_NBD)
#undef BEXD_RESOLVE_NBD
  return status;
}

}  // namespace

absl::Status LoadNbdApi() {
  static const absl::Status status = Load();
  return status;
}

const NbdApi& Nbd() { return api; }

}  // namespace bexd::block
