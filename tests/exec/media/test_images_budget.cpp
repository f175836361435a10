// Images under a time budget: a whole (non-causal) image whose batch leaves
// no time for a token's decode takes its step alone — the step then lasts
// the image's batch, not the batch and a token decode — and the tokens go in
// the steps around it.
#include <gtest/gtest.h>
#include <llama.h>

#include <chrono>
#include <random>
#include <thread>

#include "exec/media/image_fixture.hpp"
#include "exec/test_access.hpp"
#include "reference.hpp"

#ifdef WEFT_HAVE_MTMD
using weft_test::random_tokens;

using namespace img_test;

namespace {

// Steps under `budget` until c's first image is decoded (bounded); returns
// the step's index in `talker_moved` (whether the talker's history grew in
// each step), or -1.
int step_until_image_decoded(weft::Executor &ex, const weft::Conversation &c, const weft::Conversation &talker,
                             std::chrono::microseconds budget, std::vector<bool> &talker_moved) {
  const auto span = c.images().at(0);
  for (int i = 0; i < 60; ++i) {
    const std::uint32_t before = talker.n_decoded();
    (void)ex.step({.max_time = budget});
    talker_moved.push_back(talker.n_decoded() != before);
    if (c.n_decoded() >= span.begin + span.n_tokens) return static_cast<int>(talker_moved.size()) - 1;
  }
  return -1;
}

}  // namespace

TEST(ImagesBudget, AWholeImageThatFillsTheBudgetTakesItsStepAlone) {
  const auto &m = weft_test::tiny();
  std::mt19937 rng(41);
  weft::Executor ex(m, params());  // gemma3's projector: non-causal images, decoded whole
  auto talker = ex.create();
  talker.prompt(random_tokens(rng, m, 6, true));
  run_until_logits(ex, {talker}, rng, 64);
  auto gen = talker.generate({.max_tokens = 100000});
  // An embeddings batch takes 30 ms, a token batch 2 ms: no 12 ms step holds
  // an image and a token.
  weft::detail::set_decode_hook(ex, [](const llama_batch &b) {
    std::this_thread::sleep_for(std::chrono::milliseconds(b.embd != nullptr ? 30 : 2));
    return 0;
  });
  const auto budget = std::chrono::microseconds(12000);
  for (int i = 0; i < 10; ++i) (void)ex.step({.max_time = budget});  // the cost model learns the 2 ms
  const Rgb img = random_image(rng, 30, 30);
  // The first image teaches the executor what its batch costs; the second
  // is the one that finds the budget too small for it and a token.
  for (int round = 0; round < 2; ++round) {
    auto c = ex.create();
    c.prompt(random_tokens(rng, m, 3, true));
    c.prompt_image(img.w, img.h, img.px);
    c.prompt(random_tokens(rng, m, 3));
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (!c.images().at(0).encoded && Clock::now() < until) {
      (void)ex.step({.max_time = budget});
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(c.images().at(0).encoded) << "round " << round;
    std::vector<bool> moved;
    const int k = step_until_image_decoded(ex, c, talker, budget, moved);
    ASSERT_GE(k, 0) << "round " << round << ": the image was never decoded";
    if (round == 0) {
      c.dispose();
      continue;
    }
    EXPECT_FALSE(moved[static_cast<std::size_t>(k)]) << "the image's step decoded the talker's token too";
    ASSERT_GE(k, 1);
    EXPECT_TRUE(moved[static_cast<std::size_t>(k - 1)]) << "the step before the image's decoded no token";
    const std::uint32_t before = talker.n_decoded();
    (void)ex.step({.max_time = budget});
    EXPECT_NE(talker.n_decoded(), before) << "the step after the image's decoded no token";
    EXPECT_FALSE(gen.done());
    EXPECT_FALSE(talker.error());
  }
  weft::detail::set_decode_hook(ex, nullptr);
}
#endif  // WEFT_HAVE_MTMD
