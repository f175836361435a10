// Files written atomically and read with a size bound. Internal.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace weft::detail {

// Writes to `<path>.tmp.<pid>`, then fsync and rename on commit(), so a
// crash or a failed write never leaves a partial file at `path` (the previous
// file, if any, stays intact). Unlinks the temp file unless committed.
// Throws Errc::io naming the path and the system's reason.
class TempFile {
 public:
  explicit TempFile(std::string final_path);
  ~TempFile();
  TempFile(const TempFile &) = delete;
  TempFile &operator=(const TempFile &) = delete;
  void write(const void *data, std::size_t n);
  void commit();

 private:
  std::string final_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `bytes` to `path` atomically (TempFile).
void write_file_atomic(const std::string &path, std::span<const std::uint8_t> bytes);
// Checks that `path` names a regular file: Errc::not_found if nothing is
// there, Errc::invalid_argument for a directory or another non-file,
// Errc::io if it cannot be looked at. `what` names it ("model file").
void require_regular_file(const std::string &path, const char *what);

// Reads a whole file; Errc::not_found if missing, invalid_argument for a
// directory (require_regular_file), Errc::out_of_range if it is
// larger than `max_bytes`, Errc::io on a read error.
std::vector<std::uint8_t> read_file(const std::string &path, std::uint64_t max_bytes);

// A file's fingerprint: its size and up to 1 MiB from each end (FNV-1a), so
// equal files have equal values (adapters, projectors). 0 bytes read from a
// missing file still give a value; callers check the file first.
std::uint64_t file_fingerprint(const std::string &path);

}  // namespace weft::detail
