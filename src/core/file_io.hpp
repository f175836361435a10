// Files written atomically and read with a size bound, and UTF-8 paths
// opened the same way on every platform. Internal.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::detail {

// A path given to weft's API (UTF-8) as the OS opens it: wide on Windows, so
// a name with non-ASCII characters (a user name in a game's save directory)
// is found; the bytes unchanged elsewhere. Errc::invalid_argument for a path
// that is not UTF-8 on Windows.
std::filesystem::path u8_path(std::string_view utf8);
// fopen with a UTF-8 path (_wfopen on Windows); nullptr and errno on failure.
std::FILE *open_file(const std::string &path, const char *mode);
struct FileCloser {
  void operator()(std::FILE *f) const noexcept { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;  // an open_file() result, closed on scope exit
// Removes a file; a missing file or an error is ignored (cleanup paths).
void remove_file_quietly(const std::string &path) noexcept;
// This process's id (temp and spill file names).
long process_id() noexcept;

// Writes to `<path>.tmp.<pid>.<n>`, then flushes it to disk and renames it
// over `path` on commit() (MoveFileExW with replace on Windows, where
// rename() onto an existing file fails), so a crash or a failed write never
// leaves a partial file at `path` (the previous file, if any, stays intact).
// Removes the temp file unless committed. Throws Errc::io naming the path
// and the system's reason.
class TempFile {
 public:
  explicit TempFile(std::string final_path);
  ~TempFile();
  TempFile(const TempFile &) = delete;
  TempFile &operator=(const TempFile &) = delete;
  void write(const void *data, std::size_t n);
  void commit();

 private:
  void close_handle() noexcept;
  std::string final_, tmp_;
#ifdef _WIN32
  void *handle_ = nullptr;  // HANDLE; INVALID_HANDLE_VALUE is never kept
#else
  int fd_ = -1;
#endif
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
