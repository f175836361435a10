// The second context for non-causal images (gemma3's): llama.cpp decodes
// such an image with causal attention off, and each flip of a context's
// attention makes it rebuild its scheduler and reserve its graphs (6 ms a
// flip on npc at n_ubatch 512, docs/BENCHMARKS.md). ExecutorCore::media.side_ctx
// is kept non-causal for good: a step copies the conversations' KV data in,
// decodes their images there in one batch and copies only the images' cells
// back (KvManager::append_data), so the main context never flips.
#include <llama.h>

#include <algorithm>
#include <chrono>

#include "core/projector_impl.hpp"
#include "exec/executor_core.hpp"
#include "exec/media/media.hpp"
#include "kv/scratch_kv.hpp"

namespace weft::detail {

// Each conversation's KV data goes into a sequence of its own there, the
// images are decoded in one batch as mtmd's helper decodes each (causal
// attention off; each sees its own conversation only), their logits go to
// x.scratch.run.staging[j] for each segs[j] that asks for them, and `images[j]` gets the
// data of segs[j]'s image cells alone. Returns 0, llama_decode's code, or
// kNoSide (the second context cannot take them; nothing done in the main
// context either way); `seconds`: the time it took. `mu` held on entry and
// exit, released around the second context's work.
int decode_in_media_ctx(ExecutorCore &x, const std::vector<MediaSegment> &all, const std::vector<std::size_t> &segs,
                        std::vector<std::vector<std::uint8_t>> &images, double &seconds,
                        std::unique_lock<std::mutex> &lock) {
  llama_context *side = x.media_context();
  if (side == nullptr || segs.size() > MediaState::kSideSeqs) return kNoSide;
  std::uint64_t cells = 0;
  for (std::size_t i : segs) {
    const KvHandle &kv = all[i].conv->kv;
    if (kv.seq < 0 || !kv.jumps.empty() || all[i].offset != 0) return kNoSide;
    cells += kv.n() + all[i].rows;
  }
  if (cells > llama_n_ctx(side)) return kNoSide;
  const auto t0 = std::chrono::steady_clock::now();
  // This step's boundary: the main context's data, under the lock.
  std::vector<std::vector<std::uint8_t>> data(segs.size());
  for (std::size_t j = 0; j < segs.size(); ++j) {
    const KvHandle &kv = all[segs[j]].conv->kv;
    if (kv.n() > 0 && (data[j] = x.kv->export_kv(kv)).empty()) return kNoSide;
  }
  const std::size_t n_embd = static_cast<std::size_t>(x.media.projector->n_embd);
  auto &mb = x.scratch.run.media_batch;
  std::uint32_t rows = 0;
  for (std::size_t i : segs) rows += all[i].rows;
  mb.embd.resize(std::size_t(rows) * n_embd);
  mb.pos.resize(rows);
  mb.n_seq_id.assign(rows, 1);
  mb.seq_id.resize(rows);
  mb.seq_ids.resize(rows + 1);
  mb.logits.assign(rows, 0);
  std::vector<std::int32_t> p0(segs.size());
  std::uint32_t row = 0;
  for (std::size_t j = 0; j < segs.size(); ++j) {
    const MediaSegment &s = all[segs[j]];
    p0[j] = s.conv->kv.pos(s.start);
    std::copy_n(s.chunk->embd.data(), std::size_t(s.rows) * n_embd, mb.embd.data() + std::size_t(row) * n_embd);
    for (std::uint32_t i = 0; i < s.rows; ++i, ++row) {
      mb.pos[row] = p0[j] + static_cast<std::int32_t>(i);
      mb.seq_id[row] = static_cast<llama_seq_id>(j);
      mb.seq_ids[row] = &mb.seq_id[row];
    }
    if (s.output) mb.logits[row - 1] = 1;
  }
  llama_batch b = embd_batch(mb, rows);
  if (x.scratch.run.staging.size() < segs.size()) x.scratch.run.staging.resize(segs.size());
  images.assign(segs.size(), {});
  lock.unlock();
  ScratchKv kv(side);
  kv.clear();
  int rc = 0;
  for (std::size_t j = 0; j < segs.size() && rc == 0; ++j) {
    if (!data[j].empty() && !kv.load(static_cast<int>(j), data[j], p0[j])) rc = kNoSide;
  }
  if (rc == 0) rc = x.decoder->decode(side, b);
  if (rc == 0) {
    row = 0;
    for (std::size_t j = 0; j < segs.size() && rc == 0; ++j) {
      const MediaSegment &s = all[segs[j]];
      row += s.rows;
      if (s.output) {
        const float *lg = llama_get_logits_ith(side, static_cast<std::int32_t>(row - 1));
        x.scratch.run.staging[j].assign(lg, lg + x.n_vocab);
      }
      // Only the image's cells go back.
      images[j] = kv.take_from(static_cast<int>(j), p0[j]);
      if (images[j].empty()) rc = kNoSide;
    }
  }
  kv.clear();
  lock.lock();
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rc;
}

}  // namespace weft::detail
