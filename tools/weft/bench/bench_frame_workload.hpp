// weft bench frame's workload: N NPCs generating while prompts (and, with
// --image-every, pictures) arrive, one budgeted step a frame, and what a
// player sees of it (cmd_bench_frame.cpp reports it).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "bench_images.hpp"
#include "weft/weft.hpp"

namespace weft_cli::bench_frame {

struct Opts {
  std::string model, json;
  std::vector<double> budgets{4, 8, 16.6};
  unsigned conversations = 8, frames = 300, arrive_every = 30, arrival_tokens = 256, seed = 1;
  unsigned ctx = 0, batch = 512, ubatch = 0;
  unsigned grace_frames = 30;  // half a second at 60 fps
  unsigned adapter_groups = 0;  // LoRAs the NPCs and arrivals spread over (0: none)
  double frame_ms = 0;  // --frame-ms: frames paced to this length (0: back to back)
  unsigned image_every = 0, image_side = 224;  // --image-every: a picture shown every N frames (0: none)
  std::string image_kind = "gemma3";           // --image-kind: the projector's (qwen2vl: M-RoPE, causal)
  std::string encode = "thread";               // --encode: who encodes the pictures (thread | frame)
  int threads = 0;
  weft::FlashAttention flash_attn = weft::FlashAttention::automatic;
  std::unique_ptr<bench::BenchLoras> loras;
  std::unique_ptr<bench::BenchProjector> projector;
};

// One step as the executor reported it, kept for the slowest few: whether a
// step over its budget decoded too much (the plan), spent it in one long
// llama_decode (a graph the deadline cannot cut), or lost it outside both.
struct StepRecord {
  unsigned frame = 0;
  double ms = 0;  // the frame's step, timed by the bench
  weft::StepResult res;
};

struct RunResult {
  std::vector<double> step_ms;
  std::vector<StepRecord> slowest;  // the 3 slowest steps, slowest first
  double busy_s = 0;  // summed step wall time
  double wall_s = 0;  // first frame start to last frame end (steps plus the bench's bookkeeping)
  std::uint64_t tokens_decoded = 0, tokens_sampled = 0, deadline_hits = 0;
  std::uint64_t adapter_switches = 0;  // with --adapter-groups
  double adapter_switch_ms = 0;
  // What a player sees.
  std::vector<std::uint64_t> npc_tokens;  // sampled per NPC over the run
  unsigned npc_longest_wait = 0;          // frames in a row some NPC sampled nothing
  unsigned prompt_longest_wait = 0;       // frames in a row an arrival had input queued and none decoded
  std::vector<double> ttft_frames;        // per arrival that sampled a first token
  unsigned arrivals = 0, arrivals_without_token = 0, arrivals_starved = 0;
  std::uint64_t arrival_tokens_sampled = 0;
  nlohmann::json images;  // with images: bench::ImageArrivals::summary
  std::string attention;  // the executor's attention kernel and why
};

// An arriving prompt and what we track of it, through the public API only.
struct Arrival {
  weft::Conversation conv;
  weft::Generation gen;
  unsigned arrived = 0;        // frame index of arrival (before that frame's step)
  unsigned wait = 0;           // current stretch of frames with input queued and none decoded
  bool first_token = false;    // its generation has sampled
  bool ever_decoded = false;   // any of its tokens entered the cache
};

// Ends an arrival's tracking (done, or the run is over).
void close_arrival(RunResult &r, const Arrival &a);
// One run of the workload; `budget_ms` 0 = plain step(). With `images`, a
// picture arrives every o.image_every frames besides.
RunResult run_workload(weft::Model &model, const Opts &o, double budget_ms, bool images = false);
// The floor under any budget: the median wall time of a step that decodes a
// single token (one conversation, a short history), the smallest unit of
// work a step can do. A budget below it cannot be met on this machine.
double one_token_step_ms(weft::Model &model, const Opts &o);

}  // namespace weft_cli::bench_frame
