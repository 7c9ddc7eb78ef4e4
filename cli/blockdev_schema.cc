#include "cli/blockdev_schema.h"

#include "cli/names.h"
#include "cli/paths.h"

namespace bexd::cli {
namespace {

using block::AioMode;
using block::DiscardMode;
using block::LockingMode;

block::FileOptions ReadFileOptions(OptionReader& reader) {
  block::FileOptions file;
  reader.RequiredString("filename", &file.filename);
  if (reader.ok()) file.filename = AbsolutePath(file.filename);
  if (reader.Peek("aio") == "io_uring") {
    reader.Fail("aio", "io_uring is not supported by bexd; use native or threads");
  }
  reader.Enum("aio", &file.aio, {{"native", AioMode::kNative}, {"threads", AioMode::kThreads}});
  reader.Enum("locking", &file.locking,
              {{"auto", LockingMode::kAuto}, {"on", LockingMode::kOn}, {"off", LockingMode::kOff}});
  return file;
}

block::NullOptions ReadNullOptions(OptionReader& reader) {
  block::NullOptions null;
  reader.Size("size", &null.size);
  reader.Bool("read-zeroes", &null.read_zeroes);
  reader.Integer("latency-ns", &null.latency_ns);
  return null;
}

}  // namespace

absl::StatusOr<block::BlockdevOptions> ParseBlockdevOptions(const nlohmann::json& object,
                                                            Syntax syntax,
                                                            const std::string& path) {
  OptionReader reader(object, syntax, path);
  block::BlockdevOptions options;
  std::string driver;
  reader.RequiredString("driver", &driver);
  reader.RequiredString("node-name", &options.node_name);
  if (reader.ok()) {
    absl::Status name_status = CheckName(options.node_name);
    if (!name_status.ok()) reader.Fail("node-name", std::string(name_status.message()));
  }
  reader.Bool("read-only", &options.read_only);

  // QEMU accepts the cache and discard options for every driver; only `file` acts on them.
  bool cache_direct = false;
  bool cache_no_flush = false;
  DiscardMode discard = DiscardMode::kIgnore;
  OptionReader& cache = reader.Child("cache");
  cache.Bool("direct", &cache_direct);
  cache.Bool("no-flush", &cache_no_flush);
  reader.Enum("discard", &discard,
              {{"ignore", DiscardMode::kIgnore},
               {"off", DiscardMode::kIgnore},
               {"unmap", DiscardMode::kUnmap},
               {"on", DiscardMode::kUnmap}});

  if (driver == "file") {
    block::FileOptions file = ReadFileOptions(reader);
    file.cache_direct = cache_direct;
    file.cache_no_flush = cache_no_flush;
    file.discard = discard;
    options.driver = std::move(file);
  } else if (driver == "null-co" || driver == "null") {
    options.driver = ReadNullOptions(reader);
  } else if (reader.ok()) {
    reader.Fail("driver", "'" + driver + "' is not supported by bexd (supported: file, null-co)");
  }
  absl::Status status = reader.Finish();
  if (!status.ok()) return status;
  return options;
}

}  // namespace bexd::cli
