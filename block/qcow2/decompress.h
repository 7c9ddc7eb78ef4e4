// SPDX-License-Identifier: GPL-2.0-or-later
// Decompression of compressed clusters: raw deflate (zlib, window 2^12) or zstd, as QEMU writes
// them. The compressed bytes are untrusted; a stream that does not produce exactly one cluster is
// an error, never a read or write past a buffer.
#pragma once

#include <cstddef>
#include <cstdint>

typedef struct ZSTD_DCtx_s ZSTD_DCtx;
struct z_stream_s;

namespace bexd::block::qcow2 {

class Decompressor {
 public:
  // `type` is the header's compression_type (kCompressionZlib or kCompressionZstd).
  explicit Decompressor(uint8_t type);
  ~Decompressor();
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // Fills exactly `out_size` bytes of `out` from `in` (which may hold trailing bytes); false if the
  // data is malformed, too short or the decoder could not be set up.
  bool Decompress(const uint8_t* in, size_t in_size, uint8_t* out, size_t out_size);

 private:
  bool Inflate(const uint8_t* in, size_t in_size, uint8_t* out, size_t out_size);
  bool Unzstd(const uint8_t* in, size_t in_size, uint8_t* out, size_t out_size);

  uint8_t type_;
  z_stream_s* zlib_ = nullptr;
  ZSTD_DCtx* zstd_ = nullptr;
};

}  // namespace bexd::block::qcow2
