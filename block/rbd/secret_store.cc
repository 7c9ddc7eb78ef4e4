// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/rbd/secret_store.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

namespace bexd::block {
namespace {

struct Store {
  std::mutex mutex;
  std::map<std::string, std::string, std::less<>> secrets;
};

Store& TheStore() {
  static Store store;
  return store;
}

}  // namespace

absl::Status AddSecret(const std::string& id, std::string value) {
  Store& store = TheStore();
  std::lock_guard lock(store.mutex);
  if (!store.secrets.emplace(id, std::move(value)).second) {
    return absl::AlreadyExistsError(fmt::format("a secret with id '{}' exists already", id));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LookupSecret(std::string_view id) {
  Store& store = TheStore();
  std::lock_guard lock(store.mutex);
  auto found = store.secrets.find(id);
  if (found == store.secrets.end()) {
    return absl::NotFoundError(fmt::format("No secret with id '{}'", id));
  }
  return found->second;
}

void RemoveSecret(std::string_view id) {
  Store& store = TheStore();
  std::lock_guard lock(store.mutex);
  if (auto found = store.secrets.find(id); found != store.secrets.end()) {
    store.secrets.erase(found);
  }
}

}  // namespace bexd::block
