// Speculative decoding inside the batch: generations draft the tokens they
// expect (sched/draft_lookup.hpp), the step decodes each draft after its
// sampled token in the same llama_decode, logits at every position, and the
// sampler verifies them position by position as it would sample one step at
// a time. The plan gives drafts only what the budgets and cells leave after
// everyone's own tokens, and (adaptive) only as many as raise the step's
// predicted tokens per second.
#include <algorithm>
#include <chrono>

#include "core/internal.hpp"
#include "core/logprobs.hpp"
#include "exec/executor_core.hpp"
#include "sched/draft_lookup.hpp"

namespace weft::detail {
ExecutorCore::DraftRoom ExecutorCore::draft_room_locked(const StepBudget &budget, std::uint32_t token_budget,
                                                        std::uint32_t free_cells, std::optional<double> left,
                                                        double depth) const {
  std::uint32_t planned = 0;
  for (const auto &e : scratch.planning.entries) planned += e.n_tokens;
  DraftRoom room{.tokens = token_budget > planned ? token_budget - planned : 0,
                 .cells = free_cells > planned ? free_cells - planned : 0,
                 .seconds = left,
                 .depth = depth};
  if (budget.deadline) {
    // The first micro-batch runs to its end whatever the deadline: drafts
    // must not make it overrun.
    const double until =
        std::chrono::duration<double>(*budget.deadline - std::chrono::steady_clock::now()).count();
    room.seconds = room.seconds ? std::min(*room.seconds, until) : until;
  }
  if (budget.deadline && !budget.max_time) {
    // The depth a time budget would have used.
    room.depth = depth_is_cells() ? kv->cells_held() : planned_depth_locked();
  }
  return room;
}

void ExecutorCore::plan_drafts_locked(StepPlan &plan, const DraftRoom &room) {
  constexpr std::uint64_t kExplore = 16;
  // A recurrent state cannot drop a rejected draft; a window's cells may be
  // reused by the drafts' positions and are not there to go back to.
  if (plan.segments.empty() || !kv->family().plain()) return;
  std::uint32_t planned = 0;
  for (const auto &s : plan.segments) planned += s.n;
  const std::uint32_t most = std::min(room.tokens, room.cells);
  if (most == 0) return;
  auto &cands = scratch.planning.draft_candidates;  // reused: no allocation in a steady state
  auto &offers = scratch.planning.draft_offers;
  cands.clear();
  offers.clear();
  for (std::uint32_t i = 0; i < plan.segments.size(); ++i) {
    Segment &s = plan.segments[i];
    Conv &c = *s.conv;
    if (!c.gen || c.error || !c.gen_token_queued || s.n != 1 || c.n_queued() != 1) continue;
    const SpeculativeParams &sp = c.gen->spec;
    if (sp.drafter == Drafter::none) continue;
    std::size_t produced = 0;
    {
      std::lock_guard glock(c.gen->mu);
      produced = c.gen->result.tokens.size();
    }
    // The queued token is the generation's already: what follows it, within
    // max_tokens and the context (the verified tokens' last one is queued).
    const std::size_t left = c.gen->params.max_tokens > produced ? c.gen->params.max_tokens - produced : 0;
    const std::uint32_t ctx_left = n_ctx > c.n_decoded() + 2 ? n_ctx - c.n_decoded() - 2 : 0;
    const std::uint32_t cap = static_cast<std::uint32_t>(
        std::min<std::size_t>({sp.max_draft, left > 0 ? left - 1 : 0, ctx_left, most}));
    if (cap == 0) continue;
    const auto at = static_cast<std::uint32_t>(plan.drafts.size());
    plan.drafts.resize(at + cap);
    std::uint32_t n = 0;
    if (sp.drafter == Drafter::lookup) {
      n = lookup_draft(c.history, c.queue[0], sp.ngram_min, sp.ngram_max, std::span(plan.drafts).subspan(at, cap));
    } else if (const GenState &g = *c.gen; g.proposal_at == c.history.size() && g.proposal_next == c.queue[0]) {
      n = static_cast<std::uint32_t>(std::min<std::size_t>(cap, g.proposal.size()));
      std::copy_n(g.proposal.begin(), n, plan.drafts.begin() + at);
    }
    plan.drafts.resize(at + n);
    if (n == 0) continue;
    const double rate = c.gen->spec_rate();
    double value = 1;
    for (std::uint32_t j = 0; j < n; ++j) {
      value *= rate;
      offers.push_back({value, !sp.adaptive, static_cast<std::uint32_t>(cands.size())});
    }
    cands.push_back({i, at, n});
  }
  if (offers.empty()) return;
  // Forced ones first, then the likeliest kept: for every total the best
  // set is a prefix, and each candidate's is a prefix of its proposal.
  std::stable_sort(offers.begin(), offers.end(), [](const DraftOffer &a, const DraftOffer &b) {
    return a.forced != b.forced ? a.forced : a.value > b.value;
  });
  std::uint32_t forced = 0;
  while (forced < offers.size() && offers[forced].forced) ++forced;
  const auto cap = static_cast<std::uint32_t>(std::min<std::size_t>(offers.size(), most));
  const double sample_s = cost.sample_seconds();
  // The step's expected tokens (each planned token moves someone on; a
  // draft token by its chance) per predicted second, for `d` drafts; -1
  // where it does not fit the time left.
  const auto rate_of = [&](std::uint32_t d, double kept) {
    const double t = cost.predict(planned + d, room.depth);
    if (room.seconds && d > 0 && t * cost.margin(planned + d) + sample_s * kept > *room.seconds) return -1.0;
    return (planned + kept) / std::max(1e-9, t + sample_s * kept);
  };
  std::uint32_t best = 0, fits = 0;
  double best_rate = rate_of(0, 0), kept = 0;
  for (std::uint32_t d = 1; d <= cap; ++d) {
    kept += offers[d - 1].value;
    const double r = rate_of(d, kept);
    if (r < 0) break;  // more only costs more time
    fits = d;
    if (d <= forced || r > best_rate) {
      best = d;
      best_rate = std::max(best_rate, r);
    }
  }
  // The cost model knows only the batch sizes it has seen, and a size the
  // plan never chooses it never sees: one step in kExplore offers all that
  // fits, so a prediction too dear for a larger decode is corrected (a step
  // at most that much slower where drafts truly do not pay).
  if (best < fits && stats.steps % kExplore == 0) best = fits;
  for (std::uint32_t k = 0; k < best; ++k) ++cands[offers[k].cand].take;
  // Compact the proposals to what was taken; one not drafted at all is
  // followed in the shadow (below).
  std::uint32_t out = 0;
  for (const DraftCandidate &cd : cands) {
    GenState &g = *plan.segments[cd.seg].conv->gen;
    if (cd.take > 0) {
      g.shadow.clear();
    } else if (g.shadow.empty()) {
      g.shadow.assign(plan.drafts.begin() + cd.at, plan.drafts.begin() + cd.at + cd.n);
      g.shadow_at = 0;
    }
    if (cd.take == 0) continue;
    Segment &s = plan.segments[cd.seg];
    std::copy_n(plan.drafts.begin() + cd.at, cd.take, plan.drafts.begin() + out);
    s.draft_at = out;
    s.draft = cd.take;
    s.n = 1 + cd.take;
    out += cd.take;
  }
  plan.drafts.resize(out);
}

void ExecutorCore::run_drafter_locked(std::optional<double> seconds, StepResult &result,
                                      std::unique_lock<std::mutex> &lock) {
  if (!kv->family().plain()) return;
  auto &turns = scratch.planning.drafting;
  turns.clear();
  for (auto &[id, owned] : convs.all) {
    Conv &c = *owned;
    if (!c.gen || c.error || c.disposed || !c.gen_token_queued || c.n_queued() != 1) continue;
    c.gen->proposal.clear();
    // The draft model sees neither images nor adapters.
    if (c.gen->spec.drafter == Drafter::model && c.media.empty() && !c.next_adapters()) {
      turns.emplace_back(c.gen->draft_turn, &c);
    }
  }
  if (turns.empty()) return;
  // More than the draft context's sequences take turns: who waited longest first.
  std::sort(turns.begin(), turns.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first < b.first : a.second->id < b.second->id;
  });
  drafter->begin();
  bool any = false;
  for (auto [turn, cp] : turns) {
    Conv &c = *cp;
    GenState &g = *c.gen;
    std::size_t produced = 0;
    {
      std::lock_guard glock(g.mu);
      produced = g.result.tokens.size();
    }
    const std::size_t left = g.params.max_tokens > produced ? g.params.max_tokens - produced : 0;
    const std::uint32_t ctx_left = n_ctx > c.n_decoded() + 2 ? n_ctx - c.n_decoded() - 2 : 0;
    const auto cap = static_cast<std::uint32_t>(std::min<std::size_t>({g.spec.max_draft, left > 0 ? left - 1 : 0, ctx_left}));
    if (cap == 0) continue;
    // Adaptive: no further than a token the plan would weigh under 1/8.
    std::uint32_t n = cap;
    if (g.spec.adaptive) {
      const double r = g.spec_rate();
      double v = r;
      for (n = 1; n < cap && v * r >= 0.125; ++n) v *= r;
    }
    const SamplerParams &sp = g.params.sampler ? *g.params.sampler : c.sampler_params;
    if (!drafter->want(c.id, c.history, c.queue[0], n, sp.logit_bias)) break;  // the round is full
    g.draft_turn = stats.steps;
    any = true;
  }
  if (!any) return;
  lock.unlock();  // the draft context is the stepper's alone
  const DraftModel::Ran ran = drafter->run(seconds);
  lock.lock();
  stats.draft_model_tokens += ran.tokens;
  stats.draft_model_s += ran.seconds;
  result.draft_seconds += ran.seconds;
  for (DraftModel::Proposal &p : drafter->proposals()) {
    Conv *c = convs.find(p.conv);
    if (c == nullptr || !c->gen || p.tokens.empty()) continue;
    c->gen->proposal.swap(p.tokens);  // the buffers go round
    c->gen->proposal_at = p.at;
    c->gen->proposal_next = p.next;
  }
}

void follow_shadow(GenState &g, Token token) {
  if (g.shadow.empty()) return;
  // The proposal ends at its first miss (or its end): as a verification
  // would have kept that much.
  const bool hit = token == g.shadow[g.shadow_at];
  if (hit) ++g.shadow_at;
  if (!hit || g.shadow_at == g.shadow.size()) {
    g.learn_spec(g.shadow_at, g.shadow_at + (hit ? 0 : 1));
    g.shadow.clear();
  }
}

void ExecutorCore::prepare_spec_job_locked(SampleJob &job, std::span<const Token> draft) {
  job.draft = draft;
  GenState &g = *job.gen;
  {
    std::lock_guard glock(g.mu);
    const std::size_t produced = g.result.tokens.size();
    job.remaining = g.params.max_tokens > produced ? static_cast<std::uint32_t>(g.params.max_tokens - produced) : 0;
  }
  // A stop string can begin in the text so far: its last (longest - 1) bytes.
  std::size_t longest = 0;
  for (const auto &stop : g.params.stop) longest = std::max(longest, stop.size());
  job.stop_tail.clear();
  if (longest > 1 && g.stream) {
    const std::string &text = g.stream->text();
    job.stop_tail = text.substr(text.size() - std::min(text.size(), longest - 1));
  }
}

void ExecutorCore::sample_spec_job(SampleJob &job, std::span<const float *const> rows) {
  const auto s0 = std::chrono::steady_clock::now();
  job.tokens.clear();
  job.logprobs.clear();
  job.accepted = 0;
  job.ended = false;
  try {
    decoder->before_sample();
    if (job.new_text) job.sampler->start_text();
    const GenerateParams &p = job.gen->params;
    std::string &probe = job.stop_tail;  // the text's end, then each token's piece
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const std::span<const float> lg(rows[k], static_cast<std::size_t>(n_vocab));
      const Token t = job.sampler->sample(lg, p.ignore_eos);
      job.sampler->accept(t);
      if (p.logprobs) job.logprobs.push_back(token_logprob(lg, t, p.top_logprobs));
      job.tokens.push_back(t);
      // Where the generation ends, the sampler goes no further: its state
      // is then what sampling one token a step leaves.
      bool ends = model.is_eog(t) || job.tokens.size() >= job.remaining;
      if (!ends && !p.stop.empty()) {
        const std::size_t before = probe.size();
        probe += model.token_piece(t);
        for (const auto &stop : p.stop) {
          const std::size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
          if (probe.find(stop, from) != std::string::npos) ends = true;
        }
      }
      job.ended = ends;
      const bool kept = k + 1 < rows.size() && t == job.draft[k];
      if (kept) ++job.accepted;
      if (ends || !kept) break;
    }
    job.token = job.tokens.back();
  } catch (const Error &e) {
    job.error = e;
  }
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
}

void ExecutorCore::commit_spec_part(Segment &s, const Part &part, StepResult &result) {
  Conv &c = *s.conv;
  const std::uint32_t n = part.n;
  s.done += n;
  result.tokens_decoded += n;
  result.tokens_drafted += s.draft;
  stats.tokens_drafted += s.draft;
  if (!s.counted) {
    s.counted = true;
    ++result.conversations;
  }
  SampleJob &job = scratch.run.early[static_cast<std::size_t>(part.job)];
  job.done = true;
  if (c.disposed || c.epoch != s.epoch) {
    // Changed while it decoded: reconcile takes every cell out again.
    kv->commit_stale(c.kv, n);
    release_sampler_locked(c);
    convs.mark_dirty(c);
    return;
  }
  release_sampler_locked(c);
  // The tokens are the generation's only when nothing changed it meanwhile
  // (as finish_sample_locked checks; the queue holds just the decoded token).
  const bool take = !job.error && c.gen == job.gen && c.epoch == job.epoch && c.n_queued() == 1 && !closed;
  if (!job.error) cost.observe_sample(job.seconds / static_cast<double>(std::max<std::size_t>(1, job.tokens.size())));
  // Kept drafts are in the cache already: they join the generation first,
  // and only as many as it takes (a stop string may end it on one).
  std::uint32_t keep = 0;
  FinishReason reason = FinishReason::running;
  const auto gen = c.gen;
  if (take) {
    for (; keep < job.accepted && reason == FinishReason::running; ++keep) {
      std::optional<TokenLogprob> lp;
      if (keep < job.logprobs.size()) lp = std::move(job.logprobs[keep]);
      reason = emit_token_locked(c, gen, job.tokens[keep], std::move(lp), false, result);
    }
    const std::uint32_t tested = job.accepted + (job.tokens.size() > job.accepted && job.accepted < s.draft ? 1 : 0);
    gen->learn_spec(job.accepted, tested);
    std::lock_guard glock(gen->mu);
    gen->result.drafted += s.draft;
    gen->result.accepted += keep;
  } else if (!c.disposed && c.gen == job.gen && c.epoch == job.epoch && c.n_queued() == 1 && !closed && job.error) {
    finish_generation_locked(c, FinishReason::error, *job.error);
  }
  result.drafts_accepted += keep;
  stats.drafts_accepted += keep;
  // The sampled token and the kept drafts enter the history; the rest's
  // cells leave the cache.
  auto &decoded = scratch.run.spec_tokens;
  decoded.assign(1, c.queue[0]);
  decoded.insert(decoded.end(), job.draft.begin(), job.draft.begin() + keep);
  kv->commit(c.kv, decoded, adapter_key(s.adapters.get()));
  roll_back_locked(c);
  c.spans.record(c.n_decoded(), static_cast<std::uint32_t>(decoded.size()), s.adapters);
  c.history.insert(c.history.end(), decoded.begin(), decoded.end());
  c.queue.pop_front(1);
  c.has_logits = false;
  c.gen_token_queued = false;
  c.turns.last_served = stats.steps;
  if (take && reason == FinishReason::running && job.tokens.size() > job.accepted) {
    std::optional<TokenLogprob> lp;
    if (job.logprobs.size() == job.tokens.size()) lp = std::move(job.logprobs.back());
    emit_token_locked(c, gen, job.tokens.back(), std::move(lp), true, result);  // queued: decoded next step
    return;
  }
  // Ended on a kept draft, or nothing taken: the logits of its last token
  // come back by decoding it again.
  if (!c.disposed) ensure_logits_locked(c);
}

}  // namespace weft::detail
