// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/tls_creds_object.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "cli/config/names.h"
#include "cli/config/paths.h"
#include "util/read_file.h"

namespace bexd::cli {
namespace {

using block::TlsCredentials;

// Empty if `path` can be read, else why not.
std::string Unreadable(const std::string& path) {
  return ::access(path.c_str(), R_OK) == 0 ? std::string() : std::strerror(errno);
}

// Far more than any list of pre-shared keys.
constexpr uint64_t kMaxKeysBytes = 1 << 20;

// The files a client's credentials need, as QEMU loads them when the object is created.
void CheckClientFiles(const TlsCredentials& credentials, OptionReader* reader) {
  const std::string& dir = credentials.dir;
  if (credentials.kind == TlsCredentials::Kind::kPsk) {
    const std::string keys = dir + "/keys.psk";
    // Bounded as a secret file is: a keys.psk that is /dev/zero must not fill the memory.
    absl::StatusOr<std::string> text = util::ReadBoundedFile(keys, kMaxKeysBytes);
    if (!text.ok()) {
      reader->Fail("dir", std::string(text.status().message()));
      return;
    }
    std::istringstream lines(*text);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with(credentials.username + ":")) return;
    }
    reader->Fail("dir", fmt::format("'{}' holds no key for username '{}' (lines username:hex-key)",
                                    keys, credentials.username));
    return;
  }
  if (credentials.verify_peer) {
    const std::string ca = dir + "/ca-cert.pem";
    if (std::string why = Unreadable(ca); !why.empty()) {
      reader->Fail("dir", fmt::format("cannot read '{}' (the CA that signs the server's "
                                      "certificate; verify-peer=on): {}",
                                      ca, why));
      return;
    }
  }
  const bool cert = Unreadable(dir + "/client-cert.pem").empty();
  const bool key = Unreadable(dir + "/client-key.pem").empty();
  if (cert != key) {
    reader->Fail("dir", fmt::format("'{}' holds {} but not {}: a client certificate needs both",
                                    dir, cert ? "client-cert.pem" : "client-key.pem",
                                    cert ? "client-key.pem" : "client-cert.pem"));
  }
}

}  // namespace

bool IsTlsCredsType(std::string_view qom_type) {
  return qom_type == "tls-creds-x509" || qom_type == "tls-creds-psk" ||
         qom_type == "tls-creds-anon";
}

absl::StatusOr<TlsCredsObject> ParseTlsCredsObject(const nlohmann::json& object, Syntax syntax,
                                                   const std::string& path) {
  OptionReader reader(object, syntax, path);
  TlsCredsObject creds;
  TlsCredentials& credentials = creds.credentials;
  std::string type;
  reader.RequiredString("qom-type", &type);
  ReadId(reader, &creds.id);
  if (reader.ok() && type == "tls-creds-anon") {
    reader.Fail("qom-type",
                "anonymous TLS (tls-creds-anon) is not supported by bexd: libnbd authenticates "
                "with X.509 certificates or a pre-shared key; use tls-creds-x509 or tls-creds-psk");
  }
  credentials.kind =
      type == "tls-creds-psk" ? TlsCredentials::Kind::kPsk : TlsCredentials::Kind::kX509;
  reader.RequiredString("dir", &credentials.dir);
  if (reader.ok()) credentials.dir = AbsolutePath(credentials.dir);
  reader.Enum("endpoint", &credentials.client, {{"client", true}, {"server", false}});
  reader.Bool("verify-peer", &credentials.verify_peer);
  if (credentials.kind == TlsCredentials::Kind::kPsk) {
    credentials.username = "qemu";
    reader.String("username", &credentials.username);
  } else {
    bool ignored = true;
    reader.Bool("sanity-check", &ignored);  // bexd checks the files it needs below
    reader.Bool("loaded", &ignored);        // QEMU's deprecated property
    if (reader.Value("passwordid") != nullptr) {
      reader.Fail("passwordid",
                  "encrypted private keys are not supported by bexd (libnbd reads "
                  "client-key.pem unencrypted); keep the key readable only by bexd's user");
    }
  }
  if (reader.Value("priority") != nullptr) {
    reader.Fail("priority",
                "not supported by bexd: libnbd uses GnuTLS's default priority (change it "
                "system-wide in GnuTLS's configuration)");
  }
  if (reader.ok() && credentials.client) CheckClientFiles(credentials, &reader);
  absl::Status status = reader.Finish();
  if (!status.ok()) return status;
  return creds;
}

}  // namespace bexd::cli
