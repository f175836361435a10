// KV data saved where one attention kernel was chosen, loaded where the
// other was: V is converted between llama.cpp's two layouts.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/model_impl.hpp"
#include "kv/kv_layout.hpp"
#include "reference.hpp"
#include "weft/executor.hpp"
#include "weft/make_mmproj.hpp"

using weft_test::random_tokens;
using weft_test::run_until_idle;
using weft_test::reference_logits;

namespace {

// One sequence of `tokens` decoded on a raw context, and its data.
std::vector<std::uint8_t> raw_data(const std::vector<weft::Token> &tokens, bool flash,
                                   const weft::Model &m = weft_test::tiny()) {
  auto p = llama_context_default_params();
  p.n_ctx = 512;
  p.n_batch = p.n_ubatch = 128;
  p.n_seq_max = 2;
  p.kv_unified = true;
  p.n_threads = p.n_threads_batch = 2;
  p.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.no_perf = true;
  llama_context *ctx = llama_init_from_model(m.impl()->model, p);
  EXPECT_NE(ctx, nullptr);
  llama_batch b = llama_batch_init(128, 0, 1);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    b.token[i] = tokens[i];
    b.pos[i] = static_cast<llama_pos>(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 1;  // not sequence 0: the data names no sequence
    b.logits[i] = i + 1 == tokens.size();
  }
  b.n_tokens = static_cast<std::int32_t>(tokens.size());
  EXPECT_EQ(llama_decode(ctx, b), 0);
  std::vector<std::uint8_t> out(llama_state_seq_get_size_ext(ctx, 1, 0));
  EXPECT_EQ(llama_state_seq_get_data_ext(ctx, out.data(), out.size(), 1, 0), out.size());
  llama_batch_free(b);
  llama_free(ctx);
  return out;
}

}  // namespace

TEST(KvLayout, FlipsBetweenRowsAndTransposedAndBack) {
  std::mt19937 rng(3);
  for (int n : {1, 7, 60}) {
    const auto tokens = random_tokens(rng, weft_test::tiny(), n, true);
    for (const bool flash : {true, false}) {
      const auto data = raw_data(tokens, flash);
      ASSERT_EQ(weft::detail::v_transposed(data), std::optional<bool>(!flash)) << n;
      const auto flipped = weft::detail::flip_v_layout(data);
      ASSERT_TRUE(flipped.has_value()) << n;
      EXPECT_EQ(flipped->size(), data.size());
      EXPECT_NE(*flipped, data);
      EXPECT_EQ(weft::detail::v_transposed(*flipped), std::optional<bool>(flash));
      EXPECT_EQ(weft::detail::flip_v_layout(*flipped), data);  // a transpose, exactly undone
    }
  }
}

// M-RoPE models keep each cell's 2D position in the data (12 more bytes a cell).
TEST(KvLayout, FlipsMRopeDataWithItsCellPositions) {
  const auto dir = weft_test::temp_dir("kv-layout-mrope");
  weft::make_qwen2vl_text_model(weft_test::tiny_path(), (dir / "tiny-qwen2vl.gguf").string());
  const auto m = weft::Model::load({.path = (dir / "tiny-qwen2vl.gguf").string()});
  std::mt19937 rng(9);
  const auto tokens = random_tokens(rng, m, 25, true);
  const auto plain = raw_data(tokens, false, m), flash = raw_data(tokens, true, m);
  ASSERT_EQ(weft::detail::v_transposed(plain), std::optional<bool>(true));
  ASSERT_EQ(weft::detail::v_transposed(flash), std::optional<bool>(false));
  const auto flipped = weft::detail::flip_v_layout(flash);
  ASSERT_TRUE(flipped.has_value());
  EXPECT_EQ(weft::detail::v_transposed(*flipped), std::optional<bool>(true));
  EXPECT_EQ(weft::detail::flip_v_layout(*flipped), flash);
  std::filesystem::remove_all(dir);
}

TEST(KvLayout, DataOfAnotherShapeIsLeftAlone) {
  std::mt19937 rng(4);
  const auto data = raw_data(random_tokens(rng, weft_test::tiny(), 12, true), false);
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, data.size() / 2, data.size() - 1}) {
    std::span<const std::uint8_t> part(data.data(), cut);
    EXPECT_FALSE(weft::detail::v_transposed(part).has_value()) << cut;
    EXPECT_FALSE(weft::detail::flip_v_layout(part).has_value()) << cut;
  }
  auto longer = data;
  longer.push_back(0);
  EXPECT_FALSE(weft::detail::flip_v_layout(longer).has_value());
  std::vector<std::uint8_t> scratch;
  EXPECT_EQ(weft::detail::in_v_layout(longer, true, scratch).data(), longer.data());
}

// Invariant 5 across kernels: saved by an executor with flash attention,
// loaded by one without (and back), the conversation goes on with the
// logits of its whole history decoded alone.
TEST(KvLayout, ConversationsTravelBetweenExecutorsOfEitherKernel) {
  const auto &m = weft_test::tiny();
  const auto on = weft::FlashAttention::enabled, off = weft::FlashAttention::disabled;
  for (unsigned seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    const auto from = seed % 2 == 0 ? on : off, to = seed % 2 == 0 ? off : on;
    weft::Executor a(m, {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 4, .n_threads = 2, .flash_attn = from});
    weft::Executor b(m, {.n_ctx = 2048, .n_batch = 64, .n_seq_max = 8, .n_threads = 2, .flash_attn = to});
    auto filler = b.create();  // the load lands in another slot and other cells
    filler.prompt(random_tokens(rng, m, 20, true));
    run_until_idle(b);
    auto c = a.create();
    auto h = random_tokens(rng, m, 10 + static_cast<int>(rng() % 60), true);
    c.prompt(h);
    run_until_idle(a);
    auto d = b.load(c.save());
    ASSERT_EQ(d.tokens(), h);
    const auto x = random_tokens(rng, m, 1 + static_cast<int>(rng() % 20));
    d.prompt(x);
    run_until_idle(b);
    auto all = h;
    all.insert(all.end(), x.begin(), x.end());
    EXPECT_LT(weft_test::nmse(d.logits(), reference_logits(m, all)), weft_test::cross_kernel_tolerance(m)) << seed;
    // And back to the first kernel.
    weft::Executor e(m, {.n_ctx = 1024, .n_batch = 64, .n_seq_max = 4, .n_threads = 2, .flash_attn = from});
    auto back = e.load(d.save());
    back.prompt(x);
    run_until_idle(e);
    all.insert(all.end(), x.begin(), x.end());
    EXPECT_LT(weft_test::nmse(back.logits(), reference_logits(m, all)), weft_test::cross_kernel_tolerance(m)) << seed;
  }
}
