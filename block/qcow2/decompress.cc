// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/decompress.h"

#include <zlib.h>
#include <zstd.h>

#include "block/qcow2/format.h"

namespace bexd::block::qcow2 {
namespace {

// QEMU deflates with a 4 KiB window and no zlib header.
constexpr int kDeflateWindowBits = -12;
// The largest cluster is 2 MiB; a frame asking for a window far beyond that is not one QEMU wrote
// and is refused rather than allowed to make the decoder allocate it.
constexpr int kZstdWindowLogMax = 23;

}  // namespace

Decompressor::Decompressor(uint8_t type) : type_(type) {
  if (type_ == kCompressionZstd) {
    zstd_ = ZSTD_createDCtx();
    if (zstd_ != nullptr) ZSTD_DCtx_setParameter(zstd_, ZSTD_d_windowLogMax, kZstdWindowLogMax);
  } else {
    zlib_ = new z_stream();
    if (inflateInit2(zlib_, kDeflateWindowBits) != Z_OK) {
      delete zlib_;
      zlib_ = nullptr;
    }
  }
}

Decompressor::~Decompressor() {
  if (zlib_ != nullptr) {
    inflateEnd(zlib_);
    delete zlib_;
  }
  if (zstd_ != nullptr) ZSTD_freeDCtx(zstd_);
}

bool Decompressor::Decompress(const uint8_t* in, size_t in_size, uint8_t* out, size_t out_size) {
  return type_ == kCompressionZstd ? Unzstd(in, in_size, out, out_size)
                                   : Inflate(in, in_size, out, out_size);
}

bool Decompressor::Inflate(const uint8_t* in, size_t in_size, uint8_t* out, size_t out_size) {
  if (zlib_ == nullptr || inflateReset(zlib_) != Z_OK) return false;
  zlib_->next_in = const_cast<Bytef*>(in);
  zlib_->avail_in = static_cast<uInt>(in_size);
  zlib_->next_out = out;
  zlib_->avail_out = static_cast<uInt>(out_size);
  int result = inflate(zlib_, Z_FINISH);
  // The compressed size is known only to the sector, so the stream may stop before the input
  // does (Z_STREAM_END) or the cluster may fill up first (Z_BUF_ERROR): both are fine once the
  // whole cluster is produced.
  return (result == Z_STREAM_END || result == Z_BUF_ERROR) && zlib_->avail_out == 0;
}

bool Decompressor::Unzstd(const uint8_t* in, size_t in_size, uint8_t* out, size_t out_size) {
  if (zstd_ == nullptr) return false;
  ZSTD_DCtx_reset(zstd_, ZSTD_reset_session_only);
  ZSTD_inBuffer input = {in, in_size, 0};
  ZSTD_outBuffer output = {out, out_size, 0};
  // The data may be several frames; decode until the cluster is full.
  while (output.pos < output.size) {
    size_t before = input.pos + output.pos;
    size_t result = ZSTD_decompressStream(zstd_, &output, &input);
    if (ZSTD_isError(result)) return false;
    if (input.pos + output.pos == before) return false;  // no progress: the input ran out
  }
  return true;
}

}  // namespace bexd::block::qcow2
