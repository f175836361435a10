// `weft bench mixed --wire`: the mixed workload over HTTP to `weft serve`
// (this build's weft) and, when it is built, to llama-server. Tiny workloads
// on the generated tiny model: every conversation completes with exactly the
// tokens it asked for, the JSON holds every run, medians and ratios, and no
// server is left running. Speed is never asserted here.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(WEFT_TEST_MODELS) + "/tiny.gguf";
const std::string kWorkload = " --conversations 4 --rate 50 --system-tokens 16 --prompt-min 4 --prompt-max 16 "
                              "--output-min 2 --output-max 6 --ctx 1024 --slots 2 --threads 1 --step-tokens 16 --step-ms 40 -q";

fs::path temp_dir(const std::string &name) {
  auto dir = fs::temp_directory_path() / ("weft-bench-wire-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

nlohmann::json read_json(const fs::path &path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Every conversation done, every token counted, sane latencies.
void expect_complete(const nlohmann::json &res) {
  const std::string engine = res["engine"];
  EXPECT_TRUE(res["errors"].empty()) << engine << ": " << res["errors"].dump();
  EXPECT_EQ(res["completed"], res["conversations"]) << engine;
  EXPECT_EQ(res["generated_tokens"], res["wanted_tokens"]) << engine;
  EXPECT_GT(res["tokens_per_s"].get<double>(), 0) << engine;
  for (const char *key : {"ttft_ms", "itl_ms", "e2e_s"}) {
    EXPECT_GE(res[key]["p50"].get<double>(), 0) << engine << " " << key;
    EXPECT_LE(res[key]["p50"].get<double>(), res[key]["p99"].get<double>()) << engine << " " << key;
  }
}

std::vector<std::string> engines_of(const nlohmann::json &run) {
  std::vector<std::string> out;
  for (const auto &r : run["results"]) out.push_back(r["engine"]);
  return out;
}

TEST(BenchMixedWire, WeftServeAndInProcessRunTheWholeWorkload) {
  const auto dir = temp_dir("weft");
  const auto json = dir / "wire.json";
  const auto r = weft_test::run_cli("bench mixed --wire --target weft --reps 2 -m " + kTiny + kWorkload + " --json " +
                                    json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto doc = read_json(json);
  EXPECT_EQ(doc["bench"], "mixed-wire");
  ASSERT_EQ(doc["runs"].size(), 2u);
  // The order reverses in the second repetition.
  EXPECT_EQ(engines_of(doc["runs"][0]), (std::vector<std::string>{"weft-serve", "weft"}));
  EXPECT_EQ(engines_of(doc["runs"][1]), (std::vector<std::string>{"weft", "weft-serve"}));
  for (const auto &run : doc["runs"]) {
    EXPECT_EQ(run["load_average_1min"].size(), 3u);
    for (const auto &res : run["results"]) expect_complete(res);
  }
  EXPECT_TRUE(doc["medians"].contains("weft-serve"));
  EXPECT_GT(doc["ratios"]["tokens_per_s weft-serve/weft"]["median"].get<double>(), 0);
  EXPECT_EQ(doc["ratios"]["itl_mean_ms weft-serve-weft"]["per_repetition"].size(), 2u);
  // weft serve ran with the bench's settings.
  const std::string argv = doc["settings"]["weft-serve"]["argv"].dump();
  for (const char *arg : {"\"--step-tokens\",\"16\"", "\"--step-ms\",\"40\"", "\"--parallel\",\"3\"",
                          "\"--ctx\",\"1024\"", "\"-t\",\"1\""})
    EXPECT_NE(argv.find(arg), std::string::npos) << arg << " not in " << argv;
  EXPECT_NE(r.output.find("itl_mean_ms weft-serve-weft"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(BenchMixedWire, AgainstLlamaServerInBothConfigurations) {
#ifdef WEFT_LLAMA_SERVER
  const std::string server = WEFT_LLAMA_SERVER;
#else
  const std::string server;
#endif
  if (server.empty() || ::access(server.c_str(), X_OK) != 0)
    GTEST_SKIP() << "llama-server not built (cmake --build <dir> --target llama-tools)";
  const auto dir = temp_dir("both");
  const auto json = dir / "wire.json";
  const auto r = weft_test::run_cli("bench mixed --wire --reps 1 --server " + server + " -m " + kTiny + kWorkload +
                                    " --json " + json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto doc = read_json(json);
  ASSERT_EQ(doc["runs"].size(), 1u);
  EXPECT_EQ(engines_of(doc["runs"][0]),
            (std::vector<std::string>{"weft-serve", "llama-server", "llama-server-b=step", "weft"}));
  for (const auto &res : doc["runs"][0]["results"]) expect_complete(res);
  for (const char *key : {"itl_p99 weft-serve/llama-server", "tokens_per_s weft-serve/llama-server",
                          "itl_p99 weft-serve/llama-server-b=step", "tokens_per_s weft-serve/llama-server-b=step"})
    EXPECT_GT(doc["ratios"][key]["median"].get<double>(), 0) << key;
  // The tuned configuration: llama-server's -b and -ub are weft's step budget.
  const std::string argv = doc["settings"]["llama-server-b=step"]["argv"].dump();
  EXPECT_NE(argv.find("\"-b\",\"16\",\"-ub\",\"16\""), std::string::npos) << argv;
  fs::remove_all(dir);
}

TEST(BenchMixedWire, MissingWeftBinaryIsNamed) {
  const auto r = weft_test::run_cli("bench mixed --wire --target weft --weft-binary /nonexistent/weft -m " + kTiny +
                                    kWorkload);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("weft not found or not executable at '/nonexistent/weft'"), std::string::npos) << r.output;
}

}  // namespace
