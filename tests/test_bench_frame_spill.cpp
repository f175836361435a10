// `weft bench frame` and `weft bench spill`: the JSON rows are complete and
// internally consistent, and bad input ends with a message and a non-zero
// exit. Speed is never asserted.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

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

void check_frame_row(const nlohmann::json &r, unsigned frames) {
  for (const char *k : {"budget_ms", "steps", "p50_ms", "p99_ms", "max_ms", "over_budget_share", "tokens_decoded",
                        "tokens_sampled", "deadline_hits", "busy_s", "tokens_per_s", "vs_unbudgeted"})
    ASSERT_TRUE(r.contains(k)) << k << " missing in " << r.dump();
  EXPECT_EQ(r["steps"].get<unsigned>(), frames);
  EXPECT_LE(r["p50_ms"].get<double>(), r["p99_ms"].get<double>());
  EXPECT_LE(r["p99_ms"].get<double>(), r["max_ms"].get<double>());
  const double share = r["over_budget_share"];
  EXPECT_GE(share, 0.0);
  EXPECT_LE(share, 1.0);
  EXPECT_LE(r["deadline_hits"].get<unsigned>(), frames);
  EXPECT_GE(r["tokens_per_s"].get<double>(), 0.0);
}

TEST(BenchFrame, JsonRowsAreCompleteAndConsistent) {
  const auto out = json_path("frame");
  const auto r = weft("bench frame -m " + kTiny + " -n 2 --frames 12 --arrive-every 4 --arrival-tokens 32 "
                      "--budgets 4,16.6 --threads 2 --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("p99 <= 1.1*B"), std::string::npos) << r.output;
  const auto j = read_json(out);
  EXPECT_EQ(j["bench"], "frame");
  EXPECT_GT(j["one_token_step_ms"].get<double>(), 0.0);  // the floor under any budget
  EXPECT_NE(r.output.find("a step of one token"), std::string::npos) << r.output;
  check_frame_row(j["unbudgeted"], 12);
  EXPECT_DOUBLE_EQ(j["unbudgeted"]["budget_ms"].get<double>(), 0.0);
  EXPECT_GT(j["unbudgeted"]["tokens_decoded"].get<unsigned>(), 0u);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["rows"][0]["budget_ms"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(j["rows"][1]["budget_ms"].get<double>(), 16.6);
  for (const auto &row : j["rows"]) {
    check_frame_row(row, 12);
    ASSERT_TRUE(row.contains("targets"));
    for (const char *k : {"p99_le_1_1B", "max_le_1_5B", "throughput_ge_0_8x"}) EXPECT_TRUE(row["targets"][k].is_boolean());
  }
}

TEST(BenchFrame, BadInputFailsWithAMessage) {
  for (const std::string args : {"--budgets 0", "--budgets -4", "--budgets 4,x", "-n 0", "--frames 0", "--bogus"}) {
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

}  // namespace
