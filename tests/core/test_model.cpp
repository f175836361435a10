#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>

#include "common.hpp"
#include "reference.hpp"

using weft_test::throws_weft;

TEST(Model, TokenizeRoundTripsText) {
  const auto &m = weft_test::tiny();
  for (std::string text : {"Hello, blacksmith!", "  two  spaces", "ünïcödé ✓ 日本", "line\nbreak", ""}) {
    SCOPED_TRACE(text);
    const auto tokens = m.tokenize(text);
    for (auto t : tokens) EXPECT_NO_THROW(m.check_token(t));
    EXPECT_EQ(m.detokenize(tokens), text);
  }
}

TEST(Model, BosOnlyWhenAskedFor) {
  const auto &m = weft_test::tiny();
  ASSERT_GE(m.bos(), 0);
  const auto plain = m.tokenize("Hello");
  const auto with = m.tokenize("Hello", {.add_bos = true});
  ASSERT_FALSE(plain.empty());
  EXPECT_NE(plain.front(), m.bos());
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with.front(), m.bos());
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), with.begin() + 1));
  // SPM keeps the word's space prefix after a removed BOS: " Hello".
  EXPECT_EQ(m.detokenize(with, {.remove_special = true}).find("Hello"), 1u);
}

TEST(Model, SpecialTextParsedOnlyWhenAskedFor) {
  const auto &m = weft_test::tiny();
  const auto literal = m.tokenize("a</s>b");
  const auto parsed = m.tokenize("a</s>b", {.parse_special = true});
  EXPECT_EQ(std::count(literal.begin(), literal.end(), m.eos()), 0);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), m.eos()), 1);
  EXPECT_TRUE(m.is_eog(m.eos()));
  EXPECT_NE(m.detokenize(parsed, {.render_special = true}).find("</s>"), std::string::npos);
  EXPECT_EQ(m.detokenize(parsed).find("</s>"), std::string::npos);
  EXPECT_NE(m.detokenize(literal).find("</s>"), std::string::npos);
}

TEST(Model, InvalidTokenIdsAreRefused) {
  const auto &m = weft_test::tiny();
  for (weft::Token bad : {-1, m.n_vocab(), m.n_vocab() + 1000, INT32_MIN}) {
    SCOPED_TRACE(bad);
    EXPECT_TRUE(throws_weft([&] { m.check_token(bad); }, weft::Errc::out_of_range, std::to_string(bad)));
    const std::vector<weft::Token> tokens{1, bad};
    EXPECT_TRUE(throws_weft([&] { (void)m.detokenize(tokens); }, weft::Errc::out_of_range, "32000"));
    EXPECT_TRUE(throws_weft([&] { (void)m.token_piece(bad); }, weft::Errc::out_of_range));
    EXPECT_FALSE(m.is_eog(bad));
  }
}

TEST(Model, MissingAndCorruptFilesAreTypedErrors) {
  auto dir = weft_test::temp_dir("corrupt");
  EXPECT_TRUE(throws_weft([&] { weft::Model::load({.path = (dir / "none.gguf").string()}); }, weft::Errc::not_found,
                          "none.gguf"));
  EXPECT_TRUE(throws_weft([&] { weft::Model::load({}); }, weft::Errc::invalid_argument, "path"));
  weft_test::write_file(dir / "text.gguf", std::string_view("this is not a model at all"));
  EXPECT_TRUE(throws_weft([&] { weft::Model::load({.path = (dir / "text.gguf").string()}); }, weft::Errc::corrupt,
                          "bad magic"));
  weft_test::write_file(dir / "short.gguf", std::string_view("GG"));
  EXPECT_TRUE(throws_weft([&] { weft::Model::load({.path = (dir / "short.gguf").string()}); }, weft::Errc::corrupt));

  // A real model cut short, and one with its header bytes scrambled.
  const auto good = weft_test::read_file(weft_test::tiny_path());
  const std::vector<char> cut(good.begin(), good.begin() + static_cast<long>(good.size() / 2));
  weft_test::write_file(dir / "cut.gguf", cut);
  EXPECT_TRUE(throws_weft([&] { weft::Model::load({.path = (dir / "cut.gguf").string()}); }, weft::Errc::corrupt,
                          "cut.gguf"));
  auto scrambled = good;
  for (std::size_t i = 8; i < 200; ++i) scrambled[i] = static_cast<char>(0xff);
  weft_test::write_file(dir / "scrambled.gguf", scrambled);
  EXPECT_TRUE(throws_weft([&] { weft::Model::load({.path = (dir / "scrambled.gguf").string()}); },
                          weft::Errc::corrupt));
}

TEST(Model, ProgressIsReportedAndCanCancel) {
  std::vector<float> seen;
  auto m = weft::Model::load({.path = weft_test::tiny_path(), .on_progress = [&](float p) {
                                seen.push_back(p);
                                return true;
                              }});
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_FLOAT_EQ(seen.back(), 1.0f);
  EXPECT_TRUE(throws_weft(
      [&] { weft::Model::load({.path = weft_test::tiny_path(), .on_progress = [](float) { return false; }}); },
      weft::Errc::cancelled));
  // An exception in the callback cancels instead of unwinding through C.
  EXPECT_TRUE(throws_weft(
      [&] {
        weft::Model::load({.path = weft_test::tiny_path(), .on_progress = [](float) -> bool { throw 1; }});
      },
      weft::Errc::cancelled));
}

TEST(Model, LogLinesReachTheSinkOnlyWhenInstalled) {
  std::mutex mu;
  std::vector<std::pair<weft::LogLevel, std::string>> lines;
  weft::set_log_sink(
      [&](weft::LogLevel level, std::string_view line) {
        std::lock_guard lock(mu);
        lines.emplace_back(level, std::string(line));
      },
      weft::LogLevel::debug);
  (void)weft::Model::load({.path = weft_test::tiny_path()});
  weft::set_log_sink(nullptr);
  std::size_t while_installed = 0;
  {
    std::lock_guard lock(mu);
    while_installed = lines.size();
    ASSERT_GT(while_installed, 5u);
    for (auto &[level, line] : lines) EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    const bool mentions_model = std::any_of(lines.begin(), lines.end(),
                                            [](auto &l) { return l.second.find("llama") != std::string::npos; });
    EXPECT_TRUE(mentions_model);
  }
  (void)weft::Model::load({.path = weft_test::tiny_path()});
  std::lock_guard lock(mu);
  EXPECT_EQ(lines.size(), while_installed);
}

TEST(Model, ConcurrentTokenizeOnOneModel) {
  const auto &m = weft_test::tiny();
  const auto expect = m.tokenize("The quick brown fox jumps over the lazy dog.");
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (m.tokenize("The quick brown fox jumps over the lazy dog.") != expect) ++mismatches;
      }
    });
  }
  for (auto &t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Quantised weights decode, and match a raw llama.cpp decode of the same
// model. On a CPU with AMX the pinned llama.cpp's AMX matmul crashed (a
// segfault in ggml_backend_amx_mul_mat on the first decode of any q8_0 or
// q4_0 model, llama.cpp issue 20824); weft loads models without llama.cpp's
// extra CPU buffer types there.
TEST(Model, QuantisedWeightsDecode) {
  const auto dir = weft_test::temp_dir("quantised");
  for (auto type : {weft::WeightType::q8_0, weft::WeightType::q4_0}) {
    const auto path = (dir / "m.gguf").string();
    weft::make_model({.preset = weft::ModelPreset::tiny, .seed = 7, .type = type, .out = path});
    const auto m = weft::Model::load({.path = path});
    weft::Executor ex(m, {.n_ctx = 512, .n_batch = 64, .n_seq_max = 2, .n_threads = 1});
    std::mt19937 rng(1);
    const auto tokens = weft_test::random_tokens(rng, m, 40, true);
    auto c = ex.create();
    c.prompt(tokens);
    EXPECT_GE(weft_test::run_until_idle(ex), 0);
    ASSERT_TRUE(c.has_logits());
    // The tolerance of every equivalence test: 8x the noise raw llama.cpp
    // shows on this model (measured here, not cached: the cache holds tiny's).
    const double tol = std::max(8.0 * weft_test::measure_noise_floor(m), 1e-9);
    EXPECT_LT(weft_test::nmse(c.logits(), weft_test::reference_logits(m, tokens)), tol);
  }
  std::filesystem::remove_all(dir);
}
