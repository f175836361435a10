#include "state/memory_codec.hpp"

#include "state/codec_io.hpp"

namespace weft::detail {
namespace {

constexpr char kMemoryMagic[8] = {'W', 'E', 'F', 'T', 'M', 'E', 'M', '\0'};

}  // namespace

std::vector<std::uint8_t> encode_memory(const MemoryRecord &r) {
  Writer w;
  w.raw(kMemoryMagic, 8);
  w.put(kMemoryVersion);
  w.put(r.next_id);
  w.put(r.source);
  w.put(r.dims);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(r.entries.size()));
  for (const auto &e : r.entries) {
    w.put(e.id);
    w.str(e.text);
    w.str(e.metadata);
    w.put<std::uint8_t>(e.vector.empty() ? 0 : 1);
    w.raw(e.vector.data(), e.vector.size() * sizeof(float));
  }
  w.put(crc32(w.out));
  return std::move(w.out);
}

MemoryRecord decode_memory(std::span<const std::uint8_t> bytes) {
  constexpr const char *what = "memory store";
  if (bytes.size() < 8 + 4 + 4 || std::memcmp(bytes.data(), kMemoryMagic, 8) != 0) {
    fail(Errc::corrupt, fmt::format("{}: {} bytes without the WEFTMEM header", what, bytes.size()));
  }
  std::uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  if (crc32(bytes.first(bytes.size() - 4)) != stored) fail(Errc::corrupt, fmt::format("{}: checksum mismatch", what));
  Reader r(bytes.first(bytes.size() - 4).subspan(8), what);
  const auto version = r.get<std::uint32_t>("version");
  if (version != kMemoryVersion) {
    fail(Errc::incompatible, fmt::format("{}: format version {}; this weft reads version {}", what, version,
                                         kMemoryVersion));
  }
  MemoryRecord m;
  m.next_id = r.get<std::uint64_t>("next_id");
  m.source = r.get<std::uint64_t>("source");
  m.dims = r.get<std::uint32_t>("dims");
  if (m.dims > kMaxMemoryDims) fail(Errc::corrupt, fmt::format("{}: dims = {} exceeds {}", what, m.dims, kMaxMemoryDims));
  m.entries.resize(r.count(kMaxMemoryEntries, "entries"));
  std::uint64_t last = 0;
  for (auto &e : m.entries) {
    e.id = r.get<std::uint64_t>("entry.id");
    if (e.id <= last || e.id >= m.next_id) {
      fail(Errc::corrupt, fmt::format("{}: entry id {} is out of order (after {}, next id {})", what, e.id, last,
                                      m.next_id));
    }
    last = e.id;
    e.text = r.str("entry.text");
    e.metadata = r.str("entry.metadata");
    if (r.flag("entry.has_vector")) {
      if (m.dims == 0) fail(Errc::corrupt, fmt::format("{}: entry {} has a vector in a store of width 0", what, e.id));
      e.vector.resize(m.dims);
      r.raw(e.vector.data(), e.vector.size() * sizeof(float), "entry.vector");
      for (float x : e.vector) {
        if (!std::isfinite(x)) fail(Errc::corrupt, fmt::format("{}: entry {} has a non-finite value", what, e.id));
      }
    }
  }
  if (r.left() != 0) fail(Errc::corrupt, fmt::format("{}: {} bytes after the last entry", what, r.left()));
  return m;
}

}  // namespace weft::detail
