#include "kv/spill_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/file_io.hpp"
#include "core/internal.hpp"
#include "weft/log.hpp"

namespace weft::detail {

std::vector<std::uint8_t> BufferPool::take(std::size_t size) {
  {
    std::lock_guard lock(mu_);
    // Best fit: the smallest buffer whose capacity holds `size`.
    std::size_t best = free_.size();
    for (std::size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity() >= size && (best == free_.size() || free_[i].capacity() < free_[best].capacity())) {
        best = i;
      }
    }
    if (best != free_.size()) {
      std::vector<std::uint8_t> out = std::move(free_[best]);
      free_[best] = std::move(free_.back());
      free_.pop_back();
      bytes_ -= out.capacity();
      max_seen_ = std::max<std::uint64_t>(max_seen_, size);
      out.resize(size);  // within capacity: no reallocation; zero-fills only what it grows by
      return out;
    }
  }
  // Spare capacity, so that a later, longer blob can reuse it (a conversation
  // parked again has usually grown): twice `size`, or a quarter more than the
  // largest blob seen so far if that is more, up to 4x `size`. Reserved, not
  // touched: the spare pages cost address space, not memory, until used.
  std::size_t cap = 2 * size;
  {
    std::lock_guard lock(mu_);
    max_seen_ = std::max<std::uint64_t>(max_seen_, size);
    cap = std::max<std::size_t>(cap, std::min<std::uint64_t>(max_seen_ + max_seen_ / 4, std::uint64_t{size} * 4));
  }
  std::vector<std::uint8_t> out;
  out.reserve(cap);
  out.resize(size);
  return out;
}

void BufferPool::give(std::vector<std::uint8_t> &&buffer) noexcept {
  const std::uint64_t cap = buffer.capacity();
  if (cap == 0 || cap > max_bytes_) return;
  std::lock_guard lock(mu_);
  while (!free_.empty() && (free_.size() >= kMaxBuffers || bytes_ + cap > max_bytes_)) {
    // Full: drop the smallest kept buffer if this one is bigger, else this one.
    std::size_t smallest = 0;
    for (std::size_t i = 1; i < free_.size(); ++i) {
      if (free_[i].capacity() < free_[smallest].capacity()) smallest = i;
    }
    if (free_[smallest].capacity() >= cap) return;
    bytes_ -= free_[smallest].capacity();
    free_[smallest] = std::move(free_.back());
    free_.pop_back();
  }
  try {
    free_.push_back(std::move(buffer));
    bytes_ += cap;
  } catch (...) {
    // Out of memory for the list itself: let the buffer go.
  }
}

std::uint64_t BufferPool::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

ParkedKv::ParkedKv(Tier tier, std::vector<std::uint8_t> ram, std::string path, std::uint64_t size,
                   std::shared_ptr<SpillCounters> counters, std::shared_ptr<BufferPool> pool)
    : tier_(tier),
      ram_(std::move(ram)),
      path_(std::move(path)),
      size_(size),
      counters_(std::move(counters)),
      pool_(std::move(pool)) {
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
    if (pool_) pool_->give(std::move(ram_));
  } else {
    counters_->disk_bytes -= size_;
    --counters_->disk_blobs;
    remove_file_quietly(path_);
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
    : config_(std::move(config)), counters_(std::make_shared<SpillCounters>()), 
      // A quarter of the RAM tier, at least 16 MiB, at most 256 MiB: held
      // on top of ram_bytes (stats().ram_bytes counts only parked blobs).
      pool_(std::make_shared<BufferPool>(
          std::clamp<std::uint64_t>(config_.ram_bytes / 4, std::uint64_t{16} << 20, std::uint64_t{256} << 20))) {
  if (!config_.disk_dir.empty()) {
    // A directory of our own: spill files never collide with another
    // executor's, and all go when the store does.
    static std::atomic<std::uint64_t> instance{0};
    dir_ = fmt::format("{}/weft-spill-{}-{}", config_.disk_dir, process_id(), instance++);
  }
}

SpillStore::~SpillStore() {
  if (dir_.empty()) return;
  std::error_code ec;
  try {
    std::filesystem::remove_all(u8_path(dir_), ec);  // files of blobs still held elsewhere go too
  } catch (...) {
    // A directory name that is not UTF-8 (Windows): nothing was ever created there.
  }
}

std::shared_ptr<ParkedKv> SpillStore::put(std::vector<std::uint8_t> bytes, std::uint64_t conv_id) {
  const std::uint64_t size = bytes.size();
  if (counters_->ram_bytes + size <= config_.ram_bytes) {
    return std::make_shared<ParkedKv>(Tier::ram, std::move(bytes), std::string(), size, counters_, pool_);
  }
  if (!dir_.empty() && counters_->disk_bytes + size <= config_.disk_bytes) {
    const std::string path = fmt::format("{}/conv-{}-{}.kv", dir_, conv_id, next_file_++);
    try {
      std::error_code ec;
      std::filesystem::create_directories(u8_path(dir_), ec);
      if (ec) fail(Errc::io, fmt::format("cannot create spill directory '{}': {}", dir_, ec.message()));
      write_file_atomic(path, bytes);
      pool_->give(std::move(bytes));
      return std::make_shared<ParkedKv>(Tier::disk, std::vector<std::uint8_t>(), path, size, counters_);
    } catch (const Error &e) {
      // Degrade to the next tier (recompute), never lose the conversation.
      log_warning(fmt::format("spill to disk failed, conversation {} will be recomputed: {}", conv_id, e.what()));
    }
  }
  return nullptr;
}

}  // namespace weft::detail
