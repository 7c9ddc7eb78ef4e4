// SPDX-License-Identifier: GPL-2.0-or-later
#include "block/qcow2/node.h"

#include <fmt/format.h>

#include "block/qcow2/cache_sizes.h"
#include "block/qcow2/engine.h"
#include "block/qcow2/image_loader.h"
#include "block/qcow2/image_state.h"
#include "block/qcow2/queue.h"
#include "block/qcow2/sync_io.h"
#include "util/log.h"

namespace bexd::block::qcow2 {
namespace {

absl::Status Named(const absl::Status& status, const std::string& node_name, BlockNode& file) {
  // A backing file's header is read before its node has a name; the caller names it.
  const std::string prefix = node_name.empty() ? "" : fmt::format("node '{}': ", node_name);
  return absl::Status(status.code(),
                      fmt::format("{}{} (qcow2 image on {})", prefix, std::string(status.message()),
                                  file.description()));
}

Qcow2ImageInfo InfoOf(const ImageHeader& header) {
  Qcow2ImageInfo info;
  info.version = header.version;
  info.virtual_size = header.size;
  info.cluster_size = header.geometry.cluster_size;
  info.backing_file = header.backing_file;
  info.backing_format = header.backing_format;
  info.refcount_bits = 1u << header.geometry.refcount_order;
  info.extended_l2 = header.geometry.extended_l2;
  info.lazy_refcounts = (header.compatible_features & kCompatLazyRefcounts) != 0;
  info.compression_type = header.compression_type == kCompressionZstd ? "zstd" : "zlib";
  return info;
}

}  // namespace

absl::StatusOr<Qcow2ImageInfo> ReadQcow2ImageInfo(const std::string& node_name, BlockNode& file) {
  auto io = SyncIo::Create(file);
  if (!io.ok()) return Named(io.status(), node_name, file);
  auto header = ReadImageHeader(**io, file.size());
  if (!header.ok()) return Named(header.status(), node_name, file);
  return InfoOf(*header);
}

Qcow2Node::Qcow2Node(std::string node_name, Qcow2ImageInfo info)
    : BlockNode(std::move(node_name)), info_(std::move(info)) {}

absl::StatusOr<std::shared_ptr<Qcow2Node>> Qcow2Node::Open(std::string node_name,
                                                           const Qcow2Options& options,
                                                           bool read_only,
                                                           std::shared_ptr<BlockNode> file,
                                                           std::shared_ptr<BlockNode> backing) {
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("node '{}': the qcow2 driver needs a file child", node_name));
  }
  if (!read_only && file->read_only()) {
    return absl::FailedPreconditionError(
        fmt::format("node '{}': cannot open the image writable: its file child '{}' is read-only",
                    node_name, file->node_name()));
  }
  auto io = SyncIo::Create(*file);
  if (!io.ok()) return Named(io.status(), node_name, *file);
  auto loaded = LoadImage(**io, *file, !read_only, node_name);
  if (!loaded.ok()) return Named(loaded.status(), node_name, *file);
  io->reset();
  const ImageHeader& header = loaded->engine.header;
  bool lazy =
      options.lazy_refcounts.value_or((header.compatible_features & kCompatLazyRefcounts) != 0);
  if (lazy && header.version < 3) {
    return Named(absl::InvalidArgumentError(
                     "lazy refcounts need a version 3 image (qemu-img amend -o compat=1.1)"),
                 node_name, *file);
  }
  auto sizes = ComputeCacheSizes(options, header.geometry, header.size);
  if (!sizes.ok()) return Named(sizes.status(), node_name, *file);

  auto image = std::make_unique<ImageState>();
  image->node_name = node_name;
  image->geometry = header.geometry;
  image->version = header.version;
  image->compression_type = header.compression_type;
  image->read_only = read_only;
  image->discard = options.discard;
  image->pass_discard_request =
      options.pass_discard_request.value_or(options.discard == DiscardMode::kUnmap);
  image->pass_discard_other = options.pass_discard_other;
  image->file = std::move(file);
  image->backing = std::move(backing);
  image->size.store(header.size);
  auto tables = TableCache::Create(header.geometry, sizes->l2_tables);
  if (!tables.ok()) return Named(tables.status(), node_name, *image->file);
  image->tables = std::move(*tables);
  const std::vector<uint64_t>& mirror = loaded->l1_mirror;
  for (uint64_t i = 0; i < mirror.size(); ++i) image->tables->set_l1_entry(i, mirror[i]);
  image->tables->set_l1_size(mirror.size());

  Engine::Config config;
  config.lazy_refcounts = lazy && !read_only;
  config.refcount_cache_blocks = sizes->refcount_blocks;
  config.cache_clean_interval_s = options.cache_clean_interval;
  Qcow2ImageInfo info = InfoOf(header);
  auto engine = Engine::Start(image.get(), config, std::move(loaded->engine));
  if (!engine.ok()) return Named(engine.status(), node_name, *image->file);
  std::shared_ptr<Qcow2Node> node(new Qcow2Node(node_name, std::move(info)));
  node->image_ = std::move(image);
  node->engine_ = std::move(*engine);
  log::Debug("node '{}': {}", node->node_name(), node->description());
  return node;
}

Qcow2Node::~Qcow2Node() {
  absl::Status status = Close();
  if (!status.ok()) log::Error("{}", std::string(status.message()));
}

absl::Status Qcow2Node::Close() {
  if (closed_) return absl::OkStatus();
  if (image_->user_queues.load() != 0) {
    return absl::FailedPreconditionError(
        fmt::format("node '{}': cannot close the image while it has I/O queues", node_name()));
  }
  closed_ = true;
  absl::Status status = engine_->Close();
  engine_.reset();
  return status;
}

uint64_t Qcow2Node::size() const { return image_->size.load(std::memory_order_acquire); }

bool Qcow2Node::read_only() const { return image_->read_only; }

uint32_t Qcow2Node::request_alignment() const { return image_->file->request_alignment(); }

Capabilities Qcow2Node::capabilities() const {
  Capabilities capabilities;
  const bool writable = !read_only();
  // discard=unmap frees clusters whatever the file child can do with them.
  capabilities.discard = writable && image_->discard == DiscardMode::kUnmap;
  // Zero flags (v3) or written zeroes (v2); block status from the L2 tables; FUA served by the
  // driver (metadata changes first, then the data).
  capabilities.write_zeroes = writable;
  capabilities.block_status = true;
  capabilities.fua = true;
  // Flush writes the metadata caches back, which only a flush or close does, so it is needed even
  // when the file child gave durability up (cache.no-flush).
  capabilities.flush = writable;
  // Reserving clusters without writing them would need copy-on-write from the backing file (as
  // QEMU, no).
  capabilities.allocate = false;
  // Shrinking frees the clusters past the new end; a version 2 image with internal snapshots
  // refuses any resize (Truncate says why). The header keeps QEMU's rule of sizes in whole sectors.
  capabilities.resize = writable;
  capabilities.size_alignment = kSizeAlignment;
  return capabilities;
}

bool Qcow2Node::corrupt() const { return image_->corrupt.load(std::memory_order_acquire); }

bool Qcow2Node::dirty() const { return engine_ != nullptr && engine_->image_dirty(); }

const std::shared_ptr<BlockNode>& Qcow2Node::file() const { return image_->file; }

const std::shared_ptr<BlockNode>& Qcow2Node::backing() const { return image_->backing; }

absl::Status Qcow2Node::Truncate(uint64_t new_size) {
  if (closed_) {
    return absl::FailedPreconditionError(
        fmt::format("node '{}': the image is closed", node_name()));
  }
  return engine_->Resize(new_size);
}

absl::StatusOr<std::unique_ptr<IoQueue>> Qcow2Node::CreateDriverQueue() {
  if (closed_) {
    return absl::FailedPreconditionError(
        fmt::format("node '{}': the image is closed", node_name()));
  }
  auto queue = Qcow2Queue::Create(image_.get(), shared_from_this());
  if (!queue.ok()) return queue.status();
  return std::unique_ptr<IoQueue>(std::move(*queue));
}

std::string Qcow2Node::description() const {
  std::string text = fmt::format("qcow2 v{} ({} bytes, {}-byte clusters, {}) on '{}'",
                                 info_.version, size(), info_.cluster_size,
                                 read_only() ? "read-only" : "writable", image_->file->node_name());
  if (image_->backing != nullptr) {
    text += fmt::format(", backing '{}'", image_->backing->node_name());
  }
  return text;
}

}  // namespace bexd::block::qcow2
