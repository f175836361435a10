#include "gpu/gpu_reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "weft/memory_fit.hpp"

namespace weft_gpu {

const weft::Model &gpu_tiny() {
  static const weft::Model m = weft::Model::load({.path = weft_test::tiny_path(), .n_gpu_layers = -1});
  return m;
}

const weft::Model &partial_tiny() {
  static const weft::Model m = weft::Model::load({.path = weft_test::tiny_path(), .n_gpu_layers = 2});
  return m;
}

std::string device_name() {
  const auto devs = weft::gpu_devices();
  return devs.empty() ? std::string() : devs.front().description;
}

namespace {

llama_model *cpu_model() {
  static llama_model *m = [] {
    auto p = llama_model_default_params();
    static ggml_backend_dev_t none[] = {nullptr};
    p.devices = none;  // no GPU device: weights, KV and every op on the CPU
    p.n_gpu_layers = 0;
    llama_model *out = llama_model_load_from_file(weft_test::tiny_path().c_str(), p);
    if (out == nullptr) ADD_FAILURE() << "could not load tiny.gguf on the CPU";
    return out;
  }();
  return m;
}

}  // namespace

std::vector<float> cpu_logits(const std::vector<weft::Token> &tokens, int chunk) {
  auto p = weft_test::reference_context_params();
  p.n_ctx = 1024;
  p.n_batch = static_cast<uint32_t>(chunk);
  p.n_ubatch = static_cast<uint32_t>(chunk);
  p.n_seq_max = 1;
  p.n_threads = 2;
  p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(cpu_model(), p);
  EXPECT_NE(ctx, nullptr);
  llama_batch batch = llama_batch_init(chunk, 0, 1);
  for (std::size_t start = 0; start < tokens.size(); start += static_cast<std::size_t>(chunk)) {
    batch.n_tokens = 0;
    const std::size_t end = std::min(tokens.size(), start + static_cast<std::size_t>(chunk));
    for (std::size_t i = start; i < end; ++i) {
      const int k = batch.n_tokens++;
      batch.token[k] = tokens[i];
      batch.pos[k] = static_cast<llama_pos>(i);
      batch.n_seq_id[k] = 1;
      batch.seq_id[k][0] = 0;
      batch.logits[k] = i + 1 == tokens.size();
    }
    EXPECT_EQ(llama_decode(ctx, batch), 0);
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(cpu_model()));
  const float *logits = llama_get_logits_ith(ctx, -1);
  std::vector<float> out(logits, logits + n_vocab);
  llama_batch_free(batch);
  llama_free(ctx);
  return out;
}

DeviceFloor device_floor(const weft::Model &m, int n_gpu_layers) {
  const std::string key = fmt::format("{:016x};ngl={}", m.fingerprint(), n_gpu_layers);
  std::string dev = device_name();
  std::replace(dev.begin(), dev.end(), ' ', '_');
  const std::string suffix = ";" + dev + weft_test::reference_kernel_key();
  DeviceFloor f;
  f.cross = weft_test::cached_measurement("gpu-floor.txt", "cross;" + key + suffix, [&m] {
    std::mt19937 rng(4242);
    double worst = 0;
    // Sized for lavapipe (a decode there costs milliseconds, a new kernel
    // shape a compile): 8 sequences of up to 40 tokens, in chunks of 1
    // (the matrix-vector kernels a generation uses), 3, 8 or 32.
    const int chunks[] = {1, 3, 8, 32};
    for (int i = 0; i < 8; ++i) {
      const auto t = weft_test::random_tokens(rng, m, 2 + static_cast<int>(rng() % 39), true);
      const int chunk = chunks[rng() % 4];
      worst = std::max(worst, weft_test::nmse(weft_test::reference_logits(m, t, chunk), cpu_logits(t, chunk)));
    }
    return worst;
  });
  f.batch = weft_test::cached_measurement("gpu-floor.txt", "batch;" + key + suffix, [&m] {
    return weft_test::measure_batch_noise(m, 3, [](llama_context *) {},
                                          [&m](const std::vector<weft::Token> &t) { return weft_test::reference_logits(m, t); });
  });
  return f;
}

double gpu_tolerance(const weft::Model &m, int n_gpu_layers) {
  return std::max(8.0 * device_floor(m, n_gpu_layers).floor(), 1e-9);
}

}  // namespace weft_gpu
