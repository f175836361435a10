// The open-loop mixed workload of `weft bench mixed` and the one driver that
// runs it against either engine (weft in-process, llama-server over HTTP).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_server.hpp"
#include "weft/weft.hpp"

namespace weft_cli::bench {

struct Request {
  double arrival = 0;              // seconds after the start
  std::vector<weft::Token> user;   // after the shared system prompt
  std::uint32_t n_out = 0;         // tokens to generate
};

struct Workload {
  std::vector<weft::Token> system;  // BOS + the shared system prompt
  std::vector<Request> requests;    // by arrival
};

struct WorkloadParams {
  // The scenario scaled to a busy 2-core machine: long replies keep
  // several conversations generating while long prompts arrive; about a minute.
  unsigned conversations = 16, system_tokens = 256;
  double rate = 0.4;  // arrivals per second (Poisson)
  unsigned prompt_min = 128, prompt_max = 512, output_min = 48, output_max = 144;
  unsigned seed = 1;
};

Workload make_workload(const WorkloadParams &p, std::int32_t n_vocab, weft::Token bos);

// Tokens whose text alone is not valid UTF-8 (the byte tokens <0x80>..<0xFF>
// of an SPM vocabulary). llama-server parses streamed text and fails the
// request (HTTP 500, "does not match the expected Content-only format") on
// invalid UTF-8, which random weights produce; so it is told never to sample
// these. Which tokens are chosen does not change the speed.
std::vector<weft::Token> invalid_utf8_tokens(const weft::Model &model);

// One conversation as its client saw it; times in seconds after the start.
struct Trace {
  double arrival = 0, start = -1, first = -1, end = -1;
  // When tokens arrived, and how many at once: llama-server holds back a
  // token that ends in an incomplete UTF-8 sequence and sends it with the next.
  std::vector<std::pair<double, std::uint32_t>> chunks;
  std::uint32_t tokens = 0;
  std::uint32_t prompt_cached = 0;  // prompt tokens the engine did not decode again
  std::string error;
};

// An engine under test. The driver calls start() when a request is admitted
// (at most `slots` at once) and pump() to let work happen until `until` or a
// request finishes.
class Target {
 public:
  virtual ~Target() = default;
  virtual std::string name() const = 0;
  // Decode the system prompt (untimed), so both engines start warm.
  virtual void warm_up(const Workload &w) = 0;
  virtual void start(std::size_t index, const Request &r, Trace &trace) = 0;
  virtual void pump(double until, std::vector<std::size_t> &finished) = 0;
  // Stop everything in flight (timeout or error); idempotent.
  virtual void abort() = 0;
  virtual nlohmann::json settings() const = 0;
  // The clock origin (steady clock, ns), set by drive() after warm_up().
  std::int64_t origin_ns = 0;
};

struct TargetParams {
  std::string model_path;
  unsigned ctx = 16384, batch = 2048, ubatch = 512, slots = 12;
  int threads = 0;
  // Both engines: weft's ExecutorParams::flash_attn, llama-server's -fa.
  weft::FlashAttention flash_attn = weft::FlashAttention::automatic;
  // weft only: StepBudget::max_tokens and ExecutorParams::max_prompt_chunk.
  unsigned step_tokens = 64, max_chunk = 0;
  // weft only: StepBudget::max_time in ms (weft serve --step-ms); 0 = none.
  unsigned step_ms = 0;
  // true (bench mixed): the system prompt is decoded before the clock starts
  // and each conversation forks it (llama-server: one warm-up request).
  // false (bench prefix): nothing is warm; each conversation is created on
  // its own and sends the whole prompt, and the engines' automatic prefix
  // reuse is what shares it (weft: prefix reuse; llama-server: cache_prompt,
  // and --cache-reuse below).
  bool fork_system = true;
  // llama-server only: --cache-reuse (0 = not passed).
  unsigned cache_reuse = 0;
  // llama-server only.
  std::string server_binary, server_log;
  // weft serve (bench mixed --wire): the weft binary run as `weft serve`.
  std::string weft_binary;
  // Both engines: every reply sampled under this JSON Schema (weft:
  // SamplerParams::json_schema; llama-server: json_schema; weft serve:
  // response_format), and an end token may end it (no ignore_eos). "" = none.
  std::string json_schema;
  // Tokens llama-server must not sample (see invalid_utf8_tokens).
  std::vector<weft::Token> server_banned;
  double server_ready_timeout_s = 60, read_timeout_s = 120;
};

std::unique_ptr<Target> make_weft_target(const weft::Model &model, const TargetParams &p);
// What the weft target's executor reports (after a run), for the JSON.
nlohmann::json weft_prefix_stats(const Target &weft_target);
std::unique_ptr<Target> make_server_target(const TargetParams &p, const std::string &label = "llama-server");
// `weft serve` started from p.weft_binary, configured as make_weft_target is.
std::unique_ptr<Target> make_weft_serve_target(const TargetParams &p);

// Runs the workload open-loop: requests arrive on their schedule whatever the
// engine does, wait (FIFO) for one of `slots`, and every latency counts from
// arrival. Throws weft::Error(cancelled) after `timeout_s`.
std::vector<Trace> drive(Target &target, const Workload &w, unsigned slots, double timeout_s, bool progress);

// bench mixed --wire: weft serve, llama-server at its defaults and at
// -b/-ub = step_tokens, and weft in-process (target "weft": weft serve and
// in-process only; "server": the two llama-servers), `reps` times, the order
// reversed every other time. Prints the medians and the ratios; returns
// them with every run ("failures" non-empty when a conversation failed).
struct WireParams {
  unsigned reps = 1;
  std::string target = "both";
  double timeout_s = 600;
  bool quiet = false;
};
nlohmann::json run_wire(const weft::Model &model, const Workload &w, const TargetParams &p, const WireParams &wp);

// TTFT, inter-token latency, end-to-end latency, throughput.
nlohmann::json summarize(const std::string &engine, const Workload &w, const std::vector<Trace> &traces);

}  // namespace weft_cli::bench
