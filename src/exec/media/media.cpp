// Images in the step: which conversations' images are ready (their
// embeddings made by the encoder thread, never here), planning non-causal
// ones whole within the budget (causal ones go in pieces through the token
// plan, schedule.cpp), and decoding them as embeddings batches beside the
// token batches — several conversations' images may share one — with
// causal attention off for images that ask for it, as mtmd's helper does.
#include <llama.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/adapter_impl.hpp"
#include "core/internal.hpp"
#include "core/model_impl.hpp"
#include "exec/executor_core.hpp"
#include "exec/media/media.hpp"

namespace weft::detail {

const MediaSpan *media_front(const Conv &c) {
  for (const auto &m : c.media) {
    if (m.begin <= c.n_decoded() && c.n_decoded() < m.end()) return &m;
  }
  return nullptr;
}

std::uint32_t text_run(const Conv &c) {
  for (const auto &m : c.media) {
    if (m.end() > c.n_decoded()) return std::min(c.n_queued(), m.begin > c.n_decoded() ? m.begin - c.n_decoded() : 0u);
  }
  return c.n_queued();
}

std::uint32_t media_floor(const Conv &c, std::uint32_t pos) {
  for (const auto &m : c.media) {
    if (m.begin <= pos && pos < m.end()) return m.begin;
  }
  return pos;
}

void check_media_cut(const Conv &c, std::uint32_t pos, const char *what) {
  for (const auto &m : c.media) {
    if (m.begin < pos && pos < m.end()) {
      fail(Errc::invalid_argument,
           fmt::format("conversation {}: cannot {} at position {}: image {} takes positions [{}, {}) and is kept or "
                       "removed whole",
                       c.id, what, pos, m.chunk->id, m.begin, m.end()));
    }
  }
}

std::vector<PosJump> media_jumps(std::span<const MediaSpan> media, std::uint32_t n) {
  std::vector<PosJump> out;
  for (const MediaSpan &m : media) {
    if (m.begin < n && m.chunk->nx > 0) out.push_back({m.begin, m.chunk->n_tokens, m.chunk->n_pos});
  }
  return out;
}

void media_truncate(Conv &c, std::uint32_t n) {
  std::erase_if(c.media, [n](const MediaSpan &m) { return m.begin >= n; });
}

void media_erase(Conv &c, std::uint32_t p0, std::uint32_t p1) {
  std::erase_if(c.media, [&](const MediaSpan &m) { return m.begin >= p0 && m.begin < p1; });
  for (auto &m : c.media) {
    if (m.begin >= p1) m.begin -= p1 - p0;
  }
}

bool ExecutorCore::media_candidate_locked(Conv &c, const MediaSpan &m) {
  const int state = m.chunk->state.load(std::memory_order_acquire);
  if (state == MediaChunk::ready) {
    m.chunk->source.reset();  // saves carry the embeddings now
    // Causal: row i sees rows before it only, so pieces decoded over steps
    // give what one batch gives (M-RoPE cells by their 2-D place: llama.cpp's
    // mask orders an image's cells by row and column).
    if (!m.chunk->non_causal) return true;
    scratch.planning.media_wanting.push_back(&c);
  } else if (state == MediaChunk::failed) {
    // Its input stays held back (not lost) until clear_error(); rewinding
    // past the image drops it.
    post_error_locked(c, *m.chunk->error);
  }
  // Else still encoding: its later input waits behind it.
  return false;
}

void ExecutorCore::plan_media_locked(std::vector<MediaSegment> &out, std::uint32_t &token_budget,
                                     std::uint32_t &free_cells, double *time_left) {
  out.clear();
  std::sort(scratch.planning.media_wanting.begin(), scratch.planning.media_wanting.end(), [](const Conv *a, const Conv *b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    if (a->turns.since() != b->turns.since()) return a->turns.since() < b->turns.since();
    return a->id < b->id;
  });
  for (Conv *c : scratch.planning.media_wanting) {
    const MediaSpan *m = media_front(*c);
    const std::uint32_t n = m->chunk->n_tokens;
    if (n > free_cells || n > n_ctx - std::min(n_ctx, c->n_decoded())) continue;  // waits for cells
    // An image is decoded whole: when the budget holds it, or — so that one
    // bigger than any budget still goes — as the step's first image once it
    // has waited kAgingSteps steps.
    const bool overdue = out.empty() && stats.steps - c->turns.since() >= kAgingSteps;
    if (n > token_budget && !overdue) continue;
    // The first image of a step pays for the batch (later ones share it),
    // and for the flips of this context's attention unless the second
    // context decodes it.
    const double batch_s = out.empty() ? (media.side_ctx != nullptr ? 1 : 2) * cost.media_batch_seconds() : 0;
    if (time_left != nullptr && batch_s > *time_left && !overdue) continue;
    if (time_left != nullptr) *time_left -= batch_s;
    out.push_back({.conv = c,
                   .chunk = m->chunk,
                   .epoch = c->epoch,
                   .start = c->n_decoded(),
                   .offset = 0,
                   .rows = n,
                   .adapters = adapter_state.used ? c->next_adapters() : nullptr,
                   .output = n == c->n_queued()});
    token_budget -= std::min(n, token_budget);
    free_cells -= n;
  }
}

namespace {

// An M-RoPE image's cells share one position, whatever its grid: a jump.
std::uint32_t grid_n_pos(const MediaChunk &m) { return m.nx > 0 ? m.n_pos : 0; }

bool stale(const MediaSegment &s) {
  return s.conv->disposed || s.conv->epoch != s.epoch || s.conv->kv.n() != s.start;
}

void commit_media(ExecutorCore &x, MediaSegment &s, std::vector<float> *logits, StepResult &result) {
  Conv &c = *s.conv;
  const std::uint32_t n = s.rows;
  result.tokens_decoded += n;
  ++result.conversations;
  // An M-RoPE image's jump is recorded whole with its first piece: its cells
  // all sit at its first position, whatever is decoded of it yet.
  const std::uint32_t jump = s.offset == 0 ? grid_n_pos(*s.chunk) : 0;
  if (c.disposed || c.epoch != s.epoch) {
    x.kv->commit_stale(c.kv, n, jump, s.chunk->n_tokens);  // in the cache; reconcile takes it out again
    x.convs.mark_dirty(c);
    return;
  }
  const auto input = c.queue.view().first(n);
  x.kv->commit(c.kv, input, adapter_key(s.adapters.get()), jump, s.chunk->n_tokens);
  c.spans.record(c.n_decoded(), n, s.adapters);
  c.history.insert(c.history.end(), input.begin(), input.end());
  c.queue.pop_front(n);
  if (logits != nullptr) {
    c.logits.swap(*logits);
    c.has_logits = true;
  } else {
    c.has_logits = false;
  }
  c.gen_token_queued = false;
  c.turns.last_served = x.stats.steps;
}

// decode_group's code when the model's RPC peer failed: not llama.cpp's.
constexpr int kPeerLost = -1000;
int decode_group(ExecutorCore &x, std::vector<MediaSegment> &all, const std::vector<std::size_t> &segs,
                 StepResult &result, std::unique_lock<std::mutex> &lock, bool side_ok = true);

// Non-causal images through the second context (media_side.cpp), committed
// here; one whose cells find no room in this context goes through it.
int decode_side(ExecutorCore &x, std::vector<MediaSegment> &all, const std::vector<std::size_t> &segs,
                StepResult &result, std::unique_lock<std::mutex> &lock) {
  std::vector<std::vector<std::uint8_t>> images;
  double took = 0;
  if (const int rc = decode_in_media_ctx(x, all, segs, images, took, lock); rc != 0) return rc;
  if (!x.model.impl()->failure().empty()) return kPeerLost;  // an RPC peer failed meanwhile: nothing committed
  ++x.stats.image_batches;
  x.stats.image_decode_s += took;
  result.decode_seconds += took;
  ++result.decode_calls;
  x.cost.observe_media_batch(took);
  for (std::size_t j = 0; j < segs.size(); ++j) {
    MediaSegment &s = all[segs[j]];
    if (!x.kv->append_data(s.conv->kv, images[j], s.rows)) {
      // No room for the copy now: this one goes through the main context.
      if (const int r = decode_group(x, all, std::vector<std::size_t>{segs[j]}, result, lock, false); r != 0) return r;
      continue;
    }
    commit_media(x, s, s.output ? &x.scratch.run.staging[j] : nullptr, result);
  }
  return 0;
}

// Decodes the images `segs` (of `all`, the plan's) together; an image longer
// than n_batch goes in n_batch pieces, as mtmd_helper_decode_image_chunk
// splits it. Commits them on success; on failure takes their cells out again
// and returns the llama_decode code.
int decode_group(ExecutorCore &x, std::vector<MediaSegment> &all, const std::vector<std::size_t> &segs,
                 StepResult &result, std::unique_lock<std::mutex> &lock, bool side_ok) {
  auto &mb = x.scratch.run.media_batch;
  const std::size_t n_embd = static_cast<std::size_t>(x.media.projector->n_embd);
  const MediaSegment &first = all[segs.front()];
  if (x.adapter_state.used) x.use_adapters(first.adapters);  // throws Errc::backend: the caller fails the group
  const bool non_causal = first.chunk->non_causal;
  // M-RoPE: four positions a row, section by section over the batch's rows
  // (t, then y, x, z), as mtmd_helper_decode_image_chunk lays them out.
  const std::uint32_t n_sections = x.media.projector->mrope ? 4 : 1;
  if (side_ok && non_causal && !x.adapter_state.used && n_sections == 1) {
    const int rc = decode_side(x, all, segs, result, lock);
    if (rc != kNoSide) return rc;
  }
  std::size_t outputs = 0;
  // Rows in order: each image's embeddings, one image after the other.
  std::size_t seg = 0;
  std::uint32_t k = all[segs.front()].offset;  // next embedding of segs[seg]
  int rc = 0;
  while (rc == 0 && seg < segs.size()) {
    const std::uint32_t cap = x.params.n_batch;
    mb.embd.resize(std::size_t(cap) * n_embd);
    mb.pos.resize(std::size_t(cap) * n_sections);
    mb.n_seq_id.assign(cap, 1);
    mb.seq_id.resize(cap);
    mb.seq_ids.resize(cap + 1);
    mb.logits.assign(cap, 0);
    std::uint32_t rows = 0;
    double depth = 0;  // summed positions of the rows, for the cost model
    std::vector<std::pair<std::size_t, std::uint32_t>> out_rows;  // (segment, row)
    while (rows < cap && seg < segs.size()) {
      const MediaSegment &s = all[segs[seg]];
      const std::uint32_t n = s.offset + s.rows;  // end of this segment's embeddings
      const std::uint32_t take = std::min(cap - rows, n - k);
      std::copy_n(s.chunk->embd.data() + std::size_t(k) * n_embd, std::size_t(take) * n_embd,
                  mb.embd.data() + std::size_t(rows) * n_embd);
      // The chunk's first position: inside a recorded M-RoPE jump every cell
      // has it; else cell i is at that plus i.
      const std::int32_t p0 =
          s.offset > 0 && grid_n_pos(*s.chunk) != 0 ? s.conv->kv.pos(s.start)
                                                     : s.conv->kv.pos(s.start) - static_cast<std::int32_t>(s.offset);
      depth += take * (s.start + (k - s.offset) + take / 2.0);
      for (std::uint32_t j = 0; j < take; ++j) {
        const std::uint32_t row = rows + j;
        if (n_sections == 1) {
          mb.pos[row] = p0 + static_cast<std::int32_t>(k + j);
        } else {
          const MediaPos q = media_pos(*s.chunk, p0, k + j);
          mb.pos[row] = q.t;
          mb.pos[cap + row] = q.y;
          mb.pos[2 * std::size_t(cap) + row] = q.x;
          mb.pos[3 * std::size_t(cap) + row] = q.z;
        }
        mb.seq_id[row] = s.conv->kv.seq;
        mb.seq_ids[row] = &mb.seq_id[row];
      }
      rows += take;
      k += take;
      if (k == n) {
        if (s.output) {
          mb.logits[rows - 1] = 1;
          out_rows.emplace_back(segs[seg], rows - 1);
        }
        ++seg;
        k = seg < segs.size() ? all[segs[seg]].offset : 0;
      } else {
        break;  // over n_batch: the rest in the next batch
      }
    }
    // Sections laid out for `cap` rows; llama.cpp reads them `rows` apart.
    for (std::uint32_t sec = 1; sec < n_sections && rows < cap; ++sec) {
      std::copy_n(mb.pos.begin() + std::ptrdiff_t(sec) * cap, rows, mb.pos.begin() + std::ptrdiff_t(sec) * rows);
    }
    llama_batch b = embd_batch(mb, rows);
    x.kv->make_room(rows);  // the prefix cache gives way
    const double used_before = x.kv->cells_held();
    const std::uint64_t encoder_before = x.media.encoder_activity();
    if (x.scratch.run.staging.size() < outputs + out_rows.size()) x.scratch.run.staging.resize(outputs + out_rows.size());
    lock.unlock();
    if (non_causal) llama_set_causal_attn(x.ctx, false);
    const auto d0 = std::chrono::steady_clock::now();
    rc = x.decoder->decode(x.ctx, b);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count();
    if (non_causal) llama_set_causal_attn(x.ctx, true);
    if (rc == 0) {
      for (const auto &[si, row] : out_rows) {
        const float *lg = llama_get_logits_ith(x.ctx, static_cast<std::int32_t>(row));
        x.scratch.run.staging[outputs++].assign(lg, lg + x.n_vocab);
      }
    }
    lock.lock();
    // An RPC peer failed during this decode: its logits are the relay's
    // zeros, never committed.
    if (!x.model.impl()->failure().empty()) rc = kPeerLost;
    result.decode_seconds += took;
    ++result.decode_calls;
    ++x.stats.image_batches;
    x.stats.image_decode_s += took;
    if (non_causal) {
      x.cost.observe_media_batch(took);
    } else if (rc == 0 && rows > 1 && x.media.encoder_quiet_since(encoder_before)) {
      // Causal rows are planned with the tokens' cost model: an embeddings
      // batch of two rows or more costs what a token batch of its rows does
      // (raw llama.cpp; within ~10% in weft), so it learns from them too.
      x.cost.observe(rows, x.depth_is_cells() ? used_before : depth / rows, took);
    }
  }
  if (rc != 0) {
    for (std::size_t i : segs) {
      KvHandle &kv = all[i].conv->kv;
      const std::uint32_t cut = jump_floor(kv.jumps, kv.n());
      if (cut == kv.n()) {
        x.roll_back_locked(*all[i].conv);
      } else {
        // Part of an M-RoPE image is in: its cells share one position, so
        // what the failed batch left cannot be told from them. The image
        // goes whole and is queued again.
        x.kv->truncate(kv, cut);
        x.requeue_locked(*all[i].conv, cut);
      }
    }
    return rc;
  }
  std::size_t o = 0;
  for (std::size_t i : segs) commit_media(x, all[i], all[i].output ? &x.scratch.run.staging[o++] : nullptr, result);
  return 0;
}

}  // namespace

void ExecutorCore::run_media_locked(std::vector<MediaSegment> &segments, StepResult &result,
                                    std::unique_lock<std::mutex> &lock) {
  const std::uint32_t ucap = params.n_ubatch;
  std::vector<std::size_t> group;
  std::size_t i = 0;
  while (i < segments.size()) {
    // A group shares one embeddings batch: images of one adapter setting and
    // attention kind, together no more than a micro-batch, so llama.cpp
    // decodes each image in one ubatch as it would alone.
    group.clear();
    std::uint32_t total = 0;
    for (; i < segments.size(); ++i) {
      MediaSegment &s = segments[i];
      if (stale(s)) {
        s.failed = true;
        continue;
      }
      const std::uint32_t n = s.rows;
      if (!group.empty()) {
        const MediaSegment &f = segments[group.front()];
        if (total + n > ucap || f.chunk->non_causal != s.chunk->non_causal ||
            !same_adapters(f.adapters.get(), s.adapters.get())) {
          break;
        }
      }
      group.push_back(i);
      total += n;
      if (n > ucap) {
        ++i;
        break;
      }
    }
    if (group.empty()) continue;
    // Nothing reaches a dead RPC peer's stand-in; each image is its
    // conversation's error.
    const auto fail_if_lost = [&] {
      const std::string lost = model.impl()->failure();
      if (lost.empty()) return false;
      for (std::size_t g : group) {
        segments[g].failed = true;
        post_error_locked(*segments[g].conv,
                          Error(Errc::backend, fmt::format("conversation {}: {}", segments[g].conv->id, lost)));
        ++result.failed;
      }
      return true;
    };
    if (fail_if_lost()) continue;
    int rc = 0;
    try {
      rc = decode_group(*this, segments, group, result, lock);
    } catch (const Error &e) {
      for (std::size_t g : group) {  // llama.cpp refused the adapter setting
        post_error_locked(*segments[g].conv, e);
        ++result.failed;
      }
      continue;
    }
    if (rc == 0) continue;
    ++stats.decode_failures;
    if (rc == kPeerLost && fail_if_lost()) continue;
    // Narrowed down: each image alone, so one bad image fails only its own.
    const std::vector<std::size_t> tried = group;
    for (std::size_t g : tried) {
      MediaSegment &s = segments[g];
      if (stale(s)) {
        s.failed = true;  // changed meanwhile: nothing to decode for it
        continue;
      }
      if (tried.size() > 1) {
        group.assign(1, g);
        try {
          if ((rc = decode_group(*this, segments, group, result, lock)) == 0) continue;
        } catch (const Error &) {
          // Reported below as this image's failure.
        }
      }
      s.failed = true;
      post_error_locked(*s.conv, Error(Errc::backend, fmt::format("llama_decode returned {} for image {} of "
                                                                  "conversation {} ({} embeddings at position {})",
                                                                  rc, s.chunk->id, s.conv->id, s.rows,
                                                                  s.start)));
      ++result.failed;
    }
  }
}

}  // namespace weft::detail
