// weft bench mixed --wire: the mixed workload over HTTP, to `weft serve` and
// to llama-server in two configurations (its defaults as bench mixed starts
// it, and -b/-ub = weft's step budget), plus weft in-process for the HTTP
// overhead; repeated, the order reversed every other repetition.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "bench_common.hpp"
#include "bench_mixed.hpp"

namespace weft_cli::bench {
namespace {

// The engines of one repetition, in the order of the odd ones.
struct Engine {
  std::string label;
  enum { weft_serve, llama_defaults, llama_tuned, weft_in_process } kind;
};

std::vector<Engine> engines_for(const std::string &target) {
  std::vector<Engine> out;
  if (target != "server") out.push_back({"weft-serve", Engine::weft_serve});
  if (target != "weft") {
    out.push_back({"llama-server", Engine::llama_defaults});
    out.push_back({"llama-server-b=step", Engine::llama_tuned});
  }
  if (target != "server") out.push_back({"weft", Engine::weft_in_process});
  return out;
}

std::unique_ptr<Target> make(const Engine &e, const weft::Model &model, const TargetParams &p) {
  switch (e.kind) {
    case Engine::weft_serve: return make_weft_serve_target(p);
    case Engine::llama_defaults: return make_server_target(p, e.label);
    case Engine::llama_tuned: {
      // A fair user tunes llama-server's batch to weft's step budget.
      TargetParams q = p;
      q.batch = q.ubatch = p.step_tokens;
      return make_server_target(q, e.label);
    }
    case Engine::weft_in_process: break;
  }
  return make_weft_target(model, p);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double at(const nlohmann::json &r, const char *key, const char *q = nullptr) {
  return q ? r[key][q].get<double>() : r[key].get<double>();
}

// The metrics the tables show: [json key, quantile] pairs.
const std::vector<std::pair<const char *, const char *>> kMetrics = {
    {"tokens_per_s", nullptr}, {"ttft_ms", "p50"}, {"ttft_ms", "p99"}, {"itl_ms", "p50"},
    {"itl_ms", "p99"},         {"itl_ms", "mean"}, {"e2e_s", "p50"},   {"e2e_s", "p99"}};

std::string metric_name(const std::pair<const char *, const char *> &m) {
  return m.second ? fmt::format("{}.{}", m.first, m.second) : m.first;
}

}  // namespace

nlohmann::json run_wire(const weft::Model &model, const Workload &w, const TargetParams &p, const WireParams &wp) {
  const auto engines = engines_for(wp.target);
  nlohmann::json runs = nlohmann::json::array(), settings = nlohmann::json::object();
  std::map<std::string, std::vector<nlohmann::json>> by_engine;
  std::string failures;
  for (unsigned rep = 0; rep < wp.reps; ++rep) {
    auto order = engines;
    if (rep % 2 == 1) std::reverse(order.begin(), order.end());  // A B, B A: drifting load favours neither
    nlohmann::json results = nlohmann::json::array(), loads = nlohmann::json::array();
    for (const auto &e : order) {
      loads.push_back(load_average_1min());
      // One engine at a time: the others must not compete for the cores.
      auto target = make(e, model, p);
      std::vector<Trace> traces;
      try {
        traces = drive(*target, w, p.slots, wp.timeout_s, !wp.quiet);
      } catch (const weft::Error &err) {
        throw weft::Error(err.code(), fmt::format("{} (repetition {})", err.what(), rep + 1));
      }
      settings[e.label] = target->settings();
      target.reset();  // stops the server before the next engine runs
      auto r = summarize(e.label, w, traces);
      r["repetition"] = rep + 1;
      if (!r["errors"].empty()) failures += fmt::format("\n  {} (repetition {}): {}", e.label, rep + 1, r["errors"].dump());
      by_engine[e.label].push_back(r);
      results.push_back(std::move(r));
    }
    loads.push_back(load_average_1min());
    runs.push_back({{"repetition", rep + 1}, {"load_average_1min", loads}, {"results", std::move(results)}});
  }

  // Medians over the repetitions, per engine.
  nlohmann::json medians = nlohmann::json::object();
  for (const auto &e : engines) {
    auto &m = medians[e.label];
    for (const auto &metric : kMetrics) {
      std::vector<double> v;
      for (const auto &r : by_engine[e.label]) v.push_back(at(r, metric.first, metric.second));
      m[metric_name(metric)] = median(v);
    }
  }
  // Ratios within each repetition (the engines ran minutes apart, not
  // hours), then their medians.
  nlohmann::json ratios = nlohmann::json::object();
  auto ratio = [&](const std::string &name, const std::string &a, const std::string &b, const char *key,
                   const char *q, bool difference) {
    if (!by_engine.count(a) || !by_engine.count(b)) return;
    std::vector<double> per;
    for (unsigned i = 0; i < wp.reps; ++i) {
      const double x = at(by_engine[a][i], key, q), y = at(by_engine[b][i], key, q);
      per.push_back(difference ? x - y : (y > 0 ? x / y : 0));
    }
    ratios[name] = {{"median", median(per)}, {"per_repetition", per}};
  };
  for (const char *peer : {"llama-server", "llama-server-b=step"}) {
    ratio(fmt::format("itl_p99 weft-serve/{}", peer), "weft-serve", peer, "itl_ms", "p99", false);
    ratio(fmt::format("tokens_per_s weft-serve/{}", peer), "weft-serve", peer, "tokens_per_s", nullptr, false);
    ratio(fmt::format("itl_p50 weft-serve/{}", peer), "weft-serve", peer, "itl_ms", "p50", false);
  }
  // HTTP overhead: weft serve against the same executor stepped in-process.
  ratio("itl_mean_ms weft-serve-weft", "weft-serve", "weft", "itl_ms", "mean", true);
  ratio("itl_p50_ms weft-serve-weft", "weft-serve", "weft", "itl_ms", "p50", true);
  ratio("tokens_per_s weft-serve/weft", "weft-serve", "weft", "tokens_per_s", nullptr, false);
  if (by_engine.count("weft-serve") && by_engine.count("weft")) {
    std::vector<double> per;
    for (unsigned i = 0; i < wp.reps; ++i)
      per.push_back(1e3 / at(by_engine["weft-serve"][i], "tokens_per_s") - 1e3 / at(by_engine["weft"][i], "tokens_per_s"));
    ratios["ms_per_token weft-serve-weft"] = {{"median", median(per)}, {"per_repetition", per}};
  }

  fmt::print("\nweft bench mixed --wire: {} repetition(s), medians; {} conversations, {} slots, ctx {}, batch {}, "
             "ubatch {}, weft steps of {} tokens, {} thread(s)\n\n",
             wp.reps, w.requests.size(), p.slots, p.ctx, p.batch, p.ubatch, p.step_tokens, p.threads);
  fmt::print("| {:<20} | {:>7} | {:>8} | {:>8} | {:>7} | {:>7} | {:>8} | {:>7} | {:>7} |\n", "engine", "tok/s",
             "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "ITL mean", "E2E p50", "E2E p99");
  fmt::print("|----------------------|---------|----------|----------|---------|---------|----------|---------|-------"
             "--|\n");
  for (const auto &e : engines) {
    const auto &m = medians[e.label];
    fmt::print("| {:<20} | {:>7.1f} | {:>8.0f} | {:>8.0f} | {:>7.1f} | {:>7.1f} | {:>8.1f} | {:>7.2f} | {:>7.2f} |\n",
               e.label, m["tokens_per_s"].get<double>(), m["ttft_ms.p50"].get<double>(),
               m["ttft_ms.p99"].get<double>(), m["itl_ms.p50"].get<double>(), m["itl_ms.p99"].get<double>(),
               m["itl_ms.mean"].get<double>(), m["e2e_s.p50"].get<double>(), m["e2e_s.p99"].get<double>());
  }
  fmt::print("(TTFT and ITL in ms, E2E in s{})\n",
             wp.target == "weft" ? "" : fmt::format("; llama-server-b=step: -b and -ub = {}", p.step_tokens));
  for (const auto &[name, r] : ratios.items()) {
    std::string per;
    for (const auto &v : r["per_repetition"]) per += fmt::format("{}{:.3f}", per.empty() ? "" : ", ", v.get<double>());
    fmt::print("{}: {:.3f} (per repetition: {})\n", name, r["median"].get<double>(), per);
  }
  return {{"repetitions", wp.reps},
          {"order", [&] {
             nlohmann::json o = nlohmann::json::array();
             for (const auto &e : engines) o.push_back(e.label);
             return o;
           }()},
          {"settings", settings},
          {"runs", runs},
          {"medians", medians},
          {"ratios", ratios},
          {"failures", failures}};
}

}  // namespace weft_cli::bench
