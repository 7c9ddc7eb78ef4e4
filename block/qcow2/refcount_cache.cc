// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/refcount_cache.h"

#include <cstring>

namespace bexd::block::qcow2 {

RefcountCache::Block* RefcountCache::Find(uint64_t table_index) {
  auto it = index_.find(table_index);
  if (it == index_.end()) return nullptr;
  blocks_.splice(blocks_.begin(), blocks_, it->second);
  it->second->used_since_clean = true;
  return &*it->second;
}

bool RefcountCache::MakeRoom() {
  if (blocks_.size() < capacity_) return true;
  for (auto it = blocks_.end(); it != blocks_.begin();) {
    --it;
    if (!it->dirty && it->writing == 0) {
      index_.erase(it->table_index);
      blocks_.erase(it);
      return true;
    }
  }
  return false;
}

RefcountCache::Block* RefcountCache::Insert(uint64_t table_index, uint64_t offset,
                                            const uint8_t* bytes) {
  Block block;
  block.table_index = table_index;
  block.offset = offset;
  block.data = std::make_unique<uint8_t[]>(block_bytes_);
  if (bytes != nullptr) {
    std::memcpy(block.data.get(), bytes, block_bytes_);
  } else {
    std::memset(block.data.get(), 0, block_bytes_);
  }
  blocks_.push_front(std::move(block));
  index_[table_index] = blocks_.begin();
  return &blocks_.front();
}

std::vector<RefcountCache::Block*> RefcountCache::Dirty() {
  std::vector<Block*> dirty;
  for (Block& block : blocks_) {
    if (block.dirty) dirty.push_back(&block);
  }
  return dirty;
}

void RefcountCache::DropUnused() {
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    if (!it->used_since_clean && !it->dirty && it->writing == 0) {
      index_.erase(it->table_index);
      it = blocks_.erase(it);
    } else {
      it->used_since_clean = false;
      ++it;
    }
  }
}

}  // namespace bexd::block::qcow2
