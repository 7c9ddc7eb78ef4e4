// SPDX-License-Identifier: GPL-2.0-or-later
// The refcount blocks the metadata engine has in memory, at most `capacity` of them, as raw
// on-disk bytes. Used only on the engine thread.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

namespace bexd::block::qcow2 {

class RefcountCache {
 public:
  struct Block {
    uint64_t table_index = 0;  // which refcount table entry it is
    uint64_t offset = 0;       // where it lives in the file
    std::unique_ptr<uint8_t[]> data;
    bool dirty = false;
    uint32_t writing = 0;
    bool used_since_clean = true;
  };

  RefcountCache(uint64_t block_bytes, uint32_t capacity)
      : block_bytes_(block_bytes), capacity_(capacity) {}

  Block* Find(uint64_t table_index);
  // Makes room for one more block if it can by dropping a clean, idle block; false when every
  // block is dirty or being written.
  bool MakeRoom();
  bool full() const { return blocks_.size() >= capacity_; }
  // Adds a block (after MakeRoom); `bytes` null: all zero.
  Block* Insert(uint64_t table_index, uint64_t offset, const uint8_t* bytes);
  std::vector<Block*> Dirty();
  // Drops clean, idle blocks not used since the last call (cache-clean-interval).
  void DropUnused();
  uint64_t block_bytes() const { return block_bytes_; }

 private:
  uint64_t block_bytes_;
  uint32_t capacity_;
  std::list<Block> blocks_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Block>::iterator> index_;
};

}  // namespace bexd::block::qcow2
