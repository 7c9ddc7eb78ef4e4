// SPDX-License-Identifier: GPL-2.0-or-later
#include "cli/daemon/qmp_schema.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bexd::cli {
namespace {

using nlohmann::json;

struct Member {
  std::string_view name;
  std::string_view type;
  bool optional = false;
};

struct ObjectType {
  std::string_view name;
  std::vector<Member> members;
};

struct Entry {
  std::string_view name;
  std::string_view meta_type;  // "command" or "event"
  std::string_view arg_type;
  std::string_view ret_type;  // commands only
};

// Type names are opaque in QEMU's introspection (it numbers them); these say what they are.
// The options of blockdev-add and block-export-add are unions in QEMU; their discriminator is
// listed, and the rest is what docs/usage.md describes.
const std::vector<ObjectType>& Objects() {
  static const auto* objects = new std::vector<ObjectType>{
      {"q_empty", {}},
      {"q_obj_qmp_capabilities-arg", {{"enable", "[str]", true}}},
      {"BlockdevOptions", {{"driver", "str"}, {"node-name", "str", true}}},
      {"q_obj_blockdev-del-arg", {{"node-name", "str"}}},
      {"q_obj_query-named-block-nodes-arg", {{"flat", "bool", true}}},
      {"BlockExportOptions",
       {{"type", "str"},
        {"id", "str"},
        {"node-name", "str"},
        {"writable", "bool", true},
        {"iothread", "any", true}}},
      {"q_obj_block-export-del-arg", {{"id", "str"}, {"mode", "str", true}}},
      {"BlockExportInfo",
       {{"id", "str"}, {"type", "str"}, {"node-name", "str"}, {"shutting-down", "bool"}}},
      {"q_obj_x-query-export-stats-arg", {{"id", "str", true}}},
      {"VersionTriple", {{"major", "int"}, {"minor", "int"}, {"micro", "int"}}},
      {"VersionInfo", {{"qemu", "VersionTriple"}, {"package", "str"}}},
      {"CommandInfo", {{"name", "str"}}},
      {"ObjectOptions", {{"qom-type", "str"}, {"id", "str"}}},
      {"q_obj_object-del-arg", {{"id", "str"}}},
      {"IOThreadInfo",
       {{"id", "str"},
        {"thread-id", "int"},
        {"poll-max-ns", "int"},
        {"poll-grow", "int"},
        {"poll-shrink", "int"},
        {"aio-max-batch", "int"}}},
      {"q_obj_block_resize-arg",
       {{"device", "str", true}, {"node-name", "str", true}, {"size", "int"}}},
      {"q_obj_BLOCK_EXPORT_DELETED-arg", {{"id", "str"}}},
      {"q_obj_SHUTDOWN-arg", {{"guest", "bool"}, {"reason", "str"}}},
  };
  return *objects;
}

const std::vector<Entry>& Entries() {
  static const auto* entries = new std::vector<Entry>{
      {"qmp_capabilities", "command", "q_obj_qmp_capabilities-arg", "q_empty"},
      {"quit", "command", "q_empty", "q_empty"},
      {"query-commands", "command", "q_empty", "[CommandInfo]"},
      {"query-qmp-schema", "command", "q_empty", "[any]"},
      {"query-version", "command", "q_empty", "VersionInfo"},
      {"blockdev-add", "command", "BlockdevOptions", "q_empty"},
      {"blockdev-del", "command", "q_obj_blockdev-del-arg", "q_empty"},
      {"query-named-block-nodes", "command", "q_obj_query-named-block-nodes-arg", "[any]"},
      {"block_resize", "command", "q_obj_block_resize-arg", "q_empty"},
      {"block-resize", "command", "q_obj_block_resize-arg", "q_empty"},
      {"block-export-add", "command", "BlockExportOptions", "q_empty"},
      {"block-export-del", "command", "q_obj_block-export-del-arg", "q_empty"},
      {"query-block-exports", "command", "q_empty", "[BlockExportInfo]"},
      {"x-query-export-stats", "command", "q_obj_x-query-export-stats-arg", "[any]"},
      {"object-add", "command", "ObjectOptions", "q_empty"},
      {"object-del", "command", "q_obj_object-del-arg", "q_empty"},
      {"query-iothreads", "command", "q_empty", "[IOThreadInfo]"},
      {"query-block", "command", "q_empty", "[any]"},
      {"query-jobs", "command", "q_empty", "[any]"},
      {"query-block-jobs", "command", "q_empty", "[any]"},
      {"BLOCK_EXPORT_DELETED", "event", "q_obj_BLOCK_EXPORT_DELETED-arg", ""},
      {"SHUTDOWN", "event", "q_obj_SHUTDOWN-arg", ""},
  };
  return *entries;
}

}  // namespace

json QmpSchema() {
  json schema = json::array();
  for (const Entry& entry : Entries()) {
    json info = {
        {"name", entry.name}, {"meta-type", entry.meta_type}, {"arg-type", entry.arg_type}};
    if (entry.meta_type == "command") info["ret-type"] = entry.ret_type;
    schema.push_back(std::move(info));
  }
  for (const ObjectType& object : Objects()) {
    json members = json::array();
    for (const Member& member : object.members) {
      json entry = {{"name", member.name}, {"type", member.type}};
      // QEMU marks an optional member with "default": null.
      if (member.optional) entry["default"] = nullptr;
      members.push_back(std::move(entry));
    }
    schema.push_back({{"name", object.name}, {"meta-type", "object"}, {"members", members}});
  }
  for (std::string_view element :
       {"str", "CommandInfo", "any", "BlockExportInfo", "IOThreadInfo"}) {
    schema.push_back({{"name", "[" + std::string(element) + "]"},
                      {"meta-type", "array"},
                      {"element-type", element}});
  }
  static constexpr std::pair<std::string_view, std::string_view> kBuiltins[] = {
      {"str", "string"}, {"int", "int"}, {"bool", "boolean"}, {"any", "value"}, {"null", "null"}};
  for (const auto& [name, json_type] : kBuiltins) {
    schema.push_back({{"name", name}, {"meta-type", "builtin"}, {"json-type", json_type}});
  }
  return schema;
}

}  // namespace bexd::cli
