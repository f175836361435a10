#include "core/file_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <unistd.h>
#endif

#include "core/internal.hpp"

namespace weft::detail {
namespace {
std::atomic<std::uint64_t> g_temp_counter{0};

#ifdef _WIN32
// UTF-8 to UTF-16; Errc::invalid_argument (naming the path) if it is not UTF-8.
std::wstring widen(std::string_view s) {
  if (s.empty()) return {};
  if (s.size() > static_cast<std::size_t>(INT_MAX)) fail(Errc::invalid_argument, "path is too long");
  const int len = static_cast<int>(s.size());
  const int n = ::MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s.data(), len, nullptr, 0);
  if (n <= 0) fail(Errc::invalid_argument, fmt::format("path '{}' is not valid UTF-8", s));
  std::wstring w(static_cast<std::size_t>(n), L'\0');
  ::MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s.data(), len, w.data(), n);
  return w;
}

// GetLastError() in words, for Errc::io messages.
std::string win_error(DWORD code) {
  char *buf = nullptr;
  const DWORD n = ::FormatMessageA(
      FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr, code,
      MAKELANGID(LANG_NEUTRAL, SUBLANG_DEFAULT), reinterpret_cast<LPSTR>(&buf), 0, nullptr);
  std::string out = n > 0 && buf != nullptr ? std::string(buf, n) : std::string();
  if (buf != nullptr) ::LocalFree(buf);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ' || out.back() == '.')) {
    out.pop_back();
  }
  return out.empty() ? fmt::format("Windows error {}", code) : fmt::format("{} (Windows error {})", out, code);
}
#endif
}  // namespace

std::filesystem::path u8_path(std::string_view utf8) {
#ifdef _WIN32
  return std::filesystem::path(widen(utf8));
#else
  return std::filesystem::path(std::string(utf8));  // bytes as given, as before
#endif
}

std::FILE *open_file(const std::string &path, const char *mode) {
#ifdef _WIN32
  try {
    return ::_wfopen(widen(path).c_str(), widen(mode).c_str());
  } catch (const Error &) {
    errno = EINVAL;
    return nullptr;
  }
#else
  return std::fopen(path.c_str(), mode);
#endif
}

void remove_file_quietly(const std::string &path) noexcept {
#ifdef _WIN32
  try {
    ::DeleteFileW(widen(path).c_str());
  } catch (...) {
  }
#else
  ::unlink(path.c_str());
#endif
}

long process_id() noexcept {
#ifdef _WIN32
  return static_cast<long>(::GetCurrentProcessId());
#else
  return static_cast<long>(::getpid());
#endif
}

TempFile::TempFile(std::string final_path) : final_(std::move(final_path)) {
  // pid and a counter: two threads (or processes) saving to one path never share a temp file.
  tmp_ = final_ + fmt::format(".tmp.{}.{}", process_id(), g_temp_counter.fetch_add(1));
#ifdef _WIN32
  HANDLE h = ::CreateFileW(widen(tmp_).c_str(), GENERIC_WRITE, 0, nullptr, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr);
  if (h == INVALID_HANDLE_VALUE) fail(Errc::io, fmt::format("cannot create '{}': {}", tmp_, win_error(::GetLastError())));
  handle_ = h;
#else
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(Errc::io, fmt::format("cannot create '{}': {}", tmp_, std::strerror(errno)));
#endif
}

TempFile::~TempFile() {
  close_handle();
  if (!committed_) remove_file_quietly(tmp_);
}

void TempFile::close_handle() noexcept {
#ifdef _WIN32
  if (handle_ != nullptr) ::CloseHandle(static_cast<HANDLE>(handle_));
  handle_ = nullptr;
#else
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
#endif
}

void TempFile::write(const void *data, std::size_t n) {
  auto p = static_cast<const char *>(data);
#ifdef _WIN32
  while (n > 0) {
    const DWORD chunk = static_cast<DWORD>(std::min<std::size_t>(n, std::size_t{1} << 30));
    DWORD w = 0;
    if (!::WriteFile(static_cast<HANDLE>(handle_), p, chunk, &w, nullptr) || w == 0) {
      fail(Errc::io, fmt::format("writing '{}' failed: {}", tmp_, win_error(::GetLastError())));
    }
    p += w;
    n -= w;
  }
#else
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(Errc::io, fmt::format("writing '{}' failed: {}", tmp_, std::strerror(w < 0 ? errno : ENOSPC)));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
#endif
}

void TempFile::commit() {
#ifdef _WIN32
  if (!::FlushFileBuffers(static_cast<HANDLE>(handle_))) {
    fail(Errc::io, fmt::format("flushing '{}' failed: {}", tmp_, win_error(::GetLastError())));
  }
  close_handle();
  // rename() onto an existing file fails on Windows: replace it in one step.
  if (!::MoveFileExW(widen(tmp_).c_str(), widen(final_).c_str(), MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) {
    fail(Errc::io, fmt::format("replacing '{}' with '{}' failed: {}", final_, tmp_, win_error(::GetLastError())));
  }
#else
  if (::fsync(fd_) != 0) fail(Errc::io, fmt::format("fsync '{}' failed: {}", tmp_, std::strerror(errno)));
  close_handle();
  if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
    fail(Errc::io, fmt::format("rename '{}' -> '{}' failed: {}", tmp_, final_, std::strerror(errno)));
  }
#endif
  committed_ = true;
}

void write_file_atomic(const std::string &path, std::span<const std::uint8_t> bytes) {
  TempFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void require_regular_file(const std::string &path, const char *what) {
  std::error_code ec;
  const auto st = std::filesystem::status(u8_path(path), ec);
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
  const auto native = u8_path(path);
  const auto size = std::filesystem::file_size(native, ec);
  if (ec) fail(Errc::io, fmt::format("cannot stat '{}': {}", path, ec.message()));
  if (size > max_bytes) {
    fail(Errc::out_of_range, fmt::format("'{}' has {} bytes, more than the limit of {}", path, size, max_bytes));
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(size));
  std::ifstream in(native, std::ios::binary);
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
  std::ifstream in(u8_path(path), std::ios::binary);
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
