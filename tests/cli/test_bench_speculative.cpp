// `weft bench speculative` on the tiny model with tiny sizes: it runs, prints
// its table and the floor, and its JSON has a row per conversation count and
// engine with counts that hold (acceptance within [0, 1], no drafts without a
// drafter, forced lookup drafting). Speed is never asserted here.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_run.hpp"

namespace {

namespace fs = std::filesystem;

TEST(BenchSpeculative, RunsOnTinyAndPrintsItsTable) {
  const fs::path out = fs::temp_directory_path() / ("weft-bench-spec-" + std::to_string(::getpid()) + ".json");
#ifdef WEFT_LLAMA_SERVER
  const bool server = fs::exists(WEFT_LLAMA_SERVER);
#else
  const bool server = false;
#endif
  const auto r = weft_test::run_cli(std::string("bench speculative -m ") + WEFT_TEST_MODELS +
                                    "/tiny.gguf --conversations 1 2 --tokens 12 --prompt 16 --reps 1 --floor-max 3 "
                                    "--bias-tokens 5 --flash-attn off -t 1 -q --target " +
                                    (server ? "both" : "weft") + " --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char *s : {"weft bench speculative, tiny", "| convs | engine", "weft lookup forced",
                        "the floor, one sequence", "flash attention off"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  }
  if (server) {
    EXPECT_NE(r.output.find("llama-server spec"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--spec-type ngram-simple --spec-ngram-simple-size-m 8"), std::string::npos) << r.output;
  }
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  fs::remove(out);
  ASSERT_EQ(j["results"].size(), 1u);
  const auto &res = j["results"][0];
  const std::size_t engines = server ? 5 : 3;
  ASSERT_EQ(res["rows"].size(), 2 * engines) << res.dump();
  for (const auto &row : res["rows"]) {
    EXPECT_GT(row["reply_s"].get<double>(), 0.0) << row.dump();
    EXPECT_GE(row["acceptance"].get<double>(), 0.0) << row.dump();
    EXPECT_LE(row["acceptance"].get<double>(), 1.0) << row.dump();
    const auto engine = row["engine"].get<std::string>();
    if (engine == "weft" || engine == "llama-server") {
      EXPECT_EQ(row["drafted_per_reply"].get<double>(), 0.0) << row.dump();
      EXPECT_DOUBLE_EQ(row["speedup"].get<double>(), 1.0) << row.dump();
    }
    // Forced: five tokens far above the rest make the reply repeat, so lookup drafts.
    if (engine == "weft lookup forced") {
      EXPECT_GT(row["drafted_per_reply"].get<double>(), 0.0) << row.dump();
    }
  }
  ASSERT_EQ(res["floor"].size(), 3u);
  for (const auto &f : res["floor"]) EXPECT_GT(f["decode_ms"].get<double>(), 0.0) << f.dump();
}

TEST(BenchSpeculative, BadInputFailsWithAMessage) {
  const auto r = weft_test::run_cli(std::string("bench speculative -m ") + WEFT_TEST_MODELS +
                                    "/tiny.gguf --draft-max 40 --target weft");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--draft-max"), std::string::npos) << r.output;
}

}  // namespace
