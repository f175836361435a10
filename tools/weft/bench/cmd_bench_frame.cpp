// weft bench frame: a game loop's view of the executor, as a player sees it.
//
// N conversations ("NPCs") generate (greedy, long replies) while a ~256-token
// prompt arrives on a fresh conversation every K frames and asks for a short
// reply; each simulated frame runs one step({.max_time = B, .deadline =
// frame_start + 1.5*B}), back to back (the step is the frame's only work).
// Per budget B we report the step wall time p50/p99/max and the share of
// steps over B; what the player sees (tokens per NPC, the longest wait of any
// NPC or arriving prompt, time to first token in frames); and decode rates
// over wall time and busy time against the same workload stepped without a
// budget. Targets are relative to the one-token floor and printed as met or
// not; speed is never asserted. With --image-every N each run is repeated
// with a picture shown every N frames (bench_images.hpp): the step times
// with and without images side by side, and what images cost where.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "attention_cli.hpp"
#include "bench_commands.hpp"
#include "bench_common.hpp"
#include "bench_frame_workload.hpp"
#include "bench_images.hpp"

namespace weft_cli {
// Named, so that the CLI builds as one unit (CMAKE_UNITY_BUILD) without clashes.
namespace bench_frame_cmd {
namespace {

using std::chrono::steady_clock;
using namespace bench_frame;

struct Baseline {
  double busy_tps = 0, wall_tps = 0;
};

nlohmann::json optional_number(const std::optional<double> &v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

nlohmann::json slowest_json(const std::vector<StepRecord> &steps) {
  nlohmann::json out = nlohmann::json::array();
  for (const StepRecord &s : steps) {
    out.push_back({{"frame", s.frame},
                   {"ms", s.ms},
                   {"tokens_decoded", s.res.tokens_decoded},
                   {"tokens_sampled", s.res.tokens_sampled},
                   {"decode_calls", s.res.decode_calls},
                   {"decode_ms", s.res.decode_seconds * 1000},
                   {"outside_decode_ms", (s.res.seconds - s.res.decode_seconds) * 1000},
                   {"deadline_hit", s.res.deadline_hit}});
  }
  return out;
}

nlohmann::json row_json(double budget_ms, const RunResult &r, const Baseline &base, double floor_ms,
                        unsigned grace_frames) {
  const double p50 = bench::percentile(r.step_ms, 50), p99 = bench::percentile(r.step_ms, 99);
  const double mx = r.step_ms.empty() ? 0 : *std::max_element(r.step_ms.begin(), r.step_ms.end());
  const auto over = budget_ms > 0 ? std::count_if(r.step_ms.begin(), r.step_ms.end(),
                                                  [&](double v) { return v > budget_ms; })
                                  : 0;
  const auto rate = [](std::uint64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; };
  const double busy_tps = rate(r.tokens_decoded, r.busy_s), wall_tps = rate(r.tokens_decoded, r.wall_s);
  const double vs_busy = base.busy_tps > 0 ? busy_tps / base.busy_tps : 0;
  const double vs_wall = base.wall_tps > 0 ? wall_tps / base.wall_tps : 0;
  std::vector<double> per_npc(r.npc_tokens.begin(), r.npc_tokens.end());
  std::uint64_t npc_total = 0;
  for (auto n : r.npc_tokens) npc_total += n;
  const auto npc_min = r.npc_tokens.empty() ? 0 : *std::min_element(r.npc_tokens.begin(), r.npc_tokens.end());
  const auto npc_max = r.npc_tokens.empty() ? 0 : *std::max_element(r.npc_tokens.begin(), r.npc_tokens.end());
  std::optional<double> ttft_median, ttft_max;
  if (!r.ttft_frames.empty()) {
    ttft_median = bench::percentile(r.ttft_frames, 50);
    ttft_max = *std::max_element(r.ttft_frames.begin(), r.ttft_frames.end());
  }
  const char *judged = budget_ms <= 0 ? "none" : budget_ms >= 2 * floor_ms ? "timing" : "progress_only";
  nlohmann::json j{{"budget_ms", budget_ms},
                   {"floor_ms", floor_ms},
                   {"attention", r.attention},
                   {"target_judged", judged},
                   {"steps", r.step_ms.size()},
                   {"p50_ms", p50},
                   {"p99_ms", p99},
                   {"max_ms", mx},
                   {"over_budget_share", r.step_ms.empty() ? 0.0 : double(over) / double(r.step_ms.size())},
                   {"tokens_decoded", r.tokens_decoded},
                   {"tokens_sampled", r.tokens_sampled},
                   {"deadline_hits", r.deadline_hits},
                   {"slowest_steps", slowest_json(r.slowest)},
                   {"adapter_switches", r.adapter_switches},
                   {"adapter_switch_ms", r.adapter_switch_ms},
                   {"busy_s", r.busy_s},
                   {"wall_s", r.wall_s},
                   {"busy_tokens_per_s", busy_tps},
                   {"wall_tokens_per_s", wall_tps},
                   {"wall_sampled_per_s", rate(r.tokens_sampled, r.wall_s)},
                   {"vs_unbudgeted_busy", vs_busy},
                   {"vs_unbudgeted_wall", vs_wall},
                   {"npc_tokens_min", npc_min},
                   {"npc_tokens_median", bench::percentile(per_npc, 50)},
                   {"npc_tokens_max", npc_max},
                   {"npc_tokens_total", npc_total},
                   {"npc_longest_wait_frames", r.npc_longest_wait},
                   {"prompt_longest_wait_frames", r.prompt_longest_wait},
                   {"arrivals", r.arrivals},
                   {"arrival_tokens_sampled", r.arrival_tokens_sampled},
                   {"ttft_frames_median", optional_number(ttft_median)},
                   {"ttft_frames_max", optional_number(ttft_max)},
                   {"arrivals_without_token", r.arrivals_without_token},
                   {"arrivals_starved", r.arrivals_starved},
                   {"grace_frames", grace_frames},
                   {"images", r.images.is_null() ? nlohmann::json(false) : r.images}};
  if (budget_ms > 0) {
    // Progress is judged under every budget; timing and throughput only where
    // the budget holds at least two one-token steps (null otherwise).
    const bool progress = npc_min > 0 && r.arrivals_starved == 0;
    const bool timing = std::string_view(judged) == "timing";
    const auto judge = [&](bool v) { return timing ? nlohmann::json(v) : nlohmann::json(); };
    j["targets"] = {{"p99_le_1_1B", judge(p99 <= 1.1 * budget_ms)},
                    {"max_le_1_5B", judge(mx <= 1.5 * budget_ms)},
                    {"throughput_ge_0_8x", judge(vs_wall >= 0.8)},
                    {"progress", progress}};
    bool all = true;
    for (const auto &v : j["targets"]) all = all && (v.is_null() || v.get<bool>());
    j["targets_met"] = all;
  }
  return j;
}

std::string fmt_opt(const nlohmann::json &v) { return v.is_null() ? "-" : fmt::format("{:.0f}", v.get<double>()); }

void print_header() {
  fmt::print("| {:>8} | {:>7} | {:>7} | {:>7} | {:>6} | {:>15} | {:>11} | {:>14} | {:>15} | {:>7} | {:>10} | {:>7} | "
             "{} |\n",
             "budget", "p50 ms", "p99 ms", "max ms", "over B", "NPC tok min/med", "NPC wait fr", "prompt wait fr",
             "TTFT fr med/max", "no TTFT", "wall tok/s", "vs none", "targets");
  fmt::print("|---------:|--------:|--------:|--------:|-------:|----------------:|------------:|---------------:|"
             "----------------:|--------:|-----------:|--------:|---------|\n");
}

void print_row(const nlohmann::json &j) {
  const double b = j["budget_ms"].get<double>();
  std::string targets = "-";
  if (b > 0) {
    const auto &t = j["targets"];
    auto yn = [](const nlohmann::json &v) { return v.get<bool>() ? "met" : "MISSED"; };
    targets = j["target_judged"] == "timing"
                  ? fmt::format("p99 {}, max {}, tput {}, progress {}", yn(t["p99_le_1_1B"]), yn(t["max_le_1_5B"]),
                                yn(t["throughput_ge_0_8x"]), yn(t["progress"]))
                  : fmt::format("below 2x floor: progress {}", yn(t["progress"]));
  }
  fmt::print("| {:>8} | {:>7.2f} | {:>7.2f} | {:>7.2f} | {:>5.1f}% | {:>15} | {:>11} | {:>14} | {:>15} | {:>7} | "
             "{:>10.1f} | {:>7.2f} | {} |\n",
             fmt::format("{}{}", b > 0 ? fmt::format("{:g} ms", b) : std::string("none"),
                         j["images"].is_object() ? " +img" : ""),
             j["p50_ms"].get<double>(),
             j["p99_ms"].get<double>(), j["max_ms"].get<double>(), 100 * j["over_budget_share"].get<double>(),
             fmt::format("{}/{:g}", j["npc_tokens_min"].get<std::uint64_t>(), j["npc_tokens_median"].get<double>()),
             j["npc_longest_wait_frames"].get<unsigned>(), j["prompt_longest_wait_frames"].get<unsigned>(),
             fmt::format("{}/{}", fmt_opt(j["ttft_frames_median"]), fmt_opt(j["ttft_frames_max"])),
             fmt::format("{}/{}", j["arrivals_without_token"].get<unsigned>(), j["arrivals"].get<unsigned>()),
             j["wall_tokens_per_s"].get<double>(), j["vs_unbudgeted_wall"].get<double>(), targets);
  std::fflush(stdout);
}

void run(Opts &o) {
  const std::string path = bench::model_path(o.model);
  auto model = bench::load_model(path);
  if (o.threads == 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.adapter_groups > 0) o.loras = std::make_unique<bench::BenchLoras>(model, path, o.adapter_groups, 8);
  if (o.image_every > 0) {
    o.projector = std::make_unique<bench::BenchProjector>(model, path, 1, weft::parse_mmproj_kind(o.image_kind));
  }

  fmt::print("\nweft bench frame: model {}, {} NPCs generating (their prompts decoded before the first frame), "
             "a {}-token prompt arriving every {} frames asking for a 16-token reply, {} frames, n_threads = {}, "
             "{}, load average {:.2f}\n",
             path, o.conversations, o.arrival_tokens, o.arrive_every, o.frames, o.threads,
             o.adapter_groups == 0 ? std::string("no adapters")
                                   : fmt::format("{} LoRA groups (rank 8; NPC i under LoRA i mod {})",
                                                 o.adapter_groups, o.adapter_groups),
             bench::load_average_1min());
  if (o.frame_ms > 0) {
    fmt::print("frames paced to {:.1f} ms: a frame is one step plus the bench's bookkeeping, then a sleep for the rest "
               "of it (the game's share); wall tok/s is tokens decoded over the whole run's wall time\n\n",
               o.frame_ms);
  } else {
    fmt::print("frames run back to back: a frame is one step plus the bench's bookkeeping, with no sleep for the "
               "rest of the frame; wall tok/s is tokens decoded over the whole run's wall time\n\n");
  }
  std::fflush(stdout);
  const double floor_ms = one_token_step_ms(model, o);
  fmt::print("a step of one token (the least a step can decode) takes {:.2f} ms here (median of 21): the floor F\n\n",
             floor_ms);
  std::fflush(stdout);
  const auto base = run_workload(model, o, 0);
  const Baseline base_rates{base.busy_s > 0 ? static_cast<double>(base.tokens_decoded) / base.busy_s : 0,
                            base.wall_s > 0 ? static_cast<double>(base.tokens_decoded) / base.wall_s : 0};

  // With images, each row again with pictures arriving, against an
  // unbudgeted run with them.
  Baseline img_rates;
  RunResult base_img;
  if (o.image_every > 0) {
    base_img = run_workload(model, o, 0, true);
    img_rates = {base_img.busy_s > 0 ? static_cast<double>(base_img.tokens_decoded) / base_img.busy_s : 0,
                 base_img.wall_s > 0 ? static_cast<double>(base_img.tokens_decoded) / base_img.wall_s : 0};
  }
  print_header();
  nlohmann::json rows = nlohmann::json::array();
  auto base_row = row_json(0, base, base_rates, floor_ms, o.grace_frames);
  print_row(base_row);
  nlohmann::json img_rows = nlohmann::json::array();
  if (o.image_every > 0) {
    img_rows.push_back(row_json(0, base_img, img_rates, floor_ms, o.grace_frames));
    print_row(img_rows.back());
  }
  for (double b : o.budgets) {
    auto j = row_json(b, run_workload(model, o, b), base_rates, floor_ms, o.grace_frames);
    print_row(j);
    rows.push_back(std::move(j));
    if (o.image_every > 0) {
      img_rows.push_back(row_json(b, run_workload(model, o, b, true), img_rates, floor_ms, o.grace_frames));
      print_row(img_rows.back());
    }
  }
  fmt::print(
      "\nNPC tok: tokens sampled per NPC over the run (min/median). NPC wait: the longest run of frames in which an "
      "NPC sampled nothing.\nprompt wait: the longest run of frames in which an arriving prompt had input queued and "
      "none of it was decoded.\nTTFT: frames from a prompt's arrival to its reply's first token (1 = the frame it "
      "arrived), median/max over those that got one; no TTFT: arrivals with none by the end of the run.\n"
      "targets, relative to the floor F = {:.2f} ms: where B >= 2F, p99 <= 1.1*B, max <= 1.5*B, wall tok/s >= 0.8x "
      "unbudgeted, and progress; where B < 2F, below 2x floor: only progress is judged.\n"
      "progress: every NPC sampled at least one token, and no arrival went G = {} frames from arriving without any "
      "of its tokens decoded (one arriving in the last G frames cannot miss).\n",
      floor_ms, o.grace_frames);
  if (o.adapter_groups > 0) {
    fmt::print("adapter switches per run (unbudgeted, then each budget):");
    fmt::print(" {}", base_row["adapter_switches"].get<std::uint64_t>());
    for (const auto &j : rows) fmt::print(" {}", j["adapter_switches"].get<std::uint64_t>());
    fmt::print("; what a switch adds to a decode, as the cost model learnt it: {:.2f} ms\n",
               rows.empty() ? base_row["adapter_switch_ms"].get<double>() : rows.back()["adapter_switch_ms"].get<double>());
  }
  if (o.image_every > 0) {
    fmt::print("\n+img: the same workload with a {}x{} picture ({} projector, and 16 tokens of text, an 8-token reply) "
               "shown every {} frames; {}:\n",
               o.image_side, o.image_side, o.image_kind, o.image_every,
               o.encode == "frame" ? "the frame loop encodes one picture after its step (ImageEncoding::caller, "
                                     "Executor::encode_images), never beside a step"
                                   : "the encoder runs on the executor's own thread, never in a step");
    for (const auto &j : img_rows) {
      const auto &s = j["images"];
      fmt::print("  {}: {} images, encode {:.1f} ms each ({}), {} embeddings batches of {:.2f} ms, "
                 "prepare p50 {:.2f} ms (any thread), prompt_image(prepared) p50 {:.3f} ms / max {:.3f} ms, first "
                 "reply token after {:g}/{:g} frames (median/max), {} without one\n",
                 j["budget_ms"].get<double>() > 0 ? fmt::format("{:g} ms", j["budget_ms"].get<double>()) : "none",
                 s["images_arrived"].get<unsigned>(), s["image_encode_ms_mean"].get<double>(),
                 o.encode == "frame" ? "in the frame loop" : "encoder thread", s["image_batches"].get<std::uint64_t>(), s["image_batch_decode_ms_mean"].get<double>(),
                 s["prepare_ms_p50"].get<double>(), s["prompt_image_call_ms_p50"].get<double>(),
                 s["prompt_image_call_ms_max"].get<double>(),
                 s["image_first_token_frames_median"].get<double>(), s["image_first_token_frames_max"].get<double>(),
                 s["images_without_token"].get<std::uint64_t>());
      fmt::print("    steps while a picture was encoding (the encoder thread beside the step on these cores): {}, "
                 "p99 {:.2f} ms, {} over 1.1 B; the other steps: p99 {:.2f} ms, max {:.2f} ms, {} over 1.1 B\n",
                 s["steps_encoding"].get<std::uint64_t>(), s["steps_encoding_p99_ms"].get<double>(),
                 s["steps_encoding_over_budget"].get<unsigned>(), s["steps_quiet_p99_ms"].get<double>(),
                 s["steps_quiet_max_ms"].get<double>(), s["steps_quiet_over_budget"].get<unsigned>());
      if (o.encode == "frame") {
        fmt::print("    encodes in the frame, after its step: {}, p50 {:.2f} ms, max {:.2f} ms (the frame's own time, "
                   "not the step's)\n",
                   s["frame_encodes"].get<std::uint64_t>(), s["frame_encode_ms_p50"].get<double>(),
                   s["frame_encode_ms_max"].get<double>());
      }
    }
  }
  if (!o.json.empty()) {
    bench::write_json(o.json, {{"bench", "frame"},
                               {"model", path},
                               {"model_description", model.description()},
                               {"conversations", o.conversations},
                               {"frames", o.frames},
                               {"arrive_every", o.arrive_every},
                               {"arrival_tokens", o.arrival_tokens},
                               {"grace_frames", o.grace_frames},
                               {"frames_back_to_back", o.frame_ms == 0},
                               {"frame_ms", o.frame_ms},
                               {"n_threads", o.threads},
                               {"flash_attn_asked", flash_attn_name(o.flash_attn)},
                               {"adapter_groups", o.adapter_groups},
                               {"machine", bench::machine_info()},
                               {"one_token_step_ms", floor_ms},
                               {"unbudgeted", base_row},
                               {"rows", rows},
                               {"image_every", o.image_every},
                               {"image_side", o.image_side},
                               {"image_kind", o.image_kind},
                               {"encode", o.encode},
                               {"image_rows", img_rows}});
  }
}

}  // namespace
}  // namespace bench_frame_cmd

void add_bench_frame(CLI::App &bench) {
  using namespace bench_frame_cmd;
  auto o = std::make_shared<Opts>();
  auto *cmd =
      bench.add_subcommand("frame", "Per-frame step budgets: step times and what players see while prompts arrive");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the generated small model, made on first use)");
  cmd->add_option("--budgets", o->budgets, "Frame budgets B in ms (list); deadline = 1.5*B")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-n,--conversations", o->conversations, "NPCs generating")
      ->check(CLI::Range(1u, 200u))
      ->capture_default_str();
  cmd->add_option("--frames", o->frames, "Frames (steps) per budget")->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--arrive-every", o->arrive_every, "A new prompt every K frames")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--arrival-tokens", o->arrival_tokens, "Tokens of each arriving prompt")
      ->check(CLI::Range(1u, 1u << 16))
      ->capture_default_str();
  cmd->add_option("--grace-frames", o->grace_frames,
                  "G: an arrival with none of its tokens decoded G frames after arriving misses progress")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "KV cells (0 = sized to the workload)")->capture_default_str();
  cmd->add_option("--batch", o->batch, "n_batch")->check(CLI::Range(1u, 1u << 16))->capture_default_str();
  cmd->add_option("--ubatch", o->ubatch, "n_ubatch (0 = n_batch); the deadline is checked between micro-batches")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024))->capture_default_str();
  add_flash_attn_option(*cmd, o->flash_attn);
  cmd->add_option("--adapter-groups", o->adapter_groups,
                  "Spread the NPCs and arrivals over this many random LoRAs (0 = none)")
      ->check(CLI::Range(0u, 16u))
      ->capture_default_str();
  cmd->add_option("--image-every", o->image_every,
                  "Also run each budget with a picture shown every N frames (a generated gemma3 projector; 0 = no)")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--image-kind", o->image_kind,
                  "Projector of those pictures: gemma3 (non-causal) | qwen2vl (M-RoPE, causal; every row then runs "
                  "on the model converted to the qwen2vl architecture)")
      ->check(CLI::IsMember({"gemma3", "qwen2vl"}))
      ->capture_default_str();
  cmd->add_option("--image-side", o->image_side, "Side in pixels of those pictures (RGB)")
      ->check(CLI::Range(1u, 8192u))
      ->capture_default_str();
  cmd->add_option("--encode", o->encode,
                  "Who encodes those pictures: thread (the executor's encoder thread) | frame (the frame loop calls "
                  "Executor::encode_images after its step: ImageEncoding::caller)")
      ->check(CLI::IsMember({"thread", "frame"}))
      ->capture_default_str();
  cmd->add_option("--frame-ms", o->frame_ms,
                  "Pace the frames to this length in ms, sleeping the rest of each (0 = back to back, the worst case)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the random prompt tokens")->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the rows as JSON to this file");
  cmd->callback([o] { run(*o); });
}

}  // namespace weft_cli
