// The mixed workload: generation, the open-loop driver, the weft engine and
// the summary. The llama-server engine is in bench_mixed_server.cpp.
#include "bench_mixed.hpp"

#include "attention_cli.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <deque>
#include <numeric>
#include <random>
#include <thread>

#include <unistd.h>

#include "bench_common.hpp"

namespace weft_cli::bench {

Workload make_workload(const WorkloadParams &p, std::int32_t n_vocab, weft::Token bos) {
  std::mt19937_64 rng(p.seed);
  // Prompts skip the first 259 ids (control and byte tokens) so both engines
  // see ordinary text tokens; the values do not change the speed.
  constexpr std::int32_t kFirstText = 259;
  const std::int32_t lo = n_vocab > 2 * kFirstText ? kFirstText : 0;
  Workload w;
  if (bos >= 0) w.system.push_back(bos);
  auto sys = random_tokens(rng, p.system_tokens, n_vocab, lo);
  w.system.insert(w.system.end(), sys.begin(), sys.end());
  std::exponential_distribution<double> gap(p.rate);
  double t = 0;
  for (unsigned i = 0; i < p.conversations; ++i) {
    Request r;
    r.arrival = t;
    t += gap(rng);
    const auto n_prompt = p.prompt_min + static_cast<unsigned>(rng() % (p.prompt_max - p.prompt_min + 1));
    r.n_out = p.output_min + static_cast<unsigned>(rng() % (p.output_max - p.output_min + 1));
    r.user = random_tokens(rng, n_prompt, n_vocab, lo);
    w.requests.push_back(std::move(r));
  }
  return w;
}

namespace {

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

std::vector<weft::Token> invalid_utf8_tokens(const weft::Model &model) {
  std::vector<weft::Token> out;
  for (weft::Token t = 0; t < model.n_vocab(); ++t)
    if (!valid_utf8(model.token_piece(t))) out.push_back(t);
  return out;
}

std::vector<Trace> drive(Target &target, const Workload &w, unsigned slots, double timeout_s, bool progress) {
  std::vector<Trace> traces(w.requests.size());
  for (std::size_t i = 0; i < traces.size(); ++i) traces[i].arrival = w.requests[i].arrival;
  target.warm_up(w);
  const bool tty = progress && ::isatty(STDERR_FILENO) != 0;
  target.origin_ns = now_ns();
  const auto secs = [&] { return seconds_since(target.origin_ns); };

  std::size_t next = 0, done = 0;
  unsigned active = 0;
  std::deque<std::size_t> waiting;
  std::vector<std::size_t> finished;
  double last_draw = -1;
  while (done < traces.size()) {
    const double now = secs();
    if (now > timeout_s) {
      target.abort();
      if (tty) fmt::print(stderr, "\n");
      throw weft::Error(weft::Errc::cancelled,
                        fmt::format("{}: the mixed workload did not finish within --timeout {} s ({} of {} "
                                    "conversations done, {} running, {} waiting)",
                                    target.name(), timeout_s, done, traces.size(), active, waiting.size()));
    }
    while (next < traces.size() && w.requests[next].arrival <= now) waiting.push_back(next++);
    while (!waiting.empty() && active < slots) {
      const std::size_t i = waiting.front();
      waiting.pop_front();
      traces[i].start = now;
      target.start(i, w.requests[i], traces[i]);
      ++active;
    }
    // Work until the next arrival, a finished request, or at most 100 ms.
    const double until = std::min({next < traces.size() ? w.requests[next].arrival : now + 0.1, now + 0.1, timeout_s});
    finished.clear();
    target.pump(until, finished);
    active -= static_cast<unsigned>(finished.size());
    done += finished.size();
    if (tty && (now - last_draw > 0.5 || done == traces.size())) {
      fmt::print(stderr, "\r{}: {}/{} done, {} running, {} waiting, {:.0f} s   ", target.name(), done, traces.size(),
                 active, waiting.size(), now);
      last_draw = now;
    }
  }
  if (tty) fmt::print(stderr, "\n");
  return traces;
}

namespace {

nlohmann::json quantiles(const std::vector<double> &v) {
  nlohmann::json j = nlohmann::json::object();
  for (double p : {50.0, 90.0, 99.0}) j[fmt::format("p{}", p)] = percentile(v, p);
  j["max"] = v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  j["mean"] = v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return j;
}

// The curve for the latency plot.
nlohmann::json curve(const std::vector<double> &v) {
  nlohmann::json j = nlohmann::json::array();
  for (double p : {1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 100.0})
    j.push_back({p, percentile(v, p)});
  return j;
}

}  // namespace

nlohmann::json summarize(const std::string &engine, const Workload &w, const std::vector<Trace> &traces) {
  std::vector<double> ttft, itl, e2e, wait;
  std::uint64_t generated = 0, wanted = 0, prompt = 0, cached = 0, merged = 0, complete = 0;
  double first_arrival = 1e300, last_end = 0;
  nlohmann::json errors = nlohmann::json::array();
  for (std::size_t i = 0; i < traces.size(); ++i) {
    const Trace &t = traces[i];
    const Request &r = w.requests[i];
    wanted += r.n_out;
    generated += t.tokens;
    prompt += w.system.size() + r.user.size();
    cached += t.prompt_cached;
    first_arrival = std::min(first_arrival, t.arrival);
    if (!t.error.empty()) {
      if (errors.size() < 5) errors.push_back(fmt::format("conversation {}: {}", i, t.error));
      continue;
    }
    if (t.tokens == r.n_out) ++complete;
    if (t.first >= 0) ttft.push_back((t.first - t.arrival) * 1e3);
    if (t.end >= 0) {
      e2e.push_back(t.end - t.arrival);
      last_end = std::max(last_end, t.end);
    }
    wait.push_back((t.start - t.arrival) * 1e3);
    // A chunk of k tokens after a gap g counts as k intervals of g/k; the
    // extra tokens of a first chunk have no interval we could know.
    for (std::size_t c = 0; c < t.chunks.size(); ++c) {
      const auto [time, k] = t.chunks[c];
      merged += k - 1;
      if (c == 0) continue;
      const double gap = (time - t.chunks[c - 1].first) * 1e3 / k;
      for (std::uint32_t n = 0; n < k; ++n) itl.push_back(gap);
    }
  }
  const double makespan = std::max(1e-9, last_end - first_arrival);
  return {{"engine", engine},
          {"conversations", traces.size()},
          {"completed", complete},
          {"errors", errors},
          {"generated_tokens", generated},
          {"wanted_tokens", wanted},
          {"prompt_tokens", prompt},
          {"prompt_tokens_cached", cached},
          {"merged_tokens", merged},
          {"makespan_s", makespan},
          {"tokens_per_s", static_cast<double>(generated) / makespan},
          {"prompt_tokens_per_s", static_cast<double>(prompt - cached) / makespan},
          {"ttft_ms", quantiles(ttft)},
          {"itl_ms", quantiles(itl)},
          {"e2e_s", quantiles(e2e)},
          {"queue_wait_ms", quantiles(wait)},
          {"itl_curve_ms", curve(itl)},
          {"ttft_curve_ms", curve(ttft)}};
}

namespace {

// weft in-process: the driver's thread steps the executor, as a game loop would.
class WeftTarget final : public Target {
 public:
  WeftTarget(const weft::Model &model, const TargetParams &p)
      : p_(p),
        ex_(model, {.n_ctx = p.ctx,
                    .n_batch = p.batch,
                    .n_ubatch = p.ubatch,
                    .n_seq_max = p.slots + (p.fork_system ? 1 : 0),  // + the shared system prompt's conversation
                    .n_threads = p.threads,
                    .flash_attn = p.flash_attn,
                    .max_prompt_chunk = p.max_chunk}) {}

  std::string name() const override { return "weft"; }

  void warm_up(const Workload &w) override {
    system_ = &w.system;
    if (!p_.fork_system) return;  // cold: prefix reuse shares what the first decode
    root_ = ex_.create();
    root_.prompt(w.system);
    while (!ex_.step().idle) {
    }
    system_tokens_ = static_cast<std::uint32_t>(w.system.size());
  }

  void start(std::size_t index, const Request &r, Trace &trace) override {
    Live l{index, p_.fork_system ? root_.fork() : ex_.create(), {}, &trace, r.n_out, 0};
    if (p_.fork_system) {
      trace.prompt_cached = system_tokens_;  // shared through fork, never decoded again
    } else {
      l.conv.prompt(*system_);  // the whole prompt, as a client sends it
    }
    l.conv.prompt(r.user);
    l.gen = l.conv.generate(params(l, r.n_out));
    live_.push_back(std::move(l));
  }

  void pump(double until, std::vector<std::size_t> &finished) override {
    if (live_.empty()) {
      const double left = until - seconds_since(origin_ns);
      if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
      return;
    }
    weft::StepBudget budget{.max_tokens = p_.step_tokens};
    if (p_.step_ms > 0) budget.max_time = std::chrono::milliseconds(p_.step_ms);
    ex_.step(budget);
    for (auto it = live_.begin(); it != live_.end();) {
      Live &l = *it;
      if (!l.gen.done()) {
        ++it;
        continue;
      }
      const auto reason = l.gen.reason();
      l.produced += static_cast<std::uint32_t>(l.gen.n_tokens());
      // Under a JSON schema a complete object ends the reply (no ignore_eos).
      const bool ended = reason == weft::FinishReason::end_of_generation && !p_.json_schema.empty();
      if (reason != weft::FinishReason::max_tokens && !ended) {
        const auto res = l.gen.result();
        l.trace->error = fmt::format("generation ended with {}{}", weft::finish_reason_name(reason),
                                     res.error ? ": " + std::string(res.error->what()) : "");
      }
      l.conv.dispose();
      finished.push_back(l.index);
      it = live_.erase(it);
    }
  }

  void abort() override {
    for (auto &l : live_) l.conv.dispose();
    live_.clear();
  }

  nlohmann::json prefix_stats() const {
    const auto s = ex_.stats();
    return {{"tokens_decoded", s.tokens_decoded},
            {"prefix_tokens_reused", s.prefix_tokens_reused},
            {"prefix_hits", s.prefix_hits},
            {"prefix_cache_hits", s.prefix_cache_hits},
            {"prefix_misses", s.prefix_misses},
            {"prefix_evictions", s.prefix_evictions}};
  }

  nlohmann::json settings() const override {
    const auto s = ex_.stats();
    return {{"n_ctx", s.n_ctx},
            {"n_batch", p_.batch},
            {"n_ubatch", p_.ubatch},
            {"n_seq_max", p_.slots + (p_.fork_system ? 1 : 0)},
            {"step_tokens", p_.step_tokens},
            {"step_ms", p_.step_ms},
            {"max_prompt_chunk", p_.max_chunk},
            {"n_threads", p_.threads},
            {"flash_attn_asked", flash_attn_name(p_.flash_attn)},
            {"attention", describe_attention(s)},
            // Over the last 1024 steps: what the ITL percentiles are made of.
            {"steps", s.steps},
            {"step_ms_p50", s.step_ms_p50},
            {"step_ms_p99", s.step_ms_p99},
            {"decode_ms_p50", s.decode_ms_p50}};
  }

 private:
  struct Live {
    std::size_t index;
    weft::Conversation conv;
    weft::Generation gen;
    Trace *trace;
    std::uint32_t n_out, produced;
  };

  weft::GenerateParams params(const Live &l, std::uint32_t n) {
    Trace *trace = l.trace;
    const std::int64_t origin = origin_ns;
    weft::GenerateParams gp{.max_tokens = n, .on_token = [trace, origin](weft::Token, std::string_view) {
                              const double t = seconds_since(origin);
                              if (trace->first < 0) trace->first = t;
                              trace->chunks.emplace_back(t, 1);
                              ++trace->tokens;
                              trace->end = t;
                            },
                            .ignore_eos = p_.json_schema.empty()};  // as llama-server is told
    if (!p_.json_schema.empty()) gp.sampler = weft::SamplerParams{.json_schema = p_.json_schema};
    return gp;
  }

  TargetParams p_;
  weft::Executor ex_;
  weft::Conversation root_;
  const std::vector<weft::Token> *system_ = nullptr;
  std::uint32_t system_tokens_ = 0;
  std::vector<Live> live_;
};

}  // namespace

std::unique_ptr<Target> make_weft_target(const weft::Model &model, const TargetParams &p) {
  return std::make_unique<WeftTarget>(model, p);
}

nlohmann::json weft_prefix_stats(const Target &weft_target) {
  return dynamic_cast<const WeftTarget &>(weft_target).prefix_stats();
}

}  // namespace weft_cli::bench
