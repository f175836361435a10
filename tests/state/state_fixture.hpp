// Helpers of the state and spill tests (test_state.cpp, test_spill.cpp).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reference.hpp"
#include "weft/executor.hpp"

namespace state_test {

inline weft::ExecutorParams params(std::uint32_t n_ctx = 1024, std::uint32_t n_seq_max = 4) {
  return {.n_ctx = n_ctx, .n_batch = 64, .n_seq_max = n_seq_max, .n_threads = 2};
}

inline void expect_logits_of(const weft::Conversation &c, const std::vector<weft::Token> &history, const std::string &what) {
  const auto &m = weft_test::tiny();
  ASSERT_TRUE(c.has_logits()) << what;
  ASSERT_EQ(c.tokens(), history) << what;
  const double err = weft_test::nmse(c.logits(), weft_test::reference_logits(m, history, 64, 4096));
  EXPECT_LT(err, weft_test::logits_tolerance(m)) << what;
}

}  // namespace state_test
