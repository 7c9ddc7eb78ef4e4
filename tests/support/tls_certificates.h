// SPDX-License-Identifier: GPL-2.0-or-later
// X.509 certificates for TLS tests, made with openssl: a CA of their own, a server certificate
// and a client certificate it signed, under QEMU's and nbdkit's file names.
#pragma once

#include <string>

namespace bexd::testing {

// Writes dir/server (ca-cert.pem, server-cert.pem, server-key.pem, as nbdkit --tls-certificates
// reads them) and dir/client (ca-cert.pem, client-cert.pem, client-key.pem, as QEMU's
// tls-creds-x509 reads them). The server's certificate is for `host` and 127.0.0.1. Empty on
// success, else openssl's output.
std::string MakeTlsCertificates(const std::string& dir, const std::string& host);

}  // namespace bexd::testing
