// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/iov_util.h"

#include <cstring>

namespace bexd::block {

IovCursor::IovCursor(const struct iovec* iov, int iovcnt, uint64_t position)
    : iov_(iov), iovcnt_(iovcnt) {
  while (index_ < iovcnt_ && position >= iov_[index_].iov_len) {
    position -= iov_[index_].iov_len;
    ++index_;
  }
  within_ = position;
}

template <typename Fn>
void IovCursor::Walk(size_t n, Fn&& fn) {
  size_t done = 0;
  while (done < n && index_ < iovcnt_) {
    size_t chunk = iov_[index_].iov_len - within_;
    if (chunk > n - done) chunk = n - done;
    fn(static_cast<char*>(iov_[index_].iov_base) + within_, done, chunk);
    done += chunk;
    within_ += chunk;
    if (within_ == iov_[index_].iov_len) {
      ++index_;
      within_ = 0;
    }
  }
}

void IovCursor::CopyOut(void* dst, size_t n) {
  Walk(n, [dst](char* segment, size_t done, size_t chunk) {
    std::memcpy(static_cast<char*>(dst) + done, segment, chunk);
  });
}

void IovCursor::CopyIn(const void* src, size_t n) {
  Walk(n, [src](char* segment, size_t done, size_t chunk) {
    std::memcpy(segment, static_cast<const char*>(src) + done, chunk);
  });
}

void IovCursor::Zero(size_t n) {
  Walk(n, [](char* segment, size_t, size_t chunk) { std::memset(segment, 0, chunk); });
}

void ZeroIovFrom(const struct iovec* iov, int iovcnt, uint64_t position) {
  for (int i = 0; i < iovcnt; ++i) {
    if (position >= iov[i].iov_len) {
      position -= iov[i].iov_len;
      continue;
    }
    std::memset(static_cast<char*>(iov[i].iov_base) + position, 0, iov[i].iov_len - position);
    position = 0;
  }
}

int SliceIov(const struct iovec* iov, int iovcnt, uint64_t position, struct iovec* out) {
  int count = 0;
  for (int i = 0; i < iovcnt; ++i) {
    if (position >= iov[i].iov_len) {
      position -= iov[i].iov_len;
      continue;
    }
    out[count].iov_base = static_cast<char*>(iov[i].iov_base) + position;
    out[count].iov_len = iov[i].iov_len - position;
    ++count;
    position = 0;
  }
  return count;
}

}  // namespace bexd::block
