// SPDX-License-Identifier: GPL-2.0-or-later
// --object tls-creds-x509 / tls-creds-psk: QEMU's TLS credentials objects, which nbd's tls-creds
// names by id.
#pragma once

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "block/objects.h"
#include "cli/config/option_reader.h"

namespace bexd::cli {

struct TlsCredsObject {
  std::string id;
  block::TlsCredentials credentials;
};

// Whether `qom_type` is one of QEMU's TLS credentials types (tls-creds-anon included, which
// ParseTlsCredsObject refuses with the reason).
bool IsTlsCredsType(std::string_view qom_type);

// QEMU's options: id, dir (required), endpoint=client|server, verify-peer (x509, default on),
// username (psk, default "qemu"); x509's sanity-check and loaded are accepted. As QEMU loads the
// credentials when the object is created, the files a client needs are checked now: ca-cert.pem
// (x509 with verify-peer), client-cert.pem and client-key.pem together or not at all, keys.psk
// holding the username (psk). passwordid and priority are refused with the reason (libnbd cannot
// take them), and so is tls-creds-anon.
absl::StatusOr<TlsCredsObject> ParseTlsCredsObject(const nlohmann::json& object, Syntax syntax,
                                                   const std::string& path = "");

}  // namespace bexd::cli
