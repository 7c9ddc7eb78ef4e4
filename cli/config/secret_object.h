// SPDX-License-Identifier: GPL-2.0-or-later
// --object secret: QEMU's secret object, which options such as rbd's key-secret name by id so
// that the secret itself stays off the command line.
#pragma once

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli/config/option_reader.h"

namespace bexd::cli {

struct SecretObject {
  std::string id;
  std::string value;  // the secret's bytes, decoded if format=base64
};

// --object secret,id=ID,file=PATH|data=TEXT[,format=raw|base64], as QEMU: exactly one of file
// (read now, byte for byte) and data; with format=base64 the text is decoded (newlines in it
// are ignored). QEMU's encrypted form (keyid, iv) is refused.
absl::StatusOr<SecretObject> ParseSecretObject(const nlohmann::json& object, Syntax syntax,
                                               const std::string& path = "");

}  // namespace bexd::cli
