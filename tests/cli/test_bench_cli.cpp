// `weft bench`: the JSON rows are complete and their arithmetic holds, and
// bad input (unknown flags, rows that do not fit, missing files, a peer that
// fails or hangs, an interrupt) ends with a clear message and no process left.
// Speed is never asserted here; bench/compare.sh measures it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(WEFT_TEST_MODELS) + "/tiny.gguf";

using Run = weft_test::CliRun;
Run weft(const std::string &args) { return weft_test::run_cli(args); }

fs::path temp_dir(const std::string &name) {
  auto dir = fs::temp_directory_path() / ("weft-bench-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

nlohmann::json read_json(const fs::path &path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A stand-in for llama-server: a shell script.
fs::path script(const fs::path &dir, const std::string &body) {
  const auto path = dir / "fake-llama-server";
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

// Gone, or a zombie waiting for init to reap it: either way not running.
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] == 'Z';
}

pid_t wait_for_pid_file(const fs::path &file, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(file);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

void expect_close(double a, double b, const std::string &what) {
  EXPECT_NEAR(a, b, 1e-6 * std::max(1.0, std::abs(b))) << what;
}

const char *kRowKeys[] = {"pp", "tg", "b", "n_kv", "t_pp", "s_pp", "t_tg", "s_tg", "t", "s"};

TEST(BenchThroughput, JsonRowsHaveEveryKeyAndConsistentArithmetic) {
  const auto dir = temp_dir("throughput");
  const auto json = dir / "rows.json";
  const auto r = weft("bench throughput -m " + kTiny + " --pp 16,24 --tg 4 --parallel 1,3 --threads 1 --json " +
                      json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("S_TG t/s"), std::string::npos) << r.output;
  const auto doc = read_json(json);
  EXPECT_EQ(doc["engine"], "weft");
  EXPECT_EQ(doc["is_pp_shared"], false);
  ASSERT_EQ(doc["rows"].size(), 4u);
  // Rows in batched-bench's order: for each PP, for each TG, for each B.
  const unsigned want[][2] = {{16, 1}, {16, 3}, {24, 1}, {24, 3}};
  for (std::size_t i = 0; i < 4; ++i) {
    const auto &row = doc["rows"][i];
    for (const char *key : kRowKeys) ASSERT_TRUE(row.contains(key)) << "row " << i << " lacks " << key;
    const double pp = row["pp"], tg = row["tg"], b = row["b"];
    EXPECT_EQ(pp, want[i][0]);
    EXPECT_EQ(tg, 4);
    EXPECT_EQ(b, want[i][1]);
    EXPECT_EQ(row["n_kv"].get<double>(), b * (pp + tg));
    const double t_pp = row["t_pp"], t_tg = row["t_tg"], t = row["t"];
    EXPECT_GT(t_pp, 0);
    EXPECT_GT(t_tg, 0);
    expect_close(t, t_pp + t_tg, "T = T_PP + T_TG");
    expect_close(row["s_pp"], b * pp / t_pp, "S_PP = B*PP / T_PP");
    expect_close(row["s_tg"], b * tg / t_tg, "S_TG = B*TG / T_TG");
    expect_close(row["s"], b * (pp + tg) / t, "S = B*(PP+TG) / T");
  }
  fs::remove_all(dir);
}

// --flash-attn reaches the executor, and the JSON and the header say which
// kernel ran and why; auto is a measurement (or its remembered result).
TEST(BenchThroughput, FlashAttnChoiceIsPassedAndReported) {
  const auto dir = temp_dir("throughput-fa");
  for (const std::string fa : {"on", "off", "auto"}) {
    const auto json = dir / (fa + ".json");
    // Without the test presets' WEFT_FLASH_ATTN override: auto is the probe's.
    const auto r = weft_test::run_cli_env("WEFT_FLASH_ATTN= ", "bench throughput -m " + kTiny +
                                                                  " --pp 8 --tg 2 --parallel 2 --threads 1 --flash-attn " +
                                                                  fa + " --json " + json.string());
    ASSERT_EQ(r.status, 0) << r.output;
    const auto doc = read_json(json);
    EXPECT_EQ(doc["flash_attn_asked"], fa);
    const std::string used = doc["flash_attn"], why = doc["attention"];
    if (fa == "auto") {
      EXPECT_TRUE(used == "on" || used == "off") << used;
      EXPECT_TRUE(why.find("measured") != std::string::npos || why.find("remembered") != std::string::npos) << why;
    } else {
      EXPECT_EQ(used, fa);
      EXPECT_NE(why.find("as asked"), std::string::npos) << why;
    }
    EXPECT_NE(r.output.find("--flash-attn " + fa + ": " + why), std::string::npos) << r.output;
  }
  const auto bad = weft("bench throughput -m " + kTiny + " --flash-attn maybe");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("maybe"), std::string::npos) << bad.output;
  fs::remove_all(dir);
}

// weft info shows the kernel an executor of the given shape gets.
TEST(Info, ShowsTheAttentionKernelOfTheShape) {
  const auto off = weft("info -m " + kTiny + " --ctx 256 --parallel 2 -t 1 --flash-attn off");
  ASSERT_EQ(off.status, 0) << off.output;
  EXPECT_NE(off.output.find("attention   flash attention off (as asked)"), std::string::npos) << off.output;
  const auto aut = weft_test::run_cli_env("WEFT_FLASH_ATTN= ", "info -m " + kTiny + " --ctx 256 --parallel 2 -t 1");
  ASSERT_EQ(aut.status, 0) << aut.output;
  EXPECT_NE(aut.output.find("2 conversations x "), std::string::npos) << aut.output;
  const auto env = weft_test::run_cli_env("WEFT_FLASH_ATTN=on ", "info -m " + kTiny + " --ctx 256 --parallel 2 -t 1");
  EXPECT_NE(env.output.find("flash attention on (WEFT_FLASH_ATTN in the environment)"), std::string::npos)
      << env.output;
  const auto none = weft("info -m " + kTiny + " --no-executor");
  ASSERT_EQ(none.status, 0) << none.output;
  EXPECT_EQ(none.output.find("attention "), std::string::npos) << none.output;
  // The native build (tests/dist covers the portable one) says so.
  EXPECT_NE(none.output.find("cpu code    native (built for the build machine's CPU"), std::string::npos)
      << none.output;
}

TEST(BenchThroughput, SharedPromptCountsThePromptOnce) {
  const auto dir = temp_dir("pps");
  const auto json = dir / "rows.json";
  const auto r = weft("bench throughput -m " + kTiny + " --pp 20 --tg 3 --parallel 4 --pps --threads 1 --json " +
                      json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto row = read_json(json)["rows"].at(0);
  const double pp = row["pp"], tg = row["tg"], b = row["b"], t = row["t"];
  EXPECT_EQ(row["n_kv"].get<double>(), pp + b * tg);  // batched-bench -pps with a unified cache
  expect_close(row["s_pp"], pp / row["t_pp"].get<double>(), "S_PP = PP / T_PP");
  expect_close(row["s"], (pp + b * tg) / t, "S = (PP + B*TG) / T");
  fs::remove_all(dir);
}

TEST(BenchThroughput, RowThatDoesNotFitIsNamed) {
  // 256 cells: B=2 needs 2*(100+28) = 256 and fits; B=4 needs 512.
  const std::string args = "bench throughput -m " + kTiny + " --ctx 256 --pp 100 --tg 28 --parallel 1,2,4 --threads 1";
  const auto r = weft(args);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("row PP=100 TG=28 B=4 needs 512 KV cells (B*(PP+TG)), the context has 256"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("B=2 needs"), std::string::npos) << r.output;
  const auto skipped = weft(args + " --skip-unfit");
  EXPECT_EQ(skipped.status, 0) << skipped.output;
  EXPECT_NE(skipped.output.find("skipping rows"), std::string::npos) << skipped.output;
}

TEST(BenchThroughput, BadInputExitsNonZeroWithAMessage) {
  auto r = weft("bench throughput -m " + kTiny + " --no-such-flag");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--no-such-flag"), std::string::npos) << r.output;

  r = weft("bench throughput -m /nonexistent/model.gguf");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("'/nonexistent/model.gguf' does not exist"), std::string::npos) << r.output;

  r = weft("bench throughput -m " + kTiny + " --parallel 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--parallel"), std::string::npos) << r.output;

  r = weft("bench throughput -m " + kTiny + " --parallel 64 --batch 32");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("row B=64 cannot run"), std::string::npos) << r.output;
}

TEST(BenchOverhead, RowsCountEveryTokenAndSplitTheStepTime) {
  const auto dir = temp_dir("overhead");
  const auto json = dir / "rows.json";
  const auto r = weft("bench overhead -m " + kTiny + " --convs 1,3 --temperature 0,0.8 --tokens 5 --prompt 4 --reps 2 "
                      "--threads 1 --json " + json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto doc = read_json(json);
  ASSERT_EQ(doc["rows"].size(), 4u);
  for (const auto &row : doc["rows"]) {
    const auto b = row["b"].get<unsigned>();
    ASSERT_EQ(row["reps"].size(), 2u);
    for (const auto &rep : row["reps"]) {
      EXPECT_EQ(rep["sampled"].get<unsigned>(), b * 5) << row.dump();  // ignore_eos: every token, every rep
      EXPECT_EQ(rep["steps"].get<unsigned>(), 5u) << row.dump();       // one token each per step
      EXPECT_GT(rep["overhead_us_per_token"].get<double>(), 0.0);
      EXPECT_GT(rep["decode_us_per_token"].get<double>(), 0.0);
    }
    const double a = row["reps"][0]["overhead_us_per_token"], c = row["reps"][1]["overhead_us_per_token"];
    EXPECT_EQ(row["overhead_us_per_token_median"].get<double>(), std::min(a, c));  // nearest rank of two
  }
  const auto bad = weft("bench overhead -m " + kTiny + " --convs 0");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--convs"), std::string::npos) << bad.output;
  fs::remove_all(dir);
}

const std::string kSmallMixed = " --conversations 4 --rate 50 --system-tokens 16 --prompt-min 4 --prompt-max 16 "
                                "--output-min 2 --output-max 6 --ctx 1024 --slots 2 --threads 1 -q";

TEST(BenchMixed, WeftRunsTheWholeWorkload) {
  const auto dir = temp_dir("mixed");
  const auto json = dir / "mixed.json";
  const auto r = weft("bench mixed -m " + kTiny + " --target weft" + kSmallMixed + " --json " + json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto doc = read_json(json);
  ASSERT_EQ(doc["results"].size(), 1u);
  const auto &res = doc["results"][0];
  EXPECT_EQ(res["engine"], "weft");
  EXPECT_EQ(res["completed"], 4);
  EXPECT_EQ(res["generated_tokens"], res["wanted_tokens"]);
  EXPECT_TRUE(res["errors"].empty());
  for (const char *key : {"ttft_ms", "itl_ms", "e2e_s"}) {
    for (const char *q : {"p50", "p99"}) EXPECT_TRUE(res[key].contains(q)) << key << " " << q;
    EXPECT_LE(res[key]["p50"].get<double>(), res[key]["p99"].get<double>()) << key;
  }
  EXPECT_GT(res["tokens_per_s"].get<double>(), 0);
  fs::remove_all(dir);
}

// bench prefix: NPCs sent whole (no fork); weft decodes the lore once.
TEST(BenchPrefix, WeftDecodesTheSharedLoreOnce) {
  const auto dir = temp_dir("prefix");
  const auto json = dir / "prefix.json";
  const auto r = weft("bench prefix -m " + kTiny + " --target weft --conversations 6 --rate 50 --lore-tokens 64 "
                      "--sheet-tokens 8 --output 4 --ctx 2048 --slots 2 --threads 1 -q --json " + json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto doc = read_json(json);
  ASSERT_EQ(doc["results"].size(), 1u);
  const auto &res = doc["results"][0];
  EXPECT_EQ(res["completed"], 6);
  EXPECT_EQ(res["generated_tokens"], res["wanted_tokens"]);
  EXPECT_EQ(res["prompt_tokens"], 6 * (1 + 64 + 8));
  EXPECT_LE(res["prompt_tokens_decoded"].get<int>(), 1 + 64 + 6 * 8) << "the lore (and BOS) once, each sheet once";
  EXPECT_GT(doc["settings"]["weft"]["prefix"]["prefix_tokens_reused"].get<int>(), 0);
  fs::remove_all(dir);
}

TEST(BenchMixed, MissingServerBinaryIsNamed) {
  const auto r = weft("bench mixed -m " + kTiny + " --target server --server /nonexistent/llama-server" + kSmallMixed);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("llama-server not found or not executable at '/nonexistent/llama-server'"),
            std::string::npos)
      << r.output;
}

TEST(BenchMixed, PeerThatExitsAtStartIsReportedWithItsLog) {
  const auto dir = temp_dir("peer-exit");
  const auto server = script(dir, "echo 'error: cannot load the model' >&2\nexit 3");
  const auto r = weft("bench mixed -m " + kTiny + " --target server --server " + server.string() +
                      " --server-log " + (dir / "log").string() + kSmallMixed);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("llama-server exited (status 3) before it was ready"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot load the model"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(BenchMixed, PeerThatNeverGetsReadyIsStoppedAfterTheTimeout) {
  const auto dir = temp_dir("peer-hang");
  const auto pid_file = dir / "pid";
  const auto server = script(dir, "echo $$ > " + pid_file.string() + "\nexec sleep 60");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = weft("bench mixed -m " + kTiny + " --target server --ready-timeout 1 --server " + server.string() +
                      " --server-log " + (dir / "log").string() + kSmallMixed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("llama-server was not ready within 1 s (stopped it)"), std::string::npos) << r.output;
  const pid_t pid = wait_for_pid_file(pid_file, std::chrono::seconds(1));
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(process_gone(pid)) << "the fake server " << pid << " is still running";
  fs::remove_all(dir);
}

TEST(BenchMixed, InterruptStopsThePeer) {
  const auto dir = temp_dir("peer-sigint");
  const auto pid_file = dir / "pid";
  const auto server = script(dir, "echo $$ > " + pid_file.string() + "\nexec sleep 60");
  const std::string model = kTiny, server_path = server.string(), log = (dir / "log").string();
  std::vector<std::string> args = {WEFT_CLI, "bench", "mixed", "-m", model, "--target", "server",
                                   "--ready-timeout", "30", "--server", server_path, "--server-log", log, "-q"};
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t bench = 0;
  ASSERT_EQ(::posix_spawn(&bench, WEFT_CLI, nullptr, nullptr, argv.data(), environ), 0);
  const pid_t server_pid = wait_for_pid_file(pid_file, std::chrono::seconds(20));
  ::kill(bench, server_pid > 0 ? SIGINT : SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(bench, &status, 0), bench);
  ASSERT_GT(server_pid, 0) << "the fake server did not start";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "status " << status;
  // The handler killed it before the bench died; init reaps it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!process_gone(server_pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(process_gone(server_pid)) << "the fake server " << server_pid << " outlived the interrupted bench";
  fs::remove_all(dir);
}

}  // namespace

TEST(BenchSchema, OneRowPerConversationCountWithEveryRepetition) {
  const auto dir = temp_dir("schema");
  const auto json = dir / "schema.json";
  const auto r = weft("bench schema -m " + kTiny + " --target weft --conversations 1,2 --prompt 4 --output 6 "
                      "--reps 2 --threads 1 -q --json " + json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto doc = read_json(json);
  EXPECT_EQ(doc["bench"], "schema");
  ASSERT_EQ(doc["results"].size(), 2u);
  for (const auto &row : doc["results"]) {
    EXPECT_EQ(row["engine"], "weft");
    ASSERT_EQ(row["plain_runs"].size(), 2u);
    ASSERT_EQ(row["schema_runs"].size(), 2u);
    for (const char *k : {"plain_tokens_per_s", "schema_tokens_per_s", "schema_over_plain"})
      EXPECT_GT(row[k].get<double>(), 0.0) << k << " " << row.dump();
  }
  // A schema the converter refuses stops the bench before it starts, naming where.
  const auto bad = weft("bench schema -m " + kTiny + " --target weft --schema '{\"type\": \"strin\"}' -q");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("strin"), std::string::npos) << bad.output;
  fs::remove_all(dir);
}

// Plain attention cuts where asked (the kept last token again for its
// logits, then the new one); a recurrent state decodes everything the rewind
// kept, but a reroll begins at the prompt's end it kept.
TEST(BenchRewind, EachFamilyDecodesWhatItsMemoryNeeds) {
  const auto dir = temp_dir("rewind");
  const auto json = dir / "rewind.json";
  std::string models;
  for (const char *arch : {"llama", "mamba"}) {
    const auto path = (dir / (std::string(arch) + ".gguf")).string();
    const auto made = weft("make-model --preset tiny --arch " + std::string(arch) + " -q --out " + path);
    ASSERT_EQ(made.status, 0) << made.output;
    models += " -m " + path;
  }
  const auto r = weft("bench rewind" + models + " --target weft --tokens 40 --back 8 --reps 1 --threads 1 -q --json " +
                      json.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto doc = read_json(json);
  EXPECT_EQ(doc["bench"], "rewind");
  ASSERT_EQ(doc["results"].size(), 2u);
  const auto &plain = doc["results"][0]["weft"], &recurrent = doc["results"][1]["weft"];
  EXPECT_EQ(doc["results"][1]["memory"], 2) << "mamba is recurrent";
  EXPECT_EQ(plain["rewind_decoded"], 2);
  EXPECT_EQ(plain["fork_decoded"], 2);
  EXPECT_EQ(plain["reroll_decoded"], 2);
  EXPECT_EQ(recurrent["rewind_decoded"], 40 - 8 + 1);
  EXPECT_EQ(recurrent["fork_decoded"], 40 - 8 + 1);
  EXPECT_EQ(recurrent["reroll_decoded"], 1) << "the sampled token only";
  for (const char *k : {"prompt_ms", "rewind_ms", "fork_ms", "reroll_ms"}) EXPECT_GT(plain[k].get<double>(), 0.0) << k;

  const auto bad = weft("bench rewind -m " + kTiny + " --target weft --tokens 40 --back 40 -q");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--back 40 must be in [1, --tokens 40)"), std::string::npos) << bad.output;
  fs::remove_all(dir);
}
