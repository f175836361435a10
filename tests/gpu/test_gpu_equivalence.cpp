// The executor's operations with the model's layers and KV cache in GPU
// memory (n_gpu_layers -1, and 2: layer 1 and the output layer, the cache
// split between the device and the CPU), each conversation's
// logits compared with raw llama.cpp on the CPU alone within 8x the device's
// measured noise floor (tests/gpu/gpu_reference.hpp).
#include <gtest/gtest.h>

#include <random>

#include "gpu/gpu_reference.hpp"

using weft_gpu::cpu_logits;
using weft_test::nmse;
using weft_test::random_tokens;
using weft_test::run_until_idle;
using weft_test::throws_weft;

namespace {

weft::ExecutorParams params(std::uint32_t n_seq_max = 8, weft::SpillParams spill = {}) {
  return {.n_ctx = 1024, .n_batch = 64, .n_seq_max = n_seq_max, .n_threads = 2, .spill = spill};
}

std::vector<weft::Token> cat(std::vector<weft::Token> a, const std::vector<weft::Token> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The conversation holds `history` and its logits are the CPU's for it.
// `m` was loaded with n_gpu_layers -1 (gpu_tiny) or 2 (partial_tiny).
int ngl_of(const weft::Model &m) { return &m == &weft_gpu::partial_tiny() ? 2 : -1; }

void expect_cpu_logits(const weft::Model &m, const weft::Conversation &c, const std::vector<weft::Token> &history,
                       const std::string &what) {
  ASSERT_EQ(c.tokens(), history) << what;
  ASSERT_TRUE(c.has_logits()) << what;
  const double err = nmse(c.logits(), cpu_logits(history));
  const double tol = weft_gpu::gpu_tolerance(m, ngl_of(m));
  EXPECT_LT(err, tol) << what << ": nmse " << err << " vs the device floor "
                      << weft_gpu::device_floor(m, ngl_of(m)).floor();
}

// Prompts split over steps with random budgets, a fork of a shared prefix,
// a rewind and more input: the core of tests/exec/test_executor.cpp.
void prompt_fork_rewind(const weft::Model &m, unsigned seed) {
  std::mt19937 rng(seed);
  weft::Executor ex(m, params());
  auto town = ex.create();
  auto lore = random_tokens(rng, m, 70, true);
  // In three parts, with steps of random budgets between them.
  town.prompt(std::vector<weft::Token>(lore.begin(), lore.begin() + 20));
  ex.step({.max_tokens = 7});
  town.prompt(std::vector<weft::Token>(lore.begin() + 20, lore.begin() + 45));
  ex.step({.max_tokens = 13});
  town.prompt(std::vector<weft::Token>(lore.begin() + 45, lore.end()));
  run_until_idle(ex, &rng, 24);
  expect_cpu_logits(m, town, lore, "prompt split over steps");

  std::vector<weft::Conversation> kids;
  std::vector<std::vector<weft::Token>> hist;
  for (int i = 0; i < 3; ++i) {
    kids.push_back(town.fork());
    hist.push_back(cat(lore, random_tokens(rng, m, 5 + 9 * i)));
    kids.back().prompt(std::vector<weft::Token>(hist.back().begin() + 70, hist.back().end()));
  }
  const auto before = ex.stats().cells_used;
  run_until_idle(ex, &rng, 32);
  // The forks share the lore's cells: only their own tokens are new.
  EXPECT_EQ(ex.stats().cells_used, before + 5 + 14 + 23);
  for (int i = 0; i < 3; ++i) expect_cpu_logits(m, kids[i], hist[i], "fork " + std::to_string(i));

  kids[2].rewind(15);
  hist[2].resize(hist[2].size() - 15);
  const auto more = random_tokens(rng, m, 6);
  kids[2].prompt(more);
  hist[2] = cat(hist[2], more);
  run_until_idle(ex);
  expect_cpu_logits(m, kids[2], hist[2], "rewind 15, then 6 more");
  expect_cpu_logits(m, town, lore, "the fork's source after its children ran");
}

}  // namespace

TEST(Gpu, DeviceAndFloor) {
  const auto &m = weft_gpu::gpu_tiny();
  ASSERT_FALSE(weft_gpu::device_name().empty());
  const auto all = weft_gpu::device_floor(m, -1);
  const auto part = weft_gpu::device_floor(weft_gpu::partial_tiny(), 2);
  std::printf("gpu device: %s\n", weft_gpu::device_name().c_str());
  std::printf("device floor, all layers: cross %.3g, batch %.3g; layer 1 and output: cross %.3g, batch %.3g (nmse)\n", all.cross,
              all.batch, part.cross, part.batch);
  RecordProperty("device", weft_gpu::device_name());
  RecordProperty("floor_cross", std::to_string(all.cross));
  RecordProperty("floor_batch", std::to_string(all.batch));
  // The device computes the same model: its difference from the CPU is
  // rounding, far below what a wrong operation shows (a missing token or a
  // wrong position moves the nmse to 1e-2 and more on tiny).
  EXPECT_LT(all.floor(), 1e-5);
  EXPECT_LT(part.floor(), 1e-5);
  // The reference is independent: the CPU model has no device.
  EXPECT_TRUE(m.impl()->on_gpu);
}

TEST(Gpu, PromptForkRewindAllLayers) {
  for (unsigned seed = 1; seed <= 3; ++seed) prompt_fork_rewind(weft_gpu::gpu_tiny(), seed);
}

TEST(Gpu, PromptForkRewindPartialOffload) { prompt_fork_rewind(weft_gpu::partial_tiny(), 11); }

static void save_load(const weft::Model &m) {
  std::mt19937 rng(21);
  weft::Executor a(m, params());
  std::vector<weft::Conversation> convs;
  std::vector<std::vector<weft::Token>> hist;
  for (int i = 0; i < 3; ++i) {
    convs.push_back(a.create());
    hist.push_back(random_tokens(rng, m, 30 + 17 * i, true));
    convs.back().prompt(hist.back());
  }
  run_until_idle(a, &rng, 40);
  // One conversation: its KV data read from device buffers (llama_state_seq_*).
  const auto one = convs[1].save();
  weft::Executor b(m, params());
  auto loaded = b.load(one);
  expect_cpu_logits(m, loaded, hist[1], "loaded on the device");
  const auto more = random_tokens(rng, m, 9);
  loaded.prompt(more);
  run_until_idle(b);
  expect_cpu_logits(m, loaded, cat(hist[1], more), "loaded, then prompted");
  // The same bytes into a CPU executor: device and host states are one format.
  weft::Executor cpu(weft_test::tiny(), params());
  auto on_cpu = cpu.load(one);
  on_cpu.prompt(more);
  run_until_idle(cpu);
  expect_cpu_logits(m, on_cpu, cat(hist[1], more), "saved on the device, loaded on the CPU");

  const auto all = a.save_all();
  weft::Executor c(m, params());
  auto back = c.load_all(all);
  ASSERT_EQ(back.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    auto &conv = back.at(convs[i].id());
    const auto extra = random_tokens(rng, m, 4 + i);
    conv.prompt(extra);
    hist[i] = cat(hist[i], extra);
  }
  run_until_idle(c, &rng, 16);
  for (int i = 0; i < 3; ++i) expect_cpu_logits(m, back.at(convs[i].id()), hist[i], "save_all " + std::to_string(i));
}

TEST(Gpu, SaveLoadOneAndAllAllLayers) { save_load(weft_gpu::gpu_tiny()); }

// The cache split over the CPU (layer 0) and the device (layer 1).
TEST(Gpu, SaveLoadOneAndAllPartialOffload) { save_load(weft_gpu::partial_tiny()); }

// Two slots, six conversations: parked to RAM, to disk, or dropped and
// decoded again, each restored and continued.
TEST(Gpu, SpillToRamDiskAndRecompute) {
  const auto &m = weft_gpu::gpu_tiny();
  const auto dir = weft_test::temp_dir("gpu-spill");
  struct Tier {
    const char *name;
    weft::SpillParams spill;
  };
  const Tier tiers[] = {{"ram", {.ram_bytes = 64ull << 20}},
                        {"disk", {.ram_bytes = 0, .disk_dir = dir.string()}},
                        {"recompute", {.ram_bytes = 0, .recompute = true}}};
  for (const auto &tier : tiers) {
    std::mt19937 rng(31);
    weft::Executor ex(m, params(2, tier.spill));
    std::vector<weft::Conversation> convs;
    std::vector<std::vector<weft::Token>> hist;
    for (int i = 0; i < 6; ++i) {
      convs.push_back(ex.create());
      hist.push_back(random_tokens(rng, m, 12 + 5 * i, true));
      convs.back().prompt(hist.back());
      run_until_idle(ex);
    }
    for (int i = 0; i < 6; ++i) {
      const auto more = random_tokens(rng, m, 3 + i);
      convs[i].prompt(more);
      hist[i] = cat(hist[i], more);
    }
    run_until_idle(ex, &rng, 16);
    for (int i = 0; i < 6; ++i) expect_cpu_logits(m, convs[i], hist[i], std::string(tier.name) + " " + std::to_string(i));
    const auto s = ex.stats();
    EXPECT_GT(s.parks, 0u) << tier.name;
    if (std::string(tier.name) == "recompute") {
      EXPECT_GT(s.recomputes, 0u);
    } else {
      EXPECT_GT(s.restores, 0u) << tier.name;
    }
  }
}

// Conversations never forked from each other share a decoded prefix (the
// prefix index and, after a dispose, the prefix cache).
TEST(Gpu, PrefixReuse) {
  const auto &m = weft_gpu::gpu_tiny();
  std::mt19937 rng(41);
  weft::Executor ex(m, params());
  const auto lore = random_tokens(rng, m, 80, true);
  auto a = ex.create();
  const auto ha = cat(lore, random_tokens(rng, m, 7));
  a.prompt(ha);
  run_until_idle(ex);
  auto b = ex.create();
  const auto hb = cat(lore, random_tokens(rng, m, 11));
  b.prompt(hb);
  run_until_idle(ex);
  EXPECT_GE(ex.stats().prefix_tokens_reused, 80u);
  expect_cpu_logits(m, b, hb, "reused the lore");
  a.dispose();
  b.dispose();
  auto c = ex.create();  // from the prefix cache
  const auto hc = cat(lore, random_tokens(rng, m, 5));
  c.prompt(hc);
  run_until_idle(ex);
  EXPECT_GE(ex.stats().prefix_cache_hits, 1u);
  expect_cpu_logits(m, c, hc, "from the prefix cache");
}

TEST(Gpu, BadInputIsRefusedAndTheDeviceExecutorCarriesOn) {
  const auto &m = weft_gpu::gpu_tiny();
  std::mt19937 rng(51);
  weft::Executor ex(m, params());
  auto c = ex.create();
  const std::vector<weft::Token> bad{1, m.n_vocab()};
  EXPECT_TRUE(throws_weft([&] { c.prompt(bad); }, weft::Errc::out_of_range, std::to_string(m.n_vocab())));
  EXPECT_TRUE(throws_weft([&] { c.prompt(random_tokens(rng, m, 1100)); }, weft::Errc::out_of_range));
  std::vector<std::uint8_t> junk(64, 0x5a);
  EXPECT_TRUE(throws_weft([&] { ex.load(junk); }, weft::Errc::corrupt));
  const auto h = random_tokens(rng, m, 25, true);
  c.prompt(h);
  run_until_idle(ex);
  expect_cpu_logits(m, c, h, "after the refusals");
}
