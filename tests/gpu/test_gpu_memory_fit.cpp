// weft::fit_memory on the GPU device: the choice for the device's free
// memory puts every layer there and decodes as the CPU does; a device budget
// one byte short of everything offloads less; the least configuration's own
// bytes fit and one byte less is refused by name.
#include <gtest/gtest.h>

#include <random>

#include "gpu/gpu_reference.hpp"
#include "weft/memory_fit.hpp"

using weft_test::random_tokens;
using weft_test::run_until_idle;
using weft_test::throws_weft;

namespace {

weft::ExecutorParams shape(std::uint32_t n_ctx) {
  weft::ExecutorParams p{.n_ctx = n_ctx, .n_batch = 64, .n_seq_max = 4, .n_threads = 2,
                         .flash_attn = weft::FlashAttention::disabled};
  p.spill.ram_bytes = 0;
  return p;
}

// The fit's choice loads, decodes, and matches the CPU within the device
// floor of the n_gpu_layers it chose (measured for that choice).
void expect_decodes(const weft::MemoryFit &fit) {
  const auto model = weft::Model::load(fit.model);
  weft::Executor ex(model, fit.executor);
  EXPECT_EQ(ex.stats().n_ctx, fit.executor.n_ctx);
  std::mt19937 rng(61);
  const auto h = random_tokens(rng, model, 40, true);
  auto c = ex.create();
  c.prompt(h);
  run_until_idle(ex);
  ASSERT_TRUE(c.has_logits());
  const double err = weft_test::nmse(c.logits(), weft_gpu::cpu_logits(h));
  EXPECT_LT(err, weft_gpu::gpu_tolerance(model, fit.model.n_gpu_layers)) << "n_gpu_layers " << fit.model.n_gpu_layers;
}

}  // namespace

TEST(GpuMemoryFit, TheDevicesFreeMemoryTakesEveryLayer) {
  const auto devices = weft::gpu_devices();
  ASSERT_FALSE(devices.empty());
  weft::MemoryFitRequest r{.model_path = weft_test::tiny_path(),
                           .budget = {devices.front().free_bytes, 16ull << 30},
                           .executor = shape(1024)};
  const auto fit = weft::fit_memory(r);
  std::printf("device %s: n_gpu_layers %d, n_ctx %u; device %llu bytes (weights %llu, KV %llu, compute %llu), host %llu "
              "(weights %llu, KV %llu, compute %llu); %u configurations tried\n",
              fit.device.c_str(), fit.model.n_gpu_layers, fit.executor.n_ctx,
              static_cast<unsigned long long>(fit.device_use.total()),
              static_cast<unsigned long long>(fit.device_use.weights), static_cast<unsigned long long>(fit.device_use.kv),
              static_cast<unsigned long long>(fit.device_use.compute), static_cast<unsigned long long>(fit.host_use.total()),
              static_cast<unsigned long long>(fit.host_use.weights), static_cast<unsigned long long>(fit.host_use.kv),
              static_cast<unsigned long long>(fit.host_use.compute), fit.configurations_tried);
  EXPECT_EQ(fit.model.n_gpu_layers, -1);
  EXPECT_EQ(fit.layers_on_device, 3);
  EXPECT_EQ(fit.executor.n_ctx, 1024u);
  EXPECT_EQ(fit.device, devices.front().description);
  // The whole cache on the device: 1024 cells x 2 layers x (K + V: 2 heads
  // of 16) x f16, from the model's shape.
  EXPECT_EQ(fit.device_use.kv, 1024u * 2 * 2 * 32 * 2);
  EXPECT_EQ(fit.host_use.kv, 0u);
  EXPECT_GT(fit.device_use.weights, 0u);
  expect_decodes(fit);
}

TEST(GpuMemoryFit, ADeviceBudgetOneByteShortOfEverythingOffloadsLess) {
  const auto all = weft::estimate_memory(weft_test::tiny_path(), -1, shape(1024));
  weft::MemoryFitRequest r{.model_path = weft_test::tiny_path(),
                           .budget = {all.device.total() - 1, 16ull << 30},
                           .executor = shape(1024)};
  const auto fit = weft::fit_memory(r);
  EXPECT_LT(fit.layers_on_device, 3);
  EXPECT_LE(fit.device_use.total(), all.device.total() - 1);
  EXPECT_GT(fit.host_use.weights, all.host.weights) << "what left the device is on the host";
  expect_decodes(fit);
}

TEST(GpuMemoryFit, TheFewestDeviceBytesFitAndOneByteLessIsRefused) {
  // At min_n_ctx the device's bytes over every layer count: not monotone
  // (with no layer offloaded llama.cpp keeps a compute buffer on the device
  // that copies weights for a large batch's products).
  std::uint64_t fewest = UINT64_MAX;
  int fewest_ngl = -2;
  for (int ngl = 0; ngl <= 3; ++ngl) {
    const auto e = weft::estimate_memory(weft_test::tiny_path(), ngl, shape(256));
    std::printf("n_ctx 256, n_gpu_layers %d: device %llu bytes (weights %llu, KV %llu, compute %llu), host %llu\n", ngl,
                static_cast<unsigned long long>(e.device.total()), static_cast<unsigned long long>(e.device.weights),
                static_cast<unsigned long long>(e.device.kv), static_cast<unsigned long long>(e.device.compute),
                static_cast<unsigned long long>(e.host.total()));
    if (e.device.total() < fewest) {
      fewest = e.device.total();
      fewest_ngl = ngl;
    }
  }
  weft::MemoryFitRequest r{.model_path = weft_test::tiny_path(), .budget = {fewest, 16ull << 30},
                           .executor = shape(1024)};
  const auto fit = weft::fit_memory(r);
  EXPECT_LE(fit.device_use.total(), fewest);
  // The fit's bytes are the dry run's for its own choice.
  const auto again = weft::estimate_memory(weft_test::tiny_path(), fit.model.n_gpu_layers, fit.executor);
  EXPECT_EQ(again.device.total(), fit.device_use.total());
  EXPECT_EQ(again.host.total(), fit.host_use.total());
  std::printf("budget %llu device bytes: n_gpu_layers %d, n_ctx %u\n", static_cast<unsigned long long>(fewest),
              fit.model.n_gpu_layers, fit.executor.n_ctx);
  expect_decodes(fit);
  r.budget.device_bytes = fewest - 1;
  EXPECT_TRUE(throws_weft([&] { weft::fit_memory(r); }, weft::Errc::out_of_range,
                          "the fewest device bytes are " + std::to_string(fewest) + " (n_gpu_layers " +
                              std::to_string(fewest_ngl)));
}
