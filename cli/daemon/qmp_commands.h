// SPDX-License-Identifier: GPL-2.0-or-later
// QMP's command layer: one parsed request in, one reply out; no sockets here. Commands take
// QSD's names and argument shapes (docs/control.md).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string_view>

#include "cli/daemon/daemon.h"

namespace bexd::cli {

// The QSD interface level bexd follows, as the greeting's and query-version's "qemu" triple
// (docs/control.md): the QEMU release whose storage daemon options, commands and events bexd
// was checked against.
inline constexpr int kQemuLevel[3] = {10, 1, 0};

// {"QMP":{"version":...,"capabilities":[]}}, sent when a client connects. No "oob": bexd runs
// every command in order on one thread.
nlohmann::json QmpGreeting();
// {"event":NAME,"data":DATA,"timestamp":{"seconds":...,"microseconds":...}}
nlohmann::json QmpEvent(std::string_view name, nlohmann::json data);
// {"error":{"class":...,"desc":...}}
nlohmann::json QmpError(std::string_view error_class, std::string_view desc);

class QmpCommands {
 public:
  // Run for "quit" before its reply is made, so the events it causes come first (QSD's order:
  // SHUTDOWN, then BLOCK_EXPORT_DELETED per export, then the reply).
  using QuitFn = std::function<void()>;

  explicit QmpCommands(Daemon* daemon) : daemon_(daemon) {}
  void set_quit_callback(QuitFn on_quit) { on_quit_ = std::move(on_quit); }

  // Runs `request` for a client whose capabilities negotiation state is `*negotiated` and
  // returns the reply, with the request's "id" echoed.
  nlohmann::json Handle(const nlohmann::json& request, bool* negotiated);
  // True once a client sent "quit".
  bool quit_requested() const { return quit_requested_; }

 private:
  nlohmann::json Execute(std::string_view command, const nlohmann::json& arguments,
                         bool* negotiated);

  Daemon* daemon_;
  QuitFn on_quit_;
  bool quit_requested_ = false;
};

}  // namespace bexd::cli
