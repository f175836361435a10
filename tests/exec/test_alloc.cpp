// Steady-state steps allocate nothing beyond what llama_decode itself does:
// counts heap allocations on this thread during a step and compares with a
// raw llama_decode of a batch of the same shape.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <random>

#include "reference.hpp"
#include "weft/executor.hpp"

namespace {
thread_local bool t_counting = false;
thread_local std::size_t t_allocs = 0;
}  // namespace

// These replace the global operators, so free() is their matching release;
// GCC inlines the pair and mistakes it for new/free.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void *operator new(std::size_t n) {
  if (t_counting) ++t_allocs;
  if (void *p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }

namespace {

template <class Fn>
std::size_t count_allocs(Fn &&fn) {
  t_allocs = 0;
  t_counting = true;
  fn();
  t_counting = false;
  return t_allocs;
}

}  // namespace

TEST(Alloc, SteadyStateStepAddsNoAllocations) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(1);
  constexpr int kConvs = 8;
  weft::Executor ex(m, {.n_ctx = 2048, .n_batch = 64, .n_seq_max = kConvs, .n_threads = 2});
  std::vector<weft::Conversation> convs;
  std::vector<weft::Generation> gens;
  for (int i = 0; i < kConvs; ++i) {
    convs.push_back(ex.create());
    convs.back().prompt(weft_test::random_tokens(rng, m, 20, true));
  }
  while (!ex.step().idle) {
  }
  for (auto &c : convs) gens.push_back(c.generate({.max_tokens = 200}));
  for (int i = 0; i < 20; ++i) ex.step();  // warm up: buffers reach their size

  // The same shape in raw llama.cpp: kConvs sequences, one token each.
  auto p = llama_context_default_params();
  p.n_ctx = 2048;
  p.n_batch = 64;
  p.n_ubatch = 64;
  p.n_seq_max = kConvs;
  p.kv_unified = true;
  p.n_threads = 2;
  p.n_threads_batch = 2;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(m.impl()->model, p);
  llama_batch b = llama_batch_init(64, 0, 1);
  std::size_t raw_max = 0, raw_min = SIZE_MAX;
  for (int step = 0; step < 40; ++step) {
    b.n_tokens = kConvs;
    for (int s = 0; s < kConvs; ++s) {
      b.token[s] = 100 + s;
      b.pos[s] = step;
      b.n_seq_id[s] = 1;
      b.seq_id[s][0] = s;
      b.logits[s] = 1;
    }
    const auto n = count_allocs([&] { ASSERT_EQ(llama_decode(ctx, b), 0); });
    if (step >= 20) {
      raw_max = std::max(raw_max, n);
      raw_min = std::min(raw_min, n);
    }
  }
  llama_batch_free(b);
  llama_free(ctx);

  std::size_t weft_max = 0, weft_min = SIZE_MAX;
  for (int i = 0; i < 20; ++i) {
    weft::StepResult r;
    const auto n = count_allocs([&] { r = ex.step(); });
    weft_max = std::max(weft_max, n);
    weft_min = std::min(weft_min, n);
    ASSERT_EQ(r.tokens_decoded, static_cast<std::uint32_t>(kConvs));
  }
  std::printf("allocations per step: weft %zu..%zu, raw llama_decode %zu..%zu\n", weft_min, weft_max, raw_min,
              raw_max);
  EXPECT_LE(weft_max, raw_max);
  EXPECT_LE(weft_min, raw_min);
}
