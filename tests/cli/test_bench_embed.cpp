// `weft bench embed`: the JSON is complete and its counts agree (every text
// queued alone was embedded, texts flowed beside the NPCs and none without
// them, the Memory rows hold what was asked); bad input fails. Speed is never
// asserted; llama.cpp's tools are not needed (--peers none).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

const std::string kModels = WEFT_TEST_MODELS;

TEST(BenchEmbed, JsonIsCompleteAndCountsAgree) {
  const fs::path out = fs::temp_directory_path() / ("weft-bench-embed-" + std::to_string(::getpid()) + ".json");
  const auto r = weft_test::run_cli("bench embed -m " + kModels + "/tiny.gguf --embed-model " + kModels +
                                    "/embed.gguf --causal-model " + kModels + "/tiny.gguf -n 3 --frames 30 --texts 10 --text-words 12 --chunk 4 --reps 1 "
                                    "--budget 50 --memory-sizes 10,200 --memory-queries 3 --long-tokens 64 "
                                    "--threads 1 --peers none -q --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("target p99 <= 1.1 B while embeddings flow"), std::string::npos) << r.output;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  fs::remove(out);
  for (const char *k : {"one_token_step_ms", "budget_ms", "alone", "long_text", "frames_without", "frames_with",
                        "llama_embedding", "llama_server", "memory", "machine", "text_tokens", "n_embd"})
    ASSERT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["budget_ms"].get<double>(), 50.0);
  EXPECT_GT(j["one_token_step_ms"].get<double>(), 0.0);

  // Alone: every text got its vector, the tokens the stats count are the texts'.
  const auto &a = j["alone"];
  EXPECT_EQ(a["texts_embedded"].get<unsigned>(), 10u);
  EXPECT_EQ(a["vectors_returned"].get<unsigned>(), 10u);
  EXPECT_EQ(a["embed_tokens"].get<std::uint64_t>(), j["text_tokens"].get<std::uint64_t>());
  EXPECT_GE(a["embed_decodes"].get<unsigned>(), 1u);
  EXPECT_GT(a["texts_per_s"].get<double>(), 0.0);

  // Frames: as many steps as frames; texts embedded only where they flowed,
  // and never more than were queued.
  for (const char *k : {"frames_without", "frames_with"}) {
    const auto &f = j[k];
    for (const char *field : {"p50_ms", "p99_ms", "max_ms", "npc_gap_ms_max", "npc_gap_frames_max", "texts_per_s",
                              "tokens_per_s", "tokens_sampled", "embed_pending_at_end"})
      ASSERT_TRUE(f.contains(field)) << k << "." << field;
    EXPECT_EQ(f["steps"].get<unsigned>(), 30u);
    EXPECT_LE(f["p50_ms"].get<double>(), f["p99_ms"].get<double>());
    EXPECT_LE(f["p99_ms"].get<double>(), f["max_ms"].get<double>());
    EXPECT_GT(f["tokens_sampled"].get<unsigned>(), 0u);
    EXPECT_LE(f["texts_embedded"].get<unsigned>(), f["texts_queued"].get<unsigned>());
  }
  EXPECT_EQ(j["frames_without"]["texts_embedded"].get<unsigned>(), 0u);
  EXPECT_GT(j["frames_with"]["texts_embedded"].get<unsigned>(), 0u);

  // The long text is as long as asked; both timings measured.
  EXPECT_GE(j["long_text"]["tokens"].get<unsigned>(), 64u);
  EXPECT_GT(j["long_text"]["embed_ms"].get<double>(), 0.0);
  EXPECT_GT(j["long_text"]["causal_prompt_ms"].get<double>(), 0.0);

  // Memory: one row per size, of the embed model's width, k hits each.
  ASSERT_EQ(j["memory"].size(), 2u);
  EXPECT_EQ(j["memory"][0]["entries"].get<unsigned>(), 10u);
  EXPECT_EQ(j["memory"][1]["entries"].get<unsigned>(), 200u);
  for (const auto &m : j["memory"]) {
    EXPECT_EQ(m["dimensions"].get<unsigned>(), j["n_embd"].get<unsigned>());
    EXPECT_EQ(m["hits"].get<unsigned>(), 8u);
    EXPECT_LE(m["search_ms_p50"].get<double>(), m["search_ms_p99"].get<double>());
  }
  EXPECT_FALSE(j["llama_embedding"]["ran"].get<bool>());
  EXPECT_FALSE(j["llama_server"]["ran"].get<bool>());
}

TEST(BenchEmbed, BadInputFailsWithAMessage) {
  for (const std::string args : {"-n 0", "--frames 0", "--texts 0", "--peers nope", "--embed-model /nonexistent.gguf"}) {
    const auto r = weft_test::run_cli("bench embed -m " + kModels + "/tiny.gguf --causal-model " + kModels + "/tiny.gguf --peers none -q " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_FALSE(r.output.empty()) << args;
  }
}

}  // namespace
