#include "exec/draft_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/internal.hpp"
#include "core/model_impl.hpp"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

void check_vocabulary(const Model &target, const Model &draft) {
  if (draft.n_vocab() != target.n_vocab()) {
    fail(Errc::invalid_argument, fmt::format("DraftModelParams.model has {} tokens and the executor's model {}: a draft "
                                             "model needs the same vocabulary",
                                             draft.n_vocab(), target.n_vocab()));
  }
  const llama_vocab *a = target.impl()->vocab;
  const llama_vocab *b = draft.impl()->vocab;
  for (llama_token t = 0; t < target.n_vocab(); ++t) {
    const std::string_view x = llama_vocab_get_text(a, t), y = llama_vocab_get_text(b, t);
    if (x != y || llama_vocab_get_attr(a, t) != llama_vocab_get_attr(b, t)) {
      fail(Errc::invalid_argument, fmt::format("DraftModelParams.model's token {} is '{}' where the executor's model "
                                               "has '{}': a draft model needs the same vocabulary",
                                               t, y, x));
    }
  }
}

double learn(double old, double seen) { return old <= 0 ? seen : old * 0.8 + seen * 0.2; }

}  // namespace

DraftModel::DraftModel(const Model &target, const DraftModelParams &params, int n_threads, llama_flash_attn_type kernel)
    : params_(params) {
  const Model &m = params.model;
  check_vocabulary(target, m);
  if (m.meta(m.meta("general.architecture") + ".attention.causal") == "false" ||
      llama_model_has_encoder(m.impl()->model)) {
    fail(Errc::invalid_argument, "DraftModelParams.model is not causal (an embedding model or an encoder): it cannot "
                                 "predict the next token");
  }
  if (m.memory() != Model::Memory::plain) {
    fail(Errc::invalid_argument, "DraftModelParams.model is not plain attention (a sliding window or a recurrent "
                                 "state): its cache could not drop a rejected draft");
  }
  const auto seq_limit = static_cast<std::uint32_t>(std::min<std::size_t>(256, llama_max_parallel_sequences()));
  if (params.n_seq_max < 1 || params.n_seq_max > seq_limit) {
    fail(Errc::out_of_range, fmt::format("DraftModelParams.n_seq_max = {} is outside [1, {}]", params.n_seq_max,
                                         seq_limit));
  }
  const auto train = static_cast<std::uint64_t>(std::max(1, m.n_ctx_train()));
  if (params.n_ctx < 64 || params.n_ctx > train * params.n_seq_max) {
    fail(Errc::out_of_range, fmt::format("DraftModelParams.n_ctx = {} is outside [64, the draft model's n_ctx_train "
                                         "{} x n_seq_max {}]",
                                         params.n_ctx, train, params.n_seq_max));
  }
  if (!(params.p_min >= 0.0f && params.p_min <= 1.0f)) {
    fail(Errc::out_of_range, fmt::format("DraftModelParams.p_min = {} is outside [0, 1]", params.p_min));
  }
  auto cp = llama_context_default_params();
  cp.n_ctx = params.n_ctx;
  cp.n_batch = std::min<std::uint32_t>(params.n_ctx, 512);
  cp.n_ubatch = cp.n_batch;
  cp.n_seq_max = params.n_seq_max;
  cp.kv_unified = true;  // one long conversation may take most cells
  cp.n_threads = n_threads;
  cp.n_threads_batch = n_threads;
  cp.flash_attn_type = kernel;
  cp.no_perf = true;
  take_llama_error();
  ctx_ = llama_init_from_model(m.impl()->model, cp);
  if (ctx_ == nullptr) {
    fail(Errc::backend, fmt::format("llama.cpp could not create the draft model's context (n_ctx {}, n_seq_max {}): {}",
                                    params.n_ctx, params.n_seq_max, take_llama_error()));
  }
  n_ctx_ = llama_n_ctx(ctx_);
  n_batch_ = cp.n_batch;
  // A conversation longer than the context (or the model's training
  // length) drafts from its last half of that.
  window_ = std::min<std::uint32_t>(n_ctx_, static_cast<std::uint32_t>(train)) / 2;
  n_vocab_ = m.n_vocab();
  batch_ = llama_batch_init(static_cast<std::int32_t>(n_batch_), 0, 1);
  slots_.resize(params.n_seq_max);
  wants_.resize(params.n_seq_max);
  proposals_.resize(params.n_seq_max);
}

DraftModel::~DraftModel() {
  llama_batch_free(batch_);
  if (ctx_ != nullptr) llama_free(ctx_);
}

void DraftModel::clear_slot(Slot &s, int seq) {
  if (!s.tokens.empty()) llama_memory_seq_rm(llama_get_memory(ctx_), seq, -1, -1);
  s.tokens.clear();
  s.offset = 0;
}

void DraftModel::reset_all() {
  llama_memory_clear(llama_get_memory(ctx_), true);
  for (Slot &s : slots_) s = Slot{};
  for (std::size_t i = 0; i < n_wants_; ++i) proposals_[i].tokens.clear();
}

std::uint32_t DraftModel::cells_held() const {
  std::size_t n = 0;
  for (const Slot &s : slots_) n += s.tokens.size();
  return static_cast<std::uint32_t>(n);
}

void DraftModel::begin() {
  ++round_;
  n_wants_ = 0;
}

bool DraftModel::want(std::uint64_t conv, std::span<const Token> history, Token next, std::uint32_t n,
                      std::span<const LogitBias> biases) {
  if (n == 0 || n_wants_ == wants_.size()) return false;
  int si = -1;
  for (std::size_t i = 0; i < slots_.size() && si < 0; ++i) {
    if (slots_[i].conv == conv) si = static_cast<int>(i);
  }
  if (si < 0) {
    // A free sequence, else the least recently used one not wanted this round.
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot &s = slots_[i];
      if (s.conv == 0) {
        si = static_cast<int>(i);
        break;
      }
      if (s.used != round_ && (si < 0 || s.used < slots_[static_cast<std::size_t>(si)].used)) si = static_cast<int>(i);
    }
    if (si < 0) return false;
    clear_slot(slots_[static_cast<std::size_t>(si)], si);
    slots_[static_cast<std::size_t>(si)].conv = conv;
  }
  Slot &s = slots_[static_cast<std::size_t>(si)];
  s.used = round_;
  const std::size_t len = history.size() + 1;
  const std::size_t limit = 2 * static_cast<std::size_t>(window_);
  if (len + n > s.offset + limit || len <= s.offset) {
    const std::size_t offset = len + n > limit ? len - window_ : 0;
    if (offset != s.offset || len <= s.offset) {
      clear_slot(s, si);
      s.offset = offset;
    }
  }
  const auto at = [&](std::size_t i) { return i < history.size() ? history[i] : next; };
  std::size_t keep = 0;
  while (keep < s.tokens.size() && s.offset + keep < len && s.tokens[keep] == at(s.offset + keep)) ++keep;
  // `next` is decoded again even when the sequence holds it: its logits are the first draft's.
  keep = std::min(keep, len - s.offset - 1);
  if (keep < s.tokens.size()) {
    llama_memory_seq_rm(llama_get_memory(ctx_), si, static_cast<llama_pos>(keep), -1);
    s.tokens.resize(keep);
  }
  Want &w = wants_[n_wants_];
  w.slot = si;
  w.n = n;
  w.biases.assign(biases.begin(), biases.end());
  w.missing.clear();
  for (std::size_t i = s.offset + keep; i < len; ++i) w.missing.push_back(at(i));
  Proposal &p = proposals_[n_wants_];
  p.conv = conv;
  p.at = history.size();
  p.next = next;
  p.tokens.clear();
  ++n_wants_;
  return true;
}

bool DraftModel::decode(int n_tokens) {
  batch_.n_tokens = n_tokens;
  if (llama_decode(ctx_, batch_) == 0) return true;
  log_warning("the draft model's llama_decode failed: its context is emptied and this step drafts nothing");
  reset_all();
  return false;
}

Token DraftModel::pick(const float *logits, std::span<const LogitBias> biases) const {
  auto top = static_cast<Token>(std::max_element(logits, logits + n_vocab_) - logits);
  double best = logits[top];
  for (const LogitBias &b : biases) {
    if (b.token >= 0 && b.token < n_vocab_ && double(logits[b.token]) + b.bias > best) {
      top = b.token;
      best = double(logits[b.token]) + b.bias;
    }
  }
  if (params_.p_min > 0) {
    double sum = 0;
    for (std::int32_t i = 0; i < n_vocab_; ++i) sum += std::exp(double(logits[i]) - best);
    for (const LogitBias &b : biases) {
      if (b.token >= 0 && b.token < n_vocab_) {
        sum += std::exp(double(logits[b.token]) + b.bias - best) - std::exp(double(logits[b.token]) - best);
      }
    }
    if (1.0 / sum < params_.p_min) return -1;
  }
  return top;
}

DraftModel::Ran DraftModel::run(std::optional<double> seconds) {
  Ran ran;
  if (n_wants_ == 0) return ran;
  const auto t0 = Clock::now();
  // Room: what the round adds must fit the cells; idle sequences go first
  // (least recently used), then the last wants.
  std::size_t adds = 0;
  for (std::size_t i = 0; i < n_wants_; ++i) adds += wants_[i].missing.size() + wants_[i].n - 1;
  while (cells_held() + adds > n_ctx_) {
    int victim = -1;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot &s = slots_[i];
      if (s.conv != 0 && s.used != round_ && !s.tokens.empty() &&
          (victim < 0 || s.used < slots_[static_cast<std::size_t>(victim)].used)) {
        victim = static_cast<int>(i);
      }
    }
    if (victim >= 0) {
      clear_slot(slots_[static_cast<std::size_t>(victim)], victim);
      slots_[static_cast<std::size_t>(victim)].conv = 0;
      continue;
    }
    --n_wants_;
    adds -= wants_[n_wants_].missing.size() + wants_[n_wants_].n - 1;
    if (n_wants_ == 0) return ran;
  }
  std::size_t missing = 0;
  std::uint32_t positions = 0;
  for (std::size_t i = 0; i < n_wants_; ++i) {
    missing += wants_[i].missing.size();
    positions = std::max(positions, wants_[i].n);
  }
  if (seconds && token_s_ > 0) {
    // Catching up is what drafting needs first; then as many positions as fit.
    const double left = *seconds - token_s_ * static_cast<double>(missing);
    if (left <= 0) return ran;
    if (position_s_ > 0) positions = std::min<std::uint32_t>(positions, static_cast<std::uint32_t>(left / position_s_));
    if (positions == 0) return ran;
  }
  // Catch up, n_batch tokens a decode; each want's last token brings its first draft.
  std::size_t w = 0, k = 0;
  while (w < n_wants_) {
    int rows = 0;
    const std::size_t w0 = w;
    for (; w < n_wants_ && rows < static_cast<int>(n_batch_);) {
      Want &want = wants_[w];
      Slot &s = slots_[static_cast<std::size_t>(want.slot)];
      for (; k < want.missing.size() && rows < static_cast<int>(n_batch_); ++k) {
        batch_.token[rows] = want.missing[k];
        batch_.pos[rows] = static_cast<llama_pos>(s.tokens.size() + k);
        batch_.n_seq_id[rows] = 1;
        batch_.seq_id[rows][0] = want.slot;
        batch_.logits[rows] = k + 1 == want.missing.size();
        ++rows;
      }
      if (k < want.missing.size()) break;
      ++w;
      k = 0;
    }
    const auto d0 = Clock::now();
    if (!decode(rows)) return ran;
    ran.tokens += static_cast<std::uint32_t>(rows);
    token_s_ = learn(token_s_, std::chrono::duration<double>(Clock::now() - d0).count() / rows);
    // The wants this decode finished: their missing tokens are in; rows are in order.
    int row = 0;
    for (std::size_t i = w0; i < w; ++i) {
      Want &want = wants_[i];
      Slot &s = slots_[static_cast<std::size_t>(want.slot)];
      const std::size_t in_batch = std::min<std::size_t>(want.missing.size(), static_cast<std::size_t>(rows - row));
      row += static_cast<int>(in_batch);
      s.tokens.insert(s.tokens.end(), want.missing.begin(), want.missing.end());
      const Token t = pick(llama_get_logits_ith(ctx_, row - 1), want.biases);
      if (t >= 0) proposals_[i].tokens.push_back(t);
    }
    if (w < n_wants_ && k > 0) {
      // A want split across decodes: its first part is in.
      Want &want = wants_[w];
      Slot &s = slots_[static_cast<std::size_t>(want.slot)];
      s.tokens.insert(s.tokens.end(), want.missing.begin(), want.missing.begin() + static_cast<std::ptrdiff_t>(k));
      want.missing.erase(want.missing.begin(), want.missing.begin() + static_cast<std::ptrdiff_t>(k));
      k = 0;
    }
  }
  // One decode per further position, every conversation still drafting in it.
  for (std::uint32_t j = 1; j < positions; ++j) {
    int rows = 0;
    for (std::size_t i = 0; i < n_wants_; ++i) {
      const auto &toks = proposals_[i].tokens;
      if (toks.size() != j || wants_[i].n <= j) continue;
      Slot &s = slots_[static_cast<std::size_t>(wants_[i].slot)];
      batch_.token[rows] = toks.back();
      batch_.pos[rows] = static_cast<llama_pos>(s.tokens.size());
      batch_.n_seq_id[rows] = 1;
      batch_.seq_id[rows][0] = wants_[i].slot;
      batch_.logits[rows] = true;
      s.tokens.push_back(toks.back());
      ++rows;
    }
    if (rows == 0) break;
    const auto d0 = Clock::now();
    if (!decode(rows)) return ran;
    ran.tokens += static_cast<std::uint32_t>(rows);
    position_s_ = learn(position_s_, std::chrono::duration<double>(Clock::now() - d0).count());
    int row = 0;
    for (std::size_t i = 0; i < n_wants_; ++i) {
      auto &toks = proposals_[i].tokens;
      if (toks.size() != j || wants_[i].n <= j) continue;
      const Token t = pick(llama_get_logits_ith(ctx_, row++), wants_[i].biases);
      if (t >= 0) toks.push_back(t);
    }
  }
  ran.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return ran;
}

}  // namespace weft::detail
