// weft bench main-thread: what a game's main thread feels while the worker decodes.
//
// A background worker (Executor::start, each step budgeted --budget-ms) keeps
// 16 "talker" conversations generating at temperature 0.8. A simulated main
// thread runs 60 frames a second: each frame it calls every game-facing
// operation once, times each call on the steady clock, then sleeps to the
// next 16.67 ms boundary. Mutating calls go to 4 spare conversations so the
// talkers keep talking; a talker whose generation ended is given the next one
// (that generate() is timed too). Per call we report count and p50/p99/max
// (nearest rank) against the target p99 <= 0.1 ms and max <= 1 ms; save() may
// wait for a step boundary, so it is reported but not judged. Speed is never
// asserted (the CLI test checks only that the report is complete).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "model_cache.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_main_thread_cmd {
namespace {

using std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr double kFrameMs = 1000.0 / 60;
constexpr double kTargetP99Ms = 0.1, kTargetMaxMs = 1.0;

struct Opts {
  std::string model, preset = "small";
  double seconds = 10, budget_ms = 8;
  unsigned talkers = 16, spares = 4, save_every = 30, history_cap = 200, seed = 1;
  int threads = -1;  // -1: all hardware threads but one (the main thread's)
  bool json = false;
};

// The timed calls, in report order; save last (not judged).
enum class Call {
  prompt, tokenize, generate, cancel, set_sampler, set_priority, fork, rewind, remove, shift_left, dispose, park, prefetch,
  load, poll_events, stats, tokens, n_tokens, residency, generation, error, save, count_
};
constexpr std::array<const char *, static_cast<std::size_t>(Call::count_)> kCallNames{
    "prompt", "tokenize", "generate", "cancel", "set_sampler", "set_priority", "fork", "rewind", "remove", "shift_left",
    "dispose", "park", "prefetch", "load", "poll_events", "stats", "tokens", "n_tokens", "residency",
    "generation", "error", "save"};

struct Row {
  std::vector<double> ms;
  unsigned errors = 0;
  std::string first_error;
};

// Every call's latencies. A call that throws is timed all the same (the main
// thread felt it) and counted as an error; the frame goes on.
class Recorder {
 public:
  template <class F>
  void time(Call c, F &&f) {
    std::string failure;
    const auto t0 = steady_clock::now();
    try {
      f();
    } catch (const std::exception &e) {
      failure = e.what();
      if (failure.empty()) failure = "(no message)";
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(steady_clock::now() - t0).count();
    auto &r = rows_[static_cast<std::size_t>(c)];
    r.ms.push_back(static_cast<double>(ns) * 1e-6);
    if (!failure.empty() && r.errors++ == 0) r.first_error = std::move(failure);
  }
  const Row &row(std::size_t i) const { return rows_[i]; }

 private:
  std::array<Row, static_cast<std::size_t>(Call::count_)> rows_;
};

// Nearest rank: the smallest sample with at least p% of samples at or below it.
double nearest_rank(const std::vector<double> &sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

// Short NPC lines; the talkers and spares cycle through them.
constexpr std::array<const char *, 8> kLines{
    "The blacksmith wipes his hands and says:",
    "A guard at the gate squints at you and asks:",
    "The innkeeper leans over the counter and whispers:",
    "An old fisherman mends his net and mutters:",
    "The merchant counts her coins and replies:",
    "A child runs up, out of breath, and shouts:",
    "The priest closes the book and answers:",
    "A traveller by the fire looks up and says:"};

weft::SamplerParams warm_sampler(std::uint32_t seed) { return {.temperature = 0.8f, .seed = seed}; }

// A conversation created later and disposed a few frames on (forks, loads).
struct Pending {
  unsigned due_frame;
  weft::Conversation conv;
};

struct Result {
  Recorder rec;
  unsigned frames = 0, late_frames = 0, late_save_frames = 0;  // late: work over a frame
  double seconds = 0, worst_frame_ms = 0;
  std::uint64_t tokens_sampled = 0, steps = 0, events = 0, talker_restarts = 0;
  unsigned conversation_errors = 0;  // set by a step (a decode failure), found and cleared untimed
  std::string first_conversation_error;
  weft::ExecutorStats end_stats;
};

Result run_frames(weft::Model &model, const Opts &o) {
  // Slots: talkers and spares, forks and loaded copies in flight, headroom;
  // cells: every conversation at its history cap plus a reply.
  const std::uint32_t slots = std::min(256u, o.talkers + o.spares + 12);
  const std::uint64_t want_ctx = std::max<std::uint64_t>(8192, std::uint64_t(o.talkers + o.spares) * (o.history_cap + 64));
  const auto ctx = static_cast<std::uint32_t>(std::min<std::uint64_t>(
      want_ctx, std::uint64_t(std::max(model.n_ctx_train(), 256)) * slots));
  weft::Executor ex(model, {.n_ctx = ctx,
                            .n_batch = std::max(512u, slots),
                            .n_seq_max = slots,
                            .n_threads = o.threads,
                            .spill = {.ram_bytes = 1ull << 30},
                            .events = true});

  // Outside the timings: every prompt decoded, a spare's bytes saved for load().
  std::vector<weft::Conversation> talkers, spares;
  for (unsigned i = 0; i < o.talkers; ++i) {
    talkers.push_back(ex.create());
    talkers.back().prompt(kLines[i % kLines.size()], {.add_bos = true});
  }
  for (unsigned i = 0; i < o.spares; ++i) {
    spares.push_back(ex.create());
    spares.back().prompt(kLines[(i + 3) % kLines.size()], {.add_bos = true});
    spares.back().set_sampler(warm_sampler(o.seed * 7919 + i));
  }
  while (!ex.step().idle) {}
  const auto saved = spares.front().save();
  std::vector<std::uint32_t> talker_base, spare_base;
  for (auto &t : talkers) talker_base.push_back(t.n_tokens());
  for (auto &s : spares) spare_base.push_back(s.n_tokens());

  std::uint32_t gen_seed = o.seed * 104729;
  const auto talker_params = [&] {
    return weft::GenerateParams{.max_tokens = 48, .sampler = warm_sampler(gen_seed++)};
  };
  std::vector<weft::Generation> talker_gens, spare_gens;
  for (auto &t : talkers) talker_gens.push_back(t.generate(talker_params()));
  for (auto &s : spares) spare_gens.push_back(s.generate({.max_tokens = 8}));
  ex.start({.budget = {.max_time = std::chrono::microseconds(static_cast<std::int64_t>(o.budget_ms * 1000))}});

  Result r;
  auto &rec = r.rec;
  // A step's error holds a conversation's input back; count it, then clear
  // it, so one failure does not turn every later call on it into an error.
  const auto clear_step_error = [&](weft::Conversation &c) {
    if (auto e = c.error()) {
      if (r.conversation_errors++ == 0) r.first_conversation_error = e->what();
      c.clear_error();
    }
  };
  std::deque<Pending> pending;
  const auto period = std::chrono::duration_cast<steady_clock::duration>(std::chrono::duration<double, std::milli>(kFrameMs));
  const auto stats0 = ex.stats();
  const auto t_start = steady_clock::now(), t_end = t_start + std::chrono::duration_cast<steady_clock::duration>(
                                                                  std::chrono::duration<double>(o.seconds));
  auto frame_start = t_start;
  for (unsigned f = 0; frame_start < t_end; ++f) {
    // Events first, as a game would read them.
    rec.time(Call::poll_events, [&] { r.events += ex.poll_events().size(); });

    // Talkers: a finished generation gets the next; one past its history cap
    // is trimmed back to its prompt first (timed as rewind).
    for (std::size_t i = 0; i < talkers.size(); ++i) {
      if (!talker_gens[i].done()) continue;
      auto &t = talkers[i];
      clear_step_error(t);
      if (const std::uint32_t n = t.n_tokens(); n > o.history_cap && n > talker_base[i])
        rec.time(Call::rewind, [&] { t.rewind(n - talker_base[i]); });
      rec.time(Call::generate, [&] { talker_gens[i] = t.generate(talker_params()); });
      ++r.talker_restarts;
    }

    // A spare in rotation: stop it, edit it, park it, ask for it back, talk again.
    const std::size_t si = f % spares.size();
    auto &s = spares[si];
    clear_step_error(s);
    rec.time(Call::cancel, [&] { spare_gens[si].cancel(); });
    rec.time(Call::set_sampler, [&] { s.set_sampler(warm_sampler(o.seed * 7919 + f)); });
    rec.time(Call::set_priority, [&] { s.set_priority(static_cast<int>(f % 3)); });
    // Back to its base length (at least one token), so every edit stays in range.
    const std::uint32_t n = s.n_tokens();
    const std::uint32_t back = n > spare_base[si] ? n - spare_base[si] : std::min<std::uint32_t>(n, 1);
    rec.time(Call::rewind, [&] { s.rewind(back); });
    const std::uint32_t d1 = s.n_decoded();
    rec.time(Call::remove, [&] { s.remove(std::min(1u, d1), std::min(3u, d1)); });
    const std::uint32_t d2 = s.n_decoded();
    rec.time(Call::shift_left, [&] { s.shift_left(std::min(1u, d2), d2 > 1 ? std::min(2u, d2 - 1) : 0u); });
    rec.time(Call::park, [&] { s.park(); });
    rec.time(Call::prefetch, [&] { s.prefetch(); });
    // prompt(text) tokenizes on the caller's thread: `tokenize` is that part alone.
    const std::string line = fmt::format(" You answer: {}", kLines[f % kLines.size()]);
    rec.time(Call::tokenize, [&] { (void)model.tokenize(line); });
    rec.time(Call::prompt, [&] { s.prompt(line); });
    rec.time(Call::generate, [&] { spare_gens[si] = s.generate({.max_tokens = 8}); });

    // A fork of a talker and a loaded copy, each disposed three frames later.
    while (!pending.empty() && pending.front().due_frame <= f) {
      rec.time(Call::dispose, [&] { pending.front().conv.dispose(); });
      pending.pop_front();
    }
    auto &talker = talkers[f % talkers.size()];
    rec.time(Call::fork, [&] { pending.push_back({f + 3, talker.fork()}); });
    rec.time(Call::load, [&] { pending.push_back({f + 3, ex.load(saved)}); });

    // Readers, on a talker in rotation.
    rec.time(Call::stats, [&] { (void)ex.stats(); });
    rec.time(Call::tokens, [&] { (void)talker.tokens(); });
    rec.time(Call::n_tokens, [&] { (void)talker.n_tokens(); });
    rec.time(Call::residency, [&] { (void)talker.residency(); });
    rec.time(Call::generation, [&] { (void)talker.generation(); });
    rec.time(Call::error, [&] { (void)talker.error(); });
    const bool saved_now = f % o.save_every == 0;  // from frame 0, so even a short run has one
    if (saved_now) rec.time(Call::save, [&] { (void)s.save(); });

    // Sleep to the next boundary; a frame that overran starts the next at once.
    const auto frame_end = steady_clock::now();
    const double frame_ms = std::chrono::duration<double, std::milli>(frame_end - frame_start).count();
    r.worst_frame_ms = std::max(r.worst_frame_ms, frame_ms);
    ++r.frames;
    if (frame_ms > kFrameMs) {
      ++r.late_frames;
      if (saved_now) ++r.late_save_frames;
    }
    const auto next = frame_start + period;
    if (next > frame_end) std::this_thread::sleep_until(next);
    frame_start = std::max(next, frame_end);
  }
  const auto stats1 = ex.stats();
  r.seconds = std::chrono::duration<double>(steady_clock::now() - t_start).count();
  // The forks and loads still pending are disposed too, so even a run cut
  // to a few frames by a stall has dispose samples.
  for (auto &p : pending) rec.time(Call::dispose, [&] { p.conv.dispose(); });
  ex.stop();
  r.tokens_sampled = stats1.tokens_sampled - stats0.tokens_sampled;
  r.steps = stats1.steps - stats0.steps;
  r.end_stats = stats1;
  return r;
}

nlohmann::json row_json(const char *name, const Row &row, bool judged) {
  auto ms = row.ms;
  std::sort(ms.begin(), ms.end());
  const double p50 = nearest_rank(ms, 50), p99 = nearest_rank(ms, 99), mx = ms.empty() ? 0 : ms.back();
  nlohmann::json j{{"call", name},        {"count", ms.size()},     {"p50_ms", p50}, {"p99_ms", p99},
                   {"max_ms", mx},        {"errors", row.errors},
                   {"meets_target", judged ? nlohmann::json(p99 <= kTargetP99Ms && mx <= kTargetMaxMs)
                                           : nlohmann::json()}};
  if (row.errors > 0) j["first_error"] = row.first_error;
  return j;
}

void print_table(const nlohmann::json &doc) {
  fmt::print("| {:<12} | {:>6} | {:>8} | {:>8} | {:>8} | {:>6} | {:<6} |\n", "call", "count", "p50 ms", "p99 ms",
             "max ms", "errors", "target");
  fmt::print("|--------------|-------:|---------:|---------:|---------:|-------:|--------|\n");
  for (const auto &r : doc["rows"]) {
    const auto &m = r["meets_target"];
    fmt::print("| {:<12} | {:>6} | {:>8.4f} | {:>8.4f} | {:>8.4f} | {:>6} | {:<6} |\n", r["call"].get<std::string>(),
               r["count"].get<std::size_t>(), r["p50_ms"].get<double>(), r["p99_ms"].get<double>(),
               r["max_ms"].get<double>(), r["errors"].get<unsigned>(),
               m.is_null() ? "-" : m.get<bool>() ? "PASS" : "MISS");
  }
  for (const auto &r : doc["rows"])
    if (r.contains("first_error"))
      fmt::print("{}: {} error(s), the first: {}\n", r["call"].get<std::string>(), r["errors"].get<unsigned>(),
                 r["first_error"].get<std::string>());
}

void run(Opts o) {
  const std::string path = o.model.empty() ? ensure_preset_model(o.preset, o.preset == "npc" ? 0 : 1) : o.model;
  auto model = bench::load_model(path);
  if (o.threads < 0) o.threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()) - 1);

  auto r = run_frames(model, o);
  nlohmann::json rows = nlohmann::json::array();
  bool all_met = true;
  for (std::size_t i = 0; i < kCallNames.size(); ++i) {
    const bool judged = static_cast<Call>(i) != Call::save;
    auto j = row_json(kCallNames[i], r.rec.row(i), judged);
    if (judged) all_met = all_met && j["meets_target"].get<bool>();
    rows.push_back(std::move(j));
  }
  const double tps = r.seconds > 0 ? static_cast<double>(r.tokens_sampled) / r.seconds : 0;
  nlohmann::json doc{{"bench", "main-thread"},
                     {"model", path},
                     {"model_description", model.description()},
                     {"seconds", r.seconds},
                     {"budget_ms", o.budget_ms},
                     {"talkers", o.talkers},
                     {"spares", o.spares},
                     {"n_threads", o.threads},
                     {"frame_ms", kFrameMs},
                     {"frames", r.frames},
                     {"late_frames", r.late_frames},
                     {"late_frames_with_save", r.late_save_frames},
                     {"worst_frame_ms", r.worst_frame_ms},
                     {"tokens_sampled", r.tokens_sampled},
                     {"tokens_per_s", tps},
                     {"worker_steps", r.steps},
                     {"worker_step_ms_p50", r.end_stats.step_ms_p50},
                     {"worker_step_ms_p99", r.end_stats.step_ms_p99},
                     {"talker_restarts", r.talker_restarts},
                     {"events_polled", r.events},
                     {"conversation_errors", r.conversation_errors},
                     {"target_p99_ms", kTargetP99Ms},
                     {"target_max_ms", kTargetMaxMs},
                     {"all_met", all_met},
                     {"machine", bench::machine_info()},
                     {"rows", rows}};
  if (r.conversation_errors > 0) doc["first_conversation_error"] = r.first_conversation_error;
  if (o.json) {
    fmt::print("{}\n", doc.dump());
    return;
  }
  fmt::print("\nweft bench main-thread: model {}, {} talkers generating (temperature 0.8) on the worker "
             "(step budget max_time {:g} ms, n_threads {}), {} spares for the mutating calls; a 60 Hz main thread "
             "for {:.1f} s, load average {:.2f}\n\n",
             path, o.talkers, o.budget_ms, o.threads, o.spares, r.seconds, bench::load_average_1min());
  print_table(doc);
  fmt::print("\nworker: {} tokens sampled, {:.1f} tokens/s, {} steps (step p50 {:.2f} ms, p99 {:.2f} ms)\n",
             r.tokens_sampled, tps, r.steps, r.end_stats.step_ms_p50, r.end_stats.step_ms_p99);
  fmt::print("main thread: {} frames, {} late (work over {:.2f} ms; {} of them called save; the worst {:.2f} ms), "
             "{} talker restarts, {} events polled\n",
             r.frames, r.late_frames, kFrameMs, r.late_save_frames, r.worst_frame_ms, r.talker_restarts, r.events);
  if (r.conversation_errors > 0)
    fmt::print("conversation errors set by steps (cleared, then the run went on): {}, the first: {}\n",
               r.conversation_errors, r.first_conversation_error);
  fmt::print("target: p99 <= {:g} ms and max <= {:g} ms for every call but save (it may wait for a step "
             "boundary, so it is reported, not judged): {}\n",
             kTargetP99Ms, kTargetMaxMs, all_met ? "all PASS" : "some MISS");
}

}  // namespace
}  // namespace bench_main_thread_cmd

void add_bench_main_thread(CLI::App &bench) {
  using namespace bench_main_thread_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand(
      "main-thread", "A 60 Hz game thread calling every API while the worker decodes: per-call latency");
  auto *model = cmd->add_option("-m,--model", o->model, "GGUF model (default: the --preset model)");
  cmd->add_option("--preset", o->preset, "Generated model when no --model: small | npc | tiny (made on first use)")
      ->check(CLI::IsMember({"small", "npc", "tiny"}))
      ->excludes(model)
      ->capture_default_str();
  cmd->add_option("--seconds", o->seconds, "Length of the run")->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  cmd->add_option("--budget-ms", o->budget_ms, "The worker's step budget (WorkerParams max_time), ms")
      ->check(CLI::Range(0.01, 10000.0))
      ->capture_default_str();
  cmd->add_option("-n,--talkers", o->talkers, "Conversations generating all the time")
      ->check(CLI::Range(1u, 200u))
      ->capture_default_str();
  cmd->add_option("--save-every", o->save_every, "Frames between save() calls")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--history-cap", o->history_cap, "A talker longer than this is rewound to its prompt")
      ->check(CLI::Range(16u, 4096u))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Worker CPU threads (default: all but one, kept for the main thread)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--seed", o->seed, "Sampler seeds")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the table");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
