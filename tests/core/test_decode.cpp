// One real decode through llama.cpp on the generated model: the smallest path
// the executor stands on. Compares independent decodes, so it can fail.
#include <gtest/gtest.h>
#include <llama.h>

#include <random>

#include "common.hpp"
#include "reference.hpp"


TEST(Decode, LogitsAreFiniteAndDeterministic) {
  const auto &m = weft_test::tiny();
  const auto tokens = m.tokenize("The blacksmith says: welcome, traveller.", {.add_bos = true});
  const auto a = weft_test::reference_logits(m, tokens, 64);
  const auto b = weft_test::reference_logits(m, tokens, 64);
  ASSERT_EQ(a.size(), static_cast<std::size_t>(m.n_vocab()));
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(a, b);  // same context shape, same inputs: bit-identical
  // A random-weight model still depends on its input.
  const auto other = weft_test::reference_logits(m, m.tokenize("Something else entirely.", {.add_bos = true}), 64);
  EXPECT_GT(weft_test::nmse(other, a), 1e-6);
}

TEST(Decode, ChunkedPromptMatchesOneBatch) {
  // The tolerance is the batch-shape noise of llama.cpp's CPU kernels on this
  // model (DESIGN.md measures ~2e-7 on tiny); anything weft adds shows above it.
  const auto &m = weft_test::tiny();
  std::mt19937 rng(11);
  std::uniform_int_distribution<weft::Token> tok(3, m.n_vocab() - 1);
  for (int scenario = 0; scenario < 6; ++scenario) {
    std::vector<weft::Token> tokens{m.bos()};
    const int n = 10 + static_cast<int>(rng() % 50);
    for (int i = 0; i < n; ++i) tokens.push_back(tok(rng));
    const auto whole = weft_test::reference_logits(m, tokens, 64);
    const int chunk = 1 + static_cast<int>(rng() % 16);
    SCOPED_TRACE(testing::Message() << "n=" << tokens.size() << " chunk=" << chunk);
    EXPECT_LT(weft_test::nmse(weft_test::reference_logits(m, tokens, chunk), whole), 1e-5);
  }
}
