// weft bench frame's workload (bench_frame_workload.hpp).
#include "bench_frame_workload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "attention_cli.hpp"

namespace weft_cli::bench_frame {

using std::chrono::steady_clock;

void close_arrival(RunResult &r, const Arrival &a) {
  r.arrival_tokens_sampled += a.gen.n_tokens();
  if (!a.first_token) ++r.arrivals_without_token;
}

RunResult run_workload(weft::Model &model, const Opts &o, double budget_ms, bool images) {
  // Room for the talkers' whole replies plus every arrival (finished ones are
  // disposed, but the cache is sized as if none were).
  const unsigned arrivals = (o.frames + o.arrive_every - 1) / o.arrive_every;
  // Pictures: each a conversation of 16 + 4 tokens, the image (16 positions
  // with the gemma3 projector, 64 for a 224-pixel qwen2vl one, and its
  // markers) and an 8-token reply.
  const unsigned pictures_n = images ? (o.frames + o.image_every - 1) / o.image_every : 0;
  const unsigned want_ctx = o.ctx != 0 ? o.ctx
                                       : o.conversations * (32 + o.frames + 1) + arrivals * (o.arrival_tokens + 32) +
                                             pictures_n * 128;
  const unsigned slots = std::min(256u, o.conversations + arrivals + pictures_n + 1);
  const auto ctx = static_cast<unsigned>(std::min<std::uint64_t>(want_ctx, std::uint64_t(model.n_ctx_train()) * slots));
  weft::Executor ex(model, {.n_ctx = std::max(ctx, o.batch),
                            .n_batch = o.batch,
                            .n_ubatch = o.ubatch,
                            .n_seq_max = slots,
                            .n_threads = o.threads,
                            .flash_attn = o.flash_attn,
                            .projector = images ? o.projector->projector : weft::Projector(),
                            .image_encoding = o.encode == "frame" ? weft::ImageEncoding::caller
                                                                  : weft::ImageEncoding::thread});
  bench::ImageArrivals pictures(images ? o.projector->projector : weft::Projector(), images ? o.image_every : 0,
                                o.image_side, 16, o.encode == "frame");
  std::mt19937_64 rng(o.seed);
  const auto n_vocab = model.n_vocab();

  // Outside the timings: a warm-up (it seeds the cost model) and the NPCs'
  // own prompts, so the frames start with N NPCs mid-conversation.
  auto w = ex.create();
  w.prompt(bench::random_tokens(rng, 64, n_vocab));
  std::vector<weft::Conversation> talkers;
  // Adapter groups: NPC i (and arrival k) under LoRA i (k) mod groups.
  auto adapt = [&o](weft::Conversation &c, unsigned i) {
    if (o.adapter_groups > 0) c.set_adapters({{o.loras->adapters[i % o.adapter_groups]}});
  };
  for (unsigned i = 0; i < o.conversations; ++i) {
    talkers.push_back(ex.create());
    adapt(talkers.back(), i);
    talkers.back().prompt(bench::random_tokens(rng, 32, n_vocab));
  }
  while (!ex.step().idle) {}
  w.dispose();
  std::vector<weft::Generation> gens;
  for (auto &t : talkers) gens.push_back(t.generate({.max_tokens = o.frames + 1}));

  RunResult r;
  r.npc_tokens.assign(o.conversations, 0);
  std::vector<std::uint64_t> npc_done(o.conversations, 0);  // tokens of finished generations
  std::vector<unsigned> npc_wait(o.conversations, 0);
  std::vector<Arrival> arriving;
  std::vector<std::uint32_t> queued_before, decoded_before;
  r.step_ms.reserve(o.frames);
  const auto budget = std::chrono::microseconds(static_cast<std::int64_t>(budget_ms * 1000));
  const auto run_start = steady_clock::now();
  for (unsigned f = 0; f < o.frames; ++f) {
    const auto frame_t0 = steady_clock::now();
    if (f % o.arrive_every == 0) {
      auto c = ex.create();
      adapt(c, r.arrivals);
      c.prompt(bench::random_tokens(rng, o.arrival_tokens, n_vocab));
      auto g = c.generate({.max_tokens = 16});  // a short reply to the new prompt
      arriving.push_back({std::move(c), std::move(g), f});
      ++r.arrivals;
    }
    queued_before.clear();
    decoded_before.clear();
    for (const auto &a : arriving) {
      queued_before.push_back(a.conv.n_queued());
      decoded_before.push_back(a.conv.n_decoded());
    }
    pictures.before_step(ex, f, rng, n_vocab);
    const bool encoding = images && pictures.encoding();
    const auto frame_start = steady_clock::now();
    weft::StepBudget b;
    if (budget_ms > 0) {
      b.max_time = budget;
      b.deadline = frame_start + std::chrono::duration_cast<steady_clock::duration>(budget * 3 / 2);
    }
    const auto res = ex.step(b);
    const double ms = std::chrono::duration<double, std::milli>(steady_clock::now() - frame_start).count();
    r.step_ms.push_back(ms);
    if (r.slowest.size() < 3 || ms > r.slowest.back().ms) {
      if (r.slowest.size() == 3) r.slowest.pop_back();
      const auto at = std::find_if(r.slowest.begin(), r.slowest.end(), [&](const StepRecord &s) { return ms > s.ms; });
      r.slowest.insert(at, {f, ms, res});
    }
    r.busy_s += ms / 1000;
    r.tokens_decoded += res.tokens_decoded;
    r.tokens_sampled += res.tokens_sampled;
    r.deadline_hits += res.deadline_hit ? 1 : 0;
    pictures.after_step(f, ms, encoding, budget_ms);
    pictures.encode_in_frame(ex);  // --encode frame: the game's own call, after the step

    // NPCs: a frame without a newly sampled token extends the NPC's wait. A
    // talker that finished keeps talking, so the load stays.
    for (std::size_t i = 0; i < talkers.size(); ++i) {
      const std::uint64_t now = npc_done[i] + gens[i].n_tokens();
      npc_wait[i] = now > r.npc_tokens[i] ? 0 : npc_wait[i] + 1;
      r.npc_longest_wait = std::max(r.npc_longest_wait, npc_wait[i]);
      r.npc_tokens[i] = now;
      if (gens[i].done()) {
        npc_done[i] = now;
        gens[i] = talkers[i].generate({.max_tokens = o.frames + 1});
      }
    }
    // Arrivals: a frame that began with input queued and decoded none of it
    // extends the wait; the first sampled token fixes the time to first token.
    for (std::size_t i = 0; i < arriving.size(); ++i) {
      auto &a = arriving[i];
      const bool progressed = a.conv.n_decoded() != decoded_before[i];
      a.ever_decoded = a.ever_decoded || progressed;
      a.wait = queued_before[i] > 0 && !progressed ? a.wait + 1 : 0;
      r.prompt_longest_wait = std::max(r.prompt_longest_wait, a.wait);
      // Starved: G frames from arrival and still nothing decoded.
      if (!a.ever_decoded && f + 1 - a.arrived == o.grace_frames) ++r.arrivals_starved;
      if (!a.first_token && a.gen.n_tokens() > 0) {
        a.first_token = true;
        r.ttft_frames.push_back(static_cast<double>(f + 1 - a.arrived));  // 1 = within its arrival frame
      }
    }
    std::erase_if(arriving, [&](Arrival &a) {
      if (!a.gen.done()) return false;
      close_arrival(r, a);
      a.conv.dispose();
      return true;
    });
    // A game's frame: the rest of it goes to the game, not to weft's step.
    if (o.frame_ms > 0) {
      std::this_thread::sleep_until(frame_t0 + std::chrono::microseconds(static_cast<std::int64_t>(o.frame_ms * 1000)));
    }
  }
  r.wall_s = std::chrono::duration<double>(steady_clock::now() - run_start).count();
  const auto st = ex.stats();
  r.adapter_switches = st.adapter_switches;
  r.adapter_switch_ms = st.adapter_switch_ms;
  r.attention = describe_attention(st);
  if (images) r.images = pictures.summary(st);
  for (const auto &a : arriving) close_arrival(r, a);
  return r;
}

double one_token_step_ms(weft::Model &model, const Opts &o) {
  weft::Executor ex(model,
                    {.n_ctx = 256, .n_batch = 64, .n_seq_max = 1, .n_threads = o.threads, .flash_attn = o.flash_attn});
  std::mt19937_64 rng(o.seed + 1);
  auto c = ex.create();
  c.prompt(bench::random_tokens(rng, 32, model.n_vocab()));
  while (!ex.step().idle) {}
  std::vector<double> ms;
  for (int i = 0; i < 21; ++i) {
    c.prompt(bench::random_tokens(rng, 1, model.n_vocab()));
    const auto t0 = steady_clock::now();
    ex.step();
    ms.push_back(std::chrono::duration<double, std::milli>(steady_clock::now() - t0).count());
  }
  return bench::percentile(ms, 50);
}

}  // namespace weft_cli::bench_frame
