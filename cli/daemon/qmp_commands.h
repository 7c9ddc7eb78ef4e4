// SPDX-License-Identifier: GPL-2.0-or-later
// QMP's command layer: one parsed request in, one reply out; no sockets here. Commands take
// QSD's names and argument shapes (docs/control.md).
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "cli/daemon/daemon.h"

namespace bexd::cli {

// {"QMP":{"version":...,"capabilities":[]}}, sent when a client connects.
nlohmann::json QmpGreeting();
// {"event":NAME,"data":DATA,"timestamp":{"seconds":...,"microseconds":...}}
nlohmann::json QmpEvent(std::string_view name, nlohmann::json data);
// {"error":{"class":...,"desc":...}}
nlohmann::json QmpError(std::string_view error_class, std::string_view desc);

class QmpCommands {
 public:
  explicit QmpCommands(Daemon* daemon) : daemon_(daemon) {}

  // Runs `request` for a client whose capabilities negotiation state is `*negotiated` and
  // returns the reply, with the request's "id" echoed.
  nlohmann::json Handle(const nlohmann::json& request, bool* negotiated);
  // True once a client sent "quit".
  bool quit_requested() const { return quit_requested_; }

 private:
  nlohmann::json Execute(std::string_view command, const nlohmann::json& arguments,
                         bool* negotiated);

  Daemon* daemon_;
  bool quit_requested_ = false;
};

}  // namespace bexd::cli
