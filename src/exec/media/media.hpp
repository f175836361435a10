// A conversation's images (Conv::media): where they sit in its positions,
// and the edits that must keep each one whole. Internal; under the
// executor's state lock.
#pragma once

#include <llama.h>

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "exec/conv.hpp"

namespace weft::detail {

// The image holding c's next undecoded position, if any (a causal one may
// be partly decoded: it goes in pieces).
const MediaSpan *media_front(const Conv &c);
// Queued tokens before the first image still queued (all of them without one).
std::uint32_t text_run(const Conv &c);
// The start of the image holding position pos, else pos.
std::uint32_t media_floor(const Conv &c, std::uint32_t pos);
// Throws Errc::invalid_argument when position pos falls strictly inside an
// image (a cut there would leave half of it).
void check_media_cut(const Conv &c, std::uint32_t pos, const char *what);
// Cell i of media decoded with M-RoPE, its first position p0. An image:
// t = p0 for every cell, y = p0 + row, x = p0 + column of its grid
// (MediaChunk::nx wide), z = 0, as mtmd_image_tokens_get_decoder_pos lays
// out MTMD_POS_TYPE_MROPE; audio (nx 0): p0 + i in every section, as
// mtmd's set_position_mrope_1d.
struct MediaPos {
  std::int32_t t = 0, y = 0, x = 0, z = 0;
};
inline MediaPos media_pos(const MediaChunk &m, std::int32_t p0, std::uint32_t i) {
  const auto k = static_cast<std::int32_t>(i);
  if (m.nx == 0) return {p0 + k, p0 + k, p0 + k, p0 + k};
  return {p0, p0 + static_cast<std::int32_t>(i / m.nx), p0 + static_cast<std::int32_t>(i % m.nx), 0};
}
// The M-RoPE images among the first n positions, as the KV cache places them.
std::vector<PosJump> media_jumps(std::span<const MediaSpan> media, std::uint32_t n);
// Forgets images at or past position n (the conversation now ends there).
void media_truncate(Conv &c, std::uint32_t n);
// Forgets images within [p0, p1) and moves later ones down by p1 - p0.
void media_erase(Conv &c, std::uint32_t p0, std::uint32_t p1);

// The first `rows` rows of an embeddings batch's buffers
// (RunBuffers::MediaBatch) as a llama_batch; the buffers own the data.
template <class Buffers>
llama_batch embd_batch(Buffers &mb, std::uint32_t rows) {
  llama_batch b{};
  b.n_tokens = static_cast<std::int32_t>(rows);
  b.embd = mb.embd.data();
  b.pos = mb.pos.data();
  b.n_seq_id = mb.n_seq_id.data();
  b.seq_id = mb.seq_ids.data();
  b.logits = mb.logits.data();
  return b;
}

struct ExecutorCore;
// decode_in_media_ctx's code when the second context cannot take the work.
constexpr int kNoSide = -1001;
struct MediaSegment;
// Non-causal images (all[segs], the plan's) decoded in the second context
// (media_side.cpp).
int decode_in_media_ctx(ExecutorCore &x, const std::vector<MediaSegment> &all, const std::vector<std::size_t> &segs,
                        std::vector<std::vector<std::uint8_t>> &images, double &seconds,
                        std::unique_lock<std::mutex> &lock);

}  // namespace weft::detail
