#include "spill_store.hpp"

#include <fmt/format.h>

#include <filesystem>

#include <unistd.h>

#include "file_io.hpp"
#include "internal.hpp"
#include "weft/log.hpp"

namespace weft::detail {

ParkedKv::ParkedKv(Tier tier, std::vector<std::uint8_t> ram, std::string path, std::uint64_t size,
                   std::shared_ptr<SpillCounters> counters)
    : tier_(tier), ram_(std::move(ram)), path_(std::move(path)), size_(size), counters_(std::move(counters)) {
  if (tier_ == Tier::ram) {
    counters_->ram_bytes += size_;
    ++counters_->ram_blobs;
  } else {
    counters_->disk_bytes += size_;
    ++counters_->disk_blobs;
  }
}

ParkedKv::~ParkedKv() {
  if (tier_ == Tier::ram) {
    counters_->ram_bytes -= size_;
    --counters_->ram_blobs;
  } else {
    counters_->disk_bytes -= size_;
    --counters_->disk_blobs;
    ::unlink(path_.c_str());
  }
}

std::vector<std::uint8_t> ParkedKv::bytes() const {
  if (tier_ == Tier::ram) return ram_;
  auto out = read_file(path_, size_);
  if (out.size() != size_) {
    fail(Errc::corrupt, fmt::format("spill file '{}' has {} bytes, {} were written", path_, out.size(), size_));
  }
  return out;
}

SpillStore::SpillStore(SpillConfig config)
    : config_(std::move(config)), counters_(std::make_shared<SpillCounters>()) {
  if (!config_.disk_dir.empty()) {
    // A directory of our own: spill files never collide with another
    // executor's, and all go when the store does.
    static std::atomic<std::uint64_t> instance{0};
    dir_ = fmt::format("{}/weft-spill-{}-{}", config_.disk_dir, static_cast<long>(::getpid()), instance++);
  }
}

SpillStore::~SpillStore() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);  // files of blobs still held elsewhere go too
}

std::shared_ptr<ParkedKv> SpillStore::put(std::vector<std::uint8_t> bytes, std::uint64_t conv_id) {
  const std::uint64_t size = bytes.size();
  if (counters_->ram_bytes + size <= config_.ram_bytes) {
    return std::make_shared<ParkedKv>(Tier::ram, std::move(bytes), std::string(), size, counters_);
  }
  if (!dir_.empty() && counters_->disk_bytes + size <= config_.disk_bytes) {
    const std::string path = fmt::format("{}/conv-{}-{}.kv", dir_, conv_id, next_file_++);
    try {
      std::error_code ec;
      std::filesystem::create_directories(dir_, ec);
      if (ec) fail(Errc::io, fmt::format("cannot create spill directory '{}': {}", dir_, ec.message()));
      write_file_atomic(path, bytes);
      return std::make_shared<ParkedKv>(Tier::disk, std::vector<std::uint8_t>(), path, size, counters_);
    } catch (const Error &e) {
      // Degrade to the next tier (recompute), never lose the conversation.
      log_warning(fmt::format("spill to disk failed, conversation {} will be recomputed: {}", conv_id, e.what()));
    }
  }
  return nullptr;
}

}  // namespace weft::detail
