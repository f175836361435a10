// weft::fit_memory on the CPU: the bytes llama.cpp's dry run reports against
// the model's own shape and size, the choice for a budget, the least
// configuration exactly and one byte under it, bad requests.
#include <gtest/gtest.h>

#include <random>

#include "reference.hpp"
#include "weft/memory_fit.hpp"

using weft_test::throws_weft;

namespace {

weft::ExecutorParams fit_shape(std::uint32_t n_ctx, std::uint64_t spill = 0) {
  weft::ExecutorParams p{.n_ctx = n_ctx, .n_batch = 64, .n_seq_max = 4, .n_threads = 2,
                         .flash_attn = weft::FlashAttention::disabled};
  p.spill.ram_bytes = spill;
  return p;
}

// tiny: 2 layers, K and V of 2 heads 16 wide, f16: 256 bytes a cell.
constexpr std::uint64_t kTinyKvPerCell = 2 * 2 * 32 * 2;

}  // namespace

TEST(MemoryFit, TheDryRunsBytesAreTheModelsOwn) {
  if (!weft::gpu_devices().empty()) GTEST_SKIP() << "a GPU build: tests/gpu covers it";
  const auto &m = weft_test::tiny();
  const auto e = weft::estimate_memory(weft_test::tiny_path(), 0, fit_shape(1024));
  std::printf("tiny at n_ctx 1024: weights %llu (llama_model_size %llu), KV %llu, compute %llu bytes\n",
              static_cast<unsigned long long>(e.host.weights), static_cast<unsigned long long>(m.size_bytes()),
              static_cast<unsigned long long>(e.host.kv), static_cast<unsigned long long>(e.host.compute));
  EXPECT_EQ(e.device.total(), 0u);
  EXPECT_EQ(e.device_name, "");
  EXPECT_EQ(e.host.kv, 1024 * kTinyKvPerCell);
  // The weights' buffer holds every tensor, each aligned (ggml's 32 bytes,
  // at most 64 per tensor of tiny's 21: 1344 bytes of padding).
  EXPECT_GE(e.host.weights, m.size_bytes());
  EXPECT_LE(e.host.weights, m.size_bytes() + 21 * 64);
  EXPECT_GT(e.host.compute, 0u);
  // The KV cache grows with the cells, nothing else does at this size.
  const auto e2 = weft::estimate_memory(weft_test::tiny_path(), 0, fit_shape(2048));
  EXPECT_EQ(e2.host.kv, 2048 * kTinyKvPerCell);
  EXPECT_EQ(e2.host.weights, e.host.weights);
  // The spill RAM tier is counted whole.
  const auto e3 = weft::estimate_memory(weft_test::tiny_path(), 0, fit_shape(1024, 1ull << 30));
  EXPECT_EQ(e3.host.total(), e.host.total() + (1ull << 30));
}

TEST(MemoryFit, TheMostCellsTheBudgetHoldsAndTheChoiceDecodes) {
  if (!weft::gpu_devices().empty()) GTEST_SKIP() << "a GPU build: tests/gpu covers it";
  const auto at512 = weft::estimate_memory(weft_test::tiny_path(), 0, fit_shape(512));
  weft::MemoryFitRequest r{.model_path = weft_test::tiny_path(), .budget = {0, at512.host.total()},
                           .executor = fit_shape(2048)};
  auto fit = weft::fit_memory(r);
  EXPECT_EQ(fit.executor.n_ctx, 512u) << "768 cells need more than 512's bytes";
  EXPECT_EQ(fit.model.n_gpu_layers, 0);
  EXPECT_EQ(fit.host_use.total(), at512.host.total());
  r.budget.host_bytes = 16ull << 30;
  fit = weft::fit_memory(r);
  EXPECT_EQ(fit.executor.n_ctx, 2048u);
  EXPECT_EQ(fit.n_layer, 2);
  // The choice loads and decodes as raw llama.cpp does.
  const auto model = weft::Model::load(fit.model);
  weft::Executor ex(model, fit.executor);
  EXPECT_EQ(ex.stats().n_ctx, 2048u);
  std::mt19937 rng(3);
  const auto h = weft_test::random_tokens(rng, model, 30, true);
  auto c = ex.create();
  c.prompt(h);
  weft_test::run_until_idle(ex);
  ASSERT_TRUE(c.has_logits());
  EXPECT_LT(weft_test::nmse(c.logits(), weft_test::reference_logits(model, h)), weft_test::logits_tolerance(model));
}

TEST(MemoryFit, TheLeastFitsExactlyAndOneByteLessIsRefusedByName) {
  if (!weft::gpu_devices().empty()) GTEST_SKIP() << "a GPU build: tests/gpu covers it";
  const auto least = weft::estimate_memory(weft_test::tiny_path(), 0, fit_shape(256));
  weft::MemoryFitRequest r{.model_path = weft_test::tiny_path(), .budget = {0, least.host.total()},
                           .executor = fit_shape(1024)};
  EXPECT_EQ(weft::fit_memory(r).executor.n_ctx, 256u);
  r.budget.host_bytes -= 1;
  EXPECT_TRUE(throws_weft([&] { weft::fit_memory(r); }, weft::Errc::out_of_range,
                          "the fewest host bytes " + std::to_string(least.host.total())));
  EXPECT_TRUE(throws_weft([&] { weft::fit_memory(r); }, weft::Errc::out_of_range,
                          "budget of 0 device bytes and " + std::to_string(least.host.total() - 1) + " host bytes"));
}

TEST(MemoryFit, BadRequestsAreRefusedByName) {
  weft::MemoryFitRequest r{.model_path = weft_test::tiny_path(), .budget = {0, 1ull << 34}, .executor = fit_shape(512)};
  r.min_n_ctx = 1024;
  EXPECT_TRUE(throws_weft([&] { weft::fit_memory(r); }, weft::Errc::invalid_argument, "min_n_ctx = 1024 (expected in [16, 512])"));
  r.min_n_ctx = 256;
  r.model_path = weft_test::tiny_path() + ".missing";
  EXPECT_TRUE(throws_weft([&] { weft::fit_memory(r); }, weft::Errc::not_found, ".missing"));
  r.model_path = "";
  EXPECT_TRUE(throws_weft([&] { weft::fit_memory(r); }, weft::Errc::invalid_argument, "model path is empty"));
  r.model_path = weft_test::tiny_path();
  r.executor.n_seq_max = 0;
  EXPECT_TRUE(throws_weft([&] { weft::fit_memory(r); }, weft::Errc::invalid_argument, "n_seq_max = 0"));
  EXPECT_TRUE(throws_weft([&] { weft::estimate_memory(weft_test::tiny_path(), 0, r.executor); },
                          weft::Errc::invalid_argument, "n_seq_max = 0"));
}
