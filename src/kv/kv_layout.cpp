// llama.cpp v0.4.0's sequence data, as llama_kv_cache::state_write lays it
// out for one stream (weft's cache is unified), after llama_context's
// prefix:
//   u32 magic, i32 seq_id,
//   u32 n_stream, u32 cell_count,
//   per cell: i32 pos, u32 n_seq_id, [llama_kv_cell_ext: 12 bytes with
//             M-RoPE], i32 seq_id x n_seq_id,
//   u32 v_trans, u32 n_layer,
//   per layer K: i32 type, u64 row_size, cell_count rows,
//   per layer V, by rows:   i32 type, u64 row_size, cell_count rows
//            or transposed: i32 type, u32 el_size, u32 n_embd, n_embd runs of cell_count elements.
// The walk checks every count against the bytes left and must end exactly
// at the end, so data of another shape is left alone (llama.cpp then
// refuses it as before).
#include "kv/kv_layout.hpp"

#include <ggml.h>

#include <cstring>

namespace weft::detail {
namespace {

constexpr std::size_t kCellExtBytes = 12;  // llama_kv_cell_ext: x, y, tok

struct Walk {
  std::span<const std::uint8_t> d;
  std::size_t at = 0;
  template <class T>
  bool get(T &v) {
    if (d.size() - at < sizeof(T)) return false;
    std::memcpy(&v, d.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
  bool skip(std::uint64_t n) {
    if (n > d.size() - at) return false;
    at += static_cast<std::size_t>(n);
    return true;
  }
};

struct VSection {
  std::size_t at = 0;  // its header
  std::int32_t type = 0;
  std::uint32_t el = 0, n_embd = 0;  // 0 when quantised (rows only)
};

struct Parsed {
  bool trans = false;
  std::size_t trans_at = 0;  // the u32 v_trans flag
  std::uint32_t cells = 0;
  std::vector<VSection> v;
};

std::optional<Parsed> parse(std::span<const std::uint8_t> d, std::size_t ext) {
  Walk w{d};
  std::uint32_t magic = 0, n_stream = 0;
  std::int32_t seq = 0;
  Parsed p;
  if (!w.get(magic) || !w.get(seq) || !w.get(n_stream) || n_stream != 1 || !w.get(p.cells) || p.cells == 0) return std::nullopt;
  for (std::uint32_t c = 0; c < p.cells; ++c) {
    std::int32_t pos = 0;
    std::uint32_t n_seq = 0;
    if (!w.get(pos) || !w.get(n_seq) || n_seq > 4096 || !w.skip(ext) || !w.skip(std::uint64_t{n_seq} * 4)) {
      return std::nullopt;
    }
  }
  std::uint32_t trans = 0, n_layer = 0;
  p.trans_at = w.at;
  if (!w.get(trans) || !w.get(n_layer) || trans > 1 || n_layer == 0 || n_layer > 65536) return std::nullopt;
  p.trans = trans == 1;
  for (std::uint32_t l = 0; l < n_layer; ++l) {
    std::int32_t type = 0;
    std::uint64_t row = 0;
    if (!w.get(type) || !w.get(row) || row == 0 || row > (1ull << 32) || !w.skip(row * p.cells)) return std::nullopt;
  }
  // V: one section per layer that has V (MLA models write fewer).
  while (w.at < d.size()) {
    if (p.v.size() == n_layer) return std::nullopt;
    VSection s;
    s.at = w.at;
    if (!w.get(s.type) || s.type < 0 || s.type >= GGML_TYPE_COUNT) return std::nullopt;
    const auto type = static_cast<ggml_type>(s.type);
    if (p.trans) {
      if (!w.get(s.el) || !w.get(s.n_embd) || s.el == 0 || s.el > 8 || s.n_embd == 0 ||
          !w.skip(std::uint64_t{s.el} * s.n_embd * p.cells)) {
        return std::nullopt;
      }
    } else {
      std::uint64_t row = 0;
      if (!w.get(row) || row == 0 || row > (1ull << 32) || !w.skip(row * p.cells)) return std::nullopt;
      if (ggml_blck_size(type) == 1 && row % ggml_type_size(type) == 0) {
        s.el = static_cast<std::uint32_t>(ggml_type_size(type));
        s.n_embd = static_cast<std::uint32_t>(row / s.el);
      }
    }
    p.v.push_back(s);
  }
  if (w.at != d.size()) return std::nullopt;
  return p;
}

std::optional<Parsed> parse_any(std::span<const std::uint8_t> d) {
  if (auto p = parse(d, 0)) return p;
  return parse(d, kCellExtBytes);
}

}  // namespace

std::optional<bool> v_transposed(std::span<const std::uint8_t> data) {
  const auto p = parse_any(data);
  if (!p) return std::nullopt;
  return p->trans;
}

std::optional<std::vector<std::uint8_t>> flip_v_layout(std::span<const std::uint8_t> data) {
  const auto p = parse_any(data);
  if (!p || p->v.empty()) return std::nullopt;
  for (const auto &s : p->v) {
    if (s.el == 0) return std::nullopt;  // quantised V: by rows only
  }
  std::vector<std::uint8_t> out(data.begin(), data.end());
  const std::uint32_t trans = p->trans ? 0 : 1;
  std::memcpy(out.data() + p->trans_at, &trans, 4);
  const std::size_t cells = p->cells;
  for (const auto &s : p->v) {
    // Both headers are 12 bytes: i32 type, then u64 row or u32 el + u32 n_embd.
    std::uint8_t *h = out.data() + s.at + 4;
    if (p->trans) {
      const std::uint64_t row = std::uint64_t{s.el} * s.n_embd;
      std::memcpy(h, &row, 8);
    } else {
      std::memcpy(h, &s.el, 4);
      std::memcpy(h + 4, &s.n_embd, 4);
    }
    const std::uint8_t *src = data.data() + s.at + 12;
    std::uint8_t *dst = out.data() + s.at + 12;
    const std::size_t el = s.el, embd = s.n_embd;
    for (std::size_t c = 0; c < cells; ++c) {
      for (std::size_t j = 0; j < embd; ++j) {
        // rows: [cell][j]; transposed: [j][cell]
        const std::size_t by_rows = (c * embd + j) * el, by_cols = (j * cells + c) * el;
        if (p->trans) {
          std::memcpy(dst + by_rows, src + by_cols, el);
        } else {
          std::memcpy(dst + by_cols, src + by_rows, el);
        }
      }
    }
  }
  return out;
}

std::span<const std::uint8_t> in_v_layout(std::span<const std::uint8_t> data, std::optional<bool> transposed,
                                          std::vector<std::uint8_t> &scratch) {
  if (!transposed) return data;
  const auto have = v_transposed(data);
  if (!have || *have == *transposed) return data;
  auto flipped = flip_v_layout(data);
  if (!flipped) return data;
  scratch = std::move(*flipped);
  return scratch;
}

}  // namespace weft::detail
