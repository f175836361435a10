// M-RoPE images under budgets and deadlines: a causal image decoded in pieces
// within the budget, an image that overruns the deadline, a failed piece.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "exec/media/image_fixture.hpp"
#include "exec/media/mrope_fixture.hpp"
#include "exec/test_access.hpp"
#include "reference.hpp"
#include "state/state_codec.hpp"

#ifdef WEFT_HAVE_MTMD
using weft_test::nmse;
using weft_test::random_tokens;
using weft_test::throws_weft;

using namespace img_test;
using namespace mrope_test;

// A causal image (qwen2-vl's) goes in pieces like a prompt: no step decodes
// more rows than its max_tokens, an image included, and the history may stop
// inside the image between steps. There, a fork (it decodes the image again,
// whole: its cells share one position), a save (full and tokens-only) loaded
// into another executor, and the conversation itself all end with mtmd's
// decode of the same input alone.
TEST(ImagesMrope, CausalImageGoesInPiecesWithinTheBudget) {
  const auto &f = qwen();
  const auto &m = f.model;
  double worst = 0;
  for (unsigned seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(70 + seed);
    weft::Executor ex(m, params(64, f));
    auto others = neighbours(ex, rng, 3);
    Scene s;
    s.text.push_back(random_tokens(rng, m, 2 + static_cast<int>(rng() % 9), true));
    // At least 4 x 4 cells.
    s.imgs.push_back(random_image(rng, 120 + static_cast<std::uint32_t>(rng() % 100),
                                  120 + static_cast<std::uint32_t>(rng() % 100)));
    s.parts.push_back(tokenize(s.imgs.back(), f));
    s.text.push_back(random_tokens(rng, m, 1 + static_cast<int>(rng() % 9)));
    auto c = prompt_scene(ex, s);
    const auto sp = c.images().at(0);
    ASSERT_GE(sp.n_tokens, 16u);
    const std::uint32_t per_step = 3 + seed;
    bool inside = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!inside && !c.has_logits() && std::chrono::steady_clock::now() < until) {
      const auto r = ex.step({.max_tokens = per_step});
      ASSERT_LE(r.tokens_decoded, per_step) << "seed " << seed;
      inside = c.n_decoded() > sp.begin && c.n_decoded() < sp.begin + sp.n_tokens;
      if (r.idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(inside) << "seed " << seed << ": the image never stood part-decoded between steps";
    const std::uint32_t at = c.n_decoded();
    EXPECT_THROW(c.rewind(c.n_tokens() - (sp.begin + 1)), weft::Error);  // still no cut inside an image
    auto fork = c.fork();
    const auto full = c.save();
    const auto tokens_only = c.save({.tokens_only = true});
    EXPECT_EQ(c.n_decoded(), at);

    auto all = others;
    all.push_back(c);
    all.push_back(fork);
    const auto until2 = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::all_of(all.begin(), all.end(), [](const auto &x) { return x.has_logits(); }) &&
           std::chrono::steady_clock::now() < until2) {
      const auto r = ex.step({.max_tokens = per_step});
      ASSERT_LE(r.tokens_decoded, per_step) << "seed " << seed;
      if (r.idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto input = s.input();
    expect(c, input, fmt::format("seed {}: in pieces of {}", seed, per_step), &worst);
    expect(fork, input, fmt::format("seed {}: forked inside the image", seed), &worst);

    weft::Executor other(m, params(32, f));
    auto back = other.load(full);
    auto again = other.load(tokens_only);
    EXPECT_EQ(back.n_decoded(), at);
    run_until_logits(other, {back, again}, rng, 8);
    expect(back, input, fmt::format("seed {}: saved inside the image, loaded", seed), &worst);
    expect(again, input, fmt::format("seed {}: saved inside the image, tokens-only", seed), &worst);
  }
  RecordProperty("nmse_worst", fmt::format("{:.3g}", worst));
}

// An image's rows go before the step's tokens. When they overrun the step's
// deadline, the first token micro-batch still completes: every generating
// conversation gets its token that step (else a slow image would leave them
// all without one, step after step).
TEST(ImagesMrope, AnImageThatOverrunsTheDeadlineLeavesTheTokensTheirTurn) {
  const auto &f = qwen();
  const auto &m = f.model;
  std::mt19937 rng(91);
  weft::Executor ex(m, params(64, f));
  std::vector<weft::Conversation> talkers;
  std::vector<weft::Generation> gens;
  for (int i = 0; i < 3; ++i) {
    talkers.push_back(ex.create());
    talkers.back().prompt(random_tokens(rng, m, 4 + i, true));
  }
  run_until_logits(ex, talkers, rng, 16);
  for (auto &t : talkers) gens.push_back(t.generate({.max_tokens = 1000}));
  const Scene s = one_image(rng, 3, 200, 200, 2);
  auto c = prompt_scene(ex, s);
  const auto sp = c.images().at(0);
  // The image's embeddings batches take 30 ms; the deadline is 5 ms.
  std::atomic<int> slow{0};
  weft::detail::set_decode_hook(ex, [&](const llama_batch &b) {
    if (b.embd != nullptr) {
      ++slow;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    return 0;
  });
  int steps_with_image = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (c.n_decoded() < sp.begin + sp.n_tokens && std::chrono::steady_clock::now() < until) {
    std::vector<std::uint32_t> before;
    for (auto &g : gens) before.push_back(static_cast<std::uint32_t>(g.n_tokens()));
    const int slow_before = slow.load();
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = ex.step({.max_tokens = 8, .deadline = t0 + std::chrono::milliseconds(5)});
    if (slow.load() == slow_before) {
      if (r.idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    ++steps_with_image;
    for (std::size_t i = 0; i < gens.size(); ++i) {
      EXPECT_EQ(gens[i].n_tokens(), before[i] + 1) << "talker " << i << " in a step whose image overran";
    }
  }
  EXPECT_GE(steps_with_image, 1);
  EXPECT_EQ(c.n_decoded(), sp.begin + sp.n_tokens);
}

// A piece of a part-decoded image fails in llama_decode (persistently, then
// no more): the error reaches that conversation only, none of its input is
// lost (the cache goes back to what was committed), the others go on, and
// once the fault is gone it finishes with mtmd's logits.
TEST(ImagesMrope, AFailedPieceOfAPartDecodedImageLosesNothing) {
  const auto &f = qwen();
  const auto &m = f.model;
  std::mt19937 rng(93);
  weft::Executor ex(m, params(64, f));
  auto others = neighbours(ex, rng, 3);
  const Scene s = one_image(rng, 4, 180, 160, 3);
  auto c = prompt_scene(ex, s);
  const auto sp = c.images().at(0);
  const std::uint32_t total = c.n_tokens();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!(c.n_decoded() > sp.begin && c.n_decoded() < sp.begin + sp.n_tokens) &&
         std::chrono::steady_clock::now() < until) {
    if (ex.step({.max_tokens = 4}).idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(c.n_decoded(), sp.begin) << "the image never stood part-decoded between steps";
  ASSERT_LT(c.n_decoded(), sp.begin + sp.n_tokens);
  const std::uint32_t at = c.n_decoded();

  std::atomic<int> refused{0};
  weft::detail::set_decode_hook(ex, [&](const llama_batch &b) {
    if (b.embd == nullptr) return 0;
    ++refused;
    return -3;
  });
  std::vector<std::uint32_t> others_before;
  for (auto &o : others) others_before.push_back(o.n_decoded());
  for (int i = 0; i < 20 && !c.error(); ++i) (void)ex.step({.max_tokens = 4});
  ASSERT_TRUE(c.error().has_value());
  EXPECT_GE(refused.load(), 1);
  EXPECT_EQ(c.error()->code(), weft::Errc::backend);
  EXPECT_NE(std::string(c.error()->what()).find("returned -3"), std::string::npos) << c.error()->what();
  EXPECT_EQ(c.n_tokens(), total) << "nothing lost";
  EXPECT_LE(c.n_decoded(), at);
  EXPECT_GE(c.n_decoded(), sp.begin);
  EXPECT_EQ(c.n_decoded() + c.n_queued(), total);
  std::printf("image at %u..%u, part-decoded to %u, held at %u after the failed piece\n", sp.begin,
              sp.begin + sp.n_tokens, at, c.n_decoded());
  // The others kept stepping while the image failed.
  for (int i = 0; i < 30; ++i) (void)ex.step({.max_tokens = 4});
  for (std::size_t i = 0; i < others.size(); ++i) {
    EXPECT_TRUE(others[i].has_logits() || others[i].n_decoded() > others_before[i]) << "neighbour " << i;
    EXPECT_FALSE(others[i].error().has_value()) << "neighbour " << i;
  }

  weft::detail::set_decode_hook(ex, nullptr);
  c.clear_error();
  run_until_logits(ex, {c}, rng, 8);
  expect(c, s.input(), "after a failed piece, recovered");
}

#endif  // WEFT_HAVE_MTMD
