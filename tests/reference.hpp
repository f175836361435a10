// Independent reference paths on raw llama.cpp, for comparing weft against.
#pragma once

#include <gtest/gtest.h>
#include <llama.h>

#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"
#include "core/model_impl.hpp"
#include "weft/executor.hpp"

namespace weft_test {

// Context parameters for every reference decode: llama.cpp's defaults with
// the attention kernel the executors under test use. The test presets set
// WEFT_FLASH_ATTN=off; llama.cpp's default (auto) would pick flash attention
// on the CPU, and the two kernels differ by more than batching does (4.7x
// the batch noise floor on the generated gemma3, 0.9x on llama), so a
// reference on the other kernel is no reference.
// `kernel`: -1 as WEFT_FLASH_ATTN says, 0 without flash attention, 1 with.
inline llama_context_params reference_context_params(int kernel = -1) {
  auto p = llama_context_default_params();
  const char *env = std::getenv("WEFT_FLASH_ATTN");
  const std::string v = kernel == 0 ? "off" : kernel == 1 ? "on" : env != nullptr ? env : "";
  if (v == "off") p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  if (v == "on") p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  return p;
}
// The kernel as part of a cached measurement's key: a floor measured on one
// kernel is not the other's.
inline std::string reference_kernel_key() {
  const char *env = std::getenv("WEFT_FLASH_ATTN");
  return std::string(";fa=") + (env != nullptr && *env != '\0' ? env : "auto");
}

// Logits of the last token of `tokens`, decoded alone on a fresh context in
// chunks of `chunk` tokens.
// `kernel` as reference_context_params() takes it.
inline std::vector<float> reference_logits(const weft::Model &m, const std::vector<weft::Token> &tokens,
                                           int chunk = 64, uint32_t n_ctx = 1024, int kernel = -1) {
  auto p = reference_context_params(kernel);
  p.n_ctx = n_ctx;
  p.n_batch = static_cast<uint32_t>(chunk);
  p.n_ubatch = static_cast<uint32_t>(chunk);
  p.n_seq_max = 1;
  p.n_threads = 2;
  p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(m.impl()->model, p);
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
  const float *logits = llama_get_logits_ith(ctx, -1);
  std::vector<float> out(logits, logits + m.n_vocab());
  llama_batch_free(batch);
  llama_free(ctx);
  return out;
}

// Steps until nothing is left to do (random budgets up to `max_budget` when
// `rng` is given); bounded so a bug cannot hang the suite.
inline int run_until_idle(weft::Executor &ex, std::mt19937 *rng = nullptr, std::uint32_t max_budget = 0) {
  for (int i = 0; i < 20000; ++i) {
    weft::StepBudget budget;
    if (rng != nullptr) budget.max_tokens = 1 + static_cast<std::uint32_t>((*rng)() % max_budget);
    if (ex.step(budget).idle) return i;
  }
  ADD_FAILURE() << "executor did not become idle within 20000 steps";
  return -1;
}

// A generation saved after `steps` steps of `a`, loaded into a fresh
// executor of the same model with `params`, and both run to the end: the
// saved state's version byte and the two results. `ok` is false (with a
// test failure) when it ended before the save or loaded without it.
struct MidSave {
  bool ok = false;
  std::uint8_t version = 0;
  weft::GenerationResult original, loaded;
};
inline MidSave save_mid_generation(weft::Executor &a, const weft::Conversation &c, const weft::Generation &g, int steps,
                                   const weft::ExecutorParams &params) {
  MidSave out;
  for (int i = 0; i < steps; ++i) a.step();
  if (g.done()) {
    ADD_FAILURE() << "the generation ended before the save";
    return out;
  }
  const auto saved = c.save();
  if (saved.size() <= 12) {
    ADD_FAILURE() << "a state of " << saved.size() << " bytes";
    return out;
  }
  out.version = saved[8];
  weft::Executor b(a.model(), params);
  auto loaded = b.load(saved);
  const auto lg = loaded.generation();
  if (!lg) {
    ADD_FAILURE() << "the loaded conversation has no generation";
    return out;
  }
  run_until_idle(a);
  run_until_idle(b);
  out.original = g.result();
  out.loaded = lg->result();
  out.ok = true;
  return out;
}

// `n` random tokens (no control tokens), the first of them BOS when `bos`.
inline std::vector<weft::Token> random_tokens(std::mt19937 &rng, const weft::Model &m, int n, bool bos = false) {
  std::uniform_int_distribution<weft::Token> tok(3, m.n_vocab() - 1);
  std::vector<weft::Token> out;
  if (bos && n > 0) out.push_back(m.bos());
  while (static_cast<int>(out.size()) < n) out.push_back(tok(rng));
  return out;
}

// The noise llama.cpp's CPU kernels themselves show for one sequence decoded
// alone vs. beside others in one batch (raw API, unified KV): the floor every
// "same logits" tolerance in these tests is derived from. Measured once per
// test binary over seeded random batches on the tiny model.
double batch_noise_floor(const weft::Model &m);
// The measurement itself (batch_noise_floor caches it across test processes).
double measure_noise_floor(const weft::Model &m);
// A measurement every test process needs but that takes seconds: `key`'s
// value in the "key value" lines of `name` next to the test models, made by
// `measure` on a miss. Processes serialize on a lock file, so when ctest runs
// several at once one measures and the others wait and read its value.
double cached_measurement(const std::string &name, const std::string &key, const std::function<double()> &measure);
// The same over `scenarios` seeded batches, each context prepared by
// `setup` (adapters, say) and each sequence compared with `alone` (its
// logits decoded by itself under the same setup).
double measure_batch_noise(const weft::Model &m, int scenarios, const std::function<void(llama_context *)> &setup,
                           const std::function<std::vector<float>(const std::vector<weft::Token> &)> &alone);

// Tolerance for comparing weft's logits with a reference: 8x the measured
// floor (weft adds no arithmetic of its own), at least 1e-9 when the floor
// happens to be 0.
inline double logits_tolerance(const weft::Model &m) { return std::max(8.0 * batch_noise_floor(m), 1e-9); }

// How far llama.cpp's two attention kernels part, on raw llama.cpp: the
// worst nmse between a prompt's logits decoded alone with flash attention
// and without, over seeded prompts and chunk sizes (cached like the floor).
// Where the batch floor is tiny (2e-11 for tiny on an AMD EPYC) the kernels
// part by far more (3e-8 there), so a comparison across kernels (an
// executor on one, its reference or its saved KV on the other) is held to
// 8x this, or to logits_tolerance() where that is larger.
double kernel_noise_floor(const weft::Model &m);
inline double cross_kernel_tolerance(const weft::Model &m) {
  return std::max(logits_tolerance(m), 8.0 * kernel_noise_floor(m));
}

}  // namespace weft_test
