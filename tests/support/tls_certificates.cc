// SPDX-License-Identifier: GPL-2.0-or-later
#include "tests/support/tls_certificates.h"

#include <fstream>

#include "tests/support/run_command.h"

namespace bexd::testing {

std::string MakeTlsCertificates(const std::string& dir, const std::string& host) {
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
  const std::string sign =
      "openssl x509 -req -days 2 -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial ";
  int status = 0;
  std::string output = RunCommand(
      "set -e; mkdir -p " + dir + "/server " + dir + "/client && cd " + dir +
          " && printf 'subjectAltName=DNS:" + host +
          ",IP:127.0.0.1\\n' > server.ext"
          " && openssl req -x509 -days 2 " +
          key + "-keyout ca-key.pem -out ca-cert.pem -subj /CN=bexd-test-ca 2>&1 && openssl req " +
          key + "-keyout server/server-key.pem -out server.csr -subj /CN=" + host + " 2>&1 && " +
          sign + "-in server.csr -out server/server-cert.pem -extfile server.ext 2>&1" +
          " && openssl req " + key +
          "-keyout client/client-key.pem -out client.csr -subj /CN=bexd-test-client 2>&1 && " +
          sign + "-in client.csr -out client/client-cert.pem 2>&1" +
          " && cp ca-cert.pem server/ && cp ca-cert.pem client/",
      &status);
  return status == 0 ? std::string() : output.empty() ? "openssl failed" : output;
}

}  // namespace bexd::testing
