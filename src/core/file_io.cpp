#include "core/file_io.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <unistd.h>

#include "core/internal.hpp"

namespace weft::detail {
namespace {
std::atomic<std::uint64_t> g_temp_counter{0};
}

TempFile::TempFile(std::string final_path) : final_(std::move(final_path)) {
  // pid and a counter: two threads (or processes) saving to one path never share a temp file.
  tmp_ = final_ + fmt::format(".tmp.{}.{}", static_cast<long>(::getpid()), g_temp_counter.fetch_add(1));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(Errc::io, fmt::format("cannot create '{}': {}", tmp_, std::strerror(errno)));
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void TempFile::write(const void *data, std::size_t n) {
  auto p = static_cast<const char *>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(Errc::io, fmt::format("writing '{}' failed: {}", tmp_, std::strerror(w < 0 ? errno : ENOSPC)));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void TempFile::commit() {
  if (::fsync(fd_) != 0) fail(Errc::io, fmt::format("fsync '{}' failed: {}", tmp_, std::strerror(errno)));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
    fail(Errc::io, fmt::format("rename '{}' -> '{}' failed: {}", tmp_, final_, std::strerror(errno)));
  }
  committed_ = true;
}

void write_file_atomic(const std::string &path, std::span<const std::uint8_t> bytes) {
  TempFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void require_regular_file(const std::string &path, const char *what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  switch (st.type()) {
    case std::filesystem::file_type::regular: return;
    case std::filesystem::file_type::not_found:
      fail(Errc::not_found, fmt::format("{} '{}' does not exist", what, path));
    case std::filesystem::file_type::directory:
      fail(Errc::invalid_argument, fmt::format("{} '{}' is a directory, not a file", what, path));
    case std::filesystem::file_type::none:  // status() itself failed (e.g. permission denied)
      fail(Errc::io, fmt::format("cannot look at {} '{}': {}", what, path, ec.message()));
    default: fail(Errc::invalid_argument, fmt::format("{} '{}' is not a regular file", what, path));
  }
}

std::vector<std::uint8_t> read_file(const std::string &path, std::uint64_t max_bytes) {
  std::error_code ec;
  require_regular_file(path, "file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) fail(Errc::io, fmt::format("cannot stat '{}': {}", path, ec.message()));
  if (size > max_bytes) {
    fail(Errc::out_of_range, fmt::format("'{}' has {} bytes, more than the limit of {}", path, size, max_bytes));
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(size));
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char *>(out.data()), static_cast<std::streamsize>(out.size()))) {
    fail(Errc::io, fmt::format("reading '{}' failed", path));
  }
  return out;
}

// Size and up to 1 MiB from each end: equal files, equal values (FNV-1a).
std::uint64_t file_fingerprint(const std::string &path) {
  std::uint64_t h = 1469598103934665603ull;
  auto add = [&h](const char *p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  };
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chunk(1 << 20);
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  add(chunk.data(), static_cast<std::size_t>(in.gcount()));
  in.clear();
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::int64_t>(in.tellg());
  add(reinterpret_cast<const char *>(&size), sizeof size);
  if (size > static_cast<std::int64_t>(chunk.size())) {
    in.seekg(size - static_cast<std::int64_t>(chunk.size()));
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    add(chunk.data(), static_cast<std::size_t>(in.gcount()));
  }
  return h;
}

}  // namespace weft::detail
