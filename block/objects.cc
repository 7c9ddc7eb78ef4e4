// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/objects.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <variant>

namespace bexd::block {
namespace {

using Object = std::variant<std::string, TlsCredentials>;  // a secret's value, or credentials

struct Store {
  std::mutex mutex;
  std::map<std::string, Object, std::less<>> objects;
};

Store& TheStore() {
  static Store store;
  return store;
}

absl::Status Add(const std::string& id, Object object) {
  Store& store = TheStore();
  std::lock_guard lock(store.mutex);
  if (!store.objects.emplace(id, std::move(object)).second) {
    return absl::AlreadyExistsError(fmt::format("an object with id '{}' exists already", id));
  }
  return absl::OkStatus();
}

// The object `id` if it is a T; `what` names T in QEMU's errors.
template <typename T>
absl::StatusOr<T> Lookup(std::string_view id, std::string_view what, std::string_view a_what) {
  Store& store = TheStore();
  std::lock_guard lock(store.mutex);
  auto found = store.objects.find(id);
  if (found == store.objects.end()) {
    return absl::NotFoundError(fmt::format("No {} with id '{}'", what, id));
  }
  if (const T* object = std::get_if<T>(&found->second)) return *object;
  return absl::InvalidArgumentError(fmt::format("Object with id '{}' is not {}", id, a_what));
}

}  // namespace

absl::Status AddSecret(const std::string& id, std::string value) {
  return Add(id, std::move(value));
}

absl::StatusOr<std::string> LookupSecret(std::string_view id) {
  return Lookup<std::string>(id, "secret", "a secret");
}

absl::Status AddTlsCredentials(const std::string& id, TlsCredentials credentials) {
  return Add(id, std::move(credentials));
}

absl::StatusOr<TlsCredentials> LookupTlsCredentials(std::string_view id) {
  return Lookup<TlsCredentials>(id, "TLS credentials", "TLS credentials");
}

bool HasObject(std::string_view id) {
  Store& store = TheStore();
  std::lock_guard lock(store.mutex);
  return store.objects.contains(id);
}

bool RemoveObject(std::string_view id) {
  Store& store = TheStore();
  std::lock_guard lock(store.mutex);
  auto found = store.objects.find(id);
  if (found == store.objects.end()) return false;
  store.objects.erase(found);
  return true;
}

}  // namespace bexd::block
