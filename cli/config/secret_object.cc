// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/config/secret_object.h"

#include <absl/strings/escaping.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cli/config/names.h"
#include "cli/config/paths.h"
#include "util/read_file.h"

namespace bexd::cli {
namespace {

// Far more than any key or passphrase; /dev/zero must not fill the memory.
constexpr uint64_t kMaxSecretBytes = 1 << 20;

// QEMU's qbase64_decode: the base64 alphabet and newlines only.
bool DecodeBase64(std::string text, std::string* bytes) {
  std::erase(text, '\n');
  const bool alphabet_only = std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=';
  });
  return alphabet_only && !text.empty() && text.size() % 4 == 0 &&
         absl::Base64Unescape(text, bytes);
}

}  // namespace

absl::StatusOr<SecretObject> ParseSecretObject(const nlohmann::json& object, Syntax syntax,
                                               const std::string& path) {
  OptionReader reader(object, syntax, path);
  SecretObject secret;
  std::string type;
  reader.RequiredString("qom-type", &type);
  ReadId(reader, &secret.id);
  for (const char* key : {"keyid", "iv"}) {
    if (reader.Value(key) != nullptr) {
      reader.Fail(key,
                  "encrypted secrets are not supported by bexd; give the secret in a file only "
                  "bexd's user can read (file=)");
    }
  }
  std::string format = "raw";
  reader.String("format", &format);
  if (reader.ok() && format != "raw" && format != "base64") {
    reader.Fail("format", "expected one of raw, base64; got " + OptionReader::Quote(format));
  }
  std::string text, file;
  reader.String("data", &text);
  reader.String("file", &file);
  if (reader.ok() && reader.Has("data") == reader.Has("file")) {
    reader.Fail(reader.Has("data") ? "file" : "data",
                reader.Has("data") ? "'data' and 'file' are mutually exclusive"
                                   : "either 'data' or 'file' must be given");
  }
  if (reader.ok() && reader.Has("file")) {
    file = AbsolutePath(file);
    absl::StatusOr<std::string> contents = util::ReadBoundedFile(file, kMaxSecretBytes);
    if (contents.ok()) {
      text = *std::move(contents);
    } else {
      reader.Fail("file", std::string(contents.status().message()));
    }
  }
  if (reader.ok() && format == "base64" && !DecodeBase64(text, &secret.value)) {
    reader.Fail(reader.Has("file") ? "file" : "data", "format=base64, but this is not base64 text");
  } else if (format == "raw") {
    secret.value = std::move(text);
  }
  std::fill(text.begin(), text.end(), '\0');
  absl::Status status = reader.Finish();
  if (!status.ok()) return status;
  return secret;
}

}  // namespace bexd::cli
