// weft bench embed: text embeddings (ExecutorParams::embedder) as a game
// sees them, beside llama.cpp's own tools.
//
// (a) embeddings/s with the texts embedded alone (every text queued at once,
//     steps until done), and while they flow beside N generating NPCs under
//     a frame budget B (each frame one step({.max_time = B, .deadline =
//     start + 1.5*B}), as `weft bench frame`): step times and each NPC's
//     longest gap without a token, with and without embeddings flowing, and
//     the one-token floor F (p99 <= 1.1*B is judged where B >= 2F). Also one
//     long text against a causal prompt of its length on the same shape.
// (b) the same texts through llama-embedding (one process, one batch) and
//     llama-server --embeddings (POST /v1/embeddings), alternating with
//     weft's runs, medians.
// (c) weft::Memory search latency at 1k/10k/100k random vectors of the embed
//     model's width.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>

#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "bench_embed.hpp"
#include "bench_frame_workload.hpp"
#include "bench_options.hpp"
#include "model_cache.hpp"

namespace weft_cli {
namespace bench_embed_cmd {
namespace {

using std::chrono::steady_clock;
using nlohmann::json;

struct Opts {
  std::string model, embed_model, causal_model, json, server, embedding_bin, peers = "both";
  unsigned conversations = 16, frames = 300, texts = 64, text_words = 40, chunk = 16, reps = 3;
  unsigned embed_ctx = 512, embed_seqs = 16, long_tokens = 480, seed = 1;
  double budget_ms = 0;  // 0: max(16.6, 2F)
  std::vector<unsigned> memory_sizes{1000, 10000, 100000};
  unsigned memory_queries = 21;
  int threads = 2;
  bool quiet = false;
};

double median(std::vector<double> v) { return bench::percentile(std::move(v), 50); }
double ms_since(steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(steady_clock::now() - t).count();
}

// Seeded texts of `words` words each: what an NPC might remember.
std::vector<std::string> make_texts(unsigned n, unsigned words, unsigned seed) {
  static const char *kWords[] = {
      "the",    "blacksmith", "of",     "Eldermoor", "saw",     "a",      "stranger", "near",   "old",    "mill",
      "river",  "guard",      "gold",   "sword",     "tavern",  "night",  "rain",     "wolves", "north",  "road",
      "merchant", "sold",     "bread",  "to",        "player",  "who",    "asked",    "about",  "king",   "dragon",
      "forest", "quietly",    "and",    "then",      "left",    "with",   "her",      "brother", "at",    "dawn",
      "bridge", "broken",     "lantern", "promised", "return",  "ring",   "market",   "festival", "song", "cold"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (unsigned i = 0; i < n; ++i) {
    std::string t;
    for (unsigned w = 0; w < words; ++w) {
      if (w) t += ' ';
      t += kWords[rng() % std::size(kWords)];
    }
    out.push_back(std::move(t) + ".");
  }
  return out;
}

weft::EmbedderParams embedder(const weft::Model &emb, const Opts &o) {
  return {.model = emb, .pooling = weft::Pooling::mean, .n_ctx = o.embed_ctx, .n_seq_max = o.embed_seqs};
}

// Every text queued at once on an executor with no conversation; steps
// (unbudgeted) until done.
json embed_alone(weft::Model &npc, weft::Model &emb, const Opts &o, const std::vector<std::string> &texts) {
  weft::Executor ex(npc, {.n_ctx = 256, .n_batch = 256, .n_seq_max = 1, .n_threads = o.threads, .embedder = embedder(emb, o)});
  auto warm = ex.embed({"warm up"});
  while (!warm.done()) ex.step();
  const auto before = ex.stats();
  const auto t0 = steady_clock::now();
  auto e = ex.embed(texts);
  while (!e.done()) ex.step();
  const double s = ms_since(t0) / 1000;
  if (e.error()) throw *e.error();
  const auto st = ex.stats();
  std::uint64_t tokens = 0;
  for (std::size_t i = 0; i < e.size(); ++i) tokens += e.n_tokens(i);
  return {{"seconds", s},
          {"texts_embedded", st.texts_embedded - before.texts_embedded},
          {"vectors_returned", e.n_done()},
          {"tokens", tokens},
          {"embed_tokens", st.embed_tokens - before.embed_tokens},
          {"embed_decodes", st.embed_decodes - before.embed_decodes},
          {"embed_decode_ms", st.embed_ms - before.embed_ms},
          {"texts_per_s", double(texts.size()) / s},
          {"tokens_per_s", double(tokens) / s}};
}

// One text of about `long_tokens` tokens embedded, against a causal prompt
// of the same token count on `causal` (same shape), medians of 5.
json long_text(weft::Model &npc, weft::Model &emb, weft::Model &causal, const Opts &o) {
  std::string text;
  for (unsigned s = 0; emb.tokenize(text).size() < o.long_tokens; ++s) {
    text += (text.empty() ? "" : " ") + make_texts(1, 8, o.seed + 1000 + s)[0];
  }
  weft::Executor ex(npc, {.n_ctx = 256, .n_batch = 256, .n_seq_max = 1, .n_threads = o.threads, .embedder = embedder(emb, o)});
  std::vector<double> embed_ms, prompt_ms;
  std::size_t tokens = 0;
  weft::Executor cx(causal, {.n_ctx = std::max(1024u, o.long_tokens * 2), .n_batch = 512, .n_seq_max = 1,
                             .n_threads = o.threads});
  std::mt19937_64 rng(o.seed + 7);
  for (int r = 0; r < 6; ++r) {  // the first of each is a warm-up
    auto t0 = steady_clock::now();
    auto e = ex.embed({text});
    while (!e.done()) ex.step();
    const double em = ms_since(t0);
    tokens = e.n_tokens(0);
    auto c = cx.create();
    c.prompt(bench::random_tokens(rng, tokens, causal.n_vocab()));
    t0 = steady_clock::now();
    while (!cx.step().idle) {}
    const double pm = ms_since(t0);
    c.dispose();
    if (r > 0) {
      embed_ms.push_back(em);
      prompt_ms.push_back(pm);
    }
  }
  const double a = median(embed_ms), b = median(prompt_ms);
  return {{"tokens", tokens}, {"embed_ms", a}, {"causal_prompt_ms", b}, {"ratio", b > 0 ? a / b : 0}};
}

// N NPCs generating under budget B for o.frames frames; with `flow`, texts
// queued o.chunk at a time whenever the previous chunk is done.
json frames_run(weft::Model &npc, weft::Model &emb, const Opts &o, double budget_ms, bool flow,
                const std::vector<std::string> &texts) {
  const unsigned n = o.conversations;
  weft::Executor ex(npc, {.n_ctx = std::max(512u, n * (40 + o.frames)), .n_batch = 512, .n_seq_max = n + 1,
                          .n_threads = o.threads, .embedder = embedder(emb, o)});
  std::mt19937_64 rng(o.seed);
  std::vector<weft::Conversation> npcs;
  for (unsigned i = 0; i < n; ++i) {
    npcs.push_back(ex.create());
    npcs.back().prompt(bench::random_tokens(rng, 32, npc.n_vocab()));
  }
  auto warm = ex.embed({texts[0]});
  while (!ex.step().idle || !warm.done()) {}
  std::vector<weft::Generation> gens;
  for (auto &c : npcs) gens.push_back(c.generate({.max_tokens = o.frames + 1}));
  const auto before = ex.stats();
  std::vector<double> step_ms, gap_ms(n, 0);
  std::vector<unsigned> gap_frames(n, 0), wait(n, 0);
  std::vector<std::size_t> seen(n, 0);
  const auto start = steady_clock::now();
  std::vector<steady_clock::time_point> last(n, start);
  std::optional<weft::Embedding> cur;
  json slowest = json::array();
  std::size_t next = 0, queued = 0;
  const auto budget = std::chrono::microseconds(static_cast<std::int64_t>(budget_ms * 1000));
  for (unsigned f = 0; f < o.frames; ++f) {
    if (flow && (!cur || cur->done())) {
      std::vector<std::string> chunk;
      for (unsigned k = 0; k < o.chunk; ++k) chunk.push_back(texts[next++ % texts.size()]);
      cur = ex.embed(chunk);
      queued += chunk.size();
    }
    const auto t0 = steady_clock::now();
    const auto res = ex.step({.max_time = budget, .deadline = t0 + budget * 3 / 2});
    const auto t1 = steady_clock::now();
    step_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    // The 3 slowest steps: too many tokens planned, one long decode, or time outside llama_decode.
    slowest.push_back({{"frame", f}, {"ms", step_ms.back()}, {"tokens_decoded", res.tokens_decoded},
                       {"tokens_sampled", res.tokens_sampled}, {"tokens_embedded", res.tokens_embedded},
                       {"texts_embedded", res.texts_embedded}, {"decode_calls", res.decode_calls},
                       {"decode_ms", res.decode_seconds * 1000}, {"deadline_hit", res.deadline_hit}});
    std::sort(slowest.begin(), slowest.end(), [](const json &a, const json &c) { return a["ms"] > c["ms"]; });
    if (slowest.size() > 3) slowest.erase(slowest.size() - 1);
    for (unsigned i = 0; i < n; ++i) {
      const std::size_t now = gens[i].n_tokens();
      // A gap: from the end of the step that gave the NPC a token to the end
      // of the next one that did (or of the run).
      gap_ms[i] = std::max(gap_ms[i], std::chrono::duration<double, std::milli>(t1 - last[i]).count());
      if (now > seen[i]) {
        wait[i] = 0;
        last[i] = t1;
      } else {
        ++wait[i];
      }
      gap_frames[i] = std::max(gap_frames[i], wait[i]);
      seen[i] = now;
      if (gens[i].done()) {
        gens[i] = npcs[i].generate({.max_tokens = o.frames + 1});
        seen[i] = 0;
      }
    }
  }
  const double wall = ms_since(start) / 1000;
  const auto st = ex.stats();
  const double p99 = bench::percentile(step_ms, 99);
  const auto texts_done = st.texts_embedded - before.texts_embedded;
  const auto tokens_done = st.embed_tokens - before.embed_tokens;
  return {{"embeddings_flowing", flow},
          {"budget_ms", budget_ms},
          {"steps", step_ms.size()},
          {"p50_ms", bench::percentile(step_ms, 50)},
          {"p99_ms", p99},
          {"max_ms", *std::max_element(step_ms.begin(), step_ms.end())},
          {"over_1_1B_share", double(std::count_if(step_ms.begin(), step_ms.end(),
                                                   [&](double v) { return v > 1.1 * budget_ms; })) /
                                  double(step_ms.size())},
          {"tokens_sampled", st.tokens_sampled - before.tokens_sampled},
          {"npc_gap_frames_max", *std::max_element(gap_frames.begin(), gap_frames.end())},
          {"npc_gap_ms_max", *std::max_element(gap_ms.begin(), gap_ms.end())},
          {"npc_gap_ms_median", median(gap_ms)},
          {"texts_queued", queued},
          {"texts_embedded", texts_done},
          {"embed_tokens", tokens_done},
          {"embed_decodes", st.embed_decodes - before.embed_decodes},
          {"embed_pending_at_end", st.embed_pending},
          {"wall_s", wall},
          {"slowest_steps", slowest},
          {"texts_per_s", double(texts_done) / wall},
          {"tokens_per_s", double(tokens_done) / wall}};
}

json memory_rows(const Opts &o, std::uint32_t width) {
  json rows = json::array();
  std::mt19937_64 rng(o.seed + 3);
  std::normal_distribution<float> nd;
  auto vec = [&] {
    std::vector<float> v(width);
    float s = 0;
    for (auto &x : v) {
      x = nd(rng);
      s += x * x;
    }
    for (auto &x : v) x /= std::sqrt(s);
    return v;
  };
  for (unsigned size : o.memory_sizes) {
    weft::Memory m;
    const auto t0 = steady_clock::now();
    for (unsigned i = 0; i < size; ++i) m.add(fmt::format("entry {}", i), vec());
    const double add_ms = ms_since(t0);
    std::vector<double> ms;
    std::size_t hits = 0;
    for (unsigned q = 0; q < o.memory_queries; ++q) {
      const auto query = vec();
      const auto t = steady_clock::now();
      hits = m.search(query, 8).size();
      ms.push_back(ms_since(t));
    }
    rows.push_back({{"entries", m.size()}, {"dimensions", m.dimensions()}, {"k", 8}, {"hits", hits},
                    {"queries", ms.size()}, {"search_ms_p50", median(ms)}, {"search_ms_p99", bench::percentile(ms, 99)},
                    {"add_us_per_entry", size ? add_ms * 1000 / size : 0.0}});
  }
  return rows;
}

json summarize(std::vector<double> s, std::size_t texts, std::uint64_t tokens) {
  const double m = median(s);
  return {{"ran", true}, {"runs_s", s}, {"seconds", m}, {"texts_per_s", static_cast<double>(texts) / m},
          {"tokens_per_s", static_cast<double>(tokens) / m}};
}

void run(Opts &o) {
  const std::string npc_path = bench::model_path(o.model);
  const std::string emb_path = o.embed_model.empty() ? ensure_preset_model("embed", 1) : o.embed_model;
  const std::string tiny_path = o.causal_model.empty() ? ensure_preset_model("tiny", 1) : o.causal_model;
  auto npc = bench::load_model(npc_path);
  auto emb = bench::load_model(emb_path);
  auto tiny = bench::load_model(tiny_path);
  const double load_start = bench::load_average_1min();
  const auto texts = make_texts(o.texts, o.text_words, o.seed);
  std::uint64_t text_tokens = 0;  // as the embedder counts them (BOS/EOS included)
  bench_frame::Opts fo;
  fo.threads = o.threads;
  fo.seed = o.seed;
  const double floor_ms = bench_frame::one_token_step_ms(npc, fo);
  const double b = o.budget_ms > 0 ? o.budget_ms : std::max(16.6, 2 * floor_ms);
  if (!o.quiet) fmt::print(stderr, "one-token floor {:.2f} ms; budget {:.2f} ms\n", floor_ms, b);

  // (b) peers, alternating with weft's alone runs.
  std::optional<bench_embed::LlamaEmbedding> le;
  std::optional<bench_embed::EmbeddingServer> srv;
  json le_j = {{"ran", false}}, srv_j = {{"ran", false}};
  const bench_embed::PeerParams pp{.model = emb_path, .n_ctx = o.embed_ctx, .n_seq = o.embed_seqs, .threads = o.threads};
  if (o.peers == "both" || o.peers == "llama-embedding") {
    try {
      auto p = pp;
      // Default: next to the llama-server that llama-tools built (none: "", not found).
      const std::string server = bench::default_llama_server();
      p.binary = !o.embedding_bin.empty() ? o.embedding_bin
                 : server.empty()         ? server
                                          : std::filesystem::path(server).replace_filename("llama-embedding").string();
      le.emplace(p, texts);
    } catch (const weft::Error &e) {
      le_j["why"] = e.what();
    }
  }
  if ((o.peers == "both" || o.peers == "llama-server") && bench_embed::EmbeddingServer::available()) {
    try {
      auto p = pp;
      p.binary = o.server.empty() ? bench::default_llama_server() : o.server;
      srv.emplace(p);
    } catch (const weft::Error &e) {
      srv_j["why"] = e.what();
    }
  }
  std::vector<double> alone_s, le_s, le_start_s, srv_s;
  json alone;
  for (unsigned r = 0; r < o.reps; ++r) {
    alone = embed_alone(npc, emb, o, texts);
    alone_s.push_back(alone["seconds"]);
    text_tokens = alone["tokens"];
    if (le) {
      le_s.push_back(le->run_all());
      le_start_s.push_back(le->run_startup());
    }
    if (srv) srv_s.push_back(srv->run(texts));
    if (!o.quiet) fmt::print(stderr, "rep {}: weft {:.3f} s\n", r + 1, alone_s.back());
  }
  alone["runs_s"] = alone_s;
  alone["seconds"] = median(alone_s);
  alone["texts_per_s"] = double(texts.size()) / median(alone_s);
  alone["tokens_per_s"] = double(text_tokens) / median(alone_s);
  if (le) {
    le_j = summarize(le_s, texts.size(), text_tokens);
    le_j["startup_runs_s"] = le_start_s;
    le_j["startup_s"] = median(le_start_s);
    le_j["seconds_less_startup"] = std::max(0.0, median(le_s) - median(le_start_s));
  }
  if (srv) srv_j = summarize(srv_s, texts.size(), text_tokens);
  srv.reset();
  const auto lt = long_text(npc, emb, tiny, o);

  // (a) frames, without and with embeddings flowing, alternating.
  std::vector<json> without, with;
  for (unsigned r = 0; r < o.reps; ++r) {
    without.push_back(frames_run(npc, emb, o, b, false, texts));
    with.push_back(frames_run(npc, emb, o, b, true, texts));
    if (!o.quiet) fmt::print(stderr, "frames rep {}: p99 {:.2f} / {:.2f} ms\n", r + 1, without.back()["p99_ms"].get<double>(),
                             with.back()["p99_ms"].get<double>());
  }
  // The run of median p99 stands for each.
  auto pick = [](std::vector<json> v) {
    std::sort(v.begin(), v.end(), [](const json &a, const json &c) { return a["p99_ms"] < c["p99_ms"]; });
    return v[v.size() / 2];
  };
  const json fw = pick(without), fe = pick(with);
  const auto mem = memory_rows(o, emb.n_embd());
  const bool judged = b >= 2 * floor_ms;

  fmt::print("\nweft bench embed: NPC model {} ({} NPCs generating), embed model {} ({} wide), {} texts of {} words "
             "({} tokens), n_threads = {}, medians of {}, load average {:.2f} at start, {:.2f} at end\n\n",
             npc_path, o.conversations, emb_path, emb.n_embd(), texts.size(), o.text_words, text_tokens, o.threads,
             o.reps, load_start, bench::load_average_1min());
  fmt::print("| {:<34} | {:>9} | {:>9} | {:>10} |\n", "embedding the texts", "seconds", "texts/s", "tokens/s");
  fmt::print("|------------------------------------|----------:|----------:|-----------:|\n");
  auto prow = [](const std::string &name, const json &j) {
    if (!j.value("ran", true)) {
      fmt::print("| {:<34} | not run: {} |\n", name, j.value("why", std::string("not asked")));
      return;
    }
    fmt::print("| {:<34} | {:>9.3f} | {:>9.1f} | {:>10.0f} |\n", name, j["seconds"].get<double>(),
               j["texts_per_s"].get<double>(), j["tokens_per_s"].get<double>());
  };
  prow("weft, alone (one embed call)", alone);
  prow("llama-embedding (whole process)", le_j);
  if (le_j["ran"].get<bool>()) {
    fmt::print("| {:<34} | {:>9.3f} | {:>9} | {:>10} |\n", "  its start-up alone (1 word)", le_j["startup_s"].get<double>(),
               "", "");
  }
  prow("llama-server /v1/embeddings", srv_j);
  fmt::print("\none text of {} tokens: embedded {:.1f} ms, a causal prompt of as many tokens on the tiny model (same "
             "shape) {:.1f} ms: {:.1f}x\n",
             lt["tokens"].get<std::size_t>(), lt["embed_ms"].get<double>(), lt["causal_prompt_ms"].get<double>(),
             lt["ratio"].get<double>());
  fmt::print("\nframes: {} NPCs, budget B = {:.2f} ms (deadline 1.5 B), one-token floor F = {:.2f} ms, {} frames, "
             "texts queued {} at a time while flowing\n\n",
             o.conversations, b, floor_ms, o.frames, o.chunk);
  fmt::print("| {:<11} | {:>7} | {:>7} | {:>7} | {:>8} | {:>10} | {:>11} | {:>9} | {:>9} | {:>8} |\n", "embeddings",
             "p50 ms", "p99 ms", "max ms", ">1.1B", "NPC tokens", "gap max ms", "gap fr", "texts/s", "tok/s");
  fmt::print("|-------------|--------:|--------:|--------:|---------:|-----------:|------------:|----------:|----------:|"
             "---------:|\n");
  for (const json *j : {&fw, &fe}) {
    fmt::print("| {:<11} | {:>7.2f} | {:>7.2f} | {:>7.2f} | {:>7.1f}% | {:>10} | {:>11.1f} | {:>9} | {:>9.1f} | "
               "{:>8.0f} |\n",
               (*j)["embeddings_flowing"].get<bool>() ? "flowing" : "none", (*j)["p50_ms"].get<double>(),
               (*j)["p99_ms"].get<double>(), (*j)["max_ms"].get<double>(),
               100 * (*j)["over_1_1B_share"].get<double>(), (*j)["tokens_sampled"].get<std::uint64_t>(),
               (*j)["npc_gap_ms_max"].get<double>(), (*j)["npc_gap_frames_max"].get<unsigned>(),
               (*j)["texts_per_s"].get<double>(), (*j)["tokens_per_s"].get<double>());
  }
  for (const json *j : {&fw, &fe}) {
    fmt::print("slowest steps ({}):", (*j)["embeddings_flowing"].get<bool>() ? "flowing" : "none");
    for (const auto &st : (*j)["slowest_steps"]) {
      fmt::print(" frame {} {:.1f} ms ({} tokens, {} embedded tokens, {} decodes {:.1f} ms{});",
                 st["frame"].get<unsigned>(), st["ms"].get<double>(), st["tokens_decoded"].get<unsigned>(),
                 st["tokens_embedded"].get<unsigned>(), st["decode_calls"].get<unsigned>(),
                 st["decode_ms"].get<double>(), st["deadline_hit"].get<bool>() ? ", deadline hit" : "");
    }
    fmt::print("\n");
  }
  fmt::print("target p99 <= 1.1 B while embeddings flow: {}\n",
             judged ? (fe["p99_ms"].get<double>() <= 1.1 * b ? "met" : "MISSED")
                    : "not judged (B < 2F)");
  fmt::print("\n| {:>8} | {:>4} | {:>14} | {:>14} | {:>13} |\n", "entries", "dims", "search p50 ms",
             "search p99 ms", "add us/entry");
  fmt::print("|---------:|-----:|---------------:|---------------:|--------------:|\n");
  for (const auto &r : mem) {
    fmt::print("| {:>8} | {:>4} | {:>14.3f} | {:>14.3f} | {:>13.2f} |\n", r["entries"].get<std::size_t>(),
               r["dimensions"].get<unsigned>(), r["search_ms_p50"].get<double>(), r["search_ms_p99"].get<double>(),
               r["add_us_per_entry"].get<double>());
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "embed"},
                               {"npc_model", npc_path},
                               {"embed_model", emb_path},
                               {"n_embd", emb.n_embd()},
                               {"n_threads", o.threads},
                               {"conversations", o.conversations},
                               {"frames", o.frames},
                               {"reps", o.reps},
                               {"texts", texts.size()},
                               {"text_tokens", text_tokens},
                               {"embed_ctx", o.embed_ctx},
                               {"embed_seqs", o.embed_seqs},
                               {"machine", bench::machine_info()},
                               {"load_average_start", load_start},
                               {"load_average_end", bench::load_average_1min()},
                               {"one_token_step_ms", floor_ms},
                               {"budget_ms", b},
                               {"alone", alone},
                               {"long_text", lt},
                               {"frames_without", fw},
                               {"frames_with", fe},
                               {"target_judged", judged},
                               {"p99_le_1_1B", judged ? json(fe["p99_ms"].get<double>() <= 1.1 * b) : json()},
                               {"llama_embedding", le_j},
                               {"llama_server", srv_j},
                               {"memory", mem}});
  }
}

}  // namespace
}  // namespace bench_embed_cmd

void add_bench_embed(CLI::App &bench) {
  using namespace bench_embed_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd = bench.add_subcommand("embed", "Embeddings beside generating NPCs, llama-embedding, llama-server; "
                                            "Memory search");
  cmd->add_option("-m,--model", o->model, "NPCs' model (default: the generated small model)");
  cmd->add_option("--embed-model", o->embed_model, "Embedding model (default: the generated embed preset)");
  cmd->add_option("--causal-model", o->causal_model,
                  "Causal model of the embed model's shape, for the long-text comparison (default: the tiny preset)");
  cmd->add_option("-n,--conversations", o->conversations, "NPCs generating")->check(CLI::Range(1u, 200u))
      ->capture_default_str();
  cmd->add_option("--budget", o->budget_ms, "Frame budget B in ms (0 = max(16.6, 2x the one-token floor))")
      ->check(CLI::Range(0.0, 10000.0))->capture_default_str();
  cmd->add_option("--frames", o->frames, "Frames per run")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  cmd->add_option("--texts", o->texts, "Texts to embed")->check(CLI::Range(1u, 100000u))->capture_default_str();
  cmd->add_option("--text-words", o->text_words, "Words per text")->check(CLI::Range(1u, 400u))->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "Texts per embed call while flowing")->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "Repetitions (medians)")->check(CLI::Range(1u, 100u))->capture_default_str();
  cmd->add_option("--embed-ctx", o->embed_ctx, "Embedder cells (EmbedderParams::n_ctx; llama-embedding -c)")
      ->check(CLI::Range(8u, 1u << 16))->capture_default_str();
  cmd->add_option("--embed-seqs", o->embed_seqs, "Texts per embedding decode (n_seq_max; llama-server slots)")
      ->check(CLI::Range(1u, 256u))->capture_default_str();
  cmd->add_option("--long-tokens", o->long_tokens, "Tokens of the long text (<= embed-ctx)")
      ->check(CLI::Range(1u, 1u << 16))->capture_default_str();
  cmd->add_option("--memory-sizes", o->memory_sizes, "Memory entries (list)")->delimiter(',')->capture_default_str();
  cmd->add_option("--memory-queries", o->memory_queries, "Searches per size")->check(CLI::Range(1u, 10000u))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--peers", o->peers, "llama.cpp tools to compare with")
      ->check(CLI::IsMember({"both", "llama-embedding", "llama-server", "none"}))->capture_default_str();
  cmd->add_option("--server", o->server, "llama-server binary (default: the one built by llama-tools)");
  cmd->add_option("--llama-embedding", o->embedding_bin, "llama-embedding binary (default: next to llama-server)");
  cmd->add_option("--seed", o->seed, "Seed of texts, prompts and vectors")->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the results as JSON to this file");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress lines");
  cmd->callback([o] {
    if (o->long_tokens + 8 > o->embed_ctx) o->long_tokens = o->embed_ctx - 8;
    run(*o);
  });
}

}  // namespace weft_cli
