// SPDX-License-Identifier: GPL-2.0-or-later
// QEMU's user-creatable objects that drivers look up by id when a node opens: `secret` objects
// (--object secret,id=ID,file=PATH; rbd's key-secret), so that no key appears on a command line,
// and TLS credentials (--object tls-creds-x509 / tls-creds-psk; nbd's tls-creds). One table for
// the process, whose ids every type shares as in QEMU's /objects: the daemon adds the objects of
// its command line and config file before it opens any node. Control path only; thread-safe.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <string>
#include <string_view>

namespace bexd::block {

// A TLS credentials object, as QEMU's tls-creds-x509 and tls-creds-psk describe one: a directory
// holding the files under QEMU's names.
struct TlsCredentials {
  enum class Kind {
    kX509,  // ca-cert.pem (and ca-crl.pem); a client's own client-cert.pem and client-key.pem
    kPsk,   // keys.psk: lines of username:hex-key
  };
  Kind kind = Kind::kX509;
  std::string dir;          // absolute
  bool client = true;       // endpoint=client (server: for an NBD server, which bexd has not)
  bool verify_peer = true;  // x509: check the peer's certificate against ca-cert.pem
  std::string username;     // psk
  bool operator==(const TlsCredentials&) const = default;
};

// `value` is the secret's bytes (already decoded from base64 if it was given so).
absl::Status AddSecret(const std::string& id, std::string value);
// QEMU's errors: "No secret with id 'ID'", "Object with id 'ID' is not a secret".
absl::StatusOr<std::string> LookupSecret(std::string_view id);

absl::Status AddTlsCredentials(const std::string& id, TlsCredentials credentials);
// QEMU's errors: "No TLS credentials with id 'ID'", "Object with id 'ID' is not TLS credentials".
absl::StatusOr<TlsCredentials> LookupTlsCredentials(std::string_view id);

bool HasObject(std::string_view id);
// False if there was no such object.
bool RemoveObject(std::string_view id);

}  // namespace bexd::block
