// FlashAttention::automatic: both kernels timed on scratch contexts, the
// result kept in the process and in ExecutorParams::tuning_cache_dir.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <tuple>

#include "common.hpp"
#include "exec/attention_probe.hpp"
#include "reference.hpp"

using weft_test::random_tokens;
using weft_test::run_until_idle;

namespace {

weft::ExecutorParams probed(const std::filesystem::path &dir, std::uint32_t n_seq_max = 4) {
  return {.n_ctx = 1024, .n_batch = 64, .n_seq_max = n_seq_max, .n_threads = 2, .tuning_cache_dir = dir.string()};
}

// The test presets set WEFT_FLASH_ATTN=off (every other test compares with
// the kernel it was validated with); these tests are about automatic itself.
struct NoEnvOverride {
  std::string saved;
  bool had = false;
  NoEnvOverride() {
    if (const char *v = std::getenv("WEFT_FLASH_ATTN")) {
      saved = v;
      had = true;
    }
    ::unsetenv("WEFT_FLASH_ATTN");
  }
  ~NoEnvOverride() {
    if (had) ::setenv("WEFT_FLASH_ATTN", saved.c_str(), 1);
  }
};

// Tiny's rounds take a fraction of a millisecond, and ctest runs two test
// processes at once: the spread check would keep most results off disk.
struct AnySpread {
  AnySpread() { weft::detail::set_attention_probe_spread(1e9); }
  ~AnySpread() { weft::detail::set_attention_probe_spread(0); }
};

// Lines of the cache file: key flash_ms plain_ms.
std::vector<std::string> cache_lines(const std::filesystem::path &dir) {
  std::ifstream in(dir / "attention-probe.txt");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void expect_probe_consistent(const weft::ExecutorStats &s, std::uint32_t seqs) {
  EXPECT_GT(s.flash_attn_probe_ms, 0);
  EXPECT_GT(s.plain_attn_probe_ms, 0);
  // The faster kernel; flash attention unless plain attention is clearly faster.
  EXPECT_EQ(s.flash_attn, weft::detail::flash_attention_chosen(s.flash_attn_probe_ms, s.plain_attn_probe_ms)
                              ? weft::FlashAttention::enabled
                              : weft::FlashAttention::disabled);
  EXPECT_EQ(s.attn_probe_seqs, seqs);
  EXPECT_GT(s.attn_probe_depth, 0u);
}

}  // namespace

TEST(AttentionProbe, MeasuresOnceThenRemembersInProcessAndOnDisk) {
  const NoEnvOverride no_env;
  const auto &m = weft_test::tiny();
  const auto dir = weft_test::temp_dir("attn-probe");
  const AnySpread any;
  weft::detail::forget_attention_probes();
  weft::ExecutorStats first;
  {
    weft::Executor a(m, probed(dir));
    first = a.stats();
  }
  EXPECT_EQ(first.flash_attn_source, weft::AttentionSource::measured);
  expect_probe_consistent(first, 4);
  ASSERT_EQ(cache_lines(dir).size(), 1u);

  // The same shape again: this process's result, not a new measurement.
  weft::Executor b(m, probed(dir));
  EXPECT_EQ(b.stats().flash_attn_source, weft::AttentionSource::remembered);
  EXPECT_EQ(b.stats().flash_attn, first.flash_attn);
  EXPECT_EQ(b.stats().flash_attn_probe_ms, first.flash_attn_probe_ms);

  // A new process (simulated): the file's result, to the file's precision.
  weft::detail::forget_attention_probes();
  weft::Executor c(m, probed(dir));
  EXPECT_EQ(c.stats().flash_attn_source, weft::AttentionSource::remembered);
  EXPECT_EQ(c.stats().flash_attn, first.flash_attn);
  EXPECT_NEAR(c.stats().flash_attn_probe_ms, first.flash_attn_probe_ms, 1e-4);

  // Another shape is another measurement, kept beside the first.
  weft::Executor d(m, probed(dir, 8));
  EXPECT_EQ(d.stats().flash_attn_source, weft::AttentionSource::measured);
  expect_probe_consistent(d.stats(), 8);
  EXPECT_EQ(cache_lines(dir).size(), 2u);

  // "" keeps results in the process only: nothing is written anywhere.
  const auto other = weft_test::temp_dir("attn-probe-none");
  weft::detail::forget_attention_probes();
  auto p = probed(other, 2);
  p.tuning_cache_dir = "";
  weft::Executor e(m, p);
  EXPECT_EQ(e.stats().flash_attn_source, weft::AttentionSource::measured);
  EXPECT_TRUE(std::filesystem::is_empty(other));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(other);
}

TEST(AttentionProbe, CorruptOrUnwritableCacheIsMeasuredNotFatal) {
  const NoEnvOverride no_env;
  const auto &m = weft_test::tiny();
  const auto dir = weft_test::temp_dir("attn-probe-bad");
  const AnySpread any;
  {
    std::ofstream out(dir / "attention-probe.txt", std::ios::binary);
    out << "\x01\x02 not a number\nffff nan -3\n" << std::string(100, '\0');
  }
  weft::detail::forget_attention_probes();
  weft::Executor a(m, probed(dir));
  EXPECT_EQ(a.stats().flash_attn_source, weft::AttentionSource::measured);
  expect_probe_consistent(a.stats(), 4);
  // Rewritten with the new result, which a later process finds.
  weft::detail::forget_attention_probes();
  weft::Executor b(m, probed(dir));
  EXPECT_EQ(b.stats().flash_attn_source, weft::AttentionSource::remembered);

  // A directory that cannot be made (under a regular file): logged only.
  weft::detail::forget_attention_probes();
  weft::Executor c(m, probed(dir / "attention-probe.txt" / "sub", 2));
  EXPECT_EQ(c.stats().flash_attn_source, weft::AttentionSource::measured);
  expect_probe_consistent(c.stats(), 2);
  std::filesystem::remove_all(dir);
}

// The decision from the timings, with the file's line for this shape
// rewritten: plain attention only when it is faster by more than the margin.
TEST(AttentionProbe, PlainAttentionOnlyWhenClearlyFaster) {
  const NoEnvOverride no_env;
  const auto &m = weft_test::tiny();
  const auto dir = weft_test::temp_dir("attn-probe-margin");
  const AnySpread any;
  weft::detail::forget_attention_probes();
  { weft::Executor a(m, probed(dir)); }
  const auto lines = cache_lines(dir);
  ASSERT_EQ(lines.size(), 1u);
  const std::string key = lines[0].substr(0, lines[0].find(' '));
  const double margin = weft::detail::kPlainAttentionMargin;
  for (const auto &[flash, plain, want] : std::vector<std::tuple<double, double, weft::FlashAttention>>{
           {50.0, 100.0, weft::FlashAttention::enabled},
           {100.0, 100.0, weft::FlashAttention::enabled},
           {100.0 * margin - 1.0, 100.0, weft::FlashAttention::enabled},
           {100.0 * margin + 1.0, 100.0, weft::FlashAttention::disabled},
           {300.0, 100.0, weft::FlashAttention::disabled}}) {
    {
      std::ofstream out(dir / "attention-probe.txt", std::ios::trunc);
      out << key << ' ' << flash << ' ' << plain << '\n';
    }
    weft::detail::forget_attention_probes();
    weft::Executor e(m, probed(dir));
    EXPECT_EQ(e.stats().flash_attn_source, weft::AttentionSource::remembered);
    EXPECT_EQ(e.stats().flash_attn, want) << flash << " ms with flash attention, " << plain << " without";
  }
  std::filesystem::remove_all(dir);
}

TEST(AttentionProbe, UnsteadyRoundsAreUsedButNotKept) {
  const NoEnvOverride no_env;
  const auto &m = weft_test::tiny();
  const auto dir = weft_test::temp_dir("attn-probe-unsteady");
  weft::detail::set_attention_probe_spread(0.5);  // no probe can be this steady
  weft::detail::forget_attention_probes();
  weft::Executor a(m, probed(dir));
  weft::detail::set_attention_probe_spread(0);
  EXPECT_EQ(a.stats().flash_attn_source, weft::AttentionSource::measured);
  expect_probe_consistent(a.stats(), 4);
  EXPECT_FALSE(std::filesystem::exists(dir / "attention-probe.txt"));
  // Kept in the process all the same: the next executor does not probe.
  weft::Executor b(m, probed(dir));
  EXPECT_EQ(b.stats().flash_attn_source, weft::AttentionSource::remembered);
  std::filesystem::remove_all(dir);
}

TEST(AttentionProbe, ExplicitSettingsAndQuantisedCacheAreNotProbed) {
  const NoEnvOverride no_env;
  const auto &m = weft_test::tiny();
  for (const auto f : {weft::FlashAttention::enabled, weft::FlashAttention::disabled}) {
    weft::Executor ex(m, {.n_ctx = 256, .n_batch = 32, .n_seq_max = 2, .n_threads = 1, .flash_attn = f});
    const auto s = ex.stats();
    EXPECT_EQ(s.flash_attn, f);
    EXPECT_EQ(s.flash_attn_source, weft::AttentionSource::asked);
    EXPECT_EQ(s.flash_attn_probe_ms, 0);
    EXPECT_EQ(s.attn_probe_seqs, 0u);
  }
  // q8_0 needs flash attention: llama.cpp's own automatic choice. (tiny's
  // 16-wide heads cannot hold a q8_0 cache, so the resolution alone.)
  const auto q = weft::detail::choose_attention(m, {.kv_type = weft::KvType::q8_0}, 1);
  EXPECT_EQ(q.type, LLAMA_FLASH_ATTN_TYPE_AUTO);
  EXPECT_EQ(q.reported, weft::FlashAttention::automatic);
  EXPECT_EQ(q.source, weft::AttentionSource::kv_type);
}

TEST(AttentionProbe, EnvironmentOverridesAutomaticOnly) {
  const NoEnvOverride restore;
  const auto &m = weft_test::tiny();
  const weft::ExecutorParams p{.n_ctx = 256, .n_batch = 32, .n_seq_max = 2, .n_threads = 1, .tuning_cache_dir = ""};
  for (const char *v : {"on", "off"}) {
    ::setenv("WEFT_FLASH_ATTN", v, 1);
    const auto c = weft::detail::choose_attention(m, p, 1);
    EXPECT_EQ(c.source, weft::AttentionSource::environment) << v;
    EXPECT_EQ(c.reported, std::string(v) == "on" ? weft::FlashAttention::enabled : weft::FlashAttention::disabled);
    EXPECT_EQ(c.flash_ms, 0);
    // An explicit setting is not overridden.
    auto asked = p;
    asked.flash_attn = std::string(v) == "on" ? weft::FlashAttention::disabled : weft::FlashAttention::enabled;
    EXPECT_EQ(weft::detail::choose_attention(m, asked, 1).source, weft::AttentionSource::asked) << v;
  }
  // Anything else is logged and ignored: the probe decides.
  ::setenv("WEFT_FLASH_ATTN", "sometimes", 1);
  weft::detail::forget_attention_probes();
  const auto c = weft::detail::choose_attention(m, p, 1);
  EXPECT_EQ(c.source, weft::AttentionSource::measured);
}

TEST(AttentionProbe, DefaultCacheDirFollowsTheEnvironment) {
  // Saved and restored: the rest of the process keeps its environment.
  std::map<std::string, std::optional<std::string>> saved;
  for (const char *k : {"WEFT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) {
    const char *v = std::getenv(k);
    saved[k] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  ::setenv("WEFT_CACHE_DIR", "/w", 1);
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(weft::default_cache_dir(), "/w");
  ::setenv("WEFT_CACHE_DIR", "", 1);
  EXPECT_EQ(weft::default_cache_dir(), "/x/weft");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(weft::default_cache_dir(), "/h/.cache/weft");
  ::unsetenv("HOME");
  ::unsetenv("WEFT_CACHE_DIR");
  EXPECT_EQ(weft::default_cache_dir(), "");
  for (const auto &[k, v] : saved) {
    if (v) ::setenv(k.c_str(), v->c_str(), 1);
    else ::unsetenv(k.c_str());
  }
}

TEST(AttentionProbe, ShapeIsTheExecutorsSlotsAtAnEqualShareOfTheCache) {
  using weft::detail::probe_shape;
  auto s = probe_shape({.n_ctx = 4096, .n_batch = 512, .n_seq_max = 16});
  EXPECT_EQ(s.seqs, 16u);
  EXPECT_EQ(s.chunk, 32u);
  EXPECT_EQ(s.depth, (4096u - 16 - 32) / 16);
  s = probe_shape({.n_ctx = 32768, .n_batch = 512, .n_seq_max = 64});
  EXPECT_EQ(s.depth, (4096u - 64 - 32) / 64);  // at most 4096 cells in all
  s = probe_shape({.n_ctx = 1u << 20, .n_batch = 512, .n_seq_max = 1});
  EXPECT_EQ(s.depth, 256u);  // capped: the probe stays short
  s = probe_shape({.n_ctx = 4096, .n_batch = 256, .n_seq_max = 256});
  EXPECT_EQ(s.seqs, 256u);
  EXPECT_EQ(s.depth, (4096u - 256 - 32) / 256);
  s = probe_shape({.n_ctx = 16, .n_batch = 16, .n_seq_max = 16});
  EXPECT_EQ(s.depth, 1u);
  EXPECT_EQ(s.chunk, 16u);
}

// The choice is transparent: either kernel gives every conversation the
// logits of its history decoded alone, beside the same neighbours.
TEST(AttentionProbe, BothKernelsGiveTheSameLogits) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(5);
  std::vector<std::vector<weft::Token>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(random_tokens(rng, m, 30 + 17 * i, true));
  std::vector<std::vector<float>> logits[2];
  int k = 0;
  for (const auto f : {weft::FlashAttention::enabled, weft::FlashAttention::disabled}) {
    weft::Executor ex(m, {.n_ctx = 1024, .n_batch = 32, .n_seq_max = 4, .n_threads = 2, .flash_attn = f});
    std::vector<weft::Conversation> convs;
    for (const auto &p : prompts) {
      convs.push_back(ex.create());
      convs.back().prompt(p);
    }
    run_until_idle(ex);
    for (const auto &c : convs) {
      const auto l = c.logits();
      logits[k].emplace_back(l.begin(), l.end());
    }
    ++k;
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = weft_test::reference_logits(m, prompts[i]);
    // The reference runs on the test preset's kernel (plain): the flash
    // executor parts from it by the kernels' own difference.
    EXPECT_LT(weft_test::nmse(logits[0][i], alone), weft_test::cross_kernel_tolerance(m)) << "flash, conversation " << i;
    EXPECT_LT(weft_test::nmse(logits[1][i], alone), weft_test::logits_tolerance(m)) << "plain, conversation " << i;
  }
}
