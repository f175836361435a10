// weft bench speculative: shared by its two parts (cmd_bench_speculative.cpp:
// options, weft runs, the one-sequence floor, the table;
// bench_speculative_server.cpp: llama-server's speculative decoding).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "weft/weft.hpp"

namespace weft_cli::bench_speculative {

struct Opts {
  std::vector<std::string> models;  // default: small, and the cached npc model when there is one
  std::vector<unsigned> conversations = {1, 4, 16};
  unsigned tokens = 64;      // the reply
  unsigned prompt = 64;      // each conversation's prompt (its second half repeats its first)
  unsigned reps = 3;         // runs of each cell, alternating the engines and modes
  unsigned draft_max = 8;    // weft's max_draft, llama-server's --draft-max
  unsigned bias_tokens = 0;  // that many tokens (ids 300..) at +30: replies over a small alphabet
  unsigned floor_max = 9;    // the floor: decodes of 1..floor_max tokens of one sequence
  unsigned floor_reps = 7;
  unsigned batch = 512;
  int threads = 0;
  std::string target = "both", server, spec_type = "ngram-simple", json;
  std::string draft_model;  // weft's Drafter::model and llama-server's -md (empty: neither runs)
  float draft_p_min = 0.5f;  // both engines' p_min
  weft::FlashAttention flash_attn = weft::FlashAttention::automatic;
  bool quiet = false;
};

// One conversation's reply, as its engine reported it.
struct Reply {
  double seconds = 0;  // from the generation's start (prompt decoded) to its last token
  std::uint32_t tokens = 0, drafted = 0, accepted = 0;
};

// The conversations' prompts and the sampling both engines use: greedy, the
// --bias-tokens at +30, and the tokens llama-server cannot stream banned.
struct Inputs {
  std::vector<std::vector<weft::Token>> prompts;  // one per conversation, the most asked for
  std::vector<std::pair<weft::Token, float>> bias;  // -inf bans
};

// llama-server without speculative decoding, with its --spec-type, or with
// Opts::draft_model (-md), started once per model and kept for every run.
enum class ServerKind { plain, spec, draft };
class ServerEngine {
 public:
  ServerEngine(const Opts &o, const std::string &model_path, unsigned slots, unsigned ctx, ServerKind kind,
               const std::string &flash_attn);
  ~ServerEngine();
  ServerEngine(const ServerEngine &) = delete;
  ServerEngine &operator=(const ServerEngine &) = delete;
  // `n` conversations at once: each prompt once with one token (its slot's
  // cache), then the timed replies (timings.predicted_ms, draft_n).
  std::vector<Reply> run(const Inputs &in, unsigned n, unsigned n_tokens);
  nlohmann::json settings() const;
  std::string attention() const;

 private:
  struct Impl;
  Impl *impl_;
};

// Whether this weft was built with an HTTP client (llama-server runs).
bool have_http();

}  // namespace weft_cli::bench_speculative
