// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuse/scatter_gather.h"

#include <algorithm>
#include <cstdint>

namespace bexd::fuse {

bool TotalBytes(const struct iovec* iov, int count, size_t* total) {
  *total = 0;
  if (count < 0 || (count > 0 && iov == nullptr)) return false;
  size_t sum = 0;
  for (int i = 0; i < count; ++i) {
    if (iov[i].iov_len > SIZE_MAX - sum) return false;
    sum += iov[i].iov_len;
  }
  *total = sum;
  return true;
}

template <typename Fn>
void BufferCursor::Walk(size_t n, Fn&& fn) {
  n = std::min(n, remaining_);
  remaining_ -= n;
  while (n > 0) {
    const size_t piece = std::min(n, iov_->iov_len - within_);
    if (piece > 0) fn(static_cast<unsigned char*>(iov_->iov_base) + within_, piece);
    n -= piece;
    within_ += piece;
    if (within_ == iov_->iov_len) {
      ++iov_;
      within_ = 0;
    }
  }
}

bool BufferCursor::Skip(size_t n) {
  if (n > remaining_) return false;
  Walk(n, [](unsigned char*, size_t) {});
  return true;
}

BufferCursor BufferCursor::Split(size_t n) {
  BufferCursor front = *this;
  front.Limit(n);
  Skip(std::min(n, remaining_));
  return front;
}

int BufferCursor::SplitIovecs(size_t n, struct iovec* window, int capacity) {
  if (n > remaining_) return -1;
  int used = 0;
  BufferCursor rest = *this;
  bool fits = true;
  rest.Walk(n, [&](unsigned char* piece, size_t length) {
    if (used == capacity) {
      fits = false;
      return;
    }
    window[used++] = {piece, length};
  });
  if (!fits) return -1;
  *this = rest;
  return used;
}

void BufferCursor::CopyOut(void* destination, size_t n) {
  auto* to = static_cast<unsigned char*>(destination);
  Walk(n, [&to](unsigned char* piece, size_t length) {
    std::memcpy(to, piece, length);
    to += length;
  });
}

void BufferCursor::CopyIn(const void* source, size_t n) {
  const auto* from = static_cast<const unsigned char*>(source);
  Walk(n, [&from](unsigned char* piece, size_t length) {
    std::memcpy(piece, from, length);
    from += length;
  });
}

void Reader::ReadBytes(void* destination, size_t n) {
  cursor_.CopyOut(destination, std::min(n, cursor_.remaining()));
}

bool Writer::SplitAt(size_t n, Writer* rest) {
  if (n > cursor_.remaining()) return false;
  BufferCursor front = cursor_.Split(n);
  *rest = Writer(cursor_);
  cursor_ = front;
  return true;
}

bool Writer::Write(const void* source, size_t n) {
  if (n > cursor_.remaining()) return false;
  cursor_.CopyIn(source, n);
  return true;
}

}  // namespace bexd::fuse
