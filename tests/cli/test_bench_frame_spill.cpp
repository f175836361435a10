// `weft bench frame`, `spill` and `main-thread`: the JSON rows are complete and
// internally consistent, and bad input ends with a message and a non-zero
// exit. Speed is never asserted.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(WEFT_TEST_MODELS) + "/tiny.gguf";

using Run = weft_test::CliRun;
Run weft(const std::string &args) { return weft_test::run_cli(args); }

fs::path json_path(const std::string &name) {
  return fs::temp_directory_path() / ("weft-bench2-" + name + "-" + std::to_string(::getpid()) + ".json");
}

nlohmann::json read_json(const fs::path &path) {
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in);
  fs::remove(path);
  return j;
}

// Every field of a frame row is there and agrees with the others; `frames`
// and `arrivals` are what the command line asked for.
void check_frame_row(const nlohmann::json &r, unsigned frames, unsigned conversations, unsigned arrivals) {
  for (const char *k : {"budget_ms", "floor_ms", "target_judged", "steps", "p50_ms", "p99_ms", "max_ms",
                        "over_budget_share", "tokens_decoded", "tokens_sampled", "deadline_hits", "busy_s", "wall_s",
                        "busy_tokens_per_s", "wall_tokens_per_s", "wall_sampled_per_s", "vs_unbudgeted_busy",
                        "vs_unbudgeted_wall", "npc_tokens_min", "npc_tokens_median", "npc_tokens_max",
                        "npc_tokens_total", "npc_longest_wait_frames", "prompt_longest_wait_frames", "arrivals",
                        "arrival_tokens_sampled", "ttft_frames_median", "ttft_frames_max", "arrivals_without_token",
                        "arrivals_starved", "grace_frames"})
    ASSERT_TRUE(r.contains(k)) << k << " missing in " << r.dump();
  EXPECT_EQ(r["steps"].get<unsigned>(), frames);
  EXPECT_LE(r["p50_ms"].get<double>(), r["p99_ms"].get<double>());
  EXPECT_LE(r["p99_ms"].get<double>(), r["max_ms"].get<double>());
  const double share = r["over_budget_share"];
  EXPECT_GE(share, 0.0);
  EXPECT_LE(share, 1.0);
  EXPECT_LE(r["deadline_hits"].get<unsigned>(), frames);

  // Rates are tokens over the seconds they claim; wall time holds every step.
  const double wall = r["wall_s"], busy = r["busy_s"];
  const auto decoded = r["tokens_decoded"].get<double>(), sampled = r["tokens_sampled"].get<double>();
  EXPECT_GE(wall, busy);
  EXPECT_GT(wall, 0.0);
  EXPECT_NEAR(r["wall_tokens_per_s"].get<double>() * wall, decoded, 1e-6 * decoded + 1e-9);
  EXPECT_NEAR(r["wall_sampled_per_s"].get<double>() * wall, sampled, 1e-6 * sampled + 1e-9);
  EXPECT_GT(busy, 0.0);
  EXPECT_NEAR(r["busy_tokens_per_s"].get<double>() * busy, decoded, 1e-6 * decoded + 1e-9);

  // Per-NPC tokens: ordered, summing with the arrivals' to what the steps sampled.
  const auto npc_min = r["npc_tokens_min"].get<std::uint64_t>(), npc_max = r["npc_tokens_max"].get<std::uint64_t>();
  const auto npc_total = r["npc_tokens_total"].get<std::uint64_t>();
  const double npc_median = r["npc_tokens_median"];
  EXPECT_LE(double(npc_min), npc_median);
  EXPECT_LE(npc_median, double(npc_max));
  EXPECT_LE(npc_min * conversations, npc_total);
  EXPECT_GE(npc_max * conversations, npc_total);
  EXPECT_EQ(npc_total + r["arrival_tokens_sampled"].get<std::uint64_t>(), r["tokens_sampled"].get<std::uint64_t>());

  // Waits fit in the run; an NPC with no token waited the whole run.
  const auto npc_wait = r["npc_longest_wait_frames"].get<unsigned>();
  const auto prompt_wait = r["prompt_longest_wait_frames"].get<unsigned>();
  EXPECT_LE(npc_wait, frames);
  EXPECT_LE(prompt_wait, frames);
  EXPECT_EQ(npc_min == 0, npc_wait == frames);

  // Arrivals: each either has a time to first token or is counted without one;
  // a starved one (G frames, nothing decoded) is a prompt wait of at least G.
  EXPECT_EQ(r["arrivals"].get<unsigned>(), arrivals);
  const auto without = r["arrivals_without_token"].get<unsigned>();
  const auto starved = r["arrivals_starved"].get<unsigned>();
  EXPECT_LE(without, arrivals);
  EXPECT_LE(starved, arrivals);
  EXPECT_TRUE(starved == 0 || prompt_wait >= r["grace_frames"].get<unsigned>()) << r.dump();
  EXPECT_EQ(r["ttft_frames_median"].is_null(), without == arrivals);
  EXPECT_EQ(r["ttft_frames_max"].is_null(), without == arrivals);
  if (!r["ttft_frames_max"].is_null()) {
    EXPECT_GE(r["ttft_frames_median"].get<double>(), 1.0);
    EXPECT_LE(r["ttft_frames_median"].get<double>(), r["ttft_frames_max"].get<double>());
    EXPECT_LE(r["ttft_frames_max"].get<double>(), double(frames));
  }

  // What is judged follows from the budget and the floor; the verdicts from the numbers.
  const double b = r["budget_ms"], floor = r["floor_ms"];
  EXPECT_GT(floor, 0.0);
  if (b <= 0) {
    EXPECT_EQ(r["target_judged"], "none");
    EXPECT_FALSE(r.contains("targets"));
    return;
  }
  EXPECT_EQ(r["target_judged"], b >= 2 * floor ? "timing" : "progress_only");
  ASSERT_TRUE(r.contains("targets") && r.contains("targets_met")) << r.dump();
  const auto &t = r["targets"];
  EXPECT_EQ(t["progress"].get<bool>(), npc_min > 0 && starved == 0);
  bool all = t["progress"].get<bool>();
  if (r["target_judged"] == "timing") {
    EXPECT_EQ(t["p99_le_1_1B"].get<bool>(), r["p99_ms"].get<double>() <= 1.1 * b);
    EXPECT_EQ(t["max_le_1_5B"].get<bool>(), r["max_ms"].get<double>() <= 1.5 * b);
    EXPECT_EQ(t["throughput_ge_0_8x"].get<bool>(), r["vs_unbudgeted_wall"].get<double>() >= 0.8);
    all = all && t["p99_le_1_1B"].get<bool>() && t["max_le_1_5B"].get<bool>() && t["throughput_ge_0_8x"].get<bool>();
  } else {
    for (const char *k : {"p99_le_1_1B", "max_le_1_5B", "throughput_ge_0_8x"}) EXPECT_TRUE(t[k].is_null()) << k;
  }
  EXPECT_EQ(r["targets_met"].get<bool>(), all);
}

TEST(BenchFrame, JsonRowsAreCompleteAndConsistent) {
  const auto out = json_path("frame");
  // 0.001 ms is below twice any floor (only progress is judged); 16.6 ms is
  // judged on timing wherever the floor is under 8.3 ms.
  const auto r = weft("bench frame -m " + kTiny + " -n 3 --frames 12 --arrive-every 4 --arrival-tokens 32 "
                      "--budgets 0.001,16.6 --threads 1 --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char *s : {"p99 <= 1.1*B", "a step of one token", "back to back", "only progress is judged",
                        "progress: every NPC sampled"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " not in\n" << r.output;
  const auto j = read_json(out);
  EXPECT_EQ(j["bench"], "frame");
  EXPECT_GT(j["one_token_step_ms"].get<double>(), 0.0);  // the floor under any budget
  // Arrivals at frames 0, 4 and 8.
  check_frame_row(j["unbudgeted"], 12, 3, 3);
  const auto &base = j["unbudgeted"];
  EXPECT_DOUBLE_EQ(base["budget_ms"].get<double>(), 0.0);
  EXPECT_GT(base["tokens_decoded"].get<unsigned>(), 0u);
  // Unbudgeted, each step decodes everything queued: every NPC talks, every
  // arrival answers, nobody waits.
  EXPECT_GT(base["npc_tokens_min"].get<unsigned>(), 0u);
  EXPECT_EQ(base["arrivals_without_token"].get<unsigned>(), 0u);
  EXPECT_EQ(base["arrivals_starved"].get<unsigned>(), 0u);
  EXPECT_EQ(base["prompt_longest_wait_frames"].get<unsigned>(), 0u);
  EXPECT_DOUBLE_EQ(base["vs_unbudgeted_wall"].get<double>(), 1.0);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["rows"][0]["budget_ms"].get<double>(), 0.001);
  EXPECT_DOUBLE_EQ(j["rows"][1]["budget_ms"].get<double>(), 16.6);
  EXPECT_EQ(j["rows"][0]["target_judged"], "progress_only");
  for (const auto &row : j["rows"]) {
    check_frame_row(row, 12, 3, 3);
    EXPECT_DOUBLE_EQ(row["floor_ms"].get<double>(), j["one_token_step_ms"].get<double>());
  }
}

// Pictures arriving, with either projector kind (qwen2vl: every row on the
// model converted to M-RoPE): each row again with images, which are
// encoded, decoded in embeddings batches and answered.
TEST(BenchFrame, ImagesOfEitherKindAreEncodedDecodedAndAnswered) {
  for (const std::string kind : {"gemma3", "qwen2vl"}) {
    SCOPED_TRACE(kind);
    const auto out = json_path("frame-images-" + kind);
    const auto r = weft("bench frame -m " + kTiny + " -n 2 --frames 24 --arrive-every 12 --arrival-tokens 16 "
                        "--budgets 16.6 --threads 1 --image-every 6 --image-side 64 --image-kind " + kind +
                        " --json " + out.string());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(kind + " projector"), std::string::npos) << r.output;
    const auto j = read_json(out);
    EXPECT_EQ(j["image_kind"], kind);
    ASSERT_EQ(j["image_rows"].size(), 2u);  // unbudgeted, then 16.6 ms
    for (const auto &row : j["image_rows"]) {
      const auto &img = row["images"];
      EXPECT_EQ(img["images_arrived"].get<unsigned>(), 4u);  // frames 0, 6, 12, 18
      EXPECT_GE(img["images_encoded"].get<unsigned>(), 1u);
      EXPECT_GE(img["image_batches"].get<unsigned>(), 1u);
      EXPECT_GT(img["image_batch_decode_ms_mean"].get<double>(), 0.0);
      EXPECT_LE(img["images_without_token"].get<unsigned>(), 4u);
    }
  }
}

TEST(BenchFrame, BadInputFailsWithAMessage) {
  for (const std::string args : {"--budgets 0", "--budgets -4", "--budgets 4,x", "-n 0", "--frames 0",
                                 "--grace-frames 0", "--bogus", "--image-every 4 --image-kind llava"}) {
    const auto r = weft("bench frame -m " + kTiny + " " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_FALSE(r.output.empty()) << args;
  }
}

TEST(BenchSpill, JsonRowsAreCompleteAndConsistent) {
  const auto out = json_path("spill");
  const auto dir = fs::temp_directory_path();
  const auto r = weft("bench spill -m " + kTiny + " -n 8 --oversubscription 4 --turns 2 --history 16 --prompt-tokens 4 "
                      "--gen-tokens 3 --tier all --threads 2 --disk-dir " + dir.string() + " --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = read_json(out);
  EXPECT_EQ(j["bench"], "spill");
  EXPECT_EQ(j["slots"].get<unsigned>(), 2u);
  ASSERT_EQ(j["rows"].size(), 4u);
  const char *names[] = {"resident", "ram", "disk", "recompute"};
  for (std::size_t i = 0; i < 4; ++i) {
    const auto &row = j["rows"][i];
    for (const char *k : {"run", "seconds", "tokens_generated", "workload_tokens", "tokens_per_s", "vs_resident",
                          "parks", "restores", "recomputes", "park_ms", "restore_ms", "bytes_moved",
                          "spill_bytes_per_s", "memcpy_bytes_per_s", "vs_memcpy"})
      ASSERT_TRUE(row.contains(k)) << k << " missing in " << row.dump();
    EXPECT_EQ(row["run"], names[i]);
    // Every run does the same work: 8 conversations x 2 turns x 3 tokens.
    EXPECT_EQ(row["tokens_generated"].get<unsigned>(), 8u * 2 * 3);
    EXPECT_EQ(row["workload_tokens"].get<unsigned>(), 8u * 2 * (4 + 3));
    EXPECT_GE(row["vs_memcpy"].get<double>(), 0.0);
  }
  EXPECT_EQ(j["rows"][0]["parks"].get<unsigned>(), 0u);
  EXPECT_DOUBLE_EQ(j["rows"][0]["vs_resident"].get<double>(), 1.0);
  for (std::size_t i = 1; i < 4; ++i) EXPECT_GT(j["rows"][i]["parks"].get<unsigned>(), 0u) << names[i];
  for (std::size_t i = 1; i < 3; ++i) {
    EXPECT_GT(j["rows"][i]["restores"].get<unsigned>(), 0u) << names[i];
    EXPECT_GT(j["rows"][i]["bytes_moved"].get<double>(), 0.0) << names[i];
  }
  EXPECT_EQ(j["rows"][1]["recomputes"].get<unsigned>(), 0u);
  EXPECT_GT(j["rows"][3]["recomputes"].get<unsigned>(), 0u);
  EXPECT_EQ(j["rows"][3]["restores"].get<unsigned>(), 0u);
}

TEST(BenchSpill, BadInputFailsWithAMessage) {
  for (const std::string args : {"-n 0", "-n -3", "--oversubscription 0", "--tier tape", "--gen-tokens 0",
                                 "--disk-dir /nonexistent/weft", "--bogus"}) {
    const auto r = weft("bench spill -m " + kTiny + " " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_FALSE(r.output.empty()) << args;
  }
}

// `weft bench main-thread --json` prints one JSON object: a row per timed
// call, each with samples, ordered percentiles and no errors, and a worker
// that sampled. Latency targets are the benchmark's business, not the test's.
TEST(BenchMainThread, JsonRowsAreCompleteAndConsistent) {
  const auto r = weft("bench main-thread -m " + kTiny + " --seconds 1 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  // The JSON is the last line that starts with '{' (stderr is mixed in).
  std::size_t at = r.output.starts_with('{') ? 0 : std::string::npos;
  if (const auto nl = r.output.rfind("\n{"); nl != std::string::npos) at = nl + 1;
  ASSERT_NE(at, std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(at, r.output.find('\n', at) - at));
  EXPECT_EQ(j["bench"], "main-thread");
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["frames"].get<unsigned>(), 0u);
  EXPECT_LE(j["late_frames"].get<unsigned>(), j["frames"].get<unsigned>());
  EXPECT_LE(j["late_frames_with_save"].get<unsigned>(), j["late_frames"].get<unsigned>());
  // No step failed a conversation (a decode error would be a core bug).
  EXPECT_EQ(j["conversation_errors"].get<unsigned>(), 0u) << j.value("first_conversation_error", "");
  EXPECT_NEAR(j["tokens_per_s"].get<double>() * j["seconds"].get<double>(), j["tokens_sampled"].get<double>(), 1e-6);
  const std::vector<std::string> calls{
      "prompt",  "tokenize", "generate", "cancel",   "set_sampler", "set_priority", "fork",   "rewind",
      "remove",  "shift_left", "dispose", "park",       "prefetch",     "load",   "poll_events",
      "stats",   "tokens",   "n_tokens", "residency",   "generation",   "error",  "save"};
  ASSERT_EQ(j["rows"].size(), calls.size()) << j.dump();
  bool all_met = true;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto &row = j["rows"][i];
    for (const char *k : {"call", "count", "p50_ms", "p99_ms", "max_ms", "errors", "meets_target"})
      ASSERT_TRUE(row.contains(k)) << k << " missing in " << row.dump();
    EXPECT_EQ(row["call"], calls[i]);
    EXPECT_GE(row["count"].get<unsigned>(), 1u) << row.dump();
    EXPECT_EQ(row["errors"].get<unsigned>(), 0u) << row.dump();
    EXPECT_GE(row["p50_ms"].get<double>(), 0.0);
    EXPECT_LE(row["p50_ms"].get<double>(), row["p99_ms"].get<double>()) << row.dump();
    EXPECT_LE(row["p99_ms"].get<double>(), row["max_ms"].get<double>()) << row.dump();
    // Judged on the numbers it prints; save() is reported, not judged.
    if (calls[i] == "save") {
      EXPECT_TRUE(row["meets_target"].is_null());
      continue;
    }
    const bool met = row["p99_ms"].get<double>() <= j["target_p99_ms"].get<double>() &&
                     row["max_ms"].get<double>() <= j["target_max_ms"].get<double>();
    EXPECT_EQ(row["meets_target"].get<bool>(), met) << row.dump();
    all_met = all_met && met;
  }
  EXPECT_EQ(j["all_met"].get<bool>(), all_met);
}

TEST(BenchMainThread, BadInputFailsWithAMessage) {
  for (const std::string args : {"--seconds 0", "--budget-ms 0", "-n 0", "--save-every 0", "--preset huge", "--bogus"}) {
    const auto r = weft("bench main-thread -m " + kTiny + " " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_FALSE(r.output.empty()) << args;
  }
}

}  // namespace
