// SpillStore: where parked conversations' KV data lives while they are not
// resident — RAM within a byte budget, then files in a directory within
// another budget. Beyond both (or when a write fails) the caller falls back
// to recomputing from tokens. Thread-safety: the executor calls it under its
// lock; a ParkedKv may be released from any thread (atomic accounting).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace weft::detail {

enum class Tier { ram, disk };

struct SpillCounters {
  std::atomic<std::uint64_t> ram_bytes{0}, disk_bytes{0}, ram_blobs{0}, disk_blobs{0};
};

// RAM buffers of released blobs, kept for the next park: a fresh buffer costs
// a zero fill and a page fault per 4 KiB before llama.cpp writes a byte, which
// made parking several times slower than the copy itself. Bounded (kMaxBuffers
// buffers, max_bytes bytes), thread-safe (a blob may be released anywhere).
class BufferPool {
 public:
  static constexpr std::size_t kMaxBuffers = 16;
  explicit BufferPool(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}
  // A buffer of exactly `size` bytes, recycled when one's capacity is big
  // enough (contents stale: the caller overwrites all of it), else new with
  // spare capacity (see take()) so a longer blob later can reuse it.
  std::vector<std::uint8_t> take(std::size_t size);
  void give(std::vector<std::uint8_t> &&buffer) noexcept;
  std::uint64_t bytes() const;

 private:
  const std::uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::vector<std::vector<std::uint8_t>> free_;
  std::uint64_t bytes_ = 0;
  std::uint64_t max_seen_ = 0;  // the largest size asked for
};

// One parked KV blob; shared by forks of a parked conversation, freed (and
// its file removed) with the last holder.
class ParkedKv {
 public:
  ParkedKv(Tier tier, std::vector<std::uint8_t> ram, std::string path, std::uint64_t size,
           std::shared_ptr<SpillCounters> counters, std::shared_ptr<BufferPool> pool = nullptr);
  ~ParkedKv();
  ParkedKv(const ParkedKv &) = delete;
  ParkedKv &operator=(const ParkedKv &) = delete;

  Tier tier() const noexcept { return tier_; }
  std::uint64_t size() const noexcept { return size_; }
  // The bytes (a file read for the disk tier). Throws Errc::io / not_found.
  std::vector<std::uint8_t> bytes() const;
  // RAM-tier bytes without a copy; empty for the disk tier.
  std::span<const std::uint8_t> ram() const noexcept { return ram_; }

 private:
  Tier tier_;
  std::vector<std::uint8_t> ram_;
  std::string path_;
  std::uint64_t size_;
  std::shared_ptr<SpillCounters> counters_;
  std::shared_ptr<BufferPool> pool_;  // gets ram_ back; may be null
};

struct SpillConfig {
  std::uint64_t ram_bytes = 0;
  std::string disk_dir;
  std::uint64_t disk_bytes = 0;
};

class SpillStore {
 public:
  explicit SpillStore(SpillConfig config);
  // Stores `bytes` in the first tier with room; nullptr when none has room or
  // every write failed (the reason is logged as a warning).
  std::shared_ptr<ParkedKv> put(std::vector<std::uint8_t> bytes, std::uint64_t conv_id);
  // A buffer of `size` bytes to fill and put(): a recycled one when possible
  // (contents stale), so parking does not pay a fresh allocation each time.
  std::vector<std::uint8_t> buffer(std::size_t size) { return pool_->take(size); }
  // Hands a buffer that put() was not given back for reuse.
  void recycle(std::vector<std::uint8_t> &&b) noexcept { pool_->give(std::move(b)); }
  const SpillCounters &counters() const noexcept { return *counters_; }
  const SpillConfig &config() const noexcept { return config_; }

 private:
  SpillConfig config_;
  std::shared_ptr<SpillCounters> counters_;
  std::shared_ptr<BufferPool> pool_;
  std::string dir_;  // a private subdirectory of disk_dir, removed with the store
  std::uint64_t next_file_ = 0;

 public:
  ~SpillStore();
};

}  // namespace weft::detail
